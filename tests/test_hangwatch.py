"""``badput run --hang-timeout``: progress, not heartbeats, decides; the attempt is killed and
restarted, its ``attempt_end`` status ``hung``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from badput.analysis import analyze
from badput.engine import RankOptions
from badput.launcher._hangwatch import AUTO, HangWatch, parse_hang_timeout
from badput.launcher._run import Launcher
from badput.store import MemoryStore, WriterKey
from badput.testing import Timeline, events_to_store

T0 = 1_700_000_000.0

HANGING = textwrap.dedent(
    """
    import os, time
    import badput
    rec = badput.Recorder(rank=0, heartbeat_interval=0.2, flush_interval=0.05)
    for step in range(20):
        with rec.step(step):
            time.sleep(0.02)
        if step == 10 and os.environ["BADPUT_ATTEMPT"] == "0":
            time.sleep(3600)  # hung; the recorder's heartbeats go on
    rec.close()
    """
)


def test_parse_hang_timeout() -> None:
    assert parse_hang_timeout("auto") == AUTO
    assert parse_hang_timeout(" 90 ") == 90.0
    for bad in ("0", "-3", "inf", "nan", "soon"):
        with pytest.raises(ValueError):
            parse_hang_timeout(bad)


def _store_with_steps(n: int, step: float) -> MemoryStore:
    store = MemoryStore()
    tl = Timeline("j", start=T0, attempt=0)
    tl.emit("job_start")
    tl.steps(n, step)
    tl.emit("heartbeat", dt=500.0)  # heartbeats are not progress
    events_to_store(store, tl.events)
    return store


def test_fixed_and_automatic_timeouts() -> None:
    store = _store_with_steps(10, 2.0)  # heartbeats 500 s after the last step: alive
    last = T0 + 20.0
    fixed = HangWatch(store, "j", "0", 30.0, poll_seconds=0)
    assert fixed.check(now=last + 29.0) is None
    assert fixed.check(now=last + 31.0) == "no progress for 31.0s (hang timeout 30.0s)"
    auto = HangWatch(store, "j", "0", AUTO, stall_floor=5.0, poll_seconds=0)
    assert auto.limit(2.0) == 20.0  # 10 x the typical step time, above the floor
    assert auto.check(now=last + 19.0) is None
    assert auto.check(now=last + 21.0) is not None
    assert HangWatch(store, "j", "0", AUTO).limit(2.0) == RankOptions().stall_floor


def test_silent_processes_get_three_timeouts() -> None:
    """A finished job tearing down (recorders closed: no event at all) is not killed at
    once; a process silent for three timeouts is (it may hang holding the GIL)."""
    store = MemoryStore()
    tl = Timeline("j", start=T0, attempt=0)
    tl.emit("job_start")
    tl.steps(10, 2.0)
    events_to_store(store, tl.events)
    watch = HangWatch(store, "j", "0", 30.0, poll_seconds=0)
    last = T0 + 20.0
    assert watch.check(now=last + 31.0) is None
    assert watch.check(now=last + 89.0) is None
    assert watch.check(now=last + 91.0) == (
        "no progress for 91.0s (hang timeout 30.0s, and no event either)"
    )


def test_a_launchers_heartbeats_do_not_make_a_finished_trainer_alive() -> None:
    """``badput run``'s own recorder heartbeats into the attempt (no rank: rank 0's stream);
    only processes that made progress count as alive."""
    store = MemoryStore()
    trainer = Timeline("j", start=T0, attempt=0, pid=100)
    trainer.emit("job_start")
    trainer.steps(10, 2.0)
    launcher = Timeline("j", start=T0 + 20.0, attempt=0, rank=None, pid=7)
    for _ in range(10):
        launcher.emit("heartbeat", dt=10.0)
    events_to_store(store, trainer.events)
    events_to_store(store, launcher.events, key=WriterKey("0", "h", None, 7))
    watch = HangWatch(store, "j", "0", 30.0, poll_seconds=0)
    assert watch.check(now=T0 + 20.0 + 31.0) is None  # teardown: silent, not yet judged


def test_nothing_is_judged_before_the_first_progress_or_for_another_attempt() -> None:
    store = _store_with_steps(10, 2.0)
    assert HangWatch(store, "j", "1", 1.0, poll_seconds=0).check(now=T0 + 1e6) is None
    assert HangWatch(MemoryStore(), "j", "0", 1.0, poll_seconds=0).check(now=T0 + 1e6) is None


@pytest.mark.slow
def test_launcher_kills_a_hung_attempt_and_restarts_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(HANGING)
    messages: list[str] = []
    t0 = time.monotonic()
    result = Launcher(
        [sys.executable, str(script)],
        "hang",
        tmp_path / "runs",
        max_restarts=1,
        hang_timeout=1.5,
        on_event=messages.append,
    ).run()
    assert time.monotonic() - t0 < 60
    assert result.exit_code == 0 and result.status == "completed"
    assert any("attempt 0: no progress for" in m and "killing" in m for m in messages), messages
    report = analyze(tmp_path / "runs", "hang", rank_options=RankOptions(stall_floor=1.0))
    assert [a.status for a in report.attempts] == ["hung", "completed"]
    assert report.attempts[0].last_step == 10 and report.attempts[1].last_step == 19
    (stall,) = report.stalls
    assert stall.attempt == "0" and stall.last_step == 10
    assert 1.5 < stall.seconds < 15


def test_cli_rejects_a_bad_hang_timeout(tmp_path: Path) -> None:
    badput = Path(sys.executable).with_name("badput")
    out = subprocess.run(
        [str(badput), "run", "--store", str(tmp_path), "--hang-timeout", "soon", "--", "true"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "--hang-timeout: expected seconds or 'auto', got 'soon'" in out.stderr
