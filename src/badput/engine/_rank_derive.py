"""The derivation of the per-rank view: each stream's span, progress gaps and step times
(:class:`~badput.engine._rank_stream.Derived`), taken in vectorised passes over many
streams, each pass only of the values that arrived since the last."""

from __future__ import annotations

import itertools
import math
from array import array

import numpy as np
import numpy.typing as npt

from badput.engine._rank_columns import EMPTY, F64
from badput.engine._rank_stream import (
    Covered,
    Derived,
    GapPoint,
    RankStream,
    in_chunks,
    nonempty_segments,
    spread,
    steps_as_int64,
    tail,
)


def derived_of(s: RankStream) -> Derived:
    """What the analysis needs of ``s`` (see :func:`derive_streams`)."""
    if s.derived_at != s.changes or s.derived is None:
        derive_streams([s])
    assert s.derived is not None
    return s.derived


def derive_streams(streams: list[RankStream]) -> None:
    """Fill each stream's :class:`Derived`, in vectorised passes over many of them (a
    report of 10,000 attempts has 10,000 streams of a few dozen events each).

    Each pass takes only the values that arrived since the last (a running job's stream
    grows by a few per monitor cycle): carrying the newest value and the last step in
    time order over, the new ones give the next gaps and step times. A stream whose new
    values do not all come after what was taken (they arrived out of time order) is
    derived again from its first value."""
    sizes = [
        len(s.step_ts) + len(s.end_ts) + len(s.pair_ts) + len(s.extra_ts) - s.covered.n
        for s in streams
    ]
    for chunk in in_chunks(streams, sizes):
        late = _derive_chunk(chunk)
        late = [s for s in late if not _derive_from_point(s)]
        if late:
            for s in late:
                s.covered = Covered()
            _derive_chunk(late)
    for s in streams:
        _finish(s)


#: Newest values of a pass a stream's gap points are made among (:func:`_sorted_gaps`): a
#: late value goes back this far at most (a million-step job with a data load a step:
#: about 11 minutes at 100 steps/s); each pass's temporaries are two columns of this many.
GAP_POINTS_SPAN = 1 << 18
#: The gap points kept nearest the newest (older ones are thinned out: see _kept_points).
GAP_POINTS_NEAR = 4


def _derive_from_point(s: RankStream) -> bool:
    """Take the values of ``s`` after the newest gap point before its late ones again, and
    its new step starts as a pass takes them; False (derive it again from its first value)
    when no point is before them, or step starts arrived late, or ``s`` was derived with
    other streams (a pass of many small streams keeps no points).

    A rank written by two processes whose files a monitor reads at different moments: the
    marks of one arrive late at every look, and deriving the stream again from its first
    value sorted all its values at every look (a million steps with a data load each:
    4 M values, 60 ms). From a point, the values after it are found with one comparison
    per value, and only they are sorted."""
    cov = s.covered
    at = cov.at
    cols = (s.step_ts, s.end_ts, s.pair_ts, s.extra_ts)
    new_steps = np.frombuffer(s.step_ts, dtype=np.float64)[at[0] :]
    if len(new_steps) and cov.step_lo is not None and float(new_steps.min()) < cov.last_ts:
        return False
    first = math.inf
    for col, k in zip(cols, at, strict=True):
        if len(col) > k:
            first = min(first, float(np.frombuffer(col, dtype=np.float64)[k:].min()))
    while cov.points and not cov.points[-1].t < first:
        cov.points.pop()  # a value at or before it arrived since: it no longer holds
    if not cov.points:
        return False
    point = cov.points[-1]
    after: list[F64] = []
    since: list[int] = []  # where the first value after the point is, in each column
    for col, k in zip(cols, point.since, strict=True):
        v = np.frombuffer(col, dtype=np.float64)[k:] if len(col) > k else EMPTY
        later = v > point.t
        after.append(v[later])
        since.append(k + int(later.argmax()) if len(v) and later.any() else len(col))
    c = np.concatenate([np.array([point.hi]), *after])  # the newest taken, carried over
    cov.n, cov.lo, cov.hi, cov.gap = point.n, point.lo, point.hi, point.gap
    # (the points this pass makes, all after this one, find their later values there)
    cov.at = (since[0], since[1], since[2], since[3])
    step_ts, step_no = array("d"), array("q")
    _add_new_steps(s, at[0], step_ts, step_no)
    late = _derive_columns(
        [s],
        [c],
        [len(c)],
        np.frombuffer(step_ts, dtype=np.float64) if len(step_ts) else EMPTY,
        np.frombuffer(step_no, dtype=np.int64) if len(step_no) else np.zeros(0, np.int64),
        [len(step_ts)],
        [0],
    )
    return not late  # (never late: every value is after the point's newest, steps in order)


def _sorted_gaps(v: F64, carried: bool, before: Covered) -> tuple[float, list[GapPoint]]:
    """The longest gap between consecutive values of ``v`` (sorted; ``carried``: its first
    is the newest value taken before, ``before`` what was taken), and gap points at its
    8th, 16th, 32nd... newest values (:class:`GapPoint`)."""
    if len(v) < 2:
        return -math.inf, []
    h = max(0, len(v) - 1 - GAP_POINTS_SPAN)
    best = _max_gap(v[: h + 1]) if h else -math.inf
    prefix = np.maximum.accumulate(np.diff(v[h:]))  # gap up to v[h + 1 + j], from v[h]
    gap = max(best, float(prefix[-1]))
    n0 = before.n - 1 if carried else 0  # values counted before v[0]
    since = before.at  # (the columns before it hold no value after v[0])
    lo0 = before.lo if carried else math.inf
    points: list[GapPoint] = []
    back = 8
    while back < len(v) - h:
        t = float(v[len(v) - 1 - back])
        i = int(v.searchsorted(t, "right")) - 1  # the last of its time: all of t taken
        # Not at the newest time: a later pass may take values equal to the newest (they
        # are not late), which a point there would not count.
        if h < i < len(v) - 1 and (not points or points[-1].t != t):
            points.append(
                GapPoint(
                    t,
                    n0 + i + 1,
                    min(lo0, float(v[0])),
                    t,
                    max(before.gap, best, float(prefix[i - h - 1])),
                    since,
                )
            )
        back *= 2
    points.reverse()  # oldest first
    return gap, points


def _kept_points(points: list[GapPoint], newest_n: int) -> list[GapPoint]:
    """``points`` (oldest first) thinned: the :data:`GAP_POINTS_NEAR` newest, and older
    ones each at least twice as far (in values) from the newest as the next kept."""
    if len(points) <= GAP_POINTS_NEAR:
        return points
    kept = points[-GAP_POINTS_NEAR:]
    for p in reversed(points[:-GAP_POINTS_NEAR]):
        if newest_n - p.n >= 2 * (newest_n - kept[0].n):
            kept.insert(0, p)
    return kept


def _add_new_steps(s: RankStream, k: int, step_ts: array[float], step_no: array[int]) -> None:
    """Append the step starts of ``s`` from index ``k`` on, after the last step taken (the
    next step time is taken from it), to the columns of a pass."""
    if s.covered.step_lo is not None:
        step_ts.append(s.covered.last_ts)
        step_no.append(s.covered.last_no)
    step_ts += tail(s.step_ts, k)
    steps_as_int64(step_no, s, k)


def _derive_chunk(streams: list[RankStream]) -> list[RankStream]:
    """One vectorised pass; returns the streams whose new values came out of order (left
    as they were)."""
    if len(streams) == 1 and not streams[0].covered.n:
        return _derive_fresh(streams[0])
    cols, step_ts = array("d"), array("d")
    step_no = array("q")
    n_cols: list[int] = []
    n_steps: list[int] = []
    resumed: list[int] = []  # the streams carrying values over
    for i, s in enumerate(streams):
        cov = s.covered
        before = len(cols)
        before_steps = len(step_ts)
        if not cov.n:  # nothing taken yet (a cold report: every stream)
            cols += s.step_ts
            cols += s.end_ts
            cols += s.pair_ts
            cols += s.extra_ts
            step_ts += s.step_ts
            steps_as_int64(step_no, s, 0)
        else:
            at = cov.at
            cols.append(cov.hi)  # the newest value taken: the next gap starts there
            cols += tail(s.step_ts, at[0])
            cols += tail(s.end_ts, at[1])
            cols += tail(s.pair_ts, at[2])
            cols += tail(s.extra_ts, at[3])
            _add_new_steps(s, at[0], step_ts, step_no)
            resumed.append(i)
        n_cols.append(len(cols) - before)
        n_steps.append(len(step_ts) - before_steps)
    c = np.frombuffer(cols, dtype=np.float64) if len(cols) else EMPTY
    s_ts = np.frombuffer(step_ts, dtype=np.float64) if len(step_ts) else EMPTY
    s_no = np.frombuffer(step_no, dtype=np.int64) if len(step_no) else np.zeros(0, np.int64)
    return _derive_columns(streams, [c], n_cols, s_ts, s_no, n_steps, resumed)


def _derive_fresh(s: RankStream) -> list[RankStream]:
    """:func:`_derive_chunk` of one stream taken for the first time (a cold report of a
    large stream has a pass of its own): its columns are read where they are, and joined
    once, not copied into growing arrays (a million steps with their data loads: 4 M
    values, 32 MB each copy)."""
    parts = [
        np.frombuffer(col, dtype=np.float64)
        for col in (s.step_ts, s.end_ts, s.pair_ts, s.extra_ts)
        if len(col)
    ]
    held = [np.concatenate(parts) if parts else EMPTY]  # a copy: sorted in place
    del parts  # views of the stream's columns (which cannot grow while one is held)
    s_ts = np.frombuffer(s.step_ts, dtype=np.float64) if len(s.step_ts) else EMPTY
    s_no = s.step_no.column()  # (int32 while the steps fit: the same values)
    return _derive_columns([s], held, [len(held[0])], s_ts, s_no, [len(s_ts)], [])


#: Values whose gaps are taken at a time (a sorted column of millions is not differenced whole).
_GAP_BLOCK = 1 << 18


def _max_gap(v: F64) -> float:
    """The largest difference between consecutive values of ``v`` (sorted, two or more),
    block by block: the maximum of ``np.diff(v)`` without its copy of the column."""
    best = -math.inf
    for i in range(0, len(v) - 1, _GAP_BLOCK):
        best = max(best, float(np.diff(v[i : i + _GAP_BLOCK + 1]).max()))
    return best


def _derive_columns(  # noqa: PLR0917 (the gathered columns and their layout)
    streams: list[RankStream],
    held: list[F64],
    n_cols: list[int],
    s_ts: F64,
    s_no: npt.NDArray[np.int64],
    n_steps: list[int],
    resumed: list[int],
) -> list[RankStream]:
    """The rest of :func:`_derive_chunk`: ``held`` holds a column of each stream's new
    values one stream after the other (``n_cols`` each), ``s_ts``/``s_no`` its step
    starts and numbers (``n_steps`` each); ``resumed``: the streams carrying values over.
    The column is the caller's own: it is sorted in place, and taken out of ``held`` so
    that it is freed before the step times are made (a million steps: 32 MB less then)."""
    c = held.pop()
    ids = np.arange(len(streams))
    lows: list[float] = [math.inf] * len(streams)
    highs: list[float] = [-math.inf] * len(streams)
    which, starts = nonempty_segments(n_cols)
    if which:
        spread(lows, which, np.minimum.reduceat(c, starts))
        spread(highs, which, np.maximum.reduceat(c, starts))
    step_which, step_starts = nonempty_segments(n_steps)
    first_steps: list[float] = [math.inf] * len(streams)
    if step_which:
        spread(first_steps, step_which, np.minimum.reduceat(s_ts, step_starts))
    late = {
        i
        for i in resumed
        if lows[i] < streams[i].covered.hi
        or (streams[i].covered.step_lo is not None and first_steps[i] < streams[i].covered.last_ts)
    }
    # Progress, sorted per stream: the longest gap between consecutive values.
    gaps_of: list[float] = [-math.inf] * len(streams)
    new_points: list[GapPoint] = []
    if which and len(streams) == 1:  # a large stream has a pass of its own: no owners
        # "stable" (timsort) merges the columns' runs, each in time order already: 0.02 s
        # for the 4 M times of a million steps with their data loads, against 0.4 s
        # (the whole report: 1.0 s) for the default quicksort; the values are the same.
        # Sorted in place and differenced block by block: of a million steps with their
        # data loads, 32 MB at a time instead of 96.
        c.sort(kind="stable")
        gaps_of[0], new_points = _sorted_gaps(c, bool(resumed), streams[0].covered)
    elif which:
        owner = np.repeat(ids, n_cols)
        v = c[np.lexsort((c, owner))]
        gaps = np.empty(len(v))
        gaps[1:] = np.diff(v)
        gaps[starts] = -math.inf  # not a gap: the first of a stream after another's last
        spread(gaps_of, which, np.maximum.reduceat(gaps, starts))
        del v, gaps
    del c
    steps = _step_times(len(streams), s_ts, s_no, n_steps, step_which, step_starts)
    _take(streams, late, n_cols, lows, highs, gaps_of, new_points, steps)
    return [streams[i] for i in sorted(late)]


#: What a pass found of its streams' step starts, per stream: the least and largest step
#: number, the last step in time order (time, number), the step times, whether it had any.
_Steps = tuple[list[int], list[int], list[float], list[int], list[F64], list[bool]]


def _step_times(  # noqa: PLR0917 (the step columns of _derive_columns and their layout)
    n_streams: int,
    s_ts: F64,
    s_no: npt.NDArray[np.int64],
    n_steps: list[int],
    step_which: list[int],
    step_starts: npt.NDArray[np.intp],
) -> _Steps:
    """Of :func:`_derive_columns`'s step starts: step times between consecutive step starts
    in time order (stable at equal times), per step where the step number grows."""
    step_lows: list[int] = [0] * n_streams
    step_highs: list[int] = [0] * n_streams
    last_ts: list[float] = [0.0] * n_streams
    last_no: list[int] = [0] * n_streams
    times_of: list[F64] = [EMPTY] * n_streams
    if step_which:
        spread(step_lows, step_which, np.minimum.reduceat(s_no, step_starts))
        spread(step_highs, step_which, np.maximum.reduceat(s_no, step_starts))
        if n_streams == 1:
            owner = np.zeros(1, np.intp)  # (broadcast: one stream)
            if bool((s_ts[1:] >= s_ts[:-1]).all()):  # in time order (the usual): as it is
                ts, no = s_ts, s_no
            else:
                order = np.argsort(s_ts, kind="stable")
                ts, no = s_ts[order], s_no[order]
                del order
        else:
            owner = np.repeat(np.arange(n_streams), n_steps)
            order = np.lexsort((s_ts, owner))
            ts, no, owner = s_ts[order], s_no[order], owner[order]
            del order
        ends = (step_starts + np.array(n_steps, np.intp)[step_which] - 1).tolist()
        for i, t, n in zip(step_which, ts[ends].tolist(), no[ends].tolist(), strict=True):
            last_ts[i], last_no[i] = t, n
        dn = np.diff(no)
        ok = dn > 0 if n_streams == 1 else (owner[1:] == owner[:-1]) & (dn > 0)
        times = np.diff(ts)
        if bool(ok.all()):  # (the usual: divided in place, no copy of both columns)
            times /= dn
        else:
            times = times[ok] / dn[ok]
        del dn
        counts = (
            np.array([len(times)])
            if n_streams == 1
            else np.bincount(owner[1:][ok], minlength=n_streams)
        )
        found, at_ = nonempty_segments(counts.tolist())
        for i, at, n in zip(found, at_.tolist(), counts[found].tolist(), strict=True):
            times_of[i] = times[at : at + n]
    has_steps = [False] * n_streams
    for i in step_which:
        has_steps[i] = True
    return step_lows, step_highs, last_ts, last_no, times_of, has_steps


def _take(  # noqa: PLR0917 (what _derive_columns found, per stream)
    streams: list[RankStream],
    late: set[int],
    n_cols: list[int],
    lows: list[float],
    highs: list[float],
    gaps_of: list[float],
    new_points: list[GapPoint],
    steps: _Steps,
) -> None:
    """Add what a pass found of each stream but the ``late`` ones (``n_cols`` values each,
    the newest taken before among them when some were) to what was taken of it."""
    step_lows, step_highs, last_ts, last_no, times_of, has_steps = steps
    for i, s in enumerate(streams):
        if late and i in late:
            continue
        cov = s.covered
        cov.at = (len(s.step_ts), len(s.end_ts), len(s.pair_ts), len(s.extra_ts))
        if len(streams) == 1:  # (the values taken once this pass is: the newest point's)
            newest = cov.n + n_cols[i] - 1 if cov.n else n_cols[i]
            cov.points = _kept_points([*cov.points, *new_points], newest)
        if not cov.n:  # the first pass over the stream (nothing to combine with)
            cov.n, cov.lo, cov.hi, cov.gap = n_cols[i], lows[i], highs[i], gaps_of[i]
            if has_steps[i]:
                cov.step_lo, cov.step_hi = step_lows[i], step_highs[i]
                cov.last_ts, cov.last_no = last_ts[i], last_no[i]
                cov.times.extend(times_of[i])
            continue
        cov.n += n_cols[i] - 1
        cov.lo = min(cov.lo, lows[i])
        cov.hi = max(cov.hi, highs[i])
        cov.gap = max(cov.gap, gaps_of[i])
        if has_steps[i]:
            lo, hi = step_lows[i], step_highs[i]
            cov.step_lo = lo if cov.step_lo is None else min(cov.step_lo, lo)
            cov.step_hi = hi if cov.step_hi is None else max(cov.step_hi, hi)
            cov.last_ts, cov.last_no = last_ts[i], last_no[i]
            cov.times.extend(times_of[i])


def _finish(s: RankStream) -> None:
    """The stream's :class:`Derived`, of what :func:`derive_streams` took from its columns and its
    sections' newest completions (a few)."""
    cov = s.covered
    lo, hi = cov.lo, cov.hi
    d = Derived(
        lo if lo < s.first_ts else s.first_ts,  # min() and max(), inline
        hi if hi > s.last_ts else s.last_ts,
        cov.times.view() if cov.times.n else EMPTY,
        cov.step_lo,
        cov.step_hi,
        cov.n,
        lo,
        hi,
        cov.gap,
    )
    lasts = (
        [log.last for log in s.sections.values() if math.isfinite(log.last)] if s.sections else None
    )
    if lasts:
        d.n_progress += len(lasts)
        d.progress_first = min(cov.lo, *lasts)
        d.progress_last = max(cov.hi, *lasts)
        # gaps between completions outside the columns' span and its nearest edge
        below = sorted(x for x in lasts if x < cov.lo)
        above = sorted(x for x in lasts if x > cov.hi)
        for run in ([*below, cov.lo], [cov.hi, *above]) if cov.n else (sorted(lasts),):
            for a, b in itertools.pairwise(run):
                d.gap = max(d.gap, b - a)
    s.derived, s.derived_at = d, s.changes
