"""What to change, and what it would buy (docs/advice.md).

- :func:`advise`: the measured failure rate (with its confidence interval), checkpoint,
  restore and restart costs, the recommended checkpoint interval (Young, Daly) and the
  other levers, each with the time it would give back.
- :func:`whatif`: the job's own timeline replayed under other checkpoint and restart
  settings, beside the real report.

A view of the engine's :class:`~badput.engine.Report` and
:class:`~badput.engine.Timeline`: it reads them, never the engine's state.
"""

from badput.advice._advise import (
    Advice,
    FailureRate,
    Interval,
    Lever,
    Spread,
    advise_of,
    failure_rate,
    pooled_rate,
    rate_of,
)
from badput.advice._measure import AttemptFacts, JobFacts, SaveFacts, measure
from badput.advice._model import daly_interval, efficiency, young_interval
from badput.advice._read import (
    advise,
    advise_pooled,
    devices_of,
    read_job,
    report_advice,
    whatif,
)
from badput.advice._render import render_advice, render_whatif
from badput.advice._replay import ReplaySettings, WhatIf, replay_seconds, whatif_of
from badput.advice._stats import chi2_quantile, poisson_rate_interval

__all__ = [
    "Advice",
    "AttemptFacts",
    "FailureRate",
    "Interval",
    "JobFacts",
    "Lever",
    "ReplaySettings",
    "SaveFacts",
    "Spread",
    "WhatIf",
    "advise",
    "advise_of",
    "advise_pooled",
    "chi2_quantile",
    "daly_interval",
    "devices_of",
    "efficiency",
    "failure_rate",
    "measure",
    "poisson_rate_interval",
    "pooled_rate",
    "rate_of",
    "read_job",
    "render_advice",
    "render_whatif",
    "replay_seconds",
    "report_advice",
    "whatif",
    "whatif_of",
    "young_interval",
]
