"""One stream's state: what one (attempt, rank) wrote that the partition needs, as columns.

A :class:`Stream` holds its step events (:class:`StepLog`), its interval marks
(:class:`MarkLog`, appended as slices of a batch's bytes through :class:`MarkBytes`), its
restores and checkpoints, the times of its other events, and who wrote it. Names (a mark's
bucket, its source file) are codes into a :class:`NameTable` of the ingest's.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from badput.engine._intervals import Marks

__all__ = [
    "MAX_LINE",
    "NO_WRITER",
    "WRITER_QUIET_AFTER",
    "MarkBytes",
    "MarkLog",
    "NameTable",
    "PackedInts",
    "RestoreMark",
    "StepLog",
    "Stream",
    "join_writers",
]

F64 = npt.NDArray[np.float64]

#: The greatest line number a mark keeps (its column is int32); one past it is unknown.
MAX_LINE = 2**31 - 1

#: Steps are kept as int32 while every one is within this of 0 (their differences are
#: then int32 too); else as int64.
STEP_LIMIT = 2**30


class StepLog:
    """Columns of one stream's step events, in arrival order (a few bytes a step).

    Rows out of time order are sorted (stably, so arrival breaks ties) at query time.
    """

    __slots__ = ("_checked", "_unsorted", "is_end", "step", "ts")

    def __init__(self) -> None:
        self.ts = array("d")
        # (int32 while every step is within 2**30 of 0: differences fit too)
        self.step = PackedInts("i", "q", limit=STEP_LIMIT)
        self.is_end = array("b")
        self._checked = 0  # rows already checked for time order
        self._unsorted = False

    def __len__(self) -> int:
        return len(self.ts)

    def append_checked(
        self,
        ts: bytes,
        step: npt.NDArray[np.integer[Any]],
        is_end: bytes,
        *,
        first_ts: float,
        descends: bool,
        fits: bool | None = None,
    ) -> None:
        """Append rows given as the bytes of their columns (their steps as a column,
        ``fits``: whether they may be kept narrow, see :meth:`PackedInts.extend`), whose
        time order the caller checked: ``descends``, whether one is earlier than the one
        before it among them; ``first_ts``, the first one's time (against the last row
        before them). Spares
        :attr:`unsorted` a look at each new row (a report of 10,000 attempts asks it of
        10,000 logs of a few dozen rows)."""
        checked = self._checked == len(self.ts)
        if checked and not self._unsorted:
            self._unsorted = descends or (len(self.ts) > 0 and first_ts < self.ts[-1])
        self.ts.frombytes(ts)
        self.step.extend(step, fits=fits)
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


_DTYPES: dict[str, Any] = {"b": np.int8, "i": np.int32, "q": np.int64}


def _repeated(value: int, n: int, dtype: Any) -> npt.NDArray[Any]:
    """``value`` ``n`` times as a read-only zero-stride view (no memory)."""
    cell = np.full(1, value, dtype)
    out: npt.NDArray[Any] = np.ndarray((n,), cell.dtype, cell, 0, (0,))
    out.flags.writeable = False
    return out


class PackedInts:
    """An integer column in as few bytes as its values allow (exactly: the same values).

    While every value is one and the same (``constant``: a data-load log's bucket, its
    source file, its blocking flag), it keeps that value and a count, and its column is a
    read-only zero-stride view (no memory); then an array of typecode ``narrow``, widened
    to ``wide`` when a value does not fit (arrival numbers: int32 below 2**31 events).
    Ten million steps with their data loads keep 260 MB less than int64/int32 arrays.
    """

    __slots__ = ("_arr", "_constant", "_limit", "_n", "_narrow", "_value", "_wide")

    def __init__(
        self,
        narrow: str,
        wide: str | None = None,
        *,
        constant: bool = False,
        limit: int = 2**31,
    ) -> None:
        self._narrow, self._wide, self._constant = narrow, wide, constant
        self._limit = limit  # narrow while every value v is -limit <= v < limit
        self._n = 0
        self._value = 0
        self._arr: array[int] | None = None if constant else array(narrow)

    def __len__(self) -> int:
        return self._n if self._arr is None else len(self._arr)

    def column(self) -> npt.NDArray[Any]:
        """The values as a numpy column (a view: valid until the column grows)."""
        arr = self._arr
        if arr is None:
            return _repeated(self._value, self._n, _DTYPES[self._narrow])
        if not len(arr):
            return np.zeros(0, _DTYPES[arr.typecode])
        return np.frombuffer(arr, _DTYPES[arr.typecode])

    def fits(self, values: npt.NDArray[np.integer[Any]]) -> bool:
        """Whether ``values`` may be kept narrow."""
        limit = self._limit
        return not len(values) or (int(values.min()) >= -limit and int(values.max()) < limit)

    def extend(
        self,
        values: npt.NDArray[np.integer[Any]],
        one: int | None = None,
        fits: bool | None = None,
    ) -> None:
        """Append ``values``. ``one``: their one value when the caller knows they are all
        equal; ``fits``: whether every one may be kept narrow (:meth:`fits`; a batch's
        answers, looked up once for all its streams; ``None``: looked up here)."""
        k = int(values.shape[0])
        if not k:
            return
        if fits is None:
            fits = self._wide is None or self.fits(values)
        if self._arr is None:
            if one is None and bool((values == values[0]).all()):
                one = int(values[0])
            if one is not None and (self._n == 0 or one == self._value):
                self._value, self._n = one, self._n + k
                return
            self._arr = array(
                self._narrow, np.full(self._n, self._value, _DTYPES[self._narrow]).tobytes()
            )
        arr = self._arr if fits else self._widened()
        arr.frombytes(values.astype(_DTYPES[arr.typecode], copy=False).tobytes())

    def append(self, value: int) -> None:
        """Append one value (an event at a time: no numpy call while it fits)."""
        arr = self._arr
        if arr is None:
            self.extend(np.array([value], np.int64))
        elif self._wide is None or -self._limit <= value < self._limit:
            arr.append(value)
        else:
            self._widened().append(value)

    def _widened(self) -> array[int]:
        """The values' array, of typecode ``wide`` from now on (if it has one)."""
        arr = self._arr
        assert arr is not None  # (constant columns are made arrays before this)
        if arr.typecode == self._narrow and self._wide is not None:
            wide = _DTYPES[self._wide]
            arr = self._arr = array(self._wide, self.column().astype(wide).tobytes())
        return arr

    @staticmethod
    def joined(cols: list[PackedInts], dtype: Any) -> npt.NDArray[Any]:
        """The columns end to end (as ``dtype``, or narrower while every value fits it):
        in one copy of their buffers (a report of 10,000 closed attempts joins as many)."""
        arrs = [c._arr for c in cols]
        if not any(a is not None for a in arrs):
            values = {c._value for c in cols if c._n}
            n = sum(c._n for c in cols)
            if len(values) <= 1:
                return _repeated(values.pop() if values else 0, n, dtype)
            return np.repeat(np.array([c._value for c in cols], dtype), [c._n for c in cols])
        codes = {a.typecode for a in arrs if a is not None}
        if None not in arrs and len(codes) == 1:
            return np.frombuffer(b"".join(arrs), _DTYPES[codes.pop()])  # type: ignore[arg-type]
        return np.concatenate([c.column().astype(dtype, copy=False) for c in cols])

    def mapped(self, table: npt.NDArray[np.signedinteger[Any]]) -> None:
        """Replace each value ``v`` by ``table[v]`` (codes into another name table)."""
        if self._arr is None:
            self._value = int(table[self._value]) if self._n else self._value
            return
        new = table[self.column()]
        self._arr = array(self._arr.typecode, new.astype(_DTYPES[self._arr.typecode]).tobytes())


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
        self.seq = PackedInts("i", "q")  # arrival order: ties in ts keep file/line order
        self.bucket = PackedInts("i", constant=True)
        self.is_start = array("b")
        self.blocking = PackedInts("b", constant=True)
        self.line = array("i")  # -1: unknown (or past 2**31 - 1: no log has that many lines)
        self.source = PackedInts("i", constant=True)  # -1: unknown
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
        seq = self.seq.column()
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
        """The marks as numpy columns, in ``(ts, seq)`` order (views when they arrived so;
        else each column gathered through the kept :meth:`time_order`, which a query has
        most often made already: no sort of two million marks again)."""
        marks = self.raw()
        if not self.unsorted:
            return marks
        order, _ = self.time_order()
        return marks.take(order)  # (its times too: the kept ones are a query's, written over)

    def raw(self) -> Marks:
        """The marks as numpy columns (views) in arrival order."""
        if not len(self.ts):
            return Marks.empty()
        return Marks(
            np.frombuffer(self.ts, np.float64),
            self.seq.column(),
            self.bucket.column(),
            np.frombuffer(self.is_start, np.bool_),
            self.blocking.column().view(np.bool_),
            np.frombuffer(self.line, np.int32),
            self.source.column(),
        )

    def append_columns(self, marks: Marks) -> None:
        """Add marks (in arrival order)."""
        n = len(marks)
        if n:
            stored = MarkBytes(marks)
            stored.append_to(self, 0, n, MarkBytes.out_of_order(marks.ts, [0], [n])[0])

    def shift_lines(self, source: int, by: int) -> None:
        """Number the known lines of marks of source code ``source`` ``by`` further (one
        past 2**31 - 1 becomes unknown, as when ingested)."""
        if not len(self.ts):
            return
        line = np.frombuffer(self.line, np.int32).astype(np.int64)
        at = (self.source.column() == source) & (line >= 0)
        if not at.any():
            return
        line[at] += by
        line[line > MAX_LINE] = -1
        self.line = array("i", line.astype(np.int32).tobytes())

    def recode(self, buckets: npt.NDArray[np.int32], sources: npt.NDArray[np.int32]) -> None:
        """Map bucket and source codes through ``buckets``/``sources`` (index -1: none)."""
        if len(self.ts):
            self.bucket.mapped(buckets)
            self.source.mapped(sources)


class MarkBytes:
    """Interval-mark columns as a :class:`MarkLog` stores them, so that marks are appended
    as slices (a batch's, sorted by stream: a slice per stream): bytes of the plain
    columns; the packed ones (:class:`PackedInts`) with what the batch says of them
    (one value for all its marks, arrival numbers that fit int32), asked once."""

    __slots__ = ("_bytes", "_packed", "_ts")

    def __init__(self, marks: Marks) -> None:
        line32 = np.where(marks.line <= MAX_LINE, marks.line, -1).astype(np.int32)
        self._bytes = (
            marks.ts.astype(np.float64, copy=False).tobytes(),
            marks.is_start.astype(np.int8).tobytes(),
            line32.tobytes(),
        )
        seq = marks.seq.astype(np.int64, copy=False)
        fits = not len(seq) or (int(seq.min()) >= -(2**31) and int(seq.max()) < 2**31)
        self._packed = tuple(
            (col, _one(col), ok)
            for col, ok in (
                (seq.astype(np.int32) if fits else seq, fits),
                (marks.bucket.astype(np.int32, copy=False), True),
                (marks.blocking.astype(np.int8), True),
                (marks.source.astype(np.int32, copy=False), True),
            )
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
        ts, is_start, line = self._bytes
        log.ts.frombytes(ts[8 * b : 8 * c])
        log.is_start.frombytes(is_start[b:c])
        log.line.frombytes(line[4 * b : 4 * c])
        for packed, (values, one, fits) in zip(
            (log.seq, log.bucket, log.blocking, log.source), self._packed, strict=True
        ):
            packed.extend(values[b:c], one, fits)


def _one(values: npt.NDArray[np.integer[Any]]) -> int | None:
    """The one value of every row of ``values`` (``None``: none, or more than one)."""
    if not len(values) or not bool((values == values[0]).all()):
        return None
    return int(values[0])


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
        out.steps.step.extend(self.steps.step.column()[keep])
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


def join_writers(mine: Stream, theirs: Stream) -> None:
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
