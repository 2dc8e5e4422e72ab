"""The Accountant: ingest events incrementally, answer partition queries."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import numpy as np

from badput.engine._batch import Batch, JoinedRows
from badput.engine._cache import QueryCache
from badput.engine._cost import with_cost
from badput.engine._hung import newest_hang_timeout
from badput.engine._ingest import Ingestor
from badput.engine._model import Report
from badput.engine._origin import Run
from badput.engine._over_time import GOODPUT_BINS, GoodputSeries, goodput_over_time
from badput.engine._partition import compute_report, goodput_seconds, recent_step_times
from badput.engine._program import ProgramTracker, with_program
from badput.engine._program_time import MfuSeries, program_over_time
from badput.engine._rank_model import RankOptions
from badput.engine._rank_report import StallBuckets, with_ranks
from badput.engine._ranks import RankTracker
from badput.engine._segments import Typical
from badput.engine._snapshot import Snapshot, take
from badput.engine._steptime import DEFAULT_SLOWDOWN_FACTOR, StepTimeStats, step_time_stats
from badput.engine._timeline import Timeline, build_timeline
from badput.events import Chunk, DecodedColumns, Event, EventError, LeanEvent, Writer
from badput.runtime.gc_pause import gc_paused
from badput.runtime.heap import TRIM_AFTER_VALUES, give_back

__all__ = ["Accountant"]


class Accountant:
    """Keeps the compact state of one job's events and computes its :class:`Report`.

    Feed it what a store returns (:meth:`ingest`), in any number of calls and any
    split across files; ask for the partition as often as you like (:meth:`report`).
    Ingesting is O(new events); it does no I/O.

    >>> from badput.events import Event
    >>> acc = Accountant("demo", ideal_step_time=1.0)
    >>> acc.ingest_events([Event(ts=0.0, kind="job_start", job="demo"),
    ...                    Event(ts=0.0, kind="step_start", job="demo", step=1),
    ...                    Event(ts=1.0, kind="step_end", job="demo", step=1),
    ...                    Event(ts=1.0, kind="job_end", job="demo")])
    >>> acc.report().goodput
    1.0
    """

    def __init__(
        self,
        job: str | None = None,
        *,
        ideal_step_time: float | None = None,
        first_seq: int = 0,
    ) -> None:
        self._ing = Ingestor(job, first_seq=first_seq)
        self._cache = QueryCache()  # what a query leaves for the next; never changes a number
        # The state as of an earlier `now` (events stamped after it left out, §9.10) and its
        # cache, kept while the same `now` is asked again (a monitor cycle asks 3-4 queries).
        self._as_of: tuple[float, int, Ingestor, QueryCache] | None = None
        self.ideal_step_time = ideal_step_time
        self._ranks = RankTracker()
        self._program = ProgramTracker()  # step work and model events (program goodput)
        #: One device's peak FLOP/s and the device count, over the log's (program goodput)
        self.peak_flops: float | None = None
        self.devices: int | None = None
        #: Price of one device for an hour: each report's buckets in money (report.cost)
        self.price_per_device_hour: float | None = None
        # The stalls of the last report with the partition of their time, and what that
        # report was asked (the state, its size, now, ideal, typical, the stalls found).
        self._stall_buckets: StallBuckets | None = None
        #: Thresholds of the per-rank view, stragglers and stalls (docs/ranks.md).
        self.rank_options = RankOptions()

    @property
    def job(self) -> str | None:
        """The job accounted for (the first event's job when not given)."""
        return self._ing.job

    @property
    def n_events(self) -> int:
        """Events ingested so far (malformed lines and other jobs' events not counted)."""
        return self._ing.n_events

    @property
    def last_event_ts(self) -> float | None:
        """Timestamp of the newest event ingested, or ``None`` before any."""
        return self._ing.last_ts if self._ing.n_events else None

    def newest_in(self, source: str) -> float | None:
        """The newest time of the events ingested from ``source`` (a file), which a line
        read next is checked against for a clock step back; ``None`` before any."""
        return self._ing.newest_in(source)

    def shift_lines(self, source: str, by: int) -> None:
        """Number the lines read from ``source`` ``by`` further: what was read from a place
        inside it with lines counted from there (a parallel read's worker) is numbered
        from the file's start once the lines before that place are known."""
        self._ing.shift_lines(source, by)
        self._cache.clear()
        self._as_of = None

    def merge(self, other: Accountant) -> None:
        """Add what ``other`` ingested: other sources (files) of the same job, read after ours.

        Lets separate processes each read some of a job's files; the result is the
        same as one Accountant reading them all, ``self``'s files first.
        """
        self._ing.absorb(other._ing)
        self._ranks.absorb(other._ranks)
        self._program.absorb(other._program)
        self._cache.clear()
        self._as_of = None

    def ingest(self, chunks: Iterable[Chunk]) -> None:
        """Ingest the chunks of a store read (events and malformed-line errors)."""
        with gc_paused():
            self._ingest_chunks(chunks)

    def _ingest_chunks(self, chunks: Iterable[Chunk]) -> None:
        """All the chunks of one read as one batch: a read of many small files (a job of
        thousands of attempts) costs one pass over columns, not one per file. Malformed
        lines split runs; they are reported in line order with the other diagnostics."""
        events = JoinedRows()
        runs: list[Run] = []
        columns: list[DecodedColumns] | None = []  # the runs' while every chunk has them
        for chunk in chunks:
            items = chunk.rows  # lean events when the decoder made them (never materialised)
            if chunk.columns is None:
                columns = None
            clean = chunk.columns is not None and chunk.columns.clean  # the decoder knows
            if clean or EventError not in set(map(type, items)):  # the usual: one run of events
                _add_run(events, runs, chunk, 0, len(items), columns)
                continue
            begin = 0
            for i, item in enumerate(items):
                if isinstance(item, EventError):
                    _add_run(events, runs, chunk, begin, i, columns)
                    self._ing.malformed(item.message, item.file or chunk.source, item.line)
                    begin = i + 1
            _add_run(events, runs, chunk, begin, len(items), columns)
        rows = events.joined()
        self._ingest_batch(rows, runs, _joined(columns) if columns and rows else None)

    def ingest_events(self, events: Iterable[Event], source: str | None = None) -> None:
        """Ingest events that did not come from a store (tests, other tools)."""
        with gc_paused():
            run = list(events)
            self._ingest_batch(run, [Run(source, 1 if source else None, 0, len(run))])

    def _ingest_batch(
        self,
        events: Sequence[Event | LeanEvent],
        runs: list[Run],
        columns: DecodedColumns | None = None,
    ) -> None:
        """Events read together (``runs`` say from where): their columns are read once,
        for both trackers. ``columns``: what the decoder worked out of them, if it did."""
        if not events:
            return
        batch = Batch(events, [(run.begin, run.end) for run in runs], columns)
        self._ing.ingest_batch(batch, runs)
        self._ranks.ingest_batch(batch, self._ing.job)
        self._program.ingest_batch(batch, self._ing.job)

    def report(
        self,
        *,
        now: float | None = None,
        window: tuple[float, float] | None = None,
        ideal_step_time: float | None = None,
        typical: Typical = "median",
        ranks: bool = True,
    ) -> Report:
        """The partition as of ``now`` (live) or of the last event (offline).

        ``window=(a, b)`` restricts it to ``[a, b]``; ``ideal_step_time`` overrides
        the one given at construction (else the best sustained estimate is used);
        ``typical="mean"`` takes each segment's typical step time as the mean of its
        steps instead of the median (ml-goodput-measurement's startup rule).
        ``ranks``: add the per-rank view, stragglers and stalls (cumulative reports
        only; :attr:`rank_options` holds their thresholds).
        """
        with gc_paused():
            report = self._report(now, window, ideal_step_time, typical, ranks)
        report = with_program(report, self._program, self.peak_flops, self.devices)
        if self.price_per_device_hour is None:
            return report
        named = len({rank for _, rank in self._ranks.streams})  # one device per rank
        recorded = self._program.recorded("devices")
        return with_cost(report, self.price_per_device_hour, self.devices, recorded, named)

    def _report(
        self,
        now: float | None,
        window: tuple[float, float] | None,
        ideal_step_time: float | None,
        typical: Typical,
        ranks: bool,
    ) -> Report:
        ideal = ideal_step_time if ideal_step_time is not None else self.ideal_step_time
        ing, cache = self._state_as_of(now)

        def partition() -> Report:
            return compute_report(
                ing,
                now=now,
                window=window,
                ideal_step_time=ideal,
                typical=typical,
                cache=cache,
            )

        if window is not None or not ranks:
            return partition()
        values, streams = self._ranks.pending()
        if values >= BESIDE_MIN_VALUES and values >= BESIDE_MIN_VALUES_PER_STREAM * streams:
            # A few large streams: both passes are mostly numpy, which lets go of the
            # interpreter while it works, so the per-rank one runs in a thread beside the
            # partition (a million steps with a data load each: 0.35 s instead of 0.75 s).
            report = _beside(self._ranks.derive, partition)
            give_back()
        else:
            # The per-rank derivation first: its temporaries are gone before the
            # partition's are made, and handed back after a large pass (else they do not
            # all fit the partition's arrays, and the peak is higher).
            if self._ranks.derive() >= TRIM_AFTER_VALUES:
                give_back()
            report = partition()
        return self._with_ranks(report, ing, now, ideal, typical)

    def _with_ranks(
        self,
        report: Report,
        ing: Ingestor,
        now: float | None,
        ideal: float | None,
        typical: Typical,
    ) -> Report:
        """``report`` with the per-rank view, stragglers and stalls (:func:`with_ranks`)."""
        report, self._stall_buckets = with_ranks(
            report,
            ing,
            self._ranks,
            self.rank_options,
            kept=self._stall_buckets,
            asked=(now, ideal, typical),
        )
        return report

    @property
    def hang_timeout(self) -> float | None:
        """The hang timeout ``badput run --hang-timeout`` recorded on the newest attempt that
        has one (seconds), else None: the stall threshold its reports use."""
        return newest_hang_timeout(self._ing)

    def progress(self, attempt: str | int) -> tuple[float | None, float | None, float | None]:
        """``(last progress time, last event time of a process that made progress, typical
        step time)`` of one attempt, over every rank.

        Progress is a step, a recorded interval or a completed section, not a
        heartbeat (docs/ranks.md); ``None`` when the attempt has none yet.
        """
        return self._ranks.progress(str(attempt))

    def _state_as_of(self, now: float | None) -> tuple[Ingestor, QueryCache]:
        """The state a query at ``now`` sees, and the cache that goes with it."""
        if now is None or not now < self._ing.last_ts:
            return self._ing, self._cache
        kept = self._as_of
        if kept is None or kept[0] != now or kept[1] != self._ing.n_events:
            kept = self._as_of = (now, self._ing.n_events, self._ing.as_of(now), QueryCache())
        return kept[2], kept[3]

    def step_time_stats(
        self,
        *,
        now: float | None = None,
        last: int = 1100,
        ideal_step_time: float | None = None,
        slowdown_factor: float = DEFAULT_SLOWDOWN_FACTOR,
    ) -> StepTimeStats:
        """Deviation of the ``last`` most recent step times from the ideal step time."""
        ideal = ideal_step_time if ideal_step_time is not None else self.ideal_step_time
        ing, cache = self._state_as_of(now)
        times, ideal_used = recent_step_times(
            ing, last, now=now, ideal_step_time=ideal, cache=cache
        )
        return step_time_stats(times, ideal_used, slowdown_factor=slowdown_factor)

    def timeline(self, report: Report | None = None) -> Timeline:
        """Every step span and recorded interval, per attempt and rank, for drawing.

        ``report`` (default: :meth:`report` of the whole job) gives the attempts and the
        ideal step time the spans are coloured with; see :mod:`badput.engine._timeline`.
        """
        return build_timeline(self._ing, report if report is not None else self.report())

    def snapshot(
        self,
        *,
        now: float | None = None,
        report: Report | None = None,
        windows: Sequence[float] = (),
        step_time: bool = False,
        drawing: bool = False,
    ) -> Snapshot:
        """The one report object every view renders: see :func:`~badput.engine._snapshot.take`."""
        return take(self, now, report, windows, step_time=step_time, drawing=drawing)

    def goodput_seconds(
        self, window: tuple[float, float], ideal_step_time: float | None = None
    ) -> tuple[float, float, float]:
        """``(productive, slowdown, total)`` seconds of ``window``: its goodput's figures."""
        ideal = self.ideal_step_time if ideal_step_time is None else ideal_step_time
        with gc_paused():
            return goodput_seconds(self._ing, window, ideal_step_time=ideal, cache=self._cache)

    def goodput_over_time(self, report: Report, bins: int = GOODPUT_BINS) -> GoodputSeries:
        """Goodput over ``report``'s span: :func:`badput.engine._over_time.goodput_over_time`."""
        return goodput_over_time(self, report, bins)

    def mfu_over_time(
        self, report: Report, timeline: Timeline, series: GoodputSeries
    ) -> MfuSeries | None:
        """MFU over ``series``' windows, or None (``_program_time.program_over_time``)."""
        return program_over_time(self._program, report, timeline, series)


#: A report's per-rank derivation of at least this many new values, ...
BESIDE_MIN_VALUES: Final = 1 << 20
#: ... and as many per stream on average, runs beside its partition (:func:`_beside`).
#: Many small streams (10,000 attempts) make a pass of Python more than of numpy: there a
#: thread would only take turns with the partition.
BESIDE_MIN_VALUES_PER_STREAM: Final = 1 << 16


_helpers = threading.local()  # per calling thread: .seconds, its helper threads' CPU time


def cpu_time_with_helpers() -> float:
    """This thread's CPU time (``time.thread_time``) and that of the helper threads its
    queries ran (the per-rank analysis beside a partition: :func:`_beside`), so far: what
    its queries cost, wherever they ran."""
    return time.thread_time() + getattr(_helpers, "seconds", 0.0)


def _beside(side: Callable[[], object], main: Callable[[], Report]) -> Report:
    """``main()``, with ``side()`` run in a thread meanwhile; ``side``'s exception, if any,
    is raised once both are done (``main``'s first). The thread's CPU time is added to
    the caller's helpers' (:func:`cpu_time_with_helpers`)."""
    failed: list[BaseException] = []
    spent = [0.0]

    def run() -> None:
        t0 = time.thread_time()
        try:
            side()
        except BaseException as exc:  # handed to the caller below
            failed.append(exc)
        finally:
            spent[0] = time.thread_time() - t0

    worker = threading.Thread(target=run, name="badput-ranks", daemon=True)
    worker.start()
    try:
        report = main()
    finally:
        _join(worker)
        _helpers.seconds = getattr(_helpers, "seconds", 0.0) + spent[0]
    if failed:
        raise failed[0]
    return report


def _join(worker: threading.Thread) -> None:
    """Wait for ``worker`` to end, even when the wait is interrupted (Ctrl-C): the state it
    works on is the caller's, and must not change under a query that follows. The
    interruption is raised once it has ended."""
    interrupted: BaseException | None = None
    while True:
        try:
            worker.join()
            break
        except BaseException as exc:  # KeyboardInterrupt while waiting: wait on, then raise
            interrupted = exc
    if interrupted is not None:
        raise interrupted


def _joined(columns: list[DecodedColumns]) -> DecodedColumns:
    """The runs' columns as one batch's: their writer when they all have the same, each
    item's when every run says its own (runs of files each of one writer, an archive's
    rows of several: the engine reads no writer event by event), else neither."""
    if len(columns) == 1:
        return columns[0]
    writer = columns[0].writer
    writers = None
    if writer is None or any(c.writer != writer for c in columns):
        writer = None  # several writers (or events read in full)
        writers = _writers_joined(columns)
    fields: frozenset[str] | None = frozenset()
    for c in columns:
        fields = None if fields is None or c.fields is None else fields | c.fields
    return DecodedColumns(
        np.concatenate([c.kinds for c in columns]),
        np.concatenate([c.steps for c in columns]),
        writer,
        work=any(c.work for c in columns),
        fields=fields,
        ts=None if any(c.ts is None for c in columns) else np.concatenate([c.ts for c in columns]),
        writers=writers,
    )


def _writers_joined(columns: list[DecodedColumns]) -> tuple[Any, tuple[Writer, ...]] | None:
    """Each item's writer over ``columns`` (:attr:`DecodedColumns.writers`), when each of
    them knows its items' (one writer, or each item's); None otherwise."""
    index: list[Any] = []
    writers: list[Writer] = []
    for c in columns:
        n = int(c.kinds.shape[0])
        if c.writer is not None:
            index.append(np.full(n, len(writers), np.int32))
            writers.append(c.writer)
        elif c.writers is not None:
            index.append(c.writers[0] + np.int32(len(writers)))
            writers += c.writers[1]
        else:
            return None
    return np.concatenate(index), tuple(writers)


def _add_run(  # noqa: PLR0917 (the pieces of one run, all needed)
    events: JoinedRows,
    runs: list[Run],
    chunk: Chunk,
    begin: int,
    end: int,
    columns: list[DecodedColumns] | None,
) -> None:
    """Append ``chunk.rows[begin:end]`` (events only) to ``events`` as one run, and their
    decoded columns to ``columns`` (when not None: every chunk so far had them)."""
    if end > begin:
        first = len(events)
        runs.append(Run(chunk.source, chunk.first_line + begin, first, first + end - begin))
        events.add(chunk.rows[begin:end])  # type: ignore[arg-type]  # no error in begin:end
        if columns is not None and chunk.columns is not None:
            columns.append(chunk.columns.rows(begin, end))
