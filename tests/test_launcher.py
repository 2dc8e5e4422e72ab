"""``badput run``'s engine: real subprocesses, events read back from the JsonlStore."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from badput.events import Event
from badput.launcher._run import Launcher, default_job_name, run_job
from badput.store import JsonlStore

JOB = "launched"
LIFECYCLE = ("job_start", "attempt_end", "job_end")


def events(root: Path, job: str = JOB) -> list[Event]:
    result = JsonlStore(root).read(job)
    out = [item for chunk in result.chunks for item in chunk.items if isinstance(item, Event)]
    assert len(out) == result.n_items, "every line must decode"
    return sorted(out, key=lambda e: e.ts)


def lifecycle(root: Path, job: str = JOB) -> list[tuple[str, str, str | None, int | None]]:
    """(kind, attempt, status, exit_code) of the launcher's lifecycle events, in time order."""
    return [
        (e.kind, str(e.attempt), e.status, e.exit_code)
        for e in events(root, job)
        if e.kind in LIFECYCLE
    ]


def py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_success_records_start_and_end_and_passes_the_environment(tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    code = f"""
        import json, os
        keys = ("BADPUT_JOB", "BADPUT_STORE", "BADPUT_ATTEMPT")
        json.dump({{k: os.environ.get(k) for k in keys}}, open({str(out)!r}, "w"))
    """
    store = tmp_path / "runs"
    rc = run_job(py(code), JOB, store, max_restarts=2)
    assert rc == 0
    assert json.loads(out.read_text()) == {
        "BADPUT_JOB": JOB,
        "BADPUT_STORE": str(store),
        "BADPUT_ATTEMPT": "0",
    }
    assert lifecycle(store) == [
        ("job_start", "0", None, None),
        ("job_end", "0", "completed", None),
    ]
    evs = events(store)
    assert {e.pid for e in evs} == {os.getpid()}
    assert all(e.attempt == 0 for e in evs)  # an integer, as the command's recorder writes it


def test_failure_then_success_restarts_once(tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    code = f"""
        import os, sys
        if not os.path.exists({str(marker)!r}):
            open({str(marker)!r}, "w").close()
            sys.exit(1)
    """
    store = tmp_path / "runs"
    messages: list[str] = []
    rc = run_job(py(code), JOB, store, max_restarts=2, restart_delay=0.3, on_event=messages.append)
    assert rc == 0
    assert lifecycle(store) == [
        ("job_start", "0", None, None),
        ("attempt_end", "0", "failed", 1),
        ("job_start", "1", None, None),
        ("job_end", "1", "completed", None),
    ]
    evs = [e for e in events(store) if e.kind in LIFECYCLE]
    assert evs[2].ts - evs[1].ts >= 0.3  # the restart delay lies between the attempts
    assert any("restarting in 0.3s" in m for m in messages)

    from badput.analysis import analyze

    report = analyze(store, JOB)
    assert [str(a.id) for a in report.attempts] == ["0", "1"]
    assert report.attempts[0].exit_code == 1
    assert report.end_reason == "job_end"
    assert report.bucket("recovery") >= 0.3


def test_always_failing_command_stops_after_max_restarts(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    rc = run_job(py("import sys; sys.exit(3)"), JOB, store, max_restarts=2)
    assert rc == 3
    assert lifecycle(store) == [
        ("job_start", "0", None, None),
        ("attempt_end", "0", "failed", 3),
        ("job_start", "1", None, None),
        ("attempt_end", "1", "failed", 3),
        ("job_start", "2", None, None),
        ("attempt_end", "2", "failed", 3),
        ("job_end", "2", "failed", None),
    ]


def test_no_restarts_by_default(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    result = Launcher(py("import sys; sys.exit(5)"), JOB, store).run()
    assert (result.exit_code, result.status, result.attempts) == (5, "failed", [5])
    assert [k for k, *_ in lifecycle(store)] == ["job_start", "attempt_end", "job_end"]


def test_first_attempt_numbers_a_relaunch(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    assert run_job(py("pass"), JOB, store, first_attempt=3) == 0
    assert [a for _, a, *_ in lifecycle(store)] == ["3", "3"]


def test_a_second_run_of_the_same_job_continues_the_attempt_numbers(tmp_path: Path) -> None:
    """Two `badput run`s of one job never share attempt "0": their events would merge."""
    import badput

    store = tmp_path / "runs"
    assert run_job(py("import sys; sys.exit(1)"), JOB, store, max_restarts=1) == 1
    assert run_job(py("pass"), JOB, store) == 0
    assert [a for _, a, *_ in lifecycle(store)] == ["0", "0", "1", "1", "1", "2", "2"]
    report = badput.analyze(store, JOB)
    assert [a.id for a in report.attempts] == [0, 1, 2]
    # the first run ended for good (job_end failed): a job name reused is worth a word
    assert "reused_job_name" in [d.code for d in report.diagnostics]


def test_missing_command_is_not_restarted(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    messages: list[str] = []
    rc = run_job(
        [str(tmp_path / "no-such-program")], JOB, store, max_restarts=3, on_event=messages.append
    )
    assert rc == 127
    assert lifecycle(store) == [
        ("job_start", "0", None, None),
        ("attempt_end", "0", "failed", 127),
        ("job_end", "0", "failed", None),
    ]
    assert any("cannot start" in m for m in messages)


def test_killed_child_gives_a_shell_style_exit_status(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    rc = run_job(py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"), JOB, store)
    assert rc == 128 + signal.SIGKILL
    assert ("attempt_end", "0", "failed", 137) in lifecycle(store)


def test_argument_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no command"):
        run_job([], JOB, tmp_path)
    with pytest.raises(ValueError, match="max_restarts"):
        run_job(["true"], JOB, tmp_path, max_restarts=-1)
    with pytest.raises(ValueError, match="restart_delay"):
        run_job(["true"], JOB, tmp_path, restart_delay=-1.0)
    for name in ("restart_delay", "kill_timeout", "backoff", "backoff_max"):
        for bad in (math.inf, math.nan, -0.5):
            with pytest.raises(ValueError, match=rf"^{name} must be a finite number"):
                run_job(["true"], JOB, tmp_path, **{name: bad})
    for hang in (math.inf, math.nan, 0.0, -1.0, "soon"):
        with pytest.raises(ValueError, match=r"^hang_timeout: "):
            run_job(["true"], JOB, tmp_path, hang_timeout=hang)
    assert not tmp_path.joinpath(JOB).exists()  # nothing was started, nothing recorded


def test_job_and_store_default_to_the_environment(tmp_path: Path) -> None:
    env = {"BADPUT_JOB": "from-env", "BADPUT_STORE": str(tmp_path / "s"), "PATH": ""}
    launcher = Launcher(["x"], env=env)
    assert launcher.job == "from-env"
    assert launcher.store_uri == str(tmp_path / "s")
    bare = Launcher(["python3", "-m", "pkg.train"], env={})
    assert bare.job.startswith("train-")
    assert bare.store_uri == os.path.abspath("badput-runs")


def test_default_job_name() -> None:
    assert default_job_name(["/usr/bin/python3", "train.py", "--lr", "1"]).startswith("train-")
    assert default_job_name(["python", "-m", "a.b.run"]).startswith("run-")
    assert default_job_name(["./my job.sh"]).startswith("my_job.sh-")


# -- signals: the launcher runs in its own process, the test signals it -------------


def launch(
    tmp_path: Path, child: str, *, max_restarts: int = 2, delay: float = 0.0, kill: float = 30.0
) -> subprocess.Popen[bytes]:
    """Start ``run_job`` in a subprocess running ``child`` (Python code)."""
    command = py(child)
    code = (
        "import sys; from badput.launcher._run import run_job; "
        f"sys.exit(run_job({command!r}, {JOB!r}, {str(tmp_path / 'runs')!r}, "
        f"max_restarts={max_restarts}, restart_delay={delay}, kill_timeout={kill}))"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def wait_for(path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} did not appear")


def sleeper(marker: Path, *, ignore_term: bool = False) -> str:
    """A child that writes its pid to ``marker``, then sleeps (SIGINT/SIGTERM: default action)."""
    term = "signal.SIG_IGN" if ignore_term else "signal.SIG_DFL"
    return f"""
        import os, signal, time
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, {term})
        with open({str(marker)!r} + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace({str(marker)!r} + ".tmp", {str(marker)!r})
        time.sleep(60)
    """


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGTERM, "preempted"), (signal.SIGINT, "cancelled")]
)
def test_signal_is_forwarded_and_ends_the_job(
    tmp_path: Path, signum: signal.Signals, status: str
) -> None:
    marker = tmp_path / "child.pid"
    proc = launch(tmp_path, sleeper(marker))
    try:
        child = int(wait_for(marker))
        os.kill(proc.pid, signum)
        rc = proc.wait(timeout=30)
    finally:
        proc.kill()
    assert rc == 128 + signum  # the child's exit status: killed by the forwarded signal
    assert_gone(child)
    assert lifecycle(tmp_path / "runs") == [
        ("job_start", "0", None, None),
        ("job_end", "0", status, None),
    ]  # and no restart, although two were allowed


def test_child_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    proc = launch(tmp_path, sleeper(marker, ignore_term=True), kill=0.5)
    try:
        child = int(wait_for(marker))
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=30)
    finally:
        proc.kill()
    assert rc == 128 + signal.SIGKILL
    assert_gone(child)
    assert lifecycle(tmp_path / "runs")[-1] == ("job_end", "0", "preempted", None)


def test_signal_during_the_restart_delay_ends_the_job(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    child = f"""
        import os, sys
        open({str(marker)!r}, "w").write(str(os.getpid()))
        sys.exit(1)
    """
    proc = launch(tmp_path, child, delay=60.0)
    try:
        wait_for(marker)
        # wait until the launcher has recorded the failure and sleeps before the restart
        deadline = time.monotonic() + 30
        while ("attempt_end", "0", "failed", 1) not in lifecycle(tmp_path / "runs"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=30)
    finally:
        proc.kill()
    assert rc == 128 + signal.SIGTERM
    assert lifecycle(tmp_path / "runs") == [
        ("job_start", "0", None, None),
        ("attempt_end", "0", "failed", 1),
        ("job_end", "0", "preempted", None),
    ]


def test_relative_store_is_made_absolute_for_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = "import os; open('store.txt', 'w').write(os.environ['BADPUT_STORE'])"
    assert run_job(py(code), JOB, "runs", cwd=elsewhere) == 0
    assert (elsewhere / "store.txt").read_text() == str(tmp_path / "runs")
    assert lifecycle(tmp_path / "runs")[-1] == ("job_end", "0", "completed", None)


# -- faults of the real `badput run` (issue 32) ------------------------------------

BADPUT = Path(sys.executable).with_name("badput")


def badput_run(tmp_path: Path, *args: str, stderr: int | None = None) -> subprocess.Popen[bytes]:
    """A real ``badput run`` of job JOB into ``tmp_path / "runs"``; ``args``: options, then
    ``--`` and the command."""
    cmd = [str(BADPUT), "run", "--job", JOB, "--store", str(tmp_path / "runs"), *args]
    return subprocess.Popen(cmd, stderr=stderr)


#: A command that saves a checkpoint in ``finally`` when SIGTERM ends it: 50 chunks of
#: 1,000 bytes, 20 ms apart (about 1 s), then renamed into place. Every SIGTERM it gets
#: is counted (a second one, as the first did, raises SystemExit and cuts the save short).
_CHECKPOINT_ON_SIGTERM = """
    import os, signal, sys, time
    terms = 0
    def on_term(signum, frame):
        global terms
        terms += 1
        with open({count!r}, "w") as f:
            f.write(str(terms))
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    try:
        open({ready!r}, "w").write(str(os.getpid()))
        while True:
            time.sleep(0.01)
    finally:
        with open({ckpt!r} + ".tmp", "wb") as f:
            for _ in range(50):
                f.write(b"w" * 1000)
                f.flush()
                time.sleep(0.02)
        os.replace({ckpt!r} + ".tmp", {ckpt!r})
"""


def test_one_sigterm_reaches_the_command_once_and_its_checkpoint_is_whole(
    tmp_path: Path,
) -> None:
    ready, count, ckpt = tmp_path / "ready", tmp_path / "terms", tmp_path / "ckpt"
    child = _CHECKPOINT_ON_SIGTERM.format(ready=str(ready), count=str(count), ckpt=str(ckpt))
    proc = badput_run(tmp_path, "--max-restarts", "2", "--", *py(child))
    try:
        wait_for(ready)
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
    part = ckpt.with_name("ckpt.tmp")
    saved = ckpt.stat().st_size if ckpt.exists() else 0
    cut = part.stat().st_size if part.exists() else 0  # a save cut short stays here
    # Before the fix: (0, 1000 or 2000, "2"): the wait loop's first poll sent a second SIGTERM.
    assert (saved, cut, count.read_text()) == (50_000, 0, "1")
    assert rc == 128 + signal.SIGTERM
    assert lifecycle(tmp_path / "runs") == [
        ("job_start", "0", None, None),
        ("job_end", "0", "preempted", None),
    ]


def failing_twice(counter: Path) -> str:
    """A command that fails on its first two runs and succeeds on the third (``counter``:
    how many times it ran)."""
    return f"""
        import os, sys
        runs = int(open({str(counter)!r}).read()) + 1 if os.path.exists({str(counter)!r}) else 1
        open({str(counter)!r}, "w").write(str(runs))
        sys.exit(1 if runs <= 2 else 0)
    """


@pytest.mark.parametrize("lines_read", [0, 1])
def test_a_closed_stderr_drops_the_status_lines_and_the_job_goes_on(
    tmp_path: Path, lines_read: int
) -> None:
    """`badput run ... 2>&1 | head -n N` once head has exited (or a `tee` that died):
    every later status line meets EPIPE."""
    counter = tmp_path / "runs-of-the-command"
    read_end, write_end = os.pipe()
    reader = os.fdopen(read_end, "rb")
    if not lines_read:
        reader.close()  # gone before the first status line
    try:
        args = ("--max-restarts", "3", "--backoff", "0", "--", *py(failing_twice(counter)))
        proc = badput_run(tmp_path, *args, stderr=write_end)
    finally:
        os.close(write_end)
    try:
        for _ in range(lines_read):
            assert reader.readline().startswith(b"badput run: ")
        reader.close()  # head -n lines_read exits
        rc = proc.wait(timeout=60)
    finally:
        reader.close()
        proc.kill()
    # Before the fix: (1, no counter file): the launcher died at its first status line,
    # before it started the command, and recorded no job_end.
    assert (rc, counter.read_text() if counter.exists() else None) == (0, "3")
    assert lifecycle(tmp_path / "runs") == [
        ("job_start", "0", None, None),
        ("attempt_end", "0", "failed", 1),
        ("job_start", "1", None, None),
        ("attempt_end", "1", "failed", 1),
        ("job_start", "2", None, None),
        ("job_end", "2", "completed", None),
    ]


def test_a_failing_progress_callback_does_not_stop_the_job(tmp_path: Path) -> None:
    def broken(message: str) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    counter = tmp_path / "runs-of-the-command"
    rc = run_job(py(failing_twice(counter)), JOB, tmp_path / "runs", 3, 0, on_event=broken)
    assert (rc, counter.read_text()) == (0, "3")
    assert lifecycle(tmp_path / "runs")[-1] == ("job_end", "2", "completed", None)


def test_the_keeper_says_it_cannot_start_the_command_even_to_a_closed_stderr() -> None:
    from badput.launcher import _keeper

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        keeper = [sys.executable, "-I", "-S", _keeper.__file__, str(os.getpid())]
        proc = subprocess.Popen([*keeper, "/nonexistent/program"], stderr=write_end)
    finally:
        os.close(write_end)
    # Before the fix: -13, killed by SIGPIPE as it said so (the launcher reported 141).
    assert proc.wait(timeout=30) == 127


@pytest.mark.parametrize(
    ("option", "value"),
    [
        *(
            (opt, v)
            for opt in ("--restart-delay", "--backoff", "--backoff-max")
            for v in ("inf", "nan")
        ),
        ("--restart-delay", "1e999"),  # overflows to inf
        ("--kill-timeout", "inf"),
        ("--kill-timeout", "nan"),
        ("--kill-timeout", "-1"),
        ("--hang-timeout", "inf"),
        ("--hang-timeout", "nan"),
        ("--hang-timeout", "0"),
        ("--max-restarts", "-1"),
    ],
)
def test_a_bad_number_is_a_usage_error_before_the_command_starts(
    tmp_path: Path, option: str, value: str
) -> None:
    started = tmp_path / "started"
    command = py(f"open({str(started)!r}, 'w')")  # a command that would succeed at once
    proc = badput_run(tmp_path, option, value, "--", *command, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    # Before the fix, inf and nan were taken: the command ran (and completed, exit 0);
    # a failing one then made the launcher sleep for ever (inf) or fail at the restart (nan).
    assert (proc.returncode, started.exists(), (tmp_path / "runs").exists()) == (2, False, False)
    assert option in err.decode()


#: A command that records steps for 3 s (and at least 2,500 of them: its memory-mapped
#: event file grows past its first 256 KB), writes its pid to ``marker``, then sleeps.
_STEPPING = """
    import os, time
    from badput.recorder import Recorder
    rec = Recorder(heartbeat_interval=0)
    t0, step = time.time(), 0
    while time.time() - t0 < 3.0 or step < 2500:
        rec.record_step_start(step)
        rec.record_step_end(step)
        step += 1
        time.sleep(0.0005)
    with open({marker!r} + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace({marker!r} + ".tmp", {marker!r})
    time.sleep(120)
"""


def test_an_orphaned_attempt_ends_at_its_last_event(tmp_path: Path) -> None:
    """The launcher SIGKILLed (its command dies with it): the next launch ends the
    orphaned attempt in the record at that attempt's last event, however large its
    event file grew."""
    from badput.analysis import analyze
    from test_faults import wait_until_gone

    marker = tmp_path / "command.pid"
    launcher = badput_run(tmp_path, "--", *py(_STEPPING.format(marker=str(marker))))
    try:
        command = int(wait_for(marker))
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=30)
        assert wait_until_gone([command]) == []  # killed by its keeper, as designed
    finally:
        launcher.kill()
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(marker.read_text()), signal.SIGKILL)
    (stream,) = (tmp_path / "runs" / JOB / "0").glob(f"*-{command}.jsonl")
    assert stream.stat().st_size > 256 * 1024  # its NUL tail: longer than the tail read
    assert badput_run(tmp_path, "--", *py("pass")).wait(timeout=60) == 0

    first = [e for e in events(tmp_path / "runs") if e.attempt == 0]
    (start,) = [e.ts for e in first if e.kind == "job_start"]
    (orphaned,) = [e for e in first if e.kind == "attempt_end"]
    last = max(e.ts for e in first if e.pid == command)
    assert (orphaned.status, orphaned.ts) == ("orphaned", last)
    ran = analyze(tmp_path / "runs", JOB).attempts[0]
    # Before the fix: 0 s, ended at its job_start (the tail read found only NULs), and
    # every step of it then counted as after its end.
    assert (ran.end_reason, ran.end - ran.start) == ("attempt_end:orphaned", last - start)
    assert ran.end - ran.start >= 3.0
    assert ran.last_step is not None and ran.last_step >= 2499
