"""Option types the commands share: :class:`FiniteRange`, and the program goodput
options (``--peak-flops``, ``--devices``) of every view that shows MFU
(docs/program-goodput.md)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

import click

__all__ = ["FiniteRange", "Program", "program_options", "set_program"]

F = TypeVar("F", bound=Callable[..., Any])
#: ``(--peak-flops, --devices)``: each None when not given.
Program: TypeAlias = tuple[float | None, int | None]


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that refuses ``inf`` and ``nan`` (which it lets through: ``nan``
    compares false with every bound). An interval, a window or a threshold of ``inf`` or
    ``nan`` is a usage error naming the option, not a loop that sleeps for ever or a
    comparison that is never true."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def program_options(command: F) -> F:
    """``--peak-flops FLOPS`` and ``--devices N``, given to ``command`` as one keyword,
    ``program`` (:data:`Program`)."""

    @functools.wraps(command)
    def with_program(
        *args: Any, peak_flops: float | None = None, devices: int | None = None, **kw: Any
    ) -> Any:
        return command(*args, program=(peak_flops, devices), **kw)

    wrapped: Any = click.option(
        "--devices",
        type=click.IntRange(min=1),
        metavar="N",
        help="The job's device count for MFU (default: what the log's model event records).",
    )(with_program)
    done: F = click.option(
        "--peak-flops",
        type=FiniteRange(min=0.0, min_open=True),
        metavar="FLOPS",
        help="Each device's peak FLOP/s (bf16 dense, e.g. 989.5e12) for MFU and program "
        "goodput (default: the log's model event, or its device's in the table).",
    )(wrapped)
    return done


def set_program(accountant: Any, program: Program) -> None:
    """Give ``accountant`` (an :class:`~badput.engine.Accountant`) the peak and the device
    count its reports' program goodput uses over the log's."""
    accountant.peak_flops, accountant.devices = program
