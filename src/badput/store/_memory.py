"""An in-memory store with the exact semantics of the JSONL store (for tests).

Streams are byte buffers; reads parse them with the same code as files, so a
torn last line, empty lines and malformed lines behave identically.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Final

from badput.store._base import Chunk, Cursor, EventWriter, ReadResult, Unread, WriterKey
from badput.store._lines import keep_parsed, parse_stream

__all__ = ["MemoryStore", "memory_store"]

SCHEME: Final = "memory://"

_registry_lock = threading.RLock()
# Stores opened by name through ``open_store("memory://name")`` live as long as
# the process; stores built directly are findable by name while referenced.
_named: dict[str, MemoryStore] = {}
_anonymous: weakref.WeakValueDictionary[str, MemoryStore] = weakref.WeakValueDictionary()
_counter = itertools.count(1)


class _MemoryWriter:
    def __init__(self, store: MemoryStore, buf: bytearray) -> None:
        self._store = store
        self._buf = buf
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed:
            raise OSError("write to a closed memory stream")
        if self._store.fail_writes:
            raise OSError(f"{self._store.uri}: writes disabled (fail_writes)")
        with self._store._lock:
            self._buf += data

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


class MemoryStore:
    """Events kept in memory: ``job -> stream name -> bytes``. Thread-safe.

    ``MemoryStore()`` gets a unique name; ``uri`` (``memory://<name>``) opens it
    again with :func:`badput.store.open_store` while it is alive.
    Set ``fail_writes`` to make every ``open_writer`` and write raise ``OSError``
    (to test how writers cope with a broken store).
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name if name is not None else f"anon-{next(_counter)}"
        self.fail_writes = False
        self._lock = threading.Lock()
        self._jobs: dict[str, dict[str, bytearray]] = {}
        with _registry_lock:
            if self.name not in _named:
                _anonymous[self.name] = self

    def __repr__(self) -> str:
        return f"MemoryStore({self.name!r})"

    @property
    def uri(self) -> str:
        return SCHEME + self.name

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        if self.fail_writes:
            raise OSError(f"{self.uri}: writes disabled (fail_writes)")
        with self._lock:
            streams = self._jobs.setdefault(job, {})
            buf = streams.setdefault(key.stream_name(), bytearray())
        return _MemoryWriter(self, buf)

    def append(self, job: str, stream: str, data: bytes) -> None:
        """Append raw bytes to a stream (tests: torn or malformed lines)."""
        with self._lock:
            self._jobs.setdefault(job, {}).setdefault(stream, bytearray()).extend(data)

    def raw(self, job: str, stream: str) -> bytes:
        """The bytes of one stream (empty if absent)."""
        with self._lock:
            return bytes(self._jobs.get(job, {}).get(stream, b""))

    def streams(self, job: str) -> list[str]:
        with self._lock:
            return sorted(self._jobs.get(job, {}))

    def jobs(self) -> list[str]:
        with self._lock:
            return sorted(j for j, streams in self._jobs.items() if streams)

    def clear(self) -> None:
        with self._lock:
            self._jobs.clear()

    def read(
        self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        cursor = cursor or Cursor()
        out = Cursor(dict(cursor.offsets))
        with self._lock:
            names = sorted(self._jobs.get(job, {}))
        chunks: list[Chunk] = []
        unread: list[Unread] = []
        budget = max_bytes
        for name in names:
            if budget is not None and budget <= 0:
                break
            offset, lines = cursor.offsets.get(name, (0, 0))
            # Only what this read takes is copied (to the end of the line the budget ends
            # in): a catch-up in slices copied every stream's unread bytes at each slice.
            with self._lock:
                buf = self._jobs.get(job, {}).get(name, bytearray())
                end = -1
                if budget is not None and len(buf) - offset > budget:
                    end = buf.find(b"\n", offset + budget - 1)
                data = bytes(buf[offset:] if end < 0 else buf[offset : end + 1])
            source = f"{self.uri}/{job}/{name}"
            parsed = parse_stream([data], source, lines, at_start=offset == 0)
            keep_parsed(parsed, name, source, offset, lines, out=out, chunks=chunks, unread=unread)
            if budget is not None:
                budget -= parsed.n_bytes
        return ReadResult(chunks, out, unread)


def memory_store(name: str) -> MemoryStore:
    """The process-wide memory store called ``name`` (created on first use)."""
    with _registry_lock:
        store = _named.get(name) or _anonymous.get(name)
        if store is None:
            store = MemoryStore(name)
        _named[name] = store
        return store
