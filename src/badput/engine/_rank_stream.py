"""The per-rank view's state of one (attempt, rank): its columns (:class:`RankStream`), what a
query took of them so far, and the helpers of the vectorised passes over runs of streams
(:mod:`~badput.engine._rank_derive`, :mod:`~badput.engine._rank_settle`)."""

from __future__ import annotations

import math
from array import array
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from badput.engine._rank_columns import F64, Growing
from badput.engine._stream import STEP_LIMIT, PackedInts

DATA_LOADING = "data_loading"

_S = TypeVar("_S")


class SectionLog:
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


class RankStream:
    """What one (attempt, rank) wrote that the per-rank view needs."""

    __slots__ = (
        "attempt",
        "buckets",
        "changes",
        "closed",
        "covered",
        "derived",
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
        # int32 while every step is within STEP_LIMIT of 0 (their differences int32 too),
        # else int64: the same values, as the event streams' (StepLog.step)
        self.step_no = PackedInts("i", "q", limit=STEP_LIMIT)
        self.end_ts = array("d")  # step_end times (progress)
        self.extra_ts = array("d")  # non-blocking load marks (progress, not paired)
        # Blocking interval marks, kept raw (a few bytes each) and paired at query time in
        # time order, whatever order they arrived in (two files of one rank, merges).
        self.pair_ts = array("d")
        self.pair_code = array("i")  # 2 x index in ``names`` + is_start
        self.names: dict[str, int] = {DATA_LOADING: 0}
        # The pairing of the first ``settled`` marks (the newest at ``settled_hi``), per
        # bucket index; the fields below are read from it (see :func:`settle_streams`).
        self.settled = 0
        self.settled_hi = -math.inf
        self.pairing: dict[int, Pairing] = {}
        # Earlier pairings to go back to when marks arrive late (see :func:`_rewind`).
        self.pair_points: list[PairPoint] = []
        self.loads = Growing()  # blocking data-load durations
        self.open: dict[str, list[float]] = {}  # interval starts not ended (yet)
        self.buckets: dict[str, float] = {}  # seconds inside each kind of interval
        self.sections: dict[str, SectionLog] = {}
        self.first_ts = math.inf
        self.last_ts = -math.inf
        # Liveness: the processes that made progress, and each process's newest other event
        # (a launcher writing as the same rank, or without one, is not a trainer).
        self.worker_pids: set[int | None] = set()
        self.pid_seen: dict[int | None, float] = {}
        self.changes = 0  # bumped by every change: what was derived from the columns is stale
        # The closed intervals' union (_rank_stalls.closed_spans) and the marks it is of.
        self.closed: tuple[int, F64, F64] | None = None
        self.covered = Covered()  # what :func:`derive_streams` took from the columns so far
        self.derived: Derived | None = None
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


def steps_as_int64(out: array[int], s: RankStream, k: int) -> None:
    """Append ``s``'s step numbers from index ``k`` on to ``out`` (int64)."""
    if len(s.step_no) > k:
        out.frombytes(s.step_no.column()[k:].astype(np.int64, copy=False).tobytes())


class Pairing:
    """One bucket's marks of one stream, paired so far: the seconds paired (summed in time
    order), whether any pair was found, whether the marks ever failed to alternate
    start, end, start... (then a bucket summing to 0 is still shown), the open starts."""

    __slots__ = ("irregular", "paired", "stack", "total")

    def __init__(self) -> None:
        self.total = 0.0
        self.paired = False
        self.irregular = False
        self.stack: list[float] = []


class PairPoint:
    """A stream's pairing as it was before a pass took more marks: the marks taken then
    (``settled``, the newest at ``settled_hi``), each bucket's pairing and how many data
    loads it had found."""

    __slots__ = ("n_loads", "pairing", "settled", "settled_hi")

    def __init__(self, s: RankStream) -> None:
        self.settled = s.settled
        self.settled_hi = s.settled_hi
        self.pairing = [
            (b, p.total, p.paired, p.irregular, tuple(p.stack)) for b, p in s.pairing.items()
        ]
        self.n_loads = len(s.loads)


class GapPoint(NamedTuple):
    """What :func:`derive_streams` had taken of a stream's values up to the time ``t``: how many,
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


class Covered:
    """What :func:`derive_streams` took from a stream's columns: how much of each, their span,
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
        self.times = Growing()
        # What was taken up to earlier times, oldest first: see GapPoint
        self.points: list[GapPoint] = []


class Derived:
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
        # may split (the bound only screens attempts for stalls, see :func:`may_stall`).
        self.n_progress = n_progress
        self.progress_first = progress_first
        self.progress_last = progress_last
        self.gap = gap


def nonempty_segments(lengths: list[int]) -> tuple[list[int], npt.NDArray[np.intp]]:
    """Of consecutive segments of ``lengths``: which are non-empty, and where they start."""
    lens = np.array(lengths, np.intp)
    nonempty = np.flatnonzero(lens)
    return nonempty.tolist(), (np.cumsum(lens) - lens)[nonempty]


def spread(out: list[Any], which: list[int], values: npt.NDArray[Any]) -> None:
    """``out[which[k]] = values[k]`` as a Python number: the per-segment reductions of the
    non-empty segments (``np.minimum.reduceat(column, starts)``, ...) put in place."""
    for i, v in zip(which, values.tolist(), strict=True):
        out[i] = v


def in_chunks(streams: list[_S], sizes: list[int], chunk: int | None = None) -> list[list[_S]]:
    """``streams`` in runs of about ``chunk`` (default :data:`CHUNK`) new values (``sizes``:
    each one's; a vectorised pass over a few columns of each keeps its temporary arrays
    small). A stream of ``chunk`` values or more has a run of its own, whatever comes
    before it: the passes over one stream read its columns in place."""
    chunk = CHUNK if chunk is None else chunk
    chunks: list[list[_S]] = []
    size = chunk
    for s, n in zip(streams, sizes, strict=True):
        if size >= chunk or (n >= chunk and size > 0):
            chunks.append([])
            size = 0
        chunks[-1].append(s)
        size += n + 1
    return chunks


#: Values (marks, steps...) per vectorised pass over several streams.
CHUNK = 1 << 16


def tail(column: array[float], start: int) -> array[float]:
    return column[start:] if start else column
