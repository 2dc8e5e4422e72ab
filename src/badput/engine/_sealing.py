"""Each attempt's step rows for one query: sealed rows reused, the tail computed, what
is settled sealed.

Rows before a quiet cut never change again (:mod:`badput.engine._steps`), so they are
sealed into the :class:`~badput.engine._cache.QueryCache` and a query computes only the
rows after them. A closed attempt is sealed whole: a large one block by block (the
temporary columns of each pass hold one block), many small ones together in one
vectorised pass (:mod:`badput.engine._together`). Sealed rows no longer trusted (late
events, moved bounds) are dropped and made again. Pure computation on the ingested state.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from badput.engine import _steps
from badput.engine._attempt_streams import AttemptStreams
from badput.engine._attempts import Attempt
from badput.engine._cache import QueryCache
from badput.engine._ingest import Ingestor
from badput.engine._intervals import Coverage, Marks
from badput.engine._rows import (
    NO_INTERVALS,
    NO_ROWS,
    AttemptRows,
    SortedMarks,
    attempt_bounds,
    narrowed,
    slice_range,
)
from badput.engine._steps import (
    CLEAN_EXEMPT,
    AttemptSteps,
    Rows,
    TailIntervals,
    compute_rows,
    tail_intervals,
)
from badput.engine._stream import Stream
from badput.engine._together import ClosedAttempt, seal_together

__all__ = ["BULK_MIN_ATTEMPTS", "CLOSED_BLOCK", "Sealer"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
#: Raw step events per block when a large closed attempt is sealed (see Sealer._seal_block).
CLOSED_BLOCK = 1 << 18
#: Fewer closed attempts than this to seal are sealed one by one (the same numbers).
BULK_MIN_ATTEMPTS = 8


class Sealer:
    """The rows of the attempts of ``ing`` for one query, sealed into ``cache``."""

    def __init__(self, ing: Ingestor, cache: QueryCache, streams: AttemptStreams) -> None:
        self.ing = ing
        self.cache = cache
        self.streams = streams
        # id(attempt) -> what seal_closed() sealed of it whole in this query, from the
        # stream rows() is then asked with (nothing in it is stale: no check needed)
        self._sealed_now: dict[int, AttemptSteps] = {}

    def rows(self, att: Attempt, s: Stream, closed: bool) -> AttemptRows:
        """Rows of ``att`` from its leader ``s``: what is sealed reused, the tail computed,
        what is settled sealed (all of it when the attempt is ``closed``)."""
        sealed = self._sealed_now.pop(id(att), None)
        if sealed is not None and closed:
            return AttemptRows(sealed, NO_ROWS, NO_INTERVALS, 0)  # all sealed, just now
        key = (att.key, att.range_lo)
        sig = _signature(att, s)
        lo, hi = att.eff_start, att.eff_end
        steps = self.cache.attempts.get(key)
        if steps is not None and _stale(steps, sig, s, att, hi):
            steps = None
        if steps is None:
            steps = AttemptSteps(sig)
            self.cache.attempts[key] = steps
        elif (
            steps.whole
            and closed
            and steps.raw_seen == len(s.steps)
            and steps.marks_seen == len(s.marks)
        ):
            return AttemptRows(steps, NO_ROWS, NO_INTERVALS, 0)  # nothing new: all sealed
        steps.raw_seen = len(s.steps)
        steps.marks_seen = len(s.marks)

        view = self.streams.view(s)
        ts, step, is_end = view.steps()
        marks = view.marks
        # Events after the attempt's end are ignored in every respect (§9.5).
        range_lo, top = attempt_bounds(att)
        if att.key is None or att.ended:
            ts, step, is_end = slice_range(ts, step, is_end, range_lo, top)
            a, b = marks.ts.searchsorted((range_lo, top), "left").tolist()
            if a > 0 or b < len(marks):
                marks = narrowed(marks, a, b)
        if closed and int(ts.shape[0]) - steps.raw_done > CLOSED_BLOCK:
            steps.reserve(int((is_end[steps.raw_done :] == 0).sum()))
            size = CLOSED_BLOCK
            while int(ts.shape[0]) - steps.raw_done > size:
                used = self._seal_block(steps, ts, step, is_end, marks, lo, hi, size)
                if used == 0 or used < size // 4:  # little quiet time (a long eval): larger
                    size *= 2
        ts, step, is_end = ts[steps.raw_done :], step[steps.raw_done :], is_end[steps.raw_done :]
        tail_marks = marks.take(slice(steps.marks_done, None))

        ivs = tail_intervals(tail_marks, lo, hi)
        tail, unmatched_ts = self._rows_after(steps, ts, step, is_end, ivs, lo, hi)
        if closed:
            steps.seal(
                tail,
                ivs=ivs,
                cut=math.inf,
                raw_used=int(ts.shape[0]),
                marks_used=len(tail_marks),
                unmatched_ts=unmatched_ts,
            )
            steps.whole, steps.whole_end = True, hi
            return AttemptRows(steps, Rows.empty(), TailIntervals.empty(), 0)
        if tail.n >= _steps.SEAL_MIN_TAIL:
            tail, ivs, unmatched_ts = _seal_settled(
                steps, tail, ivs, unmatched_ts, is_end, tail_marks.ts, s.settled_before()
            )
        return AttemptRows(steps, tail, ivs, int(unmatched_ts.shape[0]))

    def _seal_block(  # noqa: PLR0917
        self,
        steps: AttemptSteps,
        ts: F64,
        step: I64,
        is_end: npt.NDArray[np.int8],
        marks: Marks | SortedMarks,
        lo: float,
        hi: float,
        size: int,
    ) -> int:
        """Seal the next block of a large closed attempt (about ``size`` raw step events)
        up to a quiet cut, as a running attempt's prefix is sealed; return how many raw
        step events were sealed (0: the block has no quiet moment to cut at).

        The rows and intervals before a quiet cut depend on nothing after it, so sealing
        the attempt block by block gives what sealing it whole gives, while the temporary
        columns of each pass hold one block (a million-step attempt: a few MB, not 200).
        """
        a = steps.raw_done
        # The block ends before the first event at some time, so no tie straddles its end.
        stop = float(ts[a + size])
        j = int(np.searchsorted(ts, stop, "left"))
        m_lo = steps.marks_done
        m_hi = int(np.searchsorted(marks.ts, stop, "left"))
        if j <= a + 1:
            return 0
        block_marks = marks.take(slice(m_lo, max(m_lo, m_hi)))
        ivs = tail_intervals(block_marks, lo, hi)
        rows, unmatched_ts = self._rows_after(steps, ts[a:j], step[a:j], is_end[a:j], ivs, lo, hi)
        r = _steps.quiet_cut(rows, ivs, block_marks.ts, min_keep=1, unmatched_ts=unmatched_ts)
        if r == 0:
            return 0
        cut = float(rows.start[r])
        raw_used = int(np.flatnonzero(is_end[a:j] == 0)[r])
        steps.seal(
            rows.part(0, r),
            ivs=ivs,
            cut=cut,
            raw_used=raw_used,
            marks_used=int(np.searchsorted(block_marks.ts, cut, "left")),
            unmatched_ts=unmatched_ts,
        )
        return raw_used

    def _rows_after(  # noqa: PLR0917 (the columns of one stretch of an attempt)
        self,
        steps: AttemptSteps,
        ts: F64,
        step: I64,
        is_end: npt.NDArray[np.int8],
        ivs: TailIntervals,
        lo: float,
        hi: float,
    ) -> tuple[Rows, F64]:
        """Rows of the step events that follow what ``steps`` sealed, with their intervals
        ``ivs``; and the times of the step ends that matched no start."""
        exempt = self.ing.buckets.known(CLEAN_EXEMPT)
        rows, unmatched_ts, _ = compute_rows(
            ts,
            step,
            is_end,
            lo=lo,
            hi=hi,
            cov=Coverage.of(ivs.pieces),
            prev_step=steps.last_step(),
            unclean_cov=Coverage.of(ivs.pieces.take(~np.isin(ivs.pieces.bucket, exempt))),
        )
        return rows, unmatched_ts

    def seal_closed(self, todo: list[tuple[Attempt, Stream]]) -> None:
        """Seal the closed attempts ``todo`` (each with its leader) whole, in one vectorised
        pass over all of them (:mod:`badput.engine._together`), into the cache; fewer
        than :data:`BULK_MIN_ATTEMPTS` are left to :meth:`rows`, one by one (the same
        numbers)."""
        n_buckets = max(1, len(self.ing.buckets))
        if len(todo) < BULK_MIN_ATTEMPTS or len(todo) * n_buckets >= 2**31:
            return
        closed = []
        for att, s in todo:
            # events after the attempt's end are ignored (§9.5)
            range_lo, top = attempt_bounds(att) if att.ended else (-math.inf, math.inf)
            closed.append(
                ClosedAttempt(_signature(att, s), att.eff_start, att.eff_end, s, range_lo, top)
            )
        sealed = seal_together(closed, n_buckets, self.ing.buckets.known(CLEAN_EXEMPT))
        for (att, _s), steps in zip(todo, sealed, strict=True):
            self.cache.attempts[(att.key, att.range_lo)] = steps
            self._sealed_now[id(att)] = steps


def _seal_settled(  # noqa: PLR0917 (the tail's columns)
    steps: AttemptSteps,
    tail: Rows,
    ivs: TailIntervals,
    unmatched_ts: F64,
    is_end: npt.NDArray[np.int8],
    mark_ts: F64,
    settled_before: float,
) -> tuple[Rows, TailIntervals, F64]:
    """Seal the rows of a running attempt's long ``tail`` up to its latest quiet cut, if any,
    before ``settled_before``; return what is left of the tail, its intervals and its
    unmatched step ends (``is_end``, ``mark_ts``: the tail's raw step events and marks)."""
    r = _steps.quiet_cut(
        tail,
        ivs,
        mark_ts,
        min_keep=1,
        unmatched_ts=unmatched_ts,
        before=settled_before,
    )
    if r == 0:
        return tail, ivs, unmatched_ts
    cut = float(tail.start[r])
    raw_used = int(np.flatnonzero(is_end == 0)[r])
    marks_used = int(np.searchsorted(mark_ts, cut, side="left"))
    steps.seal(
        tail.part(0, r),
        ivs=ivs,
        cut=cut,
        raw_used=raw_used,
        marks_used=marks_used,
        unmatched_ts=unmatched_ts,
    )
    return tail.part(r, tail.n), ivs.after(cut), unmatched_ts[unmatched_ts >= cut]


def _signature(att: Attempt, s: Stream) -> tuple[Any, ...]:
    """What sealed rows were made for: the leader stream, and the attempt's start and range
    (rows sealed for other ones are made again)."""
    return (s.attempt, s.rank, att.eff_start, att.range_lo, att.range_hi)


def _stale(steps: AttemptSteps, sig: tuple[Any, ...], s: Stream, att: Attempt, hi: float) -> bool:
    """Whether the sealed rows can no longer be trusted (late data, moved bounds)."""
    if steps.signature != sig:
        return True
    if steps.whole:
        if steps.whole_end != hi:
            return True
    elif hi < steps.cut:
        return True
    cut = steps.cut
    if cut == -math.inf:
        return False
    if len(s.steps) > steps.raw_seen:
        new = np.frombuffer(s.steps.ts, dtype=np.float64)[steps.raw_seen :]
        late = new[(new >= att.range_lo) & (new < att.range_hi)]
        if late.shape[0] and float(late.min()) < cut:
            return True
    if len(s.marks) <= steps.marks_seen:
        return False
    new_marks = np.frombuffer(s.marks.ts, dtype=np.float64)[steps.marks_seen :]
    return bool(((new_marks >= att.range_lo) & (new_marks < min(cut, att.range_hi))).any())
