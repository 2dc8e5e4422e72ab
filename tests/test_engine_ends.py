"""Where a job ends (ACCOUNTING.md §2, docs/accounting.md §8): issue 33, points 1 and 2.

- End events without an attempt id (a launcher that writes none) in a log whose other
  events carry ids end the attempt running at their time, in time order with its own: an
  id-less ``attempt_end`` then an id-less ``job_end`` ends the job at the ``job_end``.
- Every later ``job_end`` of an attempt moves its end: when each rank ends the job in
  turn, the job ends at the last ``job_end``, and the leader's work before it counts.

Minimal cases with their numbers, then properties over random logs: id-less end events
are accounted as the same events with the id of the attempt running at their time; the
job ends at its last ``job_end``; an earlier ``job_end`` from another rank changes
nothing; the buckets add up to the total; a live job fed in pieces equals the cold report.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.analysis import LiveJob, analyze
from badput.engine import Accountant, Report
from badput.events import Event
from badput.formats.codec import encode_lines
from badput.store import MemoryStore
from test_engine_properties import check_invariants, event_logs, same

END_KINDS = ("attempt_end", "job_end")


def E(ts: float, kind: str, **f: object) -> Event:  # noqa: N802 - short builder for tables
    f.setdefault("job", "j")
    return Event(ts=ts, kind=kind, **f)  # type: ignore[arg-type]


def steps(first: int, starts: list[float], **f: object) -> list[Event]:
    """Steps first, first+1, ... starting at ``starts``; each ends at the next start."""
    out = []
    for k, (a, b) in enumerate(itertools.pairwise(starts)):
        out += [E(a, "step_start", step=first + k, **f), E(b, "step_end", step=first + k, **f)]
    return out


def report(events: list[Event], ideal: float | None = 2.0, **kw: object) -> Report:
    acc = Accountant(events[0].job, ideal_step_time=ideal)
    acc.ingest_events(events)
    return acc.report(**kw)  # type: ignore[arg-type]


def whole_and_windowed(events: list[Event], ideal: float | None = 2.0) -> Report:
    """The report, checked equal to a window covering the whole job."""
    r = report(events, ideal)
    same(r, report(events, ideal, window=(r.start - 100.0, r.end + 100.0)))
    check_invariants(r)
    return r


def cold_and_live(events: list[Event], ideal: float | None = 2.0, seed: int = 0) -> Report:
    """The cold report of ``events`` written to a store, checked equal to a LiveJob fed
    the same lines in pieces (a writer may be mid-line)."""
    job = events[0].job
    cold_store = MemoryStore()
    cold_store.append(job, "a.jsonl", encode_lines(events))
    cold = analyze(cold_store, job, ideal_step_time=ideal)
    check_invariants(cold)
    rng = random.Random(seed)
    store = MemoryStore()
    live = LiveJob(store, job, ideal_step_time=ideal)
    i = 0
    while i < len(events):
        j = i + rng.randint(1, 12)
        data = encode_lines(events[i:j])
        cut = rng.randint(0, len(data))
        store.append(job, "a.jsonl", data[:cut])
        live.update()
        check_invariants(live.report())
        store.append(job, "a.jsonl", data[cut:])
        live.update()
        i = j
    same(cold, live.report())
    return cold


# ------------------------------------------------- point 1: a launcher's id-less end events


def _launcher_without_ids() -> list[Event]:
    """Attempt 0 steps for 10 s; a launcher that writes no attempt id records the
    attempt's end at 10 s and, with no restart left, the job's end at 11 s."""
    return [
        E(0, "job_start", attempt=0),
        *steps(1, [0, 2, 4, 6, 8, 10], attempt=0),
        E(10, "attempt_end", status="completed", exit_code=0),
        E(11, "job_end", status="completed"),
    ]


def test_idless_attempt_end_then_idless_job_end_ends_the_job_at_the_job_end() -> None:
    log = _launcher_without_ids()
    r = whole_and_windowed(log)
    # before issue 33: 10 s, end_reason last_event, at risk 10 s, no_job_end (job_end dropped)
    assert r.total_seconds == 11.0
    assert r.end_reason == "job_end"
    assert r.end == 11.0
    assert r.buckets == {"productive": 10.0, "untracked": 1.0}
    assert r.at_risk_seconds == 0.0  # the job is over: nothing left to lose
    assert [(a.end, a.end_reason, a.status) for a in r.attempts] == [(11.0, "job_end", "completed")]
    assert not [d for d in r.diagnostics if d.code == "no_job_end"]
    # exactly as the same events with the id
    with_id = [msgspec.structs.replace(e, attempt=0) for e in log]
    same(r, whole_and_windowed(with_id))
    # and live, fed in pieces
    same(r, cold_and_live(log))


def test_idless_job_end_after_an_attempt_end_with_id_ends_the_job() -> None:
    """The launcher's job_end without id after the attempt's own attempt_end (with id)."""
    log = _launcher_without_ids()
    log[-2] = msgspec.structs.replace(log[-2], attempt=0)
    r = whole_and_windowed(log)
    assert (r.total_seconds, r.end_reason, r.at_risk_seconds) == (11.0, "job_end", 0.0)


def test_an_idless_end_before_the_own_first_end_is_taken_first() -> None:
    """Id-less end events take their place in time among the attempt's own: an id-less
    attempt_end at 10 s ends the attempt before its own attempt_end at 12 s."""
    log = [
        E(0, "job_start", attempt=0),
        *steps(1, [0, 2, 4, 6, 8, 10], attempt=0),
        E(10, "attempt_end", status="failed"),
        E(12, "attempt_end", attempt=0, status="failed"),
        E(20, "job_start", attempt=1),
        *steps(1, [20, 22, 24], attempt=1),
        E(24, "job_end", attempt=1),
    ]
    r = whole_and_windowed(log)
    assert r.attempts[0].end == 10.0
    assert r.buckets == {"productive": 4.0, "wasted": 10.0, "recovery": 10.0}


def test_the_documented_example_of_a_launcher_without_ids(tmp_path: Path) -> None:
    """docs/accounting.md §8, "Where an attempt ends", example 1, read from its file."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "accounting.md").read_text()
    after = text[text.index("Example 1, a launcher that writes no id.") :]
    path = tmp_path / "j.jsonl"
    path.write_text(re.findall(r"```\n(.*?)```", after, flags=re.S)[0])
    r = analyze(path)
    assert (r.total_seconds, r.end_reason, r.at_risk_seconds) == (11.0, "job_end", 0.0)
    assert r.buckets == {"productive": 10.0, "untracked": 1.0}


# ----------------------------------------------- point 2: each rank ends the job in turn


def _each_rank_ends(*, rank1_ends: bool = True, ids: bool = True) -> list[Event]:
    """Two ranks step in lockstep for 50 s (25 steps of 2 s); rank 1 calls record_job_end()
    at 50.5 s while the leader (rank 0) saves the final checkpoint from 50 s to 110 s,
    then ends the job at 110 s."""
    f: dict[str, object] = {"attempt": 0} if ids else {}
    log = [E(0, "job_start", rank=r, **f) for r in (0, 1)]
    for r in (0, 1):
        log += steps(1, [2.0 * k for k in range(26)], rank=r, **f)
    log += [
        E(50, "checkpoint_save_start", step=25, rank=0, **f),
        E(110, "checkpoint_save_end", step=25, rank=0, **f),
        E(110, "checkpoint_committed", step=25, rank=0, **f),
        E(110, "job_end", rank=0, status="completed", **f),
    ]
    if rank1_ends:
        log.append(E(50.5, "job_end", rank=1, status="completed", **f))
    return sorted(log, key=lambda e: e.ts)


@pytest.mark.parametrize("ids", [True, False], ids=["attempt-ids", "no-ids"])
def test_a_later_job_end_from_another_rank_ends_the_job(ids: bool) -> None:
    r = whole_and_windowed(_each_rank_ends(ids=ids))
    # before issue 33: 50.5 s, the save 0.5 s (unpaired, cut at rank 1's job_end)
    assert r.total_seconds == 110.0
    assert r.end_reason == "job_end"
    assert r.buckets == {"checkpoint_save": 60.0, "productive": 50.0}
    assert r.at_risk_seconds == 0.0
    assert (r.steps.kept, r.steps.wasted) == (25, 0)
    assert not {"events_out_of_order", "unpaired_start"} & {d.code for d in r.diagnostics}
    # rank 1's earlier job_end changes nothing
    same(r, whole_and_windowed(_each_rank_ends(rank1_ends=False, ids=ids)))
    same(r, cold_and_live(_each_rank_ends(ids=ids)))


def test_an_attempt_end_after_the_job_end_does_not_move_it() -> None:
    """The first end event ends the attempt; only a later job_end moves the end."""
    log = [*_each_rank_ends(), E(120, "attempt_end", attempt=0, status="failed")]
    r = whole_and_windowed(log)
    assert (r.total_seconds, r.end_reason) == (110.0, "job_end")
    assert r.attempts[-1].status == "completed"


# ---------------------------------------------------------------------------- properties

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _with_running_ids(events: list[Event]) -> list[Event]:
    """``events`` with each id-less end event given the id of the attempt running at its
    time: the last one (by start, then id) started at or before it, the first one for
    earlier times. An attempt starts at its first job_start, or its first event."""
    first: dict[str, float] = {}
    started: dict[str, float] = {}
    for e in events:
        if e.attempt is None:
            continue
        key = str(e.attempt)
        first[key] = min(first.get(key, math.inf), e.ts)
        if e.kind == "job_start":
            started[key] = min(started.get(key, math.inf), e.ts)
    order = sorted(first, key=lambda k: (started.get(k, first[k]), k))
    ids = {str(e.attempt): e.attempt for e in events if e.attempt is not None}

    def running(ts: float) -> str:
        before = [k for k in order if started.get(k, first[k]) <= ts]
        return before[-1] if before else order[0]

    return [
        msgspec.structs.replace(e, attempt=ids[running(e.ts)])
        if e.attempt is None and e.kind in END_KINDS
        else e
        for e in events
    ]


@SETTINGS
@given(event_logs(), st.one_of(st.none(), st.floats(0.5, 20.0)), st.data())
def test_idless_end_events_count_as_the_running_attempts(
    events: list[Event], ideal: float | None, data: st.DataObject
) -> None:
    """In a log with ids, end events without one are accounted exactly as the same events
    with the id of the attempt running at their time: whole, windowed and live."""
    if all(e.attempt is None for e in events):
        return  # a log without ids: the derived attempts' rules (test_engine_settled.py)
    given_ids = _with_running_ids(events)
    plain, named = report(events, ideal), report(given_ids, ideal)
    check_invariants(plain)
    same(plain, named)
    assert [(a.id, a.start, a.end, a.end_reason) for a in plain.attempts] == [
        (a.id, a.start, a.end, a.end_reason) for a in named.attempts
    ]
    a = data.draw(st.floats(plain.start - 5, plain.end + 5), label="window start")
    b = data.draw(st.floats(a, plain.end + 5), label="window end")
    same(report(events, ideal, window=(a, b)), report(given_ids, ideal, window=(a, b)))
    now = data.draw(st.floats(events[0].ts, events[-1].ts + 20), label="now")
    same(report(events, ideal, now=now), report(given_ids, ideal, now=now))


@st.composite
def ranks_ending_in_turn(draw: st.DrawFn) -> tuple[list[Event], list[float]]:
    """A job of 1-3 attempts and 1-4 ranks stepping in lockstep, with or without attempt
    ids (an attempt but the last ends with the leader's attempt_end); in the last attempt
    each rank ends the job after its own last event, in any order, while the leader may
    still be saving a checkpoint. Returns the log and its job_end times."""
    ids = draw(st.booleans(), label="ids")
    n_ranks = draw(st.integers(1, 4), label="ranks")
    n_attempts = draw(st.integers(1, 3), label="attempts")
    dur = st.floats(0.1, 20.0)
    events: list[Event] = []
    ends: list[float] = []
    t, step = 1_700_000_000.0, 0
    for a in range(n_attempts):
        f: dict[str, object] = {"attempt": a} if ids else {}
        final = a == n_attempts - 1
        events += [E(t, "job_start", job="q", rank=r, **f) for r in range(n_ranks)]
        t += draw(dur)
        step = max(0, step - draw(st.integers(0, 3)))  # resumed from an older checkpoint
        for _ in range(draw(st.integers(0, 6))):
            step += 1
            d = draw(dur)
            for r in range(n_ranks):
                events.append(E(t, "step_start", job="q", step=step, rank=r, **f))
                events.append(E(t + d, "step_end", job="q", step=step, rank=r, **f))
            t += d
        last = {r: t for r in range(n_ranks)}
        if draw(st.booleans(), label="leader saves"):
            d = draw(dur)
            events.append(E(t, "checkpoint_save_start", job="q", step=step, rank=0, **f))
            events.append(E(t + d, "checkpoint_save_end", job="q", step=step, rank=0, **f))
            last[0] = t + d
        if not final:
            t = max(last.values()) + draw(dur)
            events.append(E(t, "attempt_end", job="q", rank=0, status="failed", **f))
            t += draw(dur)
            continue
        for r in range(n_ranks):
            if r and not draw(st.booleans(), label=f"rank {r} ends the job"):
                continue
            at = last[r] + draw(st.floats(0.0, 30.0))
            ends.append(at)
            events.append(E(at, "job_end", job="q", rank=r, status="completed", **f))
    return sorted(events, key=lambda e: e.ts), ends


@SETTINGS
@given(ranks_ending_in_turn(), st.one_of(st.none(), st.floats(0.5, 20.0)), st.integers(0, 99))
def test_the_job_ends_at_its_last_job_end(
    log: tuple[list[Event], list[float]], ideal: float | None, seed: int
) -> None:
    events, ends = log
    r = report(events, ideal)
    check_invariants(r)  # no bucket negative, the buckets add up to the total
    assert r.end_reason == "job_end"
    assert r.end == max(ends)
    assert r.total_seconds == max(ends) - events[0].ts
    assert r.at_risk_seconds == 0.0
    # the earlier job_ends of the other ranks change nothing: the leader's events and the
    # last job_end alone give the same report
    last = max(e.ts for e in events if e.kind == "job_end")
    alone = [
        e
        for e in events
        if (e.rank == 0 and e.kind != "job_end") or (e.kind == "job_end" and e.ts == last)
    ]
    same(r, report(alone, ideal))
    same(r, report(events, ideal, window=(r.start - 1.0, r.end + 1.0)))
    same(r, cold_and_live(events, ideal, seed))
