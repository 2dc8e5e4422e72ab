"""Segments of an attempt's rows and their typical step time (ACCOUNTING.md §1, §4).

A *segment* is a run of steps whose numbers only go up; its restore point is the step of
the checkpoint it resumed from (§1). Its typical step time ``m`` (the median, or mean, of
its clean steps) closes open last rows and sets its startup: the first row's time beyond
``m`` (§4). The ideal step time, when not configured, is the best sustained pace over all
clean steps (§1). Pure computation on rows; no I/O.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt

from badput.engine._cache import IdealCache
from badput.engine._ideal import best_sustained_step_time
from badput.engine._rows import AttemptRows, Segment
from badput.engine._steps import median_of_sorted
from badput.engine._stream import RestoreMark
from badput.engine._together import SealedTogether

__all__ = ["Typical", "add_segments", "estimate_ideal", "resolve", "resolve_many"]

F64 = npt.NDArray[np.float64]
#: How a segment's typical step time is taken from its steps (see compute_report).
Typical = Literal["median", "mean"]
_EMPTY: F64 = np.zeros(0)


def add_segments(ai: int, ar: AttemptRows, restores: list[RestoreMark]) -> None:
    """Append the segments of attempt ``ai``'s rows ``ar`` to ``ar.segments``, each with its
    restore point: the step of the last restore between the row before it and its first
    row (an end event preferred), else its first step - 1 (§1). ``restores``: those the
    attempt accounts for, in time order."""
    together = ar.steps.together
    if together is not None and not ar.tail.n:
        _add_segments_together(ai, ar, restores, *together)
        return
    firsts = list(ar.steps.seg_first)
    if ar.tail.n:
        firsts += (np.flatnonzero(ar.tail.first) + ar.n_sealed).tolist()
    bounds = [*firsts, ar.n]
    for j in range(len(firsts)):
        lo, hi = bounds[j], bounds[j + 1]
        first_ts = ar.at("start", lo)
        chosen = None
        if restores:  # (none: most segments of a job of many attempts begin no restore)
            before = ar.at("start", lo - 1) if lo > 0 else -math.inf
            chosen = _resumed_from(restores, before, first_ts)
        first_step = int(ar.at("step", lo))
        last_step = int(ar.at("step", hi - 1))
        ar.segments.append(_segment(ai, j, lo, hi, first_ts, first_step, last_step, chosen))


def _resumed_from(
    restores: list[RestoreMark], before: float, first_ts: float
) -> RestoreMark | None:
    """The restore a segment resumed from: the last after the start of the row before it
    (``before``) and at or before its first row's start, an end event preferred (§1)."""
    in_gap = [r for r in restores if before < r.ts <= first_ts]
    ends = [r for r in in_gap if r.is_end]
    return (ends or in_gap)[-1] if in_gap else None


def _segment(  # noqa: PLR0917 (a segment's fields, as add_segments finds them)
    ai: int,
    sid: int,
    lo: int,
    hi: int,
    first_ts: float,
    first_step: int,
    last_step: int,
    chosen: RestoreMark | None,
) -> Segment:
    """Segment ``sid`` of attempt ``ai``, resumed from the restore ``chosen`` (None: none;
    its restore point is then the step before its first)."""
    return Segment(
        attempt=ai,
        sid=sid,
        lo=lo,
        hi=hi,
        first_ts=first_ts,
        first_step=first_step,
        last_step=last_step,
        restore_point=chosen.step if chosen is not None else first_step - 1,
        restored=chosen is not None,
    )


def _add_segments_together(
    ai: int, ar: AttemptRows, restores: list[RestoreMark], sealed: SealedTogether, k: int
) -> None:
    """:func:`add_segments` of attempt ``k`` of the attempts ``sealed`` together, from what
    their segments begin and end with (no view of its rows made)."""
    table = sealed.segments()
    first = sealed.first_segment[k]
    for sid, g in enumerate(range(first, sealed.first_segment[k + 1])):
        first_ts = table.first_ts[g]
        chosen = _resumed_from(restores, table.before_ts[g], first_ts) if restores else None
        ar.segments.append(
            _segment(
                ai,
                sid,
                table.lo[g],
                table.hi[g],
                first_ts,
                table.first_step[g],
                table.last_step[g],
                chosen,
            )
        )


def estimate_ideal(rows: list[AttemptRows | None], cache: IdealCache) -> float | None:
    """The best sustained step time over every attempt's clean steps, in order (§1);
    ``cache`` carries the block medians of the sealed ones from the last query."""
    present = [ar for ar in rows if ar is not None]
    # (a closed attempt's tail is empty: three numpy calls each of 10,000 attempts, saved)
    tails = [
        ar.tail.d[ar.tail.clean] / ar.tail.count[ar.tail.clean] if ar.tail.n else _EMPTY
        for ar in present
    ]
    if any(t.shape[0] for t in tails[:-1]):
        # Tails in the middle of the sequence: no cache can help; compute directly.
        values = [ar.steps.clean_vals.a for ar in present]
        seq = [v for pair in zip(values, tails, strict=False) for v in pair]
        return best_sustained_step_time(np.concatenate(seq) if seq else np.zeros(0))
    return cache.estimate(_sealed_parts(present), tails[-1] if tails else np.zeros(0))


def _sealed_parts(present: list[AttemptRows]) -> list[tuple[object, F64]]:
    """``(key, clean values)`` of each attempt's sealed rows, in order; all the attempts
    sealed together in one pass, in its order, as one part (its values as the pass made
    them, not 10,000 views joined again), keyed by what they were sealed in."""
    parts: list[tuple[object, F64]] = []
    i, n = 0, len(present)
    while i < n:
        steps = present[i].steps
        together = steps.together
        if together is not None and together[1] == 0 and _all_of(present, i, together[0]):
            parts.append((together[0], together[0].clean_vals))
            i += together[0].attempts
            continue
        parts.append((steps, steps.clean_vals.a))
        i += 1
    return parts


def _all_of(present: list[AttemptRows], i: int, sealed: SealedTogether) -> bool:
    """Whether ``present[i:]`` begins with every attempt of ``sealed``, in its order."""
    if i + sealed.attempts > len(present):
        return False
    for k in range(sealed.attempts):
        together = present[i + k].steps.together
        if together is None or together[0] is not sealed or together[1] != k:
            return False
    return True


def resolve_many(rows: list[AttemptRows], ideal: float | None, typical: Typical) -> list[bool]:
    """:func:`resolve` of each of ``rows``: whether each had a segment without a typical
    step of its own. The medians and startups of attempts sealed together, with no open
    row and nothing after what was sealed, are computed for all their segments at once
    (the same floats: the middle values of each segment's sorted values, or the mean of
    the two, then ``d - m·count`` of its first row, floored at 0 as ``max`` does)."""
    needs = [False] * len(rows)
    groups: dict[int, tuple[SealedTogether, list[int], list[int]]] = {}
    for i, ar in enumerate(rows):
        together = ar.steps.together
        if typical != "median" or together is None or ar.tail.n or ar.steps.open_rows:
            needs[i] = resolve(ar, ideal, typical)
        else:
            found = groups.setdefault(id(together[0]), (together[0], [], []))
            found[1].append(i)
            found[2].append(together[1])
    for sealed, members, which in groups.values():
        _resolve_together(sealed, [rows[i] for i in members], which, ideal, needs, members)
    return needs


def _resolve_together(  # noqa: PLR0917 (the attempts, where they are sealed, and their results)
    together: SealedTogether,
    rows: list[AttemptRows],
    which: list[int],
    ideal: float | None,
    needs: list[bool],
    indices: list[int],
) -> None:
    """The median ``m`` and startup of every segment of ``rows`` (attempts ``which`` of
    ``together``, no open row, no tail); ``needs[indices[k]]``: whether a segment of
    ``rows[k]`` took the ideal step time."""
    segments = [seg for ar in rows for seg in ar.segments]
    if not segments:
        return
    first_segment = together.first_segment
    bounds = together.bounds
    g = np.fromiter(
        (
            first_segment[k] + seg.sid
            for k, ar in zip(which, rows, strict=True)
            for seg in ar.segments
        ),
        np.int64,
        len(segments),
    )
    row = np.fromiter(
        (bounds[k] + seg.lo for k, ar in zip(which, rows, strict=True) for seg in ar.segments),
        np.int64,
        len(segments),
    )
    at, vals = together.typical_at, together.typical
    lo = at[g]
    n = at[g + 1] - lo
    upper = np.minimum(lo + n // 2, vals.shape[0] - 1)
    lower = np.maximum(upper - 1, 0)
    if vals.shape[0]:
        m = np.where(n % 2 == 1, vals[upper], (vals[lower] + vals[upper]) / 2.0)
    else:
        m = np.zeros(len(segments))
    has_own = n > 0
    if ideal is not None:
        m = np.where(has_own, m, ideal)
    excess = together.d[row] - m * together.count[row]
    startup = np.where(excess > 0.0, excess, 0.0)
    own = has_own.tolist()
    for seg, m_s, up, mine in zip(segments, m.tolist(), startup.tolist(), own, strict=True):
        if mine or ideal is not None:
            seg.m, seg.startup = m_s, up
        else:
            seg.m = None
    j = 0
    for ar, i in zip(rows, indices, strict=True):
        k = len(ar.segments)
        needs[i] = not all(own[j : j + k])
        j += k


def resolve(ar: AttemptRows, ideal: float | None, typical: Typical) -> bool:
    """Per segment of ``ar``: typical step time m, open last rows, startup (§4). Returns
    whether a segment had no typical step of its own (it took the ideal step time)."""
    needs_ideal = False
    open_rows = ar.open_rows()
    s = ar.n_sealed
    tail = ar.tail
    for seg in ar.segments:
        sealed_sorted = ar.steps.seg_sorted.get(seg.sid, _EMPTY) if seg.lo < s else _EMPTY
        t_lo, t_hi = max(seg.lo, s) - s, seg.hi - s
        tail_vals = _EMPTY
        if t_hi > t_lo:
            d = tail.d[t_lo:t_hi]
            mask = ~np.isnan(d) & ~tail.first[t_lo:t_hi]
            tail_vals = np.sort(d[mask] / tail.count[t_lo:t_hi][mask])
        if typical == "median":
            m = median_of_sorted(sealed_sorted, tail_vals)
        else:
            n = int(sealed_sorted.shape[0] + tail_vals.shape[0])
            m = float(sealed_sorted.sum() + tail_vals.sum()) / n if n else None
        seg.m = m if m is not None else ideal
        needs_ideal |= m is None
        for i in open_rows:
            if not seg.lo <= i < seg.hi:
                continue
            stride = ar.at("count", i - 1) if i - 1 >= seg.lo else 1.0
            start, cap = ar.at("start", i), ar.cap(i)
            end = start if seg.m is None else max(start, min(start + seg.m * stride, cap))
            ar.open[i] = (end, max(0.0, end - start - ar.covered(start, end)), stride)
        if seg.m is not None:
            seg.startup = max(0.0, ar.d(seg.lo) - seg.m * ar.count(seg.lo))
    return needs_ideal
