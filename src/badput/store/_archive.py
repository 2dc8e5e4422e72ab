"""A job's columnar archive: its lines as Parquet beside (or instead of) its JSON lines.

``compact`` reads a job as every reader does and writes each line the read gave (its
event, or why it is not one) as a row of :mod:`badput.formats.archive`, with what the
archive covers of each file (bytes and lines) in its metadata. :class:`ArchivedStore`
reads a job so: the archive's rows first, then each file from where the archive stops
(a job that goes on after compaction), as the store's own read would from a cursor
there. The archive is ``<job dir>/badput-archive.parquet`` of a directory of files, or
``<name>.archive.parquet`` beside a single ``<name>.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from badput.events import Chunk
from badput.formats.codec import decoding_for_columns
from badput.store._base import Cursor, EventStore, EventWriter, ReadResult, Unread, WriterKey
from badput.store._jsonl import ARCHIVE_NAME, JsonlStore, SingleFileStore

__all__ = ["ArchivedStore", "Compacted", "archive_of", "compact", "with_archive"]

#: The cursor's entry of the archive: (row groups read, 0).
_KEY: Final = "\0archive"
#: Bytes of JSON lines read per slice while compacting (each slice: a few row groups).
_SLICE_BYTES: Final = 16 * 1024 * 1024
_ROW_GROUP: Final = 262_144
_SINGLE_SUFFIX: Final = ".archive.parquet"
#: The columns kept as a dictionary (of a few values): an integer or a time as one costs
#: more to write and takes twice the space (the 4 M-event data-load job: 3.9 MB, not 7.6).
_DICTIONARY: Final = ["stream", "kind", "job", "attempt", "host", "name", "status", "device"]

Files = JsonlStore | SingleFileStore


def _columns() -> Any:
    """:mod:`badput.formats.archive`, imported when an archive is read or written (numpy
    and pyarrow with it: a listing of a job imports neither)."""
    from badput.formats import archive  # noqa: PLC0415

    return archive


def archive_of(store: EventStore, job: str) -> Path | None:
    """Where ``job``'s archive is (or would be) kept in ``store``; None for a store that
    is not of files."""
    if isinstance(store, ArchivedStore):
        return store.path
    if isinstance(store, JsonlStore):
        return store.job_dir(job) / ARCHIVE_NAME
    if isinstance(store, SingleFileStore):
        return store.path.with_name(store.path.name.removesuffix(".jsonl") + _SINGLE_SUFFIX)
    return None


def is_archive(path: Path) -> bool:
    """Whether ``path`` is a file (an archive where one is kept); False when it cannot be
    looked at (a directory without permission: its readers say so, naming what they read)."""
    try:
        return path.is_file()
    except OSError:
        return False


def with_archive(store: EventStore, job: str) -> EventStore:
    """``store``, read through ``job``'s archive when it has one."""
    if isinstance(store, (JsonlStore, SingleFileStore)):
        path = archive_of(store, job)
        if path is not None and is_archive(path):
            return ArchivedStore(store, job, path)
    return store


def read_meta(path: Path) -> dict[str, Any]:
    """The archive's own metadata (:func:`compact` wrote it)."""
    pq = _columns().arrow_parquet()
    meta = pq.read_metadata(path).metadata or {}
    raw = meta.get(_columns().METADATA_KEY)
    if raw is None:
        raise ValueError(f"{path}: not a badput archive (no {_columns().METADATA_KEY.decode()!r})")
    out: dict[str, Any] = json.loads(raw)
    if out.get("version") != _columns().ARCHIVE_VERSION:
        raise ValueError(f"{path}: archive version {out.get('version')!r} is not supported")
    return out


class ArchivedStore:
    """A store of files read through one job's archive: its rows, then what the files hold
    after what the archive covers. Writers write to the store's files as before."""

    def __init__(self, inner: Files, job: str, path: Path) -> None:
        self.inner = inner
        self.job = job
        self.path = path
        self._meta: dict[str, Any] | None = None
        self._file: _RowGroups | None = None
        # A read from the start: the files' chunks after the archive (by file), held until
        # the archive's rows of the files before them are read, and that read of the files.
        self._tails: tuple[dict[str, list[Chunk]], ReadResult] | None = None

    def __repr__(self) -> str:
        return f"ArchivedStore({self.inner!r}, {self.job!r})"

    @property
    def uri(self) -> str:
        return self.inner.uri

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        return self.inner.open_writer(job, key)

    def jobs(self) -> list[str]:
        return self.inner.jobs()

    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            self._meta = read_meta(self.path)
        return self._meta

    def identity(self) -> str:
        """What the archive holds, read without pyarrow: its path, its size and a digest of
        its Parquet footer (every row group's place and size, and badput's metadata: what
        it covers of each file). Raises OSError (ValueError: not a Parquet file)."""
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(size - 8, 0))
            tail = f.read(8)
            footer = int.from_bytes(tail[:4], "little")
            if tail[4:] != b"PAR1" or footer > size - 12:
                raise ValueError(f"{self.path}: not a Parquet file")
            f.seek(size - 8 - footer)
            digest = hashlib.sha256(f.read(footer)).hexdigest()
        return f"{os.path.abspath(self.path)}:{size}:{digest}"

    def read_archive_only(self, cursor: Cursor) -> bool:
        """Whether a read from the start that ended at ``cursor`` read the archive's rows
        and nothing else: each file stopped where the archive covers it, no other file."""
        offsets = dict(cursor.offsets)
        return offsets.pop(_KEY, None) is not None and offsets == self.covered()

    def unchanged_since(self, cursor: Cursor) -> bool:
        """Whether the job's files are as a read that ended at ``cursor`` left them: no file
        grown, none new (one the archive covers whole may be gone: ``compact --replace``).
        One ``stat`` a file; False when one cannot be looked at."""
        read = {s: b for s, (b, _) in cursor.offsets.items() if s != _KEY}
        try:
            files = self.inner.files(self.job)
            return all(read.get(s) == os.stat(p).st_size for s, p in files)
        except OSError:
            return False

    def covered(self) -> dict[str, tuple[int, int]]:
        """Each file the archive covers: (bytes, lines) of it."""
        return {s: (int(b), int(n)) for s, b, n in self.meta()["streams"]}

    def _sources(self) -> dict[str, str]:
        names = [s for s, _, _ in self.meta()["streams"]]
        if isinstance(self.inner, SingleFileStore):
            return dict.fromkeys(names, str(self.inner.path))
        return dict(zip(names, self.inner.paths(self.job, names), strict=True))

    def read(
        self,
        job: str,
        cursor: Cursor | None = None,
        *,
        max_bytes: int | None = None,
        lean: bool = False,
    ) -> ReadResult:
        """See :meth:`EventStore.read`. A read from the start gives one row group of the
        archive a read, each file's lines after the archive's after its rows (the order of a
        read of the files alone: its diagnostics in the same order); a read that goes on
        after that reads the files (``lean`` as :meth:`JsonlStore.read`)."""
        if job != self.job:
            return self.inner.read(job, cursor, max_bytes=max_bytes, lean=lean)
        cursor = cursor or Cursor()
        offsets = dict(cursor.offsets)
        if _KEY in offsets and self._tails is None:  # the archive was read: the files
            archived = offsets.pop(_KEY)
            result = self.inner.read(
                job, Cursor(offsets, resume=cursor.resume), max_bytes=max_bytes, lean=lean
            )
            result.cursor.offsets[_KEY] = archived
            return result
        if _KEY not in offsets:  # from the start: what the files hold after the archive
            if self._file is not None:
                self._file.close()
            self._file = _RowGroups(self.path)
            tail = self.inner.read(job, Cursor({**offsets, **self.covered()}), lean=lean)
            by_source: dict[str, list[Chunk]] = {}
            for chunk in tail.chunks:
                by_source.setdefault(chunk.source, []).append(chunk)
            self._tails = (by_source, tail)
        assert self._tails is not None and self._file is not None
        by_source, tail = self._tails
        done = offsets.get(_KEY, (0, 0))[0]
        chunks: list[Chunk] = []
        groups = self._file
        if done < groups.n:
            # the row groups read before are let go of by now: give their memory back (Arrow's
            # pool keeps it otherwise; the 4 M-event data-load job: 70 MB a row group kept)
            _columns().arrow().default_memory_pool().release_unused()
            group = done

            def read(columns: list[str]) -> Any:
                return groups.read(group, columns)

            meta = groups.meta(group)
            made = _columns().group_chunks(meta, read, self._sources())
            first = next(made, None)  # (its first columns are read: read the next group's)
            groups.read_ahead(group + 1)
            for chunk in [] if first is None else [first, *made]:
                _flush(by_source, chunks, before=chunk.source)
                chunks.append(chunk)
            done += 1
        if done < groups.n:
            return ReadResult(chunks, Cursor({**offsets, _KEY: (done, 0)}), [])
        _flush(by_source, chunks, before=None)
        groups.close()
        self._tails = self._file = None
        out = Cursor({**tail.cursor.offsets, _KEY: (done, 0)}, resume=tail.cursor.resume)
        return ReadResult(chunks, out, tail.unread, reached_end=tail.reached_end)


class _RowGroups:
    """An archive's row groups, the next one's first columns read by a thread while the
    engine ingests the one before (pyarrow lets go of the GIL while it reads: on two
    cores, the read of the 4 M-event data-load job's 16 row groups is mostly hidden).

    A thread a read ahead, gone when its read is (not a pool's idle thread: a reader that
    stops halfway leaves no thread behind, and a process with a thread alive does not fork
    its read workers)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = _columns().arrow_parquet().ParquetFile(path)
        self.n: int = self.file.num_row_groups
        self._behind: Any = None  # the threads' own handle of the file
        self._ahead: tuple[int, list[str], Future[Any]] | None = None

    def meta(self, group: int) -> Any:
        return self.file.metadata.row_group(group)

    def read(self, group: int, columns: list[str]) -> Any:
        """Columns of a row group: read ahead when they were, else read now."""
        ahead = self._ahead
        if ahead is not None and ahead[0] == group and ahead[1] == columns:
            self._ahead = None
            return ahead[2].result()
        # (another group's, or more columns of one: the rows of its rare kinds)
        return self.file.read_row_group(group, columns=columns)

    def read_ahead(self, group: int) -> None:
        """Start reading the first columns of ``group`` (:func:`archive.first_columns`)."""
        if group >= self.n or self._ahead is not None:
            return
        if self._behind is None:
            # (a handle of its own: one handle's reads are not documented as thread-safe)
            self._behind = (
                _columns().arrow_parquet().ParquetFile(self.path, metadata=self.file.metadata)
            )
        columns = _columns().first_columns(self.meta(group))
        future: Future[Any] = Future()
        behind = self._behind

        def run() -> None:
            try:
                future.set_result(behind.read_row_group(group, columns=columns))
            except BaseException as e:  # (raised where the columns are taken)
                future.set_exception(e)

        threading.Thread(target=run, name="badput-archive", daemon=True).start()
        self._ahead = (group, columns, future)

    def close(self) -> None:
        """Let go of a read ahead not taken (once it is done) and of the threads' handle;
        the file stays open for the rows made later of the row groups read."""
        if self._ahead is not None:
            futures.wait([self._ahead[2]])
            self._ahead = None
        if self._behind is not None:
            self._behind.close()
            self._behind = None


def _flush(by_source: dict[str, list[Chunk]], chunks: list[Chunk], before: str | None) -> None:
    """Move to ``chunks`` the held chunks of the files read before ``before`` (all: None)."""
    for source in sorted(by_source):
        if before is not None and source >= before:
            break
        chunks += by_source.pop(source)


@dataclass(frozen=True)
class Compacted:
    """What :func:`compact` did."""

    path: Path
    rows: int  # lines archived (events and malformed lines)
    errors: int  # of which malformed
    archive_bytes: int
    covered_bytes: int  # JSON-lines bytes it covers
    removed: tuple[str, ...]  # files --replace removed (wholly covered)
    kept: tuple[str, ...]  # files --replace kept (a torn or unread tail, or written since)


def _stream_of(store: Files, job: str) -> Any:
    if isinstance(store, SingleFileStore):
        name = store.path.name
        return lambda source: name
    prefix = str(store.job_dir(job)) + os.sep
    return lambda source: source[len(prefix) :].replace(os.sep, "/")


def compact(store: EventStore, job: str, *, replace: bool = False) -> Compacted:
    """Write ``job``'s archive (what a read of it gives, its current archive included) and,
    with ``replace``, remove the files it covers whole once it is written, synced to disk
    and read back. Raises ``ValueError`` for a store that is not of files.

    A large job without an archive is read by two processes (:func:`_halfway`): a forked
    worker compacts the reads after the middle one into a part file, which is copied after
    the first half's row groups; the archive is the same as a serial compaction's."""
    files = store.inner if isinstance(store, ArchivedStore) else store
    if not isinstance(files, (JsonlStore, SingleFileStore)):
        raise ValueError(f"{store.uri}: only a directory of event files or a file is compacted")
    path = archive_of(files, job)
    assert path is not None
    reading = with_archive(files, job)
    assert isinstance(reading, (ArchivedStore, JsonlStore, SingleFileStore))
    tmp = path.with_name(path.name + ".tmp")
    part = path.with_name(path.name + ".part.tmp")
    pq = _columns().arrow_parquet()
    stream_of = _stream_of(files, job)
    halfway = _halfway(files, job) if reading is files else None
    worker = None if halfway is None else _start_worker(files, job, halfway, part, stream_of)
    try:
        with pq.ParquetWriter(
            tmp, _columns().schema(), compression="zstd", use_dictionary=_DICTIONARY
        ) as writer:
            done = _Slices(reading, job, stream_of)
            done.write(writer, stop=None if worker is None else halfway)
            if worker is not None:
                took = _join_worker(*worker)
                if done.met and took is not None and took.rows:
                    _copy(part, took.batches, writer)
                    done.merge(took)
                elif not done.reached_end:  # (the worker failed: the parent goes on)
                    done.write(writer, stop=None)
            covered = {k: v for k, v in done.cursor.offsets.items() if k != _KEY}
            meta = {
                "version": _columns().ARCHIVE_VERSION,
                "job": job,
                "layout": "file" if isinstance(files, SingleFileStore) else "directory",
                "streams": [[s, b, n] for s, (b, n) in sorted(covered.items())],
                "rows": done.rows,
                "errors": done.errors,
                "unread": [asdict(u) for u in done.left.values()],
            }
            writer.add_key_value_metadata({_columns().METADATA_KEY: json.dumps(meta).encode()})
    finally:
        if worker is not None:
            _stop_worker(worker[0])
        part.unlink(missing_ok=True)
    _sync(tmp)
    os.replace(tmp, path)
    _sync(path.parent)
    _verify(path, done.rows)
    removed: list[str] = []
    kept: list[str] = []
    if replace:
        removed, kept = _replace(files, job, covered, done.left)
    return Compacted(
        path,
        done.rows,
        done.errors,
        path.stat().st_size,
        sum(b for b, _ in covered.values()),
        tuple(removed),
        tuple(kept),
    )


#: Where a worker starts: ``(stream, offset, lines, the streams from it on)``.
Halfway = tuple[str, int, int, tuple[str, ...]]


@dataclass
class _Took:
    """What a worker compacted (:func:`_compact_part`), for the parent to merge."""

    offsets: dict[str, tuple[int, int]]
    left: dict[str, Unread]
    read_from: frozenset[str]
    rows: int
    errors: int
    batches: list[int]  # the record batches of each table it wrote, in order


class _Slices:
    """The serial compaction: reads of :data:`_SLICE_BYTES`, each written as row groups by a
    thread while the next is read (pyarrow lets go of the GIL), one write at a time."""

    def __init__(self, reading: Any, job: str, stream_of: Any, cursor: Cursor | None = None):
        self.reading = reading
        self.job = job
        self.stream_of = stream_of
        self.cursor = cursor or Cursor()
        self.fresh = cursor is None
        self.rows = self.errors = 0
        self.left: dict[str, Unread] = {}
        self.read_from: set[str] = set()
        self.met = False  # the reads stopped where ``stop`` said (a worker goes on from there)
        self.reached_end = False
        self.batches: list[int] = []  # of each table written (a worker's, for the parent)

    def write(self, writer: Any, stop: Halfway | None) -> None:
        """Read and write until the end of the job, or until the cursor is at ``stop``."""
        cursor: Cursor | None = None if self.fresh and not self.cursor.offsets else self.cursor
        with (
            ThreadPoolExecutor(1, thread_name_prefix="badput-compact") as pool,
            decoding_for_columns(),
        ):
            writing: Future[None] | None = None
            while True:
                result = self.reading.read(self.job, cursor, max_bytes=_SLICE_BYTES, lean=True)
                progressed = cursor is None or result.cursor.offsets != cursor.offsets
                sources = {c.source for c in result.chunks}
                _keep_unread(self.left, result.unread, sources)
                self.read_from |= sources
                cursor = self.cursor = result.cursor
                if result.chunks:
                    names = {c.source: self.stream_of(c.source) for c in result.chunks}
                    table = _columns().batch_of(result.chunks, names)
                    self.errors += table.num_rows - table.column("error").null_count
                    self.rows += table.num_rows
                    self.batches.append(len(table.to_batches()))
                    if writing is not None:
                        writing.result()
                    writing = pool.submit(writer.write_table, table, row_group_size=_ROW_GROUP)
                if result.reached_end or not progressed:
                    self.reached_end = True
                    break
                if stop is not None:
                    at = cursor.offsets.get(stop[0])
                    if at == (stop[1], stop[2]):
                        self.met = True
                        break
                    if at is not None and at[0] >= stop[1]:  # past it (a file changed)
                        stop = None
            if writing is not None:
                writing.result()
        self.fresh = False

    def merge(self, took: _Took) -> None:
        """What a worker compacted after this read's end (its rows are written after these)."""
        self.cursor = Cursor({**self.cursor.offsets, **took.offsets})
        _keep_unread(self.left, list(took.left.values()), took.read_from)
        self.rows += took.rows
        self.errors += took.errors


#: A job of this many bytes of JSON lines or more is compacted by two processes.
_PARALLEL_BYTES: Final = 4 * _SLICE_BYTES
#: The share of a parallel compaction's reads the parent makes: it also copies the
#: worker's row groups into the archive after its own.
_PARENT_SHARE: Final = 0.45


def _halfway(files: Files, job: str) -> Halfway | None:
    """Where a worker compacting the second part of ``job`` starts (a stop of the serial
    reads: it reads from there exactly as they would); None when the job is read by one
    process (small, no idle core, another thread alive: no fork)."""
    from badput.runtime import shared_work  # noqa: PLC0415

    # (a worker on a busy core only adds the cost of handing its rows over: as LiveJob's)
    if not shared_work.fork_safe() or shared_work.idle_helpers(len(os.sched_getaffinity(0))) < 1:
        return None
    try:
        listed = list(files.files(job))
        stops = files.read_stops(job, _SLICE_BYTES, listed, count_lines=False)
        if len(stops) * _SLICE_BYTES < _PARALLEL_BYTES:
            return None
        stream, offset, _ = stops[int(len(stops) * _PARENT_SHARE)]
        lines = files.count_lines(job, stream, offset)  # (those before it only)
    except (OSError, ValueError):
        return None
    names = [name for name, _ in listed]
    if stream not in names:
        return None
    return stream, offset, lines, tuple(names[names.index(stream) :])


def _start_worker(reading: Files, job: str, at: Halfway, part: Path, stream_of: Any) -> Any:
    """A forked process compacting ``job`` from ``at`` into ``part``: (process, pipe end)."""
    import multiprocessing  # noqa: PLC0415

    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe(duplex=False)
    start = Cursor({at[0]: (at[1], at[2])}, resume=(job, at[3]))
    proc = ctx.Process(
        target=_compact_part,
        args=(reading, job, start, part, stream_of, theirs),
        name="badput-compact",
        daemon=True,
    )
    proc.start()
    theirs.close()
    return proc, ours


def _compact_part(  # noqa: PLR0917 (the worker's arguments)
    reading: Files, job: str, start: Cursor, part: Path, stream_of: Any, out: Any
) -> None:
    """The worker: compact ``job`` from ``start`` to its end into ``part``; send a _Took (or
    None when it failed: the parent then reads on itself)."""
    took: _Took | None = None
    try:
        pa = _columns().arrow()
        # Arrow's own format, not Parquet: the parent writes its row groups once
        # (uncompressed: compressing costs CPU on both sides)
        with (
            pa.OSFile(str(part), "wb") as sink,
            pa.ipc.new_stream(sink, _columns().schema()) as stream,
        ):
            done = _Slices(reading, job, stream_of, start)
            done.write(_TableSink(stream), stop=None)
        took = _Took(
            dict(done.cursor.offsets),
            done.left,
            frozenset(done.read_from),
            done.rows,
            done.errors,
            done.batches,
        )
    except Exception:  # (the parent reads on itself)
        took = None
    out.send(took)
    out.close()


def _join_worker(proc: Any, pipe: Any) -> _Took | None:
    try:
        took: _Took | None = pipe.recv()
    except (EOFError, OSError):
        took = None
    proc.join()
    return took


def _stop_worker(proc: Any) -> None:
    if proc.is_alive():
        proc.kill()
    proc.join()


class _TableSink:
    """A writer of tables (as a ParquetWriter takes them) into an Arrow IPC stream."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write_table(self, table: Any, row_group_size: int) -> None:
        self.stream.write_table(table)


def _copy(part: Path, batches: list[int], writer: Any) -> None:
    """Write the tables of ``part`` (a worker's IPC stream: ``batches`` record batches each)
    into ``writer``, each as the worker's read made it (the row groups of a serial one)."""
    pa = _columns().arrow()
    with pa.OSFile(str(part), "rb") as source:  # (not mapped: each batch let go once written)
        reader = pa.ipc.open_stream(source)
        for n in batches:
            table = pa.Table.from_batches([reader.read_next_batch() for _ in range(n)])
            writer.write_table(table, row_group_size=_ROW_GROUP)


def _keep_unread(left: dict[str, Unread], unread: list[Unread], read_from: Iterable[str]) -> None:
    for source in read_from:
        left.pop(source, None)
    for u in unread:
        left[u.source] = u


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _verify(path: Path, rows: int) -> None:
    """Read the archive back: its footer and metadata, and the column of every row's line
    number, as many as were written."""
    pq = _columns().arrow_parquet()
    meta = read_meta(path)
    got = pq.ParquetFile(path).read(columns=["line"]).num_rows  # (read_table: pandas, 0.7 s)
    if got != rows or meta["rows"] != rows:
        raise OSError(f"{path}: {got:,} rows read back, {rows:,} written")


def _replace(
    files: Files, job: str, covered: dict[str, tuple[int, int]], left: dict[str, Unread]
) -> tuple[list[str], list[str]]:
    """Remove the files the archive covers whole (nothing after its bytes, nothing the read
    left alone): ``(removed, kept)``."""
    if isinstance(files, SingleFileStore):
        paths = {files.path.name: files.path}
    else:
        paths = {s: files.job_dir(job) / s for s in covered}
    removed: list[str] = []
    kept: list[str] = []
    for stream, (size, _) in sorted(covered.items()):
        path = paths[stream]
        try:
            whole = path.stat().st_size == size and str(path) not in left
        except OSError:
            continue
        if not whole:
            kept.append(str(path))
            continue
        path.unlink()
        removed.append(str(path))
    for directory in {p.parent for p in paths.values()}:
        _sync(directory)
    return removed, kept
