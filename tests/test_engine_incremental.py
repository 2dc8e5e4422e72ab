"""Incremental queries (sealed rows + tail) give exactly the cold answer."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _spy import spy
from badput.engine import Accountant, Report
from badput.events import Chunk, Event, EventError

JOB = "inc"


def realistic_log(steps: int = 6000, restarts: int = 2) -> list[Event]:
    """Steps with ends, per-step data loading, an eval every 100 steps, checkpoints every 500,
    crashes that lose work, a straggler phase in the last attempt."""
    out: list[Event] = []
    t = 1_000.0
    step = 0
    crash_at = [steps * (i + 1) // (restarts + 1) + 137 for i in range(restarts)]

    def e(kind: str, attempt: int, **f: object) -> None:
        out.append(Event(ts=t, kind=kind, job=JOB, attempt=attempt, rank=0, **f))  # type: ignore[arg-type]

    for attempt in range(restarts + 1):
        e("job_start", attempt)
        if attempt:
            restore = (step // 500) * 500
            e("checkpoint_restore_start", attempt, step=restore)
            t += 3.0
            e("checkpoint_restore_end", attempt, step=restore)
            step = restore + 1
        stop = crash_at[attempt] if attempt < restarts else steps
        while step <= stop:
            e("step_start", attempt, step=step)
            e("data_loading_start", attempt)
            t += 0.01
            e("data_loading_end", attempt)
            t += 0.1 if (attempt < restarts or step % 3) else 0.13
            e("step_end", attempt, step=step)
            if step % 100 == 0:
                e("custom_start", attempt, name="eval")
                t += 0.4
                e("custom_end", attempt, name="eval")
            if step % 500 == 0:
                e("checkpoint_save_start", attempt, step=step)
                t += 1.0
                e("checkpoint_save_end", attempt, step=step)
            step += 1
        t += 0.05
        if attempt < restarts:
            e("heartbeat", attempt)
            t += 20.0
    e("job_end", restarts)
    return out


def same(a: Report, b: Report) -> None:
    assert a.buckets.keys() == b.buckets.keys(), (a.buckets, b.buckets)
    for k in a.buckets:
        assert math.isclose(a.buckets[k], b.buckets[k], rel_tol=1e-9, abs_tol=1e-6), k
    assert math.isclose(a.at_risk_seconds, b.at_risk_seconds, abs_tol=1e-6)
    if b.ideal_step_time is None:
        assert a.ideal_step_time is None
    else:
        assert a.ideal_step_time == pytest.approx(b.ideal_step_time, rel=1e-12)
    assert a.steps == b.steps
    assert [x.restore_step for x in a.attempts] == [x.restore_step for x in b.attempts]


def test_incremental_queries_match_a_cold_report_and_do_seal() -> None:
    events = realistic_log()
    live = Accountant(JOB)
    for i in range(0, len(events), 997):
        live.ingest_events(events[i : i + 997], source="a.jsonl")
        now = events[min(i + 996, len(events) - 1)].ts
        cold = Accountant(JOB)
        cold.ingest_events(events[: i + 997], source="a.jsonl")
        same(live.report(now=now), cold.report(now=now))
    final = live.report()
    sealed = list(live._cache.attempts.values())
    assert sum(v.n for v in sealed) > 5000  # the rows really were sealed and reused
    # the numbers themselves: 6,000 kept steps, evals and checkpoints in their buckets
    assert final.steps.kept == 6001
    assert final.steps.wasted == 137 + 137  # steps 2001..2137 and 4001..4137 were redone
    # evals at multiples of 100: 0..2100 (22), 2100..4100 (21), 4100..6000 (20)
    assert final.bucket("custom:eval") == pytest.approx(0.4 * 63, rel=1e-9)
    assert final.ideal_step_time == pytest.approx(0.1, rel=1e-6)
    assert final.bucket("slowdown") > 0


def test_window_covering_everything_equals_no_window() -> None:
    acc = Accountant(JOB)
    acc.ingest_events(realistic_log(2000, 1))
    full = acc.report()
    windowed = acc.report(window=(full.start - 100, full.end + 100))
    same(full, windowed)
    assert windowed.total_seconds == full.total_seconds


def test_late_events_before_the_cut_invalidate_the_sealed_rows() -> None:
    events = realistic_log(4000, 0)
    evals = [i for i, ev in enumerate(events) if ev.kind == "custom_start"]
    late = events[evals[3] : evals[3] + 2]  # an eval around step 400, arriving last
    rest = events[: evals[3]] + events[evals[3] + 2 :]
    live = Accountant(JOB)
    live.ingest_events(rest, source="a.jsonl")
    live.report()
    live.ingest_events(late, source="b.jsonl")
    cold = Accountant(JOB)
    cold.ingest_events(events, source="a.jsonl")
    same(live.report(), cold.report())


def _unmatched_ends(report: Report) -> list[str]:
    return [d.message for d in report.diagnostics if d.code == "events_out_of_order"]


@pytest.mark.parametrize("closed", [False, True])
def test_a_step_end_matching_nothing_at_a_quiet_step_start_is_reported_once(
    monkeypatch: pytest.MonkeyPatch, closed: bool
) -> None:
    """A stray step_end at the very time a later step starts, which is where sealing would
    cut: sealing counts such ends by time, so the cut must not fall there, or the end is
    consumed by the seal without being counted (found while sealing closed attempts in
    blocks)."""
    from badput.engine import _sealing, _steps

    monkeypatch.setattr(_steps, "SEAL_MIN_TAIL", 2)
    monkeypatch.setattr(_sealing, "CLOSED_BLOCK", 4)
    events = [Event(ts=0.0, kind="job_start", job=JOB, attempt=0)]
    for s in range(1, 40):
        t = float(s)
        if s == 30:  # a step_end of no step, at the start of step 30
            events.append(Event(ts=t, kind="step_end", job=JOB, attempt=0, step=999))
        events.append(Event(ts=t, kind="step_start", job=JOB, attempt=0, step=s))
        events.append(Event(ts=t + 0.5, kind="step_end", job=JOB, attempt=0, step=s))
    if closed:
        events.append(Event(ts=40.0, kind="job_end", job=JOB, attempt=0))
    cold = Accountant(JOB)
    cold.ingest_events(events)
    expected = "attempt 0: 1 step_end events without a matching step_start before them; ignored"
    assert _unmatched_ends(cold.report(now=40.0)) == [expected]
    live = Accountant(JOB)
    for i in range(0, len(events), 7):  # queried as it arrives: sealed piece by piece
        live.ingest_events(events[i : i + 7])
        live.report(now=events[min(i + 6, len(events) - 1)].ts)
    assert _unmatched_ends(live.report(now=40.0)) == [expected]


@given(
    files=st.lists(
        st.lists(st.floats(-3.0, 5.0, allow_nan=False), min_size=1, max_size=12),
        min_size=2,
        max_size=6,
    ),
    again=st.lists(st.integers(0, 5), max_size=3),
)
@settings(max_examples=200, deadline=None)
def test_clock_steps_back_are_found_alike_in_one_batch_of_many_files_or_file_by_file(
    files: list[list[float]], again: list[int]
) -> None:
    """A read of many files makes one batch of them (checked as a whole first, then file by
    file when a time goes back); read one file at a time it is checked file by file. The same
    lines are flagged, and each file's newest time carries over to its next lines alike."""

    def chunks(offset: float, first_line: int, only: list[int] | None = None) -> list[Chunk]:
        out = []
        for k, deltas in enumerate(files):
            if only and k not in only:
                continue
            t = 1_000.0 + offset + k
            events: list[Event | EventError] = []
            for d in deltas:
                t += d
                events.append(Event(ts=t, kind="heartbeat", job="j", attempt=k))
            out.append(Chunk(f"f{k}.jsonl", first_line, events))
        return out

    together, alone = Accountant("j"), Accountant("j")
    together.ingest(chunks(0.0, 1))
    for chunk in chunks(0.0, 1):
        alone.ingest([chunk])
    later = chunks(-1.0, 100, again)  # read on: each file's next lines against its newest
    together.ingest(later)
    for chunk in later:
        alone.ingest([chunk])

    def flagged(acc: Accountant) -> list[tuple[str | None, int | None, str]]:
        return [
            (d.file, d.line, d.message)
            for d in acc.report().diagnostics
            if d.code == "clock_backwards"
        ]

    assert flagged(together) == flagged(alone)
    assert together._ing._source_last_ts == alone._ing._source_last_ts


def test_a_rank_whose_loader_is_read_late_is_sealed_before_the_loaders_newest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A running rank: the trainer's steps are read at once, the loads of a loader process
    of the rank (its own pid and file) a few looks later. Rows are sealed only up to the
    loader's newest event, so its late loads never unseal them (before, every look after
    the first seal found the sealed rows stale and computed the attempt whole); each
    report is the cold one. A loader silent for longer than ``WRITER_QUIET_AFTER`` no
    longer holds sealing back."""
    from badput.engine import _sealing, _steps, _stream

    monkeypatch.setattr(_steps, "SEAL_MIN_TAIL", 8)
    looks: list[list[Event]] = [[Event(ts=0.0, kind="job_start", job=JOB, attempt=0, pid=1)]]
    looks += [[] for _ in range(60)]
    for s in range(1, 200):
        t = float(s)
        look = s // 4
        looks[look].append(Event(ts=t, kind="step_start", job=JOB, attempt=0, step=s, pid=1))
        looks[look].append(Event(ts=t + 0.9, kind="step_end", job=JOB, attempt=0, step=s, pid=1))
        for kind, at in (("data_loading_start", t + 0.1), ("data_loading_end", t + 0.4)):
            # (its first loads read at once: a writer not seen yet cannot hold sealing back)
            looks[look + 3 if s > 3 else 0].append(
                Event(ts=at, kind=kind, job=JOB, attempt=0, pid=2)
            )
    live = Accountant(JOB)
    fed: list[Event] = []
    with spy(_sealing, "_stale") as stale:
        for look in looks:
            if not look:
                continue
            live.ingest_events(look, source="x.jsonl")
            fed += look
            got = live.report(now=fed[-1].ts + 1.0)
            cold = Accountant(JOB)
            cold.ingest_events(fed, source="x.jsonl")
            same(got, cold.report(now=fed[-1].ts + 1.0))
    assert stale and not any(stale)  # sealed, and never unsealed
    (stream,) = live._ing.streams.values()  # (the engine's own state)
    assert stream.settled_before() == stream.writers[2] < stream.writers[1]
    stream.saw(1, stream.writers[2] + _stream.WRITER_QUIET_AFTER + 1.0)
    assert stream.settled_before() == stream.writers[1]  # the loader stopped: not waited for


def _written(pid: int | None, times: list[float]) -> list[Event]:
    return [
        Event(ts=t, kind="step_start", job=JOB, attempt=0, rank=0, step=int(t), pid=pid)
        for t in times
    ]


@pytest.mark.parametrize("merged", [False, True])
def test_the_writers_of_a_stream_and_their_newest_events(merged: bool) -> None:
    """A stream written by one process keeps its writer only; by two, each one's newest
    event, whether both come in one batch (the first's earlier groups included), in later
    batches, or from a worker's read merged (``merged``)."""

    def fed(*runs: list[Event]) -> Accountant:
        acc = Accountant(JOB)
        for k, run in enumerate(runs):
            if merged and k:
                part = Accountant(JOB)
                part.ingest_events(run)
                acc.merge(part)
            else:
                acc.ingest_events(run)
        return acc

    def stream(acc: Accountant) -> Any:
        (s,) = acc._ing.streams.values()  # (the engine's own state)
        return s

    one = stream(fed(_written(7, [1.0, 2.0]), _written(7, [3.0])))
    assert (one.writer, one.writers, one.settled_before()) == (7, None, math.inf)
    both = stream(fed(_written(7, [1.0, 5.0]) + _written(None, [2.0, 3.0]) + _written(7, [6.0])))
    assert both.writers == {7: 6.0, None: 3.0}
    assert both.settled_before() == 3.0
    later = stream(fed(_written(7, [1.0, 5.0]), _written(8, [2.0, 4.0]), _written(8, [4.5])))
    assert later.writers == {7: 5.0, 8: 4.5}
    assert later.settled_before() == 4.5
