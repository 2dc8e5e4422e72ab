"""Closed attempts sealed together: one vectorised pass over many attempts' events.

What the query does for one attempt (pair its marks, clip and flatten its intervals, make
its rows, seal them whole) costs a few hundred numpy calls whatever the attempt's size: on
a job of 10,000 short attempts, most of a report. :func:`seal_together` does it for many
closed attempts at once: their events are concatenated, their bucket codes made distinct
per attempt (attempt x buckets + bucket) so that pairing and flattening never cross from
one attempt to the next, their rows computed with each attempt's own span, then cut apart
and sealed (:func:`seal_whole_many`) into columns shared by all of them
(:class:`SealedTogether`). The numbers are those of the one-by-one path (a property test
holds them to it). Pure computation; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from badput.engine._intervals import (
    Coverage,
    Marks,
    Spans,
    flatten_spans,
    innermost_rank,
    pair_columns,
)
from badput.engine._rows import gathered
from badput.engine._steps import (
    NAN_CELL,
    AttemptSteps,
    Rows,
    add_sums,
    compute_rows,
    one_valued,
    repeated,
    without_order,
)
from badput.engine._stream import Stream

__all__ = ["ClosedAttempt", "SealedTogether", "SegmentTable", "seal_together", "seal_whole_many"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


class ClosedAttempt(NamedTuple):
    """One closed attempt to seal: its accounting stream, as the query sees it."""

    signature: tuple[Any, ...]  # the AttemptSteps signature the one-by-one path would give
    lo: float  # its effective span
    hi: float
    stream: Stream  # its leader's events
    range_lo: float  # the events it accounts for: ts in [range_lo, top)
    top: float


class SegmentTable(NamedTuple):
    """Per segment of the attempts sealed together (in their order): its rows ``[lo, hi)``
    in its attempt, its first row's start, the start of the row before it (-inf: none),
    and its first and last step."""

    lo: list[int]
    hi: list[int]
    first_ts: list[float]
    before_ts: list[float]
    first_step: list[int]
    last_step: list[int]


@dataclass(slots=True)
class SealedTogether:
    """The columns of many attempts sealed in one pass (:func:`seal_whole_many`), as that
    pass made them: every attempt's rows one after the other (attempt k's are
    ``bounds[k]:bounds[k + 1]``), and each attempt's prefix sums D, K and KPOS, each
    ``n + 1`` values long, one after the other (attempt k's from ``cum_from[k]``).

    Each attempt's sealed columns are views of these, made when first asked for
    (:class:`AttemptSteps`): a first query of 10,000 attempts asks few of them, and a pass
    over all of them (:func:`~badput.engine._inside.fill_inside_memos`, the segments'
    medians, their first rows) takes these whole instead of 10,000 views."""

    start: F64
    end: F64
    count: F64
    step: I64
    d: F64
    first: B
    clean: B
    cum_d: F64
    cum_k: F64
    cum_kpos: F64
    cum_from: list[int]
    bounds: list[int]
    # Each segment's typical-time values, sorted within it, one segment after the other
    # (segment g's are ``typical[typical_at[g]:typical_at[g + 1]]``); attempt k's segments
    # are ``first_segment[k]:first_segment[k + 1]``, beginning at rows ``segment_rows``.
    typical: F64
    typical_at: I64
    first_segment: list[int]
    segment_rows: list[int]
    # The clean rows' step times per step, attempt k's ``clean_vals[clean_at[k]:...]``.
    clean_vals: F64
    clean_at: list[int]
    no_caps: F64  # a zero-stride column of NaN, as long as the longest attempt
    # The flattened blocking intervals of all of them (attempt k's ``piece_at[k]:...``).
    pieces: Spans
    piece_at: list[int]
    _segments: SegmentTable | None = None

    @property
    def attempts(self) -> int:
        return len(self.bounds) - 1

    def segments(self) -> SegmentTable:
        """What each segment begins and ends with, for all of them (made once)."""
        if self._segments is None:
            first_rows = np.asarray(self.segment_rows, np.int64)
            # the segments tile the rows (none when no attempt has a row)
            ends = np.append(first_rows[1:], self.start.shape[0])[: first_rows.shape[0]]
            first_segment = np.asarray(self.first_segment, np.int64)
            per_attempt: I64 = first_segment[1:] - first_segment[:-1]
            base = np.repeat(np.asarray(self.bounds[:-1], np.int64), per_attempt)
            lo = first_rows - base
            before = np.maximum(first_rows - 1, 0)
            self._segments = SegmentTable(
                lo.tolist(),
                (ends - base).tolist(),
                self.start[first_rows].tolist(),
                np.where(lo > 0, self.start[before], -math.inf).tolist(),
                self.step[first_rows].tolist(),
                self.step[np.maximum(ends - 1, 0)].tolist(),
            )
        return self._segments

    def rows(self, k: int) -> Rows:
        """Attempt ``k``'s rows (views)."""
        a, b = self.bounds[k], self.bounds[k + 1]
        return Rows(
            self.start[a:b],
            self.end[a:b],
            self.no_caps[: b - a],
            self.count[a:b],
            self.step[a:b],
            self.d[a:b],
            self.first[a:b],
            self.clean[a:b],
        )

    def cums(self, k: int) -> tuple[F64, F64, F64]:
        """Attempt ``k``'s prefix sums D, K and KPOS (``n + 1`` values each, views)."""
        a = self.cum_from[k]
        b = a + self.bounds[k + 1] - self.bounds[k] + 1
        cum_k = self.cum_k[a:b]
        # (one view for both when they are one column: every row's time > 0)
        return self.cum_d[a:b], cum_k, cum_k if self.cum_kpos is self.cum_k else self.cum_kpos[a:b]

    def seg_first(self, k: int) -> list[int]:
        """The rows of attempt ``k`` that begin a segment."""
        base = self.bounds[k]
        rows = self.segment_rows[self.first_segment[k] : self.first_segment[k + 1]]
        return [x - base for x in rows]

    def piece_parts(self, k: int) -> list[Spans]:
        """Attempt ``k``'s flattened blocking intervals, as the parts of one seal."""
        a, b = self.piece_at[k], self.piece_at[k + 1]
        return [self.pieces.take(slice(a, b))] if b > a else []

    def seg_sorted(self, k: int) -> dict[int, F64]:
        """Attempt ``k``'s typical-time values of each segment (by its number), sorted."""
        out: dict[int, F64] = {}
        at = self.typical_at
        for sid, g in enumerate(range(self.first_segment[k], self.first_segment[k + 1])):
            lo, hi = int(at[g]), int(at[g + 1])
            if hi > lo:
                out[sid] = self.typical[lo:hi]
        return out


def seal_together(
    attempts: list[ClosedAttempt], n_buckets: int, exempt: list[int]
) -> list[AttemptSteps]:
    """Each attempt's rows and intervals sealed whole, as one pass over all of them.

    ``n_buckets``: how many bucket codes the marks use; ``exempt``: the codes whose
    intervals do not spoil a step as a speed measurement (data loading).
    """
    g = len(attempts)
    lo = np.array([a.lo for a in attempts])
    hi = np.array([a.hi for a in attempts])
    range_lo = np.array([a.range_lo for a in attempts])
    top = np.array([a.top for a in attempts])
    ts, step, is_end, marks = gathered([a.stream for a in attempts])
    # What each attempt accounts for: its stream's events in [range_lo, top) (§9.5: none
    # after its end). Each stream is sorted, so what is left stays one run per attempt.
    seen = [(len(a.stream.steps), len(a.stream.marks)) for a in attempts]
    raw_group = np.repeat(np.arange(g), [n for n, _ in seen])
    inside = (ts >= range_lo[raw_group]) & (ts < top[raw_group])
    if not inside.all():
        ts, step, is_end, raw_group = ts[inside], step[inside], is_end[inside], raw_group[inside]
    mark_group = np.repeat(np.arange(g), [n for _, n in seen])
    inside = (marks.ts >= range_lo[mark_group]) & (marks.ts < top[mark_group])
    if not inside.all():
        marks, mark_group = marks.take(inside), mark_group[inside]
    n_raw = np.bincount(raw_group, minlength=g)
    n_marks = np.bincount(mark_group, minlength=g)
    marks = Marks(
        marks.ts,
        marks.seq,
        (mark_group * n_buckets + marks.bucket).astype(np.int32),
        marks.is_start,
        marks.blocking,
        marks.line,
        marks.source,
    )
    # Pair within each attempt (the codes differ), close what is left at its end.
    paired = pair_columns(marks, close_at=hi[mark_group])
    ivs = paired.intervals
    rank = innermost_rank(ivs)
    ivs_group = ivs.bucket // n_buckets
    a_t = np.maximum(ivs.start, lo[ivs_group])
    b_t = np.minimum(ivs.end, hi[ivs_group])
    keep = b_t >= a_t
    clipped = Spans(a_t[keep], b_t[keep], ivs.bucket[keep], ivs.blocking[keep], rank[keep])
    pieces = flatten_spans(clipped.take(clipped.blocking))
    nonblocking = clipped.take(~clipped.blocking)
    unclean = pieces.take(~np.isin(pieces.bucket % n_buckets, exempt))
    rows, _unmatched_ts, unmatched_group = compute_rows(
        ts,
        step,
        is_end,
        lo=lo[raw_group],
        hi=hi[raw_group],
        cov=Coverage.of(pieces),
        prev_step=None,
        unclean_cov=Coverage.of(unclean),
        group=raw_group,
    )
    # Cut everything apart, per attempt.
    row_group = raw_group[is_end == 0]
    row_bounds = np.searchsorted(row_group, np.arange(g + 1)).tolist()
    unmatched_at = np.searchsorted(unmatched_group, np.arange(g + 1)).tolist()
    return seal_whole_many(
        [a.signature for a in attempts],
        rows,
        row_bounds,
        pieces=_apart(without_order(pieces), n_buckets, g),
        nonblocking=_split_spans(without_order(nonblocking), n_buckets, g),
        unpaired_starts=_split_marks(paired.unpaired_starts, n_buckets, g),
        unpaired_ends=_split_marks(paired.unpaired_ends, n_buckets, g),
        unmatched=np.diff(unmatched_at).tolist(),
        used=list(zip(n_raw.tolist(), n_marks.tolist(), strict=True)),
        seen=seen,
        piece_sums=_sums_per_attempt(pieces, n_buckets, g),
        whole_end=hi.tolist(),
    )


def seal_whole_many(  # noqa: PLR0917 (each attempt's parts, cut apart by the caller)
    signatures: list[tuple[Any, ...]],
    rows: Rows,
    row_bounds: list[int],
    pieces: tuple[Spans, list[int]],
    nonblocking: list[Spans],
    unpaired_starts: list[Marks],
    unpaired_ends: list[Marks],
    unmatched: list[int],
    used: list[tuple[int, int]],
    seen: list[tuple[int, int]],
    piece_sums: list[dict[int, float]],
    whole_end: list[float],
) -> list[AttemptSteps]:
    """What :meth:`AttemptSteps.seal` of each attempt's rows, whole (``cut`` = inf), on a
    fresh :class:`AttemptSteps` gives, for many attempts at once.

    ``rows`` are the attempts' rows one after the other (attempt k's are
    ``row_bounds[k]:row_bounds[k + 1]``, each beginning a segment). Per attempt: its
    flattened blocking ``pieces`` (their innermost order already dropped: see
    :func:`without_order`) with their seconds per bucket code (``piece_sums``), its
    ``nonblocking`` spans and unpaired marks, its ``unmatched`` step ends, the raw step
    events and marks it ``used`` and the end of its span. The prefix sums, clean values,
    open rows, segment starts and sorted typical values are computed once over all rows
    and sliced.
    """
    nan = np.isnan(rows.d)
    together = _sealed_columns(rows, nan, row_bounds, pieces)
    open_pos = np.flatnonzero(nan)
    open_at = np.searchsorted(open_pos, row_bounds).tolist()
    # Each attempt's columns are made from `together` when first asked for (AttemptSteps).
    out: list[AttemptSteps] = []
    for k, sig in enumerate(signatures):
        steps = AttemptSteps(
            sig,
            cut=math.inf,
            raw_done=used[k][0],
            marks_done=used[k][1],
            raw_seen=seen[k][0],
            marks_seen=seen[k][1],
            whole=True,
            whole_end=whole_end[k],
            piece_sums=piece_sums[k],
            unmatched_ends=unmatched[k],
            together=(together, k),
        )
        if open_at[k + 1] > open_at[k]:
            a = row_bounds[k]
            opened = open_pos[open_at[k] : open_at[k + 1]]
            steps.open_rows = (opened - a).tolist()
            steps.open_cap = dict(zip(steps.open_rows, rows.cap[opened].tolist(), strict=True))
        found_nonblocking = nonblocking[k]
        if len(found_nonblocking):
            steps.nonblocking_parts.append(found_nonblocking)
            add_sums(steps.nonblocking_sums, found_nonblocking)
        if len(unpaired_ends[k]):
            steps.unpaired_end_parts.append(unpaired_ends[k])
        if len(unpaired_starts[k]):
            steps.unpaired_start_parts.append(unpaired_starts[k])
        out.append(steps)
    return out


def _sealed_columns(
    rows: Rows, nan: B, row_bounds: list[int], pieces: tuple[Spans, list[int]]
) -> SealedTogether:
    """For :func:`seal_whole_many`: the columns of all the attempts' rows at once (prefix
    sums, clean values, segment starts and sorted typical values; ``nan``: the open rows)."""
    d = rows.d
    at = np.asarray(row_bounds)
    rel_d, rel_k, rel_kpos, rel_from = _relative_cums(rows, nan, at)
    clean_pos = np.flatnonzero(rows.clean)
    clean_vals = d[clean_pos] / rows.count[clean_pos]
    clean_at = np.searchsorted(clean_pos, at).tolist()
    first_pos = np.flatnonzero(rows.first)
    first_at = np.searchsorted(first_pos, at).tolist()
    # typical-time values, sorted within each (global) segment
    seg_id = np.cumsum(rows.first) - 1
    typical = np.flatnonzero(~nan & ~rows.first)
    per = d[typical] / rows.count[typical]
    order = np.lexsort((per, seg_id[typical]))
    sorted_vals, sorted_seg = per[order], seg_id[typical][order]
    seg_at = np.searchsorted(sorted_seg, np.arange(first_pos.shape[0] + 1)).tolist()
    # The cap column of every attempt (not kept: see open_cap), as slices of one zero-stride
    # column of NaN (a slice of it is made in a fifth of the time of a column of its own).
    no_caps = repeated(NAN_CELL, int(np.diff(at).max(initial=0)))
    return SealedTogether(
        rows.start,
        rows.end,
        rows.count,
        rows.step,
        d,
        rows.first,
        rows.clean,
        rel_d,
        rel_k,
        rel_kpos,
        rel_from,
        row_bounds,
        sorted_vals,
        np.asarray(seg_at, np.int64),
        first_at,
        first_pos.tolist(),
        clean_vals,
        clean_at,
        no_caps,
        *pieces,
    )


def _relative_cums(rows: Rows, nan: B, at: I64) -> tuple[F64, F64, F64, list[int]]:
    """Each attempt's prefix sums D, K and KPOS, one after the other, and where each
    attempt's begin (attempt k's rows are ``at[k]:at[k + 1]``; ``nan``: the open rows)."""
    d = rows.d
    d0 = np.where(nan, 0.0, d)
    positive = d > 0
    # KPOS is K when every row's time is > 0 (the same sums, bit for bit): one column kept
    every = bool(positive.all())
    kpos = rows.count if every else np.where(positive, rows.count, 0.0)
    cums = [np.concatenate(([0.0], np.cumsum(x))) for x in (d0, rows.count)]
    cums.append(cums[1] if every else np.concatenate(([0.0], np.cumsum(kpos))))
    # Each attempt's prefix sums start from 0: attempt k's are cums[at[k] : at[k+1] + 1] less
    # their first value, made for all attempts in one subtraction (each one value longer than
    # its rows) and sliced, not subtracted attempt by attempt.
    spans = np.diff(at) + 1
    rel_at = np.cumsum(spans) - spans  # where attempt k's start
    own = np.repeat(np.arange(at.shape[0] - 1), spans)
    where = np.arange(int(spans.sum())) - rel_at[own] + at[own]
    rel_d, rel_k = (c[where] - c[at[:-1]][own] for c in cums[:2])
    rel_kpos = rel_k if every else cums[2][where] - cums[2][at[:-1]][own]
    return rel_d, rel_k, rel_kpos, rel_at.tolist()


_NO_SPANS = Spans.empty()
_NO_MARKS = Marks.empty()


def _sums_per_attempt(spans: Spans, n_buckets: int, g: int) -> list[dict[int, float]]:
    """Seconds per bucket code of each attempt's ``spans`` (bucket = attempt x n_buckets
    + bucket), with one bincount over all of them; what ``add_sums`` gives per attempt."""
    out: list[dict[int, float]] = [{} for _ in range(g)]
    if not len(spans):
        return out
    totals = np.bincount(spans.bucket, weights=spans.end - spans.start, minlength=g * n_buckets)
    where = np.flatnonzero(totals)
    for code, value in zip(where.tolist(), totals[where].tolist(), strict=True):
        out[code // n_buckets][code % n_buckets] = value
    return out


def _apart(spans: Spans, n_buckets: int, g: int) -> tuple[Spans, list[int]]:
    """``spans`` (bucket = attempt x n_buckets + bucket) with their own bucket codes, in
    attempt order (each attempt's in its original order), and where each attempt's begin:
    attempt k's are ``[bounds[k], bounds[k + 1])``."""
    if not len(spans):
        return _NO_SPANS, [0] * (g + 1)
    group = spans.bucket // n_buckets
    if bool((group[1:] < group[:-1]).any()):  # attempts whose spans interleave in time
        order = np.argsort(group, kind="stable")
        spans, group = spans.take(order), group[order]
    own = one_valued(spans.bucket % n_buckets)  # (no memory when all of one bucket)
    plain = Spans(spans.start, spans.end, own, spans.blocking, spans.order)
    return plain, np.searchsorted(group, np.arange(g + 1)).tolist()


def _split_spans(spans: Spans, n_buckets: int, g: int) -> list[Spans]:
    """``spans`` (bucket = attempt x n_buckets + bucket) cut into one Spans per attempt,
    with their own bucket codes, each in its original order."""
    if not len(spans):  # the usual case for non-blocking intervals: one shared empty
        return [_NO_SPANS] * g
    plain, bounds = _apart(spans, n_buckets, g)
    return [plain.take(slice(bounds[k], bounds[k + 1])) for k in range(g)]


def _split_marks(marks: Marks, n_buckets: int, g: int) -> list[Marks]:
    """Unpaired marks cut apart per attempt (in (ts, seq) order within each)."""
    if not len(marks):  # the usual case: one shared empty
        return [_NO_MARKS] * g
    group = marks.bucket // n_buckets
    order = np.argsort(group, kind="stable")
    marks = marks.take(order)
    plain = Marks(
        marks.ts,
        marks.seq,
        marks.bucket % n_buckets,
        marks.is_start,
        marks.blocking,
        marks.line,
        marks.source,
    )
    bounds = np.searchsorted(group[order], np.arange(g + 1)).tolist()
    return [plain.take(slice(bounds[k], bounds[k + 1])) for k in range(g)]
