"""Ingest: route events into compact per-stream state, in O(1) per event.

Nothing here computes the partition; it only keeps what the partition needs,
in a form that costs a few bytes per step (``array`` columns, not objects).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

from badput.engine._intervals import IntervalMark
from badput.events import KINDS, Event, Kind, bucket_of, interval_base

__all__ = ["DiagnosticLog", "LifecycleEvent", "StepLog", "Stream"]

# A file whose clock steps back by more than this between consecutive lines is reported.
CLOCK_BACKWARDS_TOLERANCE = 1e-3
# Diagnostics kept per code; the rest are counted.
MAX_DIAGNOSTICS_PER_CODE = 20


class StepLog:
    """Columns of one stream's step events, appended in arrival order."""

    __slots__ = ("is_end", "last_ts", "seq", "step", "ts", "unsorted")

    def __init__(self) -> None:
        self.ts = array("d")
        self.step = array("q")
        self.is_end = array("b")
        self.seq = array("q")
        self.last_ts = -math.inf
        self.unsorted = False

    def append(self, ts: float, step: int, is_end: int, seq: int) -> None:
        if ts < self.last_ts:
            self.unsorted = True
        else:
            self.last_ts = ts
        self.ts.append(ts)
        self.step.append(step)
        self.is_end.append(is_end)
        self.seq.append(seq)

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(slots=True)
class RestoreMark:
    ts: float
    seq: int
    step: int
    is_end: bool


@dataclass
class Stream:
    """Everything one (attempt, rank) wrote that the partition needs."""

    steps: StepLog = field(default_factory=StepLog)
    marks: list[IntervalMark] = field(default_factory=list)
    marks_unsorted: bool = False
    restores: list[RestoreMark] = field(default_factory=list)
    first_ts: float = math.inf
    last_ts: float = -math.inf

    def touch(self, ts: float) -> None:
        if ts < self.first_ts:
            self.first_ts = ts
        if ts > self.last_ts:
            self.last_ts = ts

    @property
    def has_work(self) -> bool:
        return bool(len(self.steps) or self.marks)


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    ts: float
    seq: int
    kind: str
    attempt: str | None
    host: str | None
    rank: int | None
    status: str | None
    exit_code: int | None
    source: str | None
    line: int | None


@dataclass
class DiagnosticLog:
    """Diagnostics found while ingesting, capped per code (the rest counted)."""

    entries: dict[str, list[tuple[str, str | None, int | None]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, code: str, message: str, source: str | None, line: int | None) -> None:
        n = self.counts.get(code, 0)
        self.counts[code] = n + 1
        if n < MAX_DIAGNOSTICS_PER_CODE:
            self.entries.setdefault(code, []).append((message, source, line))


class Ingestor:
    """Turns events into :class:`Stream` state; the Accountant owns one."""

    def __init__(self, job: str | None) -> None:
        self.job = job
        self.streams: dict[tuple[str | None, int], Stream] = {}
        self.lifecycle: list[LifecycleEvent] = []
        self.checkpoints_saved = array("q")  # steps of checkpoint_save_end
        self.checkpoints_committed = array("q")  # steps of checkpoint_committed
        self.attempt_last_ts: dict[str | None, float] = {}
        self.attempt_first_ts: dict[str | None, float] = {}
        self.idless_ts = array("d")  # ts of every event without attempt id
        self.first_ts = math.inf
        self.last_ts = -math.inf
        self.n_events = 0
        self.diagnostics = DiagnosticLog()
        self.unknown_kinds: dict[str, int] = {}
        self.version = 0  # bumped on every ingest, for caches
        self._seq = 0
        self._source_last_ts: dict[str, float] = {}

    def stream(self, attempt: str | None, rank: int) -> Stream:
        key = (attempt, rank)
        s = self.streams.get(key)
        if s is None:
            s = self.streams[key] = Stream()
        return s

    def malformed(self, message: str, source: str | None, line: int | None) -> None:
        self.diagnostics.add("malformed_line", message, source, line)

    def ingest(self, events: list[Event], source: str | None, first_line: int | None) -> None:
        """Ingest consecutive lines of one source (``first_line`` is the line of ``events[0]``)."""
        if not events:
            return
        self.version += 1
        diag = self.diagnostics
        if self.job is None:
            self.job = events[0].job
        job = self.job
        prev_ts = self._source_last_ts.get(source or "", -math.inf)
        seq = self._seq
        attempt_last = self.attempt_last_ts
        attempt_first = self.attempt_first_ts
        streams = self.streams
        step_start, step_end = Kind.STEP_START, Kind.STEP_END
        for offset, ev in enumerate(events):
            line = None if first_line is None else first_line + offset
            if ev.job != job:
                diag.add(
                    "foreign_job",
                    f"event of job {ev.job!r} in the log of job {job!r}; skipped",
                    source,
                    line,
                )
                continue
            seq += 1
            ts = ev.ts
            if ts < prev_ts - CLOCK_BACKWARDS_TOLERANCE:
                diag.add(
                    "clock_backwards",
                    f"timestamp {ts:.3f} is {prev_ts - ts:.3f}s earlier than the previous line",
                    source,
                    line,
                )
            else:
                prev_ts = ts
            a = ev.attempt
            akey = None if a is None else str(a)
            rank = ev.rank if ev.rank is not None else 0
            kind = ev.kind
            # Step events are the bulk: keep their path short.
            if kind == step_start or kind == step_end:
                key = (akey, rank)
                s = streams.get(key)
                if s is None:
                    s = self.stream(akey, rank)
                s.steps.append(ts, ev.step or 0, kind == step_end, seq)
            else:
                s = self.stream(akey, rank)
                self._route(ev, akey, s, seq, source, line)
            if ts < s.first_ts:
                s.first_ts = ts
            if ts > s.last_ts:
                s.last_ts = ts
            if akey is None:
                self.idless_ts.append(ts)
            if ts > attempt_last.get(akey, -math.inf):
                attempt_last[akey] = ts
            if ts < attempt_first.get(akey, math.inf):
                attempt_first[akey] = ts
            if ts < self.first_ts:
                self.first_ts = ts
            if ts > self.last_ts:
                self.last_ts = ts
            self.n_events += 1
        self._seq = seq
        self._source_last_ts[source or ""] = prev_ts

    def _route(
        self, ev: Event, akey: str | None, s: Stream, seq: int, source: str | None, line: int | None
    ) -> None:
        kind = ev.kind
        if kind in (Kind.JOB_START, Kind.JOB_END, Kind.ATTEMPT_END, Kind.JOB_SCHEDULED):
            self.lifecycle.append(
                LifecycleEvent(
                    ev.ts, seq, kind, akey, ev.host, ev.rank, ev.status, ev.exit_code, source, line
                )
            )
            return
        if kind == Kind.HEARTBEAT or kind == Kind.ELASTIC_SLICES:
            return
        if kind == Kind.CHECKPOINT_COMMITTED:
            self.checkpoints_committed.append(ev.step or 0)
            return
        split = interval_base(kind)
        if split is None:
            if kind not in KINDS:
                n = self.unknown_kinds.get(kind, 0)
                self.unknown_kinds[kind] = n + 1
                if n == 0:
                    self.diagnostics.add(
                        "unknown_kind",
                        f"unknown event kind {kind!r} (kept, ignored by the accounting)",
                        source,
                        line,
                    )
            return
        base, is_start = split
        if base == "checkpoint_save" and not is_start:
            self.checkpoints_saved.append(ev.step or 0)
        if base == "checkpoint_restore":
            s.restores.append(RestoreMark(ev.ts, seq, ev.step or 0, not is_start))
        blocking = True
        if base == "data_loading" and ev.blocking is False:
            blocking = False
        mark = IntervalMark(
            ev.ts, seq, bucket_of(base, ev.name), is_start, blocking, source, line
        )
        if s.marks and ev.ts < s.marks[-1].ts:
            s.marks_unsorted = True
        s.marks.append(mark)
