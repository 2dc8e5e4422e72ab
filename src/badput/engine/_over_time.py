"""Goodput over time: the engine's windowed reports at the ends of equal steps of a job.

The figure of the HTML page's goodput chart (and of any view that draws goodput against
time): views read a :class:`GoodputSeries`, they do not take windows of the job themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    from badput.engine._accountant import Accountant
    from badput.engine._model import Report

__all__ = ["GOODPUT_BINS", "ROLLING_BINS", "GoodputSeries", "goodput_over_time"]

#: Windows of goodput over time (each one windowed report).
GOODPUT_BINS: Final = 120
#: The rolling goodput is over this many windows.
ROLLING_BINS: Final = 10


@dataclass(frozen=True)
class GoodputSeries:
    """Goodput over time: the ends of equal windows (``t``), the cumulative goodput and
    observed goodput at each (``None`` where not taken: every other point), and the
    rolling goodput over the last ``rolling_seconds``."""

    t: list[float]
    cumulative: list[float | None]
    observed: list[float | None]
    rolling: list[float | None]
    rolling_seconds: float


def goodput_over_time(
    accountant: Accountant, report: Report, bins: int = GOODPUT_BINS
) -> GoodputSeries:
    """Cumulative and rolling goodput at the ends of ``bins`` equal steps of ``report``.

    Both are the engine's windowed reports: the cumulative value at ``t`` is the report
    of ``[start, t]`` (the goodput the job had at ``t``; it ends at the report's), taken
    at every other point (a chart joins them); the rolling one is the report of the
    last :data:`ROLLING_BINS` steps before ``t``. (Windows are not summed: productive
    time is capped at kept steps x the ideal step time over the whole window, so the
    sum of small windows can fall short of a large one.)
    """
    total = report.end - report.start
    if total <= 0 or not report.attempts:
        return GoodputSeries([], [], [], [], 0.0)
    edges = np.linspace(report.start, report.end, bins + 1)[1:]
    # The report's own ideal step time: configured, or (None) estimated over the whole job
    # as the report estimated it. (Configuring the estimate would count differently where
    # steps tie, and would not find the state the report left cached.)
    ideal = report.ideal_step_time if report.ideal_step_time_source == "configured" else None
    width = total / bins * ROLLING_BINS

    def fractions(a: float, b: float) -> tuple[float | None, float | None]:
        productive, slowdown, seconds = accountant.goodput_seconds((a, b), ideal)
        if seconds <= 0:
            return None, None
        return round(productive / seconds, 5), round((productive + slowdown) / seconds, 5)

    cumulative: list[float | None] = []
    observed: list[float | None] = []
    rolling: list[float | None] = []
    for i, edge in enumerate(edges):
        t = float(edge)
        if i % 2 == 1 or i == bins - 1:  # every other point, and the end
            c, o = fractions(report.start, t)
        else:
            c = o = None
        cumulative.append(c)
        observed.append(o)
        rolling.append(fractions(max(report.start, t - width), t)[0])
    return GoodputSeries(
        t=[round(float(t), 3) for t in edges],
        cumulative=cumulative,
        observed=observed,
        rolling=rolling,
        rolling_seconds=float(width),
    )
