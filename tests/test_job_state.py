"""One job state (issue 39): ``badput.engine.job_state`` of the report, shown alike by
``badput watch``, ``badput jobs`` and the exporters; a job of several ranks has ended
only once each rank ended it; ``badput report --fail-under``; goodput colours."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from badput.cli import main
from badput.cli._jobs import jobs
from badput.engine import Accountant, job_state
from badput.events import Event
from badput.monitor import Monitor, Snapshot
from badput.monitor.prometheus import PrometheusExporter
from badput.report._jobs import SORT_KEYS, job_status
from badput.report._watch import render_watch, status_line
from badput.testing import MemoryStore, Timeline, events_to_jsonl, events_to_store

T0 = 1_700_000_000.0
JOB = "states"


def two_ranks(ended: tuple[int, ...] = (0, 1), launcher_end: bool = False) -> list[Event]:
    """Two ranks of one attempt, 10 steps of 1 s each; rank 1 runs 5 s behind rank 0;
    the ranks in ``ended`` write their own ``job_end``; ``launcher_end``: a rank-less
    ``job_end`` after both."""
    events: list[Event] = []
    for rank, lag in ((0, 0.0), (1, 5.0)):
        tl = Timeline(JOB, start=T0 + lag, rank=rank, host=f"h{rank}")
        tl.emit("job_start")
        tl.steps(10, 1.0)
        if rank in ended:
            tl.emit("job_end", status="completed")
        events += tl.events
    if launcher_end:
        events.append(Event(ts=T0 + 20.0, kind="job_end", job=JOB, attempt=0, status="completed"))
    return sorted(events, key=lambda e: e.ts)


def snapshot_of(events: list[Event], now: float) -> Snapshot:
    acc = Accountant(JOB)
    acc.ingest_events([e for e in events if e.ts <= now], source="log")
    report = acc.report(now=now)
    return Snapshot(job=JOB, time=now, report=report, last_event_time=acc.last_event_ts)


def text_of(renderable: object, width: int = 140) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_the_job_ends_at_the_last_ranks_job_end_not_the_first() -> None:
    events = two_ranks()
    first_end = next(e.ts for e in events if e.kind == "job_end")
    # Between rank 0's job_end (T0 + 10) and rank 1's (T0 + 15): the job goes on.
    mid = snapshot_of(events, first_end + 2.0)
    assert mid.report.end_reason == "job_end"  # the engine's partition ends at rank 0's...
    assert mid.report.attempts[-1].open_ranks == (1,)  # ... and says who has not ended
    state = mid.state()
    assert (state.state, state.open_ranks, state.ended) == ("running", (1,), False)
    assert "ending (waiting for the job_end of rank 1)" in status_line(mid)
    assert job_status(mid.report, mid.last_event_time, mid.time) == "running"
    # Once rank 1 wrote its end too: finished, by every view alike.
    done = snapshot_of(events, T0 + 30.0)
    assert done.report.attempts[-1].open_ranks == ()
    assert done.report.end == pytest.approx(T0 + 15.0)  # the last job_end
    assert done.state().state == "finished" and done.state().status == "completed"
    assert job_status(done.report, done.last_event_time, done.time) == "completed"
    # A rank that never ends, silent past the threshold: down, naming it.
    stuck = snapshot_of(two_ranks(ended=(0,)), T0 + 200.0)
    state = stuck.state()
    assert (state.state, state.open_ranks) == ("down", (1,))
    assert "no job_end from rank 1" in status_line(stuck)
    # A launcher's rank-less job_end speaks for every rank.
    led = snapshot_of(two_ranks(ended=(), launcher_end=True), T0 + 30.0)
    assert led.state().state == "finished"
    assert led.report.to_dict()["attempts"][0]["open_ranks"] == ()


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 4),
    ended=st.sets(st.integers(0, 3)),
    launcher=st.booleans(),
    with_ids=st.booleans(),
)
def test_finished_exactly_when_every_rank_or_the_launcher_ended_it(
    n: int, ended: set[int], launcher: bool, with_ids: bool
) -> None:
    """For any number of ranks and any of them ending: finished iff each rank wrote its
    end or a rank-less job_end came; the state is the same with or without attempt ids."""
    ended = {r for r in ended if r < n}
    events: list[Event] = []
    for rank in range(n):
        tl = Timeline(JOB, start=T0 + rank, rank=rank, attempt=0 if with_ids else None)
        tl.emit("job_start")
        tl.steps(5, 1.0)
        if rank in ended:
            tl.emit("job_end", status="completed")
        events += tl.events
    if launcher:
        last = max(e.ts for e in events) + 1.0
        events.append(Event(ts=last, kind="job_end", job=JOB, status="completed"))
    events.sort(key=lambda e: e.ts)
    now = max(e.ts for e in events) + 1.0
    snap = snapshot_of(events, now)
    want_finished = launcher or ended == set(range(n))
    state = snap.state()
    assert state.ended == want_finished, (state, ended, launcher)
    if not want_finished and ended:
        assert state.open_ranks == tuple(sorted(set(range(n)) - ended))
    # and the state is one function: the exporter's stall and the jobs status agree
    assert job_status(snap.report, snap.last_event_time, now) == (
        "completed" if want_finished else "running"
    )


def between_attempts() -> Timeline:
    """A crash after 40 slow steps (3 s against an ideal of 1 s), then nothing yet."""
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start")
    tl.steps(20, 1.0)
    tl.steps(40, 3.0)
    tl.emit("attempt_end", status="failed", exit_code=1)
    return tl


def monitor_snapshots(tl: Timeline, times: list[float], **kwargs: object) -> list[Snapshot]:
    store = MemoryStore()
    clock = [T0]
    mon = Monitor(JOB, store, clock=lambda: clock[0], **kwargs)  # type: ignore[arg-type]
    events_to_store(store, tl.events, JOB)
    out = []
    for t in times:
        clock[0] = t
        out.append(mon.run_once())
    return out


def test_restarting_shows_no_slowdown_alarm_and_no_rate() -> None:
    tl = between_attempts()
    before, after = monitor_snapshots(tl, [tl.now - 50.0, tl.now + 30.0], ideal_step_time=1.0)
    assert after.step_time is not None and after.step_time.slowdown_alarm  # the steps were slow
    state = after.state()
    assert state.state == "restarting" and state.status == "failed"
    line = status_line(after, before)
    assert "restarting (attempt ended 30.0s ago: failed; waiting for the next start)" in line
    assert "SLOWDOWN" not in line and "/s)" not in line
    view = text_of(render_watch(after, before))
    assert "ALARM" not in view and "steps/s" not in view and "restarting" in view
    # Long after, no new attempt: still what the log says (a restart is due), not "running".
    (late,) = monitor_snapshots(tl, [tl.now + 3600.0])
    assert late.state().state == "restarting"


def test_a_finished_job_has_no_rate_and_the_exporters_agree() -> None:
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start")
    tl.steps(30, 1.0)
    tl.emit("job_end", status="completed")
    a, b = monitor_snapshots(tl, [tl.now + 5.0, tl.now + 10.0])
    view = text_of(render_watch(b, a))
    assert "0.00 steps/s" not in view and "finished (completed)" in view
    assert "the job has ended" in view
    assert "/s)" not in status_line(b, a)
    registry = CollectorRegistry()
    exp = PrometheusExporter(port=None, registry=registry)
    exp.export(b)
    text = generate_latest(registry).decode()
    exp.close()
    assert f'badput_job_state{{job="{JOB}",state="finished"}} 1.0' in text
    assert f'badput_job_state{{job="{JOB}",state="running"}} 0.0' in text
    assert f'badput_stalled{{job="{JOB}"}} 0.0' in text


def test_goodput_colours_follow_the_goodput() -> None:
    """0.5 % goodput is red, never the healthy green (watch and the HTML card)."""
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start")
    tl.span("training_prep", 2000.0)  # nearly all of the job
    tl.steps(10, 1.0)
    tl.emit("job_end", status="completed")
    (snap,) = monitor_snapshots(tl, [tl.now])
    assert snap.report.goodput == pytest.approx(10.0 / 2010.0)  # 0.5 %
    console = Console(record=True, width=140, file=io.StringIO(), force_terminal=True)
    console.print(render_watch(snap))
    html = console.export_html(inline_styles=True)
    assert "0.5%" in html
    cell = html[html.index("0.5%") - 120 : html.index("0.5%")]
    assert "#800000" in cell or "red" in cell, cell  # rich's red
    from badput.report import html_report

    acc = Accountant(JOB)
    acc.ingest_events(tl.events, source="log")
    page = html_report(acc.snapshot(drawing=True))
    assert '<div class="card bad"><div class="k">goodput</div>' in page


def test_badput_watch_exits_0_on_a_finished_job(tmp_path: Path) -> None:
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start")
    tl.steps(10, 1.0)
    tl.emit("job_end", status="completed")
    events_to_jsonl(tmp_path / JOB / "0" / "h-0-1.jsonl", tl.events)
    cmd = [str(Path(sys.executable).with_name("badput")), "watch", str(tmp_path / JOB)]
    done = subprocess.run(
        [*cmd, "--interval", "0.2"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert "finished (completed)" in lines[0]
    assert lines[-1].startswith(f"badput watch: {JOB} ended: finished (completed), goodput ")


def write_job(root: Path, prep: float) -> Path:
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start")
    tl.span("training_prep", prep)
    tl.steps(10, 1.0)
    tl.emit("job_end", status="completed")
    path = root / JOB / "0" / "h-0-1.jsonl"
    events_to_jsonl(path, tl.events)
    return root / JOB


@pytest.mark.parametrize("form", ["--json", "--html", None])
def test_fail_under_gates_ci(tmp_path: Path, form: str | None) -> None:
    job = write_job(tmp_path, prep=10.0)  # goodput 10 / 20 = 50 %
    extra = (
        [] if form is None else [form] + ([str(tmp_path / "r.html")] if form == "--html" else [])
    )
    runner = CliRunner()
    under = runner.invoke(main, ["report", str(job), *extra, "--fail-under", "0.6"])
    assert under.exit_code == 3, under.output
    assert under.stderr.strip().splitlines()[-1] == (
        f"badput report: goodput 50.00% of {JOB} is under --fail-under 60.00%"
    )
    if form == "--json":
        assert '"goodput": 0.5' in under.stdout  # the report is printed first
    over = runner.invoke(main, ["report", str(job), *extra, "--fail-under", "50%"])
    assert over.exit_code == 0, over.output
    assert runner.invoke(main, ["report", str(job), *extra, "--fail-under", "49"]).exit_code == 0


@pytest.mark.parametrize("bad", ["abc", "nan", "inf", "-0.1", "101%", "150"])
def test_fail_under_is_validated_at_parse_time(tmp_path: Path, bad: str) -> None:
    result = CliRunner().invoke(main, ["report", str(tmp_path / "nowhere"), "--fail-under", bad])
    assert result.exit_code == 2
    assert "--fail-under" in result.stderr and "Traceback" not in result.output


def test_job_state_of_an_empty_report() -> None:
    acc = Accountant(JOB)
    assert job_state(acc.report(), None, T0, 60.0).state == "empty"


# ------------------------------------------------------- the recorded hang timeout


def silent_job(timeout: float | None, heartbeats: bool = False) -> Timeline:
    """20 steps of 1 s under a launcher that recorded ``timeout``, then no progress (and
    a heartbeat every 2 s when ``heartbeats``)."""
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start", **({"hang_timeout": timeout} if timeout else {}))
    tl.steps(20, 1.0)
    if heartbeats:
        for _ in range(10):
            tl.emit("heartbeat", dt=2.0)
    return tl


def test_watch_says_down_after_the_recorded_hang_timeout_not_a_fixed_minute() -> None:
    tl = silent_job(10.0)
    (snap,) = monitor_snapshots(tl, [tl.now + 15.0], ideal_step_time=1.0)
    assert snap.hang_timeout == 10.0 and snap.silence_threshold == 10.0
    state = snap.state()
    assert state.state == "down" and state.why == "no event for 15s (> 10s), not even a heartbeat"
    assert "DOWN: no event for 15.0s (> 10.0s), not even a heartbeat" in status_line(snap)
    # the exporters publish the same state
    registry = CollectorRegistry()
    exp = PrometheusExporter(port=None, registry=registry)
    exp.export(snap)
    text = generate_latest(registry).decode()
    exp.close()
    assert f'badput_job_state{{job="{JOB}",state="down"}} 1.0' in text
    # 9 s of silence: not yet; without a recorded timeout: a minute, as before
    (early,) = monitor_snapshots(tl, [tl.now + 9.0], ideal_step_time=1.0)
    assert early.state().state == "running"
    plain = silent_job(None)
    (snap,) = monitor_snapshots(plain, [plain.now + 15.0], ideal_step_time=1.0)
    assert snap.silence_threshold == 60.0 and snap.state().state == "running"


def test_heartbeats_without_progress_past_the_hang_timeout_are_hung() -> None:
    tl = silent_job(10.0, heartbeats=True)  # the last step ended at T0 + 20; beats to 40
    (snap,) = monitor_snapshots(tl, [tl.now + 1.0], ideal_step_time=1.0)
    state = snap.state()
    assert state.state == "hung" and state.since == T0 + 20.0
    assert state.why == "no progress for 21s (> 10s)"
    assert "STALLED" in status_line(snap)


def test_a_job_killed_for_a_hang_is_hung_until_its_next_attempt() -> None:
    tl = silent_job(10.0, heartbeats=True)
    tl.emit("attempt_end", dt=1.0, rank=None, status="hung", exit_code=1)
    (snap,) = monitor_snapshots(tl, [tl.now + 3.0], ideal_step_time=1.0)
    state = snap.state()
    assert (state.state, state.status, state.restart_due) == ("hung", "hung", True)
    assert state.why == "attempt 0 killed for a hang, all ranks stopped together; a restart is due"
    line = status_line(snap)
    assert "hung (attempt 0 killed for a hang" in line and "attempt ended 3.0s ago)" in line
    assert "/s)" not in line  # no step rate between attempts
    # its next attempt starts: running again
    tl.emit("job_start", dt=5.0, attempt=1, hang_timeout=10.0)
    tl.identity["attempt"] = 1
    tl.steps(2, 1.0)
    (again,) = monitor_snapshots(tl, [tl.now + 1.0], ideal_step_time=1.0)
    assert again.state().state == "running"


def live_job(root: Path, name: str, now: float, tail: str) -> None:
    """A job under ``badput run --hang-timeout 5``: 20 steps of 1 s ending 30 s before
    ``now``, then ``tail``: ``beats`` (a heartbeat every 2 s to 1 s ago: hung), ``killed``
    (the launcher's ``attempt_end`` ``hung`` 3 s ago), ``silent`` (nothing: down),
    ``stepping`` (steps to now: running), ``done`` (its ``job_end``)."""
    tl = Timeline(name, start=now - 50.0)
    tl.emit("job_start", rank=None, hang_timeout=5.0)
    tl.steps(20, 1.0)
    if tail in ("beats", "killed"):
        while tl.now < now - 3.0:
            tl.emit("heartbeat", dt=2.0)
    if tail == "killed":
        tl.emit("attempt_end", rank=None, status="hung", exit_code=1)
    if tail == "stepping":
        tl.steps(29, 1.0)
    if tail == "done":
        tl.emit("job_end", rank=None, status="completed")
    events_to_jsonl(root / name / "0" / "h-0-1.jsonl", [e for e in tl.events if e.ts < now])


def test_badput_jobs_shows_hung_and_down_as_watch_does(tmp_path: Path) -> None:
    now = time.time()
    for name, tail in (
        ("a-hung", "beats"),
        ("b-killed", "killed"),
        ("c-silent", "silent"),
        ("d-running", "stepping"),
        ("e-done", "done"),
    ):
        live_job(tmp_path, name, now, tail)
    runner = CliRunner()
    listed = runner.invoke(main, ["jobs", str(tmp_path), "--json", "--sort", "job"])
    assert listed.exit_code == 0, listed.output
    statuses = {row["job"]: row["status"] for row in json.loads(listed.stdout)}
    assert statuses == {
        "a-hung": "hung",  # heartbeats, no progress for 30 s > 5 s
        "b-killed": "hung",  # killed for a hang by the launcher; a restart is due
        "c-silent": "down",  # silent 30 s > the 5 s hang timeout (not 10 minutes)
        "d-running": "running",
        "e-done": "completed",
    }
    table = runner.invoke(main, ["jobs", str(tmp_path), "--sort", "job"])
    assert table.exit_code == 0, table.output
    cells = [line.split() for line in table.stdout.splitlines()]
    assert {c[0]: c[1] for c in cells if c and c[0] in statuses} == statuses


@settings(max_examples=40, deadline=None)
@given(
    timeout=st.one_of(st.none(), st.floats(0.5, 600.0)),
    silence=st.floats(0.0, 1200.0),
)
def test_down_exactly_past_the_recorded_hang_timeout(timeout: float | None, silence: float) -> None:
    """For any recorded timeout and any silence after the last event: down iff the silence
    exceeds the timeout (without one: max(60 s, 3 x the step)); the snapshot the accountant
    takes and the jobs status say the same."""
    tl = silent_job(timeout)
    acc = Accountant(JOB)
    acc.ingest_events(tl.events, source="log")
    now = tl.now + silence
    snap = acc.snapshot(now=now)
    limit = 60.0 if timeout is None else timeout
    assert snap.silence_threshold == limit
    down = snap.state().state == "down"
    assert down == (now - tl.now > limit)  # (the silence as the clock's floats have it)
    status = job_status(snap.report, snap.last_event_time, now, snap.silence_threshold)
    assert (status == "down") == down


def test_badput_jobs_offers_every_sort_key_the_report_sorts_by() -> None:
    """The command lists its --sort choices itself (importing the report's module for them
    would cost `badput --help` a quarter of a second): they must be the report's keys."""
    option = next(p for p in jobs.params if p.name == "sort_key")
    assert tuple(option.type.choices) == SORT_KEYS  # type: ignore[attr-defined]
