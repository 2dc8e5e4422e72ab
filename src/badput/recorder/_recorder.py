"""The :class:`Recorder`: its construction and identity, the record calls and their context
managers (how it all works: the :mod:`badput.recorder` room's documentation).

The recorder is one object built in layers, each a base class in its own module, the
rarely called below the hot ones: the stream's states (``_stream``), the background thread
(``_writer_thread``), the lines and the helpers of the record calls that format them
(``_lines``), the properties, sections, flush and close (``_lifetime``). An attribute or
method found in a base costs a record call nothing more: the interpreter caches each
lookup per class."""

from __future__ import annotations

import functools
import operator
import os
import time
from contextlib import AbstractContextManager, suppress
from typing import Any, Final

import msgspec

from badput.events import validate
from badput.recorder._hot import HotRecords
from badput.recorder._identity import (
    MAX_PROCESS_INIT,
    _env_rank,
    _is_disabled,
    _launched,
    _resolve_heartbeat,
    resolve_attempt,
)
from badput.recorder._lifetime import LIVE_GROUP, RecorderLifetime
from badput.recorder._phases import PhaseRecords
from badput.recorder._sections import DEFAULT_SECTION_INTERVAL
from badput.recorder._spans import SPANS, _Span
from badput.recorder._teardown import begin_teardown
from badput.runtime import lifecycle as _lifecycle
from badput.runtime.env import (
    BADPUT_JOB,
    detect_host,
    launcher_attempt_start,
    process_start_time,
    under_launcher,
)
from badput.store import EventStore, open_store

__all__ = ["Recorder"]

#: Shortest accepted ``flush_interval`` (the background thread sleeps at least this).
MIN_FLUSH_INTERVAL: Final = 0.005

_time = time.time
_time_ns = time.time_ns
_replace = msgspec.structs.replace


# Jobs whose process_init this process has recorded (once per process and job).
_process_init_jobs: set[str] = set()


class Recorder(PhaseRecords, RecorderLifetime, HotRecords):
    """Records a training job's events into an :class:`~badput.store.EventStore`.

    Args:
        job: the job (run) name; default ``$BADPUT_JOB``. ``ValueError`` if neither.
        store: an ``EventStore``, a URI or a directory; default ``open_store()``
            (``$BADPUT_STORE`` or ``./badput-runs``).
        rank: process rank; default ``$RANK`` (torchrun), else none.
        attempt: attempt id; default from the environment (see the module doc).
        host: host name; default ``socket.gethostname()``.
        enabled: ``False`` returns a :class:`NullRecorder`. ``BADPUT_DISABLE=1``
            disables every recorder regardless.
        leader_only: record only on rank 0 (or when no rank is known); other
            ranks get a :class:`NullRecorder`.
        heartbeat_interval: seconds between heartbeats; default
            ``$BADPUT_HEARTBEAT_INTERVAL`` or 10; ``0`` turns them off.
        flush_interval: seconds between background writes of a buffered store
            and checks of a directory store's file (at least 5 ms).
        section_interval: seconds between the ``section_summary`` events of
            :meth:`section` timers (default 5).

    Construction validates arguments and may raise; nothing after it does.
    """

    def __new__(
        cls,
        job: str | None = None,
        store: EventStore | str | os.PathLike[str] | None = None,
        *,
        rank: int | None = None,
        attempt: str | int | None = None,
        host: str | None = None,
        enabled: bool | None = None,
        leader_only: bool = False,
        heartbeat_interval: float | None = None,
        flush_interval: float = 0.5,
        section_interval: float = DEFAULT_SECTION_INTERVAL,
    ) -> Recorder:
        if cls is Recorder and _is_disabled(enabled, leader_only, rank):
            from badput.recorder._null import NullRecorder  # noqa: PLC0415 (it subclasses this)

            return object.__new__(NullRecorder)
        return object.__new__(cls)

    def __init__(
        self,
        job: str | None = None,
        store: EventStore | str | os.PathLike[str] | None = None,
        *,
        rank: int | None = None,
        attempt: str | int | None = None,
        host: str | None = None,
        enabled: bool | None = None,
        leader_only: bool = False,
        heartbeat_interval: float | None = None,
        flush_interval: float = 0.5,
        section_interval: float = DEFAULT_SECTION_INTERVAL,
    ) -> None:
        job = job if job is not None else os.environ.get(BADPUT_JOB)
        if not job:
            raise ValueError(f"Recorder needs a job name: pass job=... or set ${BADPUT_JOB}")
        if not isinstance(job, str):
            raise TypeError(f"job must be a string, got {type(job).__name__}")
        self._job = job
        self._store: EventStore = open_store(store)
        self._rank = rank if rank is not None else _env_rank()
        if self._rank is not None:
            self._rank = int(self._rank)
        self._attempt = resolve_attempt(attempt)
        if not isinstance(self._attempt, (str, int)):
            try:
                self._attempt = operator.index(self._attempt)  # numpy integers
            except TypeError:
                self._attempt = str(self._attempt)
        self._host = host if host is not None else detect_host()
        self._heartbeat = _resolve_heartbeat(heartbeat_interval)
        self._flush_interval = max(float(flush_interval), MIN_FLUSH_INTERVAL)
        self._section_interval = max(float(section_interval), MIN_FLUSH_INTERVAL)
        self._warned: set[str] = set()
        self._closed = False
        # The launcher owns the job's end in the command it runs (its own recorder unsets this).
        self._defer_job_end = under_launcher()
        self._process_init = self._process_init_span()
        # The process start dates this process's first job_start (then cleared).
        init = self._process_init
        self._process_start: float | None = None if init is None else init[0]
        self._setup_process()
        problem = validate(_replace(self._template, ts=_time(), kind="job_start"))
        if problem is not None:  # e.g. a rank out of range: every line would be unreadable
            raise ValueError(f"cannot record with this identity: {problem}")
        _lifecycle.track(LIVE_GROUP, self)
        self._start_phases(LIVE_GROUP, init)

    def _process_init_span(self) -> tuple[float, float] | None:
        """(OS start of this process, now) when that span is this job's to record."""
        if self._job in _process_init_jobs or not _launched():
            return None
        now = _time()
        start = process_start_time()
        if start is None or not 0.0 <= now - start <= MAX_PROCESS_INIT:
            return None
        # The OS's start is known to a clock tick; never before the launcher's attempt began.
        start = max(start, launcher_attempt_start() or start)
        _process_init_jobs.add(self._job)
        return start, now

    # ------------------------------------------------------------- recording

    def record(self, kind: str, *, ts: float | None = None, **fields: Any) -> None:
        """Record an event of any ``kind`` with the given schema fields.

        Identity fields (``job``, ``attempt``, ``host``, ``rank``, ``pid``) are
        the recorder's; unknown fields are ignored (one warning).
        """
        self._fields(kind, fields, ts)

    def record_job_scheduled(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"job_scheduled"}\n', ts)
        self._prompt()

    def record_job_start(self, *, ts: float | None = None) -> None:
        if ts is None and self._process_start is not None:
            # The attempt began when the process did (its process_init is inside it).
            ts, self._process_start = self._process_start, None
        self._bare(',"kind":"job_start"}\n', ts)
        self._prompt()

    def record_job_end(self, status: str | None = None, *, ts: float | None = None) -> None:
        """Record the job's end; under ``badput run`` only flush (the launcher records it,
        with the status of the command's exit, once every process has ended)."""
        if self._defer_job_end:
            # What follows until the launcher's job_end (every process gone) is teardown.
            self.record_teardown_start(ts=ts)
            return
        self._fields("job_end", {"status": status}, ts)

    def record_attempt_end(
        self, status: str | None = None, exit_code: int | None = None, *, ts: float | None = None
    ) -> None:
        self._fields("attempt_end", {"status": status, "exit_code": exit_code}, ts)

    def record_heartbeat(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"heartbeat"}\n', ts)

    def record_accelerator_init_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"accelerator_init_start"}\n', ts)

    def record_accelerator_init_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"accelerator_init_end"}\n', ts)

    def record_training_prep_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"training_prep_start"}\n', ts)

    def record_training_prep_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"training_prep_end"}\n', ts)

    def record_checkpoint_restore_start(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_restore_start", step, ts)
        self._prompt()

    def record_checkpoint_restore_end(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_restore_end", step, ts)
        self._prompt()

    def record_checkpoint_save_start(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_save_start", step, ts)
        self._prompt()

    def record_checkpoint_save_end(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_save_end", step, ts)
        self._prompt()

    def record_checkpoint_committed(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_committed", step, ts)
        self._prompt()

    def record_compile_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"compile_start"}\n', ts)

    def record_compile_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"compile_end"}\n', ts)

    def record_custom_start(self, name: str, *, ts: float | None = None) -> None:
        self._fields("custom_start", {"name": name}, ts)

    def record_custom_end(self, name: str, *, ts: float | None = None) -> None:
        self._fields("custom_end", {"name": name}, ts)

    def record_elastic_wait_start(self, name: str, *, ts: float | None = None) -> None:
        self._fields("elastic_wait_start", {"name": name}, ts)

    def record_elastic_wait_end(self, name: str, *, ts: float | None = None) -> None:
        self._fields("elastic_wait_end", {"name": name}, ts)

    def record_elastic_reinit_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"elastic_reinit_start"}\n', ts)

    def record_elastic_reinit_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"elastic_reinit_end"}\n', ts)

    def record_elastic_slices(
        self, active: int, total: int, available: int, *, ts: float | None = None
    ) -> None:
        fields = {"active": active, "total": total, "available": available}
        self._fields("elastic_slices", fields, ts)

    # ------------------------------------------------------- context managers

    def _span(self, name: str, *args: Any) -> AbstractContextManager[None]:
        start, end = SPANS[name]
        return _Span(getattr(self, start), getattr(self, end), args)

    def step(
        self, step: int, *, tokens: int | None = None, samples: int | None = None
    ) -> AbstractContextManager[None]:
        """``with rec.step(n):`` records ``step_start`` / ``step_end``; ``tokens`` and
        ``samples`` (the step's work) go on the start (:class:`WorkRecording`)."""
        if tokens is None and samples is None:
            return _Span(self.record_step_start, self.record_step_end, (step,))
        start = functools.partial(self.record_step_start, tokens=tokens, samples=samples)
        return _Span(start, self.record_step_end, (step,))

    def checkpoint_save(self, step: int) -> AbstractContextManager[None]:
        return self._span("checkpoint_save", step)

    def checkpoint_restore(self, step: int) -> AbstractContextManager[None]:
        return self._span("checkpoint_restore", step)

    def data_loading(self, blocking: bool = True) -> AbstractContextManager[None]:
        return self._span("data_loading", blocking)

    def custom(self, name: str) -> AbstractContextManager[None]:
        return self._span("custom", name)

    def accelerator_init(self) -> AbstractContextManager[None]:
        return self._span("accelerator_init")

    def training_prep(self) -> AbstractContextManager[None]:
        return self._span("training_prep")

    def compile(self) -> AbstractContextManager[None]:
        return self._span("compile")

    def elastic_wait(self, name: str) -> AbstractContextManager[None]:
        return self._span("elastic_wait", name)

    def elastic_reinit(self) -> AbstractContextManager[None]:
        return self._span("elastic_reinit")

    def section(self, name: str) -> AbstractContextManager[None]:
        """``with rec.section("forward"):`` times a compute section of this rank.

        Not two events per run: the durations are aggregated in the process and
        the background thread writes one ``section_summary`` per section every
        ``section_interval`` seconds (count, total, quantiles), from which the
        report scores stragglers (docs/ranks.md). Costs well under a microsecond.
        """
        timer = self._sections.timers.get(name)
        return timer if timer is not None else self._new_section(name)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_all() -> None:
    for rec in _lifecycle.live(LIVE_GROUP):
        begin_teardown(rec)  # the process exits: teardown until the launcher's end
        with suppress(Exception):  # close() already never raises
            rec.close()


def _after_fork_in_child() -> None:
    for rec in _lifecycle.live(LIVE_GROUP):
        with suppress(Exception):
            rec._after_fork_child()


_lifecycle.on_exit(_close_all, _lifecycle.ORDER_RECORDERS)
_lifecycle.on_fork_child(_after_fork_in_child)
