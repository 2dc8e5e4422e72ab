"""What the per-rank view answers (docs/ranks.md): its options, each rank's view, the
stragglers and the stalls. :class:`~badput.engine._ranks.RankTracker` makes them."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "RankAnalysis",
    "RankOptions",
    "RankView",
    "SectionView",
    "Stall",
    "Straggler",
]


@dataclass(frozen=True)
class RankOptions:
    """Thresholds of the per-rank analysis (docs/ranks.md).

    - ``straggler_threshold``: a rank whose relative or individual score of a
      section is below this is a straggler (NVIDIA's default, 0.75).
    - ``min_excess``: ... and only when its recent median exceeds the reference by
      at least this many seconds (so that microsecond sections do not flag noise).
    - ``min_samples``: runs a summary period needs to give a median.
    - ``stall_factor``, ``stall_floor``: no progress for longer than
      ``max(stall_factor x typical step time, stall_floor)`` seconds is a stall.
    """

    straggler_threshold: float = 0.75
    min_excess: float = 0.001
    min_samples: int = 3
    stall_factor: float = 10.0
    stall_floor: float = 60.0


@dataclass(frozen=True)
class SectionView:
    """One timed section of one rank (seconds)."""

    count: int
    seconds: float
    recent_p50: float | None
    best_p50: float | None
    relative_score: float | None
    individual_score: float | None
    open_since: float | None = None


@dataclass(frozen=True)
class RankView:
    """What one rank did, over every attempt (JSON ``ranks``)."""

    rank: int
    host: str | None
    attempts: int
    steps: int
    typical_step_time: float | None
    data_loading_seconds: float
    buckets: dict[str, float]
    first_step: int | None
    last_step: int | None
    first_event: float
    last_event: float
    last_progress: float | None
    sections: dict[str, SectionView] = field(default_factory=dict)
    outlier: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Straggler:
    """A rank below the score threshold in one section (JSON ``stragglers``)."""

    rank: int
    host: str | None
    section: str
    relative_score: float | None
    individual_score: float | None
    recent_seconds: float
    reference_seconds: float


@dataclass(frozen=True)
class Stall:
    """A time when no rank made progress (JSON ``stalls``).

    ``first_stopped``: the ranks that stopped first: those that never reached
    the step (or the section count) the others reached, else those whose last
    progress is oldest (``why`` says which). ``buckets``: where the partition put
    the stall's time (a hang is counted in the buckets ACCOUNTING.md gives it,
    and this says so).
    """

    attempt: str | None
    start: float
    end: float
    seconds: float
    ongoing: bool
    threshold: float
    last_step: int | None
    first_stopped: list[int]
    why: str
    open_sections: dict[str, str] = field(default_factory=dict)
    inside: list[str] = field(default_factory=list)
    buckets: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RankAnalysis:
    ranks: list[RankView]
    stragglers: list[Straggler]
    stalls: list[Stall]
