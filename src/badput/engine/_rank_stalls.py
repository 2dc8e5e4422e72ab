"""Stalls (hangs): times during which no rank of an attempt made progress (steps,
recorded intervals, section completions, not heartbeats) for longer than a threshold,
and who stopped first.

Time a rank spent inside one of its recorded intervals that it closed (a long
``distributed_init``, ``model_build``, ``compile``, checkpoint save, blocking data load,
evaluation...) is named work, not a stall: it is no gap of that rank. An interval still
open (at a kill, or now) may be where the rank hangs: its time stays a gap, and the stall
says which interval it is inside.
"""

from __future__ import annotations

import math
from collections.abc import Container

import numpy as np

from badput.engine._rank_columns import F64
from badput.engine._rank_derive import derived_of
from badput.engine._rank_model import Stall
from badput.engine._rank_stream import RankStream


def stalls_of(  # noqa: PLR0917 (what the analysis found, for every attempt)
    attempts: list[tuple[str, float, float, bool, bool]],
    everything: list[RankStream],
    workers: Container[int],
    now: float | None,
    threshold: float,
    typical: float | None,
) -> list[Stall]:
    """The stalls of every attempt (``attempts``: see ``RankTracker.analyze``), among the
    streams of the ranks that did something (``workers``)."""
    stalls: list[Stall] = []
    # A log without attempt ids (hand-written, imported) of a single attempt: its
    # streams have no id; with several attempts they cannot be told apart by id.
    idless = len(attempts) == 1 and not any(s.attempt == attempts[0][0] for s in everything)
    # Each attempt's streams, gathered in one pass (a scan per attempt was quadratic:
    # 20 s of a report at 10,000 attempts).
    by_attempt: dict[str | None, list[RankStream]] = {}
    for s in everything:
        if s.rank in workers:
            by_attempt.setdefault(s.attempt, []).append(s)
    for attempt, start, end, ended, completed in attempts:
        if idless:
            streams = [
                s
                for s in everything
                if s.rank in workers and (s.attempt == attempt or s.attempt is None)
            ]
        else:
            streams = list(by_attempt.get(attempt, ()))
        if streams and may_stall(streams, end, completed, threshold):
            stalls.extend(
                find_stalls(
                    attempt,
                    streams=streams,
                    start=start,
                    end=end,
                    ended=ended,
                    completed=completed,
                    now=now,
                    threshold=threshold,
                    typical=typical,
                )
            )
    return stalls


def _progress(s: RankStream) -> F64:
    parts = [
        np.frombuffer(s.step_ts, dtype=np.float64),
        np.frombuffer(s.end_ts, dtype=np.float64),
        np.frombuffer(s.pair_ts, dtype=np.float64),
        np.frombuffer(s.extra_ts, dtype=np.float64),
        np.array([log.last for log in s.sections.values() if math.isfinite(log.last)]),
    ]
    return np.sort(np.concatenate(parts), kind="stable")  # runs in time order: merged


def may_stall(streams: list[RankStream], end: float, completed: bool, threshold: float) -> bool:
    """Whether :func:`find_stalls` can find a stall in an attempt: ``False`` when some rank
    has no span without progress longer than ``threshold`` (so the ranks have none in
    common). Decided from each stream's first and last progress and longest gap, without
    looking at its progress times (an attempt of a few steps costs a few comparisons)."""
    if len(streams) == 1:  # the usual attempt of a single-process job
        d = derived_of(streams[0])
        if not d.n_progress:
            return False
        if completed:
            end = min(end, d.progress_last)
        if d.progress_last > end:
            return True
        return max(0.0, d.gap, end - d.progress_last) > threshold
    derived = {s.rank: derived_of(s) for s in streams}  # one per rank, as in find_stalls
    firsts = [d.progress_first for d in derived.values() if d.n_progress]
    if not firsts:
        return False
    begin = min(firsts)
    if completed:
        end = min(end, max(d.progress_last for d in derived.values() if d.n_progress))
    for d in derived.values():
        if not d.n_progress:
            longest = end - begin
        elif d.progress_last > end:
            return True  # progress after the end is left out of the gaps: look closer
        else:
            longest = max(d.progress_first - begin, d.gap, end - d.progress_last)
        if not longest > threshold:
            return False
    return True


def _gaps(times: F64, start: float, end: float, threshold: float) -> list[tuple[float, float]]:
    """Spans of [start, end] longer than ``threshold`` with no progress time inside."""
    t = times[(times >= start) & (times <= end)]
    edges = np.concatenate(([start], t, [end]))
    d = np.diff(edges)
    idx = np.flatnonzero(d > threshold)
    return [(float(edges[i]), float(edges[i + 1])) for i in idx]


def closed_spans(s: RankStream) -> tuple[F64, F64]:
    """The union of the recorded intervals ``s`` opened and closed (each bucket's marks paired
    as the per-rank view pairs them: by time, starts first at equal times, nested ones on a
    stack; an end without a start is left out): the starts and ends of its disjoint pieces,
    in time order. A start never ended (an interval still open) spans nothing. Kept on the
    stream until marks arrive (a hung job's next reports, heartbeats only, reuse it)."""
    n = len(s.pair_ts)
    if s.closed is None or s.closed[0] != n:
        s.closed = (n, *_closed_spans(s)) if n else (0, _NONE, _NONE)
    return s.closed[1], s.closed[2]


def _closed_spans(s: RankStream) -> tuple[F64, F64]:
    if not len(s.pair_ts):
        return _NONE, _NONE
    ts = np.frombuffer(s.pair_ts, dtype=np.float64)
    code = np.frombuffer(s.pair_code, dtype=np.int32)
    bucket, is_start = code >> 1, (code & 1).astype(bool)
    single = int(bucket.min()) == int(bucket.max())
    if not (single and bool((ts[1:] > ts[:-1]).all())):  # (a load per step: in order)
        order = np.lexsort((~is_start, ts, bucket))
        ts, bucket, is_start = ts[order], bucket[order], is_start[order]
    heads = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
    los: list[F64] = []
    his: list[F64] = []
    for a, b in zip(heads.tolist(), [*heads[1:].tolist(), len(ts)], strict=True):
        depth = np.cumsum(np.where(is_start[a:b], 1, -1))
        depth -= np.minimum(np.minimum.accumulate(depth), 0)  # a stray end closes nothing
        # Of the intervals open after mark i, those never closed: the least depth from i on.
        never = np.minimum.accumulate(depth[::-1])[::-1]
        inside = np.flatnonzero(depth[:-1] > never[:-1])  # some open after i is closed later
        los.append(ts[a:b][inside])
        his.append(ts[a:b][inside + 1])
    lo, hi = (los[0], his[0]) if single else (np.concatenate(los), np.concatenate(his))
    if not len(lo):
        return _NONE, _NONE
    if not single:
        by = np.argsort(lo, kind="stable")
        lo, hi = lo[by], hi[by]
    reach = np.maximum.accumulate(hi)
    pieces = np.flatnonzero(np.concatenate(([True], lo[1:] > reach[:-1])))
    return lo[pieces], reach[np.concatenate((pieces[1:] - 1, [len(lo) - 1]))]


_NONE: F64 = np.zeros(0, np.float64)


def _outside(
    gaps: list[tuple[float, float]], busy: tuple[F64, F64], threshold: float, until: float
) -> list[tuple[float, float]]:
    """The parts of ``gaps`` outside the spans ``busy`` (disjoint, in time order: starts and
    ends) that ended by ``until`` (one closed later was still open then), longer than
    ``threshold``."""
    los, his = busy
    if len(los) and his[-1] > until:
        keep = his <= until
        los, his = los[keep], his[keep]
    if not len(los) or not gaps:
        return gaps
    out: list[tuple[float, float]] = []
    for lo, hi in gaps:
        k = max(0, int(np.searchsorted(los, lo, side="right")) - 1)
        at = lo
        while k < len(los) and los[k] < hi:
            b_lo, b_hi = float(los[k]), float(his[k])
            if b_hi > at:
                if b_lo - at > threshold:
                    out.append((at, b_lo))
                at = max(at, b_hi)
            k += 1
        if hi - at > threshold:
            out.append((at, hi))
    return out


def _intersect(
    a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def find_stalls(
    attempt: str,
    *,
    streams: list[RankStream],
    start: float,
    end: float,
    ended: bool,
    completed: bool,
    now: float | None,
    threshold: float,
    typical: float | None,
) -> list[Stall]:
    progress = {s.rank: _progress(s) for s in streams}
    firsts = [float(p[0]) for p in progress.values() if len(p)]
    if not firsts:
        return []
    begin = min(firsts)  # before the first progress: start-up, not a stall
    if completed:
        end = min(end, max(float(p[-1]) for p in progress.values() if len(p)))
    # A span is a job stall when it is a gap on every rank: intersect the ranks' gaps.
    common: list[tuple[float, float]] | None = None
    of_rank = {s.rank: s for s in streams}  # (the stream each rank's progress is of)
    for rank, p in progress.items():
        g = _gaps(p, begin, end, threshold)  # a job stall lies inside a long gap of each
        # rank, outside the recorded intervals it closed (named work)
        if g:
            g = _outside(g, closed_spans(of_rank[rank]), threshold, end)
        common = g if common is None else _intersect(common, g)
        if not common:
            return []
    out: list[Stall] = []
    for lo, hi in common or []:
        if hi - lo <= threshold:
            continue
        ongoing = not ended and now is not None and hi >= end
        out.append(
            _describe(
                attempt,
                streams=streams,
                progress=progress,
                lo=lo,
                hi=hi,
                ongoing=ongoing,
                threshold=threshold,
                typical=typical,
            )
        )
    return out


def _describe(
    attempt: str,
    *,
    streams: list[RankStream],
    progress: dict[int, F64],
    lo: float,
    hi: float,
    ongoing: bool,
    threshold: float,
    typical: float | None,
) -> Stall:
    """Who stopped first, at what step, in which section, inside which interval.

    In order: the ranks that never reached the step the others reached; else that
    finished fewer runs of a section (as their summaries said by the stall's end);
    else that reported, during the stall, a section open since before it began
    (alive, and stuck inside it); else whose last progress is oldest by more than
    half a typical step. Otherwise all ranks stopped together.
    """
    eps = 1e-9
    steps: dict[int, int] = {}
    counts: dict[int, dict[str, int]] = {}
    stuck: dict[int, str] = {}
    lasts: dict[int, float] = {}
    for s in streams:
        ts = np.frombuffer(s.step_ts, dtype=np.float64)
        no = s.step_no.column()
        before = ts <= lo + eps
        steps[s.rank] = int(no[before].max()) if before.any() else -1
        counts[s.rank] = {
            name: sum(n for t, n, _ in log.periods if t <= hi) for name, log in s.sections.items()
        }
        for name, log in sorted(s.sections.items()):
            if any(lo < t <= hi and since <= lo + eps for t, since in log.opens):
                stuck.setdefault(s.rank, name)
        p = progress[s.rank]
        lasts[s.rank] = float(p[p <= lo + eps].max()) if (p <= lo + eps).any() else -math.inf
    ranks = sorted(steps)
    top_step = max(steps.values())
    behind = [r for r in ranks if steps[r] < top_step]
    why = "never reached the step the others reached"
    if not behind:
        names = {n for c in counts.values() for n in c}
        found: set[int] = set()
        for name in names:
            top = max(c.get(name, 0) for c in counts.values())
            found |= {r for r in ranks if counts[r].get(name, 0) < top}
        behind, why = sorted(found), "did not finish a section the others finished"
    if not behind or len(behind) == len(ranks):
        behind, why = sorted(stuck), "stayed inside a timed section during the stall"
    if not behind or len(behind) == len(ranks):
        oldest, newest = min(lasts.values()), max(lasts.values())
        behind, why = [], "all ranks stopped together"
        if newest - oldest > 0.5 * (typical or 0.0):
            behind = [r for r in ranks if lasts[r] <= oldest + eps]
            why = "last progress oldest"
    inside: set[str] = set()
    for s in streams:
        for bucket, starts in s.open.items():
            if starts and starts[0] <= lo + eps:
                inside.add(bucket)
    return Stall(
        attempt=attempt,
        start=lo,
        end=hi,
        seconds=hi - lo,
        ongoing=ongoing,
        threshold=threshold,
        last_step=None if top_step < 0 else top_step,
        first_stopped=behind,
        why=why,
        open_sections={str(r): n for r, n in sorted(stuck.items())},
        inside=sorted(inside),
    )
