"""What happened when, for pictures: step spans and recorded intervals per attempt and rank.

The partition (``_partition``) sums time into buckets; views that draw a job also
need *where* that time is. :func:`build_timeline` reads the ingested state and a
:class:`Report` of it and returns every step span and recorded interval, each with
the bucket it is drawn in. It computes no totals: the report's figures stay the
only accounting.

A step span is coloured by where most of its time went (ACCOUNTING.md §3-§4):
``wasted`` when a later attempt restored from a checkpoint before it, ``startup``
for an attempt's first step when it took more than twice the ideal step time,
``slowdown`` when its own time (blocking intervals inside it left out) is more than
:data:`SLOW_FACTOR` times the ideal step time, so that most of it was slowdown,
else ``productive``. Recorded intervals keep their own bucket (innermost wins
where they nest, as in the partition).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from badput.engine._ingest import Ingestor
from badput.engine._intervals import Coverage, Marks, flatten_groups, joined, pair_columns
from badput.engine._model import AttemptSummary, Report
from badput.engine._rank_stream import in_chunks
from badput.engine._rows import gathered

__all__ = [
    "SLOW_FACTOR",
    "STEP_BUCKETS",
    "IntervalSpan",
    "IntervalSpans",
    "Lane",
    "StepSpans",
    "Timeline",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
B = npt.NDArray[np.bool_]

#: The buckets a step span can be drawn in; ``StepSpans.bucket`` indexes this tuple.
STEP_BUCKETS: tuple[str, ...] = ("productive", "slowdown", "startup", "wasted")
#: A kept step whose own time is more than this many ideal step times is drawn as
#: slowdown (most of its time is then beyond the ideal).
SLOW_FACTOR = 2.0
_STARTUP_FACTOR = 2.0


@dataclass(frozen=True)
class Lane:
    """One row of a picture: an attempt, and a rank of it when the job logs several."""

    attempt_index: int  # index into Report.attempts
    attempt: str | int  # the attempt's id
    rank: int | None  # None when the job logs one rank only
    host: str | None  # the host of the rank's lifecycle events, when they name one


class StepSpans:
    """Every step span, as columns (a million steps cost a few tens of MB, not objects):
    ``lane``, ``start``, ``end``, ``step``, ``closed``; and ``bucket`` (index into
    :data:`STEP_BUCKETS`) and ``own`` (the step's own time: its span less the blocking
    intervals inside it), worked out when first read (what measures the job, the advice,
    reads neither: a million steps' coverage is not computed for it).

    Sorted by lane, then start. A step never ended (a crash, a hang: ``closed`` false)
    lasts until the next event of its lane, at most a typical step time of its stream
    (the median of its ended steps, else the ideal), and never past its attempt's end.
    """

    __slots__ = ("_colours", "_worked_out", "closed", "end", "lane", "start", "step")

    def __init__(  # noqa: PLR0917 (the columns)
        self,
        lane: I64,
        start: F64,
        end: F64,
        step: I64,
        closed: npt.NDArray[np.bool_],
        colours: Callable[[StepSpans], tuple[I8, F64]],
    ) -> None:
        """``colours``: each span's bucket and own time, given the spans."""
        self.lane, self.start, self.end, self.step, self.closed = lane, start, end, step, closed
        self._colours: Callable[[StepSpans], tuple[I8, F64]] | None = colours
        self._worked_out: tuple[I8, F64] | None = None

    def _bucket_and_own(self) -> tuple[I8, F64]:
        if self._worked_out is None:
            assert self._colours is not None  # (dropped once worked out)
            self._worked_out, self._colours = self._colours(self), None
        return self._worked_out

    @property
    def bucket(self) -> I8:
        """Each span's bucket: an index into :data:`STEP_BUCKETS`."""
        return self._bucket_and_own()[0]

    @property
    def own(self) -> F64:
        """Each span's own time: its span less the blocking intervals inside it."""
        return self._bucket_and_own()[1]

    def __len__(self) -> int:
        return int(self.start.shape[0])

    def __repr__(self) -> str:
        return f"StepSpans({len(self)} spans)"

    def __reduce__(self) -> tuple[Any, ...]:
        # (a pickle, a deep copy: the columns with their colours, not the function)
        bucket, own = self._bucket_and_own()
        return _worked_out, (self.lane, self.start, self.end, self.step, self.closed, bucket, own)


def _worked_out(  # noqa: PLR0917 (the columns of a pickled StepSpans)
    lane: I64, start: F64, end: F64, step: I64, closed: npt.NDArray[np.bool_], bucket: I8, own: F64
) -> StepSpans:
    return StepSpans(lane, start, end, step, closed, lambda _: (bucket, own))


@dataclass(frozen=True)
class IntervalSpan:
    """A recorded interval (blocking ones flattened innermost-wins, as partitioned)."""

    lane: int
    start: float
    end: float
    bucket: str  # checkpoint_save, data_loading, custom:eval, ...
    blocking: bool


class IntervalSpans(Sequence[IntervalSpan]):
    """Every recorded interval of a timeline, sorted by lane then start: as columns
    (``lane``, ``start``, ``end``, ``code`` into ``names``, ``blocking``), and a sequence
    of :class:`IntervalSpan`, made when it is first indexed or iterated. A job with a data
    load a step has millions: what needs a few of them reads the columns (the advice its
    checkpoint saves) and no object is made."""

    def __init__(  # noqa: PLR0917 (the columns)
        self, lane: I64, start: F64, end: F64, code: I64, blocking: B, names: Sequence[str]
    ) -> None:
        self.lane, self.start, self.end, self.code, self.blocking = lane, start, end, code, blocking
        self.names = list(names)
        self._spans: list[IntervalSpan] | None = None

    def code_of(self, bucket: str) -> int | None:
        """The code of ``bucket`` in :attr:`code` (None: no interval can be of it)."""
        return self.names.index(bucket) if bucket in self.names else None

    def buckets(self) -> set[str]:
        """The buckets of the intervals."""
        return {self.names[c] for c in np.unique(self.code).tolist()}

    def spans(self) -> list[IntervalSpan]:
        """The intervals as objects (made once)."""
        if self._spans is None:
            names = self.names
            self._spans = list(
                map(
                    IntervalSpan,
                    self.lane.tolist(),
                    self.start.tolist(),
                    self.end.tolist(),
                    [names[c] for c in self.code.tolist()],
                    self.blocking.tolist(),
                )
            )
        return self._spans

    def __len__(self) -> int:
        return int(self.lane.shape[0])

    @overload
    def __getitem__(self, index: int) -> IntervalSpan: ...
    @overload
    def __getitem__(self, index: slice) -> list[IntervalSpan]: ...
    def __getitem__(self, index: int | slice) -> IntervalSpan | list[IntervalSpan]:
        return self.spans()[index]

    def __iter__(self) -> Iterator[IntervalSpan]:
        return iter(self.spans())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return self.spans() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (as a list's: unhashable)

    def __repr__(self) -> str:
        return f"IntervalSpans({len(self)} intervals)"


@dataclass(frozen=True)
class Timeline:
    """Lanes, step spans and intervals of a job (see :meth:`Accountant.timeline`)."""

    lanes: list[Lane]
    steps: StepSpans
    intervals: IntervalSpans
    ideal_step_time: float | None

    def to_pandas(self) -> dict[str, Any]:
        """``{"steps": DataFrame, "intervals": DataFrame}`` (needs ``badput[pandas]``).

        One row per step span (attempt index, attempt id, rank, step, start, end,
        own_seconds, bucket, ended) and per recorded interval.
        """
        from badput.runtime.optional import import_optional  # noqa: PLC0415

        pd = import_optional("pandas", "pandas")
        s = self.steps
        att_index = np.array([ln.attempt_index for ln in self.lanes] or [0], np.int64)
        att_id = np.array([str(ln.attempt) for ln in self.lanes] or [""], dtype=object)
        rank = np.array([-1 if ln.rank is None else ln.rank for ln in self.lanes] or [0])
        steps = pd.DataFrame(
            {
                "attempt_index": att_index[s.lane] if len(s) else att_index[:0],
                "attempt": att_id[s.lane] if len(s) else att_id[:0],
                "rank": rank[s.lane] if len(s) else rank[:0],
                "step": s.step,
                "start": s.start,
                "end": s.end,
                "own_seconds": s.own,
                "bucket": pd.Categorical.from_codes(s.bucket, categories=list(STEP_BUCKETS)),
                "ended": s.closed,
            }
        )
        intervals = pd.DataFrame(
            [
                (
                    self.lanes[iv.lane].attempt_index,
                    str(self.lanes[iv.lane].attempt),
                    -1 if self.lanes[iv.lane].rank is None else self.lanes[iv.lane].rank,
                    iv.bucket,
                    iv.start,
                    iv.end,
                    iv.blocking,
                )
                for iv in self.intervals
            ],
            columns=["attempt_index", "attempt", "rank", "bucket", "start", "end", "blocking"],
        )
        return {"steps": steps, "intervals": intervals}


class _Recorded(NamedTuple):
    """Recorded intervals as columns: lane, start, end (cut at the attempt's end), bucket
    code, blocking. A job with a data load a step has millions: never an object each
    until the timeline's list is made, in order."""

    lane: I64
    start: F64
    end: F64
    code: I64
    blocking: npt.NDArray[np.bool_]


class _Rows(NamedTuple):
    """Rows of a run of streams (step spans, or recorded intervals), before their lanes are
    numbered: the (attempt index, rank) pairs they are on, and each row's index into them."""

    pairs: list[tuple[int, int]]
    local: I64
    columns: tuple[npt.NDArray[Any], ...]


class _Attempts(NamedTuple):
    """What a row's attempt is looked up in: each attempt's start and end."""

    starts: F64
    ends: F64

    def of(self, ts: F64) -> I64:
        """The attempt of each time: the last to start at or before it (else the first)."""
        found = np.searchsorted(self.starts, ts, side="right").astype(np.int64, copy=False)
        found -= 1
        return np.maximum(found, 0, out=found)


#: Events per run of streams taken together; a stream of as many is a run alone (taken
#: with others, it would only be copied to be joined to them: a rank of 64, say).
_RUN = 1 << 14


def build_timeline(ing: Ingestor, report: Report) -> Timeline:
    """The spans of the ingested job, coloured with ``report`` (its attempts and ideal).

    Streams are taken together, a run of them per vectorised pass (a job of 10,000 short
    attempts is 10,000 streams): each stream's numbers are those it gives alone."""
    attempts = report.attempts
    working = [s for s in ing.streams.values() if s.has_work]
    multi_rank = len({s.rank for s in working}) > 1
    att = _Attempts(
        np.array([a.start for a in attempts], dtype=np.float64),
        np.array([a.end for a in attempts], dtype=np.float64),
    )
    hosts = _hosts(ing, att)
    steps: list[_Rows] = []
    recorded: list[_Rows] = []
    sizes = [len(s.steps) + len(s.marks) for s in working]
    for run in in_chunks(working, sizes, _RUN) if attempts else []:
        ts, step, is_end, marks = gathered(run)
        rank = np.array([s.rank for s in run], np.int64)
        group = _stream_of([len(s.steps) for s in run])
        rows = _step_rows(ts, step, is_end, group, rank, report, att)
        if rows is not None:
            steps.append(rows)
        group = _stream_of([len(s.marks) for s in run])
        rows = _recorded_rows(marks, group, rank, max(1, len(ing.buckets)), report.end, att)
        if rows is not None:
            recorded.append(rows)
    keys = sorted({key for rows in (*steps, *recorded) for key in rows.pairs})
    lanes = [
        Lane(
            attempt_index=a,
            attempt=attempts[a].id,
            rank=rank if multi_rank else None,
            host=hosts.get((a, rank)),
        )
        for a, rank in keys
    ]
    number = {key: i for i, key in enumerate(keys)}
    columns = _in_order(_numbered(recorded, number))
    step_spans = _classify(_numbered(steps, number), lanes, report, columns)
    intervals = IntervalSpans(*columns, names=ing.buckets.names)
    return Timeline(lanes, step_spans, intervals, report.ideal_step_time)


def _hosts(ing: Ingestor, att: _Attempts) -> dict[tuple[int, int], str]:
    """The host of each (attempt, rank) whose lifecycle events name one (the first)."""
    named = [e for e in ing.lifecycle if e.host is not None]
    if not named or not att.starts.shape[0]:
        return {}
    at = att.of(np.array([e.ts for e in named], np.float64)).tolist()
    hosts: dict[tuple[int, int], str] = {}
    for a, e in zip(at, named, strict=True):
        hosts.setdefault((a, e.rank or 0), e.host)  # type: ignore[arg-type]  # (named)
    return hosts


def _numbered(
    parts: list[_Rows], number: dict[tuple[int, int], int]
) -> tuple[I64, list[npt.NDArray[Any]]] | None:
    """Every part's rows joined: each one's lane, and the columns."""
    if not parts:
        return None
    lane = joined([np.array([number[k] for k in p.pairs], np.int64)[p.local] for p in parts])
    columns = [joined([p.columns[i] for p in parts]) for i in range(len(parts[0].columns))]
    parts.clear()  # (the caller's: joined now)
    return lane, columns


def _lanes(ai: I64, rank: I64) -> tuple[list[tuple[int, int]], I64]:
    """The distinct (attempt index, rank) pairs of rows, and each row's index into them."""
    n = int(ai.shape[0])
    if n == 0 or (
        ai[0] == ai[-1] and rank[0] == rank[-1] and (ai == ai[0]).all() and (rank == rank[0]).all()
    ):
        return ([(int(ai[0]), int(rank[0]))] if n else []), np.zeros(n, np.int64)
    by = np.lexsort((rank, ai))
    a, r = ai[by], rank[by]
    head = np.ones(n, np.bool_)
    head[1:] = (a[1:] != a[:-1]) | (r[1:] != r[:-1])
    local = np.empty(n, np.int64)
    local[by] = np.cumsum(head) - 1
    return list(zip(a[head].tolist(), r[head].tolist(), strict=True)), local


def _stream_of(sizes: list[int]) -> I64:
    """Each row's stream in a run (``sizes``: each stream's rows, one after the other); a
    view of one zero for a run of one stream (its million rows cost no column)."""
    if len(sizes) == 1:
        return np.broadcast_to(np.zeros(1, np.int64), (sizes[0],))
    return np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)


def _pick(values: I64, idx: npt.NDArray[np.bool_] | npt.NDArray[np.intp] | I64) -> I64:
    """``values[idx]``; a view of the one value again where ``values`` is one value for
    every row (:func:`_stream_of`), or the one stream's (``idx``: a run's streams)."""
    if values.shape[0] == 1 or (values.shape[0] and values.strides[0] == 0):
        n = int(np.count_nonzero(idx)) if idx.dtype == np.bool_ else int(idx.shape[0])
        return np.broadcast_to(values[:1], (n,))
    return values[idx]


def _step_rows(  # noqa: PLR0917 (a run of streams' step columns, and what they are read with)
    ts: F64,
    step: npt.NDArray[np.integer[Any]],
    is_end: I8,
    group: I64,
    rank: I64,
    report: Report,
    att: _Attempts,
) -> _Rows | None:
    """Step spans of a run of streams (``group``: each event's stream, one after the other,
    each in time order): each step_start to the step_end of the same step that follows
    it; a start followed by anything else is open (ends at the next event, or at the
    report's end after its stream's last). A stream of ends only has a step from each end
    to the next. Spans are cut at their attempt's end (after it nothing is accounted, and
    a diagnostic says so); an open one lasts a typical step of its stream at most."""
    n = int(ts.shape[0])
    if n == 0:
        return None
    ends = is_end.astype(bool)
    last = np.ones(n, np.bool_)  # the last event of its stream
    last[:-1] = group[1:] != group[:-1]
    ends_only = (np.bincount(_pick(group, ~ends), minlength=rank.shape[0]) == 0)[group]
    at = np.flatnonzero(np.where(ends_only, ~last, ~ends))
    if at.shape[0] == 0:
        return None
    # (a million rows: each column made once, and in place where it changes)
    nxt = np.minimum(at + 1, n - 1)
    has_next = ~last[at]
    of = _pick(group, at)
    start = ts[at]
    end = ts[nxt]
    if not has_next.all():  # each stream's last start: open until the report's end
        last_ts = np.zeros(rank.shape[0])
        last_ts[group[last]] = ts[last]
        end[~has_next] = np.maximum(report.end, last_ts[_pick(of, ~has_next)])
    from_end = ends_only[at]  # (a stream of ends only: the step is the next end's)
    steps, step_next = step[at], step[nxt]
    closed = has_next & ends[nxt] & (step_next == steps)
    if from_end.any():
        closed |= from_end
        steps = np.where(from_end, step_next, steps)
    del nxt, has_next, step_next, from_end
    steps = steps.astype(np.int64, copy=False)
    np.maximum(end, start, out=end)
    ai = att.of(start)
    att_end = att.ends[ai]
    keep = start <= att_end
    if not keep.all():  # (most often every one is kept: no copy then)
        start, end, steps, closed = start[keep], end[keep], steps[keep], closed[keep]
        att_end, ai, of = att_end[keep], ai[keep], _pick(of, keep)
    if start.shape[0] == 0:
        return None
    np.minimum(end, att_end, out=end)
    del att_end
    if not closed.all():
        end = _typical_open(start, end, closed, of, report.ideal_step_time)
    pairs, local = _lanes(ai, _pick(rank, of))
    return _Rows(pairs, local, (start, end, steps, closed))


#: The most codes a run's marks are given as int32 (more: int64, a run of many streams of
#: many buckets).
_INT32_CODES = 2**31 - 1

#: Streams with an open step past which their medians are taken in one pass, not each apart.
_MEDIANS_APART = 16


def _typical_open(start: F64, end: F64, closed: B, group: I64, ideal: float | None) -> F64:
    """A step never ended (a crash, a hang) lasts a typical step of its stream (the median of
    its ended steps, else the ideal), as the partition counts it (ACCOUNTING.md §4); the
    rest of its time is not step time. ``group``: each row's stream (rows of a stream
    together)."""
    d = end - start
    open_in = np.unique(group[~closed])
    lo = np.searchsorted(group, open_in, "left")
    count = np.searchsorted(group, open_in, "right") - lo
    rows = np.repeat(lo - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
    typical = np.full(len(open_in), np.nan if ideal is None else ideal)
    if len(open_in) <= _MEDIANS_APART:
        for k, (a, n) in enumerate(zip(lo.tolist(), count.tolist(), strict=True)):
            done = d[a : a + n][closed[a : a + n]]
            if done.shape[0]:
                typical[k] = float(np.median(done))
    else:  # each stream's median as np.median takes it: the middle one, or the two's mean
        which = np.repeat(np.arange(len(open_in)), count)
        ended = closed[rows]
        of_x, x = which[ended], d[rows[ended]]
        x = x[np.lexsort((x, of_x))]  # (each stream's ended steps' times, in order)
        n_done = np.bincount(of_x, minlength=len(open_in))
        has = n_done > 0
        mid = (np.cumsum(n_done) - n_done + n_done // 2)[has]
        odd = (n_done % 2 == 1)[has]
        # (np.where takes both: mid - 1 of a stream of one ended step is read, not used)
        typical[has] = np.where(odd, x[mid], (x[mid - 1] + x[mid]) / 2)
    per_row = np.full(start.shape[0], np.nan)
    per_row[rows] = np.repeat(typical, count)
    bounded = ~closed & ~np.isnan(per_row)
    return np.where(bounded, np.minimum(end, start + per_row), end)


def _recorded_rows(  # noqa: PLR0917 (a run of streams' marks, and what they are read with)
    marks: Marks, group: I64, rank: I64, n_buckets: int, close_at: float, att: _Attempts
) -> _Rows | None:
    """The recorded intervals of a run of streams (``group``: each mark's stream, one after
    the other, each in time order): each stream's blocking ones flattened (innermost
    wins), then its others; cut at their attempt's end. A stream's bucket codes are made
    its own (stream x buckets + bucket), so that no pairing or flattening crosses from one
    stream to the next."""
    if not len(marks):
        return None
    many = rank.shape[0] > 1
    if many:
        marks = Marks(
            marks.ts,
            marks.seq,
            (group * n_buckets + marks.bucket).astype(
                np.int32 if rank.shape[0] * n_buckets <= _INT32_CODES else np.int64
            ),
            marks.is_start,
            marks.blocking,
            marks.line,
            marks.source,
        )
    paired = pair_columns(marks, close_at=close_at).intervals
    of = (paired.bucket // n_buckets).astype(np.int64) if many else _stream_of([len(paired)])
    if many and not bool((of[1:] >= of[:-1]).all()):  # (one stream after the other)
        by = np.argsort(of, kind="stable")
        paired, of = paired.take(by), of[by]
    blocking = paired.blocking
    if blocking.all():  # (a data load a step: no copy of a million intervals to flatten)
        flat, flat_of = flatten_groups(paired, of if many else None)
    else:
        flat, flat_of = flatten_groups(paired.take(blocking), of[blocking] if many else None)
    other = paired.take(~blocking)
    lo = joined([flat.start, other.start]).astype(np.float64, copy=False)
    hi = joined([flat.end, other.end]).astype(np.float64, copy=False)
    code = joined([flat.bucket, other.bucket]).astype(np.int64, copy=False)
    flags = np.concatenate([np.ones(len(flat), np.bool_), np.zeros(len(other), np.bool_)])
    if many:
        code %= n_buckets
        assert flat_of is not None  # (given groups, flatten_groups gives theirs)
        of = np.concatenate([flat_of, of[~blocking]])
        by = np.argsort(of, kind="stable")  # (stable: each stream's flat ones, then others)
        lo, hi, code, flags, of = lo[by], hi[by], code[by], flags[by], of[by]
    else:
        of = _stream_of([lo.shape[0]])
    a = att.of(lo)
    att_end = att.ends[a]
    cut = np.where(att_end < hi, att_end, hi)  # (as min(hi, end) takes them)
    keep = cut > lo
    if not keep.all():  # (most often every one is kept: no copy then)
        a, lo, cut, code, flags = a[keep], lo[keep], cut[keep], code[keep], flags[keep]
        of = _pick(of, keep)
    if lo.shape[0] == 0:
        return None
    pairs, local = _lanes(a, _pick(rank, of))
    return _Rows(pairs, local, (lo, cut, code, flags))


def _in_order(recorded: tuple[I64, list[npt.NDArray[Any]]] | None) -> _Recorded:
    """The intervals by lane then start (a stable sort: ties keep the streams' order)."""
    if recorded is None:
        z = np.zeros(0)
        return _Recorded(z.astype(np.int64), z, z, z.astype(np.int64), z > 0)
    lane, (start, end, code, blocking) = recorded
    return _Recorded(*_in(_by_lane(lane, start), lane, start, end, code, blocking))


def _in(order: I64, *columns: npt.NDArray[Any]) -> list[npt.NDArray[Any]]:
    """``columns`` taken in ``order``; themselves when it is the order they are in (a job
    of one stream a lane: no copy of a million rows)."""
    if order.shape[0] < 2 or bool((np.diff(order) == 1).all()):
        return list(columns)
    return [c[order] for c in columns]


def _classify(
    steps: tuple[I64, list[npt.NDArray[Any]]] | None,
    lanes: list[Lane],
    report: Report,
    recorded: _Recorded,
) -> StepSpans:
    """The step spans in lane order, coloured when first asked (:class:`StepSpans`)."""
    if steps is None:
        z = np.zeros(0)
        return StepSpans(
            np.zeros(0, np.int64), z, z, np.zeros(0, np.int64), z > 0, lambda _: _NO_COLOURS
        )
    lane, (start, end, step, closed) = steps
    lane, start, end, step, closed = _in(_by_lane(lane, start), lane, start, end, step, closed)
    attempts = report.attempts
    lane_attempt = np.array([ln.attempt_index for ln in lanes], dtype=np.int64)

    def colours(spans: StepSpans) -> tuple[I8, F64]:
        return _colours(spans, lane_attempt, attempts, report.ideal_step_time, recorded)

    return StepSpans(lane, start, end, step, closed, colours)


_NO_COLOURS = (np.zeros(0, np.int8), np.zeros(0))


def _colours(
    spans: StepSpans,
    lane_attempt: I64,
    attempts: Sequence[AttemptSummary],
    ideal: float | None,
    recorded: _Recorded,
) -> tuple[I8, F64]:
    """Each span's bucket and own time (see the module)."""
    lane, start, end, step = spans.lane, spans.start, spans.end, spans.step
    # keep_upto[i]: steps above the lowest restore point of any later attempt were redone.
    keep_upto = [math.inf] * len(attempts)
    running = math.inf
    for i in range(len(attempts) - 1, -1, -1):
        keep_upto[i] = running
        a = attempts[i]
        point = a.restore_step
        if point is None and a.first_step is not None:
            point = a.first_step - 1
        if point is not None:
            running = min(running, float(point))
    upto = np.array(keep_upto, dtype=np.float64)[lane_attempt[lane]]
    # A step's own time excludes the blocking intervals inside it (data loading, saves),
    # as the ideal step time does.
    blocking = recorded.blocking
    d = end - start
    d -= _covered(
        lane,
        start,
        end,
        recorded.lane[blocking],
        recorded.start[blocking],
        recorded.end[blocking],
        lane_attempt.shape[0],
    )
    bucket = np.zeros(start.shape[0], np.int8)
    if ideal is not None:
        bucket[d > SLOW_FACTOR * ideal] = STEP_BUCKETS.index("slowdown")
        first = np.ones(start.shape[0], bool)
        first[1:] = lane[1:] != lane[:-1]
        # the first step of each attempt (on every rank) carries the compile/warm-up
        first[1:] |= lane_attempt[lane[1:]] != lane_attempt[lane[:-1]]
        bucket[first & (d > _STARTUP_FACTOR * ideal)] = STEP_BUCKETS.index("startup")
    bucket[step > upto] = STEP_BUCKETS.index("wasted")
    return bucket, np.maximum(d, 0.0)


def _by_lane(lane: I64, start: F64) -> I64:
    """The order of rows by lane, then start (a stable sort: ties keep their order); the
    rows' own when they are in it (one stream a lane, the usual case: no sort of a million
    rows)."""
    n = int(lane.shape[0])
    same = lane[1:] == lane[:-1]
    if n < 2 or bool(((lane[1:] > lane[:-1]) | (same & (start[1:] >= start[:-1]))).all()):
        return np.arange(n)
    return np.lexsort((start, lane))


#: A lane of at most this many blocking pieces and step spans is taken with the others in
#: one pass (each larger one in a pass of its own, as its columns are long enough).
_SMALL_PIECES, _SMALL_STEPS = 32, 4096


def _covered(  # noqa: PLR0917 (step spans and pieces, each by lane then start)
    lane: I64, start: F64, end: F64, p_lane: I64, p_start: F64, p_end: F64, n_lanes: int
) -> F64:
    """How much of each step span the blocking pieces of its lane cover: for each lane,
    ``Coverage(its pieces).between(its spans)``, to the last bit; many small lanes (a job
    of 10,000 short attempts) in one pass."""
    out = np.zeros(start.shape[0])
    bounds = np.searchsorted(lane, np.arange(n_lanes + 1))
    pieces_at = np.searchsorted(p_lane, np.arange(n_lanes + 1))
    n_steps, n_pieces = np.diff(bounds), np.diff(pieces_at)
    both = (n_steps > 0) & (n_pieces > 0)
    small = both & (n_pieces <= _SMALL_PIECES) & (n_steps <= _SMALL_STEPS)
    for li in np.flatnonzero(both & ~small).tolist():
        lo, hi = int(bounds[li]), int(bounds[li + 1])
        p0, p1 = int(pieces_at[li]), int(pieces_at[li + 1])
        covered = Coverage(p_start[p0:p1], p_end[p0:p1])
        out[lo:hi] = covered.between(start[lo:hi], end[lo:hi])
    rows = np.flatnonzero(small[lane])
    pieces = np.flatnonzero(small[p_lane])
    of_pieces = p_lane[pieces]
    for r0 in range(0, rows.shape[0], _RUN):  # (in runs: the pass's columns stay small)
        r = rows[r0 : r0 + _RUN]
        p = pieces[
            np.searchsorted(of_pieces, lane[r[0]], "left") : np.searchsorted(
                of_pieces, lane[r[-1]], "right"
            )
        ]  # (the pieces of the lanes of these rows)
        out[r] = _covered_small(lane[r], start[r], end[r], p_lane[p], p_start[p], p_end[p])
    return out


def _covered_small(  # noqa: PLR0917 (step spans and pieces of small lanes)
    lane: I64, a: F64, b: F64, p_lane: I64, p_start: F64, p_end: F64
) -> F64:
    """:func:`_covered` of lanes of a few pieces each, in one pass: what each lane's
    :class:`Coverage` computes, its running sums included (added in the same order)."""
    n_p = int(p_start.shape[0])
    first = np.ones(n_p, np.bool_)
    first[1:] = p_lane[1:] != p_lane[:-1]
    head = np.flatnonzero(first)
    pos = np.arange(n_p) - np.repeat(head, np.diff(np.append(head, n_p)))
    # cum[k]: the lengths of the lane's pieces before piece k, summed left to right
    length = p_end - p_start
    cum = np.zeros(n_p)
    for j in range(1, int(pos.max()) + 1 if n_p else 0):
        at = np.flatnonzero(pos == j)
        cum[at] = cum[at - 1] + length[at - 1]
    lane_first = np.zeros(int(p_lane.max()) + 1 if n_p else 0, np.int64)
    lane_first[p_lane[head]] = head

    def upto(t: F64) -> F64:
        # each lane's searchsorted(starts, t, "right"), as one sort of pieces and times
        n_t = int(t.shape[0])
        keys_lane = np.concatenate([p_lane, lane])
        keys_t = np.concatenate([p_start, t])
        is_t = np.concatenate([np.zeros(n_p, np.bool_), np.ones(n_t, np.bool_)])
        order = np.lexsort((is_t, keys_t, keys_lane))
        before = np.cumsum(~is_t[order])  # pieces at or before each place
        found = is_t[order]
        i = np.empty(n_t, np.int64)
        i[order[found] - n_p] = before[found]
        local = i - lane_first[lane]  # pieces of the lane at or before t
        k = np.maximum(i - 1, 0)
        partial = np.clip(np.minimum(t, p_end[k]) - p_start[k], 0.0, None)
        return np.where(local > 0, cum[k] + partial, 0.0)

    out = upto(b) - upto(a)
    return np.where(b > a, np.clip(out, 0.0, None), 0.0)
