"""What the engine returns: the typed form of ACCOUNTING.md §8."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final, Literal

from badput.engine._cost_model import Cost
from badput.engine._program_model import ProgramGoodput
from badput.engine._rank_model import RankView, Stall, Straggler

__all__ = [
    "BUCKETS",
    "MAX_NAMED_BUCKETS",
    "PRODUCTIVE",
    "AttemptSummary",
    "Buckets",
    "Diagnostic",
    "GroupedBuckets",
    "Report",
    "StepCounts",
    "group_buckets",
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
    "distributed_init",  # process groups, rendezvous, torchrun's own start
    "model_build",  # building (or loading) the model, apart from imports
    "teardown",  # after the last step or a crash, until the attempt's end
    "hung",  # derived: an attempt's final silence, from its last progress to its end
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


#: Named buckets (``custom:<name>``, ``elastic_wait:<kind>``, both families together) that a
#: view or an exporter shows one by one; the others are added into one bucket per family,
#: ``custom:(other)`` and ``elastic_wait:(other)`` (:func:`group_buckets`). A job that names
#: a custom event per step would otherwise draw a legend entry, a table row, a time-bin
#: column and a Prometheus series per step (issue 32).
MAX_NAMED_BUCKETS: Final = 20
#: The name (after the family's prefix) of the bucket that holds the named buckets not
#: shown one by one. A bucket of the log with that very name is always in it.
OTHER: Final = "(other)"
_GROUPS: Final = tuple(prefix + OTHER for prefix in _NAMED_PREFIXES)


def _family(name: str) -> str | None:
    """The group bucket ``name`` goes to when it is not shown by itself (``None``: a fixed
    bucket, never grouped)."""
    for prefix in _NAMED_PREFIXES:
        if name.startswith(prefix):
            return prefix + OTHER
    return None


@dataclass(frozen=True)
class GroupedBuckets:
    """Buckets as views and exporters show them: every fixed bucket, the named buckets
    kept (:data:`MAX_NAMED_BUCKETS` at most) and the group of each family's others.

    - ``buckets``: seconds per bucket shown; they sum to the seconds grouped (to float
      rounding: a group's seconds are an exact sum, :func:`math.fsum`).
    - ``named``: the named buckets kept, in the order they were chosen (the ones asked
      to be kept first, then largest first).
    - ``groups``: group bucket (``custom:(other)``) → (how many named buckets it holds,
      their seconds); only the groups that hold some.
    """

    buckets: Buckets
    named: tuple[str, ...]
    groups: dict[str, tuple[int, float]]
    _kept: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_kept", frozenset(self.named))

    @property
    def grouped(self) -> int:
        """How many named buckets are in the groups (0: every one is shown)."""
        return sum(n for n, _ in self.groups.values())

    def bucket_of(self, name: str) -> str:
        """The bucket ``name``'s time is shown in: itself, or its family's group (a named
        bucket not kept, even one these buckets do not hold)."""
        group = _family(name)
        if group is None or name in self._kept:
            return name
        return group

    def label(self, name: str) -> str:
        """``name`` as a view writes it: a group says how many names it holds,
        ``custom:(19,980 others)``; any other bucket is its name."""
        if name in self.groups:
            count = self.groups[name][0]
            return f"{name[: -len(OTHER)]}({count:,} other{'' if count == 1 else 's'})"
        return name


def group_buckets(
    buckets: Mapping[str, float],
    limit: int = MAX_NAMED_BUCKETS,
    *,
    keep: Iterable[str] = (),
) -> GroupedBuckets:
    """``buckets`` with at most ``limit`` named buckets; the others in their family's group.

    Fixed buckets (``productive``, ``wasted``...) are never grouped. The named buckets
    kept are those of ``keep`` that ``buckets`` holds (each name of ``keep`` takes a place,
    held or not: an exporter's series, once given, stay; see ``monitor/_base.py``), then the
    largest of the others (ties: by name) while places are left. With no ``keep`` they are
    the ``limit`` largest. Nothing is lost: the buckets returned sum to the same seconds,
    so goodput + every badput share still make 100 %. A bucket of the log named like a
    group (``custom:(other)``) is always in that group.
    """
    places = max(limit, 0)
    wanted = [n for n in dict.fromkeys(keep) if _family(n) is not None and n not in _GROUPS]
    wanted = wanted[:places]
    out: dict[str, float] = {}
    named: dict[str, float] = {}
    for name, seconds in buckets.items():
        if _family(name) is None:
            out[name] = seconds
        else:
            named[name] = seconds
    kept = [n for n in wanted if n in named]
    taken = set(kept)
    rest = sorted(
        ((n, v) for n, v in named.items() if n not in taken and n not in _GROUPS),
        key=lambda kv: (-kv[1], kv[0]),
    )
    room = places - len(wanted)
    kept += [n for n, _ in rest[: max(room, 0)]]
    kept_set = set(kept)
    members: dict[str, list[float]] = {}
    for name, seconds in named.items():
        if name not in kept_set:
            members.setdefault(_family(name) or name, []).append(seconds)
    for name in kept:
        out[name] = named[name]
    groups = {g: (len(v), math.fsum(v)) for g, v in members.items()}
    for g, (_, seconds) in groups.items():
        out[g] = seconds
    return GroupedBuckets(Buckets(out), tuple(kept), groups)


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
    #: Ended by a ``job_end``: the ranks that took part in it and wrote no end yet; the
    #: job has ended only when this is empty (each rank of a job without a launcher
    #: writes its own ``job_end``; the job's end is the last one, ACCOUNTING.md §2).
    open_ranks: tuple[int, ...] = ()


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
    # Tokens, MFU and ML Productivity Goodput (engine/_program.py); None when the log
    # records no step work and no model, and for windowed reports.
    program: ProgramGoodput | None = None
    # Each bucket in money at a price per device-hour (engine/_cost.py); None without one.
    cost: Cost | None = None

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
        from badput.runtime.optional import import_optional  # noqa: PLC0415

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
