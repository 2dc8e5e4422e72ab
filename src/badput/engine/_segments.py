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
from badput.engine._ingest import RestoreMark
from badput.engine._rows import AttemptRows, Segment
from badput.engine._steps import median_of_sorted

__all__ = ["Typical", "add_segments", "estimate_ideal", "resolve"]

F64 = npt.NDArray[np.float64]
#: How a segment's typical step time is taken from its steps (see compute_report).
Typical = Literal["median", "mean"]
_EMPTY: F64 = np.zeros(0)


def add_segments(ai: int, ar: AttemptRows, restores: list[RestoreMark]) -> None:
    """Append the segments of attempt ``ai``'s rows ``ar`` to ``ar.segments``, each with its
    restore point: the step of the last restore between the row before it and its first
    row (an end event preferred), else its first step - 1 (§1). ``restores``: those the
    attempt accounts for, in time order."""
    firsts = list(ar.steps.seg_first)
    if ar.tail.n:
        firsts += (np.flatnonzero(ar.tail.first) + ar.n_sealed).tolist()
    bounds = [*firsts, ar.n]
    for j in range(len(firsts)):
        lo, hi = bounds[j], bounds[j + 1]
        first_ts = ar.at("start", lo)
        first_step = int(ar.at("step", lo))
        chosen = None
        if restores:  # (none: most segments of a job of many attempts begin no restore)
            prev_last_start = ar.at("start", lo - 1) if lo > 0 else -math.inf
            in_gap = [r for r in restores if prev_last_start < r.ts <= first_ts]
            ends = [r for r in in_gap if r.is_end]
            chosen = (ends or in_gap)[-1] if in_gap else None
        ar.segments.append(
            Segment(
                attempt=ai,
                sid=j,
                lo=lo,
                hi=hi,
                first_ts=first_ts,
                first_step=first_step,
                last_step=int(ar.at("step", hi - 1)),
                restore_point=chosen.step if chosen is not None else first_step - 1,
                restored=chosen is not None,
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
    sealed: list[tuple[object, F64]] = [(ar.steps, ar.steps.clean_vals.a) for ar in present]
    if any(t.shape[0] for t in tails[:-1]):
        # Tails in the middle of the sequence: no cache can help; compute directly.
        seq = [v for pair in zip([v for _, v in sealed], tails, strict=False) for v in pair]
        return best_sustained_step_time(np.concatenate(seq) if seq else np.zeros(0))
    return cache.estimate(sealed, tails[-1] if tails else np.zeros(0))


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
