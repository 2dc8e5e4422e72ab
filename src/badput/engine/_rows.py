"""One attempt's step rows for one query, and the per-segment sums of the partition.

The rows phase of a report (ACCOUNTING.md §3-§5, §9): each attempt's rows are its sealed
rows (cached between queries) then a tail; :meth:`AttemptRows.add_segment` adds a
segment's kept, wasted, startup and at-risk time inside a window from prefix sums plus a
few edge rows, so one formula serves whole reports and windows. Also the sorted,
per-query view of a stream that attempts slice. Pure computation; no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from badput.engine._attempts import Attempt
from badput.engine._ingest_state import MAX_DIAGNOSTICS_PER_CODE
from badput.engine._intervals import IntervalMark, Marks, Spans
from badput.engine._model import AttemptSummary, Diagnostic, EndReason, StepCounts
from badput.engine._steps import AttemptSteps, Rows, TailIntervals
from badput.engine._stream import PackedInts, RestoreMark, Stream
from badput.events import OPEN_ENDED_KINDS

__all__ = [
    "NO_INTERVALS",
    "NO_ROWS",
    "AttemptDiagnostics",
    "AttemptRows",
    "ClosedMemo",
    "Segment",
    "SortedMarks",
    "StreamView",
    "Structure",
    "Sums",
    "attempt_bounds",
    "attempt_diagnostics",
    "between",
    "gathered",
    "inside_key",
    "narrowed",
    "slice_range",
    "sorted_step_arrays",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(slots=True)
class Segment:
    attempt: int
    sid: int  # segment number within its attempt
    lo: int  # row range within the attempt (sealed rows first, then the tail)
    hi: int
    first_ts: float
    first_step: int
    last_step: int
    restore_point: int
    restored: bool
    m: float | None = None
    startup: float = 0.0
    # What add_segment gave for a window holding the whole attempt, and for what inputs;
    # and the step counts, which do not depend on the window (see AttemptRows.add_segment).
    inside_memo: tuple[tuple[float, ...], Sums, float] | None = None
    count_memo: tuple[tuple[float, ...], float, float] | None = None


def inside_key(seg: Segment, keep_upto: float, safe: float) -> tuple[float, ...]:
    """What a segment's sums in a window holding its whole attempt depend on (the key of
    ``Segment.inside_memo``)."""
    return (keep_upto, safe, math.nan if seg.m is None else seg.m, seg.startup)


def _frac(keep_upto: float, step: float, count: float) -> float:
    """Share of a row's work at or below step ``keep_upto`` (rows count ``count`` steps)."""
    if keep_upto == math.inf:
        return 1.0
    if keep_upto == -math.inf:
        return 0.0
    return min(1.0, max(0.0, (keep_upto - step + 1.0) / count))


@dataclass(slots=True)
class Sums:
    """What the rows of one query add up to (seconds, and steps for n·I)."""

    kept: float = 0.0  # kept step time after startup
    kept_n: float = 0.0  # kept steps with step time > 0, weighted by their share inside
    wasted: float = 0.0
    startup: float = 0.0
    at_risk: float = 0.0
    kept_count: float = 0.0  # steps.kept (not windowed)
    wasted_count: float = 0.0

    def add(self, other: Sums) -> None:
        self.kept += other.kept
        self.kept_n += other.kept_n
        self.wasted += other.wasted
        self.startup += other.startup
        self.at_risk += other.at_risk
        self.kept_count += other.kept_count
        self.wasted_count += other.wasted_count


class AttemptRows:
    """One attempt's rows for this query: the sealed ones (cached) then the tail."""

    def __init__(
        self, steps: AttemptSteps, tail: Rows, tail_ivs: TailIntervals, unmatched: int
    ) -> None:
        self.steps = steps
        self.n_sealed = steps.n
        self.tail = tail
        self.tail_ivs = tail_ivs
        self.unmatched = unmatched
        self.n = self.n_sealed + tail.n
        self._sealed: Rows | None = None
        self._cum_pairs: tuple[tuple[F64, F64], ...] | None = None
        if tail.n == 0 and not len(tail_ivs.pieces):
            # Sealed whole with others (never to grow): its rows and prefix sums are views
            # made when first asked for. Else they are taken now, as the rows are now.
            if steps.together is None:
                self._sealed = steps.rows()
                _ = self._cums
        else:
            self._sealed = steps.rows()
            d0 = np.nan_to_num(tail.d)
            kpos = np.where(tail.d > 0, tail.count, 0.0)
            self._cum_pairs = (
                (steps.cum_d.a, np.concatenate(([0.0], np.cumsum(d0)))),
                (steps.cum_k.a, np.concatenate(([0.0], np.cumsum(tail.count)))),
                (steps.cum_kpos.a, np.concatenate(([0.0], np.cumsum(kpos)))),
            )
        self.open: dict[int, tuple[float, float, float]] = {}  # row -> (end, d, count)
        self.segments: list[Segment] = []

    @property
    def sealed(self) -> Rows:
        """The sealed rows (views; of an attempt sealed with others, made when first asked)."""
        if self._sealed is None:
            self._sealed = self.steps.rows()
        return self._sealed

    @property
    def _cums(self) -> tuple[tuple[F64, F64], ...]:
        """Per prefix sum (D, K, KPOS): the sealed rows' and the tail's."""
        if self._cum_pairs is None:
            steps = self.steps
            self._cum_pairs = (
                (steps.cum_d.a, _ZERO_CUM),
                (steps.cum_k.a, _ZERO_CUM),
                (steps.cum_kpos.a, _ZERO_CUM),
            )
        return self._cum_pairs

    def at(self, name: str, i: int) -> float:
        if i < self.n_sealed:
            return float(getattr(self.sealed, name)[i])
        return float(getattr(self.tail, name)[i - self.n_sealed])

    def covered(self, a: float, b: float) -> float:
        """How much of ``[a, b]`` the attempt's blocking intervals cover (sealed and tail)."""
        if b <= a:
            return 0.0
        return covered_by(self.steps.pieces, a, b) + covered_by(self.tail_ivs.pieces, a, b)

    def cap(self, i: int) -> float:
        """The latest end of open row ``i`` (its next start, or the attempt's end)."""
        if i < self.n_sealed:
            return self.steps.open_cap[i]
        return float(self.tail.cap[i - self.n_sealed])

    def open_rows(self) -> list[int]:
        if not self.tail.n:
            return self.steps.open_rows
        tail_open = np.flatnonzero(np.isnan(self.tail.d)) + self.n_sealed
        return self.steps.open_rows + [int(i) for i in tail_open]

    def count(self, i: int) -> float:
        return self.open[i][2] if i in self.open else self.at("count", i)

    def d(self, i: int) -> float:
        return self.open[i][1] if i in self.open else self.at("d", i)

    def end(self, i: int) -> float:
        return self.open[i][0] if i in self.open else self.at("end", i)

    # Prefix sums over rows, as stored (an open row counts 0 s and its recorded count).
    D, K, KPOS = 0, 1, 2

    def sealed_cums(self) -> tuple[F64, F64, F64]:
        """The prefix sums D, K and KPOS of the sealed rows (``n_sealed + 1`` values each)."""
        return self._cums[self.D][0], self._cums[self.K][0], self._cums[self.KPOS][0]

    def cum(self, which: int, i: int) -> float:
        """Σ over rows [0, i) of: step time (D), steps (K), steps of rows with time > 0 (KPOS)."""
        sealed, tail = self._cums[which]
        s = self.n_sealed
        if i <= s:
            return float(sealed[i])
        return float(sealed[s] + tail[i - s])

    def stored(self, rows: Sequence[int]) -> dict[int, tuple[float, float, float]]:
        """The D, K and KPOS terms of each of ``rows`` as stored (an open row: 0 s and its
        recorded count), each looked up once for the sums that leave them out."""
        out: dict[int, tuple[float, float, float]] = {}
        for i in rows:
            d, k = self.at("d", i), self.at("count", i)
            out[i] = (0.0 if math.isnan(d) else d, k, k if d > 0 else 0.0)
        return out

    def plain_sum(
        self,
        which: int,
        lo: int,
        hi: int,
        specials: Sequence[int],
        stored: dict[int, tuple[float, float, float]],
    ) -> float:
        """Σ of rows [lo, hi) as stored, leaving out the rows in ``specials`` (whose terms
        ``stored`` holds: :meth:`stored`)."""
        if hi <= lo:
            return 0.0
        total = self.cum(which, hi) - self.cum(which, lo)
        for i in specials:
            if lo <= i < hi:
                total -= stored[i][which]
        return total

    def rows_upto_step(self, x: float, lo: int, hi: int) -> int:
        """``lo`` + the number of rows in [lo, hi) (one segment: steps go up) with step <= x."""
        if x == math.inf:
            return hi
        if x == -math.inf or hi <= lo:
            return lo
        s = self.n_sealed
        n = 0
        if lo < s:
            n += int(self.sealed.step[lo : min(hi, s)].searchsorted(x, "right"))
        if hi > s:
            n += int(self.tail.step[max(lo, s) - s : hi - s].searchsorted(x, "right"))
        return lo + n

    def _counts(
        self, first: int, stop: int, keep_upto: float, opened: list[int], j_keep: int
    ) -> tuple[float, float]:
        """Steps of rows [first, stop) at or below ``keep_upto`` (the last such row is
        ``j_keep``), and all of them."""
        count_specials = sorted({j_keep, *opened})
        stored = self.stored([i for i in count_specials if first <= i < stop])
        kept_count = self.plain_sum(self.K, first, j_keep + 1, count_specials, stored)
        all_count = self.plain_sum(self.K, first, stop, opened, stored)
        all_count += sum(self.count(i) for i in opened)
        for i in count_specials:
            if first <= i < stop:
                kept_count += _frac(keep_upto, self.at("step", i), self.count(i)) * self.count(i)
        return kept_count, all_count

    def rows_overlapping(self, lo: float, hi: float) -> tuple[int, int]:
        """Rows [i0, i1) that can overlap ``[lo, hi]`` (rows are disjoint, in time order)."""
        sealed_start, tail_start = self.sealed.start, self.tail.start
        upto_lo = int(sealed_start.searchsorted(lo, "right")) + int(
            tail_start.searchsorted(lo, "right")
        )
        before_hi = int(sealed_start.searchsorted(hi, "left")) + int(
            tail_start.searchsorted(hi, "left")
        )
        return max(0, upto_lo - 1), before_hi

    def add_segment(  # noqa: PLR0917
        self,
        seg: Segment,
        keep_upto: float,
        safe: float,
        window: tuple[int, int, float, float],
        sums: Sums,
        inside: bool = False,
    ) -> float:
        """:meth:`segment_sums` added to ``sums``; its step time inside the window returned.

        ``inside``: the window holds the whole attempt, so the result depends only on the
        thresholds and the segment's typical time, and is kept on the segment for the next
        query with the same ones (a closed attempt's segments live as long as its memo).
        """
        if not inside:
            return self.segment_sums(seg, keep_upto, safe, window, sums)
        key = inside_key(seg, keep_upto, safe)
        memo = seg.inside_memo
        if memo is None or memo[0] != key:
            part = Sums()
            memo = seg.inside_memo = (
                key,
                part,
                self.segment_sums(seg, keep_upto, safe, window, part),
            )
        sums.add(memo[1])
        return memo[2]

    def segment_sums(
        self,
        seg: Segment,
        keep_upto: float,
        safe: float,
        window: tuple[int, int, float, float],
        sums: Sums,
    ) -> float:
        """Add the segment's kept, wasted, startup and at-risk time inside the window to
        ``sums``; return its step time inside the window.

        One formula for every query (ACCOUNTING.md §9): each row counts the share of its
        step time inside the window (1 for rows wholly inside, 0 for rows of no step time),
        and the share of its steps kept (at or below ``keep_upto``) or at risk (above
        ``safe``), split by step number. Rows wholly inside, kept or not, come from prefix
        sums; only a few rows per segment (window edges, the row a threshold cuts, the
        first row with its startup, an open last row) are looked at one by one, so a query
        costs O(segments · log rows).
        """
        i0, i1, lo_t, hi_t = window
        first, stop = seg.lo, seg.hi
        opened = [i for i in self.open if first <= i < stop] if self.open else []
        j_keep = self.rows_upto_step(keep_upto, first, stop) - 1
        # steps.kept / steps.wasted: the whole segment, whatever the window
        count_key = (keep_upto, *(self.count(i) for i in opened))
        counted = seg.count_memo
        if counted is None or counted[0] != count_key:
            counted = seg.count_memo = (
                count_key,
                *self._counts(first, stop, keep_upto, opened, j_keep),
            )
        _key, kept_count, all_count = counted
        sums.kept_count += kept_count
        sums.wasted_count += all_count - kept_count

        a, b = max(first, i0), min(stop, i1)
        if a >= b:
            return 0.0
        risk_from = min(keep_upto, safe)
        j_safe = (
            j_keep if risk_from == keep_upto else self.rows_upto_step(risk_from, first, stop) - 1
        )
        specials = sorted({i for i in (a, b - 1, first, j_keep, j_safe, *opened) if a <= i < b})
        stored = self.stored(specials)
        keep_end = min(b, j_keep + 1)
        sums.kept += self.plain_sum(self.D, a, keep_end, specials, stored)
        sums.kept_n += self.plain_sum(self.KPOS, a, keep_end, specials, stored)
        sums.wasted += self.plain_sum(self.D, max(a, j_keep + 1), b, specials, stored)
        sums.at_risk += self.plain_sum(self.D, max(a, j_safe + 1), keep_end, specials, stored)
        step_time = self.plain_sum(self.D, a, b, specials, stored)
        for i in specials:
            start, end, d, k = self.at("start", i), self.end(i), self.d(i), self.count(i)
            if math.isnan(d) or d <= 0.0:
                continue
            if start >= lo_t and end <= hi_t:
                w = 1.0
            else:
                x, y = min(max(start, lo_t), hi_t), min(max(end, lo_t), hi_t)
                w = min(1.0, max(0.0, (y - x - self.covered(x, y)) / d))
            step = self.at("step", i)
            f_keep = _frac(keep_upto, step, k)
            f_safe = _frac(risk_from, step, k)
            startup = seg.startup if i == first else 0.0
            work = w * (d - startup)
            sums.kept += f_keep * work
            sums.kept_n += f_keep * w * k
            sums.wasted += (1.0 - f_keep) * work
            sums.at_risk += (f_keep - f_safe) * work
            sums.startup += w * startup
            step_time += w * d
        return step_time


#: An attempt's own diagnostics: (code, message, file, line) shown, and counts not shown.
AttemptDiagnostics = tuple[list[tuple[str, str, str | None, int | None]], dict[str, int]]


@dataclass(slots=True)
class ClosedMemo:
    """What queries made of a closed attempt, reused while ``key`` (its place among the
    attempts, its span and end, the sizes of its streams) is unchanged.

    A closed attempt's rows are sealed whole; its segments, their typical step times,
    its interval totals, checkpoints, diagnostics and summary only change when something
    about it does, so a query over thousands of attempts pays for them once.
    """

    key: tuple[object, ...]
    rows: AttemptRows  # sealed whole, with its segments and its sums per bucket
    diagnostics: AttemptDiagnostics
    resolved: bool = False  # segments' typical times, open rows and startup are set
    ideal: float | None = None  # the ideal step time they were resolved with
    needs_ideal: bool = False  # a segment took the ideal as its typical time
    checkpoints: tuple[list[int], list[int], list[RestoreMark]] | None = None
    summary: AttemptSummary | None = None


@dataclass
class Structure:
    """What a report of one state holds for any window: the attempts and their spans, rows
    and segments, the thresholds of kept and at-risk steps, the ideal step time, the step
    counts, the attempts' summaries and the diagnostics (those a window does not change,
    as emitted before and after the window's own). A windowed query of the same state
    reuses it and looks only at the attempts the window meets."""

    key: tuple[object, ...]
    job: str
    attempts: list[Attempt]
    scheduled: float | None  # the first job_scheduled
    span: tuple[float, float]
    end_reason: EndReason
    rows: list[AttemptRows | None]
    segments: list[Segment]
    keep_upto: list[float]
    safe: float
    ideal: float | None
    ideal_source: Literal["configured", "estimated"] | None
    counts: StepCounts
    summaries: list[AttemptSummary]
    before: tuple[list[Diagnostic], dict[str, int]]
    after: list[tuple[str, str | None, str | None, int | None]]  # message None: a count
    _starts: F64 | None = None
    _ends: F64 | None = None
    _seg_attempt: I64 | None = None

    def eff_starts(self) -> F64:
        if self._starts is None:
            self._starts = np.array([a.eff_start for a in self.attempts], np.float64)
        return self._starts

    def eff_ends(self) -> F64:
        if self._ends is None:
            self._ends = np.array([a.eff_end for a in self.attempts], np.float64)
        return self._ends

    def segments_of(self, first: int, stop: int) -> tuple[int, int]:
        """The segments of attempts ``[first, stop)`` (segments are in attempt order)."""
        if self._seg_attempt is None:
            self._seg_attempt = np.array([s.attempt for s in self.segments], np.int64)
        found = np.searchsorted(self._seg_attempt, (first, stop), "left").tolist()
        return found[0], found[1]


def attempt_diagnostics(
    attempt_id: str | int,
    ar: AttemptRows,
    buckets: Sequence[str],
    sources: Sequence[str],
) -> AttemptDiagnostics:
    """An attempt's own diagnostics (unpaired marks, unmatched step ends): each code's first
    MAX_DIAGNOSTICS_PER_CODE, and how many more (no object made for those)."""
    steps, ivs = ar.steps, ar.tail_ivs
    shown: list[tuple[str, str, str | None, int | None]] = []
    hidden: dict[str, int] = {}
    if not (
        steps.unpaired_start_parts
        or steps.unpaired_end_parts
        or len(ivs.unpaired_starts)
        or len(ivs.unpaired_ends)
        or steps.unmatched_ends
        or ar.unmatched
    ):
        return shown, hidden  # nothing to say (most attempts): no parts looked through

    def first(code: str, parts: list[Marks]) -> list[IntervalMark]:
        room = MAX_DIAGNOSTICS_PER_CODE
        out: list[IntervalMark] = []
        for part in parts:
            if not len(part):
                continue
            taken = part.take(slice(0, room))
            room -= len(taken)
            if len(part) > len(taken):
                hidden[code] = hidden.get(code, 0) + len(part) - len(taken)
            out += taken.objects(buckets, sources)
        return out

    open_ended = [buckets.index(b) for b in OPEN_ENDED_KINDS if b in buckets]
    starts = [*steps.unpaired_start_parts, ivs.unpaired_starts]
    if open_ended:  # their end is the attempt's by design: nothing to report
        starts = [p.take(~np.isin(p.bucket, open_ended)) for p in starts]
    for m in first("unpaired_start", starts):
        message = (
            f"{m.bucket} started at {m.ts:.3f} was never ended; closed at the end of "
            f"attempt {attempt_id}"
        )
        shown.append(("unpaired_start", message, m.source, m.line))
    for m in first("unpaired_end", [*steps.unpaired_end_parts, ivs.unpaired_ends]):
        message = f"{m.bucket} end at {m.ts:.3f} without a start; ignored"
        shown.append(("unpaired_end", message, m.source, m.line))
    unmatched = steps.unmatched_ends + ar.unmatched
    if unmatched:
        message = (
            f"attempt {attempt_id}: {unmatched} step_end events without a matching "
            "step_start before them; ignored"
        )
        shown.append(("events_out_of_order", message, None, None))
    return shown, hidden


def sorted_step_arrays(stream: Stream) -> tuple[F64, I64, npt.NDArray[np.int8]]:
    log = stream.steps
    if not len(log):
        return np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int8)
    ts = np.frombuffer(log.ts, dtype=np.float64)
    step = log.step.column()
    is_end = np.frombuffer(log.is_end, dtype=np.int8)
    if log.unsorted:
        order = np.argsort(ts, kind="stable")  # arrival order breaks ties
        ts, step, is_end = ts[order], step[order], is_end[order]
    return ts, step, is_end


def gathered(streams: Sequence[Stream]) -> tuple[F64, I64, npt.NDArray[np.int8], Marks]:
    """Every stream's step events and marks, each stream's sorted (as
    :func:`sorted_step_arrays` and :meth:`MarkLog.columns <badput.engine._stream.MarkLog.columns>`
    give them), one stream after the other. Streams that arrived in time order (the usual
    case) are joined from their buffers in one copy per column, not one numpy array per
    stream and column; one stream's are its views."""
    if len(streams) == 1 or any(s.steps.unsorted or s.marks.unsorted for s in streams):
        steps = [sorted_step_arrays(s) for s in streams]
        parts = [s.marks.columns() for s in streams]
        if len(streams) == 1:
            return (*steps[0], parts[0])
        return (
            np.concatenate([x[0] for x in steps]),
            np.concatenate([x[1] for x in steps]),
            np.concatenate([x[2] for x in steps]),
            Marks(
                np.concatenate([m.ts for m in parts]),
                np.concatenate([m.seq for m in parts]),
                np.concatenate([m.bucket for m in parts]),
                np.concatenate([m.is_start for m in parts]),
                np.concatenate([m.blocking for m in parts]),
                np.concatenate([m.line for m in parts]),
                np.concatenate([m.source for m in parts]),
            ),
        )

    step_logs = [s.steps for s in streams]
    mark_logs = [s.marks for s in streams]

    def joined(logs: list[Any], column: str, dtype: Any) -> npt.NDArray[Any]:
        return np.frombuffer(b"".join(map(attrgetter(column), logs)), dtype)

    return (
        joined(step_logs, "ts", np.float64),
        PackedInts.joined([log.step for log in step_logs], np.int64),
        joined(step_logs, "is_end", np.int8),
        Marks(
            joined(mark_logs, "ts", np.float64),
            PackedInts.joined([m.seq for m in mark_logs], np.int64),
            PackedInts.joined([m.bucket for m in mark_logs], np.int32),
            joined(mark_logs, "is_start", np.bool_),
            PackedInts.joined([m.blocking for m in mark_logs], np.int8).view(np.bool_),
            joined(mark_logs, "line", np.int32),
            PackedInts.joined([m.source for m in mark_logs], np.int32),
        ),
    )


def slice_range(
    ts: F64, step: I64, is_end: npt.NDArray[np.int8], lo: float, hi: float
) -> tuple[F64, I64, npt.NDArray[np.int8]]:
    a = int(ts.searchsorted(lo, "left"))
    b = int(ts.searchsorted(hi, "left"))
    if a == 0 and b == ts.shape[0]:  # the usual case: nothing outside
        return ts, step, is_end
    return ts[a:b], step[a:b], is_end[a:b]


class SortedMarks:
    """Marks that arrived out of time order, read in ``(ts, seq)`` order without a sorted
    copy of every column: their times are sorted once, and each slice taken gathers its
    own rows (two processes of one rank writing two million marks: 32 MB for the order
    and the times, not 68 MB for all seven columns). ``take(k)`` is
    ``marks.sorted().take(k)``."""

    __slots__ = ("_order", "_raw", "ts")

    def __init__(
        self,
        raw: Marks,
        order: npt.NDArray[np.signedinteger[Any]] | None = None,
        ts: F64 | None = None,
    ) -> None:
        if order is None:
            order = np.lexsort((raw.seq, raw.ts))
            if len(raw) < 2**31:  # kept through the query: half the bytes
                order = order.astype(np.int32)
        self._order = order
        self._raw = raw
        self.ts: F64 = raw.ts[self._order] if ts is None else ts

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def take(self, rows: slice) -> Marks:
        """Rows ``rows`` (in ``(ts, seq)`` order) as columns of their own."""
        return self._raw.take(self._order[rows])

    def narrowed(self, a: int, b: int) -> SortedMarks:
        """Rows ``a:b``, still read through the order (no copy)."""
        return SortedMarks(self._raw, self._order[a:b], self.ts[a:b])


def narrowed(marks: Marks | SortedMarks, a: int, b: int) -> Marks | SortedMarks:
    """Rows ``a:b`` of marks in ``(ts, seq)`` order, without copying them (views)."""
    return marks.narrowed(a, b) if isinstance(marks, SortedMarks) else marks.take(slice(a, b))


class StreamView:
    """One stream's events in time order, sorted once per query (attempts slice it), each
    part on first use: most queries of a sealed attempt need its restores only."""

    __slots__ = ("_checkpoints", "_marks", "_restores", "_steps", "_stream")

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self._steps: tuple[F64, I64, npt.NDArray[np.int8]] | None = None
        self._marks: Marks | SortedMarks | None = None
        self._restores: tuple[list[RestoreMark], list[float]] | None = None
        self._checkpoints: tuple[list[tuple[float, int, bool]], list[float]] | None = None

    def steps(self) -> tuple[F64, I64, npt.NDArray[np.int8]]:
        """Step events' ``(ts, step, is_end)``, in time order (arrival breaks ties)."""
        if self._steps is None:
            self._steps = sorted_step_arrays(self._stream)
        return self._steps

    @property
    def marks(self) -> Marks | SortedMarks:
        """Interval marks, in ``(ts, seq)`` order (read where they are when they arrived
        in that order; else through their order: :class:`SortedMarks`)."""
        if self._marks is None:
            log = self._stream.marks
            self._marks = SortedMarks(log.raw(), *log.time_order()) if log.unsorted else log.raw()
        return self._marks

    @property
    def restores(self) -> list[RestoreMark]:
        return self._restore_lists()[0]

    @property
    def restore_ts(self) -> list[float]:
        return self._restore_lists()[1]

    @property
    def checkpoints(self) -> list[tuple[float, int, bool]]:
        """``(ts, step, committed)`` of its saves and commits, in time order."""
        return self._checkpoint_lists()[0]

    @property
    def checkpoint_ts(self) -> list[float]:
        return self._checkpoint_lists()[1]

    def _restore_lists(self) -> tuple[list[RestoreMark], list[float]]:
        if self._restores is None:
            restores = sorted(self._stream.restores, key=_RESTORE_ORDER)
            self._restores = (restores, [r.ts for r in restores])
        return self._restores

    def _checkpoint_lists(self) -> tuple[list[tuple[float, int, bool]], list[float]]:
        if self._checkpoints is None:
            checkpoints = sorted(self._stream.checkpoints, key=_FIRST)
            self._checkpoints = (checkpoints, [c[0] for c in checkpoints])
        return self._checkpoints


_RESTORE_ORDER = attrgetter("ts", "seq")
_FIRST = itemgetter(0)


def attempt_bounds(att: Attempt) -> tuple[float, float]:
    """The time range ``[lo, top)`` of the events ``att`` accounts for: its range (attempts
    without ids) and nothing after its end (§9.5)."""
    until = math.nextafter(att.end, math.inf) if att.ended else math.inf
    return att.range_lo, min(att.range_hi, until)


def covered_by(pieces: Spans, a: float, b: float) -> float:
    """How much of ``[a, b]`` flattened ``pieces`` (disjoint, in time order) cover, from the
    pieces that meet it alone (found by bisection): a window's few rows of a million-load
    attempt look at a few pieces, with no prefix sums of all of them kept."""
    i = int(np.searchsorted(pieces.end, a, "right"))
    j = int(np.searchsorted(pieces.start, b, "left"))
    if j <= i:
        return 0.0
    inside = np.minimum(pieces.end[i:j], b) - np.maximum(pieces.start[i:j], a)
    return float(np.clip(inside, 0.0, None).sum())


def between(ts: list[float], lo: float, top: float) -> slice:
    return slice(bisect.bisect_left(ts, lo), bisect.bisect_left(ts, top))


NO_ROWS = Rows.empty()
NO_INTERVALS = TailIntervals.empty()
_ZERO_CUM = np.zeros(1)
