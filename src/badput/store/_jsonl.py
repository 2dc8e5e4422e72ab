"""The default store: a directory of append-only JSON-lines files.

Layout (``EVENTS.md``)::

    <root>/<job>/<attempt>/<host>-<rank>-<pid>.jsonl

One file per writer process, never rewritten. The recorder writes it through a
:class:`~badput.store.SpooledWriter` (lines are copied into a mapped spool segment in
``<root>/<job>/.spool/``, which outlives the process, and shipped to the event file
with ``write()``); other writers append with :class:`JsonlWriter`. Readers take every
``*.jsonl`` file below ``<root>/<job>/`` (any depth, the spool excepted), in sorted
order of their path relative to the job directory (the stream name), and stop at a
file's trailing run of NUL bytes (the unwritten tail of a mapped file: what badput
wrote before 0.1 and other tools that map their files leave).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, BinaryIO, Final, TypeAlias

from badput.events import DecodedColumns, Event, EventError, LeanRows
from badput.formats.codec import decode_block_coded, decode_lines
from badput.store._base import (
    Chunk,
    Cursor,
    EventWriter,
    ReadResult,
    Unread,
    WriterKey,
    safe_name,
)
from badput.store._lines import (
    BOM,
    CHUNK_LINES,
    MAX_LINE_BYTES,
    parse_stream,
    torn_tail,
    written_length,
)
from badput.store._spool import SPOOL_DIR, Orphans, SpooledWriter, ship_orphaned

__all__ = [
    "JsonlStore",
    "JsonlWriter",
    "SingleFileStore",
    "first_event_below",
    "first_event_of",
    "first_job_below",
    "has_jsonl_below",
    "open_regular",
    "safe_job_dir",
    "what_is",
    "written_end",
]

#: A file as ``os`` functions take it (the plan of a parallel read passes strings:
#: :meth:`JsonlStore.paths`).
FilePath: TypeAlias = "str | os.PathLike[str]"

#: Bytes read from a file at a time: a reader's slice (``max_bytes``) is one block or more. Past
#: 1 MiB, larger blocks are slower to decode (their event objects no longer reuse the memory
#: of the last block's; see ``badput.analysis.READ_SLICE_BYTES``).
READ_BLOCK: Final = 1024 * 1024
_FIRST_BLOCK: Final = 64 * 1024


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


def what_is(mode: int) -> str:
    """What a file of ``mode`` is when it is not a regular file ('a FIFO', 'a socket'...)."""
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
        """Write all of ``data``; an ``OSError`` raised part-way carries the bytes that
        were written as ``badput_written`` (complete lines among them are on disk)."""
        view = memoryview(data)
        written = 0
        try:
            while view:
                n = self._file.write(view)
                if n is None or n <= 0:  # pragma: no cover - non-blocking files only
                    raise OSError(f"could not write to {self.path}")
                view = view[n:]
                written += n
        except OSError as exc:
            exc.badput_written = written  # type: ignore[attr-defined]
            raise

    def write(self, data: bytes) -> None:
        self._write_all(data)

    def flush(self) -> None:
        # Unbuffered: every write already reached the OS, which is what readers
        # (and survival of a killed process) need. No fsync on purpose.
        return None

    def close(self) -> None:
        self._file.close()


_PROBE: Final = 64 * 1024  # bytes looked at past a block's end for the end of its last line


def _line_end_at(fd: int, target: int, size: int) -> int | None:
    """The end (just after its ``\n``) of the line holding byte ``target - 1`` of ``fd``,
    when it is within :data:`_PROBE` bytes and the first ``size`` bytes; else None."""
    probe = os.pread(fd, min(_PROBE, size - target + 1), target - 1)
    i = probe.find(b"\n")
    return target + i if i >= 0 else None


def _read_fd(
    fd: int, offset: int, size: int, limit: int | None, first: bytes | None = None
) -> Iterator[bytes]:
    """Blocks of the open file ``fd`` from ``offset`` up to ``size`` (its size when it was
    opened; what it grew by since is left for a later read); past ``limit`` bytes, only up
    to the end of the current line (which may run past ``size``).

    Read with ``pread``: no seek, and no empty read to find the end. Stops after a block
    that is all NUL bytes: the rest of a pre-extended file is not written yet
    (:func:`~badput.store._lines.written_length`). ``first``: the first block, already read.

    The blocks would end every :data:`READ_BLOCK` bytes (``reach``); each is read on to the
    end of the line it stops in (found by a small probe read first), so that
    :func:`~badput.store._lines.parse_stream` decodes every block as it is: a block cut
    mid-line cost two more copies of it (the line carried over, joined to the next
    block, then cut off again). The reads consume exactly what blocks ending at ``reach``
    would: the budget counts ``reach``, and the block that reaches it ends with its line.
    A line the probe does not see the end of leaves its block cut at ``reach``.
    """
    pos = offset  # where the next block starts
    reach = offset  # where it would start with every block cut at READ_BLOCK bytes
    finishing = False
    # A later read of a file starts small: in a pre-extended file it often finds only NULs.
    want = _FIRST_BLOCK if offset else READ_BLOCK
    while True:
        if first is not None:
            block, first = first, None
            reach = pos + len(block)
        elif finishing or reach >= size:  # past the budget: to the end of the line
            block = os.pread(fd, min(want, size - pos) if pos < size else want, pos)
            reach = pos + len(block)
        else:  # no more than the file holds: pread allocates what it is asked for
            target = reach + min(want, size - reach)
            while target <= pos:  # a line longer than a block: the last read went past it
                reach = target  # (its budget check comes where that line ends, at pos)
                if limit is not None and reach - offset >= limit:
                    return
                target = reach + min(READ_BLOCK, size - reach)
            end = _line_end_at(fd, target, size) if pos < target < size else None
            block = os.pread(fd, (target if end is None else end) - pos, pos)
            reach = target
        want = READ_BLOCK
        if not block:
            return
        pos += len(block)
        if block[-1] == 0 and written_length(block) == 0:
            yield block
            return
        if finishing:  # past the budget: only up to the end of the line in progress
            nl = block.find(b"\n")
            if nl >= 0:
                yield block[: nl + 1]
                return
            yield block  # a long line: parse_stream holds at most MAX_LINE_BYTES of it
            continue
        yield block
        if limit is not None and reach - offset >= limit:
            # Finish the line in progress so the budget never splits a read into nothing.
            if block.endswith(b"\n"):
                return
            finishing = True
        elif pos >= size:
            return


def _plain_lines(
    data: bytes, source: str, *, lean: bool = False
) -> tuple[list[Event | EventError] | LeanRows, DecodedColumns | None] | None:
    """The events of ``data``, a whole file, when it is the common case: one JSON object a
    line, every line ended (no BOM, blank line, torn or NUL tail), with their columns;
    else None. A job of
    10,000 attempts is 10,000 such files: each is decoded in one call, as
    :func:`~badput.store._lines.parse_stream` would, without its per-block bookkeeping."""
    if data[:1] != b"{" or data[-2:] != b"}\n" or len(data) > MAX_LINE_BYTES:
        return None
    return decode_block_coded(data, source, 1, lean=lean)


_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _read_path(  # noqa: PLR0917 (one call site per store kind)
    path: str,
    stream: str,
    cursor: Cursor,
    out: Cursor,
    chunks: list[Chunk],
    unread: list[Unread],
    *,
    limit: int | None,
    regular: bool = False,
    lean: bool = False,
) -> int:
    """Append the new chunks of the file ``path`` (stream ``stream``); advance ``out``.

    Returns the bytes consumed. A file that is not a regular file, and an
    unterminated last line, are added to ``unread``.

    ``regular``: the listing saw a regular file (not a symbolic link) there. A file read
    from its start is then opened at once, without a ``stat`` first (a job of 10,000
    attempts is 10,000 small files: open, ``fstat``, one ``pread``, close). Otherwise it is
    ``stat``-ed first, so that a FIFO or device is never opened and a file with nothing
    new is not opened either. It is opened non-blocking whichever way, and read only if
    ``fstat`` says it is a regular file (it may have been replaced since).

    ``lean``: decode as the engine reads (:meth:`JsonlStore.read`).
    """
    offset, lines = cursor.offsets.get(stream, (0, 0))
    if not (regular and offset == 0):
        try:
            st = os.stat(path)
        except FileNotFoundError:  # removed since it was listed, or a link to nothing
            if os.path.islink(path):
                unread.append(Unread("unreadable", path, detail="a symbolic link to nothing"))
            return 0
        except OSError as exc:  # a symbolic link loop, permission denied...: say so
            unread.append(Unread("unreadable", path, detail=exc.strerror or str(exc)))
            return 0
        if not stat.S_ISREG(st.st_mode):
            unread.append(Unread("not_a_file", path, detail=what_is(st.st_mode)))
            return 0
        if st.st_size == offset:
            return 0
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:  # removed since it was listed
        return 0
    except OSError as exc:  # permission denied, I/O error...: say so, never skip silently
        if regular and offset == 0:  # not stat-ed: what is gone since is skipped
            try:
                os.stat(path)
            except FileNotFoundError:
                return 0
            except OSError:
                pass
        unread.append(Unread("unreadable", path, detail=exc.strerror or str(exc)))
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced since it was listed or stat-ed
            unread.append(Unread("not_a_file", path, detail=what_is(st.st_mode)))
            return 0
        if st.st_size < offset:
            # Shorter than what was read of it: cut short (logrotate's copytruncate, `> file`)
            # or replaced by a new file (rotated by renaming). Its lines now are new ones:
            # read from its start, and say so.
            why = f"{offset:,} bytes were read before; it now has {st.st_size:,}"
            unread.append(Unread("rotated", path, lines, offset, detail=why))
            offset = lines = 0
        if st.st_size <= offset:
            return 0
        first = None
        if offset == 0 and st.st_size <= READ_BLOCK:  # read whole, as one block
            first = os.pread(fd, st.st_size, 0)
            coded = _plain_lines(first, path, lean=lean)
            if coded is not None:  # what parse_stream makes of it, without its generality
                whole, columns = coded
                for k in range(0, len(whole), CHUNK_LINES):
                    part = None if columns is None else columns.rows(k, k + CHUNK_LINES)
                    chunks.append(Chunk(path, lines + 1 + k, whole[k : k + CHUNK_LINES], part))
                out.offsets[stream] = (len(first), lines + len(whole))
                return len(first)
        blocks = _read_fd(fd, offset, st.st_size, limit, first)
        parsed = parse_stream(blocks, path, lines, at_start=offset == 0, lean=lean)
    finally:
        os.close(fd)
    chunks.extend(parsed.chunks)
    if parsed.n_bytes:
        out.offsets[stream] = (offset + parsed.n_bytes, lines + parsed.n_lines)
    torn = torn_tail(parsed, path, lines + parsed.n_lines + 1, st.st_mtime)
    if torn is not None:
        unread.append(torn)
    return parsed.n_bytes


def _unlisted(path: str, unread: list[Unread]) -> None:
    """Add to ``unread`` the directory ``path``, which a listing of its job could not list
    (:meth:`JsonlStore.streams`), with why (nothing when it is gone since)."""
    directory = os.path.normpath(path)
    try:
        with os.scandir(directory):
            why = "it could not be listed when the job's files were listed"
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        why = exc.strerror or str(exc)
    unread.append(Unread("unreadable_directory", directory, detail=why))


_SCAN: Final = 64 * 1024  # bytes looked at a time when searching for a newline


def written_end(fd: int, size: int) -> int:
    """Bytes of the file ``fd`` (``size`` bytes long) before its trailing run of NULs
    (:func:`~badput.store._lines.written_length`: the unwritten tail of a mapped file)."""
    if size and os.pread(fd, 1, size - 1) != b"\0":  # the usual file: no NUL tail
        return size
    end = size
    while end > 0:
        n = min(end, 1 << 20)
        block = os.pread(fd, n, end - n)
        kept = len(block.rstrip(b"\0"))
        if kept or len(block) < n:
            return end - n + kept
        end -= n
    return 0


def _after_last_newline(fd: int, lo: int, hi: int) -> int:
    """The offset just after the last ``\n`` of ``[lo, hi)``; ``lo`` when there is none."""
    if hi > lo and os.pread(fd, 1, hi - 1) == b"\n":  # the usual end: a whole line
        return hi
    pos = hi
    while pos > lo:
        n = min(pos - lo, _SCAN)
        i = os.pread(fd, n, pos - n).rfind(b"\n")
        if i >= 0:
            return pos - n + i + 1
        pos -= n
    return lo


def _after_next_newline(fd: int, lo: int, hi: int) -> int | None:
    """The offset just after the first ``\n`` of ``[lo, hi)``, if any."""
    pos = lo
    while pos < hi:
        block = os.pread(fd, min(hi - pos, _SCAN), pos)
        if not block:
            return None
        i = block.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(block)
    return None


def _consumed_to(fd: int, written: int, offset: int, limit: int) -> int:
    """Where one read of a file from ``offset`` with a budget of ``limit`` bytes stops
    consuming: what :func:`_read_file` yields (blocks until ``limit``, then to the end of
    that line), cut after its last ``\n`` as :func:`parse_stream` does."""
    if offset >= written:
        return offset
    reach = _FIRST_BLOCK if offset else READ_BLOCK
    while reach < limit:
        reach += READ_BLOCK
    stop = offset + reach
    if stop >= written:
        end = _after_last_newline(fd, offset, written)
    elif os.pread(fd, 1, stop - 1) == b"\n":
        return stop
    else:
        after = _after_next_newline(fd, stop, written)
        end = after if after is not None else _after_last_newline(fd, offset, stop)
    if end == 0 and written >= len(BOM) and os.pread(fd, len(BOM), 0) == BOM:
        return len(BOM)  # a read from the start consumes a leading BOM, even with no line after
    return end


def _stops(
    paths: Sequence[FilePath],
    max_bytes: int,
    *,
    by_size: bool = False,
    sizes: Sequence[int] | None = None,
) -> list[tuple[int, int]]:
    """Where each of the successive ``read(..., max_bytes=max_bytes)`` of the files
    ``paths`` (in read order, from their start) stops: ``(file index, offset)`` after
    every read but the last. Found from the newline positions, without decoding.

    A read that starts at one of these stops cuts its blocks, lines and chunks exactly
    as the uninterrupted sequence of reads does, so that a parallel reader may start
    one worker at each. It holds for the files as they are now (a file that grows or
    changes meanwhile makes a worker stop elsewhere, which the worker checks).

    ``by_size``: a file that fits in what is left of a read's budget is taken as read whole
    from its size alone, without opening it (one ``stat`` instead of five calls: the plan of
    10,000 attempt files took 0.13 s, then 0.08 s; 0.04 s with their paths as strings).
    That is exact for a file whose writer closed it (it ends with its last line); for one
    that does not (a torn last line, a mapped file's unwritten tail) the stops after it are
    not where the reads stop, which whoever starts a read at them finds out. ``sizes``:
    each file's size as a listing found it (:meth:`JsonlStore.listed`; 0 for one that is
    not a regular file), taken instead of a ``stat`` now.
    """
    stops: list[tuple[int, int]] = []
    i, offset = 0, 0
    fd, written, opened = -1, 0, -1  # the one file open at a time: its index in ``paths``
    try:
        while True:
            budget = max_bytes
            while i < len(paths):
                if by_size and offset == 0 and opened != i:
                    size = _regular_size(paths[i]) if sizes is None else sizes[i]
                    if 0 < size <= budget:
                        budget -= size
                        if budget <= 0:  # this read stops at its end
                            offset = size
                            break
                        i += 1
                        continue
                if opened != i:  # (thousands of files are never all open at once)
                    if fd >= 0:
                        os.close(fd)
                    fd, written, opened = *_open_written(paths[i]), i
                new = offset if fd < 0 else _consumed_to(fd, written, offset, budget)
                budget -= new - offset
                offset = new
                if budget <= 0:
                    break
                i, offset = i + 1, 0
            if i >= len(paths):
                return stops
            stops.append((i, offset))
    finally:
        if fd >= 0:
            os.close(fd)


def _stream_path(prefix: str, stream: str) -> str:
    """The path of stream ``stream`` (``/``-separated) in the job directory ``prefix``
    (ending with a separator)."""
    return prefix + (stream if os.sep == "/" else stream.replace("/", os.sep))


def _regular_size(path: FilePath) -> int:
    """The size of ``path`` when it is a regular file, else 0 (also when it is gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _open_written(path: FilePath) -> tuple[int, int]:
    """``(fd, written bytes)`` of ``path`` opened for reading; ``(-1, 0)`` when it is not a
    regular file or cannot be opened (the reader skips it, and says why)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return -1, 0
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return fd, written_end(fd, st.st_size)
    except OSError:
        pass
    os.close(fd)
    return -1, 0


def _count_newlines(path: FilePath, upto: int, *, start: int = 0) -> int:
    """How many ``\n`` the bytes ``[start, upto)`` of ``path`` hold (lines, from the start).

    Read into one reused buffer and counted there: about 0.4 ms a megabyte in a fresh
    process, where a new mapping of the file cost twice that in page faults (the plan of a
    parallel read counts the lines before every stop before its workers start).
    """
    if upto <= start:
        return 0
    buf = bytearray(min(upto - start, _COUNT_BLOCK))
    n = 0
    with open(path, "rb", buffering=0) as f, memoryview(buf) as whole:
        f.seek(start)
        pos = start
        while pos < upto:
            got = f.readinto(whole[: min(len(buf), upto - pos)])
            if not got:  # the file is shorter than it was: count what there is
                break
            n += buf.count(b"\n", 0, got)
            pos += got
    return n


_COUNT_BLOCK: Final = 8 << 20


def _read_stops(
    files: Sequence[tuple[str, FilePath]],
    max_bytes: int,
    *,
    count_lines: bool = True,
    by_size: bool = False,
    sizes: Sequence[int] | None = None,
) -> list[tuple[str, int, int | None]]:
    """``(stream, offset, lines)`` where each read of ``files`` that uses up its budget
    stops (:func:`_stops`, ``by_size`` and ``sizes`` there), with the lines before that
    offset (a cursor's entry); None for them when not ``count_lines``."""
    out: list[tuple[str, int, int | None]] = []
    done = (-1, 0, 0)  # (file index, offset, lines) of the previous stop
    paths = [path for _, path in files]
    for i, offset in _stops(paths, max_bytes, by_size=by_size, sizes=sizes):
        if not count_lines:
            out.append((files[i][0], offset, None))
            continue
        start, lines = (done[1], done[2]) if done[0] == i else (0, 0)
        lines += _count_newlines(files[i][1], offset, start=start)
        out.append((files[i][0], offset, lines))
        done = (i, offset, lines)
    return out


def has_jsonl_below(directory: str | os.PathLike[str], depth: int = 1) -> bool:
    """Whether a ``.jsonl`` file lies ``depth`` or more levels below ``directory`` (1: in
    it, or in any directory below): what ``os.walk`` finds (symbolic links to directories
    not entered, what cannot be listed skipped).

    Depth first, each sub-directory entered as soon as it is met: a job of 10,000 attempt
    directories is answered from its first one, not after listing all of them (5 ms a
    listing; telling which job a path names listed it four times)."""
    open_dirs: list[tuple[Any, int]] = []  # (os.scandir's iterator, its level)

    def enter(path: str, level: int) -> None:
        with suppress(OSError):  # what cannot be listed is skipped, as os.walk does
            open_dirs.append((os.scandir(path), level))

    enter(os.fspath(directory), 1)
    try:
        while open_dirs:
            entries, level = open_dirs[-1]
            try:
                entry = next(entries, None)
            except OSError:  # the listing failed part way: what os.walk does, skip it
                entry = None
            if entry is None:
                open_dirs.pop()[0].close()
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if not is_dir:
                if level >= depth and entry.name.endswith(".jsonl"):
                    return True
                continue
            try:
                is_link = entry.is_symlink()
            except OSError:
                is_link = False
            if not is_link:
                enter(entry.path, level + 1)
    finally:
        for entries, _ in open_dirs:
            entries.close()
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
        # job -> the streams its last listing saw as regular files (see streams()).
        self._regular: dict[str, frozenset[str]] = {}
        # job -> the spool segments of gone writers its last listing could not ship.
        self._unshipped: dict[str, list[tuple[str, str]]] = {}

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

    def open_spooled_writer(
        self,
        job: str,
        key: WriterKey,
        segment_bytes: int,
        *,
        lock: threading.Lock | None = None,
        max_segments: int = 16,
    ) -> SpooledWriter:
        """A new :class:`~badput.store.SpooledWriter` for ``key``'s stream of ``job`` (the
        recorder's; may raise ``OSError``)."""
        return SpooledWriter(
            self.job_dir(job),
            key.stream_name(),
            segment_bytes,
            lock=lock,
            max_segments=max_segments,
        )

    def ship_orphaned(self, job: str) -> Orphans:
        """Ship into their event files what killed writers of ``job`` left in its spool
        (:func:`~badput.store.ship_orphaned`)."""
        return ship_orphaned(self.job_dir(job))

    def jobs(self) -> list[str]:
        try:
            entries = sorted(os.scandir(self.root), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [e.name for e in entries if e.is_dir() and has_jsonl_below(e.path)]

    def streams(self, job: str) -> list[str]:
        """Stream names of ``job`` (paths relative to its directory, ``/``-separated), sorted.

        What ``os.walk`` would list (symbolic links to directories are not followed),
        built with ``os.scandir`` and string joins: a job of 10,000 attempts has 10,000
        directories. The names the listing saw as regular files (not symbolic links) are
        kept for the reads that go on from it (:func:`_read_path` opens those at once).

        A directory that cannot be listed (permission denied...) is named too, with a
        trailing ``/`` (``./`` for the job's own): its files are not known, and a
        :meth:`read` says so (``Unread("unreadable_directory")``) instead of leaving them
        out in silence. One gone since, or no longer a directory, is not.
        """
        names: list[str] = []
        regular: set[str] = set()
        top = str(self.job_dir(job))
        pending = [(top, "")]
        unshipped: list[tuple[str, str]] = []
        while pending:
            directory, prefix = pending.pop()
            try:
                entries = os.scandir(directory)
            except (FileNotFoundError, NotADirectoryError):  # gone: nothing to list there
                continue
            except OSError:  # not readable: its files are missing, which the read says
                names.append(prefix or "./")
                continue
            with entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if entry.name == SPOOL_DIR and not prefix:
                                # Lines a killed writer left in its spool go to its file
                                # before the file is read (a live writer's are its own).
                                with suppress(Exception):
                                    unshipped = ship_orphaned(top).problems
                                continue
                            pending.append((entry.path, f"{prefix}{entry.name}/"))
                            continue
                    except OSError:
                        pass
                    if not entry.name.endswith(".jsonl"):
                        continue
                    name = prefix + entry.name
                    try:
                        if entry.is_file(follow_symlinks=False):
                            regular.add(name)
                        elif entry.is_symlink() and entry.is_dir():
                            continue  # a link to a directory: os.walk does not enter it
                    except OSError:
                        pass  # what cannot be looked at is listed; its read says why
                    names.append(name)
        names.sort()
        self._regular[job] = frozenset(regular)
        self._unshipped[job] = unshipped
        return names

    def files(self, job: str) -> list[tuple[str, Path]]:
        """``(stream name, path)`` of every file a :meth:`read` of ``job`` goes through, in
        that order (the cursor is keyed by stream name; chunks name the path)."""
        base = self.job_dir(job)
        return [(stream, base / stream) for stream in self.streams(job)]

    def paths(self, job: str, streams: Sequence[str]) -> list[str]:
        """The path of each of ``streams`` of ``job`` as a :meth:`read` opens it and its
        chunks name it (``Chunk.source``): strings, made as a read makes them (a ``Path``
        each cost the plan of a parallel read of 10,000 attempt files 2 µs a file)."""
        prefix = str(self.job_dir(job)) + os.sep
        return [_stream_path(prefix, stream) for stream in streams]

    def read_stops(
        self,
        job: str,
        max_bytes: int,
        files: Sequence[tuple[str, FilePath]] | None = None,
        *,
        count_lines: bool = True,
        by_size: bool = False,
        sizes: Sequence[int] | None = None,
    ) -> list[tuple[str, int, int | None]]:
        """Where the successive ``read(job, cursor, max_bytes=max_bytes)`` of the files as
        they are now stop, found from their newlines without decoding: ``(stream, offset,
        lines)`` after each read that uses up its budget (the cursor's entry of ``stream``).
        ``files``: what :meth:`files` gave, if the caller has it already. Without
        ``count_lines`` the lines are None (counting a 350 MB file takes 0.2 s: a parallel
        read's worker numbers its lines from the stop instead, and the reading process,
        which knows the lines before, moves them; :meth:`count_lines` counts them).

        A read that starts at one of these stops cuts its blocks, lines and chunks exactly
        as the uninterrupted sequence of reads does: a parallel reader starts one there.
        ``by_size``: files that fit a read's budget are taken as read whole from their
        sizes, without being opened (exact for files their writers closed; see
        :func:`_stops`); ``sizes``: theirs as :meth:`listed` found them (with ``files``,
        in their order), not looked at again.
        """
        return _read_stops(
            self.files(job) if files is None else files,
            max_bytes,
            count_lines=count_lines,
            by_size=by_size,
            sizes=sizes,
        )

    def listed(self, job: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The streams of ``job`` in read order (:meth:`streams`) and the size of each file
        as it is now (0 for one that is not a regular file): what the plan of a parallel
        read takes (:meth:`read_stops` with ``sizes``). One ``stat`` a file; ``badput
        report`` has a helper process list a job so while it imports the engine."""
        names = tuple(self.streams(job))
        return names, tuple(map(_regular_size, self.paths(job, names)))

    def count_lines(self, job: str, stream: str, upto: int, *, start: int = 0) -> int:
        """How many lines end in the bytes ``[start, upto)`` of ``stream`` of ``job``."""
        return _count_newlines(self.job_dir(job) / stream, upto, start=start)

    def read(
        self,
        job: str,
        cursor: Cursor | None = None,
        *,
        max_bytes: int | None = None,
        lean: bool = False,
    ) -> ReadResult:
        """See :meth:`EventStore.read`. A cursor whose ``resume`` names ``job`` is read on
        through the streams it lists, without listing the job (:attr:`Cursor.resume`).

        ``lean``: a large block of one writer's lines is decoded as the engine reads it
        (:class:`~badput.events.LeanEvent` s, :attr:`Chunk.rows <badput.events.Chunk.rows>`:
        a third less work a line); its :attr:`~badput.events.Chunk.items` then cost a second
        decode. What :class:`~badput.analysis.LiveJob` asks for; a reader of events leaves
        it off."""
        cursor = cursor or Cursor()
        out = Cursor(dict(cursor.offsets))
        chunks: list[Chunk] = []
        unread: list[Unread] = []
        prefix = str(self.job_dir(job)) + os.sep
        budget = max_bytes
        # Going on after a read that stopped on its budget: the streams it had not finished
        # (a job of 10,000 attempt files is not listed and stat'ed again for every slice).
        resume = cursor.resume
        streams: Sequence[str]
        if resume is not None and resume[0] == job:
            streams = resume[1]
        else:
            streams = self.streams(job)
            unread.extend(
                Unread("unshipped", path, detail=why) for path, why in self._unshipped[job]
            )
        regular = self._regular.get(job, frozenset())
        for k, stream in enumerate(streams):
            if budget is not None and budget <= 0:
                # the last stream read may have more: go on from it
                out.resume = (job, tuple(streams[max(k - 1, 0) :]))
                break
            path = _stream_path(prefix, stream)
            if stream.endswith("/"):  # a directory the listing could not list
                _unlisted(path, unread)
                continue
            used = _read_path(
                path,
                stream,
                cursor,
                out,
                chunks,
                unread,
                limit=budget,
                regular=stream in regular,
                lean=lean,
            )
            if budget is not None:
                budget -= used
        else:
            if streams and budget is not None and budget <= 0:  # the last one may have more
                out.resume = (job, (streams[-1],))
        return ReadResult(chunks, out, unread, reached_end=out.resume is None)


class SingleFileStore:
    """A read-only store over one ``.jsonl`` file, holding the single job ``job``.

    ``read(job)`` returns the file's lines whatever job their events name (the
    file *is* the job); ``read`` of any other job name returns nothing.
    ``open_writer`` raises ``OSError``: a file of events is never appended to by
    a second writer.
    """

    def __init__(self, path: str | os.PathLike[str], job: str | None = None) -> None:
        self.path = Path(path)
        if job is None:
            first = _first_event(self.path)
            job = first.job if first is not None else self.path.stem
        self.job = job

    def __repr__(self) -> str:
        return f"SingleFileStore({str(self.path)!r}, job={self.job!r})"

    @property
    def uri(self) -> str:
        return str(self.path)

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        raise OSError(f"{self.path} is a single event file, opened read-only")

    def jobs(self) -> list[str]:
        return [self.job]

    def files(self, job: str) -> list[tuple[str, Path]]:
        """``(stream name, path)`` of the file a :meth:`read` of ``job`` goes through."""
        return [(self.path.name, self.path)] if job == self.job else []

    def read_stops(
        self,
        job: str,
        max_bytes: int,
        files: Sequence[tuple[str, FilePath]] | None = None,
        *,
        count_lines: bool = True,
        by_size: bool = False,
        sizes: Sequence[int] | None = None,
    ) -> list[tuple[str, int, int | None]]:
        """See :meth:`JsonlStore.read_stops`."""
        return _read_stops(
            self.files(job) if files is None else files,
            max_bytes,
            count_lines=count_lines,
            by_size=by_size,
            sizes=sizes,
        )

    def count_lines(self, job: str, stream: str, upto: int, *, start: int = 0) -> int:
        """See :meth:`JsonlStore.count_lines`."""
        if job != self.job or stream != self.path.name:
            raise ValueError(f"{self.path} holds stream {self.path.name!r} of job {self.job!r}")
        return _count_newlines(self.path, upto, start=start)

    def read(
        self,
        job: str,
        cursor: Cursor | None = None,
        *,
        max_bytes: int | None = None,
        lean: bool = False,
    ) -> ReadResult:
        """See :meth:`EventStore.read`; ``lean`` as :meth:`JsonlStore.read`."""
        cursor = cursor or Cursor()
        out = Cursor(dict(cursor.offsets))
        chunks: list[Chunk] = []
        unread: list[Unread] = []
        used = 0
        if job == self.job:
            used = _read_path(
                str(self.path),
                self.path.name,
                cursor,
                out,
                chunks,
                unread,
                limit=max_bytes,
                lean=lean,
            )
        # a read that used up its budget may have stopped before the end
        return ReadResult(chunks, out, unread, reached_end=max_bytes is None or used < max_bytes)


_FIRST_LINE_MAX: Final = 1 << 20


def _first_event(path: Path, max_lines: int = 1000) -> Event | None:
    """The first valid event among the first lines of ``path``."""
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
                    return item
    except OSError:
        return None
    return None


def first_event_below(directory: Path) -> tuple[str, Event] | None:
    """``(relative stream path, event)`` of the first decodable event below ``directory``."""
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for f in sorted(filenames):
            if f.endswith(".jsonl"):
                path = Path(dirpath) / f
                event = _first_event(path)
                if event is not None:
                    return os.path.relpath(path, directory).replace(os.sep, "/"), event
    return None


def first_event_of(path: Path) -> Event | None:
    """The first decodable event among the first lines of the file ``path``."""
    return _first_event(path)


def first_job_below(directory: Path) -> tuple[str, str] | None:
    """``(relative stream path, job)`` of the first decodable event below ``directory``."""
    first = first_event_below(directory)
    return None if first is None else (first[0], first[1].job)
