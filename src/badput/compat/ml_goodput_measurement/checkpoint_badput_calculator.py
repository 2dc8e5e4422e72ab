"""``ml_goodput_measurement.checkpoint_badput_calculator``: checkpoint time from Orbax.

Orbax's ``CheckpointManager`` logs one entry per save and restore (``event_type``
``save`` / ``restore`` / ``emergency_restore``, ``step``, ``directory`` and the duration
of each phase). :class:`CheckpointBadputCalculator` turns them into statistics per
operation, with the library's API and rule:

- entries are grouped per step and kind (``local`` unless the directory is ``gs://``;
  a restore is local when it is an ``emergency_restore``), the entries of one group
  averaged (several hosts log the same save);
- then, across groups: total, average, minimum, maximum and sample standard deviation
  (0 for a single group) of each phase. For restores, the broadcast figures count only
  the groups that logged a broadcast.

Where the entries come from: with ``CheckpointLoggerOptions(use_goodput_logger=True)``
the caller fills :attr:`CheckpointBadputCalculator.entries` (as in the library);
otherwise they are read from badput's store for ``job_name`` (``store=``, else
``$BADPUT_STORE``, else ``./badput-runs``), where Orbax's entries arrive through
:class:`badput.compat.orbax_logger.OrbaxCheckpointLogger` (or a ``gcl://`` store). A
store keeps each operation's start and end, not Orbax's phases: an entry read back has
its whole duration as the checkpoint manager's and the checkpointer's time, and 0 for
waiting for the previous save and listing old steps.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import statistics
from collections.abc import Iterable, Mapping
from typing import Any, Final

from badput.events import Event, Kind
from badput.formats import mgm as pl
from badput.store import EventStore, open_store

logger = logging.getLogger(__name__)

__all__ = [
    "OPERATION_TYPE_EMERGENCY_RESTORE",
    "OPERATION_TYPE_LOCAL",
    "OPERATION_TYPE_PERSISTENT",
    "OPERATION_TYPE_PERSISTENT_AND_LOCAL",
    "OPERATION_TYPE_RESTORE",
    "OPERATION_TYPE_SAVE",
    "CheckpointBadputCalculator",
    "CheckpointLoggerOptions",
    "RestoreCheckpointManagerVerticalStepStats",
    "RestoreProcessedStep",
    "SaveCheckpointManagerVerticalStepStats",
    "SaveProcessedStep",
    "add_logged_entries",
    "entries_from_events",
]

OPERATION_TYPE_SAVE: Final = "save"
OPERATION_TYPE_RESTORE: Final = "restore"
OPERATION_TYPE_EMERGENCY_RESTORE: Final = "emergency_restore"
OPERATION_TYPE_LOCAL: Final = "local"
OPERATION_TYPE_PERSISTENT: Final = "persistent"
OPERATION_TYPE_PERSISTENT_AND_LOCAL: Final = "persistent_and_local"

_PERSISTENT_PREFIX: Final = "gs://"
# Orbax's phase durations, per operation.
_SAVE_PHASES: Final = {
    "checkpoint_manager_blocking": "checkpoint_manager_blocking_duration_secs",
    "checkpointer_blocking": "checkpointer_blocking_duration_secs",
    "wait_for_prev": "wait_for_prev_duration_secs",
    "get_old_steps": "get_old_steps_duration_secs",
}
_RESTORE_PHASES: Final = {
    "checkpoint_manager": "checkpoint_manager_duration_secs",
    "restore": "checkpointer_duration_secs",
}
_BROADCAST: Final = "broadcast_duration_secs"


@dataclasses.dataclass
class SaveCheckpointManagerVerticalStepStats:
    """Statistics of the saves across steps (seconds)."""

    total_checkpoint_manager_blocking_time: float = 0.0
    average_checkpoint_manager_blocking_time: float = 0.0
    minimum_checkpoint_manager_blocking_time: float = 0.0
    maximum_checkpoint_manager_blocking_time: float = 0.0
    standard_deviation_checkpoint_manager_blocking_time: float = 0.0
    total_checkpointer_blocking_time: float = 0.0
    average_checkpointer_blocking_time: float = 0.0
    minimum_checkpointer_blocking_time: float = 0.0
    maximum_checkpointer_blocking_time: float = 0.0
    standard_deviation_checkpointer_blocking_time: float = 0.0
    total_wait_for_prev_time: float = 0.0
    average_wait_for_prev_time: float = 0.0
    minimum_wait_for_prev_time: float = 0.0
    maximum_wait_for_prev_time: float = 0.0
    standard_deviation_wait_for_prev_time: float = 0.0
    total_get_old_steps_time: float = 0.0
    average_get_old_steps_time: float = 0.0
    minimum_get_old_steps_time: float = 0.0
    maximum_get_old_steps_time: float = 0.0
    standard_deviation_get_old_steps_time: float = 0.0


@dataclasses.dataclass
class RestoreCheckpointManagerVerticalStepStats:
    """Statistics of the restores across steps (seconds)."""

    total_checkpoint_manager_time: float = 0.0
    average_checkpoint_manager_time: float = 0.0
    minimum_checkpoint_manager_time: float = 0.0
    maximum_checkpoint_manager_time: float = 0.0
    standard_deviation_checkpoint_manager_time: float = 0.0
    total_restore_time: float = 0.0
    average_restore_time: float = 0.0
    minimum_restore_time: float = 0.0
    maximum_restore_time: float = 0.0
    standard_deviation_restore_time: float = 0.0
    total_broadcast_time: float = 0.0
    average_broadcast_time: float = 0.0
    minimum_broadcast_time: float = 0.0
    maximum_broadcast_time: float = 0.0
    standard_deviation_broadcast_time: float = 0.0


@dataclasses.dataclass
class SaveProcessedStep:
    """One step's saves: the mean of its entries' phases."""

    step: str = ""
    total_checkpoint_manager_blocking_time: float = 0.0
    total_checkpointer_blocking_time: float = 0.0
    total_wait_for_prev_time: float = 0.0
    total_get_old_steps_time: float = 0.0
    occurrence: int = 0


@dataclasses.dataclass
class RestoreProcessedStep:
    """One step's restores: the mean of its entries' phases."""

    step: str = ""
    total_checkpoint_manager_time: float = 0.0
    total_restore_time: float = 0.0
    total_broadcast_time: float = 0.0
    broadcast_occurrence: int = 0
    occurrence: int = 0


@dataclasses.dataclass
class CheckpointLoggerOptions:
    """Which job's entries to read. ``client`` (a Cloud Logging client) is accepted and
    unused: entries come from badput's store. ``use_goodput_logger``: the caller fills
    ``CheckpointBadputCalculator.entries`` itself."""

    job_name: str = "checkpoint_job"
    logger_name: str = "checkpoint_logger"
    client: Any = None
    use_goodput_logger: bool = False


def _column(values: list[float], count: int | None = None) -> tuple[float, ...]:
    """(total, average, minimum, maximum, sample std) of ``values``; the average divides
    by ``count`` when given (the library's broadcast rule)."""
    total = sum(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return total, total / (count or len(values)), min(values), max(values), std


def _fill(target: object, phase: str, values: tuple[float, ...]) -> None:
    for prefix, value in zip(
        ("total", "average", "minimum", "maximum", "standard_deviation"), values, strict=True
    ):
        setattr(target, f"{prefix}_{phase}_time", value)


class CheckpointBadputCalculator:
    """Save and restore statistics from Orbax's checkpoint entries (the library's API)."""

    def __init__(
        self,
        options: CheckpointLoggerOptions | None = None,
        *,
        store: EventStore | str | os.PathLike[str] | None = None,
    ) -> None:
        self._options = options if options is not None else CheckpointLoggerOptions()
        self._use_goodput_logger = self._options.use_goodput_logger
        self._store_arg = store
        self.entries: list[dict[str, Any]] = []

    def read_entries(self) -> list[dict[str, Any]]:
        """The job's Orbax entries, oldest first: :attr:`entries` itself with
        ``use_goodput_logger``, else rebuilt from the store's checkpoint events."""
        if self._use_goodput_logger:
            return self.entries
        store = open_store(self._store_arg)
        events: list[Event] = []
        cursor = None
        while True:
            result = store.read(self._options.job_name, cursor)
            progressed = result.cursor.offsets != (cursor.offsets if cursor else {})
            cursor = result.cursor
            events.extend(
                item for chunk in result.chunks for item in chunk.items if isinstance(item, Event)
            )
            if not progressed:
                break
        return entries_from_events(events)

    def is_valid_save_stats(
        self,
        step_stats: Mapping[str, Any],
        operation_type: str | None = OPERATION_TYPE_PERSISTENT_AND_LOCAL,
    ) -> bool:
        """A save entry of the asked kind (local, persistent, or both)."""
        if step_stats.get(pl.ORBAX_EVENT_TYPE) != OPERATION_TYPE_SAVE:
            return False
        return _kind_matches(_is_local(step_stats), operation_type)

    def is_valid_restore_stats(
        self,
        step_stats: Mapping[str, Any],
        operation_type: str | None = OPERATION_TYPE_PERSISTENT_AND_LOCAL,
    ) -> bool:
        """A restore entry of the asked kind (an emergency restore is the local one)."""
        event_type = step_stats.get(pl.ORBAX_EVENT_TYPE)
        if event_type not in (OPERATION_TYPE_RESTORE, OPERATION_TYPE_EMERGENCY_RESTORE):
            return False
        return _kind_matches(event_type == OPERATION_TYPE_EMERGENCY_RESTORE, operation_type)

    def calculate_save_operation_checkpoint_manager_blocking_time(
        self, operation_type: str | None = OPERATION_TYPE_PERSISTENT_AND_LOCAL
    ) -> SaveCheckpointManagerVerticalStepStats:
        """Statistics of the saves of ``operation_type`` across steps."""
        self.entries = self.read_entries()
        valid = [e for e in self.entries if self.is_valid_save_stats(e, operation_type)]
        stats = SaveCheckpointManagerVerticalStepStats()
        for phase, key in _SAVE_PHASES.items():
            per_step = _step_means(valid, key)
            if per_step:
                _fill(stats, phase, _column(list(per_step.values())))
        return stats

    def calculate_restore_operation_checkpoint_manager_blocking_time(
        self, operation_type: str | None = OPERATION_TYPE_PERSISTENT_AND_LOCAL
    ) -> RestoreCheckpointManagerVerticalStepStats:
        """Statistics of the restores of ``operation_type`` across steps."""
        self.entries = self.read_entries()
        valid = [e for e in self.entries if self.is_valid_restore_stats(e, operation_type)]
        stats = RestoreCheckpointManagerVerticalStepStats()
        for phase, key in _RESTORE_PHASES.items():
            per_step = _step_means(valid, key)
            if per_step:
                _fill(stats, phase, _column(list(per_step.values())))
        # Broadcasts: steps without one count as 0 in the total, minimum, maximum and
        # deviation, but the average divides by the steps that broadcast (the library's).
        broadcasts = _step_means([e for e in valid if e.get(_BROADCAST)], _BROADCAST)
        if broadcasts:
            every_step = {key: broadcasts.get(key, 0.0) for key in _step_means(valid, None)}
            _fill(stats, "broadcast", _column(list(every_step.values()), len(broadcasts)))
        return stats


def _step_means(entries: Iterable[Mapping[str, Any]], key: str | None) -> dict[str, float]:
    """{step and kind: mean of ``key`` over the group's entries} in first-seen order
    (several hosts log one operation); ``key=None`` gives 0 per group."""
    sums: dict[str, list[float]] = {}
    for e in entries:
        group = sums.setdefault(_group_key(e), [0.0, 0.0])
        group[0] += float(e[key]) if key is not None else 0.0
        group[1] += 1
    return {k: total / n for k, (total, n) in sums.items()}


def _is_local(entry: Mapping[str, Any]) -> bool:
    return not str(entry.get(pl.ORBAX_DIRECTORY, "")).startswith(_PERSISTENT_PREFIX)


def _kind_matches(local: bool, operation_type: str | None) -> bool:
    if operation_type == OPERATION_TYPE_LOCAL:
        return local
    if operation_type == OPERATION_TYPE_PERSISTENT:
        return not local
    return True


def _group_key(entry: Mapping[str, Any]) -> str:
    kind = OPERATION_TYPE_LOCAL if _is_local(entry) else OPERATION_TYPE_PERSISTENT
    return f"{entry.get(pl.ORBAX_STEP)}-{kind}"


def entries_from_events(events: Iterable[Event]) -> list[dict[str, Any]]:
    """Orbax-style entries, oldest first, from checkpoint start/end events (any others are
    ignored): the whole duration is the checkpoint manager's and the checkpointer's. A
    start pairs with an end of the same operation and step from the same writer (attempt,
    host, rank, process), the earliest open start with the earliest end, so that hosts
    saving one step at once stay apart, and so do several entries of one step forwarded
    through one recorder. The event's ``name`` keeps Orbax's directory kind when the entry
    came from Orbax (``local`` or ``emergency_restore``)."""
    open_: dict[tuple[Any, ...], list[Event]] = {}
    out: list[dict[str, Any]] = []
    for e in sorted(events, key=lambda e: e.ts):
        if e.kind in (Kind.CHECKPOINT_SAVE_START, Kind.CHECKPOINT_RESTORE_START):
            open_.setdefault((e.kind[: -len("_start")], *_writer(e)), []).append(e)
        elif e.kind in (Kind.CHECKPOINT_SAVE_END, Kind.CHECKPOINT_RESTORE_END):
            base = e.kind[: -len("_end")]
            starts = open_.get((base, *_writer(e)))
            if starts:
                out.append(_entry(base, starts.pop(0), e))
    return out


def _writer(e: Event) -> tuple[Any, ...]:
    return (e.attempt, e.host, e.rank, e.pid, e.step)


def _entry(base: str, start: Event, end: Event) -> dict[str, Any]:
    seconds = max(0.0, end.ts - start.ts)
    local = (start.name or end.name) in (OPERATION_TYPE_LOCAL, OPERATION_TYPE_EMERGENCY_RESTORE)
    directory = "local" if local else f"{_PERSISTENT_PREFIX}badput"
    if base == "checkpoint_save":
        return {
            pl.ORBAX_STEP: end.step,
            pl.ORBAX_EVENT_TYPE: OPERATION_TYPE_SAVE,
            pl.ORBAX_DIRECTORY: directory,
            pl.ORBAX_SAVE_START: start.ts,
            pl.ORBAX_SAVE_DURATION: seconds,
            "checkpointer_blocking_duration_secs": seconds,
            "wait_for_prev_duration_secs": 0.0,
            "get_old_steps_duration_secs": 0.0,
        }
    return {
        pl.ORBAX_STEP: end.step,
        pl.ORBAX_EVENT_TYPE: OPERATION_TYPE_EMERGENCY_RESTORE if local else OPERATION_TYPE_RESTORE,
        pl.ORBAX_DIRECTORY: directory,
        pl.ORBAX_RESTORE_START: start.ts,
        pl.ORBAX_RESTORE_DURATION: seconds,
        "checkpointer_duration_secs": seconds,
    }


#: Two records of one operation agree on its start and length to this many seconds (a
#: store keeps float POSIX seconds: about 2.4e-7 s of resolution in this century).
_SAME_OPERATION_SECONDS: Final = 1e-3


def add_logged_entries(
    stored: list[dict[str, Any]], logged: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``stored`` (rebuilt from a store) plus the Orbax entries of ``logged`` (a log's
    payloads, in which only entries with an Orbax ``event_type`` count) that are not
    already among them: an entry forwarded to both the store and the log (the recorder's
    ``record_payload`` with a ``cloud_logger``) counts once. An entry matches a stored one
    of the same operation and step whose duration, and start when the entry has one,
    agree; each stored entry matches at most one."""
    unmatched = list(stored)
    out = list(stored)
    for entry in logged:
        event_type = entry.get(pl.ORBAX_EVENT_TYPE)
        if event_type == OPERATION_TYPE_SAVE:
            start_key, duration_key = pl.ORBAX_SAVE_START, pl.ORBAX_SAVE_DURATION
            phases = _SAVE_PHASES.values()
        elif event_type in (OPERATION_TYPE_RESTORE, OPERATION_TYPE_EMERGENCY_RESTORE):
            start_key, duration_key = pl.ORBAX_RESTORE_START, pl.ORBAX_RESTORE_DURATION
            phases = _RESTORE_PHASES.values()
        else:
            continue
        if not all(_seconds(entry.get(key)) for key in phases):
            logger.warning("badput: Orbax entry without its durations left out: %r", entry)
            continue
        twin = next(
            (
                i
                for i, s in enumerate(unmatched)
                if _same_operation(s, entry, start_key, duration_key)
            ),
            None,
        )
        if twin is None:
            out.append(dict(entry))
        else:
            del unmatched[twin]
    return out


def _seconds(value: Any) -> bool:
    """A duration the statistics can add up: a finite number of seconds."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _same_operation(
    stored: Mapping[str, Any], entry: Mapping[str, Any], start_key: str, duration_key: str
) -> bool:
    saves = (stored.get(pl.ORBAX_EVENT_TYPE) == OPERATION_TYPE_SAVE) == (
        entry.get(pl.ORBAX_EVENT_TYPE) == OPERATION_TYPE_SAVE
    )
    if not saves or stored.get(pl.ORBAX_STEP) != entry.get(pl.ORBAX_STEP):
        return False
    try:
        if abs(float(stored[duration_key]) - float(entry[duration_key])) > _SAME_OPERATION_SECONDS:
            return False
        start = entry.get(start_key)
        return start is None or abs(float(stored[start_key]) - float(start)) <= (
            _SAME_OPERATION_SECONDS
        )
    except (KeyError, TypeError, ValueError):
        return False
