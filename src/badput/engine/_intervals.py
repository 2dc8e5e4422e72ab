"""Recorded intervals: pairing start/end events, innermost-wins flattening, coverage.

Two forms of the same rules. The engine's path is columnar: :class:`Marks` (one numpy
column per field, millions of rows) are paired by :func:`pair_columns` and flattened by
:func:`flatten_spans` with vectorised operations, into :class:`Spans`; only the rare
stretches where intervals overlap are swept in Python. The per-object functions
(:func:`pair_marks`, :func:`flatten_innermost`) state the rules plainly; tests hold
the columnar path to them on random inputs. Pure functions; no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "Coverage",
    "IntervalMark",
    "Marks",
    "Paired",
    "Piece",
    "RecordedInterval",
    "Spans",
    "flatten_groups",
    "flatten_innermost",
    "flatten_spans",
    "innermost_order",
    "innermost_rank",
    "joined",
    "pair_columns",
    "pair_marks",
]

FloatArray = npt.NDArray[np.float64]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Bool = npt.NDArray[np.bool_]


def joined(parts: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """``parts`` end to end; the only non-empty one itself when there is one (a column of a
    million values is not copied: 8 MB): it is only read. No part: an empty float column."""
    present = [v for v in parts if v.shape[0]]
    if len(present) == 1:
        return present[0]
    return np.concatenate(present) if present else np.zeros(0)


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


@dataclass(frozen=True, slots=True)
class Marks:
    """Interval marks as columns (one row per ``*_start``/``*_end`` event).

    ``bucket`` and ``source`` are codes into tables their owner keeps (the Ingestor's
    bucket and source names); ``line`` is -1 when unknown (int32 as stored, or int64 as
    read). Sorted by ``(ts, seq)`` wherever a function says so.
    """

    ts: F64
    seq: I64
    bucket: I32
    is_start: Bool
    blocking: Bool
    line: npt.NDArray[np.signedinteger[Any]]
    source: I32

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @staticmethod
    def empty() -> Marks:
        return Marks(
            np.zeros(0),
            np.zeros(0, np.int64),
            np.zeros(0, np.int32),
            np.zeros(0, np.bool_),
            np.zeros(0, np.bool_),
            np.zeros(0, np.int64),
            np.zeros(0, np.int32),
        )

    def take(self, idx: npt.NDArray[np.intp] | npt.NDArray[np.bool_] | slice) -> Marks:
        return Marks(
            self.ts[idx],
            self.seq[idx],
            self.bucket[idx],
            self.is_start[idx],
            self.blocking[idx],
            self.line[idx],
            self.source[idx],
        )

    def sorted(self) -> Marks:
        """The rows in ``(ts, seq)`` order."""
        return self.take(np.lexsort((self.seq, self.ts)))

    def objects(self, buckets: Sequence[str], sources: Sequence[str]) -> list[IntervalMark]:
        """The rows as :class:`IntervalMark` (for the few a diagnostic names)."""
        return [
            IntervalMark(
                ts,
                seq,
                buckets[b],
                start,
                blocking,
                sources[src] if src >= 0 else None,
                line if line >= 0 else None,
            )
            for ts, seq, b, start, blocking, line, src in zip(
                self.ts.tolist(),
                self.seq.tolist(),
                self.bucket.tolist(),
                self.is_start.tolist(),
                self.blocking.tolist(),
                self.line.tolist(),
                self.source.tolist(),
                strict=True,
            )
        ]


@dataclass(frozen=True, slots=True)
class Spans:
    """Intervals (or disjoint pieces of them) as columns.

    ``order`` ranks them for innermost-wins (a higher order is more inner); for recorded
    intervals it is the arrival number of their start event.
    """

    start: F64
    end: F64
    bucket: I32
    blocking: Bool
    order: I64

    def __len__(self) -> int:
        return int(self.start.shape[0])

    @staticmethod
    def empty() -> Spans:
        z = np.zeros(0)
        return Spans(z, z, np.zeros(0, np.int32), np.zeros(0, np.bool_), np.zeros(0, np.int64))

    def take(self, idx: npt.NDArray[np.intp] | npt.NDArray[np.bool_] | slice) -> Spans:
        return Spans(
            self.start[idx], self.end[idx], self.bucket[idx], self.blocking[idx], self.order[idx]
        )

    @staticmethod
    def concat(parts: Sequence[Spans]) -> Spans:
        if not parts:
            return Spans.empty()
        if len(parts) == 1:
            return parts[0]
        return Spans(
            np.concatenate([p.start for p in parts]),
            np.concatenate([p.end for p in parts]),
            np.concatenate([p.bucket for p in parts]),
            np.concatenate([p.blocking for p in parts]),
            np.concatenate([p.order for p in parts]),
        )


@dataclass(frozen=True, slots=True)
class Paired:
    """What :func:`pair_columns` makes of a stream's marks."""

    intervals: Spans  # every pair, and every unpaired start closed at ``close_at``
    unpaired_starts: Marks  # in (ts, seq) order
    unpaired_ends: Marks


def pair_columns(marks: Marks, close_at: float | F64) -> Paired:
    """:func:`pair_marks` on columns: each start pairs with the next end of its bucket,
    nested pairs of one bucket closing innermost first. ``marks`` sorted by ``(ts, seq)``.
    ``close_at`` may be given per mark (where its start would be closed).

    Vectorised bracket matching. Per bucket, walk the marks keeping the depth of open
    starts, never below zero: an end met at depth 0 is unpaired. Give each start the
    depth after it and each paired end the depth before it; at every depth, starts and
    ends then alternate in time, so a stable sort by (bucket, depth, time) puts each
    start right before its end. A start left last at its depth is unpaired (it is closed
    at ``close_at``). The depth walk is a cumulative sum less its running minimum
    (clamped at zero), computed for all buckets at once.
    """
    if len(marks) == 0:
        return Paired(Spans.empty(), Marks.empty(), Marks.empty())
    adjacent = _pair_adjacent(marks)
    return adjacent if adjacent is not None else _pair_nested(marks, close_at)


def _pair_nested(marks: Marks, close_at: float | F64) -> Paired:
    """:func:`pair_columns` on any marks (nested, unpaired), by bracket depths."""
    n = len(marks)
    by_bucket = np.argsort(marks.bucket, kind="stable")  # time order within each bucket
    bucket = marks.bucket[by_bucket]
    is_start = marks.is_start[by_bucket]
    step = np.where(is_start, 1, -1).astype(np.int64)
    head = np.ones(n, np.bool_)
    head[1:] = bucket[1:] != bucket[:-1]
    group = np.cumsum(head) - 1
    total = np.cumsum(step)
    base = (total - step)[head][group]  # the sum before each bucket's first mark
    walk = total - base  # unclamped depth per bucket
    # Running minimum per bucket: shift each bucket below all earlier ones, so one
    # accumulate over the whole array never carries a minimum across buckets.
    shift = group.astype(np.int64) * (2 * n + 2)
    low = np.minimum(np.minimum.accumulate(walk - shift) + shift, 0)
    depth = walk - low  # depth after each mark, never below zero
    before = np.where(head, 0, np.concatenate(([0], depth[:-1])))
    unpaired_end = ~is_start & (before == 0)
    level = np.where(is_start, depth, before)
    keep = np.flatnonzero(~unpaired_end)
    order = keep[np.lexsort((keep, level[keep], bucket[keep]))]
    # consecutive (start, end) within a (bucket, level) run are pairs
    b_o, l_o, s_o = bucket[order], level[order], is_start[order]
    nxt_same = np.zeros(order.shape[0], np.bool_)
    nxt_same[:-1] = (b_o[1:] == b_o[:-1]) & (l_o[1:] == l_o[:-1]) & ~s_o[1:]
    pair_start = s_o & nxt_same
    starts_pos = by_bucket[order[pair_start]]
    ends_pos = by_bucket[order[np.flatnonzero(pair_start) + 1]]
    lone = by_bucket[order[s_o & ~nxt_same]]
    lone = lone[np.lexsort((marks.seq[lone], marks.ts[lone]))]
    start_ts = marks.ts[starts_pos]
    lone_ts = marks.ts[lone]
    intervals = Spans(
        np.concatenate((start_ts, lone_ts)),
        np.concatenate(
            (
                np.maximum(marks.ts[ends_pos], start_ts),
                np.maximum(
                    close_at[lone] if isinstance(close_at, np.ndarray) else close_at, lone_ts
                ),
            )
        ),
        np.concatenate((marks.bucket[starts_pos], marks.bucket[lone])),
        np.concatenate((marks.blocking[starts_pos], marks.blocking[lone])),
        np.concatenate((marks.seq[starts_pos], marks.seq[lone])),
    )
    ends_alone = np.sort(by_bucket[unpaired_end])
    return Paired(intervals, marks.take(lone), marks.take(ends_alone))


def _pair_adjacent(marks: Marks) -> Paired | None:
    """The common case of :func:`pair_columns`, or ``None``: every start directly followed
    (in time order) by an end of its bucket (a data load per step, an eval, a save).

    Each such end closes that start and nothing is left unpaired; the intervals come out
    in the general path's order (by bucket, then time). It skips the general path's
    dozen temporary columns per mark, which on millions of marks are its memory peak.
    """
    n = len(marks)
    is_start, bucket = marks.is_start, marks.bucket
    if n % 2 or not is_start[0::2].all() or is_start[1::2].any():
        return None
    if not np.array_equal(bucket[0::2], bucket[1::2]):
        return None
    start_ts = marks.ts[0::2]
    intervals = Spans(
        start_ts.copy(),
        np.maximum(marks.ts[1::2], start_ts),
        bucket[0::2].copy(),
        marks.blocking[0::2].copy(),
        marks.seq[0::2].copy(),
    )
    if n > 2 and bucket.min() != bucket.max():
        intervals = intervals.take(np.argsort(intervals.bucket, kind="stable"))
    none = np.zeros(0, np.intp)
    return Paired(intervals, marks.take(none), marks.take(none))


def _increasing(values: F64) -> bool:
    return bool((values[1:] > values[:-1]).all())


def innermost_rank(spans: Spans) -> I64:
    """Each span's rank under :func:`innermost_order` (a higher rank is more inner)."""
    if _increasing(spans.start):  # distinct starts in order (the usual case): no sort
        return np.arange(len(spans), dtype=np.int64)
    by_key = np.lexsort((spans.order, -spans.end, spans.start))
    rank = np.empty(len(spans), np.int64)
    rank[by_key] = np.arange(len(spans))
    return rank


def flatten_spans(spans: Spans) -> Spans:
    """:func:`flatten_innermost` on columns: disjoint pieces, each instant owned by the
    covering span that started last, ``order`` breaking ties (give it
    :func:`innermost_rank` of the unclipped spans). Zero-length spans vanish.

    Spans that overlap no other (the common case, however many) are pieces as they
    are; only each cluster of overlapping spans is swept in Python.
    """
    return flatten_groups(spans, None)[0]


def flatten_groups(spans: Spans, group: I64 | None) -> tuple[Spans, I64 | None]:
    """:func:`flatten_spans` of each group's spans apart (``group``: each span's, not
    decreasing; None: one group), in one pass: the pieces group after group, each group's
    as :func:`flatten_spans` gives them, and the group of each. A span never covers
    another group's (their ``order`` need not compare)."""
    nonzero = spans.end > spans.start
    live = spans if nonzero.all() else spans.take(nonzero)
    if group is not None:
        group = group if live is spans else group[nonzero]
        if not len(live) or group[0] == group[-1]:  # one group: no key to keep apart
            pieces = flatten_spans(live)
            return pieces, np.full(len(pieces), group[0] if len(group) else 0, np.int64)
    n = len(live)
    if n == 0:
        return Spans.empty(), None if group is None else np.zeros(0, np.int64)
    if group is None:
        if not _increasing(live.start):
            live = live.take(np.lexsort((live.order, live.start)))
        reach = np.maximum.accumulate(live.end)
    else:
        rising = live.start[1:] > live.start[:-1]
        if not (rising | (group[1:] != group[:-1])).all():
            by = np.lexsort((live.order, live.start, group))
            live, group = live.take(by), group[by]
        reach = _group_reach(live.end, group)
    # a cluster starts where no earlier span (of its group) reaches past this start
    opens = np.ones(n, np.bool_)
    opens[1:] = live.start[1:] >= reach[:-1]
    if group is not None:
        opens[1:] |= group[1:] != group[:-1]
    if opens.all():
        return live, group
    heads = np.flatnonzero(opens)
    sizes = np.diff(np.append(heads, n))
    alone = np.repeat(sizes == 1, sizes)
    parts = [live.take(alone)]
    for h, size in zip(heads[sizes > 1].tolist(), sizes[sizes > 1].tolist(), strict=True):
        parts.append(_sweep(live.take(slice(h, h + size))))
    pieces = Spans.concat(parts)
    if group is None:
        return pieces.take(np.argsort(pieces.start, kind="stable")), None
    of_pieces = np.concatenate(
        [group[alone]]
        + [
            np.full(len(p), group[h], np.int64)
            for p, h in zip(parts[1:], heads[sizes > 1].tolist(), strict=True)
        ]
    )
    by = np.lexsort((pieces.start, of_pieces))  # (stable: as each group's sort by start)
    return pieces.take(by), of_pieces[by]


def _group_reach(end: F64, group: I64) -> F64:
    """The running maximum of ``end`` within each group (``group`` not decreasing): the
    ends' ranks offset by group, so that one accumulate never carries across groups."""
    n = int(end.shape[0])
    by_end = np.argsort(end, kind="stable")
    rank = np.empty(n, np.int64)
    rank[by_end] = np.arange(n)
    offset = group.astype(np.int64) * n
    top = np.maximum.accumulate(offset + rank) - offset
    return end[by_end[top]]


def _sweep(cluster: Spans) -> Spans:
    """Flatten one cluster of overlapping spans (sorted by start, order)."""
    as_objects = [
        RecordedInterval(a, b, str(code), flag, order)
        for a, b, code, flag, order in zip(
            cluster.start.tolist(),
            cluster.end.tolist(),
            cluster.bucket.tolist(),
            cluster.blocking.tolist(),
            cluster.order.tolist(),
            strict=True,
        )
    ]
    blocking = {iv.bucket: iv.blocking for iv in as_objects}
    pieces = flatten_innermost(as_objects)
    return Spans(
        np.array([p.start for p in pieces], np.float64),
        np.array([p.end for p in pieces], np.float64),
        np.array([int(p.bucket) for p in pieces], np.int32),
        np.array([blocking[p.bucket] for p in pieces], np.bool_),
        np.zeros(len(pieces), np.int64),
    )


class Coverage:
    """How much of ``[a, b]`` a set of disjoint pieces covers, vectorized over many spans."""

    def __init__(self, starts: F64, ends: F64) -> None:
        """``starts``/``ends`` of disjoint pieces in time order."""
        self._starts = starts
        self._ends = ends
        # cum[i] = total covered length of pieces[0:i]
        self._cum = np.concatenate(([0.0], np.cumsum(ends - starts)))

    @staticmethod
    def of(spans: Spans) -> Coverage:
        """Coverage of disjoint ``spans`` in time order (flattened pieces)."""
        return Coverage(spans.start, spans.end)

    @staticmethod
    def of_pieces(pieces: Sequence[Piece]) -> Coverage:
        n = len(pieces)
        return Coverage(
            np.fromiter((p.start for p in pieces), np.float64, n),
            np.fromiter((p.end for p in pieces), np.float64, n),
        )

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
        if int(k.max()) == 1:  # each piece inside one span (a data load inside its step)
            piece = np.flatnonzero(k)
            span = first[piece]
            overlap = np.minimum(b[span], self._ends[piece])
            overlap -= np.maximum(a[span], self._starts[piece])
            np.maximum(overlap, 0.0, out=overlap)
            return np.bincount(span, weights=overlap, minlength=n).astype(np.float64, copy=False)
        piece = np.repeat(np.arange(k.shape[0]), k)
        offset = np.arange(total) - np.repeat(np.cumsum(k) - k, k)
        span = first[piece] + offset
        overlap = np.minimum(b[span], self._ends[piece]) - np.maximum(a[span], self._starts[piece])
        covered = np.bincount(span, weights=np.clip(overlap, 0.0, None), minlength=n)
        return covered.astype(np.float64, copy=False)
