"""What the compat calculator knows of a job: :class:`JobView`, read incrementally.

:class:`~badput.compat.ml_goodput_measurement.goodput.GoodputCalculator` asks badput's
engine for the partition of the job's time, and keeps beside it the few raw series the
library's own rules need (step starts, every event for interval queries, elastic slice
counts and intervals, Orbax's checkpoint entries).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from badput.compat.ml_goodput_measurement._columns import EventColumns, StepStarts
from badput.engine import Accountant
from badput.events import Event, Kind
from badput.store import Cursor, EventStore

__all__ = ["JobView"]

#: Bytes per store read: bounds the memory of catching up with a large log. Large: the
#: store is often Cloud Logging, where each read is a query of its own (against its quota).
_READ_SLICE_BYTES: Final = 32 * 1024 * 1024
_CHECKPOINT_KINDS: Final = frozenset(
    {
        Kind.CHECKPOINT_SAVE_START,
        Kind.CHECKPOINT_SAVE_END,
        Kind.CHECKPOINT_RESTORE_START,
        Kind.CHECKPOINT_RESTORE_END,
    }
)


class JobView:
    """What the calculator knows of the job: the engine's accountant plus the few raw
    series the library's own rules need (step starts, every event for interval queries,
    elastic events). The events are kept in compact columns (:mod:`._columns`): a
    long-lived calculator holds a whole job's history in 20 bytes an event (16 more per
    step start)."""

    def __init__(self, store: EventStore, job: str, before_read: Callable[[], None]) -> None:
        self.store = store
        self.job = job
        self._before_read = before_read  # flushes this process's recorders of the job
        self.accountant = Accountant(job)
        self.cursor: Cursor | None = None
        self.columns = EventColumns(job)  # every event, sorted by time (interval queries)
        self.step_starts = StepStarts()
        self.intervals: dict[str, list[tuple[float, float]]] = {}  # base -> paired spans
        self.slices: list[tuple[float, int, int, int]] = []  # (ts, active, available, total)
        self.checkpoints: list[Event] = []  # checkpoint start/end events (Orbax's entries)
        self.job_start: float | None = None
        self.job_end: float | None = None  # the last job end
        self._open: dict[str, float] = {}

    def update(self) -> int:
        """Ingest what was appended since the last call; return how many events."""
        self._before_read()
        n = 0
        while True:
            resumed = self.cursor is not None and self.cursor.resume is not None
            result = self.store.read(self.job, self.cursor, max_bytes=_READ_SLICE_BYTES)
            # a read that went on from a budget stop saw only the streams left: read once more
            progressed = resumed or result.cursor.offsets != (
                self.cursor.offsets if self.cursor else {}
            )
            self.cursor = result.cursor
            self.accountant.ingest(result.chunks)
            # Absorbed slice by slice: a catch-up never holds more than one slice's
            # events as objects (the columns keep them compact).
            events = [
                item
                for chunk in result.chunks
                for item in chunk.items
                if isinstance(item, Event) and item.job == self.job
            ]
            if events:
                self._absorb(sorted(events, key=lambda e: e.ts))
                n += len(events)
            if not progressed:
                break
        return n

    def _absorb(self, events: list[Event]) -> None:
        self.columns.extend(events)
        for e in events:
            kind = e.kind
            if kind == Kind.STEP_START and e.step is not None:
                self.step_starts.add(e.ts, e.step)
            elif kind == Kind.JOB_START:
                self.job_start = e.ts if self.job_start is None else min(self.job_start, e.ts)
            elif kind == Kind.JOB_END:
                self.job_end = e.ts if self.job_end is None else max(self.job_end, e.ts)
            elif kind in _CHECKPOINT_KINDS:
                self.checkpoints.append(e)
            elif kind == Kind.ELASTIC_SLICES:
                total = max(e.total or 1, 1)
                self.slices.append((e.ts, e.active or 0, e.available or 0, total))
            elif kind.endswith("_start") or kind.endswith("_end"):
                base = kind.rsplit("_", 1)[0]
                if base in ("accelerator_init", "training_prep", "elastic_reinit"):
                    if kind.endswith("_start"):
                        self._open[base] = e.ts
                    elif base in self._open:
                        start = self._open.pop(base)
                        if start < e.ts:
                            self.intervals.setdefault(base, []).append((start, e.ts))
        self.slices.sort()

    def last_step_in(self, start: float, end: float, *, ended: bool) -> int:
        """The library's last productive step of a window: the step before the last one
        started in ``(start, end]``, or that one when the job ended within the window."""
        i, j = self.step_starts.upto(start), self.step_starts.upto(end)
        if j <= i:
            return 0
        last = self.step_starts.steps[j - 1]
        job_end = self.job_end
        if ended and job_end is not None and start < job_end <= end:
            return last
        return max(last - 1, 0)

    def events_in(self, start: float, end: float) -> list[Event]:
        """The events in ``(start, end]``, the library's interval entries."""
        return self.columns.events(self.columns.after(start), self.columns.after(end))

    def clip(self, start: float, end: float) -> tuple[float, float] | None:
        """The library's interval: from the first event after ``start`` to the last event
        at or before ``end`` (it only knows the time span its log entries cover)."""
        times = self.columns.ts
        i, j = self.columns.after(start), self.columns.after(end)
        if j <= i:
            return None
        return max(start, times[i]), min(end, times[j - 1])

    @property
    def last_time(self) -> float:
        """The time of the job's last event (there is one: the job has started)."""
        return float(self.columns.ts[-1])
