"""The EventStore protocol: where events are appended and read back from.

Stores move bytes; they compute nothing. A store holds jobs; a job holds any
number of writer streams (one per writer process, append-only); readers take the
union of all streams, incrementally, from a :class:`Cursor`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from badput.events import Chunk

__all__ = ["Chunk", "Cursor", "EventStore", "EventWriter", "ReadResult", "WriterKey"]


@dataclass(frozen=True)
class WriterKey:
    """Identity of one writer process: names its stream inside a job."""

    attempt: str
    host: str
    rank: int | None
    pid: int

    def stream_name(self) -> str:
        """``<attempt>/<host>-<rank>-<pid>.jsonl`` (EVENTS.md layout)."""
        rank = "x" if self.rank is None else str(self.rank)
        safe_host = self.host.replace("/", "_") or "host"
        safe_attempt = self.attempt.replace("/", "_") or "0"
        return f"{safe_attempt}/{safe_host}-{rank}-{self.pid}.jsonl"


@dataclass
class Cursor:
    """Where a reader stopped: per stream, the byte offset and lines consumed.

    Opaque to callers; pass the cursor of one read into the next to get only
    what is new. A torn (unterminated) last line is not consumed.
    """

    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadResult:
    chunks: list[Chunk]
    cursor: Cursor

    @property
    def n_items(self) -> int:
        return sum(len(c.items) for c in self.chunks)


class EventWriter(Protocol):
    """An append-only byte sink for one writer stream."""

    def write(self, data: bytes) -> None:
        """Append complete ``\\n``-terminated lines. May raise ``OSError``."""

    def flush(self) -> None:
        """Make written lines durable enough for readers (e.g. ``os.fsync``-free flush)."""

    def close(self) -> None: ...


@runtime_checkable
class EventStore(Protocol):
    """Append-only storage of event lines, grouped by job and writer stream."""

    @property
    def uri(self) -> str:
        """A string that :func:`badput.store.open_store` turns back into this store."""

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        """A writer for a new stream of ``job`` (created lazily; may raise ``OSError``)."""

    def jobs(self) -> list[str]:
        """Names of the jobs in the store, sorted."""

    def read(
        self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        """Complete lines of ``job`` not yet consumed by ``cursor``.

        Chunks come in a stable stream order (sorted stream names), lines in file
        order. Ordering by ``ts`` is the engine's job. With ``max_bytes``, a read
        stops after about that many bytes (at least one line when any is
        complete): call again with the returned cursor until nothing comes back.
        This bounds the memory of reading a large log.
        """
