"""``--price-per-device-hour`` of the commands that show a job's buckets in money (``jobs``,
``compare``, ``monitor``; ``report`` has its own); the devices are ``--devices`` of
:func:`~badput.cli._types.program_options` (MFU's too): docs/advice.md#cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from badput.cli._types import FiniteRange

if TYPE_CHECKING:
    from badput.analysis import LiveJob

__all__ = ["price_option", "priced"]

price_option = click.option(
    "--price-per-device-hour",
    "price",
    type=FiniteRange(min=0.0),
    metavar="PRICE",
    help="Each bucket in money: devices x hours x PRICE (docs/advice.md#cost).",
)


def priced(live: LiveJob, price: float | None) -> LiveJob:
    """``live``, whose reports carry their cost at ``price`` (``report.cost``; its devices:
    ``--devices``, else the log's model event, else its ranks)."""
    live.accountant.price_per_device_hour = price
    return live
