"""The monitor's one vocabulary: what each published metric is called by each exporter,
its unit and its meaning, and how a rolling window is named, so that one quantity reads
the same in Prometheus, OpenTelemetry, TensorBoard and Cloud Monitoring.

Cloud Monitoring keeps ml-goodput-measurement's names (``gcm.py``: ``goodput_time``,
``badput_time`` by ``badput_source``...), which its users' dashboards expect.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, NamedTuple

from badput.engine import PROGRAM_FIGURES

if TYPE_CHECKING:
    from badput.engine import Snapshot

__all__ = ["METRICS", "PROGRAM_METRICS", "MetricName", "program_values", "window_label"]


class MetricName(NamedTuple):
    """One quantity of a snapshot, as each exporter names it."""

    prometheus: str
    otel: str
    tensorboard: str | None  # a tag, or None when TensorBoard does not plot it
    unit: str  # UCUM, as OpenTelemetry wants it: "1", "s", "{currency}" (the price's)
    description: str


#: Every metric, by key (the key is the OpenTelemetry name without ``badput.``).
METRICS: Final[dict[str, MetricName]] = {
    m.otel.removeprefix("badput."): m
    for m in (
        MetricName(
            "badput_goodput_ratio",
            "badput.goodput",
            "goodput/goodput",
            "1",
            "Goodput: productive time / total time",
        ),
        MetricName(
            "badput_observed_goodput_ratio",
            "badput.observed_goodput",
            "goodput/observed",
            "1",
            "Observed goodput: (productive + slowdown) / total time",
        ),
        MetricName(
            "badput_seconds",
            "badput.seconds",
            None,
            "s",
            "Seconds of the job's time in each bucket",
        ),
        MetricName(
            "badput_elapsed_seconds", "badput.elapsed", None, "s", "Total time of the job so far"
        ),
        MetricName(
            "badput_disruptions_total",
            "badput.disruptions",
            None,
            "1",
            "Restarts so far (attempts after the first)",
        ),
        MetricName("badput_last_step", "badput.last_step", None, "1", "The last step reached"),
        MetricName(
            "badput_ideal_step_seconds",
            "badput.ideal_step_time",
            None,
            "s",
            "The ideal step time",
        ),
        MetricName(
            "badput_step_time_deviation_seconds",
            "badput.step_time_deviation",
            None,
            "s",
            "Recent step-time deviation (the ml-goodput-measurement statistic)",
        ),
        MetricName(
            "badput_at_risk_seconds",
            "badput.at_risk",
            "goodput/at_risk",
            "s",
            "Kept step time since the newest checkpoint (wasted if the job crashed now)",
        ),
        MetricName(
            "badput_window_goodput_ratio",
            "badput.window.goodput",
            None,
            "1",
            "Goodput of a rolling window",
        ),
        MetricName(
            "badput_window_observed_goodput_ratio",
            "badput.window.observed_goodput",
            None,
            "1",
            "Observed goodput of a rolling window",
        ),
        MetricName(
            "badput_window_seconds",
            "badput.window.seconds",
            None,
            "s",
            "Seconds in each bucket of a rolling window",
        ),
        MetricName(
            "badput_window_elapsed_seconds",
            "badput.window.elapsed",
            None,
            "s",
            "Length of a rolling window (clipped to the job)",
        ),
        MetricName(
            "badput_grouped_buckets",
            "badput.grouped_buckets",
            None,
            "1",
            "Named buckets without a series of their own, counted in custom:(other) or "
            "elastic_wait:(other)",
        ),
        MetricName(
            "badput_cost",
            "badput.cost",
            None,
            "{currency}",
            "Money of each bucket so far: seconds / 3600 x devices x price per device-hour",
        ),
        MetricName(
            "badput_badput_cost_per_day",
            "badput.badput_cost_per_day",
            "cost/badput_per_day",
            "{currency}/d",
            "What badput costs a day at the job's badput share so far",
        ),
        MetricName(
            "badput_window_badput_cost_per_day",
            "badput.window.badput_cost_per_day",
            None,
            "{currency}/d",
            "What badput costs a day at a rolling window's badput share",
        ),
        MetricName(
            "badput_up",
            "badput.up",
            None,
            "1",
            "1 once the monitor has exported a snapshot, 0 before",
        ),
        # program goodput (docs/program-goodput.md): only when computed
        MetricName(
            "badput_tokens_per_second",
            "badput.program.tokens_per_second",
            "program/tokens_per_second",
            "{token}/s",
            "Tokens of every step over the job's whole time",
        ),
        MetricName(
            "badput_productive_tokens_per_second",
            "badput.program.productive_tokens_per_second",
            "program/productive_tokens_per_second",
            "{token}/s",
            "Tokens of the kept steps over their own time",
        ),
        MetricName(
            "badput_mfu_ratio",
            "badput.program.mfu",
            "program/mfu",
            "1",
            "Model FLOPs utilisation of the kept steps (their FLOPs / devices x peak)",
        ),
        MetricName(
            "badput_scheduling_goodput_ratio",
            "badput.program.scheduling_goodput",
            "program/scheduling_goodput",
            "1",
            "Scheduling goodput (SG): the share of the job's time it held its devices",
        ),
        MetricName(
            "badput_runtime_goodput_ratio",
            "badput.program.runtime_goodput",
            "program/runtime_goodput",
            "1",
            "Runtime goodput (RG): productive time / the time the job held its devices",
        ),
        MetricName(
            "badput_program_goodput_ratio",
            "badput.program.program_goodput",
            "program/program_goodput",
            "1",
            "Program goodput (PG): kept FLOPs / (productive time x devices x peak)",
        ),
        MetricName(
            "badput_mpg_ratio",
            "badput.program.mpg",
            "program/mpg",
            "1",
            "ML Productivity Goodput, MPG = SG x RG x PG",
        ),
    )
}

#: The metric key of each program goodput figure (:data:`~badput.engine.PROGRAM_FIGURES`).
PROGRAM_METRICS: Final[dict[str, str]] = {
    figure: "program." + ("mfu" if figure == "mfu_productive" else figure)
    for figure in PROGRAM_FIGURES
}


def program_values(snapshot: Snapshot) -> list[tuple[str, float]]:
    """``(metric key, value)`` of each program goodput figure of ``snapshot`` that is
    computed (none when the log records no step work or model): what every exporter
    publishes of it."""
    program = snapshot.report.program
    if program is None:
        return []
    return [
        (PROGRAM_METRICS[name], value) for name, value, _ in program.figures() if value is not None
    ]


def window_label(seconds: float) -> str:
    """The name of a rolling window: ``2592000.0`` → ``"2592000s"``, ``0.5`` → ``"0.5s"``.

    Whole seconds are written as an integer (never ``2.592e+06s``); a fraction keeps
    Python's shortest exact form.
    """
    if math.isfinite(seconds) and float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{float(seconds)!r}s"
