"""The timeline's recorded intervals, built as columns (a job with a data load a step has
millions): for any log, the intervals an interval-at-a-time reading gives, each cut at its
attempt's end, in lane then start order, and every step's own time less the blocking
intervals of its lane."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from itertools import pairwise

from hypothesis import HealthCheck, example, given, settings

from badput.engine import Accountant
from badput.engine._timeline import _recorded
from badput.events import Event
from test_engine_properties import event_logs

Key = tuple[int, int, float, float, str, bool]


def one_by_one(
    acc: Accountant, report: object
) -> Counter[tuple[int, int, float, float, str, bool]]:
    """Each recorded interval read alone: (attempt, rank, start, end cut, bucket, blocking)."""
    attempts = report.attempts  # type: ignore[attr-defined]
    starts = [a.start for a in attempts]
    out: Counter[Key] = Counter()
    ing = acc._ing
    for stream in ing.streams.values():
        if not stream.has_work or not attempts:
            continue
        lo, hi, code, blocking = _recorded(stream, report.end)  # type: ignore[attr-defined]
        for a_lo, a_hi, c, b in zip(
            lo.tolist(), hi.tolist(), code.tolist(), blocking.tolist(), strict=True
        ):
            at = max(bisect_right(starts, a_lo) - 1, 0)
            cut = min(a_hi, attempts[at].end)
            if cut > a_lo:
                out[(at, stream.rank, a_lo, cut, ing.buckets.names[c], b)] += 1
    return out


def ev(ts: float, kind: str, **kw: object) -> Event:
    attempt = kw.pop("attempt", 0)
    return Event(ts=ts, kind=kind, job="prop", attempt=attempt, rank=0, **kw)  # type: ignore[arg-type]


#: A non-blocking load that starts before a blocking save inside it (built blocking first:
#: the order is the sort's), a load of no length, and a save past its attempt's end.
EDGES = [
    ev(0.0, "step_start", step=0),
    ev(1.0, "data_loading_start", blocking=False),
    ev(2.0, "checkpoint_save_start", step=0),
    ev(3.0, "checkpoint_save_end", step=0),
    ev(4.0, "data_loading_end", blocking=False),
    ev(4.5, "data_loading_start"),
    ev(4.5, "data_loading_end"),
    ev(5.0, "step_start", step=1),
    ev(6.0, "checkpoint_save_start", step=1),
    ev(7.0, "attempt_end", status="failed"),
    ev(7.5, "checkpoint_save_end", step=1),
    ev(10.0, "step_start", step=1, attempt=1),
    ev(11.0, "step_start", step=2, attempt=1),
]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(events=event_logs())
@example(events=EDGES)
def test_intervals_are_each_interval_cut_at_its_attempt_in_lane_order(events: list[Event]) -> None:
    acc = Accountant("prop")
    acc.ingest_events(events)
    report = acc.report()
    timeline = acc.timeline(report)
    lanes = timeline.lanes
    multi = any(lane.rank is not None for lane in lanes)
    got: Counter[Key] = Counter()
    for iv in timeline.intervals:
        lane = lanes[iv.lane]
        rank = lane.rank if multi and lane.rank is not None else 0
        got[(lane.attempt_index, rank, iv.start, iv.end, iv.bucket, iv.blocking)] += 1
    expected = one_by_one(acc, report)
    if not multi:  # one rank worked: every interval on it
        expected = Counter({(a, 0, *rest): n for (a, _r, *rest), n in expected.items()})
    assert got == expected
    keys = [(iv.lane, iv.start) for iv in timeline.intervals]
    assert keys == sorted(keys)
    steps = timeline.steps
    for i in range(len(steps)):
        lane = int(steps.lane[i])
        a, b = float(steps.start[i]), float(steps.end[i])
        pieces = [iv for iv in timeline.intervals if iv.lane == lane and iv.blocking]
        # (the flattened blocking pieces of one stream are disjoint: a sum of overlaps)
        if len({(iv.start, iv.end) for iv in pieces}) == len(pieces) and _disjoint(pieces):
            inside = sum(max(0.0, min(b, iv.end) - max(a, iv.start)) for iv in pieces)
            assert abs(float(steps.own[i]) - max(0.0, (b - a) - inside)) <= 1e-6 * (1 + b - a)


def _disjoint(pieces: list) -> bool:  # type: ignore[type-arg]
    ordered = sorted((iv.start, iv.end) for iv in pieces)
    return all(e <= s for (_, e), (s, _) in pairwise(ordered))
