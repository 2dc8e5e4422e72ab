"""What the launcher reads of a job's attempts in the store: the next attempt id, the
restarts inside an attempt, whether the job already completed, and the end of an attempt
whose launcher was killed (directory stores: only the tails of the streams are read)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from badput.formats.codec import decode_lines
from badput.recorder import Recorder
from badput.store import JsonlStore, open_store, written_end

if TYPE_CHECKING:
    from badput.store import EventStore

__all__ = [
    "end_orphaned_attempt",
    "job_completed",
    "latest_inner_restart",
    "next_attempt",
    "next_free_job",
    "ship_orphaned_of",
]

#: Status of an attempt ended at the next launch (its launcher was killed).
ORPHANED = "orphaned"
#: Bytes read from the end of each stream of the last attempt to see how it ended.
_TAIL_BYTES = 256 * 1024


def ship_orphaned_of(store: str | EventStore, job: str) -> None:
    """Ship what killed processes of ``job`` left in its spool (directory stores only);
    never raises."""
    with contextlib.suppress(Exception):
        opened = open_store(store)
        if isinstance(opened, JsonlStore):
            opened.ship_orphaned(job)
        ship_pending = getattr(opened, "ship_pending", None)  # an object store's local files
        if ship_pending is not None:
            ship_pending(job)


def end_orphaned_attempt(store: str | EventStore, job: str, attempt: int) -> bool:
    """If ``attempt`` of ``job`` has no end (its launcher was killed), record its
    ``attempt_end`` (status ``orphaned``) at its last event. True if one was recorded.

    Reads only the tail of that attempt's streams (directory stores only), after shipping
    what its killed processes left in the job's spool."""
    opened = open_store(store)
    if not isinstance(opened, JsonlStore):
        return False
    opened.ship_orphaned(job)
    inner = latest_inner_restart(opened, job, attempt)
    ended: int | str = f"{attempt}.{inner}" if inner else attempt  # what was running
    directory = opened.job_dir(job) / str(ended)
    last_ts: float | None = None
    for path in sorted(directory.glob("*.jsonl")):
        for item in decode_lines(_tail_lines(path)):
            if isinstance(item, Exception):
                continue
            if item.kind in ("attempt_end", "job_end"):
                return False
            last_ts = item.ts if last_ts is None else max(last_ts, item.ts)
    if last_ts is None:
        return False
    with Recorder(job, opened, attempt=ended, heartbeat_interval=0) as rec:
        rec.record_attempt_end(status=ORPHANED, ts=last_ts)
    return True


def _stream_names(store: str | EventStore, job: str) -> list[str]:
    """The job's stream names; a store that cannot be listed counts as empty."""
    try:
        opened = open_store(store)
        streams = getattr(opened, "streams", None)
        return list(streams(job)) if callable(streams) else []
    except (OSError, ValueError):
        return []


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _attempt_parts(name: str) -> tuple[int, int] | None:
    """``(outer, inner)`` of a stream's numeric attempt id ``"7"`` or ``"7.2"``."""
    outer, _, inner = name.split("/", 1)[0].partition(".")
    if _digits(outer) and (not inner or _digits(inner)):
        return int(outer), int(inner or 0)
    return None


def next_attempt(store: str | EventStore, job: str) -> int:
    """One more than the highest numeric attempt id ``job`` already has in ``store`` (else 0).

    Attempt ids are the first part of stream names (``<attempt>/<host>-<rank>-<pid>.jsonl``);
    a restart inside an attempt (``"7.2"``) counts as its attempt (7).
    A store that cannot be listed counts as empty: the job's own recorder will still write.
    """
    ids = [p[0] for p in map(_attempt_parts, _stream_names(store, job)) if p is not None]
    return max(ids) + 1 if ids else 0


def latest_inner_restart(store: str | EventStore, job: str, attempt: int) -> int:
    """The highest restart ``n`` inside ``attempt`` (streams ``"<attempt>.<n>/..."``), else 0."""
    inner = [
        p[1]
        for p in map(_attempt_parts, _stream_names(store, job))
        if p is not None and p[0] == attempt
    ]
    return max(inner, default=0)


def job_completed(store: str | EventStore, job: str) -> bool:
    """Whether ``job``'s newest attempt ended with ``job_end`` status ``completed``.

    Reads only the tails of that attempt's streams of a directory store (the
    launcher writes the end last); other stores count as not completed.
    """
    parts = [(p, n) for n in _stream_names(store, job) if (p := _attempt_parts(n)) is not None]
    if not parts:
        return False
    newest = max(p[0] for p, _ in parts)
    try:
        opened = open_store(store)
        if not isinstance(opened, JsonlStore):
            return False
        base = opened.job_dir(job)
        for (outer, _inner), name in parts:
            if outer == newest and _tail_status(base / name) == "completed":
                return True
    except (OSError, ValueError):
        return False
    return False


def _tail_lines(path: Path) -> list[bytes]:
    """The complete, non-blank lines of the last ``_TAIL_BYTES`` written to the stream at
    ``path``.

    Written, not last in the file: a recorder's file is pre-allocated and memory-mapped,
    and one killed with its launcher keeps its unwritten NUL tail. That tail grows with the
    file (by doubling): past the first 256 KB of events it is longer than ``_TAIL_BYTES``,
    and the file's last bytes hold no event at all (an orphaned attempt was then ended at
    its start). The written part ends where the store's readers say it does.
    """
    with open(path, "rb") as f:
        fd = f.fileno()
        end = written_end(fd, os.fstat(fd).st_size)
        start = max(end - _TAIL_BYTES, 0)
        data = os.pread(fd, end - start, start)
    # The first line may be cut by the tail's start; the last, torn (written as it was read).
    lines = data.split(b"\n")[1 if start else 0 : -1]
    return [line for line in lines if line.strip()]


def _tail_status(path: Path) -> str | None:
    """The status of the last ``job_end`` in the tail of the stream at ``path``."""
    status: str | None = None
    for item in decode_lines([line for line in _tail_lines(path) if b'"job_end"' in line]):
        if not isinstance(item, Exception) and item.kind == "job_end":
            status = item.status
    return status


def next_free_job(store: str | EventStore, job: str) -> str:
    """``<job>.2``, ``<job>.3``, ...: the first name with no completed run in ``store``."""
    n = 2
    while job_completed(store, f"{job}.{n}"):
        n += 1
    return f"{job}.{n}"
