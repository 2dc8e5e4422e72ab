"""Compact, time-sorted columns of a job's events, for the compat calculator's queries.

Why: :class:`~badput.compat.ml_goodput_measurement.goodput.GoodputCalculator` answers
interval queries from the window's own events (the library's rule), over any window of
the job's history, for as long as the calculator lives (a monitor's lifetime). Keeping
each :class:`~badput.events.Event` object costs about 430 bytes per event (a
million-step job logs two million and more); these columns keep the same events in
20 bytes each (``array`` columns of time, step and "shape": everything else about an
event, kind, attempt, host, name..., of which a job has few distinct values, each stored
once), and rebuild the events of a window on demand, equal and in the same order.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Hashable, Iterator
from typing import Any, Final, Generic, TypeVar

from msgspec.structs import replace

from badput.events import Event

__all__ = ["EventColumns", "StepStarts"]

_NONE_INT: Final = -(2**63)  # ``None`` in an int64 column (a step, a rank, a pid)
_H = TypeVar("_H", bound=Hashable)


class _Table(Generic[_H]):
    """Distinct values, each stored once; a column holds their indices."""

    def __init__(self) -> None:
        self.values: list[_H] = []
        self._index: dict[_H, int] = {}

    def index(self, value: _H) -> int:
        found = self._index.get(value)
        if found is None:
            found = self._index[value] = len(self.values)
            self.values.append(value)
        return found


def _int_or_none(value: int) -> int | None:
    return None if value == _NONE_INT else value


def _shape(e: Event) -> tuple[Any, ...]:
    """Everything of an event but its time and step: few distinct values in a job."""
    return (
        e.kind,
        e.attempt,
        e.host,
        e.rank,
        e.pid,
        e.name,
        e.blocking,
        e.status,
        e.exit_code,
        e.active,
        e.total,
        e.available,
        e.v,
    )


class EventColumns:
    """The events of one job, sorted by time (ties in arrival order): three columns
    (time, step, shape) and a table of shapes, each with an event to copy."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.ts = array("d")
        self._step = array("q")
        self._shape = array("I")
        self._shapes: _Table[tuple[Any, ...]] = _Table()
        self._templates: list[Event] = []  # one event of each shape

    def __len__(self) -> int:
        return len(self.ts)

    def _shape_of(self, e: Event) -> int:
        index = self._shapes.index(_shape(e))
        if index == len(self._templates):
            self._templates.append(e)
        return index

    def extend(self, events: list[Event]) -> None:
        """Keep ``events`` (sorted by time) in time order, after any event of the same
        time: appended in bulk when the batch starts at or after the last time, else
        merged with the rows from its first time on (a stream read after another)."""
        if not events:
            return
        shape_of = self._shape_of
        new_ts = [e.ts for e in events]
        new_step = [_NONE_INT if e.step is None else e.step for e in events]
        new_shape = [shape_of(e) for e in events]
        if not self.ts or new_ts[0] >= self.ts[-1]:
            self.ts.extend(new_ts)
            self._step.extend(new_step)
            self._shape.extend(new_shape)
            return
        at = bisect.bisect_right(self.ts, new_ts[0])
        tail_ts, tail_step, tail_shape = self.ts[at:], self._step[at:], self._shape[at:]
        del self.ts[at:], self._step[at:], self._shape[at:]
        # Rows in time order, the rows kept first on equal times (they arrived first).
        order = sorted(
            [(t, 0, i) for i, t in enumerate(tail_ts)] + [(t, 1, j) for j, t in enumerate(new_ts)]
        )
        for _, source, k in order:
            if source == 0:
                self.ts.append(tail_ts[k])
                self._step.append(tail_step[k])
                self._shape.append(tail_shape[k])
            else:
                self.ts.append(new_ts[k])
                self._step.append(new_step[k])
                self._shape.append(new_shape[k])

    def after(self, t: float) -> int:
        """The index of the first event later than ``t``."""
        return bisect.bisect_right(self.ts, t)

    def events(self, i: int, j: int) -> list[Event]:
        """The events of rows ``i..j-1``, equal to those added."""
        templates, ts, steps, shapes = self._templates, self.ts, self._step, self._shape
        return [
            replace(templates[shapes[r]], ts=ts[r], step=_int_or_none(steps[r]))
            for r in range(i, j)
        ]


class StepStarts:
    """(time, step) of every step start, sorted by time then step."""

    def __init__(self, ts: array[float] | None = None, steps: array[int] | None = None) -> None:
        self.ts = ts if ts is not None else array("d")
        self.steps = steps if steps is not None else array("q")

    def __len__(self) -> int:
        return len(self.ts)

    def __iter__(self) -> Iterator[tuple[float, int]]:
        return zip(self.ts, self.steps, strict=True)

    def add(self, ts: float, step: int) -> None:
        if not self.ts or (ts, step) >= (self.ts[-1], self.steps[-1]):
            self.ts.append(ts)
            self.steps.append(step)
            return
        at = bisect.bisect_right(self.ts, ts)
        while at > 0 and self.ts[at - 1] == ts and self.steps[at - 1] > step:
            at -= 1
        self.ts.insert(at, ts)
        self.steps.insert(at, step)

    def upto(self, t: float) -> int:
        """How many steps started at or before ``t``."""
        return bisect.bisect_right(self.ts, t)

    def last_start(self, a: float, b: float) -> float | None:
        """The time of the last step start in ``[a, b]``, if any."""
        i = self.upto(b)
        if i and self.ts[i - 1] >= a:
            return float(self.ts[i - 1])
        return None

    def between(self, lo: float, hi: float) -> StepStarts:
        """The step starts in ``(lo, hi]``."""
        i, j = self.upto(lo), self.upto(hi)
        return StepStarts(self.ts[i:j], self.steps[i:j])
