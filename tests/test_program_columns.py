"""The step work a job records is kept in columns and read with numpy (a job that records
its tokens every step: 48 bytes a mark, and a report that does not loop over the marks in
Python). Checked against the rule written as a plain loop over the marks, on random logs
with several ranks, rewinds inside an attempt, restores across attempts and marks outside
every attempt."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine import Accountant, Report
from badput.engine._program import ProgramTracker, _attempt_work, _kept_upto, kept_marks
from badput.events import Event

JOB = "cols"


def reference(tracker: ProgramTracker, report: Report) -> tuple[list[Any], list[Any], list[Any]]:
    """Per attempt (tokens, samples) of every leading mark and of the kept ones, and the
    kept marks with tokens, as the rule says (the plain loop the columns replaced)."""
    attempts = report.attempts
    by_attempt: list[list[tuple[float, int, int, int, int]]] = [[] for _ in attempts]
    for k in range(len(tracker.ts)):
        ts = tracker.ts[k]
        i = max(sum(1 for a in attempts if a.start <= ts) - 1, 0)
        if ts <= attempts[i].end:
            m = (ts, tracker.rank[k], tracker.step[k], tracker.tokens[k], tracker.samples[k])
            by_attempt[i].append(m)
    upto = _kept_upto(report)
    every, kept, marks = [], [], []
    for i, found in enumerate(by_attempt):
        leader = min((m[1] for m in found), default=-1)
        lead = sorted(m for m in found if m[1] == leader)
        limit, previous, held = upto[i], None, []
        for m in reversed(lead):
            if previous is not None and m[2] > previous:
                limit = min(limit, previous - 1)
            previous = m[2]
            if m[2] <= limit:
                held.append(m)
        held.reverse()
        every.append((sum(m[3] for m in lead), sum(m[4] for m in lead)))
        kept.append((sum(m[3] for m in held), sum(m[4] for m in held)))
        marks += [(i, m[1], m[2], m[0], m[3]) for m in held if m[3]]
    return every, kept, marks


@st.composite
def logs(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = []
    t = 0.0
    step = 0
    for attempt in range(draw(st.integers(1, 4))):
        events.append(Event(ts=t, kind="job_start", job=JOB, attempt=attempt))
        if attempt and draw(st.booleans()):
            step = draw(st.integers(0, step))  # restored: later steps redone
            events.append(
                Event(ts=t, kind="checkpoint_restore_end", job=JOB, attempt=attempt, step=step)
            )
        ranks = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True))
        for _ in range(draw(st.integers(0, 15))):
            if draw(st.integers(0, 9)) == 0:
                step = max(0, step - draw(st.integers(1, 4)))  # a rewind in the attempt
            step += 1
            for rank in ranks:
                work = {"tokens": draw(st.integers(0, 2**40)), "samples": draw(st.integers(0, 9))}
                if draw(st.integers(0, 5)) == 0:
                    work = {"samples": 3}
                events.append(Event(ts=t, kind="step_start", job=JOB, attempt=attempt,
                                    rank=rank, step=step, **work))  # fmt: skip
                events.append(Event(ts=t + 1, kind="step_end", job=JOB, attempt=attempt,
                                    rank=rank, step=step))  # fmt: skip
            t += draw(st.sampled_from([0.0, 1.0, 1.5]))
        events.append(Event(ts=t, kind="attempt_end", job=JOB, attempt=attempt))
        t += draw(st.floats(0, 5))
    if draw(st.booleans()):  # a mark after the job's last event: no attempt accounts it
        events.append(Event(ts=t + 100, kind="step_end", job=JOB, attempt=9, step=1, tokens=5))
    return events


@settings(max_examples=300, deadline=None)
@given(logs())
def test_columns_count_the_work_as_the_rule_says(events: list[Event]) -> None:
    acc = Accountant(JOB)
    acc.ingest_events(events)
    report = acc.report()
    tracker = acc._program
    every, kept, marks = reference(tracker, report)
    assert _attempt_work(tracker, report) == (every, kept)
    got = kept_marks(tracker, report)
    assert list(zip(got.attempt.tolist(), got.rank.tolist(), got.step.tolist(),
                    got.ts.tolist(), got.tokens.tolist(), strict=True)) == marks  # fmt: skip


def test_a_mark_with_work_costs_a_few_columns() -> None:
    acc = Accountant(JOB)
    acc.ingest_events(
        [
            Event(ts=float(i), kind="step_start", job=JOB, attempt=0, step=i, tokens=4096)
            for i in range(10_000)
        ]
    )
    tracker = acc._program
    columns = (tracker.ts, tracker.attempt, tracker.rank, tracker.step, tracker.tokens,
               tracker.samples)  # fmt: skip
    assert all(len(c) == 10_000 and c.itemsize == 8 for c in columns)
    assert tracker.attempts == [0]


def test_sums_past_int64_stay_exact() -> None:
    big = 2**53
    acc = Accountant(JOB)
    acc.ingest_events(
        [Event(ts=0.0, kind="job_start", job=JOB, attempt=0)]
        + [
            Event(ts=1.0 + i, kind="step_start", job=JOB, attempt=0, step=i, tokens=big)
            for i in range(2000)
        ]
        + [Event(ts=3000.0, kind="job_end", job=JOB, attempt=0)]
    )
    p = acc.report().program
    assert p is not None
    assert p.tokens == 2000 * big  # past 2**63: summed as Python integers
    assert math.isfinite(float(np.float64(p.tokens)))
