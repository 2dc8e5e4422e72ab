"""The calls a training loop makes at every step (:class:`HotRecords`, a base of the
recorder): the step marks and the data load, each written out as one C call that formats
its line from a bytes template made for this process (:mod:`badput.recorder._lines`) and
one that copies it into the mapped event file. Anything out of the ordinary (an explicit
time, a step's work, a value to coerce or drop) takes the checked path of the base."""

from __future__ import annotations

import time
from typing import Final

from badput.events import MAX_INT
from badput.recorder._work import WorkRecording

__all__ = ["HotRecords"]

_time_ns = time.time_ns
_MIN_INT: Final = -MAX_INT  # a constant: ``-MAX_INT`` in a call would make a new int


class HotRecords(WorkRecording):
    """``record_step_start``/``_end`` and ``record_data_loading_start``/``_end``.

    The tests are ordered so the common call (an int step, no explicit time, no work)
    is decided at the first test that fails."""

    def record_step_start(
        self,
        step: int,
        *,
        ts: float | None = None,
        tokens: int | None = None,
        samples: int | None = None,
    ) -> None:
        if (
            type(step) is int
            and _MIN_INT <= step <= MAX_INT
            and ts is None
            and tokens is None
            and samples is None
        ):
            line = self._step_start_line % (_time_ns(), step)
            write = self._write  # an attribute load (specialised), not a method lookup
            try:
                write(line)
            except Exception:
                self._put_locked(line)
        elif tokens is not None or samples is not None:
            self._worked("step_start", step, ts, tokens, samples)
        else:
            self._stepped("step_start", step, ts)

    def record_step_end(
        self,
        step: int,
        *,
        ts: float | None = None,
        tokens: int | None = None,
        samples: int | None = None,
    ) -> None:
        if (
            type(step) is int
            and _MIN_INT <= step <= MAX_INT
            and ts is None
            and tokens is None
            and samples is None
        ):
            line = self._step_end_line % (_time_ns(), step)
            write = self._write  # an attribute load (specialised), not a method lookup
            try:
                write(line)
            except Exception:
                self._put_locked(line)
        elif tokens is not None or samples is not None:
            self._worked("step_end", step, ts, tokens, samples)
        else:
            self._stepped("step_end", step, ts)

    # A data load in every step: as hot as the step marks.
    def record_data_loading_start(self, blocking: bool = True, *, ts: float | None = None) -> None:
        if blocking is True and ts is None:
            line = self._load_start_line % _time_ns()
            write = self._write  # an attribute load (specialised), not a method lookup
            try:
                write(line)
            except Exception:
                self._put_locked(line)
        else:
            self._data_loading(',"kind":"data_loading_start"', blocking, ts)

    def record_data_loading_end(self, blocking: bool = True, *, ts: float | None = None) -> None:
        if blocking is True and ts is None:
            line = self._load_end_line % _time_ns()
            write = self._write  # an attribute load (specialised), not a method lookup
            try:
                write(line)
            except Exception:
                self._put_locked(line)
        else:
            self._data_loading(',"kind":"data_loading_end"', blocking, ts)
