"""The recorder's write path on a directory store: a mapped spool shipped to the event file.

A ``record_*`` call copies its line into a **spool segment**: a small, pre-allocated,
memory-mapped file in the job's hidden ``.spool/`` directory. Once copied, the line is
in the kernel's page cache and outlives the process (``SIGKILL`` included). The
recorder's background thread **ships** the spooled lines to the event file
(``<job>/<attempt>/<host>-<rank>-<pid>.jsonl``) with ``write()``, whole lines at a time,
and deletes each segment once it is shipped. Why not map the event file itself, as
badput did before:

- **Readers never see half a line.** A copy into a mapping is not ordered: a reader in
  another process could see a line's ``\\n`` before its other bytes (``...\\0\\0...}\\n``).
  ``write()`` makes the bytes visible before the file's new size.
- **The event file can be truncated, rotated or deleted from outside** (``> *.jsonl``,
  logrotate's ``copytruncate``) without a ``SIGBUS`` in the training process: it is never
  mapped. The shipper sees the new size, counts the events that were cut away, and goes on.
- **Resident memory is bounded.** Only the segments not yet shipped are mapped (a few MiB),
  whatever the length of the job.

A segment starts with a header page naming the event file it belongs to (relative to the
job directory) and the offset in that file where its first byte goes: the event file's
size then tells how much of the segment was shipped. A writer holds an exclusive
``flock`` on each of its segments; a segment whose lock is free belongs to a process that
is gone, and :func:`ship_orphaned` ships what it holds (the launcher, the next recorder of
the job and readers of the job call it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import mmap
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final, NamedTuple

import msgspec

__all__ = [
    "SPOOL_DIR",
    "Orphans",
    "SpoolSegment",
    "SpooledWriter",
    "create_event_file",
    "ship_orphaned",
]

#: The hidden directory of a job's spool segments (beside its attempt directories).
SPOOL_DIR: Final = ".spool"
#: Bytes of a segment before its data: the header (one page).
HEADER: Final = 4096
_MAGIC: Final = b"badput-spool 1\n"
_SUFFIX: Final = ".spool"
#: Times a segment is made again when its directory vanished while it was made.
_MAKE_TRIES: Final = 3
_MAKING: Final = ".making"  # a segment being made: never looked at by recovery
#: Bytes written to the event file per ``write()`` call.
_SHIP_BLOCK: Final = 4 * 1024 * 1024
_READ_BLOCK: Final = 1024 * 1024

# madvise(MADV_POPULATE_WRITE) (Linux 5.14+; not named by Python 3.11's mmap module).
_MADV_POPULATE_WRITE: Final = getattr(mmap, "MADV_POPULATE_WRITE", 23)


class _Header(msgspec.Struct):
    target: str
    start: int


def _madvise_unlocked(mm: mmap.mmap, start: int, length: int) -> bool:
    """``MADV_POPULATE_WRITE`` through libc, which releases the GIL while the kernel
    faults the pages in (``mmap.madvise`` holds it, stalling every other thread).
    False when libc cannot be called. The caller keeps the mapping from being
    closed meanwhile."""
    import ctypes  # noqa: PLC0415 (only a writer needs it; keeps `import badput` light)

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        view = ctypes.c_char.from_buffer(mm)
    except (OSError, TypeError, ValueError, AttributeError):
        return False
    address = ctypes.addressof(view)
    del view  # no buffer export left: the mapping may be closed later
    page = mmap.PAGESIZE
    aligned = start - start % page
    rc = libc.madvise(
        ctypes.c_void_p(address + aligned),
        ctypes.c_size_t(length + start - aligned),
        ctypes.c_int(_MADV_POPULATE_WRITE),
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return True


def create_event_file(directory: Path, name: str) -> tuple[Path, int]:
    """Create ``directory/name`` new (``O_EXCL``), or ``<stem>.1.jsonl`` etc. when taken (a
    file left by an earlier process of the same pid is never appended to): its path and an
    ``O_APPEND`` descriptor."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = name.removesuffix(".jsonl")
    # Read too: a writer copies its file when it is replaced, counts lines when it is cut.
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for n in range(1000):
        path = directory / (name if n == 0 else f"{stem}.{n}.jsonl")
        try:
            return path, os.open(path, flags, 0o644)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free event file name like {directory / name}")


def made_segment(spool: Path, token: str, seq: int, capacity: int) -> SpoolSegment:
    """A new :class:`SpoolSegment`, made again when the job's directory was deleted from
    outside while it was made (its directory made, then gone before the file was named):
    as the event file is made again; only what persists is said ("deleted or replaced")."""
    for tries in range(_MAKE_TRIES):
        try:
            return SpoolSegment(spool, token, seq, capacity)
        except FileNotFoundError:
            if tries == _MAKE_TRIES - 1:
                raise
    raise AssertionError("unreachable")  # (the loop returns or raises)


class SpoolSegment:
    """One mapped segment of a writer's spool (see the module doc).

    Lines are copied into :attr:`mm` from :data:`HEADER` on. :meth:`seal` ends the
    segment: no write can land in it afterwards, and :attr:`end` is its data length.
    """

    def __init__(self, spool: Path, token: str, seq: int, capacity: int) -> None:
        spool.mkdir(parents=True, exist_ok=True)
        self.path = spool / f"{token}-{seq:08d}{_SUFFIX}"
        making = spool / f"{token}-{seq:08d}{_MAKING}"
        fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0))
        try:
            # Locked before it has its name: recovery never takes a live writer's segment.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Allocation is where a full disk shows up: never as a SIGBUS while writing.
            os.posix_fallocate(fd, 0, HEADER + capacity)
            self.mm = mmap.mmap(fd, HEADER + capacity)
            os.rename(making, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(making)
            raise
        self.fd = fd
        self.seq = seq
        self.capacity = capacity
        self.mm.seek(HEADER)
        self.start = 0  # offset in the event file of this segment's first byte
        self.base = 0  # bytes of the spool before this segment (across segments)
        self.shipped = 0  # bytes of this segment in the event file
        self.end: int | None = None  # its length once sealed
        self.lines = 0  # complete lines counted so far (see count_lines)
        self._counted = 0
        self.populated = 0  # data bytes whose pages are writable already
        self.can_populate = True

    def write_header(self, target: str, start: int) -> None:
        """Say which event file this segment's lines go to, from which offset (rewritten
        when the event file changes under the writer)."""
        self.start = start
        text = _MAGIC + msgspec.json.encode(_Header(target, start)) + b"\n"
        self.mm[: len(text)] = text
        self.mm[len(text) : len(text) + 1] = b"\0"

    def written(self) -> int:
        """Bytes of lines in this segment so far."""
        return self.end if self.end is not None else self.mm.tell() - HEADER

    def data(self, lo: int, hi: int) -> bytes:
        return self.mm[HEADER + lo : HEADER + hi]

    def seal(self) -> int:
        """End the segment: a write racing this one lands before or raises; then its length.

        The position is moved to the end of the mapping first (one C call: no thread runs
        between), then the written part is found as the bytes before the first NUL after the
        last position known (lines never hold a NUL: JSON escapes it)."""
        if self.end is None:
            known = self.mm.tell()
            self.mm.seek(len(self.mm))
            cut = self.mm.find(b"\0", known)
            self.end = (len(self.mm) if cut < 0 else cut) - HEADER
        return self.end

    def populate(self, upto: int) -> None:
        """Map the pages up to data byte ``upto`` writable now (``MADV_POPULATE_WRITE``), so
        that the writer's copies take no page fault. Changes no byte; a no-op where
        unsupported."""
        upto = min(upto, self.capacity)
        start = self.populated
        if upto <= start or not self.can_populate:
            return
        try:
            if not _madvise_unlocked(self.mm, HEADER + start, upto - start):
                self.mm.madvise(_MADV_POPULATE_WRITE, HEADER + start, upto - start)
        except (OSError, ValueError):
            self.can_populate = False  # kernel older than 5.14: pages fault on first write
        else:
            self.populated = upto

    def count_lines(self) -> int:
        """Complete lines written so far (counted incrementally)."""
        upto = HEADER + self.written()
        if upto > HEADER + self._counted:
            self.lines += self.mm[HEADER + self._counted : upto].count(b"\n")
            self._counted = upto - HEADER
        return self.lines

    def unlinked(self) -> bool:
        """True when the segment's file is gone from its directory (the job was deleted)."""
        try:
            return os.fstat(self.fd).st_nlink == 0
        except OSError:
            return True

    def close(self, *, remove: bool) -> None:
        """Unmap and close; ``remove``: delete the file (everything in it was shipped)."""
        try:
            self.mm.close()
            if remove:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
        finally:
            os.close(self.fd)  # releases the lock


class ShipResult(NamedTuple):
    """What one :meth:`SpooledWriter.ship` did, for the recorder's warnings."""

    #: Lines shipped.
    lines: int
    #: The event file the lines went to before it was deleted or replaced (None: it was not).
    replaced: Path | None
    #: Events cut away from the event file by a truncation from outside (0: none).
    cut: int


class SpooledWriter:
    """One process's stream on a directory store: the event file and its spool.

    Made by :meth:`badput.store.JsonlStore.open_spooled_writer`. The recorder copies
    lines into ``current.mm`` (its ``write`` is the hot path), calls :meth:`rotate`
    when a line does not fit, and has its background thread call :meth:`ship`.
    """

    def __init__(
        self,
        job_dir: Path,
        stream: str,
        segment_bytes: int,
        *,
        lock: threading.Lock | None = None,
        max_segments: int = 16,
    ) -> None:
        *dirs, name = stream.split("/")
        #: Held by whoever rotates (the recorder's lock): :meth:`ship` takes it to see the
        #: segments and their ends, never while it writes.
        self.lock = lock if lock is not None else threading.Lock()
        self.job_dir = job_dir
        self.spool = job_dir / SPOOL_DIR
        self.segment_bytes = segment_bytes
        self.max_segments = max_segments
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        # Unique numbers, taken by the training thread and the background thread alike
        # (next() of a count is one C call). They name segments, not their order: a header's
        # offset does (see ship_orphaned).
        self._numbers = itertools.count(1)
        first = made_segment(self.spool, self.token, 0, segment_bytes)
        try:
            self.path, self.fd = create_event_file(job_dir.joinpath(*dirs), name)
        except BaseException:
            first.close(remove=True)
            raise
        self._identity = _identity(self.fd)
        self.size = 0  # the event file's size as this writer made it
        self.lines_in_file = 0  # lines this writer put in it (and still there)
        self.cut = 0  # events cut away by truncations from outside
        self.replaced = 0  # times the event file was deleted or replaced (and made anew)
        self._lines_closed = 0  # lines of segments shipped and deleted
        first.write_header(self.target, 0)
        self.segments: list[SpoolSegment] = [first]
        self.current = first
        self._spare: SpoolSegment | None = None

    @property
    def target(self) -> str:
        return self.path.relative_to(self.job_dir).as_posix()

    # ---------------------------------------------------------- writing side

    def rotate(self, need: int) -> SpoolSegment:
        """Seal the current segment and start the next (big enough for ``need`` bytes).
        Raises ``OSError`` when it cannot be made (full disk, too many not shipped)."""
        if len(self.segments) >= self.max_segments:
            raise OSError(errno.ENOSPC, f"{len(self.segments)} spool segments not shipped yet")
        old = self.current
        spare, self._spare = self._spare, None
        if spare is None or spare.capacity < need:
            if spare is not None:
                spare.close(remove=True)
            spare = self._new_segment(max(self.segment_bytes, need))
        end = old.seal()  # only now: when no segment can be made, the current one goes on
        spare.base = old.base + end
        spare.write_header(self.target, old.start + end)
        self.segments.append(spare)
        self.current = spare
        return spare

    def prepare(self) -> None:
        """Make the next segment ahead of time (the background thread), all its pages
        writable, so that a rotation on the training thread does no file system work and its
        copies take no page fault. A no-op while one is ready."""
        if self._spare is None:
            spare = self._new_segment(self.segment_bytes)
            spare.populate(spare.capacity)  # (madvise through libc: the GIL is released)
            self._spare = spare

    def _new_segment(self, capacity: int) -> SpoolSegment:
        seg = made_segment(self.spool, self.token, next(self._numbers), capacity)
        seg.populate(min(capacity, 256 * 1024))
        return seg

    def recorded_bytes(self) -> int:
        """Bytes copied into the spool so far (all segments)."""
        cur = self.current
        return cur.base + cur.written()

    def shipped_bytes(self) -> int:
        """Bytes of the spool in the event file so far."""
        first = self.segments[0]
        return first.base + first.shipped

    def count_lines(self) -> int:
        """Lines copied into the spool so far (the caller holds :attr:`lock`)."""
        return sum(seg.count_lines() for seg in self.segments) + self._lines_closed

    # ---------------------------------------------------------- shipping side

    def ship(self) -> ShipResult:
        """Write what the spool holds beyond the event file's end into it, and delete the
        segments shipped. Checks the event file first: deleted or replaced, a new one is
        made with everything the old one held; cut short, the lines cut are counted.
        Raises ``OSError`` when the file cannot be written (the spool keeps the lines)."""
        with self.lock:  # the event file's checks, and the segments' ends: no rotation meanwhile
            replaced = self._check_replaced()
            cut = self._check_size()
            plan = [(seg, seg.written()) for seg in self.segments]
        lines = 0
        for seg, end in plan:
            while seg.shipped < end:
                chunk = _whole_lines(seg.data(seg.shipped, min(end, seg.shipped + _SHIP_BLOCK)))
                if not chunk:  # one line longer than a block: up to its end
                    chunk = _whole_lines(seg.data(seg.shipped, end))
                try:
                    n = _append_lines(self.fd, chunk)
                except OSError as exc:
                    n = exc.badput_written  # type: ignore[attr-defined]
                    raise
                finally:
                    seg.shipped += n
                    self.size += n
                    k = chunk.count(b"\n", 0, n)
                    lines += k
                    self.lines_in_file += k
            if seg.end is not None and seg.shipped >= seg.end and seg is not self.current:
                with self.lock:
                    self._lines_closed += seg.count_lines()
                    self.segments.remove(seg)
                seg.close(remove=True)
        return ShipResult(lines, replaced, cut)

    def _check_replaced(self) -> Path | None:
        """A new event file when ours is no longer at its path; the old path, or None."""
        try:
            st = os.stat(self.path)
            here = (st.st_dev, st.st_ino) == self._identity
        except OSError:
            here = False
        if here:
            return None
        old_path, old_fd = self.path, self.fd
        *dirs, name = self.target.split("/")
        new_path, new_fd = create_event_file(self.job_dir.joinpath(*dirs), name)
        try:
            copied = _copy_file(old_fd, new_fd)
        except BaseException:
            os.close(new_fd)
            with contextlib.suppress(OSError):
                os.unlink(new_path)
            raise
        os.close(old_fd)
        self.path, self.fd, self._identity = new_path, new_fd, _identity(new_fd)
        self.replaced += 1
        self._shift(copied - self.size)
        # The job directory may have gone with its spool: new segments are made in a new one.
        if self.current.unlinked() and len(self.segments) < self.max_segments:
            with contextlib.suppress(OSError):
                self.rotate(0)
        return old_path

    def _check_size(self) -> int:
        """Events cut away since the last look when the event file is not the size this
        writer made it (truncated, or written to by someone else): counted, and the spool's
        offsets moved so that recovery ships from the right byte."""
        size = os.fstat(self.fd).st_size
        if size == self.size:
            return 0
        remaining = _count_newlines(self.fd, size)
        cut = max(self.lines_in_file - remaining, 0) if size < self.size else 0
        self.lines_in_file = remaining
        self.cut += cut
        self._shift(size - self.size)
        return cut

    def _shift(self, delta: int) -> None:
        """The event file is ``delta`` bytes longer than this writer made it: every
        segment's bytes go ``delta`` further on (headers rewritten)."""
        self.size += delta
        if delta:
            for seg in self.segments:
                seg.write_header(self.target, seg.start + delta)

    # --------------------------------------------------------------- ending

    def close(self) -> bool:
        """Ship what is left, delete the spool's segments and close. False (and the
        segments left for :func:`ship_orphaned`) when the event file cannot take them;
        raises nothing."""
        try:
            with self.lock:
                self.current.seal()
            self.ship()
            shipped = all(seg.shipped >= (seg.end or 0) for seg in self.segments)
        except OSError:
            shipped = False
        for seg in self.segments:
            if shipped:
                self._lines_closed += seg.count_lines()
            with contextlib.suppress(OSError):
                seg.close(remove=shipped)
        if shipped:
            self.segments = []
        if self._spare is not None:
            with contextlib.suppress(OSError):
                self._spare.close(remove=True)
            self._spare = None
        with contextlib.suppress(OSError):
            os.close(self.fd)
        if shipped:
            with contextlib.suppress(OSError):
                self.spool.rmdir()  # only when empty: other writers' segments stay
        return shipped

    def forget(self) -> None:
        """In a forked child: let go of the parent's mappings and files (never write,
        remove or unlock them: the parent's flocks are its own)."""
        for seg in [*self.segments, *([self._spare] if self._spare else [])]:
            with contextlib.suppress(Exception):
                seg.mm.close()
                os.close(seg.fd)
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _whole_lines(data: bytes) -> bytes:
    """``data`` up to the end of its last line (all of it when it ends with one)."""
    if not data or data[-1] == 10:
        return data
    return data[: data.rfind(b"\n") + 1]


def _append_lines(fd: int, data: bytes) -> int:
    """Append ``data`` (whole lines) to ``fd``, all of it; its length.

    A write that fails part-way (a full disk) leaves no part of a line in the file: the file
    is cut back to the end of the last whole line written, and the ``OSError`` raised says
    how many bytes stay (``badput_written``). The rest waits in the spool: a reader never
    takes an event that is still on its way for one that was lost."""
    view = memoryview(data)
    done = 0
    try:
        while done < len(data):
            done += os.write(fd, view[done:])
    except OSError as exc:
        keep = data.rfind(b"\n", 0, done) + 1
        if keep < done:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, os.fstat(fd).st_size - (done - keep))
        exc.badput_written = keep  # type: ignore[attr-defined]
        raise
    return done


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _copy_file(src: int, dst: int) -> int:
    """Append all of ``src`` to ``dst``; the bytes copied."""
    done = 0
    while True:
        block = os.pread(src, _READ_BLOCK, done)
        if not block:
            return done
        view = memoryview(block)
        while view:
            n = os.write(dst, view)
            view = view[n:]
        done += len(block)


def _count_newlines(fd: int, upto: int) -> int:
    count = offset = 0
    while offset < upto:
        block = os.pread(fd, min(_READ_BLOCK, upto - offset), offset)
        if not block:
            break
        count += block.count(b"\n")
        offset += len(block)
    return count


# ------------------------------------------------------------------ recovery


class Orphans(NamedTuple):
    """What :func:`ship_orphaned` did."""

    #: Segments of gone writers shipped and deleted.
    segments: int
    #: Bytes they added to event files.
    shipped: int
    #: ``(path, why)`` of segments that could not be shipped (left in place).
    problems: list[tuple[str, str]]


def _safe_target(job_dir: Path, target: str) -> Path | None:
    """The event file a header names, when it is a ``.jsonl`` file inside ``job_dir``
    (a header is data: never a path outside the job)."""
    parts = target.split("/")
    if (
        not target.endswith(".jsonl")
        or target.startswith("/")
        or any(p in ("", ".", "..") or "\0" in p or "\\" in p for p in parts)
    ):
        return None
    path = job_dir.joinpath(*parts)
    # Nor through a symbolic link out of the job directory.
    inside = os.path.realpath(job_dir) + os.sep
    return path if os.path.realpath(path).startswith(inside) else None


def ship_orphaned(
    job_dir: str | os.PathLike[str], *, on_problem: Callable[[str, str], None] | None = None
) -> Orphans:
    """Ship the spool segments of writers that are gone (killed: their lock is free) into
    their event files, each writer's in the order of their place in its event file (their
    headers' offsets: a segment made ahead of time may have a lower number than one made
    since), and delete them. A writer with one segment still locked is alive: its segments
    are left alone. Never raises for what it finds; ``problems`` says what it left."""
    spool = Path(job_dir) / SPOOL_DIR
    try:
        names = sorted(os.listdir(spool))
    except OSError:
        return Orphans(0, 0, [])
    writers: dict[str, list[str]] = {}
    for name in names:
        if name.endswith((_SUFFIX, _MAKING)):
            writers.setdefault(name.rsplit("-", 1)[0], []).append(name)
    segments = shipped = unused = 0
    problems: list[tuple[str, str]] = []
    for group in writers.values():
        done, bytes_shipped, dropped = _ship_writer(
            Path(job_dir), [spool / n for n in group], problems
        )
        segments += done
        shipped += bytes_shipped
        unused += dropped
    for path_text, why in problems:
        if on_problem is not None:
            on_problem(path_text, why)
    if segments or unused:
        with contextlib.suppress(OSError):
            spool.rmdir()
    return Orphans(segments, shipped, problems)


def _ship_writer(
    job_dir: Path, paths: list[Path], problems: list[tuple[str, str]]
) -> tuple[int, int, int]:
    """Ship one writer's segments when it is gone (every lock taken): (segments shipped,
    bytes, segments never used and removed)."""
    held: list[tuple[Path, int]] = []
    try:
        for path in paths:
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                continue
            except OSError as exc:
                problems.append((str(path), exc.strerror or str(exc)))
                return 0, 0, 0
            held.append((path, fd))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0, 0, 0  # alive
        placed: list[tuple[int, int, Path, int, _Header]] = []
        unused = 0
        for k, (path, fd) in enumerate(held):
            if os.fstat(fd).st_nlink == 0:
                continue  # shipped by another reader meanwhile
            try:
                header = None if path.name.endswith(_MAKING) else _read_header(fd)
            except (OSError, ValueError) as exc:
                problems.append((str(path), _why(exc)))
                continue
            if header is None:  # never used (made ahead, or being made at the kill)
                os.unlink(path)
                unused += 1
                continue
            placed.append((header.start, k, path, fd, header))
        shipped = removed = 0
        for _start, _k, path, fd, header in sorted(placed, key=lambda x: (x[0], x[1])):
            try:
                shipped += _ship_one(job_dir, fd, header)
                os.unlink(path)
                removed += 1
            except (OSError, ValueError) as exc:
                problems.append((str(path), _why(exc)))
                break  # the later ones go after it: left for a later try
        return removed, shipped, unused
    finally:
        for _path, fd in held:
            os.close(fd)


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _read_header(fd: int) -> _Header | None:
    """A segment's header; None for one never used (all NUL). ``ValueError`` for a file
    that is not a spool segment."""
    head = os.pread(fd, HEADER, 0)
    if not head.startswith(_MAGIC):
        if head.strip(b"\0"):
            raise ValueError("not a badput spool segment")
        return None
    line = head[len(_MAGIC) :].split(b"\n", 1)[0]
    try:
        return msgspec.json.decode(line, type=_Header)
    except msgspec.DecodeError as exc:
        raise ValueError(f"its header cannot be read: {exc}") from None


def _ship_one(job_dir: Path, fd: int, header: _Header) -> int:
    """Ship one gone writer's segment (``fd``, locked, with its ``header``); the bytes added."""
    target = _safe_target(job_dir, header.target)
    if target is None:
        raise ValueError(f"its header names {header.target!r}, not an event file of the job")
    size = os.fstat(fd).st_size
    data = b""
    offset = HEADER
    while offset < size:
        block = os.pread(fd, min(_READ_BLOCK, size - offset), offset)
        if not block:
            break
        cut = block.find(b"\0")
        data += block if cut < 0 else block[:cut]
        if cut >= 0:
            break
        offset += len(block)
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    out = os.open(target, flags, 0o644)
    try:
        already = min(max(os.fstat(out).st_size - header.start, 0), len(data))
        rest = data[already:]
        whole = _whole_lines(rest)
        n = _append_lines(out, whole)
        if len(whole) < len(rest):  # a line being copied at the kill (never acknowledged):
            n += os.write(out, rest[len(whole) :])  # kept, torn, as readers report it
        return n
    finally:
        os.close(out)
