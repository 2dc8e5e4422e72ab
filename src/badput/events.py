"""The event schema (v1): kinds, fields, validation, and one line's encode/decode.

This module is the contract of ``EVENTS.md``: the recorder writes these events,
stores keep them as JSON lines, the engine reads them. It imports nothing but the
standard library and msgspec (the fast codec), so ``import badput`` stays light.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Annotated, Any, ClassVar, Final, NamedTuple

import msgspec

__all__ = [
    "INTERVAL_KINDS",
    "KINDS",
    "KIND_CODE",
    "KIND_NAMES",
    "LIFECYCLE_KINDS",
    "MAX_INT",
    "MAX_SETTING_SECONDS",
    "MAX_TS",
    "MIN_TS",
    "NAMED_KINDS",
    "OPEN_ENDED_KINDS",
    "SCHEMA_VERSION",
    "SECTION_QUANTILES",
    "STEP_KINDS",
    "WORK_COUNTS",
    "Chunk",
    "DecodedColumns",
    "Event",
    "EventError",
    "Kind",
    "LeanEvent",
    "LeanRows",
    "Writer",
    "attempt_id",
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
    DISTRIBUTED_INIT_START: Final = "distributed_init_start"
    DISTRIBUTED_INIT_END: Final = "distributed_init_end"
    MODEL_BUILD_START: Final = "model_build_start"
    MODEL_BUILD_END: Final = "model_build_end"
    TEARDOWN_START: Final = "teardown_start"
    TEARDOWN_END: Final = "teardown_end"
    SECTION_SUMMARY: Final = "section_summary"
    MODEL: Final = "model"


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
        "distributed_init",
        "model_build",
        "teardown",
    }
)
#: Interval kinds whose end is the attempt's end when not recorded: teardown runs until the
#: processes are gone, which no process of the job can record (docs/accounting.md).
OPEN_ENDED_KINDS: Final[frozenset[str]] = frozenset({"teardown"})
NAMED_INTERVAL_KINDS: Final[frozenset[str]] = frozenset({"custom", "elastic_wait"})

LIFECYCLE_KINDS: Final[frozenset[str]] = frozenset(
    {Kind.JOB_SCHEDULED, Kind.JOB_START, Kind.JOB_END, Kind.ATTEMPT_END}
)

KINDS: Final[frozenset[str]] = frozenset(
    v for k, v in vars(Kind).items() if k.isupper() and isinstance(v, str)
)

#: Every kind of schema v1 in a fixed order: what a kind code (:data:`KIND_CODE`) indexes.
KIND_NAMES: Final[tuple[str, ...]] = tuple(sorted(KINDS))


class _KindCodes(dict[str, int]):
    """Kind -> code; an unknown kind is -1 (without being added)."""

    def __missing__(self, key: str) -> int:
        return -1


#: The code of each kind of :data:`KIND_NAMES` (its index); -1 for a kind schema v1 lacks.
KIND_CODE: Final[dict[str, int]] = _KindCodes({k: i for i, k in enumerate(KIND_NAMES)})

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
    {
        Kind.CUSTOM_START,
        Kind.CUSTOM_END,
        Kind.ELASTIC_WAIT_START,
        Kind.ELASTIC_WAIT_END,
        Kind.SECTION_SUMMARY,
    }
)
#: The quantiles a ``section_summary`` may carry, by key (seconds).
SECTION_QUANTILES: Final = ("min", "p50", "p90", "max")


#: Integers of an event lie within +-MAX_INT: the range every JSON reader holds exactly
#: (I-JSON, RFC 7493); a larger step or rank is a corrupt line, not a number to carry.
MAX_INT: Final = 2**53 - 1
#: Timestamps lie in the years 1 to 9999 UTC (what a calendar date can name); any
#: other ``ts`` (``1e300``, ``-1e300``) is a corrupt line.
MIN_TS: Final = -62_135_596_800.0  # 0001-01-01T00:00:00Z
MAX_TS: Final = 253_402_300_799.0  # 9999-12-31T23:59:59Z

# Checked by msgspec while decoding (in C), and again by validate() for built events.
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
SchemaVersion = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]
Timestamp = Annotated[float, msgspec.Meta(ge=MIN_TS, le=MAX_TS)]
Int = Annotated[int, msgspec.Meta(ge=-MAX_INT, le=MAX_INT)]
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
Positive = Annotated[float, msgspec.Meta(gt=0.0)]
#: A duration a launcher configured (``hang_timeout``): positive, at most a year.
MAX_SETTING_SECONDS: Final = 366 * 86400.0
Setting = Annotated[float, msgspec.Meta(gt=0.0, le=MAX_SETTING_SECONDS)]


class _EventFields(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """The fields of an event, shared by :class:`Event` and :class:`LeanEvent` (meanings:
    ``EVENTS.md``)."""

    ts: Timestamp
    kind: NonEmptyStr
    job: NonEmptyStr
    attempt: str | Int | None = None
    host: str | None = None
    rank: Int | None = None
    pid: Int | None = None
    step: Int | None = None
    name: str | None = None
    blocking: bool | None = None
    status: str | None = None
    exit_code: Int | None = None
    active: Int | None = None
    total: Int | None = None
    available: Int | None = None
    # section_summary (one timed section of one process, over one period; docs/events.md)
    count: Int | None = None
    seconds: float | None = None
    quantiles: dict[str, float] | None = None
    last: Timestamp | None = None
    open_since: Timestamp | None = None
    # the work of a step (step_start / step_end) and the job's model (model; docs/events.md)
    tokens: Count | None = None
    samples: Count | None = None
    params: Count | None = None
    layers: Count | None = None
    hidden: Count | None = None
    seq_len: Count | None = None
    flops_per_token: Positive | None = None
    devices: Count | None = None
    peak_flops: Positive | None = None
    device: str | None = None
    # job_start by ``badput run --hang-timeout S``: the report's stall threshold (seconds)
    hang_timeout: Setting | None = None
    v: SchemaVersion = SCHEMA_VERSION


class Event(_EventFields, kw_only=True, omit_defaults=True, gc=False):
    """One event of the log. Field meanings are those of ``EVENTS.md``.

    Unknown fields in a line are accepted and ignored; absent optional fields
    are ``None`` (and are left out when encoded).
    """


class EventError(ValueError):
    """An event line that is not a valid event. Carries where it came from."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        where = f"{file}:{line}: " if file is not None and line is not None else ""
        super().__init__(f"{where}{message}")


class LeanEvent(msgspec.Struct, kw_only=True, gc=False):
    """An event as the engine reads it from a large block of one writer's lines: the
    fields of :class:`Event`, of the same types, read as attributes. Its class is made at
    run time for each writer (:mod:`badput.formats.codec`), and cannot be pickled:

    - its writer's fields (``job``, ``attempt``, ``host``, ``rank``, ``pid``) are the same
      objects in every event of the block, checked while decoding (not made anew for each
      line);
    - a field none of the writer's lines has held so far is no field of the class at all
      but the class attribute below (``None``, ``v`` 1): a decode fills no default for it
      and frees nothing, which is most of an event's fields. A line that holds one fails
      the class's decode (unknown field), and the writer's class then takes the field as
      :class:`Event` does, for that block and the writer's later ones.

    The codec decodes a block so when its first line's writer is every line's (a file
    written by one process: the usual file); it costs about half what an :class:`Event`
    a line does, and the engine need not read those five fields of every event to learn
    that. Only the engine sees one, and only reads its fields (it keeps values, never
    events). Stores hand readers :class:`Event` s (:attr:`Chunk.items`).
    """

    ts: Timestamp
    kind: NonEmptyStr
    job: NonEmptyStr
    # Every other field of an Event, as an absent one reads (tests/test_codec.py checks
    # that these are Event's fields and defaults).
    attempt: ClassVar[str | int | None] = None
    host: ClassVar[str | None] = None
    rank: ClassVar[int | None] = None
    pid: ClassVar[int | None] = None
    step: ClassVar[int | None] = None
    name: ClassVar[str | None] = None
    blocking: ClassVar[bool | None] = None
    status: ClassVar[str | None] = None
    exit_code: ClassVar[int | None] = None
    active: ClassVar[int | None] = None
    total: ClassVar[int | None] = None
    available: ClassVar[int | None] = None
    count: ClassVar[int | None] = None
    seconds: ClassVar[float | None] = None
    quantiles: ClassVar[dict[str, float] | None] = None
    last: ClassVar[float | None] = None
    open_since: ClassVar[float | None] = None
    tokens: ClassVar[int | None] = None
    samples: ClassVar[int | None] = None
    params: ClassVar[int | None] = None
    layers: ClassVar[int | None] = None
    hidden: ClassVar[int | None] = None
    seq_len: ClassVar[int | None] = None
    flops_per_token: ClassVar[float | None] = None
    devices: ClassVar[int | None] = None
    peak_flops: ClassVar[float | None] = None
    device: ClassVar[str | None] = None
    hang_timeout: ClassVar[float | None] = None
    v: ClassVar[int] = SCHEMA_VERSION

    def event(self) -> Event:
        """The same event as an :class:`Event` (what a full decode of its line gives)."""
        return Event(**{name: getattr(self, name) for name in Event.__struct_fields__})


#: The writer's fields of an event, in this order: ``(job, attempt, host, rank, pid)``.
Writer = tuple[str, str | int | None, str | None, int | None, int | None]


class DecodedColumns(NamedTuple):
    """Columns the decoder works out of a block's items anyway (numpy arrays, one value an
    item), handed to the engine with each :class:`Chunk` so that no one reads them twice."""

    #: int16: the :data:`KIND_CODE` of each item; -1 for an error (or a kind v1 lacks).
    kinds: Any
    #: int64: the step of each valid event of a kind of :data:`STEP_KINDS`; 0 elsewhere.
    steps: Any
    #: The writer of every event among the items (they were decoded as :class:`LeanEvent`
    #: s of it: :attr:`Chunk.rows`), else None.
    writer: Writer | None = None
    #: True when no item is an :class:`EventError` (False: some may be).
    clean: bool = False
    #: False when the decoder knows that no item records step work (``tokens`` or
    #: ``samples``): the engine then reads neither field of any of them.
    work: bool = True
    #: The fields that may hold a value other than their default in some item, when the
    #: decoder knows (a lean decode, the engine's or a read for columns), else None.
    fields: frozenset[str] | None = None
    #: float64: each item's ``ts`` (0.0 for an error), when the decoder has them as a column
    #: (an archive's read), else None: the engine then reads them from the events.
    ts: Any = None
    #: ``(index, writers)`` when the items are valid events of several writers and the
    #: decoder knows each one's (an archive's rows; runs of files, each of one writer):
    #: ``index`` (int32) gives each item's writer in the tuple ``writers``. None otherwise
    #: (and always when :attr:`writer` says the one writer).
    writers: tuple[Any, tuple[Writer, ...]] | None = None

    def rows(self, begin: int, end: int) -> DecodedColumns:
        """The columns of items ``begin:end``."""
        ts = None if self.ts is None else self.ts[begin:end]
        writers = None if self.writers is None else (self.writers[0][begin:end], self.writers[1])
        return self._replace(
            kinds=self.kinds[begin:end], steps=self.steps[begin:end], ts=ts, writers=writers
        )


class LeanRows:
    """The items of a :class:`Chunk` as :class:`LeanEvent` s (an error where a line is not
    a valid event), with the way to decode the same lines as :class:`Event` s, which is
    done once, on first use, for the slices of one block together."""

    __slots__ = ("_begin", "_end", "_full", "_whole", "rows")

    def __init__(
        self,
        rows: Sequence[LeanEvent | EventError],
        full: Callable[[], list[Event | EventError]],
        _whole: list[list[Event | EventError]] | None = None,
        _begin: int = 0,
    ) -> None:
        self.rows = rows
        self._full = full
        self._whole = [] if _whole is None else _whole  # the decoded block, once made
        self._begin = _begin
        self._end = _begin + len(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, part: slice) -> LeanRows:
        """The rows of ``part`` (a slice with a step of 1), sharing the full decode."""
        begin, end, _ = part.indices(len(self.rows))
        return LeanRows(self.rows[begin:end], self._full, self._whole, self._begin + begin)

    def events(self) -> list[Event | EventError]:
        """The same items as :class:`Event` s: the lines decoded in full."""
        if not self._whole:
            self._whole.append(self._full())
        return self._whole[0][self._begin : self._end]


class Chunk:
    """Consecutive complete lines of one stream, decoded.

    ``items[i]`` is line ``first_line + i`` of ``source`` (1-based): an event, or
    the :class:`EventError` that names why that line was skipped. Stores produce
    chunks and the engine consumes them, so the type lives here, below both.

    A chunk of a large block of one writer's lines is decoded as :class:`LeanEvent` s
    (``items`` given as :class:`LeanRows`): the engine reads those (:attr:`rows`), and
    :attr:`items` decodes the lines as :class:`Event` s when first asked.
    """

    __slots__ = ("_items", "_lean", "columns", "first_line", "source")

    def __init__(
        self,
        source: str,
        first_line: int,
        items: list[Event | EventError] | LeanRows,
        columns: DecodedColumns | None = None,
    ) -> None:
        self.source = source
        self.first_line = first_line
        #: What the decoder worked out of the items (it does for a block of plain lines),
        #: else None: the engine then reads it from the events.
        self.columns = columns
        self._lean = items if isinstance(items, LeanRows) else None
        self._items = None if isinstance(items, LeanRows) else items

    @property
    def items(self) -> list[Event | EventError]:
        """The lines' events (or errors)."""
        if self._items is None:
            assert self._lean is not None  # one of the two is always set
            self._items = self._lean.events()
        return self._items

    @property
    def rows(self) -> Sequence[Event | LeanEvent | EventError]:
        """What the engine reads: the :class:`LeanEvent` s when decoded so, else :attr:`items`."""
        if self._lean is not None:
            return self._lean.rows
        return self.items

    def __len__(self) -> int:
        """How many lines (items) the chunk holds."""
        return len(self._lean) if self._lean is not None else len(self.items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Chunk):
            return NotImplemented
        return (self.source, self.first_line, self.items) == (
            other.source,
            other.first_line,
            other.items,
        )

    __hash__ = None  # type: ignore[assignment]  # a list inside: unhashable, as before

    def __repr__(self) -> str:
        return f"Chunk(source={self.source!r}, first_line={self.first_line}, items={self.items!r})"


def validate(event: Event | LeanEvent) -> str | None:
    """Return why ``event`` breaks schema v1, or ``None`` when it is valid.

    An unknown ``kind`` is *not* an error here: readers keep such events and the
    engine reports them (a newer schema may add kinds).
    """
    if not math.isfinite(event.ts):
        return f"ts must be a finite number, got {event.ts!r}"
    if not MIN_TS <= event.ts <= MAX_TS:
        return f"ts {event.ts!r} is outside the years 1 to 9999"
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
    if kind == Kind.SECTION_SUMMARY:
        problem = _section_summary_problem(event)
        if problem is not None:
            return problem
    if event.tokens is not None or event.samples is not None or kind == Kind.MODEL:
        problem = _work_problem(event)
        if problem is not None:
            return problem
    timeout = event.hang_timeout
    if timeout is not None and not 0.0 < timeout <= MAX_SETTING_SECONDS:
        return f"hang_timeout must be positive seconds (at most a year), got {timeout!r}"
    if not 1 <= event.v <= MAX_INT:
        return f"schema version v must be >= 1, got {event.v}"
    for field in _INT_FIELDS:
        value = getattr(event, field)
        if type(value) is int and not -MAX_INT <= value <= MAX_INT:
            return f"{field} {_short_int(value)} is outside +-(2**53 - 1)"
    return None


def _section_summary_problem(event: Event | LeanEvent) -> str | None:
    if event.count is None or event.count < 0:
        return "section_summary requires a 'count' >= 0"
    if event.seconds is None or not (math.isfinite(event.seconds) and event.seconds >= 0):
        return "section_summary requires finite 'seconds' >= 0"
    for key, value in (event.quantiles or {}).items():
        if key not in SECTION_QUANTILES or not (math.isfinite(value) and value >= 0):
            return f"section_summary quantile {key!r} must be one of {SECTION_QUANTILES}, >= 0"
    for name in ("last", "open_since"):
        value = getattr(event, name)
        if value is not None and not (math.isfinite(value) and MIN_TS <= value <= MAX_TS):
            return f"section_summary {name!r} must be a time in years 1 to 9999"
    return None


#: The counts of a step's work and of a model event: integers >= 0.
WORK_COUNTS: Final = ("tokens", "samples", "params", "layers", "hidden", "seq_len", "devices")


def _work_problem(event: Event | LeanEvent) -> str | None:
    """Why the work fields of ``event`` (step work, a model description) are invalid."""
    for name in WORK_COUNTS:
        value = getattr(event, name)
        if value is not None and not (type(value) is int and value >= 0):
            return f"{name} must be an integer >= 0, got {value!r}"
    for name in ("flops_per_token", "peak_flops"):
        value = getattr(event, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            return f"{name} must be a finite number > 0, got {value!r}"
    return None


_INT_FIELDS: Final = (
    "attempt",
    "rank",
    "pid",
    "step",
    "exit_code",
    "active",
    "total",
    "available",
    "count",
    *WORK_COUNTS,
)


def _short_int(value: int) -> str:
    """An integer for a message: digits up to 30, else its sign and magnitude."""
    if -(10**30) < value < 10**30:
        return str(value)
    return f"{'-' if value < 0 else ''}~2**{abs(value).bit_length() - 1}"


def attempt_id(raw: str) -> str | int:
    """The attempt id an environment variable spells: an integer for plain digits.

    Only ASCII digits within :data:`MAX_INT` become an ``int``; anything else
    (``"01x"``, ``"²"``, a 5,000-digit number) stays the string it is, so that an
    odd value never stops a recorder. Paths made from it are sanitised by the store.
    """
    if raw.isascii() and raw.isdigit() and len(raw) <= 15:
        return int(raw)
    return raw


def interval_base(kind: str) -> tuple[str, bool] | None:
    """Split an interval kind into ``(base, is_start)``; ``None`` for other kinds."""
    return _INTERVAL_SPLIT.get(kind)


# Every interval kind's split, looked up once per interval event (a dict lookup, not
# two suffix tests and a slice).
_INTERVAL_SPLIT: Final[dict[str, tuple[str, bool]]] = {
    f"{base}{suffix}": (base, is_start)
    for base in INTERVAL_KINDS
    for suffix, is_start in (("_start", True), ("_end", False))
}


def bucket_of(base: str, name: str | None) -> str:
    """The partition bucket of an interval: ``custom:eval``, ``checkpoint_save``, ..."""
    if base in NAMED_INTERVAL_KINDS:
        return f"{base}:{name}"
    return base
