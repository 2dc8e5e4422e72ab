"""Reading the files of a JSON-lines store (:mod:`badput.store._jsonl`): one file's new
lines from a cursor (:func:`_read_path`, in blocks that end with a line), where its written
part ends (:func:`written_end`), and where the reads of a parallel plan stop
(:func:`_read_stops`) with the lines before them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from typing import Final, TypeAlias

from badput.events import DecodedColumns, Event, EventError, LeanRows
from badput.formats.codec import decode_block_coded
from badput.store._base import Chunk, Cursor, Unread
from badput.store._lines import (
    BOM,
    CHUNK_LINES,
    MAX_LINE_BYTES,
    keep_parsed,
    parse_stream,
    written_length,
)

__all__ = ["READ_BLOCK", "FilePath", "what_is", "written_end"]

#: A file as ``os`` functions take it (the plan of a parallel read passes strings:
#: :meth:`JsonlStore.paths`).
FilePath: TypeAlias = "str | os.PathLike[str]"

#: Bytes read from a file at a time: a reader's slice (``max_bytes``) is one block or more. Past
#: 1 MiB, larger blocks are slower to decode (their event objects no longer reuse the memory
#: of the last block's; see ``badput.analysis.READ_SLICE_BYTES``).
READ_BLOCK: Final = 1024 * 1024
_FIRST_BLOCK: Final = 64 * 1024


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


def _open_new(path: str, offset: int, regular: bool, unread: list[Unread]) -> int | None:
    """The file ``path`` opened (non-blocking) to read on from ``offset``; None when there
    is nothing to read (gone, nothing new, not a regular file, unreadable: the last two
    added to ``unread``). Not ``stat``-ed first when ``regular`` and read from its start
    (see :func:`_read_path`)."""
    if not (regular and offset == 0):
        try:
            st = os.stat(path)
        except FileNotFoundError:  # removed since it was listed, or a link to nothing
            if os.path.islink(path):
                unread.append(Unread("unreadable", path, detail="a symbolic link to nothing"))
            return None
        except OSError as exc:  # a symbolic link loop, permission denied...: say so
            unread.append(Unread("unreadable", path, detail=exc.strerror or str(exc)))
            return None
        if not stat.S_ISREG(st.st_mode):
            unread.append(Unread("not_a_file", path, detail=what_is(st.st_mode)))
            return None
        if st.st_size == offset:
            return None
    try:
        return os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:  # removed since it was listed
        return None
    except OSError as exc:  # permission denied, I/O error...: say so, never skip silently
        if regular and offset == 0:  # not stat-ed: what is gone since is skipped
            try:
                os.stat(path)
            except FileNotFoundError:
                return None
            except OSError:
                pass
        unread.append(Unread("unreadable", path, detail=exc.strerror or str(exc)))
        return None


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
    fd = _open_new(path, offset, regular, unread)
    if fd is None:
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
    keep_parsed(
        parsed,
        stream,
        path,
        offset,
        lines,
        out=out,
        chunks=chunks,
        unread=unread,
        modified=st.st_mtime,
    )
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
