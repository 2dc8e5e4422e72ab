"""Step rows of one attempt, sealed as the job goes, so a live query stays cheap.

One *row* per ``step_start`` of the attempt's leader rank: its span, the steps of
work it stands for, its time once recorded intervals are taken out, whether it is
a clean measurement of speed. Rows before a *cut* (a step start where no recorded
interval is open) never change again, so they are **sealed**: kept in growable
columns with prefix sums. A query recomputes only the rows after the cut (the
tail), so its cost is O(new rows) + O(segments), whatever the job's history.

Everything here is pure computation on arrays; what queries keep of it is in
:mod:`badput.engine._cache`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from badput.engine._intervals import (
    Coverage,
    Marks,
    Spans,
    flatten_spans,
    innermost_rank,
    pair_columns,
)

if TYPE_CHECKING:
    from badput.engine._together import SealedTogether

__all__ = [
    "CLEAN_EXEMPT",
    "NAN_CELL",
    "SEAL_MIN_TAIL",
    "AttemptSteps",
    "Rows",
    "TailIntervals",
    "add_sums",
    "clipped_piece_sums",
    "clipped_sums",
    "compute_rows",
    "median_of_sorted",
    "one_valued",
    "quiet_cut",
    "repeated",
    "tail_intervals",
    "without_order",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

#: Tail rows tolerated before sealing is attempted (tests lower it to exercise sealing).
SEAL_MIN_TAIL = 2048

# Blocking data loading inside a step does not spoil the step as a speed measurement:
# its time is already taken out. Any other interval (eval, checkpoint...) does.
CLEAN_EXEMPT = frozenset({"data_loading"})


NAN_CELL: F64 = np.full(1, np.nan)
_ZERO_CELL: I64 = np.zeros(1, np.int64)


def repeated(cell: npt.NDArray[Any], n: int) -> npt.NDArray[Any]:
    """``cell``'s one value ``n`` times, as a read-only zero-stride view (no memory, made in
    ~1 µs: ``np.broadcast_to`` costs ten times that, and a query asks once per attempt)."""
    out: npt.NDArray[Any] = np.ndarray((n,), cell.dtype, cell, 0, (0,))
    out.flags.writeable = False
    return out


_ZERO: F64 = np.zeros(1)  # Σ over no rows (shared, never written: a column grows into a copy)


class _Col:
    """A numpy column that grows by appending (amortised O(1) per element).

    ``constant`` (floats): while every value appended is the same (the steps each row stands
    for: 1.0 when every step is logged), it keeps one and its column is a zero-stride
    view (ten million rows: 80 MB less); then a buffer of its own, of the room reserved."""

    __slots__ = ("buf", "constant", "n", "want")

    def __init__(self, dtype: Any, *, constant: bool = False) -> None:
        self.buf: npt.NDArray[Any] = np.empty(0, dtype=dtype)
        self.n = 0
        self.constant = constant
        self.want = 0  # room reserved while constant

    @staticmethod
    def of(values: npt.NDArray[Any]) -> _Col:
        """A column holding ``values`` (adopted, not copied: nothing writes into them)."""
        col = _Col.__new__(_Col)
        col.buf, col.n, col.constant, col.want = values, values.shape[0], False, 0
        return col

    def reserve(self, more: int) -> None:
        """Make room for ``more`` values, so that appending them never copies."""
        if self.constant:
            self.want = more
            return
        need = self.n + more
        if need > self.buf.shape[0]:
            grown = np.empty(need, dtype=self.buf.dtype)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown

    def extend(self, values: npt.NDArray[Any]) -> None:
        if self.constant and self._kept_constant(values):
            return
        if self.n == 0 and values.dtype == self.buf.dtype and self.buf.shape[0] == 0:
            # First values: adopt the array (a closed attempt is sealed once, in one piece).
            # Nothing writes into it: the next extend grows into a new buffer first.
            self.buf, self.n = values, values.shape[0]
            return
        need = self.n + values.shape[0]
        if need > self.buf.shape[0]:
            grown = np.empty(max(need, 2 * self.buf.shape[0]), dtype=self.buf.dtype)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : need] = values
        self.n = need

    def _kept_constant(self, values: npt.NDArray[Any]) -> bool:
        """Whether ``values`` were counted in the one value kept; else the column gets a
        buffer (its values so far in it, the room reserved) and stays so."""
        k = values.shape[0]
        if not k:
            return True
        cell = values[0] if self.n == 0 else self.buf[0]
        same = values == cell  # (and the same sign: 0.0 is not -0.0; NaN is none)
        same &= np.signbit(values) == np.signbit(cell)
        if bool(same.all()):
            if self.n == 0:
                self.buf = values[:1].copy()
            self.n += k
            self.want = max(self.want - k, 0)
            return True
        self.constant = False
        grown = np.empty(self.n + max(k, self.want), dtype=self.buf.dtype)
        grown[: self.n] = self.buf[0] if self.n else 0
        self.buf = grown
        return False

    @property
    def a(self) -> npt.NDArray[Any]:
        buf = self.buf
        if self.constant:
            return repeated(buf, self.n) if self.n else buf[:0]
        # an adopted column fills its buffer: no view to make (asked 40,000 times a query
        # of 10,000 sealed attempts)
        return buf if buf.shape[0] == self.n else buf[: self.n]


@dataclass(slots=True)
class Rows:
    """Contiguous rows (one per step start). ``end``/``d`` are NaN for an open row."""

    start: F64
    end: F64
    cap: F64  # latest end of an open row (next start or the attempt's end)
    count: F64  # steps of work the row stands for (sparse logging)
    step: I64
    d: F64  # step time, recorded intervals taken out
    first: B  # first row of a segment
    clean: B
    raw_end: int = 0  # raw events (starts and ends) these rows consumed

    @property
    def n(self) -> int:
        return int(self.start.shape[0])

    @staticmethod
    def empty() -> Rows:
        z = np.zeros(0)
        return Rows(
            z, z, z, z, np.zeros(0, np.int64), z, np.zeros(0, np.bool_), np.zeros(0, np.bool_)
        )

    def part(self, a: int, b: int) -> Rows:
        """Rows ``[a, b)`` (views)."""
        return Rows(
            self.start[a:b],
            self.end[a:b],
            self.cap[a:b],
            self.count[a:b],
            self.step[a:b],
            self.d[a:b],
            self.first[a:b],
            self.clean[a:b],
        )


def compute_rows(
    ts: F64,
    step: I64,
    is_end: npt.NDArray[np.int8],
    *,
    lo: float | F64,
    hi: float | F64,
    cov: Coverage,
    prev_step: int | None,
    unclean_cov: Coverage,
    group: I64 | None = None,
) -> tuple[Rows, F64, I64]:
    """Rows of sorted raw step events inside one attempt span ``[lo, hi]``.

    ``prev_step`` is the step of the row just before (sealed), so the first row
    here knows whether it opens a segment. Returns the rows, the times of the
    ``step_end`` events that matched no start, and those events' groups.

    Several attempts at once: ``group`` gives each raw event's attempt (non-decreasing,
    attempts in time order, each its events sorted), ``lo``/``hi`` are per raw event
    (its attempt's span) and ``prev_step`` is None; no row or step end crosses from one
    group to the next. The rows come out in group order.
    """
    starts = is_end == 0
    st = ts[starts]
    sn = step[starts]
    n = int(st.shape[0])
    ends_group = group[~starts] if group is not None else np.zeros(0, np.int64)
    if n == 0:
        return Rows.empty(), ts[~starts], ends_group
    lo_s = lo[starts] if isinstance(lo, np.ndarray) else lo
    hi_s = hi[starts] if isinstance(hi, np.ndarray) else hi
    new_seg = np.empty(n, dtype=np.bool_)
    new_seg[0] = prev_step is None or sn[0] <= prev_step
    new_seg[1:] = sn[1:] <= sn[:-1]
    last = np.zeros(n, np.bool_)  # the last row of its group
    last[-1] = True
    sg = None  # each row's group (several attempts at once)
    if group is not None:
        sg = group[starts]
        last[:-1] = sg[1:] != sg[:-1]
        new_seg[1:] |= last[:-1]
    same_next = np.append(~new_seg[1:], False)
    nxt_ts = np.append(st[1:], np.inf)
    nxt_ts[last] = np.inf
    # Millions of rows: each temporary column is dropped as soon as it is used (`del`),
    # so that the peak holds a few columns rather than every intermediate one.
    own_end, unmatched, unmatched_group = _own_ends(
        ts, step, starts, sn, ends_group=ends_group, sg=sg
    )
    has_end = np.isfinite(own_end)
    count = np.ones(n)
    several = ~(has_end | ~same_next)
    if several.any():
        count[several] = np.maximum(np.append(sn[1:], 0) - sn, 1)[several]
    del several
    end = np.where(has_end, own_end, np.where(same_next, nxt_ts, np.nan))
    del has_end, own_end, same_next
    known = ~np.isnan(end)
    start_c = np.clip(st, lo_s, hi_s)
    del st
    np.copyto(end, start_c, where=~known)  # an open row: [start, start] until it ends
    end_c = np.clip(end, lo_s, hi_s)
    del end
    np.maximum(end_c, start_c, out=end_c)
    cap = np.minimum(nxt_ts, hi_s)
    del nxt_ts
    np.maximum(cap, start_c, out=cap)
    d = end_c - start_c
    d -= cov.between_sorted(start_c, end_c)
    d[~known] = np.nan
    spoiled = unclean_cov.between_sorted(start_c, end_c) > 0.0
    clean = known & ~new_seg & ~spoiled
    del spoiled
    end_c[~known] = np.nan
    return (
        Rows(start_c, end_c, cap, count, sn.astype(np.int64, copy=False), d, new_seg, clean),
        unmatched,
        unmatched_group,
    )


def _own_ends(
    ts: F64, step: I64, starts: B, sn: I64, *, ends_group: I64, sg: I64 | None
) -> tuple[F64, F64, I64]:
    """For :func:`compute_rows`: each row's own end (inf: none), and the times and groups
    of the step ends that matched no start (``sn``: the rows' steps; ``sg``: their groups,
    None for one attempt)."""
    n = int(sn.shape[0])
    own_end = np.full(n, np.inf)
    unmatched: F64 = np.zeros(0)
    unmatched_group = np.zeros(0, np.int64)
    if int(starts.shape[0]) > n:
        # Rows are in (ts, arrival) order: an end belongs to the last start before it.
        is_end_event = ~starts
        idx = np.cumsum(starts)[is_end_event] - 1
        end_ts = ts[is_end_event]
        ok = idx >= 0
        ok[ok] = sn[idx[ok]] == step[is_end_event][ok]
        if sg is not None:
            ok[ok] &= sg[idx[ok]] == ends_group[ok]
        if not ok.all():
            unmatched = end_ts[~ok]
            unmatched_group = ends_group[~ok] if sg is not None else unmatched_group
            idx, end_ts = idx[ok], end_ts[ok]
        del ok, is_end_event
        if idx.shape[0] and bool((idx[1:] > idx[:-1]).all()):
            own_end[idx] = end_ts  # one end per row at most (the usual case)
        else:
            np.minimum.at(own_end, idx, end_ts)
    return own_end, unmatched, unmatched_group


@dataclass
class TailIntervals:
    """The recorded intervals of an attempt's tail, clipped to the attempt (columns)."""

    pieces: Spans  # the blocking ones flattened, innermost wins
    nonblocking: Spans
    intervals: Spans  # all of them (the order is the innermost rank)
    unpaired_starts: Marks
    unpaired_ends: Marks

    @staticmethod
    def empty() -> TailIntervals:
        return TailIntervals(
            Spans.empty(), Spans.empty(), Spans.empty(), Marks.empty(), Marks.empty()
        )

    def after(self, cut: float) -> TailIntervals:
        """What is left once everything before a quiet ``cut`` is sealed."""
        return TailIntervals(
            self.pieces.take(self.pieces.start >= cut),
            self.nonblocking.take(self.nonblocking.start >= cut),
            self.intervals.take(self.intervals.start >= cut),
            self.unpaired_starts,
            self.unpaired_ends.take(self.unpaired_ends.ts >= cut),
        )


def tail_intervals(marks: Marks, lo: float, hi: float) -> TailIntervals:
    """Pair marks (sorted by ``(ts, seq)``), clip to ``[lo, hi]``, flatten the blocking
    ones (innermost wins)."""
    paired = pair_columns(marks, close_at=hi)
    ivs = paired.intervals
    # Which one is inner is decided on the recorded ends, before clipping to the attempt.
    rank = innermost_rank(ivs)
    a, b = np.maximum(ivs.start, lo), np.minimum(ivs.end, hi)
    keep = b >= a
    clipped = Spans(a, b, ivs.bucket, ivs.blocking, rank)
    if not keep.all():
        clipped = clipped.take(keep)
    blocking = clipped.blocking
    every = bool(blocking.all())  # the usual case: no copy of millions of spans
    return TailIntervals(
        flatten_spans(clipped if every else clipped.take(blocking)),
        Spans.empty() if every else clipped.take(~blocking),
        clipped,
        paired.unpaired_starts,
        paired.unpaired_ends,
    )


#: Candidates looked at first by :func:`quiet_cut`, from the last (then 4x as many before).
_QUIET_WINDOW = 256


def quiet_cut(
    rows: Rows,
    ivs: TailIntervals,
    mark_ts: F64,
    min_keep: int,
    unmatched_ts: F64,
    *,
    before: float = math.inf,
) -> int:
    """Largest row index r (r <= n - 2, r >= min_keep) whose start is a quiet moment, and
    at or before ``before`` (when more events may still come before that: see
    :meth:`~badput.engine._stream.Stream.settled_before`).

    Quiet: no interval open across it, no mark and no unmatched step end exactly at it
    (the seal counts unmatched ends by time, so one at the cut would be lost). Returns 0
    if none.

    The candidates are looked at from the last, a window at a time (256, then four times
    as many before it...): the last row is nearly always quiet, and a block of a large
    closed attempt has 262,144 candidates (all of them looked at took 0.12 s of the
    report of a million steps with a data load each).
    """
    n = rows.n
    if n - 2 < min_keep:
        return 0
    starts = rows.start
    if len(ivs.intervals):
        # near time order already: timsort ("stable") is many times faster than quicksort
        s = np.sort(ivs.intervals.start, kind="stable")
        e = np.sort(ivs.intervals.end, kind="stable")
    first_unpaired = float(ivs.unpaired_starts.ts.min()) if len(ivs.unpaired_starts) else None
    exact = [at for at in (mark_ts, np.sort(unmatched_ts, kind="stable")) if at.shape[0]]
    hi, width = n - 1, _QUIET_WINDOW  # candidates: rows [min_keep, n - 1)
    if before < math.inf:
        hi = min(hi, int(np.searchsorted(starts, before, "right")))
    while hi > min_keep:
        lo = max(min_keep, hi - width)
        cand = starts[lo:hi]
        if len(ivs.intervals):
            active = np.searchsorted(s, cand, "left") - np.searchsorted(e, cand, "right")
            quiet = active <= 0
        else:
            quiet = np.ones(cand.shape[0], dtype=np.bool_)
        if first_unpaired is not None:
            quiet &= cand < first_unpaired
        for at in exact:
            quiet &= np.searchsorted(at, cand, "left") == np.searchsorted(at, cand, "right")
        # a start equal to the previous row's start would split a tie: not a cut
        quiet &= (
            cand > starts[lo - 1 : hi - 1] if lo > 0 else np.append(False, cand[1:] > cand[:-1])
        )
        hits = np.flatnonzero(quiet)
        if hits.shape[0]:
            return int(hits[-1]) + lo
        hi, width = lo, width * 4
    return 0


@dataclass(slots=True)
class AttemptSteps:
    """The sealed part of one attempt's rows and intervals, and where it was cut."""

    signature: tuple[Any, ...]
    cut: float = -math.inf
    raw_done: int = 0  # sorted raw step events sealed
    marks_done: int = 0
    raw_seen: int = 0
    marks_seen: int = 0
    whole: bool = False  # sealed to the end (a closed attempt)
    whole_end: float = math.inf
    open_rows: list[int] = field(default_factory=list)
    # The cap of each open row; the column itself is not kept (only open rows use it).
    open_cap: dict[int, float] = field(default_factory=dict)
    # Sealed intervals, as parts appended per seal (joined on demand), and their seconds.
    piece_sums: dict[int, float] = field(default_factory=dict)  # bucket code -> seconds
    nonblocking_parts: list[Spans] = field(default_factory=list)
    nonblocking_sums: dict[int, float] = field(default_factory=dict)
    unmatched_ends: int = 0
    unpaired_end_parts: list[Marks] = field(default_factory=list)
    unpaired_start_parts: list[Marks] = field(default_factory=list)
    _rows: Rows | None = None  # rows() as last made (valid while n is unchanged)
    # Sealed with others in one pass: their shared columns, and which attempt it is there.
    # Its columns below are views of those, made when first asked for (None until then).
    together: tuple[SealedTogether, int] | None = None
    _cols: dict[str, _Col] | None = None
    _cum_cols: tuple[_Col, _Col, _Col] | None = None  # cum_d, cum_k, cum_kpos
    _clean_vals: _Col | None = None
    _seg_first: list[int] | None = None
    _seg_sorted: dict[int, F64] | None = None  # typical-time values per segment
    # A closed attempt sealed in blocks: rows yet to seal, and the buffer each segment's
    # sorted values grow in (merged in place, not copied whole at every block)
    _room: int = 0
    _seg_room: dict[int, F64] = field(default_factory=dict)
    _piece_parts: list[Spans] | None = None  # the blocking intervals' parts (piece_parts)

    @property
    def piece_parts(self) -> list[Spans]:
        if self._piece_parts is None:
            together = self.together
            self._piece_parts = [] if together is None else together[0].piece_parts(together[1])
        return self._piece_parts

    @piece_parts.setter
    def piece_parts(self, parts: list[Spans]) -> None:
        self._piece_parts = parts

    @property
    def cols(self) -> dict[str, _Col]:
        if self._cols is None:
            if self.together is None:
                self._cols = {
                    name: _Col(dtype, constant=name == "count") for name, dtype in _ROW_COLUMNS
                }
            else:
                rows = self.rows()
                self._cols = {name: _Col.of(getattr(rows, name)) for name, _ in _ROW_COLUMNS}
        return self._cols

    def _cums(self) -> tuple[_Col, _Col, _Col]:
        """The prefix sums D, K and KPOS as columns, made when first asked for."""
        if self._cum_cols is None:
            if self.together is None:
                # K and KPOS are one column while every row sealed has a time > 0 (their
                # sums are then the same, bit for bit): see seal
                cum_k = _Col.of(_ZERO)
                self._cum_cols = (_Col.of(_ZERO), cum_k, cum_k)
            else:
                sealed, k = self.together
                d, count, kpos = sealed.cums(k)
                cum_k = _Col.of(count)
                # (one column for both while they are equal: see SealedTogether.cums)
                self._cum_cols = (_Col.of(d), cum_k, cum_k if kpos is count else _Col.of(kpos))
        return self._cum_cols

    @property
    def cum_d(self) -> _Col:  # cum_d[i] = Σ d[:i]
        return self._cums()[0]

    @property
    def cum_k(self) -> _Col:
        return self._cums()[1]

    @property
    def cum_kpos(self) -> _Col:  # Σ count where d > 0 (cum_k itself while every d > 0)
        return self._cums()[2]

    @property
    def clean_vals(self) -> _Col:
        if self._clean_vals is None:
            if self.together is None:
                self._clean_vals = _Col(np.float64)
            else:
                sealed, k = self.together
                at = sealed.clean_at
                self._clean_vals = _Col.of(sealed.clean_vals[at[k] : at[k + 1]])
        return self._clean_vals

    @property
    def seg_first(self) -> list[int]:
        if self._seg_first is None:
            together = self.together
            self._seg_first = [] if together is None else together[0].seg_first(together[1])
        return self._seg_first

    @property
    def seg_sorted(self) -> dict[int, F64]:
        if self._seg_sorted is None:
            together = self.together
            self._seg_sorted = {} if together is None else together[0].seg_sorted(together[1])
        return self._seg_sorted

    def _own(self) -> None:
        """Make every column its own before it grows (never so once sealed whole)."""
        if self.together is not None:
            # each made from the shared columns by asking for it (a column grows into a
            # buffer of its own: nothing writes into the shared ones)
            _ = (self.cols, self.cum_d, self.cum_k, self.cum_kpos, self.clean_vals)
            _ = (self.seg_first, self.seg_sorted, self.piece_parts)
            self.together = None

    @property
    def n(self) -> int:
        together = self.together
        if together is not None and self._cols is None:
            bounds, k = together[0].bounds, together[1]
            return bounds[k + 1] - bounds[k]
        return self.cols["start"].n

    def rows(self) -> Rows:
        if self._rows is not None and self._rows.n == self.n:
            return self._rows
        if self.together is not None and self._cols is None:
            self._rows = self.together[0].rows(self.together[1])
            return self._rows
        c = self.cols
        self._rows = Rows(
            c["start"].a,
            c["end"].a,
            repeated(NAN_CELL, self.n),  # not kept: see open_cap
            c["count"].a,
            c["step"].a,
            c["d"].a,
            c["first"].a,
            c["clean"].a,
        )
        return self._rows

    @property
    def pieces(self) -> Spans:
        if len(self.piece_parts) > 1:  # (sealed without order: joined, still so)
            self.piece_parts = [without_order(Spans.concat(self.piece_parts))]
        return self.piece_parts[0] if self.piece_parts else _NO_SPANS

    @property
    def nonblocking(self) -> Spans:
        if len(self.nonblocking_parts) > 1:
            self.nonblocking_parts = [without_order(Spans.concat(self.nonblocking_parts))]
        return self.nonblocking_parts[0] if self.nonblocking_parts else _NO_SPANS

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` more rows in every column (a closed attempt sealed in blocks)."""
        self._own()
        for col in (*self.cols.values(), self.cum_d, self.cum_k, self.cum_kpos, self.clean_vals):
            col.reserve(rows)
        self._room = rows

    def _merged(self, sid: int, vals: F64) -> F64:
        """Segment ``sid``'s sorted values with the sorted ``vals`` added: in a buffer
        kept for the rows yet to seal when some are (no copy of all of them per block:
        at the last block of ten million rows, 80 MB less), else in a new array."""
        old = self.seg_sorted.get(sid)
        if old is None:
            return vals
        n, m = old.shape[0], vals.shape[0]
        buf = self._seg_room.get(sid)
        if buf is None or buf.shape[0] < n + m or not np.shares_memory(buf[:1], old[:1]):
            if self._room < m:
                return _merge_sorted(old, vals)
            buf = self._seg_room[sid] = np.empty(n + self._room)
            buf[:n] = old
        buf[n : n + m] = vals
        out = buf[: n + m]
        out.sort(kind="mergesort")
        return out

    def last_step(self) -> int | None:
        return int(self.cols["step"].a[-1]) if self.n else None

    def seal(
        self,
        rows: Rows,
        *,
        ivs: TailIntervals,
        cut: float,
        raw_used: int,
        marks_used: int,
        unmatched_ts: F64,
    ) -> None:
        """Append ``rows`` (all before ``cut``) and the intervals before ``cut``."""
        self._own()
        base = self.n
        self.unmatched_ends += int((unmatched_ts < cut).sum())
        if math.isinf(cut) and len(ivs.unpaired_starts):
            self.unpaired_start_parts.append(ivs.unpaired_starts)
        for name, _ in _ROW_COLUMNS:
            self.cols[name].extend(getattr(rows, name))
        # Millions of rows when a closed attempt is sealed whole: each temporary column is
        # made in place or dropped at once, so the peak stays near what is kept.
        is_open = np.isnan(rows.d)
        d0 = np.where(is_open, 0.0, rows.d)
        _extend_cumsum(self.cum_d, d0)
        positive = rows.d > 0
        cum_k, cum_kpos = self.cum_k, self.cum_kpos
        if cum_kpos is cum_k and not bool(positive.all()):
            # K and KPOS part: KPOS a column of its own from here on (room as reserved)
            cum_kpos = _Col.of(cum_k.a.copy())
            cum_kpos.reserve(max(self._room, rows.n))
            self._cum_cols = (self.cum_d, cum_k, cum_kpos)
        _extend_cumsum(cum_k, rows.count)
        if cum_kpos is not cum_k:
            np.multiply(rows.count, positive, out=d0)  # steps of rows with time > 0
            _extend_cumsum(cum_kpos, d0)
        del d0, positive
        self.clean_vals.extend(rows.d[rows.clean] / rows.count[rows.clean])
        opened = np.flatnonzero(is_open)
        self.open_rows.extend((opened + base).tolist())
        self.open_cap.update(zip((opened + base).tolist(), rows.cap[opened].tolist(), strict=True))
        firsts = (np.flatnonzero(rows.first) + base).tolist()
        self.seg_first.extend(firsts)
        # Typical-time values of the new rows, merged into their segment's sorted array.
        if rows.n:
            typical = np.flatnonzero(~is_open & ~rows.first)
            del is_open
            per = rows.d[typical]
            per /= rows.count[typical]
            # each typical row's segment, counted from the first segment these rows meet
            first_seg = max(len(self.seg_first) - len(firsts) - 1, 0)
            starts = np.asarray(self.seg_first[first_seg:], np.int64) - base
            seg_of = np.searchsorted(starts, typical, "right") - 1 + first_seg
            del typical
            bounds = np.flatnonzero(np.diff(seg_of)) + 1  # seg_of grows with the row
            for lo, hi in itertools.pairwise([0, *bounds.tolist(), int(seg_of.shape[0])]):
                if hi <= lo:
                    continue
                sid = int(seg_of[lo])
                vals = np.sort(per[lo:hi])
                self.seg_sorted[sid] = self._merged(sid, vals)
        self._room = max(self._room - rows.n, 0)
        if math.isinf(cut):
            self._seg_room.clear()  # (sealed whole: nothing grows in them again)
        for spans, parts, sums in (
            (ivs.pieces, self.piece_parts, self.piece_sums),
            (ivs.nonblocking, self.nonblocking_parts, self.nonblocking_sums),
        ):
            sealed = without_order(spans.take(spans.end <= cut))
            if len(sealed):
                parts.append(sealed)
                add_sums(sums, sealed)
        ends = ivs.unpaired_ends.take(ivs.unpaired_ends.ts < cut)
        if len(ends):
            self.unpaired_end_parts.append(ends)
        self.cut = cut
        self.raw_done += raw_used
        self.marks_done += marks_used


_NO_SPANS = Spans.empty()
_ROW_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("start", np.float64),
    ("end", np.float64),
    ("count", np.float64),
    ("step", np.int64),
    ("d", np.float64),
    ("first", np.bool_),
    ("clean", np.bool_),
)


def without_order(spans: Spans) -> Spans:
    """Sealed spans, whose innermost order is no longer needed: a zero-stride column of
    zeros in its place (no memory: a million sealed data loads keep 8 MB less); their
    bucket and blocking flag likewise while every span has the same (5 MB less)."""
    bucket, blocking = one_valued(spans.bucket), one_valued(spans.blocking)
    return Spans(spans.start, spans.end, bucket, blocking, repeated(_ZERO_CELL, len(spans)))


def one_valued(column: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``column``, or a read-only zero-stride view of its one value when every value is
    the same (the same values, no memory: sealed columns are never written into)."""
    first = column[:1]
    if column.shape[0] < 2 or column.strides == (0,) or not bool((column == first).all()):
        return column
    return repeated(first.copy(), int(column.shape[0]))


def add_sums(sums: dict[int, float], spans: Spans) -> None:
    """Add each bucket code's seconds in ``spans`` to ``sums``."""
    if not len(spans):
        return
    totals = np.bincount(spans.bucket, weights=spans.end - spans.start)
    for code in np.flatnonzero(totals).tolist():
        sums[code] = sums.get(code, 0.0) + float(totals[code])


def clipped_sums(spans: Spans, lo: float, hi: float) -> dict[int, float]:
    """Seconds per bucket code of ``spans`` inside ``[lo, hi]`` (O(spans) in numpy)."""
    if not len(spans):
        return {}
    inside = np.clip(np.minimum(spans.end, hi) - np.maximum(spans.start, lo), 0.0, None)
    totals = np.bincount(spans.bucket, weights=inside)
    return {code: float(totals[code]) for code in np.flatnonzero(totals > 0.0).tolist()}


def clipped_piece_sums(pieces: Spans, lo: float, hi: float) -> dict[int, float]:
    """:func:`clipped_sums` of flattened pieces (disjoint, in time order: their ends are in
    order too). Only the pieces that can meet ``[lo, hi]`` are looked at: O(log pieces +
    pieces in the window), for a rolling window over a job of a million data loads. The
    pieces left out would add exactly 0, so the sums are the same."""
    n = len(pieces)
    if not n:
        return {}
    a = int(np.searchsorted(pieces.end, lo, "right"))  # those ending by lo add nothing
    b = int(np.searchsorted(pieces.start, hi, "left"))  # nor those starting from hi
    if b <= a:
        return {}
    return clipped_sums(pieces if a == 0 and b == n else pieces.take(slice(a, b)), lo, hi)


def _extend_cumsum(col: _Col, values: F64) -> None:
    """Append the running total of ``values`` to ``col`` (a prefix-sum column, never
    empty), continuing from its last value, without a temporary copy of the values."""
    sums = np.cumsum(values)
    sums += col.a[-1]
    col.extend(sums)


def _merge_sorted(a: F64, b: F64) -> F64:
    out = np.concatenate((a, b))
    out.sort(kind="mergesort")
    return out


def kth_of_two_sorted(a: F64, b: F64, k: int) -> float:
    """The k-th smallest (0-based) of the union of sorted ``a`` and sorted ``b``."""
    if a.shape[0] == 0:
        return float(b[k])
    if b.shape[0] == 0:
        return float(a[k])
    # Binary search on how many elements come from a.
    lo, hi = max(0, k + 1 - b.shape[0]), min(k + 1, a.shape[0])
    while lo < hi:
        i = (lo + hi) // 2  # take i from a, k + 1 - i from b
        j = k + 1 - i
        if j > 0 and i < a.shape[0] and b[j - 1] > a[i]:
            lo = i + 1
        else:
            hi = i
    i = lo
    j = k + 1 - i
    left_a = a[i - 1] if i > 0 else -np.inf
    left_b = b[j - 1] if j > 0 else -np.inf
    return float(max(left_a, left_b))


def median_of_sorted(a: F64, b: F64) -> float | None:
    """Median (numpy's convention) of the union of two sorted arrays; None when empty."""
    n = int(a.shape[0] + b.shape[0])
    if n == 0:
        return None
    if n % 2:
        return kth_of_two_sorted(a, b, n // 2)
    return (kth_of_two_sorted(a, b, n // 2 - 1) + kth_of_two_sorted(a, b, n // 2)) / 2.0
