"""`badput watch`: the pure view (render_watch, status_line) and the live loop."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from badput.monitor import Monitor, Snapshot
from badput.report._watch import (
    is_stalled,
    render_watch,
    run_watch,
    stall_threshold,
    status_line,
    step_rate,
    window_label,
)
from badput.testing import MemoryStore, Timeline, events_to_jsonl, events_to_store

T0 = 1_700_000_000.0
JOB = "watched"


def job(slow_steps: int = 0, finished: bool = False, restart: bool = False) -> Timeline:
    """init 10 s, 20 steps of 1 s, a 2 s checkpoint, 10 more steps (+ options)."""
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start")
    tl.span("accelerator_init", 10.0)
    tl.steps(20, 1.0)
    tl.span("checkpoint_save", 2.0, step=19)
    tl.steps(10, 1.0)
    if slow_steps:
        tl.steps(slow_steps, 3.0)
    if restart:
        tl.emit("attempt_end", status="crashed", exit_code=1)
        tl.identity["attempt"] = 1
        tl.emit("job_start", dt=30.0)
        tl.span("checkpoint_restore", 4.0, step=19)
        tl.steps(5, 1.0, first=20)
    if finished:
        tl.emit("job_end", status="completed")
    return tl


def snapshots(tl: Timeline, times: list[float], **kwargs: object) -> list[Snapshot]:
    """Snapshots of the job as it grows: at each time, the events up to it."""
    store = MemoryStore()
    clock = [T0]
    mon = Monitor(JOB, store, rolling_windows=(600,), clock=lambda: clock[0], **kwargs)  # type: ignore[arg-type]
    out = []
    done = 0
    for t in times:
        new = [e for e in tl.events[done:] if e.ts <= t]
        if new:
            events_to_store(store, new, JOB)
            done += len(new)
        clock[0] = t
        out.append(mon.run_once())
    return out


def text_of(renderable: object, width: int = 140) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_render_watch_shows_the_figures() -> None:
    tl = job()
    prev, snap = snapshots(tl, [T0 + 30.0, T0 + 42.0], ideal_step_time=1.0)
    out = text_of(render_watch(snap, prev, now=T0 + 45.0))
    assert JOB in out
    assert "71.4%" in out  # goodput 30 / 42
    assert "observed 71.4%" in out
    assert "last 10m" in out
    for bucket in ("productive", "accelerator_init", "checkpoint_save"):
        assert bucket in out
    assert "23.8%" in out  # accelerator_init 10 / 42
    assert "█" in out  # bars
    assert "at risk" in out and "10.0s" in out
    assert "29" in out  # current step
    # steps 19 -> 29 between the snapshots (12 s apart)... rate over the last interval
    assert f"{(29 - prev.last_step) / 12.0:.2f} steps/s" in out  # type: ignore[operator]
    assert "p50 0s" in out and "p90 0s" in out
    assert "ok (threshold 1.2x)" in out
    assert "1 (0 restarts)" in out
    assert "last event" in out and "3.0s ago" in out
    assert "running" in out and "STALLED" not in out


def test_a_stalled_job_is_obvious() -> None:
    (snap,) = snapshots(job(), [T0 + 42.0])
    assert stall_threshold(snap) == 60.0  # 3 x 1 s steps is less than a minute
    assert not is_stalled(snap, now=T0 + 100.0)
    assert is_stalled(snap, now=T0 + 103.0)
    out = text_of(render_watch(snap, now=T0 + 200.0))
    assert "DOWN: no event for 2m 38s (> 1m 00s), not even a heartbeat" in out
    line = status_line(snap, now=T0 + 200.0)
    assert "DOWN: no event for 2m 38s" in line and "/s)" not in line  # no rate of a dead job


def test_slow_steps_raise_the_threshold_and_the_alarm() -> None:
    tl = job(slow_steps=200)
    (snap,) = snapshots(tl, [tl.now], ideal_step_time=1.0)
    assert snap.step_time is not None and snap.step_time.slowdown_alarm
    assert stall_threshold(snap) == pytest.approx(60.0)
    out = text_of(render_watch(snap))
    assert "ALARM: recent steps 3.00x the ideal (threshold 1.2x)" in out
    assert "p90 2.0s" in out
    assert "SLOWDOWN" in status_line(snap)
    long = job()
    long.steps(80, 40.0)  # 40 s steps: stalled only after 2 minutes
    (slow,) = snapshots(long, [long.now])
    assert stall_threshold(slow) == pytest.approx(120.0)


def test_finished_job_and_restarts() -> None:
    tl = job(finished=True, restart=True)
    (snap,) = snapshots(tl, [tl.now + 1000.0])
    out = text_of(render_watch(snap, now=tl.now + 1000.0))
    assert "finished (completed)" in out and "STALLED" not in out
    assert "2 (1 restart)" in out and "restored step 19" in out
    assert "recovery" in out  # the 30 s between the attempts
    assert "finished" in status_line(snap)


def test_step_rate_and_status_line() -> None:
    tl = job(restart=True)
    a, b, c = snapshots(tl, [T0 + 20.0, T0 + 30.0, tl.now])
    assert (a.last_step, b.last_step) == (10, 19)  # step 10 started at T0 + 20
    assert step_rate(b, a) == pytest.approx(0.9)
    assert step_rate(b, None) is None
    assert step_rate(c, b) is not None
    line = status_line(b, a)
    assert line.startswith("2023-11-14T22:13:50Z watched: goodput ")
    assert "last 10m" in line and "step 19 (0.90/s)" in line and "last event 0s ago" in line
    (empty,) = snapshots(Timeline(JOB), [T0])
    assert status_line(empty).endswith("watched: no events yet")
    assert "waiting for the first event" in text_of(render_watch(empty))
    assert window_label(600) == "10m" and window_label(3600) == "1h" and window_label(90) == "90s"


def test_step_rate_is_unknown_after_a_restore() -> None:
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start")
    tl.steps(50, 1.0)
    t_before = tl.now
    tl.emit("attempt_end", status="crashed")
    tl.identity["attempt"] = 1
    tl.emit("job_start", dt=5.0)
    tl.steps(3, 1.0, first=10)
    a, b = snapshots(tl, [t_before, tl.now])
    assert (a.last_step, b.last_step) == (49, 12)  # the new attempt went back
    assert step_rate(b, a) is None


def test_run_watch_on_a_terminal_and_piped(tmp_path: Path) -> None:
    tl = job(finished=True)
    root = tmp_path / "runs"
    events_to_jsonl(root / JOB / "0" / "h-0-1.jsonl", tl.events)
    term = Console(record=True, force_terminal=True, width=120, file=io.StringIO())
    run_watch(root, JOB, interval=0.01, console=term, max_cycles=2)
    out = term.export_text()
    assert "71.4%" in out and "finished (completed)" in out
    assert "the job has ended" in out and "ended: finished (completed), goodput" in out
    piped = Console(record=True, force_terminal=False, width=300, file=io.StringIO())
    state = run_watch(root / JOB, None, interval=0.01, console=piped, max_cycles=3)
    lines = piped.export_text().strip().splitlines()
    # the job has ended: one status line, the line saying so, and no more refreshes
    assert state is not None and state.state == "finished"
    assert len(lines) == 2 and "goodput 71.4%" in lines[0] and "finished (completed)" in lines[0]
    assert lines[1].startswith("badput watch: watched ended: finished (completed), goodput ")


def _sigint_as_at_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_badput_watch_follows_a_live_job_and_exits_0_on_ctrl_c(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    path = root / JOB / "0" / "h-0-1.jsonl"
    now = time.time()
    tl = Timeline(JOB, start=now - 30.0)
    tl.emit("job_start")
    tl.steps(10, 1.0)
    events_to_jsonl(path, tl.events)
    cmd = [str(Path(sys.executable).with_name("badput")), "watch", str(root / JOB)]
    proc = subprocess.Popen(
        [*cmd, "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C at a terminal: SIGINT at its default. A test run started in the background
        # by a shell without job control ignores SIGINT, and so would the watch it starts
        # (Python keeps an inherited SIG_IGN, as a background job should): it hung here.
        preexec_fn=_sigint_as_at_a_terminal,  # noqa: PLW1509 (no thread of ours forks here)
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "step 9" in first, first
        more = Timeline(JOB, start=tl.now)
        more.steps(5, 1.0, first=10)
        events_to_jsonl(path, more.events)  # the job goes on while it is watched
        for _ in range(50):
            line = proc.stdout.readline()
            if "step 14" in line:
                break
        else:
            raise AssertionError("the new steps were not picked up")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_badput_watch_on_a_missing_path_is_a_one_line_error(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from badput.cli import main

    result = CliRunner().invoke(main, ["watch", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert result.stderr.startswith("badput watch: error:")
