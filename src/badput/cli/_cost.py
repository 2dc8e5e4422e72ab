"""``--price-per-device-hour`` and ``--devices`` of the commands that show a job's buckets in
money (``jobs``, ``compare``, ``monitor``; ``report`` has its own: its ``--devices`` is
MFU's too): docs/advice.md#cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from badput.cli._commands import FiniteRange

if TYPE_CHECKING:
    from badput.analysis import LiveJob

__all__ = ["devices_option", "price_option", "priced"]

price_option = click.option(
    "--price-per-device-hour",
    "price",
    type=FiniteRange(min=0.0),
    metavar="PRICE",
    help="Each bucket in money: devices x hours x PRICE (docs/advice.md#cost).",
)
devices_option = click.option(
    "--devices",
    type=click.IntRange(min=1),
    metavar="N",
    help="Devices of the job for its cost (default: the log's model event, else its ranks).",
)


def priced(live: LiveJob, price: float | None, devices: int | None) -> LiveJob:
    """``live``, whose reports carry their cost at ``price`` (``report.cost``)."""
    live.accountant.price_per_device_hour = price
    if devices is not None:
        live.accountant.devices = devices
    return live
