"""Ingest: route events into compact per-stream state, in O(1) per event.

Nothing here computes the partition; it only keeps what the partition needs,
in a form that costs a few bytes per step (``array`` columns, not objects).
:class:`Ingestor` is the ingest of a batch; the state it fills is its base
(:mod:`._ingest_state`), a stream's columns are :mod:`._stream`'s, and where each event
comes from (and what is checked per source) is :mod:`._origin`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from badput.engine._batch import Batch
from badput.engine._ingest_state import IngestState, LifecycleEvent, unknown_kind_message
from badput.engine._intervals import Marks
from badput.engine._origin import Origin, Run, check_clock, report_foreign
from badput.engine._stream import NO_WRITER, MarkBytes, RestoreMark, Stream
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

__all__ = ["Ingestor"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def _fits(step: int) -> bool:
    return -(2**63) <= step < 2**63


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


class Ingestor(IngestState):
    """Turns events into :class:`Stream` state; the Accountant owns one."""

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
        origin = Origin(runs, self.sources)
        if self.job is None:
            self.job = batch.events[0].job
        job = self.job
        mine = batch.same_job(job)
        if mine is not None:
            report_foreign(batch, np.flatnonzero(~mine), origin, job, self.diagnostics)
            pos: npt.NDArray[np.intp] = np.flatnonzero(mine)
            if not pos.shape[0]:
                return
            ts, kind, group = batch.ts[pos], batch.kind[pos], batch.group[pos]
        else:
            pos = np.arange(n)
            ts, kind, group = batch.ts, batch.kind, batch.group
        m = int(pos.shape[0])
        self.n_events += m
        check_clock(ts, pos, origin, self._source_last_ts, self.diagnostics)

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
        origin: Origin,
    ) -> None:
        """Append each stream's steps, marks and other times, as slices of the batch's
        columns: one stable sort by (stream, category) puts each stream's events of each
        category together, in arrival order, so a file of thousands of small streams costs
        a few slices each."""
        category = _CATEGORY[kind]  # 0 step, 1 interval mark, 2 other
        steps = self._step_values(category, pos, batch, origin)
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
        marks = MarkBytes(
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
        ts_b = ts.tobytes()
        step_fits = bool(len(streams)) and streams[0].steps.step.fits(steps)
        if step_fits:
            steps = steps.astype(np.int32)  # (as each stream keeps them)
        is_end_b = (kind == _STEP_END).astype(np.int8).tobytes()
        descends = MarkBytes.out_of_order(ts, edges[1:-1:_CATEGORIES], edges[2::_CATEGORIES])
        step_descends = MarkBytes.out_of_order(ts, edges[0:-1:_CATEGORIES], edges[1::_CATEGORIES])
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
                    steps[a:b],
                    is_end_b[a:b],
                    first_ts=ts.item(a),  # as a Python float
                    descends=step_descends[k],
                    fits=step_fits,
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

    def _step_values(
        self,
        category: npt.NDArray[np.int8],
        pos: npt.NDArray[np.intp],
        batch: Batch,
        origin: Origin,
    ) -> I64:
        """The step of every step event of the batch (zeros elsewhere). One whose step is
        outside the 64-bit range is not counted: its ``category`` becomes dropped."""
        m = int(category.shape[0])
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
        return steps

    def _mark_fields(
        self,
        kind: npt.NDArray[np.int16],
        category: npt.NDArray[np.int8],
        pos: npt.NDArray[np.intp],
        batch: Batch,
        origin: Origin,
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
                self.diagnostics.counts["unknown_kind"] = (
                    self.diagnostics.counts.get("unknown_kind", 0) + 1
                )
            # shown once, where it first appears (a batch meets its rare events by stream)
            self.diagnostics.add_first(
                "unknown_kind", kind, unknown_kind_message(kind), source, line
            )


_STEP_START = KIND_CODE[Kind.STEP_START]
_STEP_END = KIND_CODE[Kind.STEP_END]
# Per kind code (the last entry is for unknown kinds, code -1).
_SPLIT: list[tuple[str, bool]] = [interval_base(k) or ("", False) for k in KIND_NAMES] + [
    ("", False)
]
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
