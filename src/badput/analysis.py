"""The I/O edge of the engine: read a store into an :class:`Accountant`.

``analyze`` answers one question about a finished (or crashed) log; ``LiveJob``
follows a job that is still being written, reading only what is new each time.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Final, NamedTuple

from badput.engine import Accountant, Diagnostic, RankOptions, Report, Snapshot, clock_continues
from badput.events import Event, EventError, LeanEvent
from badput.runtime import shared_work
from badput.runtime.gc_pause import gc_paused
from badput.runtime.heap import give_back
from badput.runtime.state_cache import StateCache
from badput.store import (
    ArchivedStore,
    Cursor,
    EventStore,
    JobListing,
    JsonlStore,
    KeptRead,
    ReadResult,
    SingleFileStore,
    Unread,
    open_source,
)

__all__ = ["JobSplit", "LiveJob", "analyze", "read_split_part", "split_job"]

Source = str | os.PathLike[str] | EventStore

#: Bytes read (and decoded) per store read while catching up on a log: the decoded events
#: of one slice are alive at a time (about 4x its bytes). 1 MiB is faster than larger slices
#: (its events reuse the memory the last slice's left, and it stays in the CPU's caches):
#: 4.48 s against 5.66 s with 8 MiB for 4 M events (docs/performance.md). For files only:
READ_SLICE_BYTES = 1024 * 1024
#: ... and for any other store, where a read may cost more than decoding its bytes (each read
#: of Cloud Logging is a query against its quota): as before 2026-11-26.
OTHER_STORE_SLICE_BYTES = 8 * 1024 * 1024
#: A cold read of at least this many bytes (one file or several) is shared among processes.
#: At 33 MB a worker already halves the reading process's CPU (0.30 s against
#: 0.54 s serially, docs/performance.md); below, the fork and the plan weigh more.
PARALLEL_MIN_BYTES = 32 * 1024 * 1024
#: ... and of at least this many bytes per attempt (the top directories of a job's files):
#: what a worker sends back grows with the attempts it read (docs/performance.md).
PARALLEL_MIN_BYTES_PER_ATTEMPT = 4 * 1024
#: Most processes a cold read is shared among (fewer when fewer cores are available).
MAX_WORKERS = 4
#: A worker takes slices in runs of an eighth of those left, at most 32: one result a run
#: (where a result a slice cost the parent 0.37 s of a 1 M-step log's 2.2 s read).
_RUN_SHARE, _RUN_MOST = 2 * MAX_WORKERS, 32
_SEQ_BLOCK = 1 << 40  # arrival numbers of slice k start at k * _SEQ_BLOCK (file order)
#: Events at the start of a slice compared with the newest time of its file before it.
_HEAD_EVENTS = 1024
#: A live reader reports an unterminated last line once it has stayed unchanged this long.
TORN_AFTER_SECONDS: Final = 60.0
#: The modules whose classes a kept read's state is made of (see LiveJob's state_cache).
_STATE_MODULES: Final = ("badput.engine", "badput.store._base")


def _catch_up(  # noqa: PLR0917
    store: EventStore,
    job: str,
    accountant: Accountant,
    cursor: Cursor | None,
    on_progress: Callable[[int], None] | None = None,
    unread: list[Unread] | None = None,
) -> tuple[Cursor | None, int]:
    """Read and ingest everything new, one bounded slice at a time.

    A store that says when a read got to the end of the job (``ReadResult.reached_end``:
    files) is read in one pass: one listing, then reads that go on from where the budget
    stopped each (``Cursor.resume``) up to the end. What was written meanwhile is left to
    the next catch-up, which lists the job again. Another store is read until a read brings
    nothing new.

    ``unread`` receives what the pass left alone: unterminated last lines, files that are
    not regular files (each file's from the last read that looked at it).
    """
    n = 0
    left: dict[str, Unread] = {}
    while True:
        resumed = cursor is not None and cursor.resume is not None
        result = _read(store, job, cursor, _slice_bytes(store))
        progressed = resumed or result.cursor.offsets != (cursor.offsets if cursor else {})
        if not resumed:  # a read that listed the job: a new pass
            left = {}
        _note_unread(left, result.unread, (chunk.source for chunk in result.chunks))
        cursor = result.cursor
        accountant.ingest(result.chunks)
        n += result.n_items
        if result.chunks and on_progress is not None:
            on_progress(n)
        if result.reached_end or not progressed:
            if unread is not None:
                unread[:] = left.values()
            return cursor, n


def _read(store: EventStore, job: str, cursor: Cursor | None, max_bytes: int) -> ReadResult:
    """One read of the engine's: of a store of files, its large blocks of one writer's
    lines decoded lean (``JsonlStore.read(lean=True)``: the engine reads no event's
    ``items``). A subclass that has a ``read`` of its own is read as any store is."""
    if type(store).read in _LEAN_READS:
        return store.read(job, cursor, max_bytes=max_bytes, lean=True)  # type: ignore[call-arg]
    return store.read(job, cursor, max_bytes=max_bytes)


_LEAN_READS: Final = (JsonlStore.read, SingleFileStore.read, ArchivedStore.read)


def _slice_bytes(store: EventStore) -> int:
    """Bytes a catch-up's read of ``store`` takes (:data:`READ_SLICE_BYTES` for files)."""
    if isinstance(store, (JsonlStore, SingleFileStore)):
        return READ_SLICE_BYTES
    return OTHER_STORE_SLICE_BYTES


def _written_long_ago(u: Unread) -> bool:
    """Whether the file of a torn line was last written :data:`TORN_AFTER_SECONDS` ago or
    more (by the file's time: a reader that starts late needs not wait as long again)."""
    return u.modified is not None and time.time() - u.modified >= TORN_AFTER_SECONDS


def _note_unread(left: dict[str, Unread], unread: list[Unread], read_from: Iterable[str]) -> None:
    """Keep what a read left ``unread``, by file, in ``left``: each file's from the last read
    that went through it (a read that goes on from a budget stop reads its first file again;
    a torn line an earlier read reported there may have been completed since: the files
    ``read_from``, which it read lines of, are forgotten first)."""
    for source in read_from:
        left.pop(source, None)
    for u in unread:
        left[u.source] = u


@dataclass(frozen=True)
class _Slice:
    """One read of the serial sequence (``store.read(..., max_bytes=READ_SLICE_BYTES)``
    from one stop of :meth:`~badput.store.JsonlStore.read_stops` to the next): whoever reads it
    decodes and ingests exactly the blocks, chunks and line numbers a serial read would."""

    index: int
    names: tuple[str, ...]  # every file's stream name, in read order
    first: int  # index of the file it starts in
    offset: int  # where it starts in that file
    lines: int | None  # lines before ``offset`` in that file (None: its reader counts them)
    last: int  # index of the file it stops in
    end: int | None  # where it stops in that file (None: the last read, to the end)
    first_source: str  # the first and last files as chunks name them
    last_source: str


class _SliceRead(NamedTuple):
    """A worker's result (of a slice, or a run); ``ok`` False when the read did not stop where
    planned (a file changed) or failed: that slice and those after it are read serially."""

    number: int  # the slice's index (the first of a run's)
    through: int  # the index of the run's last slice (``number``: a slice alone)
    ok: bool
    accountant: Accountant | None
    offsets: dict[str, tuple[int, int]]
    n: int
    head_ts: list[float] | None  # times of its first events in its first file (None: no line)
    unread: list[Unread]  # what its read left alone (a torn last line...)
    read_from: frozenset[str]  # the files it read lines of (see _note_unread)
    reached_end: bool  # its read got to the end of the job (the last slice's, as planned)
    # Its first file's lines are numbered from the slice's start, not the file's: the
    # parent, which knows how many lines come before, moves them when it merges.
    relative: bool = False


@dataclass
class _SharedRead:
    """How far a shared cold read has got: the serial read's cursor, the lines read, what
    the reads left unread (by file: the last read's), the first slice this process did not
    read, and whether the job was read to its end."""

    cursor: Cursor
    n: int = 0
    left: dict[str, Unread] = field(default_factory=dict)
    front: int = 0
    complete: bool = False


def _times(rows: Sequence[Event | LeanEvent | EventError], job: str) -> Iterator[float]:
    """Times of the events of ``job`` among ``rows`` (a chunk's), in order (what the
    engine sees)."""
    return (e.ts for e in rows if not isinstance(e, EventError) and e.job == job)


def _failed(index: int) -> _SliceRead:
    return _SliceRead(index, index, False, None, {}, 0, None, [], frozenset(), False)


def _placed(r: _SliceRead, s: _Slice, offsets: dict[str, tuple[int, int]]) -> _SliceRead | None:
    """A worker's result whose first file's lines are numbered from the slice's start
    (``relative``), numbered from the file's start: ``offsets`` (the cursor of the read
    merged so far) says how many lines come before. None when it does not reach the
    slice's start (then that slice is read again serially)."""
    name = s.names[s.first]
    at = offsets.get(name)
    if at is None or at[0] != s.offset or r.accountant is None:
        return None
    before = at[1]
    r.accountant.shift_lines(s.first_source, before)
    moved = dict(r.offsets)
    if name in moved:
        end, lines = moved[name]
        moved[name] = (end, lines + before)
    unread = [
        dataclasses.replace(u, line=u.line + before)
        if u.source == s.first_source and u.line is not None
        else u
        for u in r.unread
    ]
    return r._replace(offsets=moved, unread=unread, relative=False)


def _read_slice(store: EventStore, job: str, s: _Slice, *rest: _Slice) -> _SliceRead:
    """Worker: read the slice ``s`` of ``job``'s files, and the slices ``rest`` after it,
    into an Accountant of its own as a serial read goes on through them (a clock step
    back among them is found as it finds it), through the slices' own files only
    (``Cursor.resume``: nothing is listed). A slice that starts inside a file whose lines
    before it the plan did not count is read with its lines numbered from its start
    (``relative``): counting them took a worker 0.3 s of a 350 MB file; the parent knows
    them when it merges the slice."""
    last = rest[-1] if rest else s
    relative = s.offset > 0 and s.lines is None
    acc = Accountant(job, first_seq=s.index * _SEQ_BLOCK)
    head: list[float] | None = None
    at, n, left, read_from = (s.offset, s.lines or 0), 0, dict[str, Unread](), set[str]()
    offsets: dict[str, tuple[int, int]] = {}
    for part in (s, *rest):  # (each from where the one before stopped, its lines counted)
        mine = part.names[part.first : len(part.names) if part.end is None else part.last + 1]
        # The stores a plan is made for read only the streams the cursor's ``resume`` lists:
        # the cursor names no other file (a job of 10,000 attempt files has 10,000 names; a
        # slice holds hundreds of them, and each slice went through all of them three times).
        result = _read(store, job, Cursor({mine[0]: at}, (job, mine)), READ_SLICE_BYTES)
        read = result.cursor.offsets
        strayed = not frozenset(read) <= frozenset(mine)  # a store that listed anyway
        at = read.get(part.names[part.last], (0, 0))
        offsets.update(read)
        if strayed or (part.end is not None and at[0] != part.end):
            return _failed(s.index)
        if part is s and s.offset:
            for chunk in result.chunks:
                if chunk.source == s.first_source and (head is None or len(head) < _HEAD_EVENTS):
                    more = islice(_times(chunk.rows, job), _HEAD_EVENTS - len(head or []))
                    head = (head or []) + list(more)
        acc.ingest(result.chunks)
        n += result.n_items
        sources = frozenset(chunk.source for chunk in result.chunks)
        _note_unread(left, result.unread, sources)
        read_from |= sources
    done = last.end is None and result.reached_end
    unread, seen = list(left.values()), frozenset(read_from)
    return _SliceRead(
        s.index, last.index, True, acc, offsets, n, head, unread, seen, done, relative
    )


def _slice_worker(store: EventStore, job: str, plan: list[_Slice], claims: Any, out: Any) -> None:
    """A worker process: read runs of slices from the back until they meet the parent's;
    send each run's result as soon as it is read (a queue pickles it while the next run is
    read). A run that fails is sent as failed: it and the rest are read serially."""
    try:
        while claimed := shared_work.claim_run(claims, share=_RUN_SHARE, most=_RUN_MOST):
            try:
                out.put(_read_slice(store, job, *(plan[i] for i in claimed)))
            except Exception:  # the parent reads this slice and the rest serially
                out.put(_failed(claimed[0]))
                return
    finally:
        out.put(None)  # this worker is done


#: Files whose sizes are looked at to tell whether a job reaches :data:`PARALLEL_MIN_BYTES`
#: (evenly spread over its files): 10,000 attempt files are not stat'ed one by one for that.
_SIZE_SAMPLE: Final = 256


def _estimated_bytes(paths: list[Path], n_files: int) -> int | None:
    """The bytes of ``n_files`` files estimated from ``paths``, a sample of them; None
    when one of the sample cannot be stat'ed (gone meanwhile: not worth planning now)."""
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            return None
    return total * n_files // len(paths) if paths else 0


def _listing(store: EventStore, job: str) -> tuple[str, ...] | None:
    """The streams of ``job`` in read order, listed once for the planning and the read
    that follows it (``Cursor.resume``); None for a store other than files."""
    if isinstance(store, JsonlStore):
        return tuple(store.streams(job))
    if isinstance(store, SingleFileStore):
        return tuple(name for name, _ in store.files(job))
    return None


def _parallel_plan(
    store: EventStore,
    job: str,
    names: tuple[str, ...] | None = None,
    sizes: tuple[int, ...] | None = None,
    min_bytes: int | None = None,
) -> list[_Slice] | None:
    """The slices of a serial cold read of ``job``; None when not worth sharing (fewer
    than :data:`PARALLEL_MIN_BYTES`, or than :data:`PARALLEL_MIN_BYTES_PER_ATTEMPT` per
    attempt directory, a store other than files, or a single read).
    ``names``: the streams, if the caller has listed them (:func:`_listing`); ``sizes``:
    their files' sizes, if it took them too (:class:`~badput.store.JobListing`).
    ``min_bytes``: the size below which a job is not shared (:data:`PARALLEL_MIN_BYTES`)."""
    if not isinstance(store, (JsonlStore, SingleFileStore)):
        return None
    least = PARALLEL_MIN_BYTES if min_bytes is None else min_bytes
    if names is None:
        names, sizes = _listing(store, job) or (), None
    if isinstance(store, JsonlStore):
        if sizes is not None:
            size: int | None = sum(sizes)
        else:
            base = store.job_dir(job)
            sample = [base / name for name in names[:: max(1, len(names) // _SIZE_SAMPLE)]]
            size = _estimated_bytes(sample, len(names))
        if size is None or size < least:
            return None
        attempts = {name.partition("/")[0] for name in names if "/" in name}
        if size < len(attempts) * PARALLEL_MIN_BYTES_PER_ATTEMPT:
            return None
        files: list[tuple[str, str | os.PathLike[str]]] = list(
            zip(names, store.paths(job, names), strict=True)
        )
    else:
        files = list(store.files(job))
        size = _estimated_bytes([Path(path) for _, path in files], len(files))
        if size is None or size < least:
            return None
    # By size: the workers check that their slices end where planned (a torn last line
    # or a file still written makes the slices from there the serial read's).
    stops = store.read_stops(
        job, READ_SLICE_BYTES, files, count_lines=False, by_size=True, sizes=sizes
    )
    names = tuple(name for name, _ in files)
    index = {name: k for k, name in enumerate(names)}
    if not stops or any(name not in index for name, _, _ in stops):  # none, or files came
        return None
    sources = [str(path) for _, path in files]
    plan: list[_Slice] = []
    i, offset = 0, 0  # where the next slice starts
    lines: int | None = 0
    for k, stop in enumerate([*stops, None]):
        last, end = (index[stop[0]], stop[1]) if stop is not None else (len(names) - 1, None)
        plan.append(_Slice(k, names, i, offset, lines, last, end, sources[i], sources[last]))
        if stop is not None:
            i, offset, lines = last, stop[1], stop[2]
    return plan


@dataclass(frozen=True)
class JobSplit:
    """A large job's cold read cut into the slices of its serial read (as a shared cold
    read cuts it), for other processes or machines to read (:func:`read_split_part`) and
    :meth:`LiveJob.from_split` to merge: the same state as one process's read."""

    store: EventStore
    job: str
    names: tuple[str, ...]  # the job's streams, in read order
    slices: tuple[_Slice, ...]

    def parts(self, n: int) -> list[range]:
        """The slices' indices cut into at most ``n`` runs of consecutive slices."""
        count = len(self.slices)
        size = -(-count // max(1, min(n, count)))
        return [range(i, min(i + size, count)) for i in range(0, count, size)]


def split_job(source: Source, job: str | None = None, *, min_bytes: int) -> JobSplit | None:
    """``job``'s cold read as a :class:`JobSplit`; None for a job of fewer than
    ``min_bytes`` or a store other than files (read it whole)."""
    store, job = _resolve(source, job)
    names = _listing(store, job)
    plan = _parallel_plan(store, job, names, min_bytes=min_bytes) if names else None
    return None if plan is None or names is None else JobSplit(store, job, names, tuple(plan))


def read_split_part(split: JobSplit, indices: range) -> list[_SliceRead]:
    """Read the slices ``indices`` (consecutive) of ``split`` into an Accountant of their
    own (one task of a distributed read: its result pickles)."""
    return [_read_slice(split.store, split.job, *(split.slices[i] for i in indices))]


def _workers() -> int:
    """Processes for a parallel read: the cores this process may run on, at most
    :data:`MAX_WORKERS`."""
    return min(shared_work.usable_cores(), MAX_WORKERS)


def _with_options(accountant: Accountant, of: Accountant) -> Accountant:
    """``accountant`` (a kept state, built by another reader), given the options ``of`` has:
    what a caller sets (``badput report``: the price, the peak)."""
    for name in ("ideal_step_time", "peak_flops", "devices", "price_per_device_hour"):
        setattr(accountant, name, getattr(of, name))
    accountant.rank_options = of.rank_options
    return accountant


def _resolve(source: Source, job: str | None) -> tuple[EventStore, str]:
    if isinstance(source, (str, os.PathLike)):
        return open_source(os.fspath(source), job)
    if isinstance(source, JsonlStore):
        try:  # a renamed job directory is read as the job its events name
            return open_source(source, job)
        except ValueError:
            if job is None:
                raise
    if job is not None:
        return source, job  # (a job that has not written yet: followed from its first event)
    jobs = source.jobs()
    if len(jobs) != 1:
        names = ", ".join(jobs) if jobs else "none"
        raise ValueError(f"store {source.uri} holds {len(jobs)} jobs ({names}); name one with job=")
    return source, jobs[0]


class LiveJob:
    """Follow one job of a store: each :meth:`update` ingests only the new lines.

    >>> from badput.store import MemoryStore
    >>> live = LiveJob(MemoryStore(), "nothing-yet")
    >>> live.update()
    0
    """

    def __init__(
        self,
        source: Source,
        job: str | None = None,
        *,
        ideal_step_time: float | None = None,
        on_progress: Callable[[int], None] | None = None,
        parallel: bool | None = None,
        rank_options: RankOptions | None = None,
        listing: JobListing | None = None,
        state_cache: StateCache | None = None,
    ) -> None:
        """``listing``: what :func:`~badput.store.list_job` gave for ``source`` and ``job``,
        listed ahead (``badput report`` has a helper process list the job while it imports
        the engine): its store and job are taken, and the first read goes through the files
        it lists, planned from their sizes, without listing the job again.
        ``state_cache``: where a first read of a compacted job's archive keeps its state (at
        the first :meth:`report`) and the next reader's first read loads it instead of
        reading the archive: :class:`~badput.store.KeptRead`."""
        if listing is not None:
            self.store, self.job = listing.store, listing.job
        else:
            self.store, self.job = _resolve(source, job)
        self._listing = listing if listing is not None and listing.streams is not None else None
        self.accountant = Accountant(self.job, ideal_step_time=ideal_step_time)
        self.rank_options = rank_options or RankOptions()
        self.accountant.rank_options = self.rank_options
        self._cursor: Cursor | None = None
        self._on_progress = on_progress
        self._parallel = parallel
        # What the last update left unread, and since when (monotonic) each torn line
        # has been the same: {(source, line, size): first seen}.
        self._unread: list[Unread] = []
        self._torn_since: dict[tuple[str, int | None, int], float] = {}
        self._rotated: list[Unread] = []  # every rotation seen (said in every report)
        self._state_cache = state_cache
        self._kept: KeptRead | None = None  # a read of the archive alone, to keep

    def update(self) -> int:
        """Read and ingest what was appended since the last call; return how many lines.

        Reads in slices of :data:`READ_SLICE_BYTES` (files; :data:`OTHER_STORE_SLICE_BYTES`
        for any other store) so that only one slice of decoded
        events is alive at a time, whatever the size of the log. The first (cold)
        read of a large job (:data:`PARALLEL_MIN_BYTES` or more, in one file or several)
        is shared among processes when ``parallel`` allows it: ``True`` always (by
        ``fork``), ``None`` when it is safe (:func:`~badput.runtime.shared_work.fork_safe`)
        and a core is idle (:func:`~badput.runtime.shared_work.idle_helpers`). The result
        is the same as one process's, diagnostics' line numbers and the cursor included
        (:meth:`_cold_parallel`). Deciding costs no second listing: the read goes through
        the streams the planning listed.
        """
        with gc_paused():  # the decoded events and the state they build hold no cycles
            return self._update()

    def _update(self) -> int:
        kept = None
        if self._cursor is None:
            options = (self.accountant.ideal_step_time, self.rank_options)
            kept = KeptRead.of(self._state_cache, self.store, self.job, options)
        restored = None if kept is None else kept.load(_STATE_MODULES)
        if restored is not None and isinstance(state := restored[0], Accountant):
            self.accountant, self._cursor = _with_options(state, self.accountant), restored[1]
            return restored[2] + self._update()  # and what the job wrote after its archive
        if self._cursor is None and self._parallel is not False:
            shared = self._cold_parallel()
            if shared is not None:
                n, left = shared
                if left is not None:  # the whole job was read, to its end
                    self._left(left)
                    return n
                return n + self._update()
        if self._cursor is None and self._listing is not None:  # read what was listed ahead
            self._cursor = Cursor(resume=(self.job, self._listing.streams or ()))
        self._listing = None  # (a later pass lists the job again)
        unread: list[Unread] = []
        self._cursor, n = _catch_up(
            self.store, self.job, self.accountant, self._cursor, self._on_progress, unread
        )
        self._left(unread)
        if kept is not None and self._cursor is not None and kept.read(self._cursor, n, unread):
            self._kept = kept
        return n

    def _left(self, unread: list[Unread]) -> None:
        """Keep what the last pass over the job left unread, and since when each torn line
        has been the same."""
        now = time.monotonic()
        self._rotated += [u for u in unread if u.code == "rotated"]
        unread = [u for u in unread if u.code != "rotated"]
        keys = {(u.source, u.line, u.size): u for u in unread if u.code == "torn_line"}
        self._torn_since = {k: self._torn_since.get(k, now) for k in keys}
        self._unread = unread

    def unread_diagnostics(self, *, final: bool = False) -> list[Diagnostic]:
        """Diagnostics for what the reads left alone (see :meth:`report`)."""
        now = time.monotonic()
        out: list[Diagnostic] = []
        for u in [*self._rotated, *self._unread]:
            if u.code == "torn_line":
                since = self._torn_since.get((u.source, u.line, u.size), now)
                if not final and now - since < TORN_AFTER_SECONDS and not _written_long_ago(u):
                    continue  # a write in progress, most likely: read it once its newline comes
            code, message = u.explained()
            out.append(Diagnostic(code, message, u.source, u.line if code == "torn_line" else None))
        return out

    @classmethod
    def from_split(cls, split: JobSplit, parts: Iterable[_SliceRead], **kw: Any) -> LiveJob:
        """The job of ``split`` with the ``parts`` read elsewhere merged in file order; what
        they miss (a part lost, a file changed since) is read here, serially, as a shared
        cold read does. ``kw``: as for :class:`LiveJob` (``parallel`` is off)."""
        live = cls(split.store, split.job, **{**kw, "parallel": False})
        got = {r.number: r for r in parts}
        shared = _SharedRead(Cursor(resume=(split.job, split.names)))
        with gc_paused():
            _n, left = live._merged(list(split.slices), got, shared, split.names)
            if left is not None:
                live._left(left)
            else:
                live._update()
        return live

    def _cold_parallel(self) -> tuple[int, list[Unread] | None] | None:
        """Share the cold read among processes; None when not done (see :meth:`update`).

        Returns the lines read and, when every slice was read and merged (the job read to
        its end), what the reads left unread; else None there, and the serial
        :meth:`update` that follows goes on from the cursor.

        The read is cut into its serial slices. This process reads them from the front,
        into :attr:`accountant`, exactly as a serial read; worker processes take runs of
        them from the back (:data:`_RUN_SHARE`), each run into an Accountant of its own,
        and send it back at once; they meet wherever the work balances (the parent also
        spends time receiving). The workers' runs are merged in file order. A run whose
        result could differ from a serial read's (a file changed meanwhile, a clock step
        back at its start, a worker that failed) is left, with every slice after it, to
        the serial :meth:`update` that follows. When the job is not worth sharing, the
        listing made to decide so is left in the cursor (``Cursor.resume``) for the serial
        read: nothing is listed twice.
        """
        if self._parallel is None and not shared_work.fork_safe():
            return None
        helpers = _workers() - 1 if self._parallel else shared_work.idle_helpers(_workers())
        if helpers < 1:
            return None
        listed, self._listing = self._listing, None
        if listed is not None:
            names, sizes = listed.streams, listed.sizes
        else:
            names, sizes = _listing(self.store, self.job), None
        if names is None:
            return None
        start = Cursor(resume=(self.job, names))
        plan = _parallel_plan(self.store, self.job, names, sizes)
        if plan is None:
            self._cursor = start
            return None
        shared = _SharedRead(start)
        got = self._read_front(plan, helpers, shared)
        return self._merged(plan, got, shared, names)

    def _merged(
        self,
        plan: list[_Slice],
        got: dict[int, _SliceRead],
        shared: _SharedRead,
        names: tuple[str, ...],
    ) -> tuple[int, list[Unread] | None]:
        """Merge the parts read elsewhere (``got``) after what ``shared`` says this process
        read; see :meth:`_cold_parallel` for what is returned."""
        offsets, merged = _merge_parts(self.accountant, plan, got, shared)
        complete = shared.complete
        # Not read to its end (a slice left to the serial read: a torn last line where a slice
        # was planned to end, a file written meanwhile): the serial read goes on through the
        # files listed, as a read that stopped at its budget does; it lists the job no more.
        self._cursor = Cursor(offsets) if complete else Cursor(offsets, resume=(self.job, names))
        got.clear()  # parts not merged (read again serially from the cursor) are dropped
        if merged:  # the workers' parts, merged, are freed: hand their memory back
            give_back()
        if self._on_progress is not None:
            self._on_progress(shared.n)
        return shared.n, list(shared.left.values()) if complete else None

    def _read_front(
        self, plan: list[_Slice], helpers: int, shared: _SharedRead
    ) -> dict[int, _SliceRead]:
        """Start ``helpers`` worker processes, read the slices of ``plan`` from the front into
        :attr:`accountant` until they meet the workers' (``shared`` keeps how far), and
        return the workers' results by slice. The workers have exited on return."""
        ctx = multiprocessing.get_context("fork")
        claims = ctx.Array("q", [0, len(plan)])  # [next from the front, end of the unclaimed]
        out = ctx.Queue()
        procs = [
            ctx.Process(
                target=_slice_worker, args=(self.store, self.job, plan, claims, out), daemon=True
            )
            for _ in range(min(helpers, len(plan) - 1))
        ]
        for proc in procs:
            proc.start()
        got: dict[int, _SliceRead] = {}
        running = len(procs)
        cursor, left = shared.cursor, shared.left
        n = 0
        front = 0
        complete = False
        try:
            while (i := shared_work.claim(claims, front=True)) is not None:
                s = plan[i]
                result = _read(self.store, self.job, cursor, READ_SLICE_BYTES)
                cursor = result.cursor
                self.accountant.ingest(result.chunks)
                n += result.n_items
                _note_unread(left, result.unread, (chunk.source for chunk in result.chunks))
                front = i + 1
                complete = s.end is None and result.reached_end
                if s.end is not None and cursor.offsets.get(s.names[s.last], (0, 0))[0] != s.end:
                    front = len(plan)  # a file changed: the workers' slices may not fit
                    complete = False
                    shared_work.claim_all(claims)
                    break
                running -= shared_work.receive(out, got)
            shared_work.wait_for(out, got, procs, running)
        except BaseException:  # interrupted: nobody will take the workers' results
            for proc in procs:
                proc.kill()
            raise
        finally:
            for proc in procs:
                proc.join(timeout=5.0)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            out.close()
        shared.cursor, shared.n, shared.front, shared.complete = cursor, n, front, complete
        return got

    def report(
        self,
        *,
        now: float | None = None,
        window: tuple[float, float] | None = None,
        ideal_step_time: float | None = None,
        final: bool = False,
    ) -> Report:
        """The partition of what was read so far (see :meth:`Accountant.report`).

        Its diagnostics include what the reads could not use. An unterminated
        last line is never read (its event is not counted, live or cold, so
        every form of the report gives the same numbers); it is reported as
        ``torn_line`` (file:line) at once when ``final`` (the log is complete:
        :func:`analyze`, ``badput report``), else only once it has stayed
        unchanged for :data:`TORN_AFTER_SECONDS` (a live writer completes its
        line within milliseconds): seen so by this reader, or its file last
        written that long ago. A ``*.jsonl`` that is a FIFO, socket or
        device is never opened and is reported as ``not_a_file``.
        """
        report = self.accountant.report(now=now, window=window, ideal_step_time=ideal_step_time)
        if self._kept is not None:  # (with what the report left in the engine's cache: once)
            self._kept.keep(self.accountant, self._cursor)
        extra = self.unread_diagnostics(final=final)
        if not extra:
            return report
        return dataclasses.replace(report, diagnostics=[*report.diagnostics, *extra])

    def snapshot(
        self,
        *,
        now: float | None = None,
        window: tuple[float, float] | None = None,
        ideal_step_time: float | None = None,
        final: bool = False,
        drawing: bool = False,
    ) -> Snapshot:
        """The one report object every view renders (:class:`~badput.engine.Snapshot`) of
        what was read so far: :meth:`report` (with its read diagnostics), and when
        ``drawing`` the timeline and goodput over time the HTML page, CSV and trace draw."""
        report = self.report(now=now, window=window, ideal_step_time=ideal_step_time, final=final)
        return self.accountant.snapshot(now=now, report=report, drawing=drawing)


def _merge_parts(
    accountant: Accountant, plan: list[_Slice], got: dict[int, _SliceRead], shared: _SharedRead
) -> tuple[dict[str, tuple[int, int]], bool]:
    """Merge into ``accountant`` the workers' parts that follow what it read, in file order,
    up to the first that could differ from a serial read's; return the cursor's offsets
    then, and whether any part was merged."""
    offsets = dict(shared.cursor.offsets)
    merged = False
    k = shared.front
    while k < len(plan):  # in file order
        s, r = plan[k], got.pop(k, None)  # (freed once merged)
        if r is None or not r.ok or r.accountant is None:
            break
        if s.offset and r.head_ts is not None:
            before = accountant.newest_in(s.first_source)  # (None: nothing of it read)
            if before is None or not clock_continues(r.head_ts, before):
                break
        part = r.accountant
        if r.relative:
            placed = _placed(r, s, offsets)
            if placed is None:
                break
            r = placed
        accountant.merge(part)
        merged = True
        offsets.update(r.offsets)
        shared.n += r.n
        _note_unread(shared.left, r.unread, r.read_from)
        shared.complete = r.reached_end
        k = r.through + 1
    return offsets, merged


def analyze(
    source: Source,
    job: str | None = None,
    *,
    now: float | None = None,
    window: tuple[float, float] | None = None,
    ideal_step_time: float | None = None,
    on_progress: Callable[[int], None] | None = None,
    parallel: bool | None = None,
    rank_options: RankOptions | None = None,
) -> Report:
    """Read a whole log and return its :class:`Report`.

    ``source`` is a store root (``job`` needed when it holds several jobs), a
    job directory, a single ``.jsonl`` file, or an :class:`EventStore`.
    ``parallel``: see :meth:`LiveJob.update`. ``rank_options``: thresholds of the
    per-rank view, stragglers and stalls (docs/ranks.md).
    """
    live = LiveJob(
        source,
        job,
        ideal_step_time=ideal_step_time,
        on_progress=on_progress,
        parallel=parallel,
        rank_options=rank_options,
    )
    live.update()
    return live.report(now=now, window=window, final=True)
