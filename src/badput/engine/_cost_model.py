"""The report in money (engine/_cost.py makes it; docs/advice.md#cost)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["SECONDS_PER_DAY", "Cost", "DevicesSource"]

DevicesSource = Literal["given", "recorded", "ranks"]
SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Cost:
    """Money of a report at ``price_per_device_hour`` on ``devices`` devices.

    ``buckets``: money per bucket (the report's buckets, same keys); ``total`` their sum,
    ``goodput`` the productive bucket's, ``badput`` the rest. ``per_day``: the devices for
    a day; ``badput_per_day``: the report's badput share of it.
    """

    price_per_device_hour: float
    devices: int
    devices_source: DevicesSource
    buckets: dict[str, float]
    total: float
    goodput: float
    badput: float
    per_day: float
    badput_per_day: float

    def money(self, seconds: float) -> float:
        """What ``seconds`` of the job's time cost (a bucket, a group of buckets)."""
        return seconds / 3600.0 * self.devices * self.price_per_device_hour
