"""Hung time: the final silence of an attempt that stopped making progress (docs/accounting.md,
"Hung").

An attempt is *hung* at its end when the launcher killed it for a hang (``attempt_end``
status ``hung``, ``badput run --hang-timeout``), or when, not completed, it ended (or its log
ends) more than its stall threshold after its last progress. Its hung time is the untracked
time from that last progress to its end: ``hung`` takes time from ``untracked`` only, so
nothing is counted twice and the buckets still sum to the total. Progress is a step or a
recorded interval event of any rank (not a heartbeat, not a ``teardown_start``).

The stall threshold of an attempt is the hang timeout ``badput run`` recorded on its
``job_start`` (``hang_timeout``), so the launcher that kills and the report that explains
agree; without one it is the per-rank analysis's default,
``max(stall_factor x ideal step time, stall_floor)`` (:class:`RankOptions`).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from badput.engine._attempt_streams import AttemptStreams
from badput.engine._attempts import Attempt
from badput.engine._ingest import Ingestor
from badput.engine._rank_model import RankOptions
from badput.engine._stream import Stream
from badput.events import OPEN_ENDED_KINDS, Kind

__all__ = [
    "HUNG",
    "HUNG_STATUS",
    "HungSpan",
    "hung_spans",
    "newest_hang_timeout",
    "recorded_hang_timeouts",
    "stall_options",
    "stall_threshold",
]

#: The bucket of hung time.
HUNG = "hung"
#: ``attempt_end`` status of an attempt ``badput run`` killed for a hang.
HUNG_STATUS = "hung"
_DEFAULTS = RankOptions()


class HungSpan(NamedTuple):
    """Attempt ``attempt`` (its index) was silent from its last progress ``start`` to its
    end ``end``."""

    attempt: int
    start: float
    end: float


def recorded_hang_timeouts(ing: Ingestor) -> dict[str | None, float]:
    """The hang timeout each attempt was launched with (key: its attempt key; ``None``: the
    newest one recorded without an attempt id)."""
    return _hang_timeouts(ing)[0]


def newest_hang_timeout(ing: Ingestor) -> float | None:
    """The hang timeout of the newest ``job_start`` that recorded one, if any did."""
    return _hang_timeouts(ing)[1]


def _hang_timeouts(ing: Ingestor) -> tuple[dict[str | None, float], float | None]:
    """:func:`recorded_hang_timeouts` and :func:`newest_hang_timeout`, worked out once for
    the lifecycle events as they are: every windowed report asks, and a job of 10,000
    attempts holds some 30,000 of them (17 ms a look, against 4 ms for the rest of a
    window's report). Ingest only appends to the list or replaces it, so its identity and
    length say whether it changed."""
    lifecycle = ing.lifecycle
    key = (id(lifecycle), len(lifecycle))
    memo = ing.hang_timeouts_memo
    if memo is not None and memo[0] == key:
        return memo[1], memo[2]
    found: dict[str | None, tuple[float, float]] = {}
    newest: tuple[float, float] | None = None
    for e in lifecycle:
        if e.kind == Kind.JOB_START and e.hang_timeout is not None:
            old = found.get(e.attempt)
            if old is None or e.ts >= old[0]:
                found[e.attempt] = (e.ts, e.hang_timeout)
            if newest is None or e.ts >= newest[0]:
                newest = (e.ts, e.hang_timeout)
    per_attempt = {k: timeout for k, (_ts, timeout) in found.items()}
    timeout = None if newest is None else newest[1]
    ing.hang_timeouts_memo = (key, per_attempt, timeout)
    return per_attempt, timeout


def stall_options(options: RankOptions, ing: Ingestor) -> RankOptions:
    """The per-rank thresholds a report uses: the hang timeout ``badput run`` recorded
    (newest) replaces the default stall threshold, so the stalls listed are the hangs the
    launcher acted on; thresholds set by the user (not the defaults) are kept."""
    default = (options.stall_factor, options.stall_floor) == (
        _DEFAULTS.stall_factor,
        _DEFAULTS.stall_floor,
    )
    timeout = newest_hang_timeout(ing) if default and ing.lifecycle else None
    if timeout is None:
        return options
    return dataclasses.replace(options, stall_factor=0.0, stall_floor=timeout)


def stall_threshold(timeout: float | None, ideal: float | None) -> float:
    """Seconds without progress that make a stall: the recorded ``timeout``, else the
    per-rank analysis's default from the ideal step time."""
    if timeout is not None:
        return timeout
    return max(_DEFAULTS.stall_factor * ideal if ideal else 0.0, _DEFAULTS.stall_floor)


def hung_spans(
    ing: Ingestor,
    streams: AttemptStreams,
    attempts: Sequence[Attempt],
    indices: range,
    *,
    ideal: float | None,
    live: bool,
    progress: dict[tuple[object, ...], tuple[object, float | None]] | None = None,
) -> list[HungSpan]:
    """The attempts among ``attempts[indices]`` that ended hung, with their silences.

    ``live``: the job is evaluated as of now; its running last attempt has not ended, so
    its silence is no hung time yet (views say it is stalled). ``progress``: where the
    attempts' last progress is remembered between queries (``QueryCache.progress``).
    """
    timeouts = recorded_hang_timeouts(ing) if ing.lifecycle else {}
    skip = [ing.buckets.code(b) for b in OPEN_ENDED_KINDS if b in ing.buckets.names]
    out: list[HungSpan] = []
    last = len(attempts) - 1
    for i in indices:
        att = attempts[i]
        if (live and i == last and not att.ended) or att.status == "completed":
            continue
        if att.ended_by_job_end and att.status is None:
            continue  # the job's end, with no word of a failure: nothing killed it
        end = att.eff_end
        killed = att.status == HUNG_STATUS
        limit = stall_threshold(timeouts.get(att.key, timeouts.get(None)), ideal)
        if not killed and end - att.eff_start <= limit:
            continue  # too short to hold a silence that long
        newest = _remembered_progress(streams, att, skip, progress)
        if newest is None or newest >= end:
            continue
        if killed or end - newest > limit:
            out.append(HungSpan(i, max(newest, att.eff_start), end))
    return out


def _remembered_progress(
    streams: AttemptStreams,
    att: Attempt,
    skip: Sequence[int],
    memo: dict[tuple[object, ...], tuple[object, float | None]] | None,
) -> float | None:
    """:func:`last_progress`, looked up in ``memo`` first (one entry an attempt, replaced
    when the attempt or its streams changed: the lengths of its streams only grow)."""
    if memo is None:
        return last_progress(streams, att, skip)
    sizes = tuple((rank, len(s.steps.ts), len(s.marks)) for rank, s in streams.of(att))
    state = (att.range_hi, att.ended, att.end, tuple(skip), sizes)
    key = (att.key, att.range_lo)
    kept = memo.get(key)
    if kept is not None and kept[0] == state:
        return kept[1]
    newest = last_progress(streams, att, skip)
    memo[key] = (state, newest)
    return newest


def last_progress(streams: AttemptStreams, att: Attempt, skip: Sequence[int]) -> float | None:
    """The newest step or interval event of any rank in ``att`` (not after its end), leaving
    out the marks of ``skip`` (bucket codes: a ``teardown_start`` is no progress)."""
    top = att.end if att.ended else math.inf
    lo, hi = att.range_lo, min(att.range_hi, math.nextafter(top, math.inf))
    best = -math.inf
    for _rank, s in streams.of(att):
        best = max(best, _newest_step(s, lo, hi), _newest_mark(s, lo, hi, skip))
    return None if best == -math.inf else best


def _newest_step(s: Stream, lo: float, hi: float) -> float:
    ts = s.steps.ts
    if not len(ts):
        return -math.inf
    if not s.steps.unsorted:
        k = bisect.bisect_left(ts, hi) - 1
        return ts[k] if k >= 0 and ts[k] >= lo else -math.inf
    arr = np.frombuffer(ts, dtype=np.float64)
    inside = arr[(arr >= lo) & (arr < hi)]
    return float(inside.max()) if inside.shape[0] else -math.inf


def _newest_mark(s: Stream, lo: float, hi: float, skip: Sequence[int]) -> float:
    if not len(s.marks):
        return -math.inf
    arr = np.frombuffer(s.marks.ts, dtype=np.float64)
    keep = (arr >= lo) & (arr < hi)
    if skip:
        keep &= ~np.isin(s.marks.bucket.column(), skip)
    inside = arr[keep]
    return float(inside.max()) if inside.shape[0] else -math.inf
