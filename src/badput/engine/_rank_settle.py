"""The pairing of the per-rank view's blocking interval marks: each stream's seconds per
bucket, data-load durations and open starts, in vectorised passes over many streams, each
pass only of the marks that arrived since the last (carrying the open starts over)."""

from __future__ import annotations

import math
from array import array

import numpy as np
import numpy.typing as npt

from badput.engine._rank_columns import F64, Growing
from badput.engine._rank_stream import (
    DATA_LOADING,
    Pairing,
    PairPoint,
    RankStream,
    in_chunks,
    nonempty_segments,
    tail,
)


def settle_streams(streams: list[RankStream]) -> None:
    """Pair each stream's blocking interval marks in time order (at equal times, starts
    first; unpaired ends are ignored: the partition reports them): seconds per bucket,
    data-load durations, starts still open. In vectorised passes over many streams, each
    taking only the marks that arrived since the last (carrying each bucket's open starts
    and seconds over); a stream whose new marks do not all come after those taken is
    paired again from its first mark."""
    todo = [s for s in streams if s.settled != len(s.pair_ts)]
    for chunk in in_chunks(todo, [len(s.pair_ts) - s.settled for s in todo]):
        late = _settle_in_pieces(chunk[0]) if len(chunk) == 1 else _settle_chunk(chunk)
        if late:
            back = [s for s in late if _rewind(s)]
            if back:
                again = _settle_chunk(back)  # (never late: see _rewind)
                late = [s for s in late if s not in back or s in again]
            for s in late:
                s.settled, s.settled_hi, s.pairing, s.loads = 0, -math.inf, {}, Growing()
                s.pair_points = []
            large = [s for s in late if len(s.pair_ts) > _settle_whole_max()]
            for s in large:
                _settle_in_time_order(s)
            if len(large) < len(late):
                _settle_chunk([s for s in late if len(s.pair_ts) <= _settle_whole_max()])


#: Marks of one stream paired in one vectorised pass at most (each pass's temporaries
#: are a dozen columns of its marks: for the 2 M marks of a million data loads, 60 MB at
#: once against 8 MB in passes of this size).
_SETTLE_PIECE = 1 << 18


def _settle_whole_max() -> int:
    """New marks of one stream paired in one pass (more are taken a piece at a time)."""
    return _SETTLE_PIECE + _SETTLE_PIECE // 2


#: Earlier pairings kept per stream (:func:`_rewind`): a monitor that looks once a second
#: goes back up to this many looks.
PAIR_POINTS = 16


def _rewind(s: RankStream) -> bool:
    """Go back to the newest earlier pairing of ``s`` that its late marks all come after,
    so that only the marks taken since are paired again; False when none is kept.

    Why that is the pairing of every mark in time order: each pass took marks all later
    than the newest taken before it (else it was late and went back), so when a pairing
    was kept, the marks taken were those up to its newest, and every mark that arrived
    since is later, the late ones too (the point is chosen so). Paired again from there
    in time order, they give what one pass over all of them gives. (A rank written by
    two processes whose files a monitor reads at different moments: their marks arrive
    late at every look, and pairing all of them again each time cost O(marks) a look.)"""
    new = np.frombuffer(s.pair_ts, dtype=np.float64)[s.settled :]
    if not len(new) or not s.pair_points:
        return False
    first = float(new.min())
    points = s.pair_points
    k = len(points) - 1
    while k >= 0 and not points[k].settled_hi < first:
        k -= 1
    if k < 0:
        return False
    point = points[k]
    del points[k:]  # the newer ones hold marks that now come after late ones
    s.settled, s.settled_hi = point.settled, point.settled_hi
    s.pairing = {}
    for b, total, paired, irregular, stack in point.pairing:
        p = s.pairing[b] = Pairing()
        p.total, p.paired, p.irregular, p.stack = total, paired, irregular, list(stack)
    s.loads.cut(point.n_loads)
    return True


def _settle_in_pieces(s: RankStream) -> list[RankStream]:
    """:func:`_settle_chunk` of one stream, its new marks taken a piece at a time as a
    running job's arrive (each piece carries the open starts of the ones before). A piece
    ends before a mark later than every mark before it, so that no mark of the next piece
    comes before one taken. New marks that did not arrive in time order (two processes of
    one rank, each writing its own file) are taken in time order instead
    (:func:`_settle_in_time_order`) when the stream is paired from its first mark; else in
    one pass (the stream is paired again from its first mark if it must be, as for marks
    that arrive late)."""
    n = len(s.pair_ts)
    if n - s.settled > _settle_whole_max():
        ts = np.frombuffer(s.pair_ts, dtype=np.float64)[s.settled :]
        in_order = bool((ts[1:] >= ts[:-1]).all())
        del ts
        if not in_order:
            if s.pairing:
                return _settle_chunk([s])
            _settle_in_time_order(s)
            return []
    while n - s.settled > _settle_whole_max():
        ts = np.frombuffer(s.pair_ts, dtype=np.float64)
        stop = s.settled + _SETTLE_PIECE
        newest = float(ts[s.settled : stop].max())
        after = ts[stop : stop + _SETTLE_PIECE // 2]
        # the next piece's first mark must be later than this one's newest, and no later
        # mark earlier (checked by the pass that takes it: else paired again, whole)
        later = np.flatnonzero(after > newest)
        del ts, after
        if not len(later):
            break
        late = _settle_chunk([s], stop + int(later[0]))
        if late:
            return late
    return _settle_chunk([s])


def _settle_in_time_order(s: RankStream) -> None:
    """Pair all the marks of ``s`` (paired from its first mark: no pairing yet) a piece of
    :data:`_SETTLE_PIECE` at a time in time order, whatever order they arrived in: what one
    pass over all of them gives (it sorts them by time too, stably: marks of one time in
    the order they arrived), without a dozen temporary columns of two million marks. A
    piece ends before a time later than every time in it (marks of one time are in one
    piece), so each piece takes its bucket's marks in the order the one pass takes them and
    carries the open starts over, as a running job's next marks do."""
    ts_all = np.frombuffer(s.pair_ts, dtype=np.float64)
    code_all = np.frombuffer(s.pair_code, dtype=np.int32)
    n = len(ts_all)
    order = np.argsort(ts_all, kind="stable")
    if n < 2**31:  # kept through the pieces: half the bytes
        order = order.astype(np.int32)
    s.buckets, s.open = {}, {}
    a = 0
    while a < n:
        stop = min(a + _SETTLE_PIECE, n)
        while stop < n:  # past the marks of the piece's last time
            more = ts_all[order[stop : stop + _SETTLE_PIECE]]
            k = int(np.searchsorted(more, ts_all[order[stop - 1]], side="right"))
            stop += k
            if k < len(more):
                break
        at = order[a:stop]
        piece_ts, piece_code = ts_all[at], code_all[at]
        del at
        if not s.pairing:  # the first piece
            late = _settle_columns(
                [s], piece_ts, piece_code, [stop], [0], resumed=False, fresh=[True], upto=stop
            )
        else:
            starts = [(b, p.stack) for b, p in s.pairing.items() if p.stack]
            open_ts = np.array([t for _, stack in starts for t in stack], np.float64)
            open_code = np.array([2 * b + 1 for b, stack in starts for _ in stack], np.int32)
            late = _settle_columns(
                [s],
                np.concatenate((open_ts, piece_ts)),
                np.concatenate((open_code, piece_code)),
                [len(open_ts) + stop - a],
                [len(open_ts)],
                resumed=True,
                fresh=[False],
                upto=stop,
            )
        if late:  # (never: each piece is later than the last) paired whole, as before
            s.settled, s.settled_hi, s.pairing, s.loads = 0, -math.inf, {}, Growing()
            s.pair_points = []
            _settle_chunk([s])
            return
        a = stop


def _read_pairing(s: RankStream) -> None:
    """``s.buckets`` and ``s.open`` from its pairing (buckets in order of first sight)."""
    s.buckets, s.open = {}, {}
    names = list(s.names)
    for b, p in sorted(s.pairing.items()):
        _read_bucket(s, names[b] if b else DATA_LOADING, p)


def _read_bucket(s: RankStream, name: str, p: Pairing) -> None:
    """``s.buckets`` and ``s.open`` of bucket ``name`` (``s.names``'s name of the pairing's
    code: the callers list the names once, not once per bucket, which made a job of a custom
    name per step quadratic: 1.8 s for 20,000 names)."""
    if p.paired and (p.total > 0 or p.irregular):
        s.buckets[name] = p.total
    if p.stack:
        s.open[name] = list(p.stack)


def _settle_chunk(todo: list[RankStream], upto: int | None = None) -> list[RankStream]:
    """One vectorised pass; returns the streams whose new marks came out of time order
    (left as they were). ``upto``: of a single stream, its marks before this index only."""
    if len(todo) == 1 and not todo[0].pairing:  # one stream from its first mark: in place
        s = todo[0]
        s.buckets, s.open = {}, {}
        if not len(s.pair_ts):
            return []
        top = len(s.pair_ts) if upto is None else upto
        return _settle_columns(
            todo,
            np.frombuffer(s.pair_ts, dtype=np.float64)[:top],
            np.frombuffer(s.pair_code, dtype=np.int32)[:top],
            [top],
            [0],
            resumed=False,
            fresh=[True],
            upto=top,
        )
    for s in todo:
        if s.settled:  # what the stream may have to go back to (see _rewind)
            s.pair_points.append(PairPoint(s))
            if len(s.pair_points) > PAIR_POINTS:
                del s.pair_points[0]
    marks, codes = array("d"), array("i")
    counts: list[int] = []
    carried: list[int] = []
    resumed = False
    fresh = [not s.pairing for s in todo]  # paired from their first mark (never late)
    for s, first_pass in zip(todo, fresh, strict=True):
        if first_pass:
            s.buckets, s.open = {}, {}
        before = len(marks)
        for b, p in s.pairing.items():  # each bucket's open starts, before anything new
            if p.stack:
                marks.extend(p.stack)
                codes.extend([2 * b + 1] * len(p.stack))
        carried.append(len(marks) - before)
        if upto is not None:  # (one stream)
            marks += s.pair_ts[s.settled : upto]
            codes += s.pair_code[s.settled : upto]
        else:
            marks += tail(s.pair_ts, s.settled)
            codes += s.pair_code[s.settled :] if s.settled else s.pair_code
        counts.append(len(marks) - before)
        resumed = resumed or s.settled > 0
    if not len(marks):
        return []
    ts = np.frombuffer(marks, dtype=np.float64)
    code = np.frombuffer(codes, dtype=np.int32)
    return _settle_columns(todo, ts, code, counts, carried, resumed=resumed, fresh=fresh, upto=upto)


def _settle_columns(
    todo: list[RankStream],
    ts: F64,
    code: npt.NDArray[np.int32],
    counts: list[int],
    carried: list[int],
    *,
    resumed: bool,
    fresh: list[bool],
    upto: int | None = None,
) -> list[RankStream]:
    """The rest of :func:`_settle_chunk`: ``ts``/``code`` hold each stream's carried open
    starts (``carried`` each) then its new marks, ``counts`` in all; ``resumed``: some
    stream goes on from marks taken before; ``fresh``: which streams are paired from
    their first mark; ``upto``: where the marks taken of a single stream end (else at its
    last). Neither column is written to."""
    which, seg = nonempty_segments(counts)  # every stream has new marks
    newest = np.maximum.reduceat(ts, seg).tolist()  # (the carried starts are older)
    late: set[int] = set()
    if resumed:  # the new marks' first time, against the newest taken
        arrived = ts.copy()  # the new marks (the carried starts left out)
        for i, n in zip(which, carried, strict=True):
            arrived[seg[i] : seg[i] + n] = math.inf
        firsts = np.minimum.reduceat(arrived, seg).tolist()
        late = {i for i, t in zip(which, firsts, strict=True) if not t > todo[i].settled_hi}
    _pair_groups(todo, late, fresh, *_in_pairing_order(todo, ts, code, counts))
    for i, s in enumerate(todo):
        if i not in late:
            s.settled = len(s.pair_ts) if upto is None else upto
            s.settled_hi = max(s.settled_hi, newest[i])
            if not fresh[i]:
                _read_pairing(s)
    return [todo[i] for i in sorted(late)]


def _in_pairing_order(
    todo: list[RankStream], ts: F64, code: npt.NDArray[np.int32], counts: list[int]
) -> tuple[F64, npt.NDArray[np.int32], npt.NDArray[np.bool_], npt.NDArray[np.intp] | None]:
    """The marks of :func:`_settle_columns` by stream, bucket, then time (at equal times,
    starts first): their times, buckets, whether each is a start, and each one's stream
    (``None``: a single stream)."""
    bucket = code >> 1
    is_start = (code & 1).astype(bool)
    if len(todo) == 1:  # a large stream has a pass of its own: no owners
        if not (int(bucket.min()) == int(bucket.max()) and bool((ts[1:] > ts[:-1]).all())):
            order = np.lexsort((~is_start, ts, bucket))
            return ts[order], bucket[order], is_start[order], None
        # else one bucket, every time later than the one before (a data load per step at
        # distinct times): in that order already, and not copied (2 M marks: 50 MB less)
        return ts, bucket, is_start, None
    owner = np.repeat(np.arange(len(todo)), counts)
    order = np.lexsort((~is_start, ts, bucket, owner))
    return ts[order], bucket[order], is_start[order], owner[order]


def _pair_groups(  # noqa: PLR0917 (the marks in pairing order, and what they pair)
    todo: list[RankStream],
    late: set[int],
    fresh: list[bool],
    ts: F64,
    bucket: npt.NDArray[np.int32],
    is_start: npt.NDArray[np.bool_],
    owner: npt.NDArray[np.intp] | None,
) -> None:
    """Pair each (stream, bucket)'s marks (a group, in :func:`_in_pairing_order`) onto
    its pairing so far, but the ``late`` streams'."""
    first = np.ones(len(ts), np.bool_)
    if owner is None:
        first[1:] = bucket[1:] != bucket[:-1]
    else:
        first[1:] = (bucket[1:] != bucket[:-1]) | (owner[1:] != owner[:-1])
    heads = np.flatnonzero(first)  # each (stream, bucket)'s marks: a group
    group = np.cumsum(first, dtype=np.int32)  # (fewer groups than 2**31: marks in memory)
    group -= 1
    # Whether a mark is at an odd place in its group (the 2nd, 4th...), as booleans: a
    # position's parity against its group's first's (no column of positions: of 2 M marks,
    # 2 MB instead of three temporaries of 16).
    odd_place = np.zeros(len(ts), np.bool_)
    odd_place[1::2] = True
    odd = odd_place != (heads % 2 == 1)[group]
    del odd_place
    last = np.concatenate((heads[1:] - 1, [len(ts) - 1]))
    heads_owner = [0] * len(heads) if owner is None else owner[heads].tolist()
    heads_bucket = bucket[heads].tolist()
    # Each group's pairing so far (its seconds are summed on, in time order).
    pairings = [todo[i].pairing.get(b) for i, b in zip(heads_owner, heads_bucket, strict=True)]
    # The common case, vectorised: each group's marks go start, end, start, end...
    irregular = np.zeros(len(heads), np.bool_)
    irregular[group[is_start == odd]] = True  # a start at an odd place, an end at an even
    regular = ~irregular[group]
    ends = np.flatnonzero(regular & odd)
    d = np.maximum(ts[ends] - ts[ends - 1], 0.0)
    so_far = np.array([0.0 if p is None else p.total for p in pairings])
    sums = np.bincount(
        np.concatenate((np.arange(len(heads)), group[ends])),
        weights=np.concatenate((so_far, d)),
        minlength=len(heads),
    ).tolist()
    n_ends = np.bincount(group[ends], minlength=len(heads))
    offsets = (np.cumsum(n_ends) - n_ends).tolist()
    n_ends_l = n_ends.tolist()
    open_at = (~irregular & ~odd[last]).tolist()
    name_lists: dict[int, list[str]] = {}  # each stream's bucket names, by code
    for g, (h, at, s_i, b, irr, kept) in enumerate(
        zip(
            heads.tolist(),
            last.tolist(),
            heads_owner,
            heads_bucket,
            irregular.tolist(),
            pairings,
            strict=True,
        )
    ):
        if s_i in late:
            continue
        s = todo[s_i]
        p = kept if kept is not None else s.pairing.setdefault(b, Pairing())
        if irr:  # nested or unpaired marks: a stack
            got = _pair_stack(p, ts[h : at + 1].tolist(), is_start[h : at + 1].tolist())
            if b == 0:
                s.loads.extend(np.array(got))
        else:
            p.total = sums[g]
            p.paired = p.paired or n_ends_l[g] > 0
            p.stack = [float(ts[at])] if open_at[g] else []
            if b == 0:
                s.loads.extend(d[offsets[g] : offsets[g] + n_ends_l[g]])
        if fresh[s_i] and ((p.paired and (p.total > 0 or p.irregular)) or p.stack):
            names = name_lists.get(s_i)
            if names is None:
                names = name_lists[s_i] = list(todo[s_i].names)
            # (its buckets come in order: all of them are here)
            _read_bucket(s, names[b] if b else DATA_LOADING, p)


def _pair_stack(p: Pairing, times: list[float], opens: list[bool]) -> list[float]:
    """Pair a group's marks that do not go start, end, start... (nested or unpaired) with a
    stack, onto its pairing ``p``; returns the durations paired."""
    stack: list[float] = []
    got: list[float] = []
    for x, is_open in zip(times, opens, strict=True):
        if is_open:
            stack.append(x)
        elif stack:
            got.append(max(0.0, x - stack.pop()))
    total = p.total
    for x in got:
        total += x
    p.total, p.paired, p.irregular, p.stack = total, p.paired or bool(got), True, stack
    return got
