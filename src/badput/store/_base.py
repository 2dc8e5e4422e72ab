"""The EventStore protocol: where events are appended and read back from.

Stores move bytes; they compute nothing. A store holds jobs; a job holds any
number of writer streams (one per writer process, append-only); readers take the
union of all streams, incrementally, from a :class:`Cursor`.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, runtime_checkable

from badput.events import Chunk

__all__ = [
    "MAX_NAME_BYTES",
    "Chunk",
    "Cursor",
    "EventStore",
    "EventWriter",
    "ReadResult",
    "Unread",
    "WriterKey",
    "safe_name",
]

#: Longest directory or file name part made from a log value (file systems allow 255 bytes).
MAX_NAME_BYTES: Final = 160


def safe_name(value: str, empty: str = "_") -> str:
    """``value`` as one harmless path component: never a separator, ``.``, ``..`` or too long.

    Separators (``/``, ``\\``), NUL and other control characters become ``_``;
    ``.`` and ``..`` become ``_`` and ``__``; an empty value becomes ``empty``.
    A value longer than :data:`MAX_NAME_BYTES` (UTF-8) is cut and given a hash of
    the whole, so distinct long values stay distinct. The events keep the real
    value: this is only where their file lives.
    """
    name = value
    if not name.isprintable() or "/" in name or "\\" in name:
        name = "".join(
            "_" if c in "/\\" or unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in name
        )
    if os.altsep:
        name = name.replace(os.altsep, "_")
    if name in ("", ".", ".."):
        name = name.replace(".", "_") or empty
    raw = name.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_NAME_BYTES:
        digest = hashlib.sha1(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        head = raw[: MAX_NAME_BYTES - 13].decode("utf-8", "ignore")
        name = f"{head}~{digest}"
    return name


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
        stem = safe_name(f"{safe_name(self.host, 'host')}-{rank}-{self.pid}")
        return f"{safe_name(self.attempt, '0')}/{stem}.jsonl"


@dataclass
class Cursor:
    """Where a reader stopped: per stream, the byte offset and lines consumed.

    Opaque to callers; pass the cursor of one read into the next to get only
    what is new. A torn (unterminated) last line is not consumed.
    """

    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: A read that stopped on its byte budget leaves (job, the streams it had not finished,
    #: in order) so the next read goes on from there without listing the job again; a read
    #: that gets to the end leaves None, and the next one lists (new files, grown ones).
    resume: tuple[str, tuple[str, ...]] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Unread:
    """Bytes of a stream that a read left alone, and why.

    - ``torn_line``: the stream ends with ``size`` bytes and no ``\\n`` (line
      ``line``): a write in progress, or the last line of a writer that died.
      It is not consumed: a later read takes it once its newline is written.
      ``complete`` tells whether those bytes already decode as one valid event;
      ``modified`` is when the file was last written (seconds since the epoch, as the
      read saw it; None from a store that does not know): a writer that has not touched
      its file for a minute is not in the middle of a line.
    - ``not_a_file``: the ``*.jsonl`` entry is a FIFO, socket, device or
      directory (``detail`` says which); it is never opened.
    - ``unreadable``: opening the file failed (``detail``: why, e.g. permission denied).
    - ``unreadable_directory``: a directory below the job could not be listed (``detail``:
      why, e.g. permission denied); whatever files it holds were not read.
    - ``unshipped``: a spool segment of a writer that is gone (``source``) could not be
      shipped into its event file (``detail``: why, e.g. no space left on device): its
      lines are not read until it can be.
    - ``rotated``: the file is shorter than what was read of it before (``size`` bytes,
      ``line`` lines): cut short or replaced (log rotation). It is read again from its start.
    """

    code: Literal[
        "torn_line", "not_a_file", "unreadable", "unreadable_directory", "unshipped", "rotated"
    ]
    source: str
    line: int | None = None
    size: int = 0
    complete: bool = False
    detail: str = ""
    modified: float | None = None

    def explained(self) -> tuple[str, str]:
        """The code of the diagnostic a report gives for it, and the message."""
        if self.code == "rotated":
            why = (
                f"was cut short or replaced while it was followed ({self.detail}): the "
                f"{self.line or 0:,} lines read before are kept, and it is read again from "
                "its start"
            )
            return "rotated_file", why
        if self.code == "unreadable":
            return "unreadable_file", f"cannot be read: {self.detail}"
        if self.code == "unreadable_directory":
            return (
                "unreadable_directory",
                f"cannot be listed ({self.detail}): the event files below it are missing",
            )
        if self.code == "not_a_file":
            return "not_a_file", f"is {self.detail}, not a regular file: not read"
        if self.code == "unshipped":
            why = (
                "holds lines of a writer that is gone, not yet in its event file and so "
                f"not in this report: {self.detail} (shipped at the next read that can)"
            )
            return "unshipped_spool", why
        if self.complete:
            why = "a complete event, but no newline ends it: not read"
        else:
            why = "the writer stopped mid-line (it died, or its disk filled): an event was lost"
        return "torn_line", f"last line has {self.size:,} bytes and no newline: {why}"


@dataclass(frozen=True)
class ReadResult:
    chunks: list[Chunk]
    cursor: Cursor
    #: What this read found and did not consume (an unterminated last line, a FIFO...).
    unread: list[Unread] = field(default_factory=list)
    #: True when the read went to the end of every stream it had to read (no budget stopped
    #: it): reading on now finds only what was written since. A store that cannot tell
    #: leaves it False; a reader then reads until a read brings nothing new.
    reached_end: bool = False

    @property
    def n_items(self) -> int:
        return sum(map(len, self.chunks))


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
