"""The engine's :class:`~badput.engine.Report` in ml-goodput-measurement's buckets.

:class:`LibraryBuckets` maps a partition of the job's time onto the library's
``BadputType`` s with the library's own definitions where they differ from badput's
(ACCOUNTING.md §6, docs/compat.md); the elastic calculator's mapping is a subclass
(``goodput_elastic``). :func:`checkpoint_time` takes checkpoint time from Orbax's
entries, as the library's calculator does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from badput.compat.ml_goodput_measurement.checkpoint_badput_calculator import (
    CheckpointBadputCalculator,
    CheckpointLoggerOptions,
)
from badput.compat.ml_goodput_measurement.goodput_utils import BadputType
from badput.engine import Accountant, Report
from badput.formats.mgm import SOURCE_OF_BUCKET

if TYPE_CHECKING:
    from badput.compat.ml_goodput_measurement._columns import StepStarts
    from badput.compat.ml_goodput_measurement._jobview import JobView
    from badput.compat.ml_goodput_measurement.goodput import UnproductiveTimeDict

__all__ = ["LibraryBuckets", "checkpoint_time", "subtract"]

# badput bucket -> the library's BadputType (ACCOUNTING.md §6). Buckets not named here
# (untracked, queued, unknown) are OTHER; custom:* and elastic_* are handled apart.
_BUCKETS: Final[dict[str, BadputType]] = {
    bucket: BadputType.__members__[source]
    for bucket, source in SOURCE_OF_BUCKET.items()
    if source != "OTHER" and not bucket.startswith("elastic")  # elastic_*: apart
}
_PRODUCTIVE: Final = ("productive", "slowdown")  # observed goodput

# The library's breakdown order (its _get_job_badput_breakdown).
_BREAKDOWN_ORDER: Final = (
    BadputType.TPU_INITIALIZATION,
    BadputType.TRAINING_PREP,
    BadputType.DATA_LOADING_SYNC,
    BadputType.DATA_LOADING_ASYNC,
    BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME,
    BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME,
    BadputType.PROGRAM_STARTUP,
    BadputType.WASTED_PROGRESS_FROM_DISRUPTION,
    BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION,
    BadputType.CUSTOM_BADPUT_EVENTS,
    BadputType.OTHER,
)


class LibraryBuckets:
    """The library's breakdown of a job's (or a window's) time, from the engine's.

    Args:
        view: the job's :class:`~._jobview.JobView` (the elastic mapping reads its
            recorded intervals).
    """

    #: The breakdown's own types, in the library's order (the elastic mapping adds its three).
    types: tuple[BadputType, ...] = _BREAKDOWN_ORDER

    def __init__(self, view: JobView) -> None:
        self.view = view

    def seconds(self, report: Report) -> tuple[float, UnproductiveTimeDict]:
        """Productive seconds and the library's unproductive seconds per type."""
        productive = sum(report.bucket(name) for name in _PRODUCTIVE)
        out: dict[BadputType, float] = dict.fromkeys(
            (t for t in self.types if t != BadputType.CUSTOM_BADPUT_EVENTS), 0.0
        )
        custom: dict[str, float] = {}
        for name, seconds in report.buckets.items():
            if name in _PRODUCTIVE:
                continue
            if name.startswith("custom:"):
                key = name[len("custom:") :].upper()  # the library upper-cases the type
                custom[key] = custom.get(key, 0.0) + seconds
                continue
            target = self.bucket_type(name)
            out[target] = out.get(target, 0.0) + seconds
        out[BadputType.DATA_LOADING_ASYNC] = report.overlapped.get("data_loading", 0.0)
        self.adjust(report, out)
        result: UnproductiveTimeDict = {}
        for t in self.types:
            result[t] = custom if t == BadputType.CUSTOM_BADPUT_EVENTS else out.get(t, 0.0)
        return productive, result

    def partition(
        self,
        accountant: Accountant,
        step_starts: StepStarts,
        now: float,
        window: tuple[float, float] | None,
    ) -> tuple[Report, float, dict[BadputType, Any]]:
        """The engine's partition with the library's definitions where they differ
        (ACCOUNTING.md §6): the report, productive seconds and the library's buckets.

        - The last step before a recorded ``job_end`` lasts until it: the engine counts
          one typical step and the rest as untracked; here that rest is productive
          (recorded intervals inside it stay taken out).
        - A crashed attempt's last step, up to the next ``job_start``, is recovery
          (the engine counts one typical step of it as wasted progress). So is that of
          an attempt ended by a ``job_end`` that a later ``job_start`` follows: the
          library keeps only the last ``job_end``, and reads the job as disrupted there.
        - A running job's step in progress is OTHER until it completes (the library
          counts a step when the next one starts).
        """
        report = accountant.report(now=now, window=window, typical="mean")
        productive, seconds = self.seconds(report)
        lo, hi = window if window is not None else (report.start, report.end)
        attempts = report.attempts

        def part(a: float, b: float) -> Report | None:
            a, b = max(a, lo), min(b, hi)
            return accountant.report(now=now, window=(a, b), typical="mean") if a < b else None

        moved = 0.0
        for i, att in enumerate(attempts[:-1]):
            t = step_starts.last_start(att.start, att.end)
            piece = part(t, attempts[i + 1].start) if t is not None else None
            if piece is not None:
                moved += self.move(
                    piece,
                    seconds,
                    (*_PRODUCTIVE, "startup", "wasted", "untracked", "teardown", "hung"),
                    BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION,
                )
        productive -= moved
        if attempts:
            last = attempts[-1]
            t = step_starts.last_start(last.start, last.end)
            piece = part(t, last.end) if t is not None else None
            if piece is not None and last.end_reason == "job_end":
                productive += self.move(piece, seconds, ("untracked", "teardown"), None)
            elif piece is not None and report.end_reason != "job_end" and t is not None and t < now:
                productive -= self.move(piece, seconds, _PRODUCTIVE, BadputType.OTHER)
        return report, productive, seconds

    def move(
        self,
        piece: Report,
        seconds: dict[BadputType, Any],
        names: tuple[str, ...],
        target: BadputType | None,
    ) -> float:
        """Move ``piece``'s seconds in the badput buckets ``names`` to ``target`` (None:
        productive); return the seconds moved. Productive buckets are taken from
        productive time by the caller (the return value)."""
        total = 0.0
        for name in names:
            value = piece.bucket(name)
            if value <= 0.0:
                continue
            total += value
            if name not in _PRODUCTIVE:
                source = self.bucket_type(name)
                seconds[source] = max(0.0, seconds.get(source, 0.0) - value)
            if target is not None:
                seconds[target] = seconds.get(target, 0.0) + value
        if target is None:
            return total
        return sum(piece.bucket(n) for n in names if n in _PRODUCTIVE)

    def bucket_type(self, name: str) -> BadputType:
        """The library's type for a badput bucket; elastic ones are OTHER here (the base
        library ignores elastic events) and split by the elastic mapping."""
        return _BUCKETS.get(name, BadputType.OTHER)

    def adjust(self, report: Report, seconds: dict[BadputType, float]) -> None:
        """Hook for the elastic calculator's re-attribution; nothing to do here."""

    def percentages(self, seconds: Mapping[Any, Any], total: float) -> UnproductiveTimeDict:
        """Seconds to % of ``total``, with the library's rule (0 unless 0 < x < total)."""

        def pct(x: float) -> float:
            return x / total * 100.0 if 0 < x < total else 0.0

        out: UnproductiveTimeDict = {}
        for t in self.types:
            value = seconds.get(t, 0.0)
            out[t] = (
                {k: pct(v) for k, v in value.items()} if isinstance(value, dict) else pct(value)
            )
        return out


def subtract(
    seconds: dict[BadputType, Any],
    part: Mapping[BadputType, Any],
    keep: tuple[BadputType, ...] = (),
) -> None:
    """``seconds`` less ``part``, type by type (custom events name by name)."""
    for key, value in part.items():
        if key in keep:
            continue
        current = seconds.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            for name, sub in value.items():
                current[name] = max(0.0, current.get(name, 0.0) - sub)
        elif isinstance(value, float) and isinstance(current, float):
            seconds[key] = max(0.0, current - value)


def checkpoint_time(
    entries: list[dict[str, Any]], productive: float, seconds: dict[BadputType, Any]
) -> float:
    """Checkpoint save and restore time as the library's calculator counts them: the
    CheckpointBadputCalculator's totals over the job's Orbax ``entries`` (per step and
    kind, the mean of its entries), wherever the entries fall. The partition placed
    the operations on the job's timeline; an entry outside it (stamped before the job,
    or an operation that several hosts logged) changes the total by ``delta``, which
    the library takes from productive time for saves and from OTHER (its remainder)
    for restores. Updates ``seconds``; returns the productive seconds."""
    if not entries:
        return productive
    calc = CheckpointBadputCalculator(CheckpointLoggerOptions(use_goodput_logger=True))
    calc.entries = entries
    save = calc.calculate_save_operation_checkpoint_manager_blocking_time()
    restore = calc.calculate_restore_operation_checkpoint_manager_blocking_time()
    save_type = BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME
    restore_type = BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME
    delta = save.total_checkpoint_manager_blocking_time - seconds.get(save_type, 0.0)
    seconds[save_type] = save.total_checkpoint_manager_blocking_time
    productive = max(0.0, productive - delta)
    delta = restore.total_checkpoint_manager_time - seconds.get(restore_type, 0.0)
    seconds[restore_type] = restore.total_checkpoint_manager_time
    seconds[BadputType.OTHER] = max(0.0, seconds.get(BadputType.OTHER, 0.0) - delta)
    return productive
