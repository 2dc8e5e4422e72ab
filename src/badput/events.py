"""The event schema (v1): kinds, fields, validation, and one line's encode/decode.

This module is the contract of ``EVENTS.md``: the recorder writes these events,
stores keep them as JSON lines, the engine reads them. It imports nothing but the
standard library and msgspec (the fast codec), so ``import badput`` stays light.
"""

from __future__ import annotations

import math
from typing import Annotated, Final

import msgspec

__all__ = [
    "INTERVAL_KINDS",
    "KINDS",
    "LIFECYCLE_KINDS",
    "NAMED_KINDS",
    "SCHEMA_VERSION",
    "STEP_KINDS",
    "Event",
    "EventError",
    "Kind",
    "bucket_of",
    "interval_base",
    "validate",
]

SCHEMA_VERSION: Final = 1


class Kind:
    """Every event kind of schema v1, as string constants."""

    JOB_SCHEDULED: Final = "job_scheduled"
    JOB_START: Final = "job_start"
    JOB_END: Final = "job_end"
    ATTEMPT_END: Final = "attempt_end"
    HEARTBEAT: Final = "heartbeat"
    STEP_START: Final = "step_start"
    STEP_END: Final = "step_end"
    ACCELERATOR_INIT_START: Final = "accelerator_init_start"
    ACCELERATOR_INIT_END: Final = "accelerator_init_end"
    TRAINING_PREP_START: Final = "training_prep_start"
    TRAINING_PREP_END: Final = "training_prep_end"
    CHECKPOINT_RESTORE_START: Final = "checkpoint_restore_start"
    CHECKPOINT_RESTORE_END: Final = "checkpoint_restore_end"
    CHECKPOINT_SAVE_START: Final = "checkpoint_save_start"
    CHECKPOINT_SAVE_END: Final = "checkpoint_save_end"
    CHECKPOINT_COMMITTED: Final = "checkpoint_committed"
    DATA_LOADING_START: Final = "data_loading_start"
    DATA_LOADING_END: Final = "data_loading_end"
    COMPILE_START: Final = "compile_start"
    COMPILE_END: Final = "compile_end"
    CUSTOM_START: Final = "custom_start"
    CUSTOM_END: Final = "custom_end"
    ELASTIC_WAIT_START: Final = "elastic_wait_start"
    ELASTIC_WAIT_END: Final = "elastic_wait_end"
    ELASTIC_REINIT_START: Final = "elastic_reinit_start"
    ELASTIC_REINIT_END: Final = "elastic_reinit_end"
    ELASTIC_SLICES: Final = "elastic_slices"
    PROCESS_INIT_START: Final = "process_init_start"
    PROCESS_INIT_END: Final = "process_init_end"


# Interval kinds: the base name of a ``<base>_start`` / ``<base>_end`` pair.
# ``custom`` and ``elastic_wait`` are named; their bucket is ``<base>:<name>``.
INTERVAL_KINDS: Final[frozenset[str]] = frozenset(
    {
        "accelerator_init",
        "training_prep",
        "checkpoint_restore",
        "checkpoint_save",
        "data_loading",
        "compile",
        "custom",
        "elastic_wait",
        "elastic_reinit",
        "process_init",
    }
)
NAMED_INTERVAL_KINDS: Final[frozenset[str]] = frozenset({"custom", "elastic_wait"})

LIFECYCLE_KINDS: Final[frozenset[str]] = frozenset(
    {Kind.JOB_SCHEDULED, Kind.JOB_START, Kind.JOB_END, Kind.ATTEMPT_END}
)

KINDS: Final[frozenset[str]] = frozenset(
    v for k, v in vars(Kind).items() if k.isupper() and isinstance(v, str)
)

#: Kinds that must carry ``step``.
STEP_KINDS: Final = frozenset(
    {
        Kind.STEP_START,
        Kind.STEP_END,
        Kind.CHECKPOINT_RESTORE_START,
        Kind.CHECKPOINT_RESTORE_END,
        Kind.CHECKPOINT_SAVE_START,
        Kind.CHECKPOINT_SAVE_END,
        Kind.CHECKPOINT_COMMITTED,
    }
)
#: Kinds that must carry a non-empty ``name``.
NAMED_KINDS: Final = frozenset(
    {Kind.CUSTOM_START, Kind.CUSTOM_END, Kind.ELASTIC_WAIT_START, Kind.ELASTIC_WAIT_END}
)


# Checked by msgspec while decoding (in C), and again by validate() for built events.
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
SchemaVersion = Annotated[int, msgspec.Meta(ge=1)]


class Event(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """One event of the log. Field meanings are those of ``EVENTS.md``.

    Unknown fields in a line are accepted and ignored; absent optional fields
    are ``None`` (and are left out when encoded).
    """

    ts: float
    kind: NonEmptyStr
    job: NonEmptyStr
    attempt: str | int | None = None
    host: str | None = None
    rank: int | None = None
    pid: int | None = None
    step: int | None = None
    name: str | None = None
    blocking: bool | None = None
    status: str | None = None
    exit_code: int | None = None
    active: int | None = None
    total: int | None = None
    available: int | None = None
    v: SchemaVersion = SCHEMA_VERSION


class EventError(ValueError):
    """An event line that is not a valid event. Carries where it came from."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        where = f"{file}:{line}: " if file is not None and line is not None else ""
        super().__init__(f"{where}{message}")


def validate(event: Event) -> str | None:
    """Return why ``event`` breaks schema v1, or ``None`` when it is valid.

    An unknown ``kind`` is *not* an error here: readers keep such events and the
    engine reports them (a newer schema may add kinds).
    """
    if not math.isfinite(event.ts):
        return f"ts must be a finite number, got {event.ts!r}"
    if not event.job:
        return "job must be a non-empty string"
    if not event.kind:
        return "kind must be a non-empty string"
    kind = event.kind
    if kind in STEP_KINDS and event.step is None:
        return f"{kind} requires an integer 'step'"
    if kind in NAMED_KINDS and not event.name:
        return f"{kind} requires a non-empty 'name'"
    if kind == Kind.ELASTIC_SLICES and (
        event.active is None or event.total is None or event.available is None
    ):
        return "elastic_slices requires 'active', 'total' and 'available'"
    if event.v < 1:
        return f"schema version v must be >= 1, got {event.v}"
    return None


def interval_base(kind: str) -> tuple[str, bool] | None:
    """Split an interval kind into ``(base, is_start)``; ``None`` for other kinds."""
    if kind.endswith("_start"):
        base, is_start = kind[:-6], True
    elif kind.endswith("_end"):
        base, is_start = kind[:-4], False
    else:
        return None
    if base not in INTERVAL_KINDS:
        return None
    return base, is_start


def bucket_of(base: str, name: str | None) -> str:
    """The partition bucket of an interval: ``custom:eval``, ``checkpoint_save``, ..."""
    if base in NAMED_INTERVAL_KINDS:
        return f"{base}:{name}"
    return base
