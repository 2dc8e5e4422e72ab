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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from badput.engine._ingest import Ingestor
from badput.engine._intervals import Coverage, flatten_spans, joined, pair_columns
from badput.engine._model import Report
from badput.engine._stream import Stream

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


@dataclass(frozen=True)
class StepSpans:
    """Every step span, as columns (a million steps cost a few tens of MB, not objects).

    Sorted by lane, then start. A step never ended (a crash, a hang: ``closed`` false)
    lasts until the next event of its lane, at most a typical step time of its stream
    (the median of its ended steps, else the ideal), and never past its attempt's end.
    """

    lane: I64
    start: F64
    end: F64
    step: I64
    bucket: I8  # index into STEP_BUCKETS
    closed: npt.NDArray[np.bool_]
    own: F64  # the step's own time: its span less the blocking intervals inside it

    def __len__(self) -> int:
        return int(self.start.shape[0])


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


def _pair_steps(stream: Stream, close_at: float) -> tuple[F64, F64, I64, npt.NDArray[np.bool_]]:
    """Step spans of one stream: each step_start to the step_end of the same step that
    follows it; a start followed by anything else is open (ends at the next event)."""
    log = stream.steps
    if not len(log):
        empty = np.zeros(0)
        return empty, empty, np.zeros(0, np.int64), np.zeros(0, np.bool_)
    ts = np.frombuffer(log.ts, dtype=np.float64)
    step = log.step.column()
    is_end = np.frombuffer(log.is_end, dtype=np.int8).astype(bool)
    if log.unsorted:
        order = np.argsort(ts, kind="stable")
        ts, step, is_end = ts[order], step[order], is_end[order]
    starts = np.flatnonzero(~is_end)
    if starts.shape[0] == 0:  # ends only: each step ran from the previous end
        ends = np.flatnonzero(is_end)
        if ends.shape[0] < 2:
            empty = np.zeros(0)
            return empty, empty, np.zeros(0, np.int64), np.zeros(0, np.bool_)
        return ts[ends[:-1]], ts[ends[1:]], step[ends[1:]], np.ones(ends.shape[0] - 1, np.bool_)
    nxt = starts + 1
    has_next = nxt < ts.shape[0]
    nxt_c = np.minimum(nxt, ts.shape[0] - 1)
    closed = has_next & is_end[nxt_c] & (step[nxt_c] == step[starts])
    end = np.where(has_next, ts[nxt_c], max(close_at, float(ts[-1])))
    return ts[starts], np.maximum(end, ts[starts]), step[starts], closed


class _Recorded(NamedTuple):
    """Recorded intervals as columns: lane, start, end (cut at the attempt's end), bucket
    code, blocking. A job with a data load a step has millions: never an object each
    until the timeline's list is made, in order."""

    lane: I64
    start: F64
    end: F64
    code: I64
    blocking: npt.NDArray[np.bool_]


def build_timeline(ing: Ingestor, report: Report) -> Timeline:
    """The spans of the ingested job, coloured with ``report`` (its attempts and ideal)."""
    attempts = report.attempts
    att_starts = np.array([a.start for a in attempts], dtype=np.float64)
    multi_rank = len({s.rank for s in ing.streams.values() if s.has_work}) > 1
    hosts = _hosts(ing, att_starts)

    def attempt_of(ts: F64) -> I64:
        return np.maximum(np.searchsorted(att_starts, ts, side="right") - 1, 0).astype(np.int64)

    ends_of = np.array([a.end for a in attempts], dtype=np.float64)
    lane_index: dict[tuple[int, int], int] = {}
    parts: list[tuple[I64, F64, F64, I64, npt.NDArray[np.bool_]]] = []
    recorded: list[_Recorded] = []
    lane_keys: list[tuple[int, int]] = []

    def lanes_of(ai: I64, rank: int) -> I64:
        """The lane of each of ``ai`` (attempt indices) on ``rank``."""
        seen = np.unique(ai)
        for key in ((int(a), rank) for a in seen):
            if key not in lane_index:
                lane_index[key] = len(lane_keys)
                lane_keys.append(key)
        ids = np.array([lane_index[int(a), rank] for a in seen], np.int64)
        return ids[np.searchsorted(seen, ai)]

    for stream in ing.streams.values():
        if not stream.has_work or not attempts:
            continue
        start, end, step, closed = _pair_steps(stream, report.end)
        ai = attempt_of(start)
        if start.shape[0]:
            start, end, step, closed, ai = _cut_at_ends(start, end, step, closed, ai, ends_of)
            if not closed.all():
                end = _typical_open(start, end, closed, report.ideal_step_time)
        if start.shape[0]:
            parts.append((lanes_of(ai, stream.rank), start, end, step, closed))
        lo, hi, code, blocking = _recorded(stream, report.end)
        a = attempt_of(lo)
        att_end = ends_of[a]
        cut = np.where(att_end < hi, att_end, hi)  # (as min(hi, end) takes them)
        keep = cut > lo
        if not keep.all():  # (most often every one is kept: no copy then)
            a, lo, cut, code, blocking = a[keep], lo[keep], cut[keep], code[keep], blocking[keep]
        if lo.shape[0]:
            recorded.append(_Recorded(lanes_of(a, stream.rank), lo, cut, code, blocking))

    lanes, renumber, columns = _in_order(lane_keys, report, multi_rank, hosts, recorded)
    steps = _classify(parts, renumber, lanes, report, columns)
    intervals = IntervalSpans(*columns, names=ing.buckets.names)
    return Timeline(lanes, steps, intervals, report.ideal_step_time)


def _hosts(ing: Ingestor, att_starts: F64) -> dict[tuple[int, int], str]:
    """The host of each (attempt, rank) whose lifecycle events name one (the first)."""
    hosts: dict[tuple[int, int], str] = {}
    for e in ing.lifecycle:
        if e.host is not None and att_starts.shape[0]:
            at = max(0, int(np.searchsorted(att_starts, e.ts, side="right")) - 1)
            hosts.setdefault((at, e.rank or 0), e.host)
    return hosts


def _cut_at_ends(  # noqa: PLR0917 (a stream's step spans, as columns)
    start: F64, end: F64, step: I64, closed: npt.NDArray[np.bool_], ai: I64, ends_of: F64
) -> tuple[F64, F64, I64, npt.NDArray[np.bool_], I64]:
    """What happens after an attempt's end is not accounted (the report says so in a
    diagnostic): spans are cut at it, and one that starts after it is left out."""
    att_end = ends_of[ai]
    keep = start <= att_end
    if not keep.all():  # (most often every one is kept: no copy then)
        start, end, step, closed = start[keep], end[keep], step[keep], closed[keep]
        att_end, ai = att_end[keep], ai[keep]
    return start, np.minimum(end, att_end), step, closed, ai


def _typical_open(start: F64, end: F64, closed: npt.NDArray[np.bool_], ideal: float | None) -> F64:
    """A step never ended (a crash, a hang) lasts a typical step, as the partition counts it
    (ACCOUNTING.md §4); the rest of its time is not step time."""
    done = (end - start)[closed]
    typical = float(np.median(done)) if done.shape[0] else ideal
    if typical is not None:
        end = np.where(closed, end, np.minimum(end, start + typical))
    return end


def _recorded(stream: Stream, close_at: float) -> tuple[F64, F64, I64, npt.NDArray[np.bool_]]:
    """The recorded intervals of ``stream``: the blocking ones flattened (innermost wins),
    then the others; as columns (start, end, bucket code, blocking)."""
    recorded = pair_columns(stream.marks.columns(), close_at=close_at).intervals
    flat = flatten_spans(recorded.take(recorded.blocking))
    nonblocking = recorded.take(~recorded.blocking)
    n_flat, n_other = flat.start.shape[0], nonblocking.start.shape[0]
    return (
        np.concatenate([flat.start, nonblocking.start]).astype(np.float64),
        np.concatenate([flat.end, nonblocking.end]).astype(np.float64),
        np.concatenate([flat.bucket, nonblocking.bucket]).astype(np.int64),
        np.concatenate([np.ones(n_flat, np.bool_), np.zeros(n_other, np.bool_)]),
    )


def _in_order(
    lane_keys: list[tuple[int, int]],
    report: Report,
    multi_rank: bool,
    hosts: dict[tuple[int, int], str],
    recorded: list[_Recorded],
) -> tuple[list[Lane], I64, _Recorded]:
    """Lanes in attempt order, then rank; what was built in stream order renumbered (the
    new lane of each old one, and the intervals, by lane then start: a stable sort)."""
    attempts = report.attempts
    order = sorted(range(len(lane_keys)), key=lambda i: lane_keys[i])
    renumber = np.empty(len(lane_keys), np.int64)
    renumber[order] = np.arange(len(order))
    lanes = [
        Lane(
            attempt_index=lane_keys[i][0],
            attempt=attempts[lane_keys[i][0]].id,
            rank=lane_keys[i][1] if multi_rank else None,
            host=hosts.get(lane_keys[i]),
        )
        for i in order
    ]
    if not recorded:
        z = np.zeros(0)
        return lanes, renumber, _Recorded(z.astype(np.int64), z, z, z.astype(np.int64), z > 0)
    lane = renumber[joined([r.lane for r in recorded])]
    start = joined([r.start for r in recorded])
    by = np.lexsort((np.arange(lane.shape[0]), start, lane))
    columns = _Recorded(
        *_in(
            by,
            lane,
            start,
            joined([r.end for r in recorded]),
            joined([r.code for r in recorded]),
            joined([r.blocking for r in recorded]),
        )
    )
    recorded.clear()  # (the caller's: each stream's columns, joined now)
    return lanes, renumber, columns


def _in(order: I64, *columns: npt.NDArray[Any]) -> list[npt.NDArray[Any]]:
    """``columns`` taken in ``order``; themselves when it is the order they are in (a job
    of one stream a lane: no copy of a million rows)."""
    if order.shape[0] < 2 or bool((np.diff(order) == 1).all()):
        return list(columns)
    return [c[order] for c in columns]


def _classify(
    parts: list[tuple[I64, F64, F64, I64, npt.NDArray[np.bool_]]],
    renumber: I64,
    lanes: list[Lane],
    report: Report,
    recorded: _Recorded,
) -> StepSpans:
    if not parts:
        z = np.zeros(0)
        return StepSpans(
            np.zeros(0, np.int64), z, z, np.zeros(0, np.int64), np.zeros(0, np.int8), z > 0, z
        )
    lane = renumber[joined([p[0] for p in parts])]
    start = joined([p[1] for p in parts])
    end = joined([p[2] for p in parts])
    step = joined([p[3] for p in parts])
    closed = joined([p[4] for p in parts])
    parts.clear()  # (the caller's: each stream's columns, joined now)
    lane, start, end, step, closed = _in(np.lexsort((start, lane)), lane, start, end, step, closed)

    # keep_upto[i]: steps above the lowest restore point of any later attempt were redone.
    attempts = report.attempts
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
    lane_attempt = np.array([ln.attempt_index for ln in lanes], dtype=np.int64)
    upto = np.array(keep_upto, dtype=np.float64)[lane_attempt[lane]]
    # A step's own time excludes the blocking intervals inside it (data loading, saves),
    # as the ideal step time does.
    d = end - start
    bounds = np.searchsorted(lane, np.arange(len(lanes) + 1))
    blocking = recorded.blocking
    pieces_lane = recorded.lane[blocking]  # (by lane, then start)
    pieces_start, pieces_end = recorded.start[blocking], recorded.end[blocking]
    pieces_at = np.searchsorted(pieces_lane, np.arange(len(lanes) + 1))
    for li in np.unique(pieces_lane).tolist():
        lo, hi = int(bounds[li]), int(bounds[li + 1])
        if hi > lo:
            p0, p1 = int(pieces_at[li]), int(pieces_at[li + 1])
            covered = Coverage(pieces_start[p0:p1], pieces_end[p0:p1])
            d[lo:hi] -= covered.between(start[lo:hi], end[lo:hi])
    bucket = np.zeros(start.shape[0], np.int8)
    ideal = report.ideal_step_time
    if ideal is not None:
        bucket[d > SLOW_FACTOR * ideal] = STEP_BUCKETS.index("slowdown")
        first = np.ones(start.shape[0], bool)
        first[1:] = lane[1:] != lane[:-1]
        # the first step of each attempt (on every rank) carries the compile/warm-up
        first[1:] |= lane_attempt[lane[1:]] != lane_attempt[lane[:-1]]
        bucket[first & (d > _STARTUP_FACTOR * ideal)] = STEP_BUCKETS.index("startup")
    bucket[step > upto] = STEP_BUCKETS.index("wasted")
    return StepSpans(lane, start, end, step, bucket, closed, np.maximum(d, 0.0))
