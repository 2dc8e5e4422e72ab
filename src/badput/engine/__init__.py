"""The accounting engine: events in, a partition of the job's time out. No I/O."""

from __future__ import annotations

from badput.engine._accountant import Accountant, cpu_time_with_helpers
from badput.engine._cost import cost_of, resolve_devices
from badput.engine._cost_model import Cost
from badput.engine._model import (
    MAX_NAMED_BUCKETS,
    PRODUCTIVE,
    AttemptSummary,
    Diagnostic,
    GroupedBuckets,
    Report,
    StepCounts,
    group_buckets,
)
from badput.engine._origin import clock_continues
from badput.engine._over_time import GOODPUT_BINS, ROLLING_BINS, GoodputSeries
from badput.engine._program import dense_flops_per_token
from badput.engine._program_model import (
    PEAK_FLOPS,
    PROGRAM_FIGURES,
    AttemptWork,
    ProgramGoodput,
    table_peak,
)
from badput.engine._program_time import MfuSeries, mfu_over_time
from badput.engine._rank_model import RankOptions, RankView, SectionView, Stall, Straggler
from badput.engine._snapshot import Snapshot
from badput.engine._state import (
    JOB_STATES,
    SILENCE_MIN_SECONDS,
    SILENCE_STEP_FACTOR,
    JobState,
    job_state,
    silence_threshold,
)
from badput.engine._steptime import DEFAULT_SLOWDOWN_FACTOR, StepTimeStats, step_time_stats
from badput.engine._timeline import (
    STEP_BUCKETS,
    IntervalSpan,
    IntervalSpans,
    Lane,
    StepSpans,
    Timeline,
)

__all__ = [
    "DEFAULT_SLOWDOWN_FACTOR",
    "GOODPUT_BINS",
    "JOB_STATES",
    "MAX_NAMED_BUCKETS",
    "PEAK_FLOPS",
    "PRODUCTIVE",
    "PROGRAM_FIGURES",
    "ROLLING_BINS",
    "SILENCE_MIN_SECONDS",
    "SILENCE_STEP_FACTOR",
    "STEP_BUCKETS",
    "Accountant",
    "AttemptSummary",
    "AttemptWork",
    "Cost",
    "Diagnostic",
    "GoodputSeries",
    "GroupedBuckets",
    "IntervalSpan",
    "IntervalSpans",
    "JobState",
    "Lane",
    "MfuSeries",
    "ProgramGoodput",
    "RankOptions",
    "RankView",
    "Report",
    "SectionView",
    "Snapshot",
    "Stall",
    "StepCounts",
    "StepSpans",
    "StepTimeStats",
    "Straggler",
    "Timeline",
    "clock_continues",
    "cost_of",
    "cpu_time_with_helpers",
    "dense_flops_per_token",
    "group_buckets",
    "job_state",
    "mfu_over_time",
    "resolve_devices",
    "silence_threshold",
    "step_time_stats",
    "table_peak",
]
