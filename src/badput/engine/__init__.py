"""The accounting engine: events in, a partition of the job's time out. No I/O."""

from __future__ import annotations

from badput.engine._accountant import Accountant
from badput.engine._model import AttemptSummary, Diagnostic, Report, StepCounts
from badput.engine._ranks import RankOptions, RankView, SectionView, Stall, Straggler
from badput.engine._steptime import StepTimeStats, step_time_stats

__all__ = [
    "Accountant",
    "AttemptSummary",
    "Diagnostic",
    "RankOptions",
    "RankView",
    "Report",
    "SectionView",
    "Stall",
    "StepCounts",
    "StepTimeStats",
    "Straggler",
    "step_time_stats",
]
