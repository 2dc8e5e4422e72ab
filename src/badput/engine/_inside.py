"""The sums of many segments of attempts wholly inside a query's window, at once.

:meth:`~badput.engine._rows.AttemptRows.add_segment` remembers, on each segment of an
attempt the window holds whole, what :meth:`~badput.engine._rows.AttemptRows.segment_sums`
gave (``Segment.inside_memo``) and its step counts (``Segment.count_memo``). A cold report
of a job of 10,000 short attempts computes those once per segment in Python: about a
sixth of the report. :func:`fill_inside_memos` computes them for all such segments with
numpy, term by term as the scalar code does (the same IEEE operations in the same order,
each special row of a segment in turn), so that every memo holds the very floats the
scalar code would have made; the scalar code then finds them and only adds them up.

A segment it cannot follow exactly is left to the scalar code: rows of an open step, a
tail not yet sealed, steps that do not go up within the segment (``searchsorted`` would
not count them), a row the window cuts, a row of no steps. Pure computation; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from badput.engine._rows import AttemptRows, Segment, Sums, inside_key
from badput.engine._together import SealedTogether

__all__ = ["MIN_SEGMENTS", "fill_inside_memos"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

_EXACT = float(2**53)
#: Fewer segments than this to fill are left to the scalar code (numpy's per-call cost).
MIN_SEGMENTS = 32


def _frac(keep_upto: F64, step: F64, count: F64) -> F64:
    """:func:`~badput.engine._rows._frac` elementwise: inf gives 1 and -inf 0 through the
    same arithmetic, and ``max``/``min`` keep the first argument on ties, as Python's do."""
    with np.errstate(invalid="ignore", divide="ignore"):
        x = (keep_upto - step + 1.0) / count
    x = np.where(x > 0.0, x, 0.0)
    return np.where(x < 1.0, x, 1.0)


def _sealed_together(attempts: list[AttemptRows]) -> SealedTogether | None:
    """The columns ``attempts`` were sealed in, when they are all the attempts of one
    :class:`SealedTogether`, in its order (what joining their sealed columns would give)."""
    first = attempts[0].steps.together
    if first is None or first[0].attempts != len(attempts):
        return None
    together = first[0]
    for k, ar in enumerate(attempts):
        mine = ar.steps.together
        if mine is None or mine[0] is not together or mine[1] != k:
            return None
    return together


class _Columns(NamedTuple):
    """The sealed rows of the attempts, one attempt after the other (steps as floats: as
    ``at()`` gives them), and their prefix sums (each attempt's ``n + 1`` values)."""

    start: F64
    end: F64
    counts: F64  # steps each row stands for
    d: F64
    step: F64
    cum_d: F64
    cum_k: F64
    cum_kpos: F64


class _Segments(NamedTuple):
    """The segments to fill: their rows ``[first, stop)`` in their attempt, where their first
    row is in the joined columns (``g_first``) and where their attempt's prefix sums begin
    (``c_base``: the sums of row i are at ``c_base + i``), their keep threshold, their
    at-risk one (``min(keep_upto, safe)``) and their startup."""

    first: I64
    stop: I64
    g_first: I64
    c_base: I64
    keep: F64
    risk_from: F64
    startup: F64


class _Specials(NamedTuple):
    """The special rows of each segment, sorted and distinct (4 slots; -1: none), with their
    step time, steps, steps of rows with time, and step; ``cut``: a row of step time the
    window cuts (the scalar code weighs it: the segment is left to it)."""

    slots: I64
    valid: B
    d: F64
    k: F64
    kpos: F64
    step: F64
    cut: B


def fill_inside_memos(
    items: Sequence[tuple[AttemptRows, Segment, float]],
    safe: float,
    bounds: tuple[float, float],
) -> None:
    """Set ``inside_memo`` and ``count_memo`` of each ``(rows, segment, keep_upto)`` of
    ``items`` (segments of attempts wholly inside the window ``bounds``, whose memo is
    missing or made for other inputs) to what the scalar code would make, for those it can
    follow exactly (see the module docstring); the others are left as they are."""
    if len(items) < MIN_SEGMENTS:
        return
    ok = [
        (ar, seg, k)
        for ar, seg, k in items
        if not ar.open and ar.tail.n == 0 and ar.n_sealed == ar.n and seg.lo < seg.hi
    ]
    if not ok or len(ok) < MIN_SEGMENTS:
        return
    owners: dict[int, int] = {}
    attempts: list[AttemptRows] = []
    for ar, _seg, _k in ok:
        if id(ar) not in owners:
            owners[id(ar)] = len(attempts)
            attempts.append(ar)
    sizes = np.array([ar.n for ar in attempts], np.int64)
    row_base = np.concatenate(([0], np.cumsum(sizes)))
    cum_base = row_base + np.arange(len(attempts) + 1)  # each attempt's prefix sums: n + 1
    cols = _columns(attempts)

    owner = np.array([owners[id(ar)] for ar, _seg, _k in ok], np.int64)
    first = np.array([seg.lo for _ar, seg, _k in ok], np.int64)  # local row numbers
    stop = np.array([seg.hi for _ar, seg, _k in ok], np.int64)
    keep = np.array([k for _ar, _seg, k in ok], np.float64)
    startup = np.array([seg.startup for _ar, seg, _k in ok], np.float64)
    risk_from = np.where(safe < keep, safe, keep)  # min(keep_upto, safe), as Python's
    g_first = row_base[owner] + first  # rows in the joined columns
    c_base = cum_base[owner]  # cums of row i of a segment: c_base + i
    segs = _Segments(first, stop, g_first, c_base, keep, risk_from, startup)

    n_keep, n_risk, good = _row_counts(cols, segs)
    j_keep = first + n_keep - 1  # rows_upto_step(keep_upto, first, stop) - 1
    j_safe = first + n_risk - 1  # the same where risk_from == keep_upto
    kept_count, all_count = _counts(cols, segs, j_keep)
    specials = _specials(cols, segs, j_keep, j_safe, bounds)
    good &= ~specials.cut.any(axis=1)
    kept, kept_n, wasted, at_risk, startup_sum, step_time = _sums(
        cols, segs, specials, j_keep, j_safe
    )

    columns = zip(
        good.tolist(),
        kept.tolist(),
        kept_n.tolist(),
        wasted.tolist(),
        startup_sum.tolist(),
        at_risk.tolist(),
        (0.0 + kept_count).tolist(),
        (0.0 + (all_count - kept_count)).tolist(),
        step_time.tolist(),
        kept_count.tolist(),
        all_count.tolist(),
        strict=True,
    )
    for (_ar, seg, k), (fine, *sums, st, kc, ac) in zip(ok, columns, strict=True):
        if not fine:
            continue
        seg.count_memo = ((k,), kc, ac)
        seg.inside_memo = (inside_key(seg, k, safe), Sums(*sums), st)


def _columns(attempts: list[AttemptRows]) -> _Columns:
    """The sealed columns of ``attempts``, joined (taken whole when they were sealed
    together, in this order)."""
    together = _sealed_together(attempts)
    if together is not None:  # (a first query of many closed attempts): as sealed
        return _Columns(
            together.start,
            together.end,
            together.count,
            together.d,
            together.step.astype(np.float64),
            together.cum_d,
            together.cum_k,
            together.cum_kpos,
        )

    def joined(name: str) -> F64:
        """Column ``name`` of every attempt's rows, as floats (``at()`` gives a step so)."""
        parts = [getattr(ar.sealed, name) for ar in attempts]
        return np.concatenate(parts).astype(np.float64, copy=False)

    start, end, count, d = joined("start"), joined("end"), joined("count"), joined("d")
    step = joined("step")
    cums = [ar.sealed_cums() for ar in attempts]
    cum_d, cum_k, cum_kpos = (np.concatenate([c[which] for c in cums]) for which in range(3))
    return _Columns(start, end, count, d, step, cum_d, cum_k, cum_kpos)


def _row_counts(cols: _Columns, segs: _Segments) -> tuple[I64, I64, B]:
    """Every row of every segment: how many are at or below each threshold, and whether
    the segment is one the arithmetic follows exactly."""
    first, stop, keep, risk_from = segs.first, segs.stop, segs.keep, segs.risk_from
    lens = stop - first
    seg_of_row = np.repeat(np.arange(first.shape[0]), lens)
    seg_begin = np.concatenate(([0], np.cumsum(lens)[:-1]))
    rows = np.arange(int(lens.sum())) - np.repeat(seg_begin, lens) + np.repeat(segs.g_first, lens)
    row_step = cols.step[rows]
    n_keep = np.add.reduceat((row_step <= keep[seg_of_row]).astype(np.int64), seg_begin)
    n_risk = np.add.reduceat((row_step <= risk_from[seg_of_row]).astype(np.int64), seg_begin)
    # beyond 2**53 a float compare of steps may differ from searchsorted's integer one
    bad_row = np.isnan(cols.d[rows]) | ~(cols.counts[rows] > 0.0) | ~(np.abs(row_step) < _EXACT)
    going_down = np.zeros(rows.shape[0], np.bool_)
    going_down[1:] = row_step[1:] < row_step[:-1]
    going_down[seg_begin] = False  # a segment's first row follows another segment
    good = ~(np.add.reduceat((bad_row | going_down).astype(np.int64), seg_begin) > 0)
    return n_keep, n_risk, good


def _cum(column: F64, segs: _Segments, i: I64) -> F64:
    """``AttemptRows.cum`` of each segment's attempt at its local row ``i``."""
    values: F64 = column[segs.c_base + i]
    return values


def _counts(cols: _Columns, segs: _Segments, j_keep: I64) -> tuple[F64, F64]:
    """The steps kept and all the steps of each segment (``AttemptRows._counts``, no open
    row: the one special is ``j_keep``)."""
    first, g_first, keep, count = segs.first, segs.g_first, segs.keep, cols.counts
    has_keep = j_keep >= first
    k_keep = np.where(has_keep, count[np.maximum(g_first + (j_keep - first), 0)], 0.0)
    step_keep = cols.step[np.maximum(g_first + (j_keep - first), 0)]
    # plain_sum(K, first, j_keep + 1, [j_keep]): nothing when no row is kept, else the
    # prefix sums less the special row
    cum_k = cols.cum_k
    kept_count = np.where(
        has_keep, (_cum(cum_k, segs, j_keep + 1) - _cum(cum_k, segs, first)) - k_keep, 0.0
    )
    kept_count = np.where(
        has_keep, kept_count + _frac(keep, step_keep, k_keep) * k_keep, kept_count
    )
    all_count = _cum(cum_k, segs, segs.stop) - _cum(cum_k, segs, first)
    return kept_count, all_count


def _specials(
    cols: _Columns, segs: _Segments, j_keep: I64, j_safe: I64, bounds: tuple[float, float]
) -> _Specials:
    """The special rows of each segment (its first and last, and the rows of the keep and
    at-risk thresholds), and which of them the window ``bounds`` cuts."""
    first, stop, g_first = segs.first, segs.stop, segs.g_first
    lo_t, hi_t = bounds
    cand = np.stack([first, stop - 1, j_keep, j_safe], axis=1)
    inside_seg = (cand >= first[:, None]) & (cand < stop[:, None])
    cand = np.sort(np.where(inside_seg, cand, np.iinfo(np.int64).max), axis=1)
    slots = np.where(cand == np.iinfo(np.int64).max, -1, cand)
    slots[:, 1:] = np.where(slots[:, 1:] == slots[:, :-1], -1, slots[:, 1:])
    valid = slots >= 0
    at = np.where(valid, g_first[:, None] + (slots - first[:, None]), 0)
    s_d, s_k, s_start, s_end = cols.d[at], cols.counts[at], cols.start[at], cols.end[at]
    s_step = cols.step[at]
    s_kpos = np.where(s_d > 0, s_k, 0.0)
    cut = valid & (s_d > 0.0) & ~((s_start >= lo_t) & (s_end <= hi_t))
    return _Specials(slots, valid, s_d, s_k, s_kpos, s_step, cut)


def _sums(
    cols: _Columns, segs: _Segments, sp: _Specials, j_keep: I64, j_safe: I64
) -> tuple[F64, F64, F64, F64, F64, F64]:
    """Each segment's kept, kept steps, wasted, at-risk, startup and step time: the rows
    between the special ones from prefix sums, then each special row in turn."""
    first, stop, keep, cum_d = segs.first, segs.stop, segs.keep, cols.cum_d

    def plain(column: F64, stored: F64, a: I64, b: I64) -> F64:
        """AttemptRows.plain_sum: prefix sums, less each special row in [a, b) in turn."""
        total = _cum(column, segs, np.maximum(b, a)) - _cum(column, segs, a)
        for s in range(sp.slots.shape[1]):
            i = sp.slots[:, s]
            total = np.where(sp.valid[:, s] & (a <= i) & (i < b), total - stored[:, s], total)
        return np.where(b <= a, 0.0, total)

    keep_end = np.minimum(stop, j_keep + 1)
    kept = 0.0 + plain(cum_d, sp.d, first, keep_end)
    kept_n = 0.0 + plain(cols.cum_kpos, sp.kpos, first, keep_end)
    wasted = 0.0 + plain(cum_d, sp.d, np.maximum(first, j_keep + 1), stop)
    at_risk = 0.0 + plain(cum_d, sp.d, np.maximum(first, j_safe + 1), keep_end)
    step_time = plain(cum_d, sp.d, first, stop)
    startup_sum = np.zeros(first.shape[0])
    for s in range(sp.slots.shape[1]):
        d_s, k_s, step_s = sp.d[:, s], sp.k[:, s], sp.step[:, s]
        on = sp.valid[:, s] & (d_s > 0.0)
        f_keep = _frac(keep, step_s, k_s)
        f_safe = _frac(segs.risk_from, step_s, k_s)
        up = np.where(sp.slots[:, s] == first, segs.startup, 0.0)
        work = 1.0 * (d_s - up)
        kept = np.where(on, kept + f_keep * work, kept)
        kept_n = np.where(on, kept_n + f_keep * 1.0 * k_s, kept_n)
        wasted = np.where(on, wasted + (1.0 - f_keep) * work, wasted)
        at_risk = np.where(on, at_risk + (f_keep - f_safe) * work, at_risk)
        startup_sum = np.where(on, startup_sum + 1.0 * up, startup_sum)
        step_time = np.where(on, step_time + 1.0 * d_s, step_time)
    return kept, kept_n, wasted, at_risk, startup_sum, step_time
