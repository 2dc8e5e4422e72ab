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
wrote before 0.1 and other tools that map their files leave). How a file is read:
:mod:`badput.store._reading`.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, BinaryIO, Final

from badput.events import Event
from badput.formats.codec import decode_lines
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
)
from badput.store._reading import (
    FilePath,
    _count_newlines,
    _read_path,
    _read_stops,
    _regular_size,
    _stream_path,
    _unlisted,
)
from badput.store._spool import SPOOL_DIR, Orphans, SpooledWriter, ship_orphaned

__all__ = [
    "ARCHIVE_NAME",
    "JsonlStore",
    "JsonlWriter",
    "SingleFileStore",
    "first_event_below",
    "first_event_of",
    "first_job_below",
    "has_jsonl_below",
    "open_regular",
    "safe_job_dir",
]


#: The columnar archive of a job kept in a directory (``badput compact``; store/_archive.py).
ARCHIVE_NAME: Final = "badput-archive.parquet"


def safe_job_dir(job: str) -> str:
    """The directory name of ``job``: separators, ``.``/``..``, controls, length made harmless."""
    return safe_name(job)


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


def _holds_a_job(path: str) -> bool:
    """Whether the directory ``path`` is a job's: event files below it, or its archive."""
    return has_jsonl_below(path) or os.path.isfile(os.path.join(path, ARCHIVE_NAME))


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
        return [e.name for e in entries if e.is_dir() and _holds_a_job(e.path)]

    def holds_job_dir(self, name: str) -> bool:
        """Whether :meth:`jobs` lists ``name``, without listing the others (a fleet of
        10,000 jobs opens each by name: a listing each would be 10,000 x 10,000)."""
        seps = {"/", os.sep, os.altsep or "/", "\0"}
        if not name or name in {".", ".."} or any(c in name for c in seps):
            return False
        path = os.path.join(self.root, name)
        return os.path.isdir(path) and _holds_a_job(path)

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
