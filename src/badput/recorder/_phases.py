"""The recorder's events of a distributed job's phases: process-group set-up
(``distributed_init``), building the model (``model_build``) and the ``teardown``, and the
intervals timed before the process had a recorder (docs/accounting.md §3)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from badput.recorder._early import early_marks, take_early, torchrun_start_span
from badput.recorder._teardown import install_crash_hook

__all__ = ["PhaseRecords"]


class PhaseRecords:
    """Part of :class:`~badput.recorder.Recorder` (a base class of it): the methods of the
    phase events. They use the recorder's line writers (``_bare``, ``_prompt``, ``_span``)."""

    _teardown_begun: bool
    _early_marks: list[tuple[float, str]]

    if TYPE_CHECKING:  # the recorder's own, which these methods write with

        def _bare(self, tail: str, ts: float | None) -> None: ...

        def _prompt(self) -> None: ...

        def _span(self, name: str, *args: Any) -> AbstractContextManager[None]: ...

    def record_distributed_init_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"distributed_init_start"}\n', ts)

    def record_distributed_init_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"distributed_init_end"}\n', ts)

    def record_model_build_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"model_build_start"}\n', ts)

    def record_model_build_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"model_build_end"}\n', ts)

    def record_teardown_start(self, *, ts: float | None = None) -> None:
        """Training is over (or crashed): what follows until the attempt's end is teardown.
        Recorded once per process (a second call records nothing); its end is optional."""
        if not self._teardown_begun:
            self._teardown_begun = True
            self._bare(',"kind":"teardown_start"}\n', ts)
            self._prompt()

    def record_teardown_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"teardown_end"}\n', ts)

    def distributed_init(self) -> AbstractContextManager[None]:
        """``with rec.distributed_init():`` process groups, rendezvous (docs/accounting.md)."""
        return self._span("distributed_init")

    def model_build(self) -> AbstractContextManager[None]:
        """``with rec.model_build():`` building or loading the model, apart from imports."""
        return self._span("model_build")

    def teardown(self) -> AbstractContextManager[None]:
        return self._span("teardown")

    def _start_phases(self, group: str, init: tuple[float, float] | None) -> None:
        """At construction (nothing written yet): teardown not begun, the crash hook that
        begins it for the recorders of ``group``, the intervals timed before this recorder."""
        self._teardown_begun = False  # teardown_start is recorded once per process
        self._early_marks = []  # written with process_init
        install_crash_hook(group)
        self._record_early(init)

    def _record_early(self, init: tuple[float, float] | None) -> None:
        """Torchrun's own start (a worker's first recorder) and the intervals hooks timed
        before any recorder was built: written in time order with the process_init lines
        at the first write when there are some, else now (nothing written yet)."""
        early = take_early()
        spawn = torchrun_start_span(init[0]) if init is not None else None
        if spawn is not None:
            early.insert(0, ("distributed_init", *spawn))
        marks = early_marks(early)
        if init is not None:
            self._early_marks = marks
            return
        for ts, kind in marks:
            self._bare(f',"kind":"{kind}"}}\n', ts)
