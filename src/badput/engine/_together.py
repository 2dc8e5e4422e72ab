"""Closed attempts sealed together: one vectorised pass over many attempts' events.

What the query does for one attempt (pair its marks, clip and flatten its intervals, make
its rows, seal them whole) costs a few hundred numpy calls whatever the attempt's size: on
a job of 10,000 short attempts, most of a report. :func:`seal_together` does it for many
closed attempts at once: their events are concatenated, their bucket codes made distinct
per attempt (attempt x buckets + bucket) so that pairing and flattening never cross from
one attempt to the next, their rows computed with each attempt's own span, then cut apart
and sealed (:func:`~badput.engine._steps.seal_whole_many`). The numbers are those of the
one-by-one path (a property test holds them to it). Pure computation; no I/O.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, NamedTuple

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
from badput.engine._rows import sorted_step_arrays
from badput.engine._steps import AttemptSteps, compute_rows, seal_whole_many, without_order
from badput.engine._stream import Stream

__all__ = ["ClosedAttempt", "seal_together"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class ClosedAttempt(NamedTuple):
    """One closed attempt to seal: its accounting stream, as the query sees it."""

    signature: tuple[Any, ...]  # the AttemptSteps signature the one-by-one path would give
    lo: float  # its effective span
    hi: float
    stream: Stream  # its leader's events
    range_lo: float  # the events it accounts for: ts in [range_lo, top)
    top: float


def _gathered(attempts: list[ClosedAttempt]) -> tuple[F64, I64, npt.NDArray[np.int8], Marks]:
    """Every attempt's step events and marks, sorted, one attempt after the other (all of
    each stream: the caller drops what is outside each attempt's range). Streams that
    arrived in time order (the usual case) are joined from their buffers in one copy per
    column, not one numpy array per stream and column."""
    streams = [a.stream for a in attempts]
    if any(s.steps.unsorted or s.marks.unsorted for s in streams):
        steps = [sorted_step_arrays(s) for s in streams]
        parts = [s.marks.columns() for s in streams]
        return (
            np.concatenate([x[0] for x in steps]),
            np.concatenate([x[1] for x in steps]),
            np.concatenate([x[2] for x in steps]),
            Marks(
                np.concatenate([m.ts for m in parts]),
                np.concatenate([m.seq for m in parts]),
                np.concatenate([m.bucket for m in parts]),
                np.concatenate([m.is_start for m in parts]),
                np.concatenate([m.blocking for m in parts]),
                np.concatenate([m.line for m in parts]),
                np.concatenate([m.source for m in parts]),
            ),
        )

    step_logs = [s.steps for s in streams]
    mark_logs = [s.marks for s in streams]

    def joined(logs: list[Any], column: str, dtype: Any) -> npt.NDArray[Any]:
        return np.frombuffer(b"".join(map(attrgetter(column), logs)), dtype)

    return (
        joined(step_logs, "ts", np.float64),
        joined(step_logs, "step", np.int64),
        joined(step_logs, "is_end", np.int8),
        Marks(
            joined(mark_logs, "ts", np.float64),
            joined(mark_logs, "seq", np.int64),
            joined(mark_logs, "bucket", np.int32),
            joined(mark_logs, "is_start", np.bool_),
            joined(mark_logs, "blocking", np.bool_),
            joined(mark_logs, "line", np.int32),
            joined(mark_logs, "source", np.int32),
        ),
    )


def seal_together(
    attempts: list[ClosedAttempt], n_buckets: int, exempt: list[int]
) -> list[AttemptSteps]:
    """Each attempt's rows and intervals sealed whole, as one pass over all of them.

    ``n_buckets``: how many bucket codes the marks use; ``exempt``: the codes whose
    intervals do not spoil a step as a speed measurement (data loading).
    """
    g = len(attempts)
    lo = np.array([a.lo for a in attempts])
    hi = np.array([a.hi for a in attempts])
    range_lo = np.array([a.range_lo for a in attempts])
    top = np.array([a.top for a in attempts])
    ts, step, is_end, marks = _gathered(attempts)
    # What each attempt accounts for: its stream's events in [range_lo, top) (§9.5: none
    # after its end). Each stream is sorted, so what is left stays one run per attempt.
    seen = [(len(a.stream.steps), len(a.stream.marks)) for a in attempts]
    raw_group = np.repeat(np.arange(g), [n for n, _ in seen])
    inside = (ts >= range_lo[raw_group]) & (ts < top[raw_group])
    if not inside.all():
        ts, step, is_end, raw_group = ts[inside], step[inside], is_end[inside], raw_group[inside]
    mark_group = np.repeat(np.arange(g), [n for _, n in seen])
    inside = (marks.ts >= range_lo[mark_group]) & (marks.ts < top[mark_group])
    if not inside.all():
        marks, mark_group = marks.take(inside), mark_group[inside]
    n_raw = np.bincount(raw_group, minlength=g)
    n_marks = np.bincount(mark_group, minlength=g)
    marks = Marks(
        marks.ts,
        marks.seq,
        (mark_group * n_buckets + marks.bucket).astype(np.int32),
        marks.is_start,
        marks.blocking,
        marks.line,
        marks.source,
    )
    # Pair within each attempt (the codes differ), close what is left at its end.
    paired = pair_columns(marks, close_at=hi[mark_group])
    ivs = paired.intervals
    rank = innermost_rank(ivs)
    ivs_group = ivs.bucket // n_buckets
    a_t = np.maximum(ivs.start, lo[ivs_group])
    b_t = np.minimum(ivs.end, hi[ivs_group])
    keep = b_t >= a_t
    clipped = Spans(a_t[keep], b_t[keep], ivs.bucket[keep], ivs.blocking[keep], rank[keep])
    pieces = flatten_spans(clipped.take(clipped.blocking))
    nonblocking = clipped.take(~clipped.blocking)
    unclean = pieces.take(~np.isin(pieces.bucket % n_buckets, exempt))
    rows, _unmatched_ts, unmatched_group = compute_rows(
        ts,
        step,
        is_end,
        lo=lo[raw_group],
        hi=hi[raw_group],
        cov=Coverage.of(pieces),
        prev_step=None,
        unclean_cov=Coverage.of(unclean),
        group=raw_group,
    )
    # Cut everything apart, per attempt.
    row_group = raw_group[is_end == 0]
    row_bounds = np.searchsorted(row_group, np.arange(g + 1)).tolist()
    unmatched_at = np.searchsorted(unmatched_group, np.arange(g + 1)).tolist()
    return seal_whole_many(
        [a.signature for a in attempts],
        rows,
        row_bounds,
        pieces=_apart(without_order(pieces), n_buckets, g),
        nonblocking=_split_spans(without_order(nonblocking), n_buckets, g),
        unpaired_starts=_split_marks(paired.unpaired_starts, n_buckets, g),
        unpaired_ends=_split_marks(paired.unpaired_ends, n_buckets, g),
        unmatched=np.diff(unmatched_at).tolist(),
        used=list(zip(n_raw.tolist(), n_marks.tolist(), strict=True)),
        seen=seen,
        piece_sums=_sums_per_attempt(pieces, n_buckets, g),
        whole_end=hi.tolist(),
    )


_NO_SPANS = Spans.empty()
_NO_MARKS = Marks.empty()


def _sums_per_attempt(spans: Spans, n_buckets: int, g: int) -> list[dict[int, float]]:
    """Seconds per bucket code of each attempt's ``spans`` (bucket = attempt x n_buckets
    + bucket), with one bincount over all of them; what ``add_sums`` gives per attempt."""
    out: list[dict[int, float]] = [{} for _ in range(g)]
    if not len(spans):
        return out
    totals = np.bincount(spans.bucket, weights=spans.end - spans.start, minlength=g * n_buckets)
    where = np.flatnonzero(totals)
    for code, value in zip(where.tolist(), totals[where].tolist(), strict=True):
        out[code // n_buckets][code % n_buckets] = value
    return out


def _apart(spans: Spans, n_buckets: int, g: int) -> tuple[Spans, list[int]]:
    """``spans`` (bucket = attempt x n_buckets + bucket) with their own bucket codes, in
    attempt order (each attempt's in its original order), and where each attempt's begin:
    attempt k's are ``[bounds[k], bounds[k + 1])``."""
    if not len(spans):
        return _NO_SPANS, [0] * (g + 1)
    group = spans.bucket // n_buckets
    if bool((group[1:] < group[:-1]).any()):  # attempts whose spans interleave in time
        order = np.argsort(group, kind="stable")
        spans, group = spans.take(order), group[order]
    plain = Spans(spans.start, spans.end, spans.bucket % n_buckets, spans.blocking, spans.order)
    return plain, np.searchsorted(group, np.arange(g + 1)).tolist()


def _split_spans(spans: Spans, n_buckets: int, g: int) -> list[Spans]:
    """``spans`` (bucket = attempt x n_buckets + bucket) cut into one Spans per attempt,
    with their own bucket codes, each in its original order."""
    if not len(spans):  # the usual case for non-blocking intervals: one shared empty
        return [_NO_SPANS] * g
    plain, bounds = _apart(spans, n_buckets, g)
    return [plain.take(slice(bounds[k], bounds[k + 1])) for k in range(g)]


def _split_marks(marks: Marks, n_buckets: int, g: int) -> list[Marks]:
    """Unpaired marks cut apart per attempt (in (ts, seq) order within each)."""
    if not len(marks):  # the usual case: one shared empty
        return [_NO_MARKS] * g
    group = marks.bucket // n_buckets
    order = np.argsort(group, kind="stable")
    marks = marks.take(order)
    plain = Marks(
        marks.ts,
        marks.seq,
        marks.bucket % n_buckets,
        marks.is_start,
        marks.blocking,
        marks.line,
        marks.source,
    )
    bounds = np.searchsorted(group[order], np.arange(g + 1)).tolist()
    return [plain.take(slice(bounds[k], bounds[k + 1])) for k in range(g)]
