"""``ml_goodput_measurement.exclusion_utils``: exclusion intervals for goodput queries.

An exclusion interval is wall-clock time a user asks to leave out of a job's goodput
(a maintenance window, a known outage); see
``GoodputCalculator.get_job_goodput_with_exclusions``.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable, Sequence

__all__ = ["get_exclusion_overlap", "normalize_intervals"]

logger = logging.getLogger(__name__)


def normalize_intervals(
    intervals: Iterable[tuple[datetime.datetime, datetime.datetime]] | None,
) -> list[tuple[float, float]]:
    """POSIX (start, end) pairs, sorted and merged where they overlap or touch.

    An interval not in UTC, or whose start is not before its end, is logged and left out.
    """
    kept: list[tuple[datetime.datetime, datetime.datetime]] = []
    for start, end in intervals or ():
        if start.tzinfo != datetime.timezone.utc or end.tzinfo != datetime.timezone.utc:
            logger.warning("Skipping interval [%s , %s]: Timezone is not UTC", start, end)
        elif start >= end:
            logger.warning(
                "Skipping interval [%s , %s]: Start time is after or equal to End time.",
                start,
                end,
            )
        else:
            kept.append((start, end))
    merged: list[list[datetime.datetime]] = []
    for start, end in sorted(kept):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a.timestamp(), b.timestamp()) for a, b in merged]


def get_exclusion_overlap(
    start: float, end: float, exclusions: Sequence[tuple[float, float]]
) -> float:
    """Seconds of ``[start, end]`` covered by ``exclusions`` (normalised pairs)."""
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in exclusions)
