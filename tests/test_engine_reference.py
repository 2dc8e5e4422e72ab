"""The engine's columnar path against a slow, simple reference (tests/_reference.py).

Random logs with attempt ids (several attempts and ranks, any kind in any order, ties in
time; end events now and then without id, as a launcher writes them; each rank ending the
job in turn): every bucket, the total, at-risk, the ideal step time and the step counts agree,
for the whole job and for random windows, with the ideal step time configured or estimated.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from _reference import END_KINDS, RefReport, reference_report
from badput.engine import Accountant, Report, _inside, _sealing, _steps
from badput.engine._intervals import Marks, Spans
from badput.engine._rows import AttemptRows
from badput.engine._steps import Rows, TailIntervals
from badput.events import Event
from badput.report import to_json
from test_engine_properties import KINDS_WEIGHTED, same


@st.composite
def logs_with_ids(draw: st.DrawFn) -> list[Event]:
    n = draw(st.integers(min_value=1, max_value=120))
    gap = st.one_of(st.just(0.0), st.floats(0.001, 30.0), st.just(1.0))
    gaps = draw(st.lists(gap, min_size=n, max_size=n))
    ts = 1_700_000_000.0
    events = []
    attempt = 0
    step = 0
    for i in range(n):
        ts += gaps[i]
        kind = draw(st.sampled_from(KINDS_WEIGHTED)) if i else "job_start"
        fields: dict[str, object] = {}
        if kind == "job_start" and i and draw(st.booleans()):
            attempt += 1
        if kind.startswith(("step", "checkpoint")):
            step = max(0, step + draw(st.integers(-5, 4)))
            fields["step"] = step
        if kind.startswith(("custom", "elastic_wait")):
            fields["name"] = draw(st.sampled_from(["eval", "sdc"]))
        if kind.startswith("data_loading"):
            fields["blocking"] = draw(st.booleans())
        # now and then an event of an earlier attempt (a slow writer, an event after its end)
        late = attempt and draw(st.integers(0, 9)) == 0
        fields["attempt"] = attempt - 1 if late else attempt
        if kind in END_KINDS and draw(st.integers(0, 2)) == 0:
            del fields["attempt"]  # a launcher that writes no id: ends the attempt running
        fields["rank"] = draw(st.sampled_from([0, 0, 0, 1]))
        events.append(Event(ts=ts, kind=kind, job="r", **fields))  # type: ignore[arg-type]
    ending = draw(st.sampled_from(["as drawn", "each rank", "launcher"]), label="ending")
    if ending == "each rank":  # each rank ends the job in turn, the leader last
        # (none when the event that opened the attempt was drawn late, of the one before)
        mine = [k for k, e in enumerate(events) if e.attempt == attempt] or [len(events) - 1]
        k = draw(st.sampled_from(mine), label="rank 1 ends after")
        events.insert(
            k + 1, Event(ts=events[k].ts, kind="job_end", job="r", attempt=attempt, rank=1)
        )
        ts += draw(gap)
        events.append(Event(ts=ts, kind="job_end", job="r", attempt=attempt, rank=0))
    elif ending == "launcher":  # a launcher without id: the attempt failed, no restart left
        ts += draw(gap)
        events.append(Event(ts=ts, kind="attempt_end", job="r", status="failed"))
        ts += draw(gap)
        events.append(Event(ts=ts, kind="job_end", job="r", status="failed"))
    return events


def agree(r: Report, ref: RefReport) -> None:
    assert math.isclose(r.total_seconds, ref.total, abs_tol=1e-6)
    for name in set(r.buckets) | set(ref.buckets):
        assert math.isclose(r.bucket(name), ref.buckets.get(name, 0.0), abs_tol=1e-6), (
            name,
            dict(r.buckets),
            ref.buckets,
        )
    assert math.isclose(r.at_risk_seconds, ref.at_risk, abs_tol=1e-6), (r.at_risk_seconds, ref)
    if ref.ideal is None:
        assert r.ideal_step_time is None
    else:
        assert r.ideal_step_time is not None
        assert math.isclose(r.ideal_step_time, ref.ideal, rel_tol=1e-9)
    assert (r.steps.kept, r.steps.wasted) == (ref.kept, ref.wasted)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs_with_ids(), st.one_of(st.none(), st.floats(0.5, 20.0)), st.data())
def test_engine_agrees_with_the_reference(
    events: list[Event], ideal: float | None, data: st.DataObject
) -> None:
    saved = _steps.SEAL_MIN_TAIL, _sealing.CLOSED_BLOCK
    _steps.SEAL_MIN_TAIL = data.draw(st.sampled_from([2, 10_000]), label="seal threshold")
    _sealing.CLOSED_BLOCK = data.draw(st.sampled_from([2, 5, 10**9]), label="closed block")
    try:
        acc = Accountant("r", ideal_step_time=ideal)
        acc.ingest_events(events)
        whole = acc.report()
        agree(whole, reference_report(events, ideal_step_time=ideal))
        a = data.draw(st.floats(whole.start - 5, whole.end + 5), label="window start")
        b = data.draw(st.floats(a, whole.end + 5), label="window end")
        agree(
            acc.report(window=(a, b)),
            reference_report(events, ideal_step_time=ideal, window=(a, b)),
        )
    finally:
        _steps.SEAL_MIN_TAIL, _sealing.CLOSED_BLOCK = saved


def _reported(events: list[Event], **constants: int) -> tuple[Accountant, Report]:
    """An accountant fed ``events`` and its first report, made with ``_sealing``'s
    constants set to ``constants`` (which fast path it takes), restored afterwards."""
    saved = {name: getattr(_sealing, name) for name in constants}
    try:
        for name, value in constants.items():
            setattr(_sealing, name, value)
        acc = Accountant("r")
        acc.ingest_events(events)
        return acc, acc.report()
    finally:
        for name, value in saved.items():
            setattr(_sealing, name, value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs_with_ids(), st.data())
def test_closed_attempts_sealed_together_and_remembered_report_the_same(
    events: list[Event], data: st.DataObject
) -> None:
    """The fast paths for many attempts change no number: closed attempts sealed in one
    vectorised pass (always, here) against one by one (never), a second query served from
    what the first remembered, and a window of a state already reported on (which looks
    only at the attempts it meets) against the same window asked first."""
    together, first = _reported(events, BULK_MIN_ATTEMPTS=1)
    alone, expected = _reported(events, BULK_MIN_ATTEMPTS=10**9)
    again = together.report()
    for r in (first, again):
        same(r, expected)
        assert r.attempts == expected.attempts
        assert r.diagnostics == expected.diagnostics
    a = data.draw(st.floats(expected.start - 5, expected.end + 5), label="window start")
    b = data.draw(st.floats(a, expected.end + 5), label="window end")
    cold = Accountant("r")  # a window asked first: built in full, not from a whole report
    cold.ingest_events(events)
    windowed = cold.report(window=(a, b))
    for r in (together.report(window=(a, b)), alone.report(window=(a, b))):
        same(r, windowed)
        assert r.attempts == windowed.attempts
        assert r.diagnostics == windowed.diagnostics


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs_with_ids(), st.sampled_from([2, 3, 5]), st.data())
def test_a_closed_attempt_sealed_in_blocks_reports_as_sealed_whole(
    events: list[Event], block: int, data: st.DataObject
) -> None:
    """A large closed attempt is sealed block by block, each up to a quiet cut, to bound
    the memory of one pass; every number, attempt and diagnostic is that of one pass."""
    one_by_one = 10**9  # every closed attempt through its own rows
    blocks, got = _reported(events, BULK_MIN_ATTEMPTS=one_by_one, CLOSED_BLOCK=block)
    whole, expected = _reported(events, BULK_MIN_ATTEMPTS=one_by_one, CLOSED_BLOCK=10**9)
    same(got, expected)
    assert got.attempts == expected.attempts
    assert got.diagnostics == expected.diagnostics
    a = data.draw(st.floats(expected.start - 5, expected.end + 5), label="window start")
    b = data.draw(st.floats(a, expected.end + 5), label="window end")
    same(blocks.report(window=(a, b)), whole.report(window=(a, b)))


def _report_json(events: list[Event], min_segments: int, window: bool) -> tuple[str, str]:
    """The whole report and a window of it, as JSON, with segments of attempts inside the
    window summed together from ``min_segments`` of them on (10**9: never)."""
    saved = _inside.MIN_SEGMENTS
    _inside.MIN_SEGMENTS = min_segments
    try:
        acc = Accountant("r")
        acc.ingest_events(events)
        whole = acc.report()
        if not window:
            return to_json(whole), ""
        mid = (whole.start + whole.end) / 2
        return to_json(whole), to_json(acc.report(window=(mid, whole.end + 1)))
    finally:
        _inside.MIN_SEGMENTS = saved


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs_with_ids(), st.booleans())
def test_segments_summed_together_give_exactly_the_sums_one_by_one(
    events: list[Event], window: bool
) -> None:
    """Every float of the report is the one the segment-by-segment code makes (the same
    operations in the same order), and so is a window asked after it (the memos reused)."""
    assert _report_json(events, 0, window) == _report_json(events, 10**9, window)


def test_segments_of_closed_attempts_are_summed_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job of many short closed attempts: no segment is left to the scalar code, and
    every number is the scalar code's."""
    events: list[Event] = []
    ts = 1_700_000_000.0
    for attempt in range(40):
        fields = {"job": "r", "attempt": attempt, "rank": 0}
        events.append(Event(ts=ts, kind="job_start", **fields))  # type: ignore[arg-type]
        first = attempt * 3
        for step in range(first, first + 5):
            events.append(Event(ts=ts + 0.5, kind="step_start", step=step, **fields))  # type: ignore[arg-type]
            took = 1.0 + 0.001 * step + (3.7 if step == first else 0.0)  # a slow first step
            events.append(Event(ts=ts + 0.5 + took, kind="step_end", step=step, **fields))  # type: ignore[arg-type]
            if step % 4 == 0:
                events.append(Event(ts=ts + 1.6, kind="checkpoint_committed", step=step, **fields))  # type: ignore[arg-type]
            ts += took + 1.0
        events.append(Event(ts=ts, kind="attempt_end", status="failed", **fields))  # type: ignore[arg-type]
        ts += 3.0
    scalar_calls = 0
    original = AttemptRows.segment_sums

    def counted(self: AttemptRows, *args: Any, **kwargs: Any) -> float:
        nonlocal scalar_calls
        scalar_calls += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(AttemptRows, "segment_sums", counted)
    together = _report_json(events, _inside.MIN_SEGMENTS, window=False)
    assert scalar_calls == 0
    alone = _report_json(events, 10**9, window=False)
    assert scalar_calls == 40
    assert together == alone
    assert '"wasted"' in together[0]  # steps redone after each restart: thresholds at work
    assert '"startup"' in together[0]  # the slow first steps


def _plain_quiet_cut(
    starts: list[float],
    spans: list[tuple[float, float]],
    unpaired: list[float],
    exact: list[float],
    min_keep: int,
    *,
    before: float = math.inf,
) -> int:
    """quiet_cut's rule, row by row: the last row r in [min_keep, n - 2] whose start no
    interval is open across (more started before it than ended at or before it), before
    every unpaired start, with no mark or unmatched end at that very time, later than
    the row before it, and at or before ``before``."""
    best = 0
    for r in range(min_keep, len(starts) - 1):
        t = starts[r]
        if t > before:
            continue
        if sum(a < t for a, _ in spans) - sum(b <= t for _, b in spans) > 0:
            continue
        if unpaired and t >= min(unpaired):
            continue
        if t in exact or r == 0 or not t > starts[r - 1]:
            continue
        best = r
    return best


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=0, max_size=40),
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6)), max_size=8),
    st.lists(st.integers(0, 30), max_size=2),
    st.lists(st.integers(0, 30), max_size=4),
    st.lists(st.integers(0, 30), max_size=3),
    st.integers(0, 3),
    st.sampled_from([1, 2, 3, 256]),
    st.one_of(st.just(math.inf), st.integers(0, 40).map(lambda x: x / 4)),
)
@example([1, 1, 1, 1], [], [], [], [], 0, 256, 1.5)  # a row starting at `before` is a cut
def test_the_quiet_cut_is_the_last_quiet_row(  # noqa: PLR0917 (one strategy per input)
    gaps: list[int],
    intervals: list[tuple[int, int]],
    unpaired: list[int],
    marks: list[int],
    unmatched: list[int],
    min_keep: int,
    window: int,
    before: float,
) -> None:
    """Looked for from the last row a window at a time (of any size), the cut is the last
    row the rule allows, as looking at every row in turn finds it (``before``: no later
    than a time, when a writer of the stream may still add events before it)."""
    starts = np.cumsum(np.array(gaps, np.float64) / 2)  # in time order, ties included
    n = len(starts)
    no = np.zeros(n, bool)
    rows = Rows(starts, starts, starts, np.ones(n), np.arange(n), np.ones(n), no, no)
    spans = [(a / 2, (a + d) / 2) for a, d in intervals]
    ivs = TailIntervals.empty()
    m = len(spans)
    ivs.intervals = Spans(
        np.array([a for a, _ in spans]),
        np.array([b for _, b in spans]),
        np.zeros(m, np.int32),
        np.ones(m, bool),
        np.zeros(m, np.int64),
    )
    ivs.unpaired_starts = Marks.empty()
    if unpaired:
        ts = np.array(unpaired, np.float64) / 2
        k = len(ts)
        ones, ints = np.ones(k, bool), np.zeros(k, np.int64)
        ivs.unpaired_starts = Marks(ts, ints, ints.astype(np.int32), ones, ones, ints, ints)
    mark_ts = np.sort(np.array(marks, np.float64) / 2)
    unmatched_ts = np.array(unmatched, np.float64) / 2
    saved = _steps._QUIET_WINDOW
    _steps._QUIET_WINDOW = window
    try:
        got = _steps.quiet_cut(rows, ivs, mark_ts, min_keep, unmatched_ts, before=before)
    finally:
        _steps._QUIET_WINDOW = saved
    exact = [*mark_ts.tolist(), *unmatched_ts.tolist()]
    expected = _plain_quiet_cut(
        starts.tolist(), spans, (np.array(unpaired) / 2).tolist(), exact, min_keep, before=before
    )
    assert got == expected


@pytest.mark.parametrize(("end", "buckets"), [(61.0, {"hung": 61.0}), (59.0, {"untracked": 59.0})])
def test_an_attempt_silent_past_its_stall_threshold_ends_hung_in_both(
    end: float, buckets: dict[str, float]
) -> None:
    """Attempt 0 opens a step and says nothing more until its attempt_end, while a late
    attempt 1 writes steps meanwhile (its span starts at 0's end: attempts do not overlap).
    Silent 61 s, over the 60 s threshold without an ideal step time: 0 ended hung, and its
    silence is ``hung`` (accounting.md §3), in the engine and in the reference; 59 s is not.
    (The reference once had no hung time: hypothesis found this log.)"""
    t = 1_700_000_000.0
    events = [
        Event(ts=t, kind="job_start", job="r", attempt=0, rank=0),
        Event(ts=t, kind="step_start", job="r", attempt=0, rank=0, step=0),
        Event(ts=t + 1.5, kind="step_start", job="r", attempt=1, rank=0, step=0),
        Event(ts=t + 30, kind="step_start", job="r", attempt=1, rank=0, step=0),
        Event(ts=t + end, kind="attempt_end", job="r", attempt=0, rank=0),
        Event(ts=t + end + 1, kind="step_start", job="r", attempt=0, rank=0, step=0),
    ]
    acc = Accountant("r")
    acc.ingest_events(events)
    assert dict(acc.report().buckets) == buckets
    assert reference_report(events).buckets == buckets
