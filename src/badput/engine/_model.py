"""What the engine returns: the typed form of ACCOUNTING.md §8."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from badput.engine._ranks import RankView, Stall, Straggler

__all__ = [
    "BUCKETS",
    "PRODUCTIVE",
    "AttemptSummary",
    "Buckets",
    "Diagnostic",
    "Report",
    "StepCounts",
]

PRODUCTIVE = "productive"

EndReason = Literal["job_end", "last_event", "now"]

#: Every bucket of the partition with a fixed name (ACCOUNTING.md §2, §8); recorded
#: intervals add ``custom:<name>`` and ``elastic_wait:<kind>`` buckets.
BUCKETS: tuple[str, ...] = (
    PRODUCTIVE,
    "slowdown",
    "startup",
    "wasted",
    "recovery",
    "queued",
    "untracked",
    "accelerator_init",
    "training_prep",
    "checkpoint_save",
    "checkpoint_restore",
    "data_loading",
    "compile",
    "elastic_reinit",
    "process_init",  # the recorder's interval from the OS's process start (docs/integrations.md)
)
_NAMED_PREFIXES = ("custom:", "elastic_wait:")


class Buckets(dict[str, float]):
    """Seconds per bucket. Holds only the non-zero buckets (as the JSON does), but reading
    any bucket the report knows gives 0.0 when it is empty: ``buckets["wasted"]`` on a job
    that never crashed is 0.0, not a KeyError. A name that is no bucket still raises."""

    def __missing__(self, key: str) -> float:
        if _known(key):
            return 0.0
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        """``buckets.get("wasted")`` is 0.0 as ``buckets["wasted"]`` is, not None; ``default``
        only for a name that is no bucket."""
        if key in self:
            return self[key]
        return 0.0 if _known(key) else default


def _known(key: object) -> bool:
    """Whether ``key`` names a bucket a report may hold (fixed, or named by the log)."""
    return key in BUCKETS or (isinstance(key, str) and key.startswith(_NAMED_PREFIXES))


@dataclass(frozen=True)
class Diagnostic:
    """Something in the log the user should know about (never fatal)."""

    code: str
    message: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else ""
        return f"{where}[{self.code}] {self.message}"


@dataclass(frozen=True)
class AttemptSummary:
    id: str | int
    start: float
    end: float
    end_reason: str  # job_end | attempt_end:<status> | last_event | now
    restore_step: int | None
    first_step: int | None
    last_step: int | None
    status: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class StepCounts:
    kept: int
    wasted: int
    last: int | None


@dataclass(frozen=True)
class Report:
    """The partition of a job's time into goodput and badput buckets.

    ``buckets`` holds seconds and sums to ``total_seconds`` (to float rounding);
    zero buckets are left out, but ``buckets[name]`` of a known bucket gives 0.0
    (:class:`Buckets`). ``goodput`` and ``observed_goodput`` are fractions.
    """

    job: str
    start: float
    end: float
    end_reason: EndReason
    total_seconds: float
    goodput: float
    observed_goodput: float
    buckets: Buckets
    overlapped: dict[str, float]
    at_risk_seconds: float
    ideal_step_time: float | None
    ideal_step_time_source: Literal["configured", "estimated"] | None
    attempts: list[AttemptSummary]
    steps: StepCounts
    diagnostics: list[Diagnostic] = field(default_factory=list)
    window: tuple[float, float] | None = None
    # Every rank (engine/_ranks.py, docs/ranks.md); empty for windowed reports.
    ranks: list[RankView] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)
    stalls: list[Stall] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.buckets, Buckets):  # built by hand (tests, other tools)
            object.__setattr__(self, "buckets", Buckets(self.buckets))

    def bucket(self, name: str) -> float:
        """Seconds in ``name`` (0.0 when the bucket is empty)."""
        value: float = self.buckets.get(name, 0.0)
        return value

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``badput report --json``."""
        attempts = self.attempts
        # asdict copies each field recursively: 60 ms for 10,000 attempts, whose fields
        # are all plain values (dict(vars(a)) is the same mapping, in field order).
        out = asdict(replace(self, attempts=[]))
        out["attempts"] = [dict(vars(a)) for a in attempts]
        out["buckets"] = dict(self.buckets)  # zero buckets left out (documented)
        out["window"] = list(self.window) if self.window is not None else None
        return out

    def to_pandas(self) -> dict[str, Any]:
        """``{"buckets": DataFrame, "attempts": DataFrame}`` (needs ``badput[pandas]``).

        ``buckets``: bucket, seconds, fraction (largest first); ``attempts``: the
        fields of :class:`AttemptSummary`, one row per attempt. Step rows are in
        :meth:`Timeline.to_pandas`.
        """
        from badput._optional import import_optional  # noqa: PLC0415

        pd = import_optional("pandas", "pandas")
        total = self.total_seconds
        buckets = pd.DataFrame(
            [
                (name, seconds, seconds / total if total > 0 else 0.0)
                for name, seconds in sorted(self.buckets.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            columns=["bucket", "seconds", "fraction"],
        )
        attempts = pd.DataFrame(
            [asdict(a) for a in self.attempts],
            columns=[
                "id",
                "start",
                "end",
                "end_reason",
                "restore_step",
                "first_step",
                "last_step",
                "status",
                "exit_code",
            ],
        )
        return {"buckets": buckets, "attempts": attempts}
