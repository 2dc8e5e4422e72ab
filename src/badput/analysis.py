"""The I/O edge of the engine: read a store into an :class:`Accountant`.

``analyze`` answers one question about a finished (or crashed) log; ``LiveJob``
follows a job that is still being written, reading only what is new each time.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Final

from badput.engine import Accountant, Diagnostic, RankOptions, Report
from badput.store import Cursor, EventStore, JsonlStore, Unread, open_source

__all__ = ["LiveJob", "analyze"]

Source = str | os.PathLike[str] | EventStore

#: Bytes read (and decoded) per store read while catching up on a log.
READ_SLICE_BYTES = 32 * 1024 * 1024
#: A cold read of at least this many bytes, in two files or more, is shared among processes.
PARALLEL_MIN_BYTES = 64 * 1024 * 1024
_SEQ_BLOCK = 1 << 40  # arrival numbers of worker k start at k * _SEQ_BLOCK (file order)
#: A live reader reports an unterminated last line once it has stayed unchanged this long.
TORN_AFTER_SECONDS: Final = 60.0


def _catch_up(  # noqa: PLR0917
    store: EventStore,
    job: str,
    accountant: Accountant,
    cursor: Cursor | None,
    on_progress: Callable[[int], None] | None = None,
    unread: list[Unread] | None = None,
) -> tuple[Cursor | None, int]:
    """Read and ingest everything new, one bounded slice at a time.

    ``unread`` receives what the last read (the one that found nothing new) left
    alone: unterminated last lines, files that are not regular files.
    """
    n = 0
    while True:
        result = store.read(job, cursor, max_bytes=READ_SLICE_BYTES)
        progressed = result.cursor.offsets != (cursor.offsets if cursor else {})
        cursor = result.cursor
        accountant.ingest(result.chunks)
        n += result.n_items
        if result.chunks and on_progress is not None:
            on_progress(n)
        if not progressed:
            if unread is not None:
                unread[:] = result.unread
            return cursor, n


def _read_streams(
    store: JsonlStore, job: str, mine: list[str], skip: dict[str, int], first_seq: int
) -> tuple[Accountant, dict[str, tuple[int, int]], int]:
    """Worker: read only the streams ``mine`` of ``job`` (the others start at their end)."""
    accountant = Accountant(job, first_seq=first_seq)
    start = Cursor({name: (size, 0) for name, size in skip.items()})
    cursor, n = _catch_up(store, job, accountant, start)
    offsets = cursor.offsets if cursor is not None else {}
    return accountant, {k: v for k, v in offsets.items() if k in mine}, n


def _parallel_plan(
    store: EventStore, job: str, workers: int
) -> tuple[list[list[str]], dict[str, int]] | None:
    """Contiguous groups of streams (sorted names) of similar size, and each stream's size
    now; None when not worth it."""
    if not isinstance(store, JsonlStore) or workers < 2:
        return None
    base = store.job_dir(job)
    sizes = []
    for name in store.streams(job):
        try:
            sizes.append((name, (base / name).stat().st_size))
        except OSError:
            return None
    total = sum(size for _, size in sizes)
    if len(sizes) < 2 or total < PARALLEL_MIN_BYTES:
        return None
    # Each stream goes to the worker whose share of the bytes holds its midpoint: groups
    # stay contiguous (file order) and balanced, whatever the exact sizes.
    groups: list[list[str]] = [[] for _ in range(workers)]
    acc = 0
    for name, size in sizes:
        groups[min(workers - 1, int((acc + size / 2) * workers / total))].append(name)
        acc += size
    return [g for g in groups if g], dict(sizes)


def _parallel_allowed() -> bool:
    """Forking is safe only with no other thread alive (locks would be copied held)."""
    return (
        sys.platform.startswith("linux")
        and (os.cpu_count() or 1) >= 2
        and threading.active_count() == 1
    )


def _resolve(source: Source, job: str | None) -> tuple[EventStore, str]:
    if isinstance(source, (str, os.PathLike)):
        return open_source(os.fspath(source), job)
    if job is not None:
        return source, job
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
    ) -> None:
        self.store, self.job = _resolve(source, job)
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

    def update(self) -> int:
        """Read and ingest what was appended since the last call; return how many lines.

        Reads in slices of :data:`READ_SLICE_BYTES` so that only one slice of decoded
        events is alive at a time, whatever the size of the log. The first (cold)
        read of a large multi-file job is shared among processes when ``parallel``
        allows it (``None``: when it is safe and worth it; see :func:`_parallel_allowed`).
        """
        if self._cursor is None and self._parallel is not False:
            n = self._cold_parallel()
            if n is not None:
                return n + self.update()
        unread: list[Unread] = []
        self._cursor, n = _catch_up(
            self.store, self.job, self.accountant, self._cursor, self._on_progress, unread
        )
        now = time.monotonic()
        keys = {(u.source, u.line, u.size): u for u in unread if u.code == "torn_line"}
        self._torn_since = {k: self._torn_since.get(k, now) for k in keys}
        self._unread = unread
        return n

    def unread_diagnostics(self, *, final: bool = False) -> list[Diagnostic]:
        """Diagnostics for what the reads left alone (see :meth:`report`)."""
        now = time.monotonic()
        out: list[Diagnostic] = []
        for u in self._unread:
            if u.code == "unreadable":
                out.append(Diagnostic("unreadable_file", f"cannot be read: {u.detail}", u.source))
                continue
            if u.code == "not_a_file":
                why = f"is {u.detail}, not a regular file: not read"
                out.append(Diagnostic("not_a_file", why, u.source))
                continue
            since = self._torn_since.get((u.source, u.line, u.size), now)
            if not final and now - since < TORN_AFTER_SECONDS:
                continue  # a write in progress, most likely: read it once its newline comes
            if u.complete:
                why = "a complete event, but no newline ends it: not read"
            else:
                why = "the writer stopped mid-line (it died, or its disk filled): an event was lost"
            out.append(
                Diagnostic(
                    "torn_line",
                    f"last line has {u.size:,} bytes and no newline: {why}",
                    u.source,
                    u.line,
                )
            )
        return out

    def _cold_parallel(self) -> int | None:
        """Read each group of files in its own process and merge; None when not done."""
        workers = min(os.cpu_count() or 1, 4)
        found = _parallel_plan(self.store, self.job, workers)
        if found is None or (self._parallel is None and not _parallel_allowed()):
            return None
        assert isinstance(self.store, JsonlStore)  # the only store _parallel_plan splits
        plan, everything = found
        tasks = [
            (
                self.store,
                self.job,
                group,
                {k: v for k, v in everything.items() if k not in group},
                k * _SEQ_BLOCK,
            )
            for k, group in enumerate(plan)
        ]
        with multiprocessing.get_context("fork").Pool(len(tasks)) as pool:
            results = pool.starmap(_read_streams, tasks)
        merged = Accountant(self.job, ideal_step_time=self.accountant.ideal_step_time)
        merged.rank_options = self.rank_options
        offsets: dict[str, tuple[int, int]] = {}
        n = 0
        for accountant, their_offsets, count in results:  # in file order
            merged.merge(accountant)
            offsets.update(their_offsets)
            n += count
        self.accountant = merged
        self._cursor = Cursor(offsets)
        if self._on_progress is not None:
            self._on_progress(n)
        return n

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
        line within milliseconds). A ``*.jsonl`` that is a FIFO, socket or
        device is never opened and is reported as ``not_a_file``.
        """
        report = self.accountant.report(now=now, window=window, ideal_step_time=ideal_step_time)
        extra = self.unread_diagnostics(final=final)
        if not extra:
            return report
        return dataclasses.replace(report, diagnostics=[*report.diagnostics, *extra])


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
