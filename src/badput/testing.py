"""Helpers for testing code that uses badput (ours and yours).

- :class:`MemoryStore`: a store in memory, with the JSONL store's semantics.
- :func:`recorder_for_tests`: a :class:`~badput.recorder.Recorder` on a memory
  store, heartbeats off, fixed identity.
- :class:`Timeline`: build hand-made event sequences on a virtual clock.
- :func:`events_to_jsonl` / :func:`events_to_store`: write hand-made events.
- :func:`read_all`: every event and error of a job, in one call.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

from badput.events import Event, EventError
from badput.formats.codec import encode_line
from badput.recorder import Recorder
from badput.store import EventStore, MemoryStore, WriterKey

__all__ = [
    "MemoryStore",
    "Timeline",
    "events_to_jsonl",
    "events_to_store",
    "read_all",
    "recorder_for_tests",
]

#: A hand-made event: an :class:`Event`, a mapping of its fields, or a raw line.
EventLike: TypeAlias = "Event | Mapping[str, Any] | bytes | str"


def recorder_for_tests(
    job: str = "test-job",
    store: EventStore | None = None,
    *,
    rank: int | None = 0,
    attempt: str | int = 0,
    host: str = "test-host",
    **kwargs: Any,
) -> Recorder:
    """A recorder on ``store`` (default: a new :class:`MemoryStore`), heartbeats off.

    Call ``rec.flush()`` before reading; ``rec.store`` is the store used.
    """
    kwargs.setdefault("heartbeat_interval", 0)
    return Recorder(
        job,
        store if store is not None else MemoryStore(),
        rank=rank,
        attempt=attempt,
        host=host,
        enabled=True,
        **kwargs,
    )


def _to_line(item: EventLike) -> bytes:
    if isinstance(item, Event):
        return encode_line(item)
    if isinstance(item, Mapping):
        return encode_line(Event(**item))
    raw = item.encode() if isinstance(item, str) else item
    return raw if raw.endswith(b"\n") else raw + b"\n"


def _to_bytes(events: Iterable[EventLike]) -> bytes:
    return b"".join(_to_line(e) for e in events)


def events_to_jsonl(path: str | os.PathLike[str], events: Iterable[EventLike]) -> Path:
    """Append ``events`` to the file ``path`` as JSON lines (directories created).

    Strings and bytes are written as given (plus a ``\\n`` if missing): use them for
    malformed lines. Returns the path.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "ab") as f:
        f.write(_to_bytes(events))
    return p


def events_to_store(
    store: EventStore,
    events: Iterable[EventLike],
    job: str | None = None,
    key: WriterKey | None = None,
) -> None:
    """Append ``events`` to one stream of ``store`` (job: ``job`` or the first event's)."""
    items = list(events)
    if job is None:
        first = items[0] if items else None
        if isinstance(first, Event):
            job = first.job
        elif isinstance(first, Mapping):
            job = str(first["job"])
        else:
            raise ValueError("events_to_store needs job= when the first event is a raw line")
    writer = store.open_writer(job, key or WriterKey("0", "test-host", 0, 1))
    try:
        writer.write(_to_bytes(items))
        writer.flush()
    finally:
        writer.close()


def read_all(store: EventStore, job: str) -> tuple[list[Event], list[EventError]]:
    """Every event (stream order, then line order) and every error of ``job``."""
    events: list[Event] = []
    errors: list[EventError] = []
    for chunk in store.read(job).chunks:
        for item in chunk.items:
            if isinstance(item, EventError):
                errors.append(item)
            else:
                events.append(item)
    return events, errors


class Timeline:
    """Build an event sequence of one process on a virtual clock.

    ::

        tl = Timeline("job")
        tl.emit("job_start")
        tl.span("accelerator_init", 12.0)
        tl.steps(3, 1.5)                  # step_start/step_end for steps 0, 1, 2
        tl.span("custom", 4.0, name="eval")
        tl.emit("job_end", dt=1.0, status="completed")
        events_to_jsonl(tmp_path / "job" / "0" / "h-0-1.jsonl", tl.events)

    ``now`` is the virtual time; every method advances it by the durations given.
    """

    def __init__(
        self,
        job: str = "test-job",
        *,
        start: float = 1_700_000_000.0,
        attempt: str | int | None = 0,
        host: str | None = "test-host",
        rank: int | None = 0,
        pid: int | None = None,
    ) -> None:
        self.job = job
        self.now = start
        self.identity: dict[str, Any] = {
            "attempt": attempt,
            "host": host,
            "rank": rank,
            "pid": pid,
        }
        self.events: list[Event] = []
        self.next_step = 0

    def advance(self, dt: float) -> Timeline:
        """Move the clock forward by ``dt`` seconds."""
        self.now += dt
        return self

    def emit(self, kind: str, *, dt: float = 0.0, **fields: Any) -> Event:
        """Advance by ``dt`` then add a ``kind`` event with ``fields`` (identity overridable)."""
        self.now += dt
        values = {k: v for k, v in {**self.identity, **fields}.items() if v is not None}
        event = Event(ts=self.now, kind=kind, job=self.job, **values)
        self.events.append(event)
        return event

    def span(self, base: str, duration: float, **fields: Any) -> Timeline:
        """``<base>_start`` now and ``<base>_end`` ``duration`` seconds later."""
        self.emit(f"{base}_start", **fields)
        self.emit(f"{base}_end", dt=duration, **fields)
        return self

    def steps(
        self, count: int, duration: float, *, first: int | None = None, gap: float = 0.0
    ) -> Timeline:
        """``count`` steps of ``duration`` seconds, numbered from ``first`` (default: next)."""
        step = self.next_step if first is None else first
        for _ in range(count):
            self.span("step", duration, step=step)
            step += 1
            self.now += gap
        self.next_step = step
        return self
