"""The ``resiliency.goodput_measure`` library's event logs (AI-Hypercomputer/resiliency).

That library writes one JSON object a line::

    {"timestamp": "2025-09-27T04:51:00.492242", "job_name": "j", "event_type": "job_started",
     "node_rank": 0}

with ``event_type`` one of ``user_scheduled``, ``job_started``, ``checkpoint_loaded``,
``checkpoint_saved``, ``user_terminated``, ``job_terminated`` and an optional ``step``
(checkpoint events) or ``node_rank``. Timestamps are naive ISO 8601 (the library writes
``datetime.utcnow()``-style local times); **they are taken as UTC**, and a timestamp
with an explicit offset is honoured.

- :func:`read_resiliency_log` parses such files, naming the file and line of a bad line.
- :func:`resiliency_goodput` is that library's own calculator, to the last bit: goodput =
  (max saved step - min loaded step) x reference step time / (last event - first event).
- :func:`to_badput_events` turns the log into badput schema-v1 events (attempts with
  explicit ids, checkpoint progress), and :func:`import_resiliency` writes them to a store,
  so that ``badput report`` can say where the rest of the time went.
- :func:`render_table` prints the calculator's table (rich, imported lazily).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Final

from badput.events import Event, Kind
from badput.formats.codec import why_not_text
from badput.store import MAX_LINE_BYTES, open_regular, what_is

__all__ = [
    "EVENT_TYPES",
    "LogProblem",
    "ResiliencyEvent",
    "ResiliencyLogError",
    "ResiliencyResult",
    "import_resiliency",
    "jobs_in",
    "read_resiliency_log",
    "render_table",
    "resiliency_goodput",
    "to_badput_events",
    "unknown_event_types",
]

USER_SCHEDULED: Final = "user_scheduled"
JOB_STARTED: Final = "job_started"
CHECKPOINT_LOADED: Final = "checkpoint_loaded"
CHECKPOINT_SAVED: Final = "checkpoint_saved"
USER_TERMINATED: Final = "user_terminated"
JOB_TERMINATED: Final = "job_terminated"

#: The library's event types, in its tie-break order (events sort by time, then this).
EVENT_TYPES: Final[dict[str, int]] = {
    USER_SCHEDULED: 0,
    JOB_STARTED: 1,
    CHECKPOINT_LOADED: 2,
    CHECKPOINT_SAVED: 3,
    USER_TERMINATED: 4,
    JOB_TERMINATED: 5,
}

#: ``status`` of the badput end event written for each kind of termination.
END_STATUS: Final[dict[str, str]] = {JOB_TERMINATED: "terminated", USER_TERMINATED: "cancelled"}

#: The badput start/end pair each checkpoint event becomes (both at the event's time).
_CHECKPOINT_KINDS: Final[dict[str, tuple[str, str]]] = {
    CHECKPOINT_LOADED: (Kind.CHECKPOINT_RESTORE_START, Kind.CHECKPOINT_RESTORE_END),
    CHECKPOINT_SAVED: (Kind.CHECKPOINT_SAVE_START, Kind.CHECKPOINT_SAVE_END),
}

#: Host of the streams :func:`import_resiliency` writes.
IMPORT_HOST: Final = "resiliency-import"


@dataclass(frozen=True)
class ResiliencyEvent:
    """One line of a resiliency log. ``time`` is timezone-aware (naive input taken as UTC)."""

    time: datetime
    job_name: str | None
    event_type: str
    node_rank: int | None = None
    step: int | None = None
    file: str = ""
    line: int = 0

    @property
    def ts(self) -> float:
        """Seconds since the Unix epoch."""
        return self.time.timestamp()

    @property
    def known(self) -> bool:
        return self.event_type in EVENT_TYPES


@dataclass(frozen=True)
class LogProblem:
    """A line that is not a valid resiliency event: where, and why."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class ResiliencyLogError(ValueError):
    """A bad line in a resiliency log (raised when no ``problems`` list collects them)."""

    def __init__(self, problem: LogProblem) -> None:
        self.problem = problem
        super().__init__(str(problem))


# --------------------------------------------------------------------------- reading


def _parse_time(text: str) -> datetime:
    raw = text.strip()
    if raw.endswith(("Z", "z")):  # Python 3.10's fromisoformat does not take "Z"
        raw = raw[:-1] + "+00:00"
    dt = datetime.fromisoformat(raw)
    if dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def _integer(obj: dict[str, Any], key: str) -> int | None:
    """An optional integral number (the library writes ``40.0`` for step 40)."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key!r} must be a number, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError(f"{key!r} must be a whole number, got {value!r}")
        return int(value)
    return value


def _parse_line(text: str, file: str, lineno: int) -> ResiliencyEvent:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if "\\u" in text:  # json takes a lone surrogate escape, which no store can write
        why = why_not_text(text.encode("utf-8"))
        if why is not None:
            raise ValueError(why)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    stamp = obj.get("timestamp")
    if not isinstance(stamp, str):
        raise ValueError(f"'timestamp' must be an ISO 8601 string, got {stamp!r}")
    try:
        time = _parse_time(stamp)
    except ValueError:
        raise ValueError(f"'timestamp' is not an ISO 8601 time: {stamp!r}") from None
    event_type = obj.get("event_type")
    if not isinstance(event_type, str) or not event_type:
        raise ValueError(f"'event_type' must be a non-empty string, got {event_type!r}")
    job_name = obj.get("job_name")
    if job_name is not None and not isinstance(job_name, str):
        raise ValueError(f"'job_name' must be a string, got {job_name!r}")
    return ResiliencyEvent(
        time=time,
        job_name=job_name or None,
        event_type=event_type,
        node_rank=_integer(obj, "node_rank"),
        step=_integer(obj, "step"),
        file=file,
        line=lineno,
    )


def read_resiliency_log(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    problems: list[LogProblem] | None = None,
) -> list[ResiliencyEvent]:
    """Parse resiliency JSONL files, in file and line order.

    Blank lines are skipped. A bad line (not JSON, not an object, no valid
    ``timestamp`` or ``event_type``, a non-integral ``step``) raises
    :class:`ResiliencyLogError` naming ``file:line``, or, when ``problems`` is a
    list, is appended to it and skipped. Unknown event types are kept (see
    :func:`unknown_event_types`); the calculator counts them as that library does.
    A line longer than :data:`~badput.store._lines.MAX_LINE_BYTES` is a bad line, never
    held whole. A missing file raises ``OSError``; one that is not a regular file (a FIFO,
    a device), ``ValueError`` naming it, without reading it.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    events: list[ResiliencyEvent] = []
    for path in paths:
        name = os.fspath(path)
        with _open_log(name) as f:
            for lineno, raw in enumerate(_lines(f), start=1):
                try:
                    if isinstance(raw, int):
                        raise ValueError(
                            f"line of {raw:,} bytes, longer than {MAX_LINE_BYTES:,}: not read"
                        )
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        raise ValueError(why_not_text(raw) or "not valid UTF-8") from None
                    if not text.strip():
                        continue
                    events.append(_parse_line(text, name, lineno))
                except ValueError as exc:  # UnicodeDecodeError is a ValueError
                    problem = LogProblem(name, lineno, str(exc))
                    if problems is None:
                        raise ResiliencyLogError(problem) from None
                    problems.append(problem)
    return events


def _open_log(name: str) -> BinaryIO:
    """``name`` opened for reading, if it is a regular file. A FIFO would block the read
    until a writer comes, a device (``/dev/zero``) never ends: ``ValueError`` naming the
    file and what it is. ``OSError`` when it cannot be opened."""
    f = open_regular(Path(name))
    if f is None:
        raise ValueError(f"{name}: {what_is(os.stat(name).st_mode)}, not a regular file: not read")
    return f


#: Bytes of a line read at a time (a resiliency event's line is well under 1 KB).
_LINE_BLOCK: Final = 1 << 20


def _lines(f: BinaryIO) -> Iterator[bytes | int]:
    """The lines of ``f`` (the last one with or without its newline), each held only when
    it has :data:`~badput.store._lines.MAX_LINE_BYTES` bytes or fewer, as the event
    reader's; a longer one is read on in blocks, let go, and given as its length."""
    while True:
        raw = f.readline(_LINE_BLOCK)
        if raw.endswith(b"\n") or len(raw) < _LINE_BLOCK:  # a whole line, the last, or none
            if not raw:
                return
            yield raw
            continue
        parts: list[bytes] | None = [raw]
        size = len(raw)
        while True:
            block = f.readline(_LINE_BLOCK)
            size += len(block)
            ended = block.endswith(b"\n")
            if parts is not None:
                parts.append(block)
                if size - ended > MAX_LINE_BYTES:
                    parts = None  # too long to keep: only its length is counted on
            if ended or len(block) < _LINE_BLOCK:
                break
        yield size - ended if parts is None else b"".join(parts)


def unknown_event_types(events: Iterable[ResiliencyEvent]) -> dict[str, int]:
    """Event types outside the library's six, with their counts."""
    return dict(Counter(e.event_type for e in events if not e.known))


def jobs_in(events: Iterable[ResiliencyEvent]) -> list[str]:
    """The job names in ``events``, sorted."""
    return sorted({e.job_name for e in events if e.job_name is not None})


def _timeline(
    events: Sequence[ResiliencyEvent], job: str | None
) -> tuple[str | None, list[ResiliencyEvent]]:
    """The job's events in the library's order: by time, then by event type.

    Without ``job``, the job of the earliest event (that library's rule); when that
    event has no job name, every event.
    """
    if not events:
        raise ValueError("the log holds no events")
    if job is None:
        job = min(events, key=lambda e: e.time).job_name
        chosen = list(events) if job is None else [e for e in events if e.job_name == job]
    else:
        chosen = [e for e in events if e.job_name == job]
        if not chosen:
            listing = ", ".join(jobs_in(events)) or "none"
            raise ValueError(f"no events for job {job!r} in the log (jobs: {listing})")
    chosen.sort(key=lambda e: (e.time, EVENT_TYPES.get(e.event_type, math.inf)))
    return job, chosen


# ------------------------------------------------------------------ the calculator


@dataclass(frozen=True)
class ResiliencyResult:
    """The figures of the resiliency library's ``calculator.py``, under its names.

    ``min_loaded_step``, ``max_saved_step`` and ``step_diff`` are ``None`` when that
    calculator leaves them out (no load, no save above step 0, or no progress);
    then ``effective_computation_time`` and ``goodput_percentage`` are 0.
    """

    job_name: str | None
    reference_step_time: float
    total_events: int  # after merging, plus the calculator's proxy user_scheduled
    job_started_count: int  # runs of consecutive job_started, each counted once
    checkpoints_loaded: int  # loads of a step above 0
    checkpoints_saved: int
    total_runtime_seconds: float  # last event - first event
    min_loaded_step: int | None
    max_saved_step: int | None
    step_diff: int | None
    effective_computation_time: float  # step_diff x reference_step_time, seconds
    goodput_percentage: float
    first_event: datetime
    last_event: datetime
    unknown_event_types: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; the metric keys are those of that calculator's ``--export``."""
        return {
            "job_name": self.job_name,
            "reference_step_time": self.reference_step_time,
            "total_events": self.total_events,
            "job_started_count": self.job_started_count,
            "checkpoints_loaded": self.checkpoints_loaded,
            "checkpoints_saved": self.checkpoints_saved,
            "total_runtime_seconds": self.total_runtime_seconds,
            "min_loaded_step": self.min_loaded_step,
            "max_saved_step": self.max_saved_step,
            "step_diff": self.step_diff,
            "effective_computation_time": self.effective_computation_time,
            "goodput_percentage": self.goodput_percentage,
            "first_event": self.first_event.isoformat(),
            "last_event": self.last_event.isoformat(),
            "unknown_event_types": dict(self.unknown_event_types),
        }

    def rows(self) -> list[tuple[str, str]]:
        """The rows of that calculator's table, formatted as it formats them."""
        rows = [
            ("Total Events", str(self.total_events)),
            ("Job Started Count", str(self.job_started_count)),
            ("Checkpoints Loaded", str(self.checkpoints_loaded)),
            ("Checkpoints Saved", str(self.checkpoints_saved)),
        ]
        if self.total_runtime_seconds > 0:
            rows.append(("Total Runtime (hours)", str(round(self.total_runtime_seconds / 3600, 2))))
        if self.step_diff is not None:
            rows.append(("Min Loaded Step", str(self.min_loaded_step)))
            rows.append(("Max Saved Step", str(self.max_saved_step)))
            rows.append(("Step Difference", str(self.step_diff)))
        if self.effective_computation_time > 0:
            rows.append(
                (
                    "Effective Computation Time (hours)",
                    str(round(self.effective_computation_time / 3600, 2)),
                )
            )
        rows.append(("Goodput Percentage", f"{self.goodput_percentage:.2f}%"))
        return rows


def _merge_runs(timeline: list[ResiliencyEvent]) -> list[ResiliencyEvent | None]:
    """The calculator's preprocessing: a proxy ``user_scheduled`` (``None``) first unless
    the log starts with one, and each run of consecutive ``job_started`` (and of
    ``job_terminated``) reduced to its last event."""
    out: list[ResiliencyEvent | None] = []
    if timeline[0].event_type != USER_SCHEDULED:
        out.append(None)
    for e in timeline:
        prev = out[-1] if out else None
        if (
            prev is not None
            and e.event_type == prev.event_type
            and e.event_type in (JOB_STARTED, JOB_TERMINATED)
        ):
            out.pop()
        out.append(e)
    return out


def resiliency_goodput(
    events: Sequence[ResiliencyEvent], reference_step_time: float, job: str | None = None
) -> ResiliencyResult:
    """That library's calculator (``calculator.py``, commit ef69c85), exactly.

    Events of ``job`` (default: the job of the earliest event) sorted by time then
    event type; runs of consecutive ``job_started`` counted once; total runtime =
    last event - first event; effective computation time = (max saved step - min
    loaded step) x ``reference_step_time``; goodput % = effective / total x 100.
    Raises ``ValueError`` when there are no events (for ``job``).
    """
    if not (reference_step_time > 0 and math.isfinite(reference_step_time)):
        raise ValueError(f"the reference step time must be > 0, got {reference_step_time!r}")
    job, timeline = _timeline(events, job)
    merged = _merge_runs(timeline)
    first, last = timeline[0].time, timeline[-1].time
    total_runtime = (last - first).total_seconds()
    started = loaded = saved = 0
    min_loaded: float = math.inf
    max_saved = 0
    for e in merged:
        if e is None:
            continue
        if e.event_type == JOB_STARTED:
            started += 1
        elif e.event_type == CHECKPOINT_LOADED:
            step = e.step or 0
            if step > 0:
                loaded += 1
            min_loaded = min(min_loaded, step)
        elif e.event_type == CHECKPOINT_SAVED:
            saved += 1
            max_saved = max(max_saved, e.step or 0)
    step_diff: int | None = None
    effective = 0.0
    goodput = 0.0
    if min_loaded != math.inf and max_saved > 0 and max_saved - int(min_loaded) > 0:
        step_diff = max_saved - int(min_loaded)
        effective = step_diff * reference_step_time
        if total_runtime > 0:
            goodput = (effective / total_runtime) * 100
    return ResiliencyResult(
        job_name=job,
        reference_step_time=reference_step_time,
        total_events=len(merged),
        job_started_count=started,
        checkpoints_loaded=loaded,
        checkpoints_saved=saved,
        total_runtime_seconds=total_runtime,
        min_loaded_step=None if step_diff is None else int(min_loaded),
        max_saved_step=None if step_diff is None else max_saved,
        step_diff=step_diff,
        effective_computation_time=effective,
        goodput_percentage=goodput,
        first_event=first,
        last_event=last,
        unknown_event_types=unknown_event_types(timeline),
    )


# ------------------------------------------------------------------ the conversion


def to_badput_events(events: Sequence[ResiliencyEvent], job: str | None = None) -> list[Event]:
    """The log as badput schema-v1 events, in time order.

    - each run of consecutive ``job_started`` (one per node of one start) is one
      attempt: one ``job_start`` at the run's first event, with an explicit attempt
      id 0, 1, 2, ...; events before the first start belong to attempt 0;
    - ``checkpoint_loaded`` -> ``checkpoint_restore_end``, ``checkpoint_saved`` ->
      ``checkpoint_save_end`` (``step``; a missing step is 0, as the calculator reads it),
      each preceded by its ``*_start`` at the same time: the log has no durations, so
      no checkpoint time is invented and no end is left unpaired;
    - the last ``job_terminated`` / ``user_terminated`` of an attempt -> ``attempt_end``
      (status ``terminated`` / ``cancelled``), or ``job_end`` when it is the last event
      of the log;
    - ``user_scheduled`` -> ``job_scheduled`` (no attempt);
    - ``node_rank`` -> ``rank``; unknown event types are left out.

    ``job`` selects the job of the log (default: that of the earliest event); the
    badput job has the same name (``resiliency`` when the log names none).
    """
    job, timeline = _timeline(events, job)
    name = job or "resiliency"
    out: list[Event] = []
    ends: dict[int, ResiliencyEvent] = {}
    attempt = 0
    opened = False  # attempt `attempt` has a job_start
    prev_type: str | None = None
    for e in timeline:
        kind = e.event_type
        if kind == JOB_STARTED:
            if prev_type != JOB_STARTED:
                if opened or attempt in ends:
                    attempt += 1
                opened = True
                out.append(_event(e, Kind.JOB_START, name, attempt))
        elif kind in _CHECKPOINT_KINDS:
            # The log says when a checkpoint was loaded or saved, not how long it took:
            # a zero-length start/end pair (no checkpoint time, no unpaired end).
            for k in _CHECKPOINT_KINDS[kind]:
                out.append(_event(e, k, name, attempt, step=e.step or 0))
        elif kind in (JOB_TERMINATED, USER_TERMINATED):
            ends[attempt] = e  # the last one of the attempt wins
        elif kind == USER_SCHEDULED:
            out.append(Event(ts=e.ts, kind=Kind.JOB_SCHEDULED, job=name))
        prev_type = kind
    final = timeline[-1]
    for aid, e in ends.items():
        is_last = e is final
        out.append(
            _event(
                e,
                Kind.JOB_END if is_last else Kind.ATTEMPT_END,
                name,
                aid,
                status=END_STATUS[e.event_type],
            )
        )
    out.sort(key=lambda ev: ev.ts)  # stable: ends come after same-time events
    return out


def _event(
    e: ResiliencyEvent,
    kind: str,
    job: str,
    attempt: int,
    *,
    step: int | None = None,
    status: str | None = None,
) -> Event:
    return Event(
        ts=e.ts,
        kind=kind,
        job=job,
        attempt=attempt,
        rank=e.node_rank,
        step=step,
        status=status,
    )


def import_resiliency(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    store: Any = None,
    job: str | None = None,
    *,
    problems: list[LogProblem] | None = None,
) -> tuple[str, int]:
    """Convert resiliency logs (:func:`to_badput_events`) and write them into ``store``.

    ``store`` is anything :func:`badput.store.open_store` takes (``None``: the
    default store). One stream per attempt (``<attempt>/resiliency-import-x-0.jsonl``).
    ``job`` selects the job of the log; without it the log must hold one job.
    Refuses (``ValueError``) a job the store already holds: importing twice would
    count every event twice. Bad lines: see :func:`read_resiliency_log`.
    Returns ``(job, events written)``.
    """
    from badput.formats.codec import encode_lines  # noqa: PLC0415
    from badput.store import WriterKey, open_store, safe_job_dir  # noqa: PLC0415

    events = read_resiliency_log(paths, problems=problems)
    if not events:
        raise ValueError("the log holds no events")
    names = jobs_in(events)
    if job is None and len(names) > 1:
        raise ValueError(f"the log holds several jobs; choose one with --job: {', '.join(names)}")
    converted = to_badput_events(events, job)
    name = converted[0].job if converted else (job or "resiliency")
    target = open_store(store)
    if name in target.jobs() or safe_job_dir(name) in target.jobs():
        raise ValueError(
            f"the store {target.uri} already holds job {name!r}; importing again would "
            "count its events twice (use another store)"
        )
    by_attempt: dict[int, list[Event]] = {}
    for ev in converted:
        aid = ev.attempt if isinstance(ev.attempt, int) else 0
        by_attempt.setdefault(aid, []).append(ev)
    for aid, evs in sorted(by_attempt.items()):
        writer = target.open_writer(name, WriterKey(str(aid), IMPORT_HOST, None, 0))
        try:
            writer.write(encode_lines(evs))
            writer.flush()
        finally:
            writer.close()
    return name, len(converted)


# ---------------------------------------------------------------------- the table


def render_table(result: ResiliencyResult, console: Any = None) -> None:
    """Print the calculator's table, then its figures at full precision.

    ``console`` is a ``rich.console.Console`` (default: a new stdout console).
    """
    from rich import box  # noqa: PLC0415 (rich is lazy)
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    con: Console = console if console is not None else Console()
    con.print(Text(f"=== Goodput Analysis for Job: {result.job_name} ===", style="bold"))
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("Metric", no_wrap=True)
    table.add_column("Value", justify="right", no_wrap=True)
    for metric, value in result.rows():
        style = "bold green" if metric == "Goodput Percentage" else ""
        table.add_row(Text(metric, style=style), Text(value, style=style))
    con.print(table)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row(
        "total runtime",
        f"{result.total_runtime_seconds:,.6f} s  (first event {result.first_event.isoformat()}, "
        f"last {result.last_event.isoformat()}; naive times read as UTC)",
    )
    if result.step_diff is not None:
        grid.add_row(
            "effective computation",
            f"{result.effective_computation_time:,.6g} s  ((max saved {result.max_saved_step} "
            f"- min loaded {result.min_loaded_step}) x {result.reference_step_time:g} s)",
        )
    grid.add_row("goodput", Text(f"{result.goodput_percentage!r} %", style="bold green"))
    if result.unknown_event_types:
        text = ", ".join(f"{k} x{n}" for k, n in sorted(result.unknown_event_types.items()))
        grid.add_row("unknown event types", Text(f"{text} (counted as the calculator does)"))
    con.print(grid)
