"""Recorded intervals: pairing start/end events, innermost-wins flattening, coverage.

Pure functions over small Python lists and numpy arrays; no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "Coverage",
    "IntervalMark",
    "Piece",
    "RecordedInterval",
    "flatten_innermost",
    "innermost_order",
    "pair_marks",
]

FloatArray = npt.NDArray[np.float64]


class IntervalMark(NamedTuple):
    """One ``*_start`` or ``*_end`` event of an interval kind, in arrival order.

    A named tuple, not a frozen dataclass: one is built per interval event of a log
    (millions), and a tuple is built several times faster.
    """

    ts: float
    seq: int  # arrival order: ties in ts keep file/line order
    bucket: str  # checkpoint_save, custom:eval, ...
    is_start: bool
    blocking: bool
    source: str | None
    line: int | None


@dataclass(frozen=True, slots=True)
class RecordedInterval:
    start: float
    end: float
    bucket: str
    blocking: bool
    order: int  # start order; later-started intervals win overlaps
    closed_by_attempt_end: bool = False
    source: str | None = None
    line: int | None = None


@dataclass(frozen=True, slots=True)
class Piece:
    """A disjoint stretch of time owned by one bucket."""

    start: float
    end: float
    bucket: str


def pair_marks(
    marks: Iterable[IntervalMark], close_at: float
) -> tuple[list[RecordedInterval], list[IntervalMark], list[IntervalMark]]:
    """Pair starts with the next end of the same bucket (nested pairs close innermost first).

    Marks must be sorted by ``(ts, seq)``. Returns the intervals, the unpaired
    starts (closed at ``close_at``, flagged) and the unpaired ends (ignored).
    """
    stacks: dict[str, list[IntervalMark]] = {}
    intervals: list[RecordedInterval] = []
    unpaired_ends: list[IntervalMark] = []
    for mark in marks:
        if mark.is_start:
            stacks.setdefault(mark.bucket, []).append(mark)
            continue
        stack = stacks.get(mark.bucket)
        if not stack:
            unpaired_ends.append(mark)
            continue
        start = stack.pop()
        intervals.append(
            RecordedInterval(
                start.ts,
                max(mark.ts, start.ts),
                start.bucket,
                start.blocking,
                start.seq,
                source=start.source,
                line=start.line,
            )
        )
    unpaired_starts = [m for stack in stacks.values() for m in stack]
    for start in unpaired_starts:
        intervals.append(
            RecordedInterval(
                start.ts,
                max(close_at, start.ts),
                start.bucket,
                start.blocking,
                start.seq,
                closed_by_attempt_end=True,
                source=start.source,
                line=start.line,
            )
        )
    unpaired_starts.sort(key=lambda m: (m.ts, m.seq))
    return intervals, unpaired_starts, unpaired_ends


def innermost_order(iv: RecordedInterval) -> tuple[float, float, int]:
    """Sort key: a later key is more inner. The later start is inner; of two starting at
    the same time, the one ending first (ACCOUNTING.md §9.7); of two with equal start and
    end, the later line (§9.10)."""
    return (iv.start, -iv.end, iv.order)


def flatten_innermost(intervals: Sequence[RecordedInterval]) -> list[Piece]:
    """Disjoint pieces where each instant belongs to the covering interval that started
    last, ``order`` breaking ties (give it as the rank of :func:`innermost_order` on the
    recorded, unclipped intervals: clipping to an attempt can make starts equal).

    Zero-length intervals vanish. The common case (no overlaps) costs one sort.
    """
    ivs = sorted((iv for iv in intervals if iv.end > iv.start), key=lambda i: (i.start, i.order))
    if not ivs:
        return []
    if all(ivs[i].end <= ivs[i + 1].start for i in range(len(ivs) - 1)):
        return [Piece(iv.start, iv.end, iv.bucket) for iv in ivs]
    # Sweep: at every boundary the owner is the active interval that started last.
    points = sorted({t for iv in ivs for t in (iv.start, iv.end)})
    pieces: list[Piece] = []
    active: list[tuple[float, int, float, str]] = []  # (-start, -order, end, bucket) max-heap
    nxt = 0
    for left, right in itertools.pairwise(points):
        while nxt < len(ivs) and ivs[nxt].start <= left:
            iv = ivs[nxt]
            heapq.heappush(active, (-iv.start, -iv.order, iv.end, iv.bucket))
            nxt += 1
        while active and active[0][2] <= left:
            heapq.heappop(active)
        # Entries that ended are only dropped when they reach the top; skip them here.
        owner = _top_alive(active, left)
        if owner is None:
            continue
        if pieces and pieces[-1].bucket == owner and pieces[-1].end == left:
            pieces[-1] = Piece(pieces[-1].start, right, owner)
        else:
            pieces.append(Piece(left, right, owner))
    return pieces


def _top_alive(active: list[tuple[float, int, float, str]], t: float) -> str | None:
    while active:
        if active[0][2] > t:
            return active[0][3]
        heapq.heappop(active)
    return None


class Coverage:
    """How much of ``[a, b]`` a set of disjoint pieces covers, vectorized over many spans."""

    def __init__(self, pieces: Sequence[Piece]) -> None:
        starts = np.fromiter((p.start for p in pieces), dtype=np.float64, count=len(pieces))
        ends = np.fromiter((p.end for p in pieces), dtype=np.float64, count=len(pieces))
        self._starts = starts
        self._ends = ends
        # cum[i] = total covered length of pieces[0:i]
        self._cum = np.concatenate(([0.0], np.cumsum(ends - starts)))

    def __len__(self) -> int:
        return len(self._starts)

    def upto(self, t: FloatArray) -> FloatArray:
        """Covered length in (-inf, t] for each t."""
        if len(self._starts) == 0:
            return np.zeros_like(t)
        i = np.searchsorted(self._starts, t, side="right")  # pieces starting at or before t
        base = self._cum[np.maximum(i - 1, 0)]
        last_start = self._starts[np.maximum(i - 1, 0)]
        last_end = self._ends[np.maximum(i - 1, 0)]
        partial = np.clip(np.minimum(t, last_end) - last_start, 0.0, None)
        return np.where(i > 0, base + partial, 0.0)

    def between(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Covered length of ``[a_i, b_i]`` for each i (0 where b <= a)."""
        if len(self._starts) == 0:
            return np.zeros_like(a)
        out = self.upto(b) - self.upto(a)
        return np.where(b > a, np.clip(out, 0.0, None), 0.0)

    def between_sorted(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Same as :meth:`between` for spans in time order that do not overlap (step rows).

        Works piece by piece: O(pieces · log spans), far cheaper than per span
        when a job has millions of steps and thousands of intervals.
        """
        n = int(a.shape[0])
        if len(self._starts) == 0 or n == 0:
            return np.zeros(n)
        # spans overlapping piece j: first with b > start_j .. last with a < end_j
        first = np.searchsorted(b, self._starts, side="right")
        last = np.searchsorted(a, self._ends, side="left")
        k = np.maximum(last - first, 0)
        total = int(k.sum())
        if total == 0:
            return np.zeros(n)
        piece = np.repeat(np.arange(k.shape[0]), k)
        offset = np.arange(total) - np.repeat(np.cumsum(k) - k, k)
        span = first[piece] + offset
        overlap = np.minimum(b[span], self._ends[piece]) - np.maximum(a[span], self._starts[piece])
        covered = np.bincount(span, weights=np.clip(overlap, 0.0, None), minlength=n)
        return covered.astype(np.float64, copy=False)
