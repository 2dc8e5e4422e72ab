"""The timeline's recorded intervals, built as columns (a job with a data load a step has
millions): for any log, the intervals an interval-at-a-time reading gives, each cut at its
attempt's end, in lane then start order, and every step's own time less the blocking
intervals of its lane."""

from __future__ import annotations

import pickle
from bisect import bisect_right
from collections import Counter
from itertools import pairwise
from unittest.mock import patch

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from badput.engine import Accountant, _timeline
from badput.engine._intervals import flatten_spans, pair_columns
from badput.engine._stream import Stream
from badput.events import Event
from test_engine_properties import event_logs

Key = tuple[int, int, float, float, str, bool]


def recorded(stream: Stream, close_at: float) -> list[tuple[float, float, int, bool]]:
    """One stream's recorded intervals read alone: its marks paired, its blocking ones
    flattened (innermost wins); (start, end, bucket code, blocking)."""
    paired = pair_columns(stream.marks.columns(), close_at=close_at).intervals
    flat = flatten_spans(paired.take(paired.blocking))
    other = paired.take(~paired.blocking)
    return [
        (a, b, code, blocking)
        for spans, blocking in ((flat, True), (other, False))
        for a, b, code in zip(
            spans.start.tolist(), spans.end.tolist(), spans.bucket.tolist(), strict=True
        )
    ]


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
        for a_lo, a_hi, c, b in recorded(stream, report.end):  # type: ignore[attr-defined]
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
    acc = Accountant(events[0].job if events else "p")
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


@st.composite
def streams_logs(draw: st.DrawFn) -> list[Event]:
    """Attempts one after the other, each of a few ranks writing at once (their streams
    overlap in time): steps that end, steps left open (an even or odd number of ended ones
    beside them), a rank of step ends only, loads blocking or not, saves around loads."""
    events: list[Event] = []
    ts = 1_000.0
    for attempt in range(draw(st.integers(1, 3))):
        top = ts
        for rank in range(draw(st.integers(1, 3))):
            t = ts
            ends_only = draw(st.integers(0, 5)) == 0
            for step in range(draw(st.integers(0, 5))):
                kinds = ["step_end"] if ends_only else ["step_start"]
                if draw(st.booleans()):
                    load = draw(st.sampled_from([None, False]))
                    inner = ["data_loading_start", "data_loading_end"]
                    if draw(st.booleans()):  # a save around the load
                        inner = ["checkpoint_save_start", *inner, "checkpoint_save_end"]
                    kinds += inner
                if not ends_only and draw(st.integers(0, 3)):  # else left open
                    kinds.append("step_end")
                for kind in kinds:
                    t += draw(st.sampled_from([0.0, 0.5, 1.0, 2.5]))
                    kw: dict[str, object] = {}
                    if kind.startswith(("step", "checkpoint")):
                        kw["step"] = step
                    if kind.startswith("data_loading") and load is False:
                        kw["blocking"] = False
                    events.append(
                        Event(ts=t, kind=kind, job="p", attempt=attempt, rank=rank, **kw)  # type: ignore[arg-type]
                    )
            top = max(top, t)
        ts = top + 10.0
    events.sort(key=lambda e: e.ts)
    return events


#: Two ranks' blocking intervals overlapping in time (neither may cut the other's).
OVERLAPPING = [
    Event(ts=t, kind=k, job="p", attempt=0, rank=r, **kw)  # type: ignore[arg-type]
    for t, k, r, kw in [
        (1.0, "step_start", 0, {"step": 1}),
        (1.0, "step_start", 1, {"step": 1}),
        (2.0, "checkpoint_save_start", 0, {"step": 1}),
        (2.5, "data_loading_start", 1, {}),
        (3.0, "data_loading_start", 0, {}),
        (3.5, "data_loading_end", 1, {}),
        (4.0, "data_loading_end", 0, {}),
        (5.0, "checkpoint_save_end", 0, {"step": 1}),
        (6.0, "step_end", 0, {"step": 1}),
        (6.0, "step_end", 1, {"step": 1}),
        (7.0, "step_start", 0, {"step": 2}),
    ]
]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(events=st.one_of(event_logs(), streams_logs()), late=st.booleans())
@example(events=EDGES, late=False)
@example(events=OVERLAPPING, late=False)
def test_streams_taken_together_give_what_each_gives_alone(events: list[Event], late: bool) -> None:
    """The timeline takes a run of streams in one pass (a job of 10,000 attempts is 10,000
    streams): what it gives is what a run of one stream each gives, streams out of time
    order (``late``: the log's second half ingested first), open steps' medians and the
    steps' own times of many lanes taken in one pass included."""
    acc = Accountant(events[0].job if events else "p")
    if late and len(events) > 2:
        half = len(events) // 2
        acc.ingest_events(events[half:])
        acc.ingest_events(events[:half])
    else:
        acc.ingest_events(events)
    report = acc.report()
    # each stream a run of its own, each lane's own time a pass of its own
    with patch.object(_timeline, "_RUN", 1), patch.object(_timeline, "_SMALL_PIECES", 0):
        alone = acc.timeline(report)
    with patch.object(_timeline, "_MEDIANS_APART", 0):  # every stream's median in one pass
        together = acc.timeline(report)
    # runs of a few events, and of a few steps' rows; the marks' codes int64
    with patch.object(_timeline, "_RUN", 3), patch.object(_timeline, "_INT32_CODES", 0):
        in_short_runs = acc.timeline(report)
    for taken in (together, in_short_runs):
        assert taken.lanes == alone.lanes
        for name in ("lane", "start", "end", "step", "bucket", "closed", "own"):
            a, b = getattr(alone.steps, name), getattr(taken.steps, name)
            assert a.shape == b.shape and np.array_equal(a, b), name
        for name in ("lane", "start", "end", "code", "blocking"):
            a, b = getattr(alone.intervals, name), getattr(taken.intervals, name)
            assert a.shape == b.shape and np.array_equal(a, b), name


def test_a_lane_is_on_the_first_host_its_lifecycle_events_name() -> None:
    events = [
        Event(ts=t, kind=k, job="p", attempt=a, rank=r, host=h, **kw)  # type: ignore[arg-type]
        for t, k, a, r, h, kw in [
            (0.0, "job_start", 0, 0, "alpha", {}),
            (0.5, "job_start", 0, 1, None, {}),
            (1.0, "step_start", 0, 0, None, {"step": 1}),
            (1.0, "step_start", 0, 1, None, {"step": 1}),
            (2.0, "step_end", 0, 0, None, {"step": 1}),
            (2.0, "step_end", 0, 1, None, {"step": 1}),
            (3.0, "attempt_end", 0, 0, "beta", {"status": "failed"}),
            (4.0, "job_start", 1, 0, "gamma", {}),
            (5.0, "step_start", 1, 0, None, {"step": 2}),
        ]
    ]
    acc = Accountant("p")
    acc.ingest_events(events)
    lanes = acc.timeline(acc.report()).lanes
    assert [(ln.attempt_index, ln.rank, ln.host) for ln in lanes] == [
        (0, 0, "alpha"),
        (0, 1, None),
        (1, 0, "gamma"),
    ]


def test_a_timeline_pickles_with_its_colours() -> None:
    """A step span's colour and own time are worked out when first read: a pickle (a
    snapshot sent to another process) carries them, not the function."""
    acc = Accountant("prop")
    acc.ingest_events(EDGES)
    timeline = acc.timeline(acc.report())
    back = pickle.loads(pickle.dumps(timeline))
    for name in ("lane", "start", "end", "step", "closed", "bucket", "own"):
        assert np.array_equal(getattr(back.steps, name), getattr(timeline.steps, name)), name
    assert back.steps.own.sum() > 0  # (EDGES: steps of their own time)
