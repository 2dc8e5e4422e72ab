"""Step-time analytics: how far recent steps are from the ideal step time (no I/O)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_SLOWDOWN_FACTOR", "StepTimeStats", "step_time_stats"]

#: The slowdown alarm fires when the recent median step time exceeds ideal x this.
DEFAULT_SLOWDOWN_FACTOR = 1.2
_RECENT = 100  # steps in the "recent" window (the reference library's choice)
_BASELINE = 1000  # steps before them that form the baseline


@dataclass(frozen=True)
class StepTimeStats:
    """Per-step deviation from the ideal step time over the most recent steps.

    ``deviation`` values are seconds (step time - ideal). ``gcm_deviation`` is the
    statistic ml-goodput-measurement uploads to Cloud Monitoring: the mean
    deviation while fewer than 100 steps are known, then p90 of the last 100 step
    times minus the median of the (up to) 1,000 before them.
    """

    steps: int  # step times the statistics are over
    ideal_step_time: float | None
    last_step_time: float | None
    recent_median: float | None  # median of the last 100 step times
    deviation_p50: float | None
    deviation_p90: float | None
    deviation_max: float | None
    gcm_deviation: float | None
    slowdown_factor: float
    slowdown_alarm: bool  # recent median > ideal x slowdown_factor

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_time_stats(
    step_times: npt.NDArray[np.float64],
    ideal: float | None,
    *,
    slowdown_factor: float = DEFAULT_SLOWDOWN_FACTOR,
) -> StepTimeStats:
    """Statistics of ``step_times`` (seconds per step, oldest first) against ``ideal``."""
    if not slowdown_factor > 0:
        raise ValueError(f"slowdown_factor must be positive, got {slowdown_factor}")
    n = int(step_times.shape[0])
    if n == 0:
        return StepTimeStats(0, ideal, None, None, None, None, None, None, slowdown_factor, False)
    recent = step_times[-_RECENT:]
    recent_median = float(np.median(recent))
    p50 = p90 = dmax = gcm = None
    if ideal is not None:
        dev = step_times - ideal
        p50, p90 = (float(v) for v in np.percentile(dev, [50, 90]))
        dmax = float(dev.max())
        if n < _RECENT:
            gcm = float(dev.mean())
    if n >= _RECENT:
        baseline = step_times[max(0, n - _RECENT - _BASELINE) : n - _RECENT]
        if baseline.shape[0]:
            gcm = float(np.percentile(recent, 90) - np.median(baseline))
        elif ideal is not None:
            gcm = float(np.percentile(recent, 90) - ideal)
    alarm = ideal is not None and recent_median > ideal * slowdown_factor
    return StepTimeStats(
        steps=n,
        ideal_step_time=ideal,
        last_step_time=float(step_times[-1]),
        recent_median=recent_median,
        deviation_p50=p50,
        deviation_p90=p90,
        deviation_max=dmax,
        gcm_deviation=gcm,
        slowdown_factor=slowdown_factor,
        slowdown_alarm=bool(alarm),
    )
