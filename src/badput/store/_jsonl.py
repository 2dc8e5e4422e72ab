"""The default store: a directory of append-only JSON-lines files.

Layout (``EVENTS.md``)::

    <root>/<job>/<attempt>/<host>-<rank>-<pid>.jsonl

One file per writer process, opened in append mode and never rewritten. Readers
take every ``*.jsonl`` file below ``<root>/<job>/`` (any depth), in sorted order
of their path relative to the job directory (the stream name).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from badput._codec import decode_lines
from badput.store._base import (
    Chunk,
    Cursor,
    EventWriter,
    ReadResult,
    Unread,
    WriterKey,
    safe_name,
)
from badput.store._lines import BOM, parse_stream, torn_tail, written_length

__all__ = ["JsonlStore", "JsonlWriter", "SingleFileStore", "first_job_below", "safe_job_dir"]

#: Bytes read from a file at a time (large blocks: decoding, not I/O, dominates).
READ_BLOCK: Final = 8 * 1024 * 1024


def safe_job_dir(job: str) -> str:
    """The directory name of ``job``: separators, ``.``/``..``, controls, length made harmless."""
    return safe_name(job)


_KINDS_OF_FILE: Final = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def _what_is(mode: int) -> str:
    for test, name in _KINDS_OF_FILE:
        if test(mode):
            return name
    return "something else"


def open_regular(path: Path) -> BinaryIO | None:
    """Open ``path`` for reading if it is a regular file (following symlinks), else ``None``.

    A FIFO, socket or device named ``*.jsonl`` would block the reader or never
    end: it is opened non-blocking, checked, and closed again. Raises
    ``OSError`` when it cannot be opened (``FileNotFoundError`` when it is gone).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class JsonlWriter:
    """Appends complete lines to one file (unbuffered: each write is one syscall)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 (owned, closed in close())
        try:
            size = self._file.seek(0, os.SEEK_END)
            if size > 0:
                # A previous writer of this very file (pid reuse) died mid-line:
                # terminate its torn line so that ours starts on a fresh one.
                with open(path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        self._write_all(b"\n")
        except BaseException:
            self._file.close()
            raise

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self._file.write(view)
            if n is None or n <= 0:  # pragma: no cover - non-blocking files only
                raise OSError(f"could not write to {self.path}")
            view = view[n:]

    def write(self, data: bytes) -> None:
        self._write_all(data)

    def flush(self) -> None:
        # Unbuffered: every write already reached the OS, which is what readers
        # (and survival of a killed process) need. No fsync on purpose.
        return None

    def close(self) -> None:
        self._file.close()


def _read_file(f: BinaryIO, offset: int, limit: int | None) -> Iterator[bytes]:
    """Blocks from ``offset``; past ``limit`` bytes, only up to the end of the current line.

    Stops after a block that is all NUL bytes: the rest of a pre-extended file is
    not written yet (:func:`~badput.store._lines.written_length`).
    """
    with f:
        f.seek(offset)
        read = 0
        while True:
            block = f.read(READ_BLOCK)
            if not block:
                return
            read += len(block)
            if block[-1] == 0 and written_length(block) == 0:
                yield block
                return
            if limit is not None and read >= limit:
                # Finish the line in progress so the budget never splits a read into nothing.
                yield block + f.readline()
                return
            yield block


def _read_path(  # noqa: PLR0917 (one call site per store kind)
    path: Path,
    stream: str,
    cursor: Cursor,
    out: Cursor,
    chunks: list[Chunk],
    unread: list[Unread],
    *,
    limit: int | None,
) -> int:
    """Append the new chunks of the file ``path`` (stream ``stream``); advance ``out``.

    Returns the bytes consumed. A file that is not a regular file, and an
    unterminated last line, are added to ``unread``.
    """
    source = str(path)
    offset, lines = cursor.offsets.get(stream, (0, 0))
    try:
        st = path.stat()
    except OSError:
        return 0
    if not stat.S_ISREG(st.st_mode):
        unread.append(Unread("not_a_file", source, detail=_what_is(st.st_mode)))
        return 0
    if st.st_size <= offset:
        return 0
    try:
        f = open_regular(path)
    except OSError:
        return 0
    if f is None:  # replaced between the stat and the open
        unread.append(Unread("not_a_file", source, detail="something else"))
        return 0
    parsed = parse_stream(_read_file(f, offset, limit), source, lines, at_start=offset == 0)
    chunks.extend(parsed.chunks)
    if parsed.n_bytes:
        out.offsets[stream] = (offset + parsed.n_bytes, lines + parsed.n_lines)
    torn = torn_tail(parsed.tail, source, lines + parsed.n_lines + 1)
    if torn is not None:
        unread.append(torn)
    return parsed.n_bytes


def _has_jsonl(directory: Path) -> bool:
    for _dirpath, _dirnames, filenames in os.walk(directory):
        if any(f.endswith(".jsonl") for f in filenames):
            return True
    return False


class JsonlStore:
    """A store rooted at a directory: one sub-directory per job, JSONL files inside.

    ``open_writer`` creates directories when called (never before) and appends
    to ``<root>/<job>/<key.stream_name()>``. ``read`` returns the complete lines
    of every ``*.jsonl`` below ``<root>/<job>/`` not yet consumed by the cursor.
    Error items name the file by its full path.
    """

    def __init__(
        self, root: str | os.PathLike[str], job_dirs: dict[str, str] | None = None
    ) -> None:
        self.root = Path(root)
        # Jobs kept in a directory not named after them (a renamed or copied job
        # directory): job -> directory name below root.
        self.job_dirs = dict(job_dirs or {})

    def __repr__(self) -> str:
        extra = f", job_dirs={self.job_dirs!r}" if self.job_dirs else ""
        return f"JsonlStore({str(self.root)!r}{extra})"

    @property
    def uri(self) -> str:
        return str(self.root)

    def job_dir(self, job: str) -> Path:
        """The directory holding ``job``'s streams."""
        return self.root / self.job_dirs.get(job, safe_job_dir(job))

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        return JsonlWriter(self.job_dir(job) / key.stream_name())

    def jobs(self) -> list[str]:
        try:
            entries = sorted(os.scandir(self.root), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [e.name for e in entries if e.is_dir() and _has_jsonl(Path(e.path))]

    def streams(self, job: str) -> list[str]:
        """Stream names of ``job`` (paths relative to its directory), sorted."""
        base = self.job_dir(job)
        names: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            rel = os.path.relpath(dirpath, base)
            for f in filenames:
                if f.endswith(".jsonl"):
                    name = f if rel == "." else os.path.join(rel, f)
                    names.append(name.replace(os.sep, "/"))
        names.sort()
        return names

    def read(
        self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        cursor = cursor or Cursor()
        out = Cursor(dict(cursor.offsets))
        chunks: list[Chunk] = []
        unread: list[Unread] = []
        base = self.job_dir(job)
        budget = max_bytes
        for stream in self.streams(job):
            if budget is not None and budget <= 0:
                break
            path = base / stream
            used = _read_path(path, stream, cursor, out, chunks, unread, limit=budget)
            if budget is not None:
                budget -= used
        return ReadResult(chunks, out, unread)


class SingleFileStore:
    """A read-only store over one ``.jsonl`` file, holding the single job ``job``.

    ``read(job)`` returns the file's lines whatever job their events name (the
    file *is* the job); ``read`` of any other job name returns nothing.
    ``open_writer`` raises ``OSError``: a file of events is never appended to by
    a second writer.
    """

    def __init__(self, path: str | os.PathLike[str], job: str | None = None) -> None:
        self.path = Path(path)
        self.job = job if job is not None else _first_job(self.path) or self.path.stem

    def __repr__(self) -> str:
        return f"SingleFileStore({str(self.path)!r}, job={self.job!r})"

    @property
    def uri(self) -> str:
        return str(self.path)

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        raise OSError(f"{self.path} is a single event file, opened read-only")

    def jobs(self) -> list[str]:
        return [self.job]

    def read(
        self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        cursor = cursor or Cursor()
        out = Cursor(dict(cursor.offsets))
        chunks: list[Chunk] = []
        unread: list[Unread] = []
        if job == self.job:
            _read_path(self.path, self.path.name, cursor, out, chunks, unread, limit=max_bytes)
        return ReadResult(chunks, out, unread)


_FIRST_LINE_MAX: Final = 1 << 20


def _first_job(path: Path, max_lines: int = 1000) -> str | None:
    """The ``job`` of the first valid event among the first lines of ``path``."""
    try:
        f = open_regular(path)
        if f is None:
            return None
        with f:
            for i in range(max_lines):
                raw = f.readline(_FIRST_LINE_MAX)
                if not raw.endswith(b"\n"):  # end of file, a torn line, or too long to look at
                    return None
                line = raw.rstrip(b"\r\n")
                if i == 0 and line.startswith(BOM):
                    line = line[len(BOM) :]
                if not line:
                    continue
                item = decode_lines([line])[0]
                if not isinstance(item, Exception):
                    return item.job
    except OSError:
        return None
    return None


def first_job_below(directory: Path) -> tuple[str, str] | None:
    """``(relative stream path, job)`` of the first decodable event below ``directory``."""
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for f in sorted(filenames):
            if f.endswith(".jsonl"):
                path = Path(dirpath) / f
                job = _first_job(path)
                if job is not None:
                    return os.path.relpath(path, directory).replace(os.sep, "/"), job
    return None
