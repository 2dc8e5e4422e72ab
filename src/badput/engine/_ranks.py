"""Every rank counts: the per-rank view, straggler scores and stalls (hangs).

The partition follows one timeline per attempt (ACCOUNTING.md); this module looks
at all of them. :class:`RankTracker` keeps a few columns per (attempt, rank),
fed the same events as the partition's ingest, O(1) per event; :meth:`RankTracker.analyze`
turns them into :class:`RankAnalysis` (pure: same state, same answer).

Straggler scores follow NVIDIA's straggler detection (nvidia-resiliency-ext,
``straggler/reporting.py``): per section, a score is a *reference* median time
divided by this rank's median time, so 1.0 is as fast as the reference and 0.5
twice as slow.

- **relative**: the reference is the smallest of the ranks' recent medians (the
  best rank of the job now);
- **individual**: the reference is this rank's own best median so far.

"Recent" is the newest ``section_summary`` period of the rank with at least
``min_samples`` runs (docs/ranks.md). Blocking data loads count as the section
``data_loading`` (recent: the median of the last block of loads).

Stalls: progress (steps, recorded intervals, section completions), not heartbeats,
decides liveness. A stall is a time during which no rank made progress for longer
than ``max(stall_factor x typical step time, stall_floor)``.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any, NamedTuple, cast

import numpy as np
import numpy.typing as npt

from badput.engine._batch import Batch
from badput.engine._pack import pack, unpack
from badput.events import (
    KIND_CODE,
    KIND_NAMES,
    MAX_INT,
    NAMED_INTERVAL_KINDS,
    Event,
    Kind,
    LeanEvent,
    bucket_of,
    interval_base,
)

__all__ = [
    "RankAnalysis",
    "RankOptions",
    "RankTracker",
    "RankView",
    "SectionView",
    "Stall",
    "Straggler",
]

F64 = npt.NDArray[np.float64]
#: Blocking data loads per block when scoring the ``data_loading`` section.
LOAD_BLOCK = 50
DATA_LOADING = "data_loading"


@dataclass(frozen=True)
class RankOptions:
    """Thresholds of the per-rank analysis (docs/ranks.md).

    - ``straggler_threshold``: a rank whose relative or individual score of a
      section is below this is a straggler (NVIDIA's default, 0.75).
    - ``min_excess``: ... and only when its recent median exceeds the reference by
      at least this many seconds (so that microsecond sections do not flag noise).
    - ``min_samples``: runs a summary period needs to give a median.
    - ``stall_factor``, ``stall_floor``: no progress for longer than
      ``max(stall_factor x typical step time, stall_floor)`` seconds is a stall.
    """

    straggler_threshold: float = 0.75
    min_excess: float = 0.001
    min_samples: int = 3
    stall_factor: float = 10.0
    stall_floor: float = 60.0


@dataclass(frozen=True)
class SectionView:
    """One timed section of one rank (seconds)."""

    count: int
    seconds: float
    recent_p50: float | None
    best_p50: float | None
    relative_score: float | None
    individual_score: float | None
    open_since: float | None = None


@dataclass(frozen=True)
class RankView:
    """What one rank did, over every attempt (JSON ``ranks``)."""

    rank: int
    host: str | None
    attempts: int
    steps: int
    typical_step_time: float | None
    data_loading_seconds: float
    buckets: dict[str, float]
    first_step: int | None
    last_step: int | None
    first_event: float
    last_event: float
    last_progress: float | None
    sections: dict[str, SectionView] = field(default_factory=dict)
    outlier: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Straggler:
    """A rank below the score threshold in one section (JSON ``stragglers``)."""

    rank: int
    host: str | None
    section: str
    relative_score: float | None
    individual_score: float | None
    recent_seconds: float
    reference_seconds: float


@dataclass(frozen=True)
class Stall:
    """A time when no rank made progress (JSON ``stalls``).

    ``first_stopped``: the ranks that stopped first: those that never reached
    the step (or the section count) the others reached, else those whose last
    progress is oldest (``why`` says which). ``buckets``: where the partition put
    the stall's time (a hang is counted in the buckets ACCOUNTING.md gives it,
    and this says so).
    """

    attempt: str | None
    start: float
    end: float
    seconds: float
    ongoing: bool
    threshold: float
    last_step: int | None
    first_stopped: list[int]
    why: str
    open_sections: dict[str, str] = field(default_factory=dict)
    inside: list[str] = field(default_factory=list)
    buckets: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RankAnalysis:
    ranks: list[RankView]
    stragglers: list[Straggler]
    stalls: list[Stall]


class _SectionLog:
    __slots__ = ("count", "last", "open_since", "open_ts", "opens", "parts", "periods")

    def __init__(self) -> None:
        self.count = 0
        # Each summary's seconds, summed exactly when read (math.fsum): a running sum
        # would depend on how the log was cut (a parallel read's parts, a live job's
        # pieces), and differ in its last bits from a cold read of the same log.
        self.parts: list[float] = []
        self.periods: list[tuple[float, int, float]] = []  # (ts, count, p50 or nan)
        self.opens: list[tuple[float, float]] = []  # (ts, open_since) of summaries of open runs
        self.last = -math.inf  # wall time of the last completion
        self.open_since: float | None = None
        self.open_ts = -math.inf  # ts of the summary that reported open_since

    @property
    def seconds(self) -> float:
        return math.fsum(self.parts)

    def see_open(self, ts: float, open_since: float | None) -> None:
        """The newest summary says whether a run is open (at equal times, an open one wins)."""
        if ts > self.open_ts or (
            ts == self.open_ts and (open_since or -math.inf) > (self.open_since or -math.inf)
        ):
            self.open_ts, self.open_since = ts, open_since


class _RankStream:
    """What one (attempt, rank) wrote that the per-rank view needs."""

    __slots__ = (
        "_derived",
        "attempt",
        "buckets",
        "changes",
        "covered",
        "derived_at",
        "end_ts",
        "extra_ts",
        "first_ts",
        "host",
        "last_ts",
        "loads",
        "names",
        "open",
        "pair_code",
        "pair_points",
        "pair_ts",
        "pairing",
        "pid_seen",
        "rank",
        "sections",
        "settled",
        "settled_hi",
        "step_no",
        "step_ts",
        "worker_pids",
    )

    def __init__(self, attempt: str | None, rank: int) -> None:
        self.attempt = attempt
        self.rank = rank
        self.host: str | None = None
        # The columns only ever grow at their end (ingest, absorb): what was derived from
        # their first values stays true, and a query derives only what arrived since.
        self.step_ts = array("d")
        self.step_no = array("q")
        self.end_ts = array("d")  # step_end times (progress)
        self.extra_ts = array("d")  # non-blocking load marks (progress, not paired)
        # Blocking interval marks, kept raw (a few bytes each) and paired at query time in
        # time order, whatever order they arrived in (two files of one rank, merges).
        self.pair_ts = array("d")
        self.pair_code = array("i")  # 2 x index in ``names`` + is_start
        self.names: dict[str, int] = {DATA_LOADING: 0}
        # The pairing of the first ``settled`` marks (the newest at ``settled_hi``), per
        # bucket index; the fields below are read from it (see :func:`_settle`).
        self.settled = 0
        self.settled_hi = -math.inf
        self.pairing: dict[int, _Pairing] = {}
        # Earlier pairings to go back to when marks arrive late (see :func:`_rewind`).
        self.pair_points: list[_PairPoint] = []
        self.loads = _Growing()  # blocking data-load durations
        self.open: dict[str, list[float]] = {}  # interval starts not ended (yet)
        self.buckets: dict[str, float] = {}  # seconds inside each kind of interval
        self.sections: dict[str, _SectionLog] = {}
        self.first_ts = math.inf
        self.last_ts = -math.inf
        # Liveness: the processes that made progress, and each process's newest other event
        # (a launcher writing as the same rank, or without one, is not a trainer).
        self.worker_pids: set[int | None] = set()
        self.pid_seen: dict[int | None, float] = {}
        self.changes = 0  # bumped by every change: what was derived from the columns is stale
        self.covered = _Covered()  # what :func:`_derive` took from the columns so far
        self._derived: _Derived | None = None
        self.derived_at = -1  # ``changes`` when ``_derived`` was computed

    def code(self, bucket: str) -> int:
        i = self.names.get(bucket)
        if i is None:
            i = self.names[bucket] = len(self.names)
        return i

    def alive_until(self) -> float | None:
        """The newest event of a process of this stream that made progress."""
        seen = [self.pid_seen[p] for p in self.worker_pids if p in self.pid_seen]
        return max(seen) if seen else None

    def settle(self) -> None:
        """Pair the blocking interval marks (see :func:`_settle`)."""
        _settle([self])

    def derived(self) -> _Derived:
        """What the analysis needs of this stream (see :func:`_derive`)."""
        if self.derived_at != self.changes or self._derived is None:
            _derive([self])
        assert self._derived is not None
        return self._derived


class _Growing:
    """A float column that grows at its end; a view taken of it stays as it was (a longer
    one is copied into a new buffer, twice the size: appending is amortised O(1)), unless
    it is cut back (:meth:`cut`): then what grows after the cut is written where the
    values cut were (a rank paired again at every monitor cycle from an earlier pairing:
    a copy of its million loads at every cycle, otherwise)."""

    __slots__ = ("buf", "cuts", "n", "n_cuts")

    def __init__(self) -> None:
        self.buf: F64 = _EMPTY
        self.n = 0
        # The lengths it was cut back to (the newest few), and how many cuts there were:
        # what a _Joined of it took before a cut may be kept up to there.
        self.cuts: list[int] = []
        self.n_cuts = 0

    def __len__(self) -> int:
        return self.n

    def extend(self, values: F64) -> None:
        k = len(values)
        if not k:
            return
        if not self.n:
            self.buf, self.n = values, k  # adopted, not copied (never written into)
            return
        if self.n + k > len(self.buf) or self.buf.base is not None:
            grown = np.empty(max(2 * (self.n + k), 16))
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : self.n + k] = values
        self.n += k

    def view(self) -> F64:
        return self.buf[: self.n]

    def cut(self, n: int) -> None:
        """Keep the first ``n`` values only. Views taken of the values cut see what grows
        in their place: whoever kept one learns of the cut (:meth:`unchanged_since`)."""
        self.n = min(self.n, n)
        self.cuts = [*self.cuts[-(_CUTS_KEPT - 1) :], self.n]
        self.n_cuts += 1

    def unchanged_since(self, n: int, n_cuts: int) -> int | None:
        """How many of its first values are as they were when it was ``n`` long after
        ``n_cuts`` cuts; None when that is no longer known."""
        k = self.n_cuts - n_cuts
        if k == 0:
            return n
        if k > len(self.cuts) or k < 0:
            return None
        return min(n, *self.cuts[-k:])


#: Cut lengths a :class:`_Growing` keeps (a rank paired again at every monitor cycle is
#: joined at every cycle too).
_CUTS_KEPT = 16


#: Values set aside (unsorted) before a kept-sorted column is sorted again (:class:`_Joined`).
MERGE_AFTER = 4096


def _concat(columns: list[_Growing]) -> F64:
    """The columns end to end; the one itself when only one has values (a view, which
    nobody writes into: the step times of a million-step attempt are not copied)."""
    views = [c.view() for c in columns if len(c)]
    if len(views) == 1:
        return views[0]
    return np.concatenate(views) if views else _EMPTY


class _Joined:
    """A column of one rank (or attempt) joined over its streams in their order, and what
    was taken of it: its median, the medians of its blocks of data loads.

    Joined again from scratch at every change (a cold report) but when only the last
    stream's column grew since the last time (the running attempt of a job followed by
    a monitor): then only the new values are taken. Its values are kept sorted from that
    second time on, the new ones set aside (sorted among themselves) and merged in every
    :data:`MERGE_AFTER`: the median is found among the few sorted values around the
    middle and those set aside, and it is :func:`numpy.median`'s, bit for bit (a NaN,
    or a zero whose sign depends on the order numpy leaves equal values in, is found by
    numpy)."""

    __slots__ = (
        "block",
        "kept",
        "medians",
        "n_pending",
        "nan",
        "parts",
        "pending",
        "sorted",
        "values",
    )

    def __init__(self) -> None:
        # each stream's column, its length and cuts (see _Growing.cut)
        self.parts: list[tuple[_Growing, int, int]] = []
        self.kept = 0  # the first values as they were at the join before the last
        self.values: _Growing | None = None  # kept once the column grew
        self.sorted: F64 | None = None
        self.pending: list[F64] = []
        self.n_pending = 0
        self.nan = False  # a NaN among the values: numpy.median's own rule
        # Data loads: the block size, the medians of the full blocks taken.
        self.block = 0
        self.medians = _Growing()

    def join(self, columns: list[_Growing]) -> tuple[F64, bool]:
        """The columns joined, and whether only the last one grew since the last join."""
        parts = self.parts
        last = len(columns) - 1
        unchanged = None
        if (
            len(parts) == len(columns) > 0
            and columns[last] is parts[last][0]
            and all(
                c is p and len(c) == n and c.n_cuts == k
                for (p, n, k), c in zip(parts[:last], columns[:last], strict=True)
            )
        ):
            # (the last column may have been cut back since: a rank paired again from an
            # earlier pairing; what comes before the cut is kept)
            unchanged = columns[last].unchanged_since(parts[last][1], parts[last][2])
        if unchanged is None:
            self.parts = [(c, len(c), c.n_cuts) for c in columns]
            self.values, self.sorted, self.pending, self.n_pending = None, None, [], 0
            self.block, self.kept = 0, 0
            return _concat(columns), False
        col, n, _ = parts[last]
        parts[last] = (col, len(col), col.n_cuts)
        offset = sum(p[1] for p in parts[:last])
        self.kept = offset + unchanged
        if unchanged < n and self.values is not None:  # cut back: its values taken again
            self.values.cut(offset + unchanged)
            self.sorted, self.pending, self.n_pending = None, [], 0
            n = unchanged
        if self.values is None:  # a second look: from now on, kept
            self.values = _Growing()
            self.values.extend(_concat(columns))
            self.nan = bool(np.isnan(self.values.view()).any())
        elif len(col) > n:
            new = col.view()[n:]
            self.values.extend(new)
            if self.sorted is not None:
                self.pending.append(new)
                self.n_pending += len(new)
            self.nan = self.nan or bool(np.isnan(new).any())
        return self.values.view(), True

    def median(self, joined: F64) -> float | None:
        """The median of ``joined``, what :meth:`join` just gave."""
        n = len(joined)
        if not n:
            return None
        if self.values is None or self.nan:
            return float(np.median(joined))
        if self.sorted is None:
            self.sorted, self.pending, self.n_pending = np.sort(joined), [], 0
        elif self.n_pending > MERGE_AFTER:
            merged = np.concatenate((self.sorted, *self.pending))
            self.sorted, self.pending, self.n_pending = np.sort(merged, kind="stable"), [], 0
        k = n // 2
        if self.pending:
            aside = np.concatenate(self.pending)
            # Below index k - 1 - len(aside) of the sorted values, every value is among the
            # k - 1 least of all: the two middle ones are among the rest up to index k.
            lo = max(0, k - 1 - len(aside))
            near = np.sort(np.concatenate((self.sorted[lo : k + 1], aside)))
            upper, lower = near[k - lo], near[k - 1 - lo] if k else near[0]
        else:
            upper, lower = self.sorted[k], self.sorted[k - 1] if k else self.sorted[0]
        if upper == 0 or (lower == 0 and not n % 2):
            return float(np.median(joined))  # 0.0 or -0.0: which one, numpy's order says
        return float(upper) if n % 2 else float((lower + upper) / 2)


class _Pairing:
    """One bucket's marks of one stream, paired so far: the seconds paired (summed in time
    order), whether any pair was found, whether the marks ever failed to alternate
    start, end, start... (then a bucket summing to 0 is still shown), the open starts."""

    __slots__ = ("irregular", "paired", "stack", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.paired = False
        self.irregular = False
        self.stack: list[float] = []


class _PairPoint:
    """A stream's pairing as it was before a pass took more marks: the marks taken then
    (``settled``, the newest at ``settled_hi``), each bucket's pairing and how many data
    loads it had found."""

    __slots__ = ("n_loads", "pairing", "settled", "settled_hi")

    def __init__(self, s: _RankStream) -> None:
        self.settled = s.settled
        self.settled_hi = s.settled_hi
        self.pairing = [
            (b, p.total, p.paired, p.irregular, tuple(p.stack)) for b, p in s.pairing.items()
        ]
        self.n_loads = len(s.loads)


class _GapPoint(NamedTuple):
    """What :func:`_derive` had taken of a stream's values up to the time ``t``: how many,
    the least and the newest of them, the longest gap between them in time order. It
    holds while no value at or before ``t`` arrives after it was made; a pass whose new
    values arrived late goes on from the newest point before them
    (:func:`_derive_from_point`), not from the stream's first value."""

    t: float
    n: int
    lo: float
    hi: float
    gap: float
    #: the lengths of the stream's four columns before which no value is after ``t``
    since: tuple[int, int, int, int]


class _Covered:
    """What :func:`_derive` took from a stream's columns: how much of each, their span,
    the longest time between two of their values in time order, the step numbers' range,
    the last step in time order, and the step times so far."""

    __slots__ = (
        "at",
        "gap",
        "hi",
        "last_no",
        "last_ts",
        "lo",
        "n",
        "points",
        "step_hi",
        "step_lo",
        "times",
    )

    def __init__(self) -> None:
        self.at = (0, 0, 0, 0)  # len of step_ts, end_ts, pair_ts, extra_ts
        self.n = 0
        self.lo = math.inf
        self.hi = -math.inf
        self.gap = -math.inf
        self.step_lo: int | None = None
        self.step_hi: int | None = None
        self.last_ts = -math.inf
        self.last_no = 0
        self.times = _Growing()
        # What was taken up to earlier times, oldest first: see _GapPoint
        self.points: list[_GapPoint] = []


class _Derived:
    """What the analysis needs of one stream, derived from its columns once per change."""

    __slots__ = (
        "first_event",
        "gap",
        "last_event",
        "n_progress",
        "progress_first",
        "progress_last",
        "step_hi",
        "step_lo",
        "step_times",
    )

    def __init__(  # noqa: PLR0917 (one made per stream per change: 10,000 in a cold report)
        self,
        first_event: float,
        last_event: float,
        step_times: F64,
        step_lo: int | None,
        step_hi: int | None,
        n_progress: int,
        progress_first: float,
        progress_last: float,
        gap: float,
    ) -> None:
        self.first_event = first_event  # first and last event time
        self.last_event = last_event
        self.step_times = step_times  # per step, in time order, where the step number grows
        self.step_lo = step_lo  # smallest and largest step number
        self.step_hi = step_hi
        # Progress (steps, recorded interval marks, completed sections): how many, the first
        # and the last (inf, -inf: none), and a bound on the longest time between two of
        # them (-inf: fewer than two): exact between the columns' values and beyond them,
        # but a completed section inside the columns' span is not looked for in the gap it
        # may split (the bound only screens attempts for stalls, see :func:`_may_stall`).
        self.n_progress = n_progress
        self.progress_first = progress_first
        self.progress_last = progress_last
        self.gap = gap


_EMPTY: F64 = np.zeros(0)


def _segments(lengths: list[int]) -> tuple[list[int], npt.NDArray[np.intp]]:
    """Of consecutive segments of ``lengths``: which are non-empty, and where they start."""
    lens = np.array(lengths, np.intp)
    nonempty = np.flatnonzero(lens)
    return nonempty.tolist(), (np.cumsum(lens) - lens)[nonempty]


def _spread(out: list[Any], which: list[int], values: npt.NDArray[Any]) -> None:
    """``out[which[k]] = values[k]`` as a Python number: the per-segment reductions of the
    non-empty segments (``np.minimum.reduceat(column, starts)``, ...) put in place."""
    for i, v in zip(which, values.tolist(), strict=True):
        out[i] = v


def _in_chunks(streams: list[_RankStream], sizes: list[int]) -> list[list[_RankStream]]:
    """``streams`` in runs of about :data:`CHUNK` new values (``sizes``: each one's; a
    vectorised pass over a few columns of each keeps its temporary arrays small). A stream
    of :data:`CHUNK` values or more has a run of its own, whatever comes before it: the
    passes over one stream read its columns in place and pair its marks in pieces."""
    chunks: list[list[_RankStream]] = []
    size = CHUNK
    for s, n in zip(streams, sizes, strict=True):
        if size >= CHUNK or (n >= CHUNK and size > 0):
            chunks.append([])
            size = 0
        chunks[-1].append(s)
        size += n + 1
    return chunks


#: Batches of at most this many events are ingested event by event (cheaper than the
#: few dozen numpy calls of a batch).
SMALL_RUN = 64
#: Values (marks, steps...) per vectorised pass over several streams.
CHUNK = 1 << 16


def _tail(column: array[float], start: int) -> array[float]:
    return column[start:] if start else column


def _derive(streams: list[_RankStream]) -> None:
    """Fill each stream's :class:`_Derived`, in vectorised passes over many of them (a
    report of 10,000 attempts has 10,000 streams of a few dozen events each).

    Each pass takes only the values that arrived since the last (a running job's stream
    grows by a few per monitor cycle): carrying the newest value and the last step in
    time order over, the new ones give the next gaps and step times. A stream whose new
    values do not all come after what was taken (they arrived out of time order) is
    derived again from its first value."""
    sizes = [
        len(s.step_ts) + len(s.end_ts) + len(s.pair_ts) + len(s.extra_ts) - s.covered.n
        for s in streams
    ]
    for chunk in _in_chunks(streams, sizes):
        late = _derive_chunk(chunk)
        late = [s for s in late if not _derive_from_point(s)]
        if late:
            for s in late:
                s.covered = _Covered()
            _derive_chunk(late)
    for s in streams:
        _finish(s)


#: Newest values of a pass a stream's gap points are made among (:func:`_sorted_gaps`): a
#: late value goes back this far at most (a million-step job with a data load a step:
#: about 11 minutes at 100 steps/s); each pass's temporaries are two columns of this many.
GAP_POINTS_SPAN = 1 << 18
#: The gap points kept nearest the newest (older ones are thinned out: see _kept_points).
GAP_POINTS_NEAR = 4


def _derive_from_point(s: _RankStream) -> bool:
    """Take the values of ``s`` after the newest gap point before its late ones again, and
    its new step starts as a pass takes them; False (derive it again from its first value)
    when no point is before them, or step starts arrived late, or ``s`` was derived with
    other streams (a pass of many small streams keeps no points).

    A rank written by two processes whose files a monitor reads at different moments: the
    marks of one arrive late at every look, and deriving the stream again from its first
    value sorted all its values at every look (a million steps with a data load each:
    4 M values, 60 ms). From a point, the values after it are found with one comparison
    per value, and only they are sorted."""
    cov = s.covered
    at = cov.at
    cols = (s.step_ts, s.end_ts, s.pair_ts, s.extra_ts)
    new_steps = np.frombuffer(s.step_ts, dtype=np.float64)[at[0] :]
    if len(new_steps) and cov.step_lo is not None and float(new_steps.min()) < cov.last_ts:
        return False
    first = math.inf
    for col, k in zip(cols, at, strict=True):
        if len(col) > k:
            first = min(first, float(np.frombuffer(col, dtype=np.float64)[k:].min()))
    while cov.points and not cov.points[-1].t < first:
        cov.points.pop()  # a value at or before it arrived since: it no longer holds
    if not cov.points:
        return False
    point = cov.points[-1]
    after: list[F64] = []
    since: list[int] = []  # where the first value after the point is, in each column
    for col, k in zip(cols, point.since, strict=True):
        v = np.frombuffer(col, dtype=np.float64)[k:] if len(col) > k else _EMPTY
        later = v > point.t
        after.append(v[later])
        since.append(k + int(later.argmax()) if len(v) and later.any() else len(col))
    c = np.concatenate([np.array([point.hi]), *after])  # the newest taken, carried over
    cov.n, cov.lo, cov.hi, cov.gap = point.n, point.lo, point.hi, point.gap
    # (the points this pass makes, all after this one, find their later values there)
    cov.at = (since[0], since[1], since[2], since[3])
    step_ts, step_no = array("d"), array("q")
    _add_new_steps(s, at[0], step_ts, step_no)
    late = _derive_columns(
        [s],
        c,
        [len(c)],
        np.frombuffer(step_ts, dtype=np.float64) if len(step_ts) else _EMPTY,
        np.frombuffer(step_no, dtype=np.int64) if len(step_no) else np.zeros(0, np.int64),
        [len(step_ts)],
        [0],
    )
    return not late  # (never late: every value is after the point's newest, steps in order)


def _sorted_gaps(v: F64, carried: bool, before: _Covered) -> tuple[float, list[_GapPoint]]:
    """The longest gap between consecutive values of ``v`` (sorted; ``carried``: its first
    is the newest value taken before, ``before`` what was taken), and gap points at its
    8th, 16th, 32nd... newest values (:class:`_GapPoint`)."""
    if len(v) < 2:
        return -math.inf, []
    h = max(0, len(v) - 1 - GAP_POINTS_SPAN)
    best = _max_gap(v[: h + 1]) if h else -math.inf
    prefix = np.maximum.accumulate(np.diff(v[h:]))  # gap up to v[h + 1 + j], from v[h]
    gap = max(best, float(prefix[-1]))
    n0 = before.n - 1 if carried else 0  # values counted before v[0]
    since = before.at  # (the columns before it hold no value after v[0])
    lo0 = before.lo if carried else math.inf
    points: list[_GapPoint] = []
    back = 8
    while back < len(v) - h:
        t = float(v[len(v) - 1 - back])
        i = int(v.searchsorted(t, "right")) - 1  # the last of its time: all of t taken
        # Not at the newest time: a later pass may take values equal to the newest (they
        # are not late), which a point there would not count.
        if h < i < len(v) - 1 and (not points or points[-1].t != t):
            points.append(
                _GapPoint(
                    t,
                    n0 + i + 1,
                    min(lo0, float(v[0])),
                    t,
                    max(before.gap, best, float(prefix[i - h - 1])),
                    since,
                )
            )
        back *= 2
    points.reverse()  # oldest first
    return gap, points


def _kept_points(points: list[_GapPoint], newest_n: int) -> list[_GapPoint]:
    """``points`` (oldest first) thinned: the :data:`GAP_POINTS_NEAR` newest, and older
    ones each at least twice as far (in values) from the newest as the next kept."""
    if len(points) <= GAP_POINTS_NEAR:
        return points
    kept = points[-GAP_POINTS_NEAR:]
    for p in reversed(points[:-GAP_POINTS_NEAR]):
        if newest_n - p.n >= 2 * (newest_n - kept[0].n):
            kept.insert(0, p)
    return kept


def _add_new_steps(s: _RankStream, k: int, step_ts: array[float], step_no: array[int]) -> None:
    """Append the step starts of ``s`` from index ``k`` on, after the last step taken (the
    next step time is taken from it), to the columns of a pass."""
    if s.covered.step_lo is not None:
        step_ts.append(s.covered.last_ts)
        step_no.append(s.covered.last_no)
    step_ts += _tail(s.step_ts, k)
    step_no += s.step_no[k:] if k else s.step_no


def _derive_chunk(streams: list[_RankStream]) -> list[_RankStream]:
    """One vectorised pass; returns the streams whose new values came out of order (left
    as they were)."""
    if len(streams) == 1 and not streams[0].covered.n:
        return _derive_fresh(streams[0])
    cols, step_ts = array("d"), array("d")
    step_no = array("q")
    n_cols: list[int] = []
    n_steps: list[int] = []
    resumed: list[int] = []  # the streams carrying values over
    for i, s in enumerate(streams):
        cov = s.covered
        before = len(cols)
        before_steps = len(step_ts)
        if not cov.n:  # nothing taken yet (a cold report: every stream)
            cols += s.step_ts
            cols += s.end_ts
            cols += s.pair_ts
            cols += s.extra_ts
            step_ts += s.step_ts
            step_no += s.step_no
        else:
            at = cov.at
            cols.append(cov.hi)  # the newest value taken: the next gap starts there
            cols += _tail(s.step_ts, at[0])
            cols += _tail(s.end_ts, at[1])
            cols += _tail(s.pair_ts, at[2])
            cols += _tail(s.extra_ts, at[3])
            _add_new_steps(s, at[0], step_ts, step_no)
            resumed.append(i)
        n_cols.append(len(cols) - before)
        n_steps.append(len(step_ts) - before_steps)
    c = np.frombuffer(cols, dtype=np.float64) if len(cols) else _EMPTY
    s_ts = np.frombuffer(step_ts, dtype=np.float64) if len(step_ts) else _EMPTY
    s_no = np.frombuffer(step_no, dtype=np.int64) if len(step_no) else np.zeros(0, np.int64)
    return _derive_columns(streams, c, n_cols, s_ts, s_no, n_steps, resumed)


def _derive_fresh(s: _RankStream) -> list[_RankStream]:
    """:func:`_derive_chunk` of one stream taken for the first time (a cold report of a
    large stream has a pass of its own): its columns are read where they are, and joined
    once, not copied into growing arrays (a million steps with their data loads: 4 M
    values, 32 MB each copy)."""
    parts = [
        np.frombuffer(col, dtype=np.float64)
        for col in (s.step_ts, s.end_ts, s.pair_ts, s.extra_ts)
        if len(col)
    ]
    c = np.concatenate(parts) if parts else _EMPTY  # a copy: sorted in place
    del parts  # views of the stream's columns (which cannot grow while one is held)
    s_ts = np.frombuffer(s.step_ts, dtype=np.float64) if len(s.step_ts) else _EMPTY
    s_no = np.frombuffer(s.step_no, dtype=np.int64) if len(s.step_no) else np.zeros(0, np.int64)
    return _derive_columns([s], c, [len(c)], s_ts, s_no, [len(s_ts)], [])


#: Values whose gaps are taken at a time (a sorted column of millions is not differenced whole).
_GAP_BLOCK = 1 << 18


def _max_gap(v: F64) -> float:
    """The largest difference between consecutive values of ``v`` (sorted, two or more),
    block by block: the maximum of ``np.diff(v)`` without its copy of the column."""
    best = -math.inf
    for i in range(0, len(v) - 1, _GAP_BLOCK):
        best = max(best, float(np.diff(v[i : i + _GAP_BLOCK + 1]).max()))
    return best


def _derive_columns(  # noqa: PLR0917 (the gathered columns and their layout)
    streams: list[_RankStream],
    c: F64,
    n_cols: list[int],
    s_ts: F64,
    s_no: npt.NDArray[np.int64],
    n_steps: list[int],
    resumed: list[int],
) -> list[_RankStream]:
    """The rest of :func:`_derive_chunk`: ``c`` holds each stream's new values one stream
    after the other (``n_cols`` each), ``s_ts``/``s_no`` its step starts and numbers
    (``n_steps`` each); ``resumed``: the streams carrying values over. ``c`` is the
    caller's own: it is sorted in place."""
    ids = np.arange(len(streams))
    lows: list[float] = [math.inf] * len(streams)
    highs: list[float] = [-math.inf] * len(streams)
    which, starts = _segments(n_cols)
    if which:
        _spread(lows, which, np.minimum.reduceat(c, starts))
        _spread(highs, which, np.maximum.reduceat(c, starts))
    step_which, step_starts = _segments(n_steps)
    first_steps: list[float] = [math.inf] * len(streams)
    if step_which:
        _spread(first_steps, step_which, np.minimum.reduceat(s_ts, step_starts))
    late = {
        i
        for i in resumed
        if lows[i] < streams[i].covered.hi
        or (streams[i].covered.step_lo is not None and first_steps[i] < streams[i].covered.last_ts)
    }
    # Progress, sorted per stream: the longest gap between consecutive values.
    gaps_of: list[float] = [-math.inf] * len(streams)
    new_points: list[_GapPoint] = []
    if which and len(streams) == 1:  # a large stream has a pass of its own: no owners
        # "stable" (timsort) merges the columns' runs, each in time order already: 0.02 s
        # for the 4 M times of a million steps with their data loads, against 0.4 s
        # (the whole report: 1.0 s) for the default quicksort; the values are the same.
        # Sorted in place and differenced block by block: of a million steps with their
        # data loads, 32 MB at a time instead of 96.
        c.sort(kind="stable")
        gaps_of[0], new_points = _sorted_gaps(c, bool(resumed), streams[0].covered)
    elif which:
        owner = np.repeat(ids, n_cols)
        v = c[np.lexsort((c, owner))]
        gaps = np.empty(len(v))
        gaps[1:] = np.diff(v)
        gaps[starts] = -math.inf  # not a gap: the first of a stream after another's last
        _spread(gaps_of, which, np.maximum.reduceat(gaps, starts))
    # Step times: between consecutive step starts in time order (stable at equal times),
    # per step where the step number grows.
    step_lows: list[int] = [0] * len(streams)
    step_highs: list[int] = [0] * len(streams)
    last_ts: list[float] = [0.0] * len(streams)
    last_no: list[int] = [0] * len(streams)
    times_of: list[F64] = [_EMPTY] * len(streams)
    if step_which:
        _spread(step_lows, step_which, np.minimum.reduceat(s_no, step_starts))
        _spread(step_highs, step_which, np.maximum.reduceat(s_no, step_starts))
        if len(streams) == 1:
            owner = np.zeros(1, np.intp)  # (broadcast: one stream)
            if bool((s_ts[1:] >= s_ts[:-1]).all()):  # in time order (the usual): as it is
                ts, no = s_ts, s_no
            else:
                order = np.argsort(s_ts, kind="stable")
                ts, no = s_ts[order], s_no[order]
                del order
        else:
            owner = np.repeat(ids, n_steps)
            order = np.lexsort((s_ts, owner))
            ts, no, owner = s_ts[order], s_no[order], owner[order]
            del order
        ends = (step_starts + np.array(n_steps, np.intp)[step_which] - 1).tolist()
        for i, t, n in zip(step_which, ts[ends].tolist(), no[ends].tolist(), strict=True):
            last_ts[i], last_no[i] = t, n
        dn = np.diff(no)
        ok = dn > 0 if len(streams) == 1 else (owner[1:] == owner[:-1]) & (dn > 0)
        times = np.diff(ts)[ok] / dn[ok]
        counts = (
            np.array([len(times)])
            if len(streams) == 1
            else np.bincount(owner[1:][ok], minlength=len(streams))
        )
        found, at_ = _segments(counts.tolist())
        for i, at, n in zip(found, at_.tolist(), counts[found].tolist(), strict=True):
            times_of[i] = times[at : at + n]
    has_steps = [False] * len(streams)
    for i in step_which:
        has_steps[i] = True
    for i, s in enumerate(streams):
        if late and i in late:
            continue
        cov = s.covered
        cov.at = (len(s.step_ts), len(s.end_ts), len(s.pair_ts), len(s.extra_ts))
        if len(streams) == 1:  # (the values taken once this pass is: the newest point's)
            newest = cov.n + n_cols[i] - 1 if cov.n else n_cols[i]
            cov.points = _kept_points([*cov.points, *new_points], newest)
        if not cov.n:  # the first pass over the stream (nothing to combine with)
            cov.n, cov.lo, cov.hi, cov.gap = n_cols[i], lows[i], highs[i], gaps_of[i]
            if has_steps[i]:
                cov.step_lo, cov.step_hi = step_lows[i], step_highs[i]
                cov.last_ts, cov.last_no = last_ts[i], last_no[i]
                cov.times.extend(times_of[i])
            continue
        cov.n += n_cols[i] - 1
        cov.lo = min(cov.lo, lows[i])
        cov.hi = max(cov.hi, highs[i])
        cov.gap = max(cov.gap, gaps_of[i])
        if has_steps[i]:
            lo, hi = step_lows[i], step_highs[i]
            cov.step_lo = lo if cov.step_lo is None else min(cov.step_lo, lo)
            cov.step_hi = hi if cov.step_hi is None else max(cov.step_hi, hi)
            cov.last_ts, cov.last_no = last_ts[i], last_no[i]
            cov.times.extend(times_of[i])
    return [streams[i] for i in sorted(late)]


def _finish(s: _RankStream) -> None:
    """The stream's :class:`_Derived`, of what :func:`_derive` took from its columns and its
    sections' newest completions (a few)."""
    cov = s.covered
    lo, hi = cov.lo, cov.hi
    d = _Derived(
        lo if lo < s.first_ts else s.first_ts,  # min() and max(), inline
        hi if hi > s.last_ts else s.last_ts,
        cov.times.view() if cov.times.n else _EMPTY,
        cov.step_lo,
        cov.step_hi,
        cov.n,
        lo,
        hi,
        cov.gap,
    )
    lasts = (
        [log.last for log in s.sections.values() if math.isfinite(log.last)] if s.sections else None
    )
    if lasts:
        d.n_progress += len(lasts)
        d.progress_first = min(cov.lo, *lasts)
        d.progress_last = max(cov.hi, *lasts)
        # gaps between completions outside the columns' span and its nearest edge
        below = sorted(x for x in lasts if x < cov.lo)
        above = sorted(x for x in lasts if x > cov.hi)
        for run in ([*below, cov.lo], [cov.hi, *above]) if cov.n else (sorted(lasts),):
            for a, b in itertools.pairwise(run):
                d.gap = max(d.gap, b - a)
    s._derived, s.derived_at = d, s.changes


def _settle(streams: list[_RankStream]) -> None:
    """Pair each stream's blocking interval marks in time order (at equal times, starts
    first; unpaired ends are ignored: the partition reports them): seconds per bucket,
    data-load durations, starts still open. In vectorised passes over many streams, each
    taking only the marks that arrived since the last (carrying each bucket's open starts
    and seconds over); a stream whose new marks do not all come after those taken is
    paired again from its first mark."""
    todo = [s for s in streams if s.settled != len(s.pair_ts)]
    for chunk in _in_chunks(todo, [len(s.pair_ts) - s.settled for s in todo]):
        late = _settle_in_pieces(chunk[0]) if len(chunk) == 1 else _settle_chunk(chunk)
        if late:
            back = [s for s in late if _rewind(s)]
            if back:
                again = _settle_chunk(back)  # (never late: see _rewind)
                late = [s for s in late if s not in back or s in again]
            for s in late:
                s.settled, s.settled_hi, s.pairing, s.loads = 0, -math.inf, {}, _Growing()
                s.pair_points = []
            large = [s for s in late if len(s.pair_ts) > _settle_whole_max()]
            for s in large:
                _settle_in_time_order(s)
            if len(large) < len(late):
                _settle_chunk([s for s in late if len(s.pair_ts) <= _settle_whole_max()])


#: Marks of one stream paired in one vectorised pass at most (each pass's temporaries
#: are a dozen columns of its marks: for the 2 M marks of a million data loads, 60 MB at
#: once against 8 MB in passes of this size).
_SETTLE_PIECE = 1 << 18


def _settle_whole_max() -> int:
    """New marks of one stream paired in one pass (more are taken a piece at a time)."""
    return _SETTLE_PIECE + _SETTLE_PIECE // 2


#: Earlier pairings kept per stream (:func:`_rewind`): a monitor that looks once a second
#: goes back up to this many looks.
PAIR_POINTS = 16


def _rewind(s: _RankStream) -> bool:
    """Go back to the newest earlier pairing of ``s`` that its late marks all come after,
    so that only the marks taken since are paired again; False when none is kept.

    Why that is the pairing of every mark in time order: each pass took marks all later
    than the newest taken before it (else it was late and went back), so when a pairing
    was kept, the marks taken were those up to its newest, and every mark that arrived
    since is later, the late ones too (the point is chosen so). Paired again from there
    in time order, they give what one pass over all of them gives. (A rank written by
    two processes whose files a monitor reads at different moments: their marks arrive
    late at every look, and pairing all of them again each time cost O(marks) a look.)"""
    new = np.frombuffer(s.pair_ts, dtype=np.float64)[s.settled :]
    if not len(new) or not s.pair_points:
        return False
    first = float(new.min())
    points = s.pair_points
    k = len(points) - 1
    while k >= 0 and not points[k].settled_hi < first:
        k -= 1
    if k < 0:
        return False
    point = points[k]
    del points[k:]  # the newer ones hold marks that now come after late ones
    s.settled, s.settled_hi = point.settled, point.settled_hi
    s.pairing = {}
    for b, total, paired, irregular, stack in point.pairing:
        p = s.pairing[b] = _Pairing()
        p.total, p.paired, p.irregular, p.stack = total, paired, irregular, list(stack)
    s.loads.cut(point.n_loads)
    return True


def _settle_in_pieces(s: _RankStream) -> list[_RankStream]:
    """:func:`_settle_chunk` of one stream, its new marks taken a piece at a time as a
    running job's arrive (each piece carries the open starts of the ones before). A piece
    ends before a mark later than every mark before it, so that no mark of the next piece
    comes before one taken. New marks that did not arrive in time order (two processes of
    one rank, each writing its own file) are taken in time order instead
    (:func:`_settle_in_time_order`) when the stream is paired from its first mark; else in
    one pass (the stream is paired again from its first mark if it must be, as for marks
    that arrive late)."""
    n = len(s.pair_ts)
    if n - s.settled > _settle_whole_max():
        ts = np.frombuffer(s.pair_ts, dtype=np.float64)[s.settled :]
        in_order = bool((ts[1:] >= ts[:-1]).all())
        del ts
        if not in_order:
            if s.pairing:
                return _settle_chunk([s])
            _settle_in_time_order(s)
            return []
    while n - s.settled > _settle_whole_max():
        ts = np.frombuffer(s.pair_ts, dtype=np.float64)
        stop = s.settled + _SETTLE_PIECE
        newest = float(ts[s.settled : stop].max())
        after = ts[stop : stop + _SETTLE_PIECE // 2]
        # the next piece's first mark must be later than this one's newest, and no later
        # mark earlier (checked by the pass that takes it: else paired again, whole)
        later = np.flatnonzero(after > newest)
        del ts, after
        if not len(later):
            break
        late = _settle_chunk([s], stop + int(later[0]))
        if late:
            return late
    return _settle_chunk([s])


def _settle_in_time_order(s: _RankStream) -> None:
    """Pair all the marks of ``s`` (paired from its first mark: no pairing yet) a piece of
    :data:`_SETTLE_PIECE` at a time in time order, whatever order they arrived in: what one
    pass over all of them gives (it sorts them by time too, stably: marks of one time in
    the order they arrived), without a dozen temporary columns of two million marks. A
    piece ends before a time later than every time in it (marks of one time are in one
    piece), so each piece takes its bucket's marks in the order the one pass takes them and
    carries the open starts over, as a running job's next marks do."""
    ts_all = np.frombuffer(s.pair_ts, dtype=np.float64)
    code_all = np.frombuffer(s.pair_code, dtype=np.int32)
    n = len(ts_all)
    order = np.argsort(ts_all, kind="stable")
    if n < 2**31:  # kept through the pieces: half the bytes
        order = order.astype(np.int32)
    s.buckets, s.open = {}, {}
    a = 0
    while a < n:
        stop = min(a + _SETTLE_PIECE, n)
        while stop < n:  # past the marks of the piece's last time
            more = ts_all[order[stop : stop + _SETTLE_PIECE]]
            k = int(np.searchsorted(more, ts_all[order[stop - 1]], side="right"))
            stop += k
            if k < len(more):
                break
        at = order[a:stop]
        piece_ts, piece_code = ts_all[at], code_all[at]
        del at
        if not s.pairing:  # the first piece
            late = _settle_columns(
                [s], piece_ts, piece_code, [stop], [0], resumed=False, fresh=[True], upto=stop
            )
        else:
            starts = [(b, p.stack) for b, p in s.pairing.items() if p.stack]
            open_ts = np.array([t for _, stack in starts for t in stack], np.float64)
            open_code = np.array([2 * b + 1 for b, stack in starts for _ in stack], np.int32)
            late = _settle_columns(
                [s],
                np.concatenate((open_ts, piece_ts)),
                np.concatenate((open_code, piece_code)),
                [len(open_ts) + stop - a],
                [len(open_ts)],
                resumed=True,
                fresh=[False],
                upto=stop,
            )
        if late:  # (never: each piece is later than the last) paired whole, as before
            s.settled, s.settled_hi, s.pairing, s.loads = 0, -math.inf, {}, _Growing()
            s.pair_points = []
            _settle_chunk([s])
            return
        a = stop


def _read_pairing(s: _RankStream) -> None:
    """``s.buckets`` and ``s.open`` from its pairing (buckets in order of first sight)."""
    s.buckets, s.open = {}, {}
    names = list(s.names)
    for b, p in sorted(s.pairing.items()):
        _read_bucket(s, names[b] if b else DATA_LOADING, p)


def _read_bucket(s: _RankStream, name: str, p: _Pairing) -> None:
    """``s.buckets`` and ``s.open`` of bucket ``name`` (``s.names``'s name of the pairing's
    code: the callers list the names once, not once per bucket, which made a job of a custom
    name per step quadratic: 1.8 s for 20,000 names)."""
    if p.paired and (p.total > 0 or p.irregular):
        s.buckets[name] = p.total
    if p.stack:
        s.open[name] = list(p.stack)


def _settle_chunk(todo: list[_RankStream], upto: int | None = None) -> list[_RankStream]:
    """One vectorised pass; returns the streams whose new marks came out of time order
    (left as they were). ``upto``: of a single stream, its marks before this index only."""
    if len(todo) == 1 and not todo[0].pairing:  # one stream from its first mark: in place
        s = todo[0]
        s.buckets, s.open = {}, {}
        if not len(s.pair_ts):
            return []
        top = len(s.pair_ts) if upto is None else upto
        return _settle_columns(
            todo,
            np.frombuffer(s.pair_ts, dtype=np.float64)[:top],
            np.frombuffer(s.pair_code, dtype=np.int32)[:top],
            [top],
            [0],
            resumed=False,
            fresh=[True],
            upto=top,
        )
    for s in todo:
        if s.settled:  # what the stream may have to go back to (see _rewind)
            s.pair_points.append(_PairPoint(s))
            if len(s.pair_points) > PAIR_POINTS:
                del s.pair_points[0]
    marks, codes = array("d"), array("i")
    counts: list[int] = []
    carried: list[int] = []
    resumed = False
    fresh = [not s.pairing for s in todo]  # paired from their first mark (never late)
    for s, first_pass in zip(todo, fresh, strict=True):
        if first_pass:
            s.buckets, s.open = {}, {}
        before = len(marks)
        for b, p in s.pairing.items():  # each bucket's open starts, before anything new
            if p.stack:
                marks.extend(p.stack)
                codes.extend([2 * b + 1] * len(p.stack))
        carried.append(len(marks) - before)
        if upto is not None:  # (one stream)
            marks += s.pair_ts[s.settled : upto]
            codes += s.pair_code[s.settled : upto]
        else:
            marks += _tail(s.pair_ts, s.settled)
            codes += s.pair_code[s.settled :] if s.settled else s.pair_code
        counts.append(len(marks) - before)
        resumed = resumed or s.settled > 0
    if not len(marks):
        return []
    ts = np.frombuffer(marks, dtype=np.float64)
    code = np.frombuffer(codes, dtype=np.int32)
    return _settle_columns(todo, ts, code, counts, carried, resumed=resumed, fresh=fresh, upto=upto)


def _settle_columns(
    todo: list[_RankStream],
    ts: F64,
    code: npt.NDArray[np.int32],
    counts: list[int],
    carried: list[int],
    *,
    resumed: bool,
    fresh: list[bool],
    upto: int | None = None,
) -> list[_RankStream]:
    """The rest of :func:`_settle_chunk`: ``ts``/``code`` hold each stream's carried open
    starts (``carried`` each) then its new marks, ``counts`` in all; ``resumed``: some
    stream goes on from marks taken before; ``fresh``: which streams are paired from
    their first mark; ``upto``: where the marks taken of a single stream end (else at its
    last). Neither column is written to."""
    which, seg = _segments(counts)  # every stream has new marks
    newest = np.maximum.reduceat(ts, seg).tolist()  # (the carried starts are older)
    late: set[int] = set()
    if resumed:  # the new marks' first time, against the newest taken
        arrived = ts.copy()  # the new marks (the carried starts left out)
        for i, n in zip(which, carried, strict=True):
            arrived[seg[i] : seg[i] + n] = math.inf
        firsts = np.minimum.reduceat(arrived, seg).tolist()
        late = {i for i, t in zip(which, firsts, strict=True) if not t > todo[i].settled_hi}
    bucket = code >> 1
    is_start = (code & 1).astype(bool)
    first = np.ones(len(ts), np.bool_)
    # by stream, bucket, then time; at equal times, starts first
    if len(todo) == 1:  # a large stream has a pass of its own: no owners
        if not (int(bucket.min()) == int(bucket.max()) and bool((ts[1:] > ts[:-1]).all())):
            order = np.lexsort((~is_start, ts, bucket))
            ts, bucket, is_start = ts[order], bucket[order], is_start[order]
            del order
        # else one bucket, every time later than the one before (a data load per step at
        # distinct times): in that order already, and not copied (2 M marks: 50 MB less)
        first[1:] = bucket[1:] != bucket[:-1]
    else:
        owner = np.repeat(np.arange(len(todo)), counts)
        order = np.lexsort((~is_start, ts, bucket, owner))
        ts, bucket, is_start, owner = ts[order], bucket[order], is_start[order], owner[order]
        first[1:] = (bucket[1:] != bucket[:-1]) | (owner[1:] != owner[:-1])
        del order
    heads = np.flatnonzero(first)  # each (stream, bucket)'s marks: a group
    group = np.cumsum(first, dtype=np.int32)  # (fewer groups than 2**31: marks in memory)
    group -= 1
    # Whether a mark is at an odd place in its group (the 2nd, 4th...), as booleans: a
    # position's parity against its group's first's (no column of positions: of 2 M marks,
    # 2 MB instead of three temporaries of 16).
    odd_place = np.zeros(len(ts), np.bool_)
    odd_place[1::2] = True
    odd = odd_place != (heads % 2 == 1)[group]
    del odd_place
    last = np.concatenate((heads[1:] - 1, [len(ts) - 1]))
    heads_owner = [0] * len(heads) if len(todo) == 1 else owner[heads].tolist()
    heads_bucket = bucket[heads].tolist()
    # Each group's pairing so far (its seconds are summed on, in time order).
    pairings = [todo[i].pairing.get(b) for i, b in zip(heads_owner, heads_bucket, strict=True)]
    # The common case, vectorised: each group's marks go start, end, start, end...
    irregular = np.zeros(len(heads), np.bool_)
    irregular[group[is_start == odd]] = True  # a start at an odd place, an end at an even
    regular = ~irregular[group]
    ends = np.flatnonzero(regular & odd)
    d = np.maximum(ts[ends] - ts[ends - 1], 0.0)
    so_far = np.array([0.0 if p is None else p.total for p in pairings])
    sums = np.bincount(
        np.concatenate((np.arange(len(heads)), group[ends])),
        weights=np.concatenate((so_far, d)),
        minlength=len(heads),
    ).tolist()
    n_ends = np.bincount(group[ends], minlength=len(heads))
    offsets = (np.cumsum(n_ends) - n_ends).tolist()
    n_ends_l = n_ends.tolist()
    open_at = (~irregular & ~odd[last]).tolist()
    name_lists: dict[int, list[str]] = {}  # each stream's bucket names, by code
    for g, (h, at, s_i, b, irr, kept) in enumerate(
        zip(
            heads.tolist(),
            last.tolist(),
            heads_owner,
            heads_bucket,
            irregular.tolist(),
            pairings,
            strict=True,
        )
    ):
        if s_i in late:
            continue
        s = todo[s_i]
        p = kept if kept is not None else s.pairing.setdefault(b, _Pairing())
        if irr:  # nested or unpaired marks: a stack
            stack: list[float] = []
            got: list[float] = []
            for x, opens in zip(
                ts[h : at + 1].tolist(), is_start[h : at + 1].tolist(), strict=True
            ):
                if opens:
                    stack.append(x)
                elif stack:
                    got.append(max(0.0, x - stack.pop()))
            total = p.total
            for x in got:
                total += x
            p.total, p.paired, p.irregular, p.stack = total, p.paired or bool(got), True, stack
            if b == 0:
                s.loads.extend(np.array(got))
        else:
            p.total = sums[g]
            p.paired = p.paired or n_ends_l[g] > 0
            p.stack = [float(ts[at])] if open_at[g] else []
            if b == 0:
                s.loads.extend(d[offsets[g] : offsets[g] + n_ends_l[g]])
        if fresh[s_i] and ((p.paired and (p.total > 0 or p.irregular)) or p.stack):
            names = name_lists.get(s_i)
            if names is None:
                names = name_lists[s_i] = list(todo[s_i].names)
            # (its buckets come in order: all of them are here)
            _read_bucket(s, names[b] if b else DATA_LOADING, p)
    for i, s in enumerate(todo):
        if i not in late:
            s.settled = len(s.pair_ts) if upto is None else upto
            s.settled_hi = max(s.settled_hi, newest[i])
            if not fresh[i]:
                _read_pairing(s)
    return [todo[i] for i in sorted(late)]


def _append_codes(mine: _RankStream, theirs: _RankStream) -> None:
    """Append ``theirs``'s pair codes to ``mine``'s, in ``mine``'s bucket numbering.

    A shared read's worker numbers its buckets on its own; its marks (a million in half
    of a large data-load log) are renumbered with one table lookup, not one Python call
    each. Buckets new to ``mine`` are numbered in the order of their first mark, as
    taking the marks one by one would."""
    if not len(theirs.pair_code):
        return
    codes = np.frombuffer(theirs.pair_code, dtype=np.int32)
    buckets = codes >> 1
    seen, first = np.unique(buckets, return_index=True)
    names = {i: name for name, i in theirs.names.items()}
    remap = np.zeros(int(seen[-1]) + 1, np.int32)
    for b in seen[np.argsort(first)].tolist():  # in order of first sight
        remap[b] = mine.code(names[b])
    mine.pair_code.frombytes((2 * remap[buckets] + (codes & 1)).astype(np.int32).tobytes())


def _stream_key(attempt: object, rank: object) -> tuple[str | None, int]:
    """The stream of a writer: attempt ids as text (0 and "0" are one), rank None is 0."""
    return (None if attempt is None else str(attempt), cast("int | None", rank) or 0)


def _pid(key: tuple[object, object, object]) -> int | None:
    return cast("int | None", key[2])


def _role(kind: str) -> int:
    if kind == Kind.STEP_START:
        return _STEP_START
    if kind == Kind.STEP_END:
        return _STEP_END
    if kind in (Kind.DATA_LOADING_START, Kind.DATA_LOADING_END):
        return _LOAD
    split = interval_base(kind)
    if split is not None and split[0] not in NAMED_INTERVAL_KINDS:
        return _MARK  # its bucket is its kind's
    if kind == Kind.SECTION_SUMMARY or split is not None:
        return _ROW  # a named interval (its bucket is in ``name``), a summary
    return _SEE


# What ingest does with each kind (indexed by ``Batch.kind``: an unknown kind, -1, is the
# last, only seen). The last three are "seen" (a heartbeat, a lifecycle event...): they stretch the
# stream's span and say its process is alive.
_STEP_START, _STEP_END, _LOAD, _MARK, _SEE, _ROW = range(6)
_N_ROLES = 6
_LOAD_START_CODE = KIND_CODE[Kind.DATA_LOADING_START]
_ROLE = np.array([*(_role(k) for k in KIND_NAMES), _SEE], np.int8)
#: ``(base, is_start)`` of each interval kind, by kind code.
_SPLIT: dict[int, tuple[str, bool]] = {
    i: split for i, k in enumerate(KIND_NAMES) if (split := interval_base(k)) is not None
}
#: The buckets of unnamed interval marks (role ``_MARK``), and by kind code: each mark's
#: index in it and whether it is a start.
_MARK_BASES = sorted({_SPLIT[i][0] for i in range(len(KIND_NAMES)) if _ROLE[i] == _MARK})
_MARK_BASE = np.array(
    [_MARK_BASES.index(_SPLIT[i][0]) if _ROLE[i] == _MARK else 0 for i in range(len(KIND_NAMES))],
    np.int64,
)
_MARK_STARTS = np.array(
    [int(_SPLIT[i][1]) if _ROLE[i] == _MARK else 0 for i in range(len(KIND_NAMES))], np.int32
)


_blocking = attrgetter("blocking")
_host = attrgetter("host")
_EMPTY_CODES = np.zeros(0, np.int32)


def _is_none(value: object) -> bool:
    return value is None


class RankTracker:
    """Per-(attempt, rank) columns, fed every event the Accountant ingests."""

    def __init__(self) -> None:
        self.streams: dict[tuple[str | None, int], _RankStream] = {}
        self.version = 0  # bumped by every change (ingest, absorb)
        # Per rank (its step times, its data loads) and per attempt (step times): the
        # columns joined over streams, taken again only where they grew.
        self._joined: dict[tuple[str, object], _Joined] = {}
        # The last analysis and what it was asked: (version, now, options, attempts, answer).
        self._analysis: (
            tuple[
                int,
                float | None,
                RankOptions,
                list[tuple[str, float, float, bool, bool]],
                RankAnalysis,
            ]
            | None
        ) = None

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle keeps: the streams packed by field (see ``Ingestor.__getstate__``),
        when nothing was derived from them yet (a parallel read's worker): what a query
        derives may be shared between streams, and is pickled as it is."""
        state = dict(vars(self))
        if not self._joined and self._analysis is None:
            state["streams"] = (list(self.streams), pack(list(self.streams.values())))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state["streams"], tuple):
            keys, packed = state["streams"]
            state["streams"] = dict(zip(keys, unpack(packed), strict=True))
        vars(self).update(state)

    def _stream(self, key: tuple[str | None, int]) -> _RankStream:
        s = self.streams.get(key)
        if s is None:
            s = self.streams[key] = _RankStream(key[0], key[1])
        return s

    def absorb(self, other: RankTracker) -> None:
        """Add what ``other`` read (later files of the same job)."""
        for key, theirs in other.streams.items():
            mine = self.streams.get(key)
            if mine is None:
                self.streams[key] = theirs
                continue
            mine.host = mine.host or theirs.host
            for name in ("step_ts", "step_no", "end_ts", "extra_ts", "pair_ts"):
                getattr(mine, name).extend(getattr(theirs, name))
            _append_codes(mine, theirs)
            for name, log in theirs.sections.items():
                m = mine.sections.setdefault(name, _SectionLog())
                m.count += log.count
                m.parts.extend(log.parts)
                m.periods = sorted(m.periods + log.periods)
                m.opens = sorted(m.opens + log.opens)
                m.last = max(m.last, log.last)
                m.see_open(log.open_ts, log.open_since)
            mine.first_ts = min(mine.first_ts, theirs.first_ts)
            mine.last_ts = max(mine.last_ts, theirs.last_ts)
            mine.worker_pids |= theirs.worker_pids
            for pid, ts in theirs.pid_seen.items():
                mine.pid_seen[pid] = max(ts, mine.pid_seen.get(pid, -math.inf))
            mine.changes += 1
        self.version += 1

    def ingest(self, events: list[Event], job: str | None) -> None:
        """Route ``events`` (consecutive lines of one source) into the columns."""
        self.ingest_batch(Batch(events), job)

    def ingest_batch(self, batch: Batch, job: str | None) -> None:
        """Route a run of events (consecutive lines of one source), as columns, into the
        streams' columns; ``job``: keep only its events (``None``: all).

        Steps, step ends, blocking loads and heartbeats (the bulk) are cut out of the
        batch's columns for all its streams at once (a batch of 10,000 attempts' files
        costs a few numpy calls, and a few appends per stream); only the rare kinds
        (section summaries, named intervals, overlapped loads) are looked at one event
        at a time. Everything is paired and summed at query time, vectorised. A batch
        of a few events takes :meth:`_ingest_few` instead (same result).
        """
        if not batch.n:
            return
        if batch.n <= SMALL_RUN:
            self._ingest_few(batch.events, job)
            return
        keep = None if job is None else batch.same_job(job)
        keys = batch.keys
        group = batch.group
        if keep is None:
            present = range(len(keys))  # group indices are in order of first appearance
        else:
            kept_groups = group[keep]
            if not len(kept_groups):
                return
            uniq, first = np.unique(kept_groups, return_index=True)
            present = uniq[np.argsort(first)].tolist()
        # One stream per (attempt, rank), created in order of first appearance; several
        # raw keys may share one (attempt 0 and "0", rank None and 0, two pids).
        slot_of: dict[int, int] = {}  # group -> slot
        slot_by_key: dict[tuple[str | None, int], int] = {}
        slots: list[_RankStream] = []
        for g in present:
            attempt, rank, _ = keys[g]
            key = _stream_key(attempt, rank)
            i = slot_by_key.get(key, -1)
            if i < 0:
                i = slot_by_key[key] = len(slots)
                slots.append(self._stream(key))
            slot_of[g] = i
        lookup = np.full(len(keys), len(slots), np.int32)  # len(slots): not kept
        for g, i in slot_of.items():
            lookup[g] = i
        slot = lookup[group]
        if keep is not None:
            slot[~keep] = len(slots)
        self._hosts(batch, slot, slots)
        self._ingest_columns(batch, slot, slots, slot_of)
        self.version += 1

    def _ingest_columns(
        self,
        batch: Batch,
        slot: npt.NDArray[np.int32],
        slots: list[_RankStream],
        slot_of: dict[int, int],
    ) -> None:
        """Add the batch's events to the streams ``slots`` (``slot``: each event's; one
        past the last: not kept), all streams at once: each column is cut out of the
        batch's for every stream in one pass, and handed to each stream as bytes."""
        n_slots = len(slots)
        events, ts, group, keys = batch.events, batch.ts, batch.group, batch.keys
        roles = _ROLE[batch.kind]
        dropped = slot == n_slots
        if dropped.any():
            roles[dropped] = _N_ROLES  # not kept: no role
        by_role = np.argsort(roles, kind="stable")  # each role's events, in order
        ends = [0, *np.cumsum(np.bincount(roles, minlength=_N_ROLES + 1)).tolist()]

        def of(role: int) -> npt.NDArray[np.intp]:
            return by_role[ends[role] : ends[role + 1]]

        starts = of(_STEP_START)
        if len(starts):
            no, ok = batch.steps(starts)
            # out of range: the accounting reports it (a diagnostic); not a step here
            if not ok.all() or no.min() < -MAX_INT or no.max() > MAX_INT:
                ok &= (no >= -MAX_INT) & (no <= MAX_INT)
                starts, no = starts[ok], no[ok]
            self._hand(slots, slot, starts, ("step_ts", ts[starts]), ("step_no", no))
            if len(starts):
                one = len(keys) == 1  # (else the groups present, in order: O(n), no sort)
                present = [0] if one else np.flatnonzero(np.bincount(group[starts])).tolist()
                for g in present:
                    slots[slot_of[g]].worker_pids.add(_pid(keys[g]))
        step_ends = of(_STEP_END)
        self._hand(slots, slot, step_ends, ("end_ts", ts[step_ends]))
        # Marks to pair: blocking loads, other unnamed intervals, and single events (rows).
        loads = of(_LOAD)
        rows = of(_ROW)
        seen = by_role[ends[_MARK] : ends[_ROW + 1]]  # heartbeats, lifecycle, marks, rows
        load_codes = _EMPTY_CODES
        if len(loads):
            blocking = (
                []
                if batch.loads_plain()
                else list(map(_blocking, map(events.__getitem__, loads.tolist())))
            )
            if blocking.count(None) != len(blocking):  # blocking or overlapped: single events
                plain = np.fromiter(map(_is_none, blocking), np.bool_, len(blocking))
                rows = np.sort(np.concatenate((rows, loads[~plain])), kind="stable")  # two runs
                seen = np.concatenate((seen, loads[~plain]))
                loads = loads[plain]
            load_codes = (batch.kind[loads] == _LOAD_START_CODE).astype(np.int32)
        # Buckets are numbered per stream in the order they first appear (marks and rows
        # alike): the first mark of each (stream, bucket) and the rows, in order.
        marks = of(_MARK)
        mark_codes = _EMPTY_CODES
        row_at: list[int] = []
        row_codes: list[int] = []
        if len(marks) or len(rows):
            mark_kind = batch.kind[marks]
            mark_base = _MARK_BASE[mark_kind]
            mark_key = slot[marks].astype(np.int64) * len(_MARK_BASES) + mark_base
            uniq, first, inverse = np.unique(mark_key, return_index=True, return_inverse=True)
            firsts = marks[first]
            todo = sorted(
                [
                    *zip(
                        firsts.tolist(),
                        slot[firsts].tolist(),
                        mark_base[first].tolist(),
                        range(len(uniq)),
                        strict=True,
                    ),
                    *((i, int(slot[i]), -1, -1) for i in rows.tolist()),
                ]
            )
            codes = [0] * len(uniq)
            for i, slot_i, base, j in todo:
                s = slots[slot_i]
                if j >= 0:
                    codes[j] = s.code(_MARK_BASES[base])
                else:
                    code = self._other(s, events[i])
                    if code is not None:
                        row_at.append(i)
                        row_codes.append(code)
            bucket = np.array(codes, np.int32)[inverse.reshape(-1)]
            mark_codes = 2 * bucket + _MARK_STARTS[mark_kind]
        pair_at = np.concatenate((loads, marks, np.array(row_at, np.intp)))
        pair_code = np.concatenate((load_codes, mark_codes, np.array(row_codes, np.int32)))
        if len(pair_at):
            order = np.argsort(pair_at, kind="stable")  # in the order they were written
            pair_at, pair_code = pair_at[order], pair_code[order]
            self._hand(slots, slot, pair_at, ("pair_ts", ts[pair_at]), ("pair_code", pair_code))
        if len(seen):
            self._seen(slots, slot_of, batch, seen)
        for s in slots:
            s.changes += 1

    @staticmethod
    def _hand(
        slots: list[_RankStream],
        slot: npt.NDArray[np.int32],
        at: npt.NDArray[np.intp],
        *columns: tuple[str, npt.NDArray[Any]],
    ) -> None:
        """Append the values of the events at ``at`` (in order) to each one's stream's
        ``columns`` (name, values): one cut of bytes per stream."""
        if not len(at):
            return
        if len(slots) == 1:
            for name, values in columns:
                getattr(slots[0], name).frombytes(values.tobytes())
            return
        owner = slot[at]
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=len(slots))
        bounds = np.cumsum(counts).tolist()
        present = np.flatnonzero(counts).tolist()
        for name, values in columns:
            data = values[order].tobytes()
            width = values.itemsize
            for i in present:
                a = (bounds[i] - int(counts[i])) * width
                getattr(slots[i], name).frombytes(data[a : bounds[i] * width])

    @staticmethod
    def _seen(
        slots: list[_RankStream],
        slot_of: dict[int, int],
        batch: Batch,
        at: npt.NDArray[np.intp],
    ) -> None:
        """Events other than steps and blocking loads: each stream's span, and the newest
        event of each process (writer)."""
        t = batch.ts[at]
        if len(batch.keys) == 1:
            newest = [(0, float(t.min()), float(t.max()))]
        else:
            g = batch.group[at]
            order = np.lexsort((t, g))
            g, t = g[order], t[order]
            head = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
            tail = np.concatenate((head[1:], [len(g)])) - 1
            newest = list(zip(g[head].tolist(), t[head].tolist(), t[tail].tolist(), strict=True))
        keys = batch.keys
        for g_i, lo, hi in newest:
            s = slots[slot_of[g_i]]
            s.first_ts, s.last_ts = min(s.first_ts, lo), max(s.last_ts, hi)
            pid = _pid(keys[g_i])
            if hi > s.pid_seen.get(pid, -math.inf):
                s.pid_seen[pid] = hi

    def _ingest_few(self, events: Sequence[Event | LeanEvent], job: str | None) -> None:
        """:meth:`ingest_batch` one event at a time (a short run)."""
        writer: tuple[object, object, object] | None = None
        s: _RankStream | None = None
        changed: list[_RankStream] = []
        step_start, step_end, heartbeat = Kind.STEP_START, Kind.STEP_END, Kind.HEARTBEAT
        load_start = Kind.DATA_LOADING_START
        loads = (load_start, Kind.DATA_LOADING_END)
        for ev in events:
            if job is not None and ev.job != job:
                continue
            if s is None or writer != (ev.attempt, ev.rank, ev.pid):
                writer = (ev.attempt, ev.rank, ev.pid)
                s = self._stream(_stream_key(ev.attempt, ev.rank))
                changed.append(s)
            if s.host is None:
                s.host = ev.host
            kind = ev.kind
            if kind == step_start:
                step = ev.step
                # out of range: the accounting reports it (a diagnostic); not a step here
                if step is None or not -MAX_INT <= step <= MAX_INT:
                    continue
                s.step_ts.append(ev.ts)
                s.step_no.append(step)
                s.worker_pids.add(ev.pid)
            elif kind == step_end:
                s.end_ts.append(ev.ts)
            elif kind in loads and ev.blocking is None:
                s.pair_ts.append(ev.ts)
                s.pair_code.append(int(kind == load_start))  # data_loading (index 0), start
            else:
                ts = ev.ts
                s.first_ts = min(s.first_ts, ts)
                s.last_ts = max(s.last_ts, ts)
                if ts > s.pid_seen.get(ev.pid, -math.inf):
                    s.pid_seen[ev.pid] = ts
                if kind != heartbeat:
                    code = self._other(s, ev)
                    if code is not None:
                        s.pair_ts.append(ts)
                        s.pair_code.append(code)
        for s in changed:
            s.changes += 1
        if changed:
            self.version += 1

    @staticmethod
    def _hosts(
        batch: Batch,
        slot: npt.NDArray[np.int32],
        slots: list[_RankStream],
    ) -> None:
        """A stream's host: that of its first event that names one (however the log is
        cut in batches). Looked for only while a stream has none: first in each stream's
        first event (where a recorder's file names it), then in all its events."""
        missing = {i for i, s in enumerate(slots) if s.host is None}
        if not missing:
            return
        events = batch.events
        kept = np.flatnonzero(slot < len(slots))
        owner = slot[kept]
        runs = kept[np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))]
        unnamed: set[int] = set()
        for i, pos in zip(slot[runs].tolist(), runs.tolist(), strict=True):
            if i in missing:
                missing.discard(i)
                host = events[pos].host
                if host is None:
                    unnamed.add(i)
                else:
                    slots[i].host = host
                if not missing:
                    break
        if not unnamed:
            return
        hosts = list(map(_host, events))
        if hosts.count(None) == batch.n:  # no event of the batch names a host
            return
        named = np.fromiter(map(is_not, hosts, repeat(None)), np.bool_, batch.n)
        named &= np.isin(slot, list(unnamed))
        at = np.flatnonzero(named)
        owner, first = np.unique(slot[at], return_index=True)
        for i, pos in zip(owner.tolist(), at[first].tolist(), strict=True):
            slots[i].host = hosts[pos]

    @staticmethod
    def _other(s: _RankStream, ev: Event | LeanEvent) -> int | None:
        """A section summary, an interval mark other than a blocking data load, or an
        overlapped load: its pair code when it is to be paired, else ``None``."""
        kind = ev.kind
        if kind == Kind.SECTION_SUMMARY:
            log = s.sections.get(ev.name or "")
            if log is None:
                log = s.sections[ev.name or ""] = _SectionLog()
            n = ev.count or 0
            if n:
                s.worker_pids.add(ev.pid)
            log.count += n
            log.parts.append(ev.seconds or 0.0)
            p50 = (ev.quantiles or {}).get("p50")
            if n:
                log.periods.append((ev.ts, n, math.nan if p50 is None else p50))
            if ev.open_since is not None:
                log.opens.append((ev.ts, ev.open_since))
            if ev.last is not None:
                log.last = max(log.last, ev.last)
            log.see_open(ev.ts, ev.open_since)
            return None
        split = interval_base(kind)
        if split is None:
            return None
        base, is_start = split
        if base == "data_loading" and ev.blocking is False:
            s.extra_ts.append(ev.ts)  # overlapped loads: progress, but not a wait
            return None
        return 2 * s.code(bucket_of(base, ev.name)) + is_start

    # ------------------------------------------------------------------ query

    def progress(self, attempt: str) -> tuple[float | None, float | None, float | None]:
        """``(newest progress, newest other event of a process that made progress, typical
        step time)`` of ``attempt`` over every rank (``None`` when unknown)."""
        last: float | None = None
        seen: float | None = None
        streams = [s for s in self.streams.values() if s.attempt == attempt]
        _derive([s for s in streams if s.derived_at != s.changes])
        for s in streams:
            d = s.derived()
            if d.n_progress and (last is None or d.progress_last > last):
                last = d.progress_last
            alive = s.alive_until()
            if alive is not None and (seen is None or alive > seen):
                seen = alive
        joined = self._joined.setdefault(("attempt", attempt), _Joined())
        times, _ = joined.join([s.covered.times for s in streams])
        return last, seen, joined.median(times)

    def _changed(self) -> tuple[list[_RankStream], int]:
        """The streams that changed since the last :meth:`derive`, and their values."""
        changed = [s for s in self.streams.values() if s.derived_at != s.changes]
        values = sum(
            len(s.step_ts) + len(s.end_ts) + len(s.pair_ts) + len(s.extra_ts) for s in changed
        )
        return changed, values

    def pending(self) -> tuple[int, int]:
        """``(values, streams)``: what :meth:`derive` would go through now (the values that
        arrived since the last call, and the streams they arrived in)."""
        changed, values = self._changed()
        return values, len(changed)

    def derive(self) -> int:
        """Derive and pair what arrived since the last call (the first thing
        :meth:`analyze` does; each stream once per change, all changed streams at once).

        The :class:`~badput.engine.Accountant` calls it before a report's partition, so
        that the temporary columns of a cold pass over many streams are freed before the
        partition's are made, or, for a few large streams (mostly numpy: a million steps
        with their data loads), in a thread beside the partition. It touches only this
        tracker's streams. Returns how many values it went through (what its temporaries
        were made of).
        """
        changed, values = self._changed()
        _derive(changed)
        _settle(list(self.streams.values()))
        return values

    def analyze(
        self,
        attempts: list[tuple[str, float, float, bool, bool]],
        now: float | None,
        options: RankOptions,
    ) -> RankAnalysis:
        """The per-rank view, the stragglers and the stalls.

        ``attempts``: (id, start, end, ended, completed) of every attempt, as the
        partition reconstructed them (``completed``: ended by ``job_end``, so the
        time after its last progress is shutdown, not a stall); ``now`` (live) marks
        a stall still going on. Asked again with nothing changed, the same answer is
        given without computing it again.
        """
        kept = self._analysis
        if (
            kept is not None
            and kept[0] == self.version
            and kept[1] == now
            and kept[2] == options
            and kept[3] == attempts
        ):
            found = kept[4]
        else:
            found = self._analyze(attempts, now, options)
            self._analysis = (self.version, now, options, list(attempts), found)
        return RankAnalysis(list(found.ranks), list(found.stragglers), list(found.stalls))

    def _analyze(
        self,
        attempts: list[tuple[str, float, float, bool, bool]],
        now: float | None,
        options: RankOptions,
    ) -> RankAnalysis:
        self.derive()
        everything = list(self.streams.values())
        by_rank: dict[int, list[_RankStream]] = {}
        for s in everything:
            by_rank.setdefault(s.rank, []).append(s)
        # Only ranks that did something count as ranks (a launcher writes lifecycle only).
        workers = {
            r: ss
            for r, ss in by_rank.items()
            if any(len(s.step_ts) or len(s.pair_ts) or len(s.extra_ts) or s.sections for s in ss)
        }
        joined = self._joined
        ordered = {r: _in_time_order(ss) for r, ss in workers.items()}
        sections = {
            r: _sections_of(ss, options, joined.setdefault(("loads", r), _Joined()), ordered[r])
            for r, ss in workers.items()
        }
        _score_relative(sections)
        stragglers = _stragglers(sections, workers, options)
        typical_all: list[float] = []
        views: dict[int, RankView] = {}
        for r, ss in sorted(workers.items()):
            view = _rank_view(
                r, ss, sections[r], joined.setdefault(("steps", r), _Joined()), ordered[r]
            )
            views[r] = view
            if view.typical_step_time is not None:
                typical_all.append(view.typical_step_time)
        typical = float(np.median(typical_all)) if typical_all else None
        threshold = max(options.stall_factor * typical if typical else 0.0, options.stall_floor)
        stalls: list[Stall] = []
        # A log without attempt ids (hand-written, imported) of a single attempt: its
        # streams have no id; with several attempts they cannot be told apart by id.
        idless = len(attempts) == 1 and not any(
            s.attempt == attempts[0][0] for s in self.streams.values()
        )
        # Each attempt's streams, gathered in one pass (a scan per attempt was quadratic:
        # 20 s of a report at 10,000 attempts).
        by_attempt: dict[str | None, list[_RankStream]] = {}
        for s in self.streams.values():
            if s.rank in workers:
                by_attempt.setdefault(s.attempt, []).append(s)
        for attempt, start, end, ended, completed in attempts:
            if idless:
                streams = [
                    s
                    for s in self.streams.values()
                    if s.rank in workers and (s.attempt == attempt or s.attempt is None)
                ]
            else:
                streams = list(by_attempt.get(attempt, ()))
            if streams and _may_stall(streams, end, completed, threshold):
                stalls.extend(
                    _stalls(
                        attempt,
                        streams=streams,
                        start=start,
                        end=end,
                        ended=ended,
                        completed=completed,
                        now=now,
                        threshold=threshold,
                        typical=typical,
                    )
                )
        outliers = _outliers(views, stragglers, stalls, options.min_excess)
        ranks = [
            RankView(**{**v.__dict__, "outlier": outliers.get(r, [])}) for r, v in views.items()
        ]
        return RankAnalysis(ranks, stragglers, stalls)


def _in_time_order(streams: list[_RankStream]) -> list[_RankStream]:
    """One rank's streams (its attempts) by their first event: the newest data loads last
    (the recent ones), and the running attempt's stream last, whose values are the only
    ones to grow (the store lists attempt 10 before attempt 2)."""
    if len(streams) < 2:
        return streams
    return sorted(streams, key=lambda s: s.derived().first_event)


def _sections_of(
    streams: list[_RankStream],
    options: RankOptions,
    joined: _Joined,
    ordered: list[_RankStream],
) -> dict[str, SectionView]:
    """Section logs of one rank, merged over its attempts (recent = the newest);
    ``joined``: its data loads so far, of its streams ``ordered`` in time."""
    merged: dict[str, _SectionLog] = {}
    for s in streams:
        for name, log in s.sections.items():
            m = merged.setdefault(name, _SectionLog())
            m.count += log.count
            m.parts.extend(log.parts)
            m.periods.extend(log.periods)
            m.see_open(log.open_ts, log.open_since)
    out: dict[str, SectionView] = {}
    for name, log in merged.items():
        good = sorted(
            p for p in log.periods if p[1] >= options.min_samples and not math.isnan(p[2])
        )
        recent = good[-1][2] if good else None
        best = min(p[2] for p in good) if good else None
        out[name] = SectionView(
            log.count,
            log.seconds,
            recent,
            best,
            None,
            best / recent if best is not None and recent else None,
            log.open_since,
        )
    loads, grew = joined.join([s.loads for s in ordered])
    if len(loads) >= options.min_samples and DATA_LOADING not in out:
        block = min(LOAD_BLOCK, max(options.min_samples, len(loads) // 4))
        n_full = len(loads) // block
        medians = joined.medians
        if not (grew and joined.block == block):
            medians.cut(0)  # the blocks are not those taken
        # the blocks taken that are as they were (a cut back loses those after it)
        medians.cut(min(len(medians), joined.kept // block))
        new = loads[len(medians) * block : n_full * block].reshape(-1, block)
        if len(new):
            medians.extend(np.median(new, axis=1))
        joined.block = block
        # (min: a NaN median is the least, as in np.minimum over the blocks taken in turn)
        best = float(medians.view().min()) if len(medians) else math.inf
        recent_l = float(np.median(loads[-block:]))
        best_l = float(min(best, recent_l)) if n_full else recent_l
        out[DATA_LOADING] = SectionView(
            len(loads),
            float(loads.sum()),
            recent_l,
            best_l,
            None,
            best_l / recent_l if recent_l > 0 else None,
        )
    return out


def _score_relative(sections: dict[int, dict[str, SectionView]]) -> None:
    """Fill each section's relative score: best recent median over ranks / this rank's."""
    names = {name for per in sections.values() for name in per}
    for name in names:
        recents = [
            per[name].recent_p50
            for per in sections.values()
            if name in per and per[name].recent_p50 is not None
        ]
        if len(recents) < 2:
            continue  # one rank has no one to compare with
        ref = min(r for r in recents if r is not None)
        for per in sections.values():
            view = per.get(name)
            if view is None or view.recent_p50 is None:
                continue
            rel = ref / view.recent_p50 if view.recent_p50 > 0 else 1.0
            per[name] = SectionView(**{**view.__dict__, "relative_score": rel})


def _stragglers(
    sections: dict[int, dict[str, SectionView]],
    workers: dict[int, list[_RankStream]],
    options: RankOptions,
) -> list[Straggler]:
    out: list[Straggler] = []
    refs: dict[str, float] = {}
    for per in sections.values():
        for name, v in per.items():
            if v.recent_p50 is not None and v.relative_score is not None:
                refs[name] = min(refs.get(name, math.inf), v.recent_p50)
    for r, per in sections.items():
        host = next((s.host for s in workers[r] if s.host), None)
        for name, v in sorted(per.items()):
            if v.recent_p50 is None:
                continue
            limit = options.straggler_threshold
            low_rel = v.relative_score is not None and v.relative_score < limit
            low_ind = v.individual_score is not None and v.individual_score < limit
            if not (low_rel or low_ind):
                continue
            ref = refs.get(name, v.best_p50 or v.recent_p50) if low_rel else v.best_p50
            ref = v.recent_p50 if ref is None else ref
            if v.recent_p50 - ref < options.min_excess:
                continue
            out.append(
                Straggler(r, host, name, v.relative_score, v.individual_score, v.recent_p50, ref)
            )
    out.sort(key=lambda x: (min(x.relative_score or 1.0, x.individual_score or 1.0), x.rank))
    return out


def _rank_view(
    r: int,
    streams: list[_RankStream],
    sections: dict[str, SectionView],
    joined: _Joined,
    ordered: list[_RankStream],
) -> RankView:
    """``joined``: the rank's step times so far, of its streams ``ordered`` in time."""
    derived = [s.derived() for s in streams]
    times, _ = joined.join([s.covered.times for s in ordered])
    lows = [d.step_lo for d in derived if d.step_lo is not None]
    highs = [d.step_hi for d in derived if d.step_hi is not None]
    buckets: dict[str, float] = {}
    for s in streams:
        for b, v in s.buckets.items():
            buckets[b] = buckets.get(b, 0.0) + v
    progress = [d.progress_last for d in derived if d.n_progress]
    return RankView(
        rank=r,
        host=next((s.host for s in streams if s.host), None),
        attempts=len({s.attempt for s in streams}),
        steps=sum(len(s.step_ts) for s in streams),
        typical_step_time=joined.median(times),
        data_loading_seconds=buckets.get(DATA_LOADING, 0.0),
        buckets=dict(sorted(buckets.items())),
        first_step=min(lows) if lows else None,
        last_step=max(highs) if highs else None,
        first_event=min(d.first_event for d in derived),
        last_event=max(d.last_event for d in derived),
        last_progress=max(progress) if progress else None,
        sections=dict(sorted(sections.items())),
    )


def _progress(s: _RankStream) -> F64:
    parts = [
        np.frombuffer(s.step_ts, dtype=np.float64),
        np.frombuffer(s.end_ts, dtype=np.float64),
        np.frombuffer(s.pair_ts, dtype=np.float64),
        np.frombuffer(s.extra_ts, dtype=np.float64),
        np.array([log.last for log in s.sections.values() if math.isfinite(log.last)]),
    ]
    return np.sort(np.concatenate(parts), kind="stable")  # runs in time order: merged


def _may_stall(streams: list[_RankStream], end: float, completed: bool, threshold: float) -> bool:
    """Whether :func:`_stalls` can find a stall in an attempt: ``False`` when some rank
    has no span without progress longer than ``threshold`` (so the ranks have none in
    common). Decided from each stream's first and last progress and longest gap, without
    looking at its progress times (an attempt of a few steps costs a few comparisons)."""
    if len(streams) == 1:  # the usual attempt of a single-process job
        d = streams[0].derived()
        if not d.n_progress:
            return False
        if completed:
            end = min(end, d.progress_last)
        if d.progress_last > end:
            return True
        return max(0.0, d.gap, end - d.progress_last) > threshold
    derived = {s.rank: s.derived() for s in streams}  # one per rank, as in _stalls
    firsts = [d.progress_first for d in derived.values() if d.n_progress]
    if not firsts:
        return False
    begin = min(firsts)
    if completed:
        end = min(end, max(d.progress_last for d in derived.values() if d.n_progress))
    for d in derived.values():
        if not d.n_progress:
            longest = end - begin
        elif d.progress_last > end:
            return True  # progress after the end is left out of the gaps: look closer
        else:
            longest = max(d.progress_first - begin, d.gap, end - d.progress_last)
        if not longest > threshold:
            return False
    return True


def _gaps(times: F64, start: float, end: float, threshold: float) -> list[tuple[float, float]]:
    """Spans of [start, end] longer than ``threshold`` with no progress time inside."""
    t = times[(times >= start) & (times <= end)]
    edges = np.concatenate(([start], t, [end]))
    d = np.diff(edges)
    idx = np.flatnonzero(d > threshold)
    return [(float(edges[i]), float(edges[i + 1])) for i in idx]


def _intersect(
    a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _stalls(
    attempt: str,
    *,
    streams: list[_RankStream],
    start: float,
    end: float,
    ended: bool,
    completed: bool,
    now: float | None,
    threshold: float,
    typical: float | None,
) -> list[Stall]:
    progress = {s.rank: _progress(s) for s in streams}
    firsts = [float(p[0]) for p in progress.values() if len(p)]
    if not firsts:
        return []
    begin = min(firsts)  # before the first progress: start-up, not a stall
    if completed:
        end = min(end, max(float(p[-1]) for p in progress.values() if len(p)))
    # A span is a job stall when it is a gap on every rank: intersect the ranks' gaps.
    common: list[tuple[float, float]] | None = None
    for p in progress.values():
        g = _gaps(p, begin, end, threshold)  # a job stall lies inside a long gap of each rank
        common = g if common is None else _intersect(common, g)
        if not common:
            return []
    out: list[Stall] = []
    for lo, hi in common or []:
        if hi - lo <= threshold:
            continue
        ongoing = not ended and now is not None and hi >= end
        out.append(
            _describe(
                attempt,
                streams=streams,
                progress=progress,
                lo=lo,
                hi=hi,
                ongoing=ongoing,
                threshold=threshold,
                typical=typical,
            )
        )
    return out


def _describe(
    attempt: str,
    *,
    streams: list[_RankStream],
    progress: dict[int, F64],
    lo: float,
    hi: float,
    ongoing: bool,
    threshold: float,
    typical: float | None,
) -> Stall:
    """Who stopped first, at what step, in which section, inside which interval.

    In order: the ranks that never reached the step the others reached; else that
    finished fewer runs of a section (as their summaries said by the stall's end);
    else that reported, during the stall, a section open since before it began
    (alive, and stuck inside it); else whose last progress is oldest by more than
    half a typical step. Otherwise all ranks stopped together.
    """
    eps = 1e-9
    steps: dict[int, int] = {}
    counts: dict[int, dict[str, int]] = {}
    stuck: dict[int, str] = {}
    lasts: dict[int, float] = {}
    for s in streams:
        ts = np.frombuffer(s.step_ts, dtype=np.float64)
        no = np.frombuffer(s.step_no, dtype=np.int64)
        before = ts <= lo + eps
        steps[s.rank] = int(no[before].max()) if before.any() else -1
        counts[s.rank] = {
            name: sum(n for t, n, _ in log.periods if t <= hi) for name, log in s.sections.items()
        }
        for name, log in sorted(s.sections.items()):
            if any(lo < t <= hi and since <= lo + eps for t, since in log.opens):
                stuck.setdefault(s.rank, name)
        p = progress[s.rank]
        lasts[s.rank] = float(p[p <= lo + eps].max()) if (p <= lo + eps).any() else -math.inf
    ranks = sorted(steps)
    top_step = max(steps.values())
    behind = [r for r in ranks if steps[r] < top_step]
    why = "never reached the step the others reached"
    if not behind:
        names = {n for c in counts.values() for n in c}
        found: set[int] = set()
        for name in names:
            top = max(c.get(name, 0) for c in counts.values())
            found |= {r for r in ranks if counts[r].get(name, 0) < top}
        behind, why = sorted(found), "did not finish a section the others finished"
    if not behind or len(behind) == len(ranks):
        behind, why = sorted(stuck), "stayed inside a timed section during the stall"
    if not behind or len(behind) == len(ranks):
        oldest, newest = min(lasts.values()), max(lasts.values())
        behind, why = [], "all ranks stopped together"
        if newest - oldest > 0.5 * (typical or 0.0):
            behind = [r for r in ranks if lasts[r] <= oldest + eps]
            why = "last progress oldest"
    inside: set[str] = set()
    for s in streams:
        for bucket, starts in s.open.items():
            if starts and starts[0] <= lo + eps:
                inside.add(bucket)
    return Stall(
        attempt=attempt,
        start=lo,
        end=hi,
        seconds=hi - lo,
        ongoing=ongoing,
        threshold=threshold,
        last_step=None if top_step < 0 else top_step,
        first_stopped=behind,
        why=why,
        open_sections={str(r): n for r, n in sorted(stuck.items())},
        inside=sorted(inside),
    )


def _robust_high(values: dict[int, float], min_excess: float) -> set[int]:
    """Ranks whose value is far above the others': above median + 5 MAD, 10 % above the
    median, and by at least ``min_excess`` (noise on tiny values is not an outlier)."""
    if len(values) < 3:
        return set()
    arr = np.array(list(values.values()))
    med = float(np.median(arr))
    mad = float(np.median(np.abs(arr - med)))
    return {
        r
        for r, v in values.items()
        if v > med + 5 * mad and v > med * 1.1 and v - med >= min_excess
    }


def _outliers(
    views: dict[int, RankView],
    stragglers: list[Straggler],
    stalls: list[Stall],
    min_excess: float,
) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for st in stragglers:
        out.setdefault(st.rank, []).append(f"straggler in {st.section}")
    for stall in stalls:
        for r in stall.first_stopped:
            reason = "stopped first in a stall"
            if reason not in out.get(r, []):
                out.setdefault(r, []).append(reason)
    typical = {r: v.typical_step_time for r, v in views.items() if v.typical_step_time}
    for r in _robust_high({r: t for r, t in typical.items() if t is not None}, min_excess):
        out.setdefault(r, []).append("slow steps")
    # Data loading (a total): an outlier when it costs over 1 % of the rank's step time more
    # than the others' does.
    busy = [(v.typical_step_time or 0.0) * v.steps for v in views.values()]
    floor = 0.01 * float(np.median(busy)) if busy else 0.0
    loads = {r: v.data_loading_seconds for r, v in views.items()}
    for r in _robust_high(loads, max(floor, min_excess)):
        out.setdefault(r, []).append("slow data loading")
    steps = {r: float(v.last_step) for r, v in views.items() if v.last_step is not None}
    if steps:
        top = max(steps.values())
        for r, s in steps.items():
            if s < top - 1 and len(steps) > 1:  # one step apart: flushed at different times
                out.setdefault(r, []).append(f"behind: last step {int(s)} of {int(top)}")
    return out
