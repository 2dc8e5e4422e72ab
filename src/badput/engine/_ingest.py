"""Ingest: route events into compact per-stream state, in O(1) per event.

Nothing here computes the partition; it only keeps what the partition needs,
in a form that costs a few bytes per step (``array`` columns, not objects).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from badput.engine._batch import Batch
from badput.engine._intervals import Marks
from badput.engine._pack import pack, unpack
from badput.events import (
    KIND_CODE,
    KIND_NAMES,
    KINDS,
    LIFECYCLE_KINDS,
    NAMED_INTERVAL_KINDS,
    Event,
    Kind,
    LeanEvent,
    bucket_of,
    interval_base,
)

__all__ = [
    "DiagnosticLog",
    "LifecycleEvent",
    "MarkLog",
    "NameTable",
    "RestoreMark",
    "Run",
    "StepLog",
    "Stream",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

# A file whose clock steps back by more than this between consecutive lines is reported.
CLOCK_BACKWARDS_TOLERANCE = 1e-3
_NOTHING = object()  # matches no attempt or rank
# Diagnostics kept per code; the rest are counted.
MAX_DIAGNOSTICS_PER_CODE = 20


class StepLog:
    """Columns of one stream's step events, in arrival order (a few bytes a step).

    Rows out of time order are sorted (stably, so arrival breaks ties) at query time.
    """

    __slots__ = ("_checked", "_unsorted", "is_end", "step", "ts")

    def __init__(self) -> None:
        self.ts = array("d")
        self.step = array("q")
        self.is_end = array("b")
        self._checked = 0  # rows already checked for time order
        self._unsorted = False

    def __len__(self) -> int:
        return len(self.ts)

    def append_checked(
        self, ts: bytes, step: bytes, is_end: bytes, first_ts: float, descends: bool
    ) -> None:
        """Append rows given as the bytes of their columns, whose time order the caller
        checked: ``descends``, whether one is earlier than the one before it among them;
        ``first_ts``, the first one's time (against the last row before them). Spares
        :attr:`unsorted` a look at each new row (a report of 10,000 attempts asks it of
        10,000 logs of a few dozen rows)."""
        checked = self._checked == len(self.ts)
        if checked and not self._unsorted:
            self._unsorted = descends or (len(self.ts) > 0 and first_ts < self.ts[-1])
        self.ts.frombytes(ts)
        self.step.frombytes(step)
        self.is_end.frombytes(is_end)
        if checked:
            self._checked = len(self.ts)

    def recheck(self) -> None:
        """Rows were added in bulk: check their time order again from the start."""
        self._checked = 0
        self._unsorted = False

    @property
    def unsorted(self) -> bool:
        """Whether any row came earlier in time than the one before it (checks new rows only)."""
        n = len(self.ts)
        if not self._unsorted and n - self._checked > 0:
            a = np.frombuffer(self.ts, dtype=np.float64)[max(self._checked - 1, 0) :]
            self._unsorted = bool((a[1:] < a[:-1]).any())
            self._checked = n
        return self._unsorted


@dataclass(slots=True)
class RestoreMark:
    ts: float
    seq: int
    step: int
    is_end: bool


class NameTable:
    """Distinct names, each stored once; a column holds their codes (a bucket such as
    ``custom:eval``, a source file), so a million marks keep four bytes each, not a string."""

    __slots__ = ("_codes", "names")

    def __init__(self) -> None:
        self.names: list[str] = []
        self._codes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.names)

    def code(self, name: str) -> int:
        """The code of ``name`` (added when new)."""
        found = self._codes.get(name)
        if found is None:
            found = self._codes[name] = len(self.names)
            self.names.append(name)
        return found

    def known(self, names: Iterable[str]) -> list[int]:
        """The codes of those of ``names`` seen so far (asking adds none)."""
        return [self._codes[n] for n in names if n in self._codes]

    def codes_of(self, other: NameTable) -> npt.NDArray[np.int32]:
        """Our code for each of ``other``'s codes, then -1 (for its index -1: none)."""
        return np.array([self.code(n) for n in other.names] + [-1], np.int32)


class MarkLog:
    """Columns of one stream's interval marks (``*_start``/``*_end``), in arrival order.

    A few bytes a mark, no object per mark: bucket and source are codes into the
    Ingestor's tables. A parallel read pickles these columns as they are.
    """

    __slots__ = (
        "_time_order",
        "blocking",
        "bucket",
        "is_start",
        "line",
        "seq",
        "source",
        "ts",
        "unsorted",
    )

    def __init__(self) -> None:
        self.ts = array("d")
        self.seq = array("q")  # arrival order: ties in ts keep file/line order
        self.bucket = array("i")
        self.is_start = array("b")
        self.blocking = array("b")
        self.line = array("i")  # -1: unknown (or past 2**31 - 1: no log has that many lines)
        self.source = array("i")  # -1: unknown
        self.unsorted = False  # whether a mark came earlier in time than the one before
        # (marks ordered, their order, their times in it, the greatest seq): see time_order
        self._time_order: tuple[int, npt.NDArray[np.signedinteger[Any]], F64, int] | None = None

    def __len__(self) -> int:
        return len(self.ts)

    def time_order(self) -> tuple[npt.NDArray[np.signedinteger[Any]], F64]:
        """The marks' ``(ts, seq)`` order (int32 below 2**31 marks) and their times in that
        order: views valid until the log grows (a query's; the next query's order is
        written over them).

        Kept: the marks that arrived since are sorted among themselves and merged in (a
        running rank written by two processes, whose marks arrive out of order at every
        look of a monitor: two million marks were sorted again at every look, 25 ms). A
        merge writes from the first place a new mark goes on, in buffers kept with room
        to grow (new ones of 24 MB a look cost as much again in page faults). It keeps the
        order of one sort when the new marks came after every mark ordered before (their
        ``seq`` greater: ties in ``ts`` go after); else, and when nothing is kept, all of
        them are sorted."""
        n = len(self.ts)
        ts = np.frombuffer(self.ts, np.float64) if n else np.zeros(0)
        seq = np.frombuffer(self.seq, np.int64) if n else np.zeros(0, np.int64)
        kept = self._time_order
        if kept is not None and kept[0] == n:
            return kept[1][:n], kept[2][:n]
        if kept is not None and kept[0] < n < 2**31:
            m, order, times, top = kept
            new_seq = seq[m:]
            if int(new_seq.min()) > top:
                new_ts = ts[m:]
                own = np.lexsort((new_seq, new_ts))
                new_times = new_ts[own]
                at = times[:m].searchsorted(new_times, "right")
                lo = int(at[0])
                tail_order = np.insert(order[lo:m], at - lo, (own + m).astype(order.dtype))
                tail_times = np.insert(times[lo:m], at - lo, new_times)
                if n > len(order):  # room for twice as many
                    order = np.concatenate((order[:lo], np.empty(2 * n - lo, order.dtype)))
                    times = np.concatenate((times[:lo], np.empty(2 * n - lo)))
                order[lo:n], times[lo:n] = tail_order, tail_times
                self._time_order = (n, order, times, int(new_seq.max()))
                return order[:n], times[:n]
        order = np.lexsort((seq, ts))
        if n < 2**31:  # kept: half the bytes
            order = order.astype(np.int32)
        times = ts[order]
        self._time_order = (n, order, times, int(seq.max()) if n else -1)
        return order, times

    def columns(self) -> Marks:
        """The marks as numpy columns, in ``(ts, seq)`` order (views when they arrived so)."""
        marks = self.raw()
        return marks.sorted() if self.unsorted else marks

    def raw(self) -> Marks:
        """The marks as numpy columns (views) in arrival order."""
        if not len(self.ts):
            return Marks.empty()
        return Marks(
            np.frombuffer(self.ts, np.float64),
            np.frombuffer(self.seq, np.int64),
            np.frombuffer(self.bucket, np.int32),
            np.frombuffer(self.is_start, np.bool_),
            np.frombuffer(self.blocking, np.bool_),
            np.frombuffer(self.line, np.int32),
            np.frombuffer(self.source, np.int32),
        )

    def append_columns(self, marks: Marks) -> None:
        """Add marks (in arrival order)."""
        n = len(marks)
        if n:
            stored = _MarkBytes(marks)
            stored.append_to(self, 0, n, _MarkBytes.out_of_order(marks.ts, [0], [n])[0])

    def shift_lines(self, source: int, by: int) -> None:
        """Number the known lines of marks of source code ``source`` ``by`` further (one
        past 2**31 - 1 becomes unknown, as when ingested)."""
        if not len(self.ts):
            return
        line = np.frombuffer(self.line, np.int32).astype(np.int64)
        at = (np.frombuffer(self.source, np.int32) == source) & (line >= 0)
        if not at.any():
            return
        line[at] += by
        line[line > _MAX_LINE] = -1
        self.line = array("i", line.astype(np.int32).tobytes())

    def recode(self, buckets: npt.NDArray[np.int32], sources: npt.NDArray[np.int32]) -> None:
        """Map bucket and source codes through ``buckets``/``sources`` (index -1: none)."""
        if len(self.ts):
            bucket = buckets[np.frombuffer(self.bucket, np.int32)]
            source = sources[np.frombuffer(self.source, np.int32)]
            self.bucket = array("i", bucket.tobytes())
            self.source = array("i", source.tobytes())


#: ``Stream.writer`` of a stream no event was routed to yet (a process id is an int or None)
NO_WRITER = "no writer yet"

#: A writer of a stream silent this long (job seconds) before its newest event is taken to
#: have stopped (:meth:`Stream.settled_before`): a launcher's few events, a loader that
#: ended. Should it write again before what was sealed, the rows are computed again.
WRITER_QUIET_AFTER = 300.0


@dataclass
class Stream:
    """Everything one (attempt, rank) wrote that the partition needs."""

    attempt: str | None = None
    rank: int = 0
    steps: StepLog = field(default_factory=StepLog)
    marks: MarkLog = field(default_factory=MarkLog)
    restores: list[RestoreMark] = field(default_factory=list)
    # (ts, step, committed) of checkpoint_save_end and checkpoint_committed events
    checkpoints: list[tuple[float, int, bool]] = field(default_factory=list)
    # times of every other event (lifecycle, heartbeats...; not steps, not interval marks,
    # which have their own columns), so a view "as of t" is exact
    other_ts: array[float] = field(default_factory=lambda: array("d"))
    first_ts: float = math.inf
    last_ts: float = -math.inf
    # Its writer (process id as written) while it has one; once it has two or more, the
    # newest event of each (None until then: a job of 10,000 attempts has 10,000 streams)
    writer: object = NO_WRITER
    writers: dict[object, float] | None = None

    def saw(self, writer: object, newest: float) -> None:
        """``writer`` wrote an event at ``newest`` (a stream of several writers)."""
        if self.writers is None:
            self.writers = {}
        old = self.writers.get(writer)
        if old is None or newest > old:
            self.writers[writer] = newest

    def settled_before(self) -> float:
        """A time before which no more events are expected: the oldest of the newest
        events of the writers that wrote within :data:`WRITER_QUIET_AFTER` of the newest
        (each writes in time order). Two processes of one rank whose files are read at
        different moments: the one read less recently may still add events before the
        newest of the other, not before its own newest. Sealed rows end before it, so
        that what the slower writer adds does not unseal them (each cycle of a monitor
        sealing the running attempt, then finding it stale and computing it whole)."""
        if self.writers is None or len(self.writers) < 2:
            return math.inf
        newest = max(self.writers.values())
        return min(t for t in self.writers.values() if t >= newest - WRITER_QUIET_AFTER)

    @property
    def has_work(self) -> bool:
        return bool(len(self.steps.ts) or len(self.marks.ts))

    def sizes(self) -> tuple[int, int, int, int, int]:
        """How many step events, marks, restores, checkpoints and other events it holds
        (what a closed attempt's memo is keyed by: read from the columns themselves, as a
        query of 10,000 attempts asks it of each)."""
        return (
            len(self.steps.ts),
            len(self.marks.ts),
            len(self.restores),
            len(self.checkpoints),
            len(self.other_ts),
        )

    def has_work_in(self, lo: float, hi: float, until: float) -> bool:
        """Whether a step or interval event falls in ``[lo, hi)`` and at or before ``until``."""
        top = min(hi, math.nextafter(until, math.inf))
        if top <= lo:
            return False
        if len(self.steps.ts):
            if self.steps.unsorted:
                ts = np.frombuffer(self.steps.ts, dtype=np.float64)
                if bool(((ts >= lo) & (ts < top)).any()):
                    return True
            # sorted: two bisections of the column itself (a numpy view costs more here)
            elif bisect.bisect_left(self.steps.ts, lo) < bisect.bisect_left(self.steps.ts, top):
                return True
        if not len(self.marks):
            return False
        mark_ts = np.frombuffer(self.marks.ts, dtype=np.float64)
        if self.marks.unsorted:
            return bool(((mark_ts >= lo) & (mark_ts < top)).any())
        return bool(mark_ts.searchsorted(lo, "left") < mark_ts.searchsorted(top, "left"))

    def as_of(self, t: float) -> Stream:
        """This stream with every event stamped after ``t`` left out."""
        out = Stream(attempt=self.attempt, rank=self.rank)
        ts = np.frombuffer(self.steps.ts, dtype=np.float64)
        keep = ts <= t
        out.steps.ts = array("d", ts[keep].tobytes())
        out.steps.step = array("q", np.frombuffer(self.steps.step, dtype=np.int64)[keep].tobytes())
        out.steps.is_end = array(
            "b", np.frombuffer(self.steps.is_end, dtype=np.int8)[keep].tobytes()
        )
        marks = self.marks.raw()
        marks = marks.take(np.flatnonzero(marks.ts <= t))
        out.marks.append_columns(marks)
        out.restores = [r for r in self.restores if r.ts <= t]
        out.checkpoints = [c for c in self.checkpoints if c[0] <= t]
        other = np.frombuffer(self.other_ts, dtype=np.float64)
        out.other_ts = array("d", other[other <= t].tobytes())
        both = np.concatenate((ts[keep], other[other <= t], marks.ts))
        if both.shape[0]:
            out.first_ts, out.last_ts = float(both.min()), float(both.max())
        return out


class LifecycleEvent(NamedTuple):
    """A job_start, job_end, attempt_end or job_scheduled, as the partition reads it (a
    tuple: made for every attempt's start and end, 0.3 µs against 1.2 µs as a frozen
    dataclass)."""

    ts: float
    seq: int
    kind: str
    attempt: str | None
    host: str | None
    rank: int | None
    status: str | None
    exit_code: int | None
    source: str | None
    line: int | None
    hang_timeout: float | None = None  # a launcher's job_start (``badput run --hang-timeout``)


@dataclass
class DiagnosticLog:
    """Diagnostics found while ingesting, capped per code (the rest counted)."""

    entries: dict[str, list[tuple[str, str | None, int | None]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, code: str, message: str, source: str | None, line: int | None) -> None:
        n = self.counts.get(code, 0)
        self.counts[code] = n + 1
        if n < MAX_DIAGNOSTICS_PER_CODE:
            self.entries.setdefault(code, []).append((message, source, line))


class Run(NamedTuple):
    """Events ``begin:end`` of a batch are consecutive lines of ``source``, the first of
    them line ``first_line`` (``None``: events that did not come from a file)."""

    source: str | None
    first_line: int | None
    begin: int
    end: int


class _Origin:
    """Where each event of a batch comes from: its source and line (from its runs)."""

    def __init__(self, runs: Sequence[Run], ing: Ingestor) -> None:
        self.runs = runs
        self.begins = np.array([r.begin for r in runs], np.int64)
        self._ing = ing
        self._per_run: tuple[I64, npt.NDArray[np.bool_], npt.NDArray[np.int32]] | None = None
        self._begins: list[int] | None = None  # for lookups of one event (a list is faster)

    def run_of(self, i: int) -> Run:
        if self._begins is None:
            self._begins = [r.begin for r in self.runs]
        return self.runs[bisect.bisect_right(self._begins, i) - 1]

    def where(self, i: int) -> tuple[str | None, int | None]:
        """The source and line of the batch's event ``i``."""
        run = self.run_of(i) if len(self.runs) > 1 else self.runs[0]
        return run.source, None if run.first_line is None else run.first_line + i - run.begin

    def where_many(self, positions: npt.NDArray[np.intp]) -> list[tuple[str | None, int | None]]:
        """:meth:`where` of each of ``positions``."""
        if not positions.shape[0]:
            return []
        which = np.searchsorted(self.begins, positions, "right") - 1
        runs = self.runs
        return [
            (run.source, None if run.first_line is None else run.first_line + p - run.begin)
            for run, p in zip([runs[w] for w in which.tolist()], positions.tolist(), strict=True)
        ]

    def first_of_each_run(self, positions: npt.NDArray[np.intp]) -> list[int]:
        """The first of ``positions`` (sorted) in each run that has one."""
        which = np.searchsorted(self.begins, positions, "right") - 1
        heads = np.flatnonzero(np.concatenate(([True], which[1:] != which[:-1])))
        return [int(p) for p in positions[heads].tolist()] if positions.shape[0] else []

    def spans(self, positions: npt.NDArray[np.intp]) -> list[tuple[str | None, int, int]]:
        """For each run: its source and the slice of ``positions`` (sorted) inside it."""
        if len(self.runs) == 1:
            return [(self.runs[0].source, 0, int(positions.shape[0]))]
        cuts = [*np.searchsorted(positions, self.begins).tolist(), int(positions.shape[0])]
        return [
            (run.source, cuts[k], cuts[k + 1])
            for k, run in enumerate(self.runs)
            if cuts[k + 1] > cuts[k]
        ]

    def lines_and_sources(
        self, positions: npt.NDArray[np.intp]
    ) -> tuple[I64, npt.NDArray[np.int32]]:
        """Line (-1: unknown) and source code (-1: none) of the events at ``positions``."""
        if len(self.runs) == 1:
            which = np.zeros(positions.shape[0], np.intp)
        else:
            which = np.searchsorted(self.begins, positions, "right") - 1
        if self._per_run is None:  # once per batch: a batch may hold thousands of runs
            self._per_run = (
                np.array(
                    [-1 if r.first_line is None else r.first_line - r.begin for r in self.runs],
                    np.int64,
                ),
                np.array([r.first_line is not None for r in self.runs], np.bool_),
                np.array(
                    [
                        -1 if r.source is None else self._ing.sources.code(r.source)
                        for r in self.runs
                    ],
                    np.int32,
                ),
            )
        firsts, known, codes = self._per_run
        line = np.where(known[which], positions + firsts[which], -1)
        return line.astype(np.int64), codes[which]


def _unknown_kind_message(kind: str) -> str:
    return f"unknown event kind {kind!r} (kept, ignored by the accounting)"


def _fits(step: int) -> bool:
    return -(2**63) <= step < 2**63


def _join_writers(mine: Stream, theirs: Stream) -> None:
    """``mine`` (read first) and ``theirs`` (its later events, read by another process),
    one stream: their writers together."""
    if theirs.writer == NO_WRITER:
        return
    if mine.writer == NO_WRITER:
        mine.writer, mine.writers = theirs.writer, theirs.writers
        return
    if mine.writers is None and theirs.writers is None and mine.writer == theirs.writer:
        return
    if mine.writers is None:
        mine.writers = {mine.writer: mine.last_ts} if mine.last_ts > -math.inf else {}
    if theirs.writers is None:
        if theirs.last_ts > -math.inf:
            mine.saw(theirs.writer, theirs.last_ts)
    else:
        for writer, newest in theirs.writers.items():
            mine.saw(writer, newest)
    mine.writer = theirs.writer


def _span_extremes(ts: F64, bounds: list[int]) -> tuple[list[float], list[float]]:
    """Least and greatest of ``ts[bounds[k]:bounds[k + 1]]`` for every k, NaN left out
    (inf and -inf when there is none)."""
    n = len(bounds) - 1
    lo, hi = [math.inf] * n, [-math.inf] * n
    cut = np.asarray(bounds, np.intp)
    full = np.flatnonzero(cut[1:] > cut[:-1])
    if full.shape[0]:
        at = cut[full]
        mins = np.fmin.reduceat(ts, at).tolist()
        maxs = np.fmax.reduceat(ts, at).tolist()
        for k, x, y in zip(full.tolist(), mins, maxs, strict=True):
            if not math.isnan(x):  # the span has a counted row
                lo[k], hi[k] = x, y
    return lo, hi


class _MarkBytes:
    """Interval-mark columns as the bytes a :class:`MarkLog` stores, so that marks are
    appended as slices of bytes (a batch's, sorted by stream: a slice per stream)."""

    __slots__ = ("_cols", "_ts")

    def __init__(self, marks: Marks) -> None:
        line32 = np.where(marks.line <= _MAX_LINE, marks.line, -1).astype(np.int32)
        self._cols = (
            marks.ts.astype(np.float64, copy=False).tobytes(),
            marks.seq.astype(np.int64, copy=False).tobytes(),
            marks.bucket.astype(np.int32, copy=False).tobytes(),
            marks.is_start.astype(np.int8).tobytes(),
            marks.blocking.astype(np.int8).tobytes(),
            line32.tobytes(),
            marks.source.astype(np.int32, copy=False).tobytes(),
        )
        self._ts = marks.ts

    @staticmethod
    def out_of_order(ts: F64, begin: list[int], end: list[int]) -> list[bool]:
        """For each span ``ts[begin[k]:end[k]]`` (in order, disjoint), whether a row is
        earlier in time than the row before it."""
        descents = np.concatenate(([0], np.cumsum(ts[1:] < ts[:-1])))
        top = descents.shape[0] - 1  # an empty span may begin at the end
        first = np.minimum(np.asarray(begin, np.intp), top)
        last = np.clip(np.asarray(end, np.intp) - 1, first, top)
        out: list[bool] = (descents[last] > descents[first]).tolist()
        return out

    def append_to(self, log: MarkLog, b: int, c: int, descends: bool) -> None:
        """Add rows ``[b, c)`` to ``log`` (in arrival order); ``descends``: whether they are
        out of time order (:meth:`out_of_order`)."""
        if not log.unsorted and (descends or (len(log.ts) and self._ts[b] < log.ts[-1])):
            log.unsorted = True
        ts, seq, bucket, is_start, blocking, line, source = self._cols
        log.ts.frombytes(ts[8 * b : 8 * c])
        log.seq.frombytes(seq[8 * b : 8 * c])
        log.bucket.frombytes(bucket[4 * b : 4 * c])
        log.is_start.frombytes(is_start[b:c])
        log.blocking.frombytes(blocking[b:c])
        log.line.frombytes(line[4 * b : 4 * c])
        log.source.frombytes(source[4 * b : 4 * c])


class Ingestor:
    """Turns events into :class:`Stream` state; the Accountant owns one."""

    def __init__(self, job: str | None, *, first_seq: int = 0) -> None:
        self.job = job
        self.streams: dict[tuple[str | None, int], Stream] = {}
        self.lifecycle: list[LifecycleEvent] = []
        self.checkpoints_saved = array("q")  # steps of checkpoint_save_end
        self.checkpoints_committed = array("q")  # steps of checkpoint_committed
        self.idless_ts = array("d")  # ts of non-step events without attempt id
        self.first_idless: tuple[str | None, int | None] | None = None  # where one was seen
        self.n_events = 0
        self.diagnostics = DiagnosticLog()
        self.unknown_kinds: dict[str, int] = {}
        self._seq = first_seq
        self._source_last_ts: dict[str, float] = {}
        self._by_raw: dict[tuple[object, int | None], Stream] = {}
        #: Interval buckets and sources by code (the marks' columns hold codes).
        self.buckets = NameTable()
        self.sources = NameTable()

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle keeps: the streams packed by field (:mod:`._pack`: a parallel
        read's worker sends its state of thousands of streams back in a few columns);
        ``_by_raw`` as places among them (it names the same streams)."""
        state = dict(vars(self))
        streams = list(self.streams.values())
        place = {id(s): i for i, s in enumerate(streams)}
        if any(id(s) not in place for s in self._by_raw.values()):
            return state  # not expected; pickled as it is
        state["streams"] = (list(self.streams), pack(streams))
        state["_by_raw"] = [(raw, place[id(s)]) for raw, s in self._by_raw.items()]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state["streams"], tuple):
            keys, packed = state["streams"]
            streams = unpack(packed)
            state["streams"] = dict(zip(keys, streams, strict=True))
            state["_by_raw"] = {raw: streams[i] for raw, i in state["_by_raw"]}
        vars(self).update(state)

    def shift_lines(self, source: str, by: int) -> None:
        """See ``Accountant.shift_lines``: every line number of ``source`` kept anywhere
        (diagnostics, lifecycle events, interval marks, the first id-less event)."""
        if not by:
            return

        def moved(where: str | None, line: int | None) -> int | None:
            return line + by if where == source and line is not None else line

        for entries in self.diagnostics.entries.values():
            entries[:] = [(msg, where, moved(where, line)) for msg, where, line in entries]
        self.lifecycle = [
            e._replace(line=moved(e.source, e.line)) if e.source == source else e
            for e in self.lifecycle
        ]
        if self.first_idless is not None:
            where, line = self.first_idless
            self.first_idless = (where, moved(where, line))
        codes = self.sources.known([source])
        if not codes:
            return
        code = codes[0]
        for stream in self.streams.values():
            stream.marks.shift_lines(code, by)

    def absorb(self, other: Ingestor) -> None:
        """Add the state of ``other``, which ingested *later* sources of the same job.

        Used to merge the work of processes that each read different files: the
        states concatenate. ``other``'s arrival numbers must all be above ours (give
        it a higher ``first_seq``), so ties in time still break by file order.
        """
        if other.job is not None and self.job is not None and other.job != self.job:
            raise ValueError(f"cannot merge job {other.job!r} into job {self.job!r}")
        self.job = self.job or other.job
        buckets = self.buckets.codes_of(other.buckets)
        sources = self.sources.codes_of(other.sources)
        for theirs in other.streams.values():  # their codes, in our tables
            theirs.marks.recode(buckets, sources)
        for key, theirs in other.streams.items():
            mine = self.streams.get(key)
            if mine is None:
                self.streams[key] = theirs
                continue
            mine.steps.ts.extend(theirs.steps.ts)
            mine.steps.step.extend(theirs.steps.step)
            mine.steps.is_end.extend(theirs.steps.is_end)
            mine.steps.recheck()
            mine.marks.append_columns(theirs.marks.raw())
            mine.marks.unsorted |= theirs.marks.unsorted
            mine.restores.extend(theirs.restores)
            mine.checkpoints.extend(theirs.checkpoints)
            mine.other_ts.extend(theirs.other_ts)
            mine.first_ts = min(mine.first_ts, theirs.first_ts)
            mine.last_ts = max(mine.last_ts, theirs.last_ts)
            _join_writers(mine, theirs)
        # Their writers, to our streams (ours are kept: each names the stream of its key).
        # Not rebuilt whole: a parallel read merges dozens of parts of 10,000 attempts.
        for raw, st in other._by_raw.items():
            self._by_raw[raw] = self.streams[(st.attempt, st.rank)]
        self.lifecycle.extend(other.lifecycle)
        self.checkpoints_saved.extend(other.checkpoints_saved)
        self.checkpoints_committed.extend(other.checkpoints_committed)
        self.idless_ts.extend(other.idless_ts)
        self.first_idless = self.first_idless or other.first_idless
        self.n_events += other.n_events
        # An unknown kind is reported once, where it first appears: not again from `other`.
        seen = {_unknown_kind_message(kind) for kind in self.unknown_kinds}
        for code, entries in other.diagnostics.entries.items():
            for message, source, line in entries:
                if code == "unknown_kind" and message in seen:
                    other.diagnostics.counts[code] -= 1
                    continue
                self.diagnostics.add(code, message, source, line)
        for code, count in other.diagnostics.counts.items():
            kept = len(
                [
                    e
                    for e in other.diagnostics.entries.get(code, [])
                    if code != "unknown_kind" or e[0] not in seen
                ]
            )
            self.diagnostics.counts[code] = self.diagnostics.counts.get(code, 0) + count - kept
        for kind, count in other.unknown_kinds.items():
            self.unknown_kinds[kind] = self.unknown_kinds.get(kind, 0) + count
        self._seq = max(self._seq, other._seq)
        self._source_last_ts.update(other._source_last_ts)

    def stream(self, attempt: str | None, rank: int) -> Stream:
        key = (attempt, rank)
        s = self.streams.get(key)
        if s is None:
            s = self.streams[key] = Stream(attempt=attempt, rank=rank)
        return s

    def malformed(self, message: str, source: str | None, line: int | None) -> None:
        self.diagnostics.add("malformed_line", message, source, line)

    def ingest(self, events: list[Event], source: str | None, first_line: int | None) -> None:
        """Ingest consecutive lines of one source (``first_line`` is the line of ``events[0]``)."""
        if events:
            self.ingest_batch(Batch(events), [Run(source, first_line, 0, len(events))])

    def ingest_batch(self, batch: Batch, runs: Sequence[Run]) -> None:
        """Ingest a :class:`Batch`: ``runs`` say which of its events are consecutive lines
        of which source (in order, covering the batch; a batch may hold many small files).

        Runs once per event of a log (millions): everything is done on the batch's
        columns; single events are looked at only for the rare kinds (lifecycle,
        checkpoints, restores, unknown kinds) and bad steps. Everything that can wait
        for a query waits.
        """
        n = batch.n
        if n == 0:
            return
        origin = _Origin(runs, self)
        if self.job is None:
            self.job = batch.events[0].job
        job = self.job
        mine = batch.same_job(job)
        if mine is not None:
            self._foreign(batch, np.flatnonzero(~mine), origin, job)
            pos: npt.NDArray[np.intp] = np.flatnonzero(mine)
            if not pos.shape[0]:
                return
            ts, kind, group = batch.ts[pos], batch.kind[pos], batch.group[pos]
        else:
            pos = np.arange(n)
            ts, kind, group = batch.ts, batch.kind, batch.group
        m = int(pos.shape[0])
        self.n_events += m
        self._check_clock(ts, pos, origin)

        is_step = (kind == _STEP_START) | (kind == _STEP_END)
        other = ~is_step
        seq = self._seq + np.cumsum(other)  # arrival order of non-step events
        self._seq = int(seq[-1])

        # Streams: events with the same (attempt, rank) share one, whatever their pid.
        # the groups present, in order (bincount: O(n) where np.unique sorts)
        groups = np.flatnonzero(np.bincount(group)) if len(batch.keys) > 1 else np.zeros(1, np.intp)
        streams: list[Stream] = []
        index: dict[int, int] = {}  # id(stream) -> its place in `streams`
        stream_of_group = np.zeros(len(batch.keys), np.int64)
        several: dict[int, list[tuple[int, object]]] = {}  # streams of several writers
        routed: list[tuple[int, int, object]] = []  # (group, stream, pid) so far
        for g in groups.tolist():
            attempt, rank, pid = batch.keys[g]
            raw = (attempt, rank)
            s = self._by_raw.get(raw)
            if s is None:
                s = self.stream(None if attempt is None else str(attempt), rank or 0)
                self._by_raw[raw] = s
                if attempt is None and self.first_idless is None:
                    at = int(np.flatnonzero(group == g)[0])
                    self.first_idless = origin.where(int(pos[at]))
            k = index.setdefault(id(s), len(streams))
            if k == len(streams):
                streams.append(s)
            stream_of_group[g] = k
            if s.writers is None and s.writer not in (pid, NO_WRITER):
                # a second writer: the events before this batch were the first's, and so
                # are this batch's groups of the stream before this one
                s.writers = {s.writer: s.last_ts} if s.last_ts > -math.inf else {}
                several[k] = [(h, p) for h, j, p in routed if j == k]
            s.writer = pid
            if s.writers is not None:
                several.setdefault(k, []).append((g, pid))
            routed.append((g, k, pid))
        self._add_columns(streams, stream_of_group[group], ts, kind, seq, pos, batch, origin)
        for k, writers in several.items():
            for g, pid in writers:
                streams[k].saw(pid, float(ts[group == g].max()))

    def _add_columns(  # noqa: PLR0917 (the batch's columns, passed down once)
        self,
        streams: list[Stream],
        stream: I64,
        ts: F64,
        kind: npt.NDArray[np.int16],
        seq: I64,
        pos: npt.NDArray[np.intp],
        batch: Batch,
        origin: _Origin,
    ) -> None:
        """Append each stream's steps, marks and other times, as slices of the batch's
        columns: one stable sort by (stream, category) puts each stream's events of each
        category together, in arrival order, so a file of thousands of small streams costs
        a few slices each."""
        m = int(ts.shape[0])
        category = _CATEGORY[kind]  # 0 step, 1 interval mark, 2 other
        steps = np.zeros(m, np.int64)
        at_steps = np.flatnonzero(category == _STEP)
        if at_steps.shape[0]:
            values, ok = batch.steps(pos[at_steps])
            steps[at_steps] = values
            if not ok.all():
                bad = at_steps[~ok]
                category[bad] = _DROPPED
                for i in bad.tolist():
                    ev = batch.events[int(pos[i])]
                    self.n_events -= 1
                    self.diagnostics.add(
                        "step_out_of_range",
                        f"{ev.kind} with step {ev.step!r} outside the 64-bit range; skipped",
                        *origin.where(int(pos[i])),
                    )
        bucket, blocking, line, source = self._mark_fields(kind, category, pos, batch, origin)
        key = stream * _CATEGORIES + category
        if len(streams) * _CATEGORIES <= np.iinfo(np.int16).max:
            key = key.astype(np.int16)  # sorted by radix, 3x faster than as int64
        order = np.argsort(key, kind="stable")
        edges = np.searchsorted(key[order], np.arange(len(streams) * _CATEGORIES + 1)).tolist()
        ts, kind, seq, steps = ts[order], kind[order], seq[order], steps[order]
        stream = stream[order]
        # Each column once as the bytes its log stores, then a slice of bytes per stream
        # (a numpy slice and conversion per stream and column cost more than the copy).
        marks = _MarkBytes(
            Marks(
                ts,
                seq,
                bucket[order],
                _MARK_IS_START[kind],
                blocking[order],
                line[order],
                source[order],
            )
        )
        ts_b, step_b = ts.tobytes(), steps.tobytes()
        is_end_b = (kind == _STEP_END).astype(np.int8).tobytes()
        descends = _MarkBytes.out_of_order(ts, edges[1:-1:_CATEGORIES], edges[2::_CATEGORIES])
        step_descends = _MarkBytes.out_of_order(ts, edges[0:-1:_CATEGORIES], edges[1::_CATEGORIES])
        counted = category[order] != _DROPPED
        firsts, lasts = _span_extremes(np.where(counted, ts, np.nan), edges[::_CATEGORIES])
        rare = np.flatnonzero(_RARE[kind] & counted)
        rare = rare[np.lexsort((seq[rare], stream[rare]))]  # by stream, in arrival order
        rare_at = np.searchsorted(stream[rare], np.arange(len(streams) + 1)).tolist()
        rare_pos = pos[order[rare]]
        rare_seq = seq[rare].tolist()
        rare_where = origin.where_many(rare_pos)
        rare_pos_list = rare_pos.tolist()
        for k, s in enumerate(streams):
            a, b, c, d = edges[k * _CATEGORIES : k * _CATEGORIES + 4]
            if b > a:
                s.steps.append_checked(
                    ts_b[8 * a : 8 * b],
                    step_b[8 * a : 8 * b],
                    is_end_b[a:b],
                    first_ts=ts.item(a),  # as a Python float
                    descends=step_descends[k],
                )
            if c > b:
                marks.append_to(s.marks, b, c, descends[k])
            if d > c:
                s.other_ts.frombytes(ts_b[8 * c : 8 * d])
            if d > a:
                if s.attempt is None and d > b:
                    self.idless_ts.frombytes(ts_b[8 * b : 8 * d])
                s.first_ts = min(s.first_ts, firsts[k])
                s.last_ts = max(s.last_ts, lasts[k])
            for r in range(rare_at[k], rare_at[k + 1]):
                p = rare_pos_list[r]
                self._rare(batch.events[p], s, rare_seq[r], *rare_where[r])

    def _mark_fields(
        self,
        kind: npt.NDArray[np.int16],
        category: npt.NDArray[np.int8],
        pos: npt.NDArray[np.intp],
        batch: Batch,
        origin: _Origin,
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_], I64, npt.NDArray[np.int32]]:
        """Bucket code, blocking, line and source code of every interval mark of the batch
        (zeros elsewhere)."""
        m = int(kind.shape[0])
        bucket = np.zeros(m, np.int32)
        blocking = np.ones(m, np.bool_)
        line = np.zeros(m, np.int64)
        source = np.zeros(m, np.int32)
        marks = np.flatnonzero(category == _MARK)
        if not marks.shape[0]:
            return bucket, blocking, line, source
        mk = kind[marks]
        for code in np.flatnonzero(np.bincount(mk)).tolist():  # the kinds present, in order
            at = marks[mk == code]
            base, _ = _SPLIT[code]
            if base in NAMED_INTERVAL_KINDS:
                names = batch.names(pos[at])
                bucket[at] = [self.buckets.code(bucket_of(base, name)) for name in names]
            else:
                bucket[at] = self.buckets.code(base)
            # data loading: the only kind a writer may mark non-blocking
            if base == "data_loading" and not batch.loads_plain():
                blocking[at] = batch.not_false(pos[at], "blocking")
        line[marks], source[marks] = origin.lines_and_sources(pos[marks])
        return bucket, blocking, line, source

    def _foreign(
        self, batch: Batch, foreign: npt.NDArray[np.intp], origin: _Origin, job: str
    ) -> None:
        """Events of another job: one diagnostic for the first of each source run, the
        rest counted."""
        shown = 0
        for run_first in origin.first_of_each_run(foreign):
            ev = batch.events[run_first]
            self.diagnostics.add(
                "foreign_job",
                f"event of job {ev.job!r} in the log of job {job!r}; skipped",
                *origin.where(run_first),
            )
            shown += 1
        self.diagnostics.counts["foreign_job"] += int(foreign.shape[0]) - shown

    def _check_clock(self, ts: F64, pos: npt.NDArray[np.intp], origin: _Origin) -> None:
        """Report lines whose time steps back (beyond the tolerance) from the newest before
        in the same source.

        A batch of many files (a job of 10,000 attempts) is first checked as a whole: when
        every source's lines go forward in time from its newest before, nothing steps back,
        and each source's newest is its last line. Only otherwise is each source looked at
        on its own."""
        spans = origin.spans(pos)
        keys = [source or "" for source, _a, _b in spans]
        if len(spans) > 1 and len(set(keys)) == len(keys):
            firsts = np.array([a for _s, a, _b in spans], np.intp)
            lasts = np.array([b - 1 for _s, _a, b in spans], np.intp)
            get = self._source_last_ts.get
            prevs = np.array([get(key, -math.inf) for key in keys])
            steps = np.diff(ts) >= 0.0
            steps[firsts[1:] - 1] = True  # from one source's last line to the next's first
            if bool(steps.all()) and bool((ts[firsts] >= prevs).all()):
                self._source_last_ts.update(zip(keys, ts[lasts].tolist(), strict=True))
                return
        for (_source, a, b), key in zip(spans, keys, strict=True):
            part = ts[a:b]
            prev = self._source_last_ts.get(key, -math.inf)
            newest = np.maximum.accumulate(part)
            before = np.empty_like(part)
            before[0] = prev
            np.maximum(newest[:-1], prev, out=before[1:])
            back = np.flatnonzero(part < before - CLOCK_BACKWARDS_TOLERANCE)
            for i in back[:MAX_DIAGNOSTICS_PER_CODE].tolist():
                self.diagnostics.add(
                    "clock_backwards",
                    f"timestamp {part[i]:.3f} is {before[i] - part[i]:.3f}s earlier than the "
                    "previous line",
                    *origin.where(int(pos[a + i])),
                )
            extra = int(back.shape[0]) - MAX_DIAGNOSTICS_PER_CODE
            if extra > 0:
                self.diagnostics.counts["clock_backwards"] += extra
            self._source_last_ts[key] = max(prev, float(newest[-1]))

    @property
    def last_ts(self) -> float:
        return max((s.last_ts for s in self.streams.values()), default=-math.inf)

    def attempt_spans(self) -> dict[str | None, tuple[float, float]]:
        """First and last event time of every attempt key (all its streams), in one pass."""
        spans: dict[str | None, tuple[float, float]] = {}
        for s in self.streams.values():
            known = spans.get(s.attempt)
            if known is None:  # (one stream an attempt: a job of one rank)
                spans[s.attempt] = (s.first_ts, s.last_ts)
            else:
                spans[s.attempt] = (min(known[0], s.first_ts), max(known[1], s.last_ts))
        return spans

    def as_of(self, t: float) -> Ingestor:
        """A copy of the state with every event stamped after ``t`` left out (ACCOUNTING.md
        §9.10: for a report ``--now t`` later events do not exist). O(state)."""
        out = Ingestor(self.job)
        out.buckets, out.sources = self.buckets, self.sources
        for key, stream in self.streams.items():
            kept = stream.as_of(t)
            if kept.first_ts <= t:  # a stream all of whose events came later does not exist
                out.streams[key] = kept
        out.lifecycle = [e for e in self.lifecycle if e.ts <= t]
        out.checkpoints_saved = array("q")
        out.checkpoints_committed = array("q")
        for s in out.streams.values():
            for _ts, step, committed in s.checkpoints:
                (out.checkpoints_committed if committed else out.checkpoints_saved).append(step)
        idless = np.frombuffer(self.idless_ts, dtype=np.float64)
        out.idless_ts = array("d", idless[idless <= t].tobytes())
        out.first_idless = self.first_idless
        out.n_events = self.n_events
        out.diagnostics = self.diagnostics
        out.unknown_kinds = self.unknown_kinds
        return out

    def attempt_keys(self) -> list[str]:
        return sorted({s.attempt for s in self.streams.values() if s.attempt is not None})

    def _checkpoint(
        self,
        s: Stream,
        ev: Event | LeanEvent,
        committed: bool,
        source: str | None,
        line: int | None,
    ) -> None:
        step = ev.step or 0
        if not _fits(step):
            self.diagnostics.add(
                "step_out_of_range",
                f"{ev.kind} with step {step!r} outside the 64-bit range; ignored",
                source,
                line,
            )
            return
        (self.checkpoints_committed if committed else self.checkpoints_saved).append(step)
        s.checkpoints.append((ev.ts, step, committed))

    def _rare(
        self, ev: Event | LeanEvent, s: Stream, seq: int, source: str | None, line: int | None
    ) -> None:
        """What a lifecycle, checkpoint, restore or unknown event adds besides its time and
        its interval mark (those are added with the batch)."""
        kind = ev.kind
        if kind in LIFECYCLE_KINDS:
            self.lifecycle.append(
                LifecycleEvent(
                    ev.ts,
                    seq,
                    kind,
                    s.attempt,
                    ev.host,
                    ev.rank,
                    ev.status,
                    ev.exit_code,
                    source,
                    line,
                    ev.hang_timeout,
                )
            )
        elif kind == Kind.CHECKPOINT_COMMITTED:
            self._checkpoint(s, ev, True, source, line)
        elif kind == Kind.CHECKPOINT_SAVE_END:
            self._checkpoint(s, ev, False, source, line)
        elif kind in (Kind.CHECKPOINT_RESTORE_START, Kind.CHECKPOINT_RESTORE_END):
            if _fits(ev.step or 0):
                is_end = kind == Kind.CHECKPOINT_RESTORE_END
                s.restores.append(RestoreMark(ev.ts, seq, ev.step or 0, is_end))
            else:
                self.diagnostics.add(
                    "step_out_of_range",
                    f"{kind} with step {ev.step!r} outside the 64-bit range; its step is ignored",
                    source,
                    line,
                )
        elif kind not in KINDS:
            n = self.unknown_kinds.get(kind, 0)
            self.unknown_kinds[kind] = n + 1
            if n == 0:
                self.diagnostics.add("unknown_kind", _unknown_kind_message(kind), source, line)


_MAX_LINE = 2**31 - 1
_STEP_START = KIND_CODE[Kind.STEP_START]
_STEP_END = KIND_CODE[Kind.STEP_END]
# Per kind code (the last entry is for unknown kinds, code -1).
_SPLIT: list[tuple[str, bool]] = [interval_base(k) or ("", False) for k in KIND_NAMES] + [
    ("", False)
]
_MARK_BASE_CODE = np.array([0 if base else -1 for base, _ in _SPLIT], np.int8)
_MARK_IS_START = np.array([start for _, start in _SPLIT], np.bool_)
# What a batch's event is to its stream; events of one stream are appended by category.
_STEP, _MARK, _OTHER, _DROPPED = 0, 1, 2, 3
_CATEGORIES = 4
_CATEGORY = np.array(
    [
        _STEP if k in (Kind.STEP_START, Kind.STEP_END) else _MARK if base else _OTHER
        for k, (base, _) in zip([*KIND_NAMES, ""], _SPLIT, strict=True)
    ],
    np.int8,
)
_RARE_KINDS = LIFECYCLE_KINDS | {
    Kind.CHECKPOINT_COMMITTED,
    Kind.CHECKPOINT_SAVE_END,
    Kind.CHECKPOINT_RESTORE_START,
    Kind.CHECKPOINT_RESTORE_END,
}
_RARE = np.array([k in _RARE_KINDS for k in KIND_NAMES] + [True], np.bool_)
