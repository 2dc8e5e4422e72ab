"""Distributed launches without a framework: rank, host and attempt detection, the process's
start from the OS, and ``badput run``'s attempts, job end and job identity."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import badput
from badput.events import Kind
from badput.launcher import Launcher, job_completed, latest_inner_restart, run_job
from badput.runtime import env as _env
from badput.store import JsonlStore
from badput.testing import recorder_for_tests


def py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def launched_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("BADPUT_PROCESS_INIT", None)  # the suite turns it off; launched runs record it
    env.update(extra)
    return env


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        ({"RANK": "3", "SLURM_PROCID": "1", "OMPI_COMM_WORLD_RANK": "2"}, 3),  # torchrun in srun
        ({"OMPI_COMM_WORLD_RANK": "2", "SLURM_PROCID": "1"}, 2),
        ({"PMI_RANK": "5", "SLURM_PROCID": "1"}, 5),
        ({"SLURM_PROCID": "1"}, 1),
        ({"RANK": "x", "SLURM_PROCID": "4"}, 4),  # a bad value is skipped, not fatal
        ({}, None),
    ],
)
def test_rank_from_each_launcher(env: dict[str, str], rank: int | None) -> None:
    assert _env.detect_rank(env) == rank


def test_recorder_takes_the_slurm_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in _env.RANK_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "7")
    rec = recorder_for_tests(rank=None)
    assert rec.rank == 7
    rec.close()


@given(
    outer=st.one_of(st.none(), st.integers(0, 10**6)),
    inner=st.one_of(st.none(), st.integers(0, 10**6)),
    outer2=st.one_of(st.none(), st.integers(0, 10**6)),
    inner2=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_a_restart_at_any_layer_is_a_new_attempt(
    outer: int | None, inner: int | None, outer2: int | None, inner2: int | None
) -> None:
    """Two processes share an attempt id only when both layers agree (a worker group's
    first start, inner 0, is its outer attempt)."""
    a = _env.compose_attempt(outer, inner)
    b = _env.compose_attempt(outer2, inner2)
    same = (outer, inner or 0) == (outer2, inner2 or 0) if None not in (outer, outer2) else None
    if same is not None:
        assert (a == b) == same
    if outer is not None and not inner:
        assert a == outer


def test_attempt_composition_from_the_environment() -> None:
    assert _env.detect_attempt({"BADPUT_ATTEMPT": "2", "TORCHELASTIC_RESTART_COUNT": "1"}) == "2.1"
    assert _env.detect_attempt({"SLURM_RESTART_COUNT": "3", "TORCHELASTIC_RESTART_COUNT": "0"}) == 3
    assert _env.detect_attempt({"TORCHELASTIC_RESTART_COUNT": "2"}) == 2
    assert _env.detect_attempt({}) is None


def test_process_start_time_of_a_real_child() -> None:
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    after = time.time()
    try:
        start = _env.process_start_time(child.pid)
    finally:
        child.kill()
        child.wait()
    assert start is not None
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before - 2 * tick <= start <= after + 2 * tick


def test_process_start_time_parses_odd_command_names(tmp_path: Path) -> None:
    # The command name (field 2) may hold spaces and ')': fields are counted after the last ')'.
    hz = os.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 18 + [str(50 * hz)] + ["0"] * 30  # starttime: 50 s after boot
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text("42 (a) b (c) " + " ".join(fields) + "\n")
    (tmp_path / "uptime").write_text("80.00 10.00\n")  # booted 80 s ago
    now = time.time()
    start = _env.process_start_time(42, proc=str(tmp_path))
    assert start is not None
    assert start == pytest.approx(now - 30, abs=0.5)
    (tmp_path / "uptime").write_text("20.00 10.00\n")  # "started" after now: unknown
    assert _env.process_start_time(42, proc=str(tmp_path)) is None
    assert _env.process_start_time(43, proc=str(tmp_path)) is None  # no such process


# ---------------------------------------------------------- the recorder under a launcher


def test_launched_recorder_records_process_init_and_leaves_job_end_to_the_launcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BADPUT_PROCESS_INIT")
    monkeypatch.setenv("BADPUT_LAUNCHER", "1")
    t_start = time.time() - 3.0
    monkeypatch.setenv("BADPUT_ATTEMPT_START", repr(t_start + 1.0))  # the launcher's job_start
    monkeypatch.setattr("badput.recorder._recorder.process_start_time", lambda: t_start)
    rec = recorder_for_tests(job="launched-rec")
    created = time.time()
    rec.record_job_start()
    rec.record_job_end("completed")
    rec.flush()
    assert rec.store is not None
    (chunk,) = rec.store.read("launched-rec").chunks
    kinds = [(e.kind, e.ts) for e in chunk.items if not isinstance(e, Exception)]
    # never before the launcher's attempt start; job_start dated at the process start; the
    # job's end is the launcher's, and what follows record_job_end() is the teardown
    assert [k for k, _ in kinds] == [
        Kind.JOB_START,
        "process_init_start",
        "process_init_end",
        "teardown_start",
    ]
    assert kinds[0][1] == kinds[1][1] == t_start + 1.0
    assert kinds[2][1] <= created
    rec.close()


# ------------------------------------------------------------------------ badput run

README_SCRIPT = """
import badput
rec = badput.Recorder("{job}")
rec.record_job_start()
with rec.training_prep():
    pass
with rec.checkpoint_restore(step := 0):
    pass
for step in range(step + 1, 13):
    with rec.step(step):
        with rec.data_loading():
            pass
    if step % 5 == 0:
        with rec.checkpoint_save(step):
            pass
rec.record_job_end()
"""


def test_readme_pattern_under_badput_run_is_clean_and_completed(tmp_path: Path) -> None:
    rc = run_job(
        py(README_SCRIPT.format(job="readme")),
        "readme",
        tmp_path,
        env=launched_env(),
    )
    assert rc == 0
    rep = badput.analyze(tmp_path, "readme")
    assert [d.code for d in rep.diagnostics] == []
    assert (rep.end_reason, rep.attempts[0].status) == ("job_end", "completed")
    assert (rep.steps.kept, rep.steps.wasted) == (12, 0)
    assert rep.bucket("process_init") > 0  # the interpreter's start and `import badput`


def test_a_new_run_of_a_completed_job_is_a_new_job(tmp_path: Path) -> None:
    script = py(README_SCRIPT.format(job="ignored").replace('"ignored"', ""))
    assert run_job(script, "again", tmp_path, env=launched_env()) == 0
    first = badput.analyze(tmp_path, "again")
    assert job_completed(tmp_path, "again")
    time.sleep(0.5)  # the gap between the runs: not recovery of either
    messages: list[str] = []
    launcher = Launcher(script, "again", tmp_path, env=launched_env(), on_event=messages.append)
    assert launcher.job == "again.2"
    assert launcher.run().exit_code == 0
    assert "already completed" in messages[0]
    assert badput.analyze(tmp_path, "again").total_seconds == first.total_seconds
    second = badput.analyze(tmp_path, "again.2")
    assert second.bucket("recovery") == 0.0
    assert [d.code for d in second.diagnostics] == []
    assert Launcher(script, "again", tmp_path).job == "again.3"


def test_a_failed_job_run_again_continues_its_attempts(tmp_path: Path) -> None:
    assert run_job(py("raise SystemExit(3)"), "retry", tmp_path) == 3
    assert not job_completed(tmp_path, "retry")
    launcher = Launcher(py("pass"), "retry", tmp_path)
    assert (launcher.job, launcher.first_attempt) == ("retry", 1)


def test_the_end_lands_on_the_newest_inner_restart(tmp_path: Path) -> None:
    # A command whose worker group was restarted inside (as torchrun does): its processes
    # write attempt "0" then "0.1"; the launcher ends "0.1", the attempt that was running.
    child = """
    import os, badput
    for restart in ("0", "1"):
        os.environ["TORCHELASTIC_RESTART_COUNT"] = restart
        rec = badput.Recorder(heartbeat_interval=0)
        rec.record_step_start(1)
        rec.record_step_end(1)
        rec.close()
    """
    assert run_job(py(child), "inner", tmp_path) == 0
    assert latest_inner_restart(tmp_path, "inner", 0) == 1
    store = JsonlStore(tmp_path)
    ends = [
        (e.kind, e.attempt)
        for c in store.read("inner").chunks
        for e in c.items
        if not isinstance(e, Exception) and e.kind in ("job_start", "job_end")
    ]
    assert sorted(ends, key=str) == [("job_end", "0.1"), ("job_start", 0)]
    rep = badput.analyze(tmp_path, "inner")
    assert [a.id for a in rep.attempts] == [0, "0.1"]
    assert rep.attempts[-1].status == "completed"
