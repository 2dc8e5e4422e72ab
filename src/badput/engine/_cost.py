"""The report in money: each bucket's device-hours at a price per device-hour
(docs/advice.md#cost).

A bucket of ``s`` seconds on ``n`` devices at ``p`` per device-hour costs
``s / 3600 * n * p``: the job holds its devices for every second of its wall-clock time,
whatever bucket the second is in. The badput rate per day is what the report's badput
share of a day on those devices costs: for a rolling window of a running job, what its
badput costs a day at the window's rate.
"""

from __future__ import annotations

import dataclasses
import math

from badput.engine._cost_model import SECONDS_PER_DAY, Cost, DevicesSource
from badput.engine._model import PRODUCTIVE, Report

__all__ = ["cost_of", "resolve_devices", "with_cost"]


def resolve_devices(
    given: int | None, recorded: object, ranks: int
) -> tuple[int, DevicesSource] | None:
    """The device count: ``given`` (``--devices``), else the log's ``model`` event's
    ``devices``, else one per rank the log names; None when none of them says."""
    if given is not None and given > 0:
        return given, "given"
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0:
        return recorded, "recorded"
    if ranks > 0:
        return ranks, "ranks"
    return None


def cost_of(report: Report, price: float, devices: int, source: DevicesSource) -> Cost:
    """The :class:`Cost` of ``report`` at ``price`` per device-hour on ``devices``."""
    per_hour = devices * price  # every device of the job, for an hour
    buckets = {name: seconds / 3600.0 * per_hour for name, seconds in report.buckets.items()}
    total = math.fsum(buckets.values())
    goodput = buckets.get(PRODUCTIVE, 0.0)
    per_day = per_hour * SECONDS_PER_DAY / 3600.0
    t = report.total_seconds
    share = (t - report.bucket(PRODUCTIVE)) / t if t > 0 else 0.0
    return Cost(
        price_per_device_hour=price,
        devices=devices,
        devices_source=source,
        buckets=buckets,
        total=total,
        goodput=goodput,
        badput=total - goodput,
        per_day=per_day,
        badput_per_day=per_day * share,
    )


def with_cost(
    report: Report, price: float | None, given: int | None, recorded: object, ranks: int
) -> Report:
    """``report`` with its :class:`Cost` when a price is set and the devices are known."""
    if price is None:
        return report
    devices = resolve_devices(given, recorded, ranks)
    if devices is None:
        return report
    return dataclasses.replace(report, cost=cost_of(report, price, *devices))
