"""MFU over time: the model FLOPs utilisation of the windows goodput over time is taken
over (:class:`~badput.engine.GoodputSeries`), beside it on the HTML page and in the CSV.

The FLOPs of a kept step (its tokens x FLOPs per token, as :func:`program_goodput`
counts them) are spread evenly over the step's span (its drawn
:class:`~badput.engine.StepSpans`); a window's MFU is the FLOPs that fell in it over its
seconds x devices x peak. The cumulative value at the report's end is therefore the
whole job's MFU (``mfu_job``, = MPG), and a window within a run of steps has the MFU of
those steps (``mfu_productive`` where they are all productive).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from badput.engine._model import Report
from badput.engine._over_time import GoodputSeries
from badput.engine._program import ProgramTracker, kept_marks
from badput.engine._timeline import Timeline

__all__ = ["MfuSeries", "mfu_over_time", "work_spans"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class MfuSeries:
    """MFU at the ends of goodput over time's windows (``t``, the same points): of
    ``[start, t]`` (``cumulative``) and of the last ``rolling_seconds`` before ``t``
    (``rolling``); ``None`` where a window has no time."""

    t: list[float]
    cumulative: list[float | None]
    rolling: list[float | None]
    rolling_seconds: float


def work_spans(tracker: ProgramTracker, report: Report, timeline: Timeline) -> tuple[F64, F64, F64]:
    """``(starts, ends, tokens)``: each kept step's tokens over its span in ``timeline``
    (the span of the speaking rank's step the mark belongs to; a mark whose span is not
    drawn is a point at its own time)."""
    lanes = {(ln.attempt_index, -1 if ln.rank is None else ln.rank): i
             for i, ln in enumerate(timeline.lanes)}  # fmt: skip
    spans = timeline.steps
    bounds = np.searchsorted(spans.lane, np.arange(len(timeline.lanes) + 1))
    marks = kept_marks(tracker, report)
    starts, ends = marks.ts.astype(np.float64), marks.ts.astype(np.float64)
    tokens = marks.tokens.astype(np.float64)
    # the marks of one (attempt, rank) are consecutive (ordered by attempt, then time: one
    # rank speaks for each attempt)
    cut = np.flatnonzero(np.diff(marks.attempt) != 0) + 1
    for lo_m, hi_m in zip([0, *cut.tolist()], [*cut.tolist(), len(marks.ts)], strict=True):
        if lo_m == hi_m:
            continue
        key = (int(marks.attempt[lo_m]), int(marks.rank[lo_m]))
        lane = lanes.get(key, lanes.get((key[0], -1)))
        if lane is None:
            continue
        lo, hi = int(bounds[lane]), int(bounds[lane + 1])
        ts, step = marks.ts[lo_m:hi_m], marks.step[lo_m:hi_m]
        found = np.zeros(hi_m - lo_m, bool)
        j = lo + np.searchsorted(spans.start[lo:hi], ts, side="right") - 1
        for near in (j, j - 1):  # its own span starts at or ends at the mark (the first wins)
            ok = (near >= lo) & (near < hi) & ~found
            i = np.where(ok, near, lo)
            ok &= (spans.step[i] == step) & (spans.start[i] <= ts) & (ts <= spans.end[i])
            starts[lo_m:hi_m][ok] = spans.start[i][ok]
            ends[lo_m:hi_m][ok] = spans.end[i][ok]
            found |= ok
    return starts, ends, tokens


def _work_until(x: F64, starts: F64, ends: F64, tokens: F64) -> F64:
    """Tokens done by each time of ``x``: each span's spread evenly over it (piecewise
    linear between the spans' bounds), a point's all at once."""
    done = np.zeros_like(x)
    span = ends > starts
    if span.any():
        rate = tokens[span] / (ends[span] - starts[span])
        at = np.concatenate([starts[span], ends[span]])
        order = np.argsort(at, kind="stable")
        at = at[order]
        running = np.cumsum(np.concatenate([rate, -rate])[order])  # the rate after each
        upto = np.concatenate([[0.0], np.cumsum(running[:-1] * np.diff(at))])
        done += np.interp(x, at, upto)
    if not span.all():
        at = np.sort(starts[~span])
        total = np.concatenate([[0.0], np.cumsum(tokens[~span][np.argsort(starts[~span])])])
        done += total[np.searchsorted(at, x, side="right")]
    return done


def mfu_over_time(
    series: GoodputSeries,
    span: tuple[float, float],
    work: tuple[F64, F64, F64],
    flops_per_token: float,
    capacity: float,
) -> MfuSeries:
    """MFU over ``series``' windows, the equal steps of ``span`` (cumulative from its
    start, and rolling), of the kept steps' ``work`` (:func:`work_spans`) at
    ``flops_per_token`` on devices doing ``capacity`` FLOP/s together."""
    start = span[0]
    t = np.linspace(start, span[1], len(series.t) + 1)[1:]  # series.t, not rounded
    begin = np.maximum(start, t - series.rolling_seconds)
    done = _work_until(np.concatenate([t, begin]), *work)
    at_t, at_begin = done[: len(t)], done[len(t) :]

    def mfu(tokens: float, seconds: float) -> float | None:
        return round(tokens * flops_per_token / (seconds * capacity), 6) if seconds > 0 else None

    return MfuSeries(
        t=list(series.t),
        cumulative=[mfu(w, b - start) for w, b in zip(at_t.tolist(), t.tolist(), strict=True)],
        rolling=[
            mfu(w1 - w0, b - a)
            for w1, w0, b, a in zip(
                at_t.tolist(), at_begin.tolist(), t.tolist(), begin.tolist(), strict=True
            )
        ],
        rolling_seconds=series.rolling_seconds,
    )


def program_over_time(
    tracker: ProgramTracker, report: Report, timeline: Timeline, series: GoodputSeries
) -> MfuSeries | None:
    """MFU over time of ``report``'s job, or None when its MFU is absent (its
    ``program.absent`` says why)."""
    p = report.program
    if p is None or p.mfu_job is None or p.flops_per_token is None:
        return None
    if p.peak_flops is None or p.devices is None:
        return None
    work = work_spans(tracker, report, timeline)
    return mfu_over_time(
        series, (report.start, report.end), work, p.flops_per_token, p.peak_flops * p.devices
    )
