"""Rules of the views that hold for every job (hypothesis): the trace nests, step spans stay
in their lane and attempt, the goodput chart ends at the report's goodput."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.engine import Accountant
from badput.report._trace import write_trace
from badput.testing import Timeline
from test_exports import check_trace_rules

T0 = 1_732_000_000.0

segment = st.tuples(
    st.integers(min_value=0, max_value=12),  # steps
    st.floats(min_value=0.05, max_value=3.0),  # step time
    st.sampled_from(["none", "data_loading", "checkpoint_save", "custom"]),
    st.floats(min_value=0.0, max_value=2.0),  # interval length
)
attempt = st.tuples(st.lists(segment, min_size=1, max_size=4), st.booleans())  # crash after?


@st.composite
def jobs(draw: st.DrawFn) -> tuple[Accountant, int]:
    ranks = draw(st.integers(min_value=1, max_value=2))
    attempts = draw(st.lists(attempt, min_size=1, max_size=3))
    acc = Accountant("prop")
    for rank in range(ranks):
        tl = Timeline("prop", start=T0, attempt=0, rank=rank)
        step = 1
        for a, (segments, crash) in enumerate(attempts):
            tl.identity["attempt"] = a
            tl.emit("job_start", dt=5.0 if a else 0.0)
            if a:
                back = draw(st.integers(min_value=0, max_value=step - 1))
                step -= back
                tl.span("checkpoint_restore", 1.0, step=step - 1)
            for n, dt, kind, length in segments:
                if kind == "custom":
                    tl.span("custom", length, name="eval")
                elif kind != "none":
                    tl.span(kind, length, step=step)
                tl.steps(n, dt + 0.01 * rank, first=step)
                step += n
            if crash or a < len(attempts) - 1:
                tl.emit("attempt_end", dt=0.5, status="crashed", exit_code=1)
        tl.emit("job_end", status="completed")
        acc.ingest_events(tl.events)
    return acc, ranks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_views_rules_hold_for_every_job(job: tuple[Accountant, int]) -> None:
    acc, ranks = job
    report = acc.report()
    timeline = acc.timeline(report)
    steps = timeline.steps
    # lanes: one per attempt and rank with work, in attempt then rank order
    keys = [(ln.attempt_index, ln.rank or 0) for ln in timeline.lanes]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all((ln.rank is None) == (ranks == 1) for ln in timeline.lanes)
    # every step span lies in its attempt, and a lane's spans never overlap
    if len(steps):
        att = np.array([ln.attempt_index for ln in timeline.lanes])[steps.lane]
        starts = np.array([a.start for a in report.attempts])[att]
        ends = np.array([a.end for a in report.attempts])[att]
        assert (steps.start >= starts - 1e-9).all() and (steps.end <= ends + 1e-9).all()
        same = steps.lane[1:] == steps.lane[:-1]
        assert (steps.start[1:][same] >= steps.end[:-1][same] - 1e-9).all()
        assert (steps.own >= 0).all() and (steps.own <= steps.end - steps.start + 1e-9).all()
    # the trace follows the format's rules and holds every step once
    out = io.StringIO()
    write_trace(acc.snapshot(report=report, drawing=True), out)
    slices = check_trace_rules(json.loads(out.getvalue()))
    assert sum(e["name"].startswith("step ") for e in slices) == len(steps)
    # the cumulative goodput of the chart ends at the report's goodput
    series = acc.goodput_over_time(report, bins=16)
    if report.total_seconds > 0:
        assert series.cumulative[-1] == pytest.approx(report.goodput, abs=1e-4)
