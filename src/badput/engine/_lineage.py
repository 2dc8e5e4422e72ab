"""Which step time was kept, which was wasted, which is at risk (ACCOUNTING.md §3, §9).

A segment's steps above the lowest restore point of any later segment were redone: their
time is wasted, the rest kept (:func:`keep_upto`). Kept steps above the newest durable
checkpoint or completed restore would be lost by a crash now: at risk (:func:`safe_step`).
A row that straddles either threshold is split by step number (§9.4). The sums over each
segment's rows come from :meth:`~badput.engine._rows.AttemptRows.add_segment`; this
module decides the thresholds and goes through the segments. Pure computation.
"""

from __future__ import annotations

import math

from badput.engine._attempts import Attempt
from badput.engine._inside import fill_inside_memos
from badput.engine._rows import AttemptRows, Segment, Sums, inside_key
from badput.engine._stream import RestoreMark

__all__ = [
    "Checkpoints",
    "checkpoint_progress",
    "keep_upto",
    "last_step",
    "safe_step",
    "segment_sums",
]

#: Steps of the checkpoints committed and saved, and the restores, the attempts account for.
Checkpoints = tuple[list[int], list[int], list[RestoreMark]]


def keep_upto(segments: list[Segment]) -> list[float]:
    """Per segment, the lowest restore point of every later segment: its steps above it
    were redone (§3)."""
    out = [math.inf] * len(segments)
    running = math.inf
    for j in range(len(segments) - 1, -1, -1):
        out[j] = running
        running = min(running, segments[j].restore_point)
    return out


def safe_step(checkpoints: Checkpoints) -> float:
    """The newest step a crash now would not lose (§3, §9.1, §9.2, §9.10): the newest
    durable checkpoint (committed ones when the log has commits, else saved ones) or
    completed restore; -inf when none."""
    committed, saved, restores = checkpoints
    durable = committed or saved
    restored = [r.step for r in restores if r.is_end]
    return float(max(durable + restored, default=-math.inf))


def segment_sums(  # noqa: PLR0917 (the whole job's segments, and which of them)
    rows: list[AttemptRows | None],
    segments: list[Segment],
    attempts: list[Attempt],
    keep_upto: list[float],
    safe: float,
    seg_lo: int,
    seg_hi: int,
    sums: Sums,
    bounds: tuple[float, float],
) -> dict[int, float]:
    """Add segments ``[seg_lo, seg_hi)``'s sums inside the window ``bounds`` to ``sums``;
    return the step time per attempt inside it."""
    lo, hi = bounds
    step_time: dict[int, float] = {}
    rows_in: dict[int, tuple[int, int, float, float]] = {}
    # Segments of attempts wholly inside whose sums are not remembered yet: all at once.
    todo: list[tuple[AttemptRows, Segment, float]] = []
    for j in range(seg_lo, seg_hi):
        seg = segments[j]
        att = attempts[seg.attempt]
        if att.eff_start >= lo and att.eff_end <= hi:
            memo = seg.inside_memo
            if memo is None or memo[0] != inside_key(seg, keep_upto[j], safe):
                ar = rows[seg.attempt]
                assert ar is not None
                todo.append((ar, seg, keep_upto[j]))
    fill_inside_memos(todo, safe, bounds)
    for j in range(seg_lo, seg_hi):
        seg = segments[j]
        ar = rows[seg.attempt]
        assert ar is not None
        att = attempts[seg.attempt]
        # An attempt wholly inside the window (a whole-job report: all of them) needs no
        # search for the rows the window cuts, and its segments' sums can be reused.
        inside = att.eff_start >= lo and att.eff_end <= hi
        window = rows_in.get(seg.attempt)
        if window is None:
            if inside:
                window = (0, ar.n, lo, hi)
            elif att.eff_end < lo or att.eff_start > hi:
                window = (0, 0, lo, hi)
            else:
                window = (*ar.rows_overlapping(lo, hi), lo, hi)
            rows_in[seg.attempt] = window
        st = ar.add_segment(seg, keep_upto[j], safe, window, sums, inside=inside)
        step_time[seg.attempt] = step_time.get(seg.attempt, 0.0) + st
    return step_time


def last_step(rows: list[AttemptRows | None]) -> int | None:
    """The last step the rows of the last attempt with rows reach."""
    for ar in reversed(rows):
        if ar is not None and ar.n:
            return int(ar.at("step", ar.n - 1) + ar.count(ar.n - 1) - 1)
    return None


def checkpoint_progress(checkpoints: Checkpoints) -> tuple[int, int] | None:
    """Net saved progress of a log without steps (§7): the highest checkpoint saved minus
    the lowest restored (0 when nothing was restored), and that highest checkpoint; None
    when nothing was saved."""
    committed, saved_only, restores = checkpoints
    saved = committed + saved_only
    if not saved:
        return None
    restored = [r.step for r in restores]
    return max(0, max(saved) - (min(restored) if restored else 0)), max(saved)
