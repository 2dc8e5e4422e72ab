"""Ingest: route events into compact per-stream state, in O(1) per event.

Nothing here computes the partition; it only keeps what the partition needs,
in a form that costs a few bytes per step (``array`` columns, not objects).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

import numpy as np

from badput.engine._intervals import IntervalMark
from badput.events import KINDS, LIFECYCLE_KINDS, Event, Kind, bucket_of, interval_base

__all__ = ["DiagnosticLog", "LifecycleEvent", "RestoreMark", "StepLog", "Stream"]

# A file whose clock steps back by more than this between consecutive lines is reported.
CLOCK_BACKWARDS_TOLERANCE = 1e-3
_NOTHING = object()  # matches no attempt or rank
# Diagnostics kept per code; the rest are counted.
MAX_DIAGNOSTICS_PER_CODE = 20


class StepLog:
    """Columns of one stream's step events, in arrival order (a few bytes a step).

    Rows out of time order are sorted (stably, so arrival breaks ties) at query time.
    """

    __slots__ = ("_checked", "_unsorted", "is_end", "step", "ts")

    def __init__(self) -> None:
        self.ts = array("d")
        self.step = array("q")
        self.is_end = array("b")
        self._checked = 0  # rows already checked for time order
        self._unsorted = False

    def __len__(self) -> int:
        return len(self.ts)

    def recheck(self) -> None:
        """Rows were added in bulk: check their time order again from the start."""
        self._checked = 0
        self._unsorted = False

    @property
    def unsorted(self) -> bool:
        """Whether any row came earlier in time than the one before it (checks new rows only)."""
        n = len(self.ts)
        if not self._unsorted and n - self._checked > 0:
            a = np.frombuffer(self.ts, dtype=np.float64)[max(self._checked - 1, 0) :]
            self._unsorted = bool((a[1:] < a[:-1]).any())
            self._checked = n
        return self._unsorted


@dataclass(slots=True)
class RestoreMark:
    ts: float
    seq: int
    step: int
    is_end: bool


@dataclass
class Stream:
    """Everything one (attempt, rank) wrote that the partition needs."""

    attempt: str | None = None
    rank: int = 0
    steps: StepLog = field(default_factory=StepLog)
    marks: list[IntervalMark] = field(default_factory=list)
    mark_ts: array[float] = field(default_factory=lambda: array("d"))  # marks[i].ts, as a column
    marks_unsorted: bool = False
    restores: list[RestoreMark] = field(default_factory=list)
    # (ts, step, committed) of checkpoint_save_end and checkpoint_committed events
    checkpoints: list[tuple[float, int, bool]] = field(default_factory=list)
    # times of every non-step event (lifecycle, heartbeats...), so a view "as of t" is exact
    other_ts: array[float] = field(default_factory=lambda: array("d"))
    first_ts: float = math.inf
    last_ts: float = -math.inf

    # A parallel cold read sends each worker's streams to the parent by pickle. The marks
    # go as one column per field, not one object per mark: pickling a named tuple calls
    # Python code per mark (in the worker) and rebuilding it does too (in the parent),
    # which made the parallel read of a log with many interval marks slower than a serial
    # one. The columns hold the very values, so the marks come back equal.
    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["marks"] = tuple(zip(*self.marks, strict=True)) if self.marks else ()
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        columns = state.pop("marks")
        assert isinstance(columns, tuple)
        make = tuple.__new__
        state["marks"] = [make(IntervalMark, row) for row in zip(*columns, strict=True)]
        self.__dict__.update(state)

    @property
    def has_work(self) -> bool:
        return bool(len(self.steps) or self.marks)

    def has_work_in(self, lo: float, hi: float, until: float) -> bool:
        """Whether a step or interval event falls in ``[lo, hi)`` and at or before ``until``."""
        top = min(hi, math.nextafter(until, math.inf))
        if top <= lo:
            return False
        if len(self.steps):
            ts = np.frombuffer(self.steps.ts, dtype=np.float64)
            if self.steps.unsorted:
                if bool(((ts >= lo) & (ts < top)).any()):
                    return True
            elif np.searchsorted(ts, lo, "left") < np.searchsorted(ts, top, "left"):
                return True
        if not self.marks:
            return False
        mark_ts = np.frombuffer(self.mark_ts, dtype=np.float64)
        if self.marks_unsorted:
            return bool(((mark_ts >= lo) & (mark_ts < top)).any())
        return bool(np.searchsorted(mark_ts, lo, "left") < np.searchsorted(mark_ts, top, "left"))

    def as_of(self, t: float) -> Stream:
        """This stream with every event stamped after ``t`` left out."""
        out = Stream(attempt=self.attempt, rank=self.rank)
        ts = np.frombuffer(self.steps.ts, dtype=np.float64)
        keep = ts <= t
        out.steps.ts = array("d", ts[keep].tobytes())
        out.steps.step = array("q", np.frombuffer(self.steps.step, dtype=np.int64)[keep].tobytes())
        out.steps.is_end = array(
            "b", np.frombuffer(self.steps.is_end, dtype=np.int8)[keep].tobytes()
        )
        out.marks = [m for m in self.marks if m.ts <= t]
        out.mark_ts = array("d", (m.ts for m in out.marks))
        out.marks_unsorted = self.marks_unsorted
        out.restores = [r for r in self.restores if r.ts <= t]
        out.checkpoints = [c for c in self.checkpoints if c[0] <= t]
        other = np.frombuffer(self.other_ts, dtype=np.float64)
        out.other_ts = array("d", other[other <= t].tobytes())
        both = np.concatenate((ts[keep], other[other <= t]))
        if both.shape[0]:
            out.first_ts, out.last_ts = float(both.min()), float(both.max())
        return out


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


def _fits(step: int) -> bool:
    return -(2**63) <= step < 2**63


class Ingestor:
    """Turns events into :class:`Stream` state; the Accountant owns one."""

    def __init__(self, job: str | None, *, first_seq: int = 0) -> None:
        self.job = job
        self.streams: dict[tuple[str | None, int], Stream] = {}
        self.lifecycle: list[LifecycleEvent] = []
        self.checkpoints_saved = array("q")  # steps of checkpoint_save_end
        self.checkpoints_committed = array("q")  # steps of checkpoint_committed
        self.idless_ts = array("d")  # ts of non-step events without attempt id
        self.first_idless: tuple[str | None, int | None] | None = None  # where one was seen
        self.n_events = 0
        self.diagnostics = DiagnosticLog()
        self.unknown_kinds: dict[str, int] = {}
        self._seq = first_seq
        self._source_last_ts: dict[str, float] = {}
        self._by_raw: dict[tuple[object, int | None], Stream] = {}

    def absorb(self, other: Ingestor) -> None:
        """Add the state of ``other``, which ingested *later* sources of the same job.

        Used to merge the work of processes that each read different files: the
        states concatenate. ``other``'s arrival numbers must all be above ours (give
        it a higher ``first_seq``), so ties in time still break by file order.
        """
        if other.job is not None and self.job is not None and other.job != self.job:
            raise ValueError(f"cannot merge job {other.job!r} into job {self.job!r}")
        self.job = self.job or other.job
        for key, theirs in other.streams.items():
            mine = self.streams.get(key)
            if mine is None:
                self.streams[key] = theirs
                continue
            mine.steps.ts.extend(theirs.steps.ts)
            mine.steps.step.extend(theirs.steps.step)
            mine.steps.is_end.extend(theirs.steps.is_end)
            mine.steps.recheck()
            if theirs.marks and mine.marks and theirs.marks[0].ts < mine.marks[-1].ts:
                mine.marks_unsorted = True
            mine.marks.extend(theirs.marks)
            mine.mark_ts.extend(theirs.mark_ts)
            mine.marks_unsorted |= theirs.marks_unsorted
            mine.restores.extend(theirs.restores)
            mine.checkpoints.extend(theirs.checkpoints)
            mine.other_ts.extend(theirs.other_ts)
            mine.first_ts = min(mine.first_ts, theirs.first_ts)
            mine.last_ts = max(mine.last_ts, theirs.last_ts)
        self._by_raw = {
            raw: self.streams[(st.attempt, st.rank)]
            for raw, st in {**self._by_raw, **other._by_raw}.items()
        }
        self.lifecycle.extend(other.lifecycle)
        self.checkpoints_saved.extend(other.checkpoints_saved)
        self.checkpoints_committed.extend(other.checkpoints_committed)
        self.idless_ts.extend(other.idless_ts)
        self.first_idless = self.first_idless or other.first_idless
        self.n_events += other.n_events
        for code, entries in other.diagnostics.entries.items():
            for message, source, line in entries:
                self.diagnostics.add(code, message, source, line)
        for code, count in other.diagnostics.counts.items():
            kept = len(other.diagnostics.entries.get(code, []))
            self.diagnostics.counts[code] = self.diagnostics.counts.get(code, 0) + count - kept
        for kind, count in other.unknown_kinds.items():
            self.unknown_kinds[kind] = self.unknown_kinds.get(kind, 0) + count
        self._seq = max(self._seq, other._seq)
        self._source_last_ts.update(other._source_last_ts)

    def stream(self, attempt: str | None, rank: int) -> Stream:
        key = (attempt, rank)
        s = self.streams.get(key)
        if s is None:
            s = self.streams[key] = Stream(attempt=attempt, rank=rank)
        return s

    def malformed(self, message: str, source: str | None, line: int | None) -> None:
        self.diagnostics.add("malformed_line", message, source, line)

    def ingest(self, events: list[Event], source: str | None, first_line: int | None) -> None:
        """Ingest consecutive lines of one source (``first_line`` is the line of ``events[0]``).

        This loop runs once per event of a log (millions): it does the least it can,
        and everything that can wait for a query waits.
        """
        if not events:
            return
        diag = self.diagnostics
        if self.job is None:
            self.job = events[0].job
        job = self.job
        prev_ts = self._source_last_ts.get(source or "", -math.inf)
        seq = self._seq
        by_raw = self._by_raw
        step_end = Kind.STEP_END
        step_kinds = (Kind.STEP_START, step_end)
        foreign = 0
        # Consecutive events of one file almost always share (attempt, rank): keep that
        # stream's column appends bound locally, and note where its new step rows begin
        # so first/last times are updated once per call, not once per event.
        cur_attempt: object = _NOTHING
        cur_rank: object = _NOTHING
        s: Stream | None = None
        ts_append = step_append = end_append = None
        touched: dict[int, tuple[Stream, int]] = {}
        for offset, ev in enumerate(events):
            if ev.job != job:
                foreign += 1
                if foreign == 1:
                    diag.add(
                        "foreign_job",
                        f"event of job {ev.job!r} in the log of job {job!r}; skipped",
                        source,
                        None if first_line is None else first_line + offset,
                    )
                continue
            ts = ev.ts
            if ts >= prev_ts:
                prev_ts = ts
            elif ts < prev_ts - CLOCK_BACKWARDS_TOLERANCE:
                diag.add(
                    "clock_backwards",
                    f"timestamp {ts:.3f} is {prev_ts - ts:.3f}s earlier than the previous line",
                    source,
                    None if first_line is None else first_line + offset,
                )
            if ev.attempt != cur_attempt or ev.rank != cur_rank or s is None:
                cur_attempt, cur_rank = ev.attempt, ev.rank
                raw = (ev.attempt, ev.rank)
                s = by_raw.get(raw)
                if s is None:
                    a = ev.attempt
                    s = self.stream(None if a is None else str(a), ev.rank or 0)
                    by_raw[raw] = s
                    if a is None and self.first_idless is None:
                        line = None if first_line is None else first_line + offset
                        self.first_idless = (source, line)
                log = s.steps
                ts_append, step_append, end_append = (
                    log.ts.append,
                    log.step.append,
                    log.is_end.append,
                )
                if id(s) not in touched:
                    touched[id(s)] = (s, len(log))
            kind = ev.kind
            # Step events are the bulk of a log: keep their path short.
            # (the appends are bound above, with s; step kinds always carry a step)
            if kind in step_kinds:
                try:
                    step_append(ev.step)  # type: ignore[misc, arg-type]
                except (OverflowError, TypeError):
                    self._bad_step(ev, source, first_line, offset)
                    continue
                ts_append(ts)  # type: ignore[misc]
                end_append(kind == step_end)  # type: ignore[misc]
            else:
                seq += 1  # arrival order of non-step events (steps keep theirs by position)
                self._route(ev, s, seq, source, None if first_line is None else first_line + offset)
                s.first_ts = min(s.first_ts, ts)
                s.last_ts = max(s.last_ts, ts)
        for stream, begin in touched.values():
            if len(stream.steps) > begin:
                new = np.frombuffer(stream.steps.ts, dtype=np.float64)[begin:]
                stream.first_ts = min(stream.first_ts, float(new.min()))
                stream.last_ts = max(stream.last_ts, float(new.max()))
        if foreign > 1:
            diag.counts["foreign_job"] += foreign - 1
        self.n_events += len(events) - foreign
        self._seq = seq
        self._source_last_ts[source or ""] = prev_ts

    def _bad_step(self, ev: Event, source: str | None, first_line: int | None, offset: int) -> None:
        self.n_events -= 1  # counted with the batch; this one is not accounted
        self.diagnostics.add(
            "step_out_of_range",
            f"{ev.kind} with step {ev.step!r} outside the 64-bit range; skipped",
            source,
            None if first_line is None else first_line + offset,
        )

    @property
    def last_ts(self) -> float:
        return max((s.last_ts for s in self.streams.values()), default=-math.inf)

    def attempt_spans(self) -> dict[str | None, tuple[float, float]]:
        """First and last event time of every attempt key (all its streams), in one pass."""
        spans: dict[str | None, tuple[float, float]] = {}
        for s in self.streams.values():
            first, last = spans.get(s.attempt, (math.inf, -math.inf))
            spans[s.attempt] = (min(first, s.first_ts), max(last, s.last_ts))
        return spans

    def as_of(self, t: float) -> Ingestor:
        """A copy of the state with every event stamped after ``t`` left out (ACCOUNTING.md
        §9.10: for a report ``--now t`` later events do not exist). O(state)."""
        out = Ingestor(self.job)
        for key, stream in self.streams.items():
            kept = stream.as_of(t)
            if kept.first_ts <= t:  # a stream all of whose events came later does not exist
                out.streams[key] = kept
        out.lifecycle = [e for e in self.lifecycle if e.ts <= t]
        out.checkpoints_saved = array("q")
        out.checkpoints_committed = array("q")
        for s in out.streams.values():
            for _ts, step, committed in s.checkpoints:
                (out.checkpoints_committed if committed else out.checkpoints_saved).append(step)
        idless = np.frombuffer(self.idless_ts, dtype=np.float64)
        out.idless_ts = array("d", idless[idless <= t].tobytes())
        out.first_idless = self.first_idless
        out.n_events = self.n_events
        out.diagnostics = self.diagnostics
        out.unknown_kinds = self.unknown_kinds
        return out

    def attempt_keys(self) -> list[str]:
        return sorted({s.attempt for s in self.streams.values() if s.attempt is not None})

    def _checkpoint(
        self, s: Stream, ev: Event, committed: bool, source: str | None, line: int | None
    ) -> None:
        step = ev.step or 0
        if not _fits(step):
            self.diagnostics.add(
                "step_out_of_range",
                f"{ev.kind} with step {step!r} outside the 64-bit range; ignored",
                source,
                line,
            )
            return
        (self.checkpoints_committed if committed else self.checkpoints_saved).append(step)
        s.checkpoints.append((ev.ts, step, committed))

    def _route(self, ev: Event, s: Stream, seq: int, source: str | None, line: int | None) -> None:
        kind = ev.kind
        if s.attempt is None:
            self.idless_ts.append(ev.ts)
        s.other_ts.append(ev.ts)
        if kind in LIFECYCLE_KINDS:
            self.lifecycle.append(
                LifecycleEvent(
                    ev.ts,
                    seq,
                    kind,
                    s.attempt,
                    ev.host,
                    ev.rank,
                    ev.status,
                    ev.exit_code,
                    source,
                    line,
                )
            )
            return
        if kind in (Kind.HEARTBEAT, Kind.ELASTIC_SLICES):
            return
        if kind == Kind.CHECKPOINT_COMMITTED:
            self._checkpoint(s, ev, True, source, line)
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
            self._checkpoint(s, ev, False, source, line)
        if base == "checkpoint_restore":
            if _fits(ev.step or 0):
                s.restores.append(RestoreMark(ev.ts, seq, ev.step or 0, not is_start))
            else:
                self.diagnostics.add(
                    "step_out_of_range",
                    f"{kind} with step {ev.step!r} outside the 64-bit range; its step is ignored",
                    source,
                    line,
                )
        blocking = True
        if base == "data_loading" and ev.blocking is False:
            blocking = False
        mark = IntervalMark(ev.ts, seq, bucket_of(base, ev.name), is_start, blocking, source, line)
        if s.marks and ev.ts < s.marks[-1].ts:
            s.marks_unsorted = True
        s.marks.append(mark)
        s.mark_ts.append(ev.ts)
