"""The buckets every distributed job spends (issue 39): ``distributed_init``, ``model_build``,
``teardown`` (recorded) and ``hung`` (derived by the engine), with the launcher's hang
timeout as the report's stall threshold. Real runs: tests/integrations/test_torch.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

import badput
from badput.engine import Accountant, RankOptions, Report
from badput.events import Event
from badput.formats.codec import decode_line
from badput.testing import events_to_jsonl

HOUR = 3600.0


def ev(ts: float, kind: str, rank: int | None = 0, attempt: int = 0, **kw: Any) -> dict[str, Any]:
    out = {"ts": ts, "kind": kind, "job": "j", "attempt": attempt, **kw}
    if rank is not None:
        out["rank"] = rank
    return out


def steps(first: int, n: int, at: float, rank: int = 0, attempt: int = 0) -> list[dict[str, Any]]:
    """``n`` one-second steps from ``first`` on, starting at ``at``."""
    out = []
    for k in range(n):
        out += [
            ev(at + k, "step_start", rank, attempt, step=first + k),
            ev(at + k + 1, "step_end", rank, attempt, step=first + k),
        ]
    return out


def analyze(tmp_path: Path, events: list[dict[str, Any]], **kw: Any) -> Report:
    events = sorted(events, key=lambda e: e["ts"])
    path = tmp_path / f"log-{len(list(tmp_path.glob('log-*.jsonl')))}.jsonl"  # logs only grow
    return badput.analyze(events_to_jsonl(path, events), **kw)


def codes(rep: Report) -> list[str]:
    return [d.code for d in rep.diagnostics]


# ----------------------------------------------------------------- recorded buckets


def test_recorded_buckets_and_an_open_teardown_closed_by_the_attempts_end(tmp_path: Path) -> None:
    log = [
        ev(0, "job_start", None),
        ev(1, "distributed_init_start"),
        ev(3, "distributed_init_end"),
        ev(3, "model_build_start"),
        ev(4.5, "model_build_end"),
        *steps(1, 10, 5),
        ev(15, "teardown_start"),  # no end: the launcher's job_end ends it
        ev(21, "job_end", None, status="completed"),
    ]
    rep = analyze(tmp_path, log, ideal_step_time=1.0)
    assert dict(rep.buckets) == {
        "productive": 10.0,
        "teardown": 6.0,
        "distributed_init": 2.0,
        "model_build": 1.5,
        "untracked": 1.5,
    }
    assert codes(rep) == []  # an open teardown is not an unpaired start


def test_an_old_reader_skips_the_new_kinds_and_fields(tmp_path: Path) -> None:
    """Schema v1: a reader that does not know a kind keeps the line and ignores it, and
    ignores unknown fields. An Event without the new field stands for an old reader."""

    class OldEvent(msgspec.Struct, kw_only=True, omit_defaults=True):
        ts: float
        kind: str
        job: str
        attempt: str | int | None = None
        rank: int | None = None

    line = b'{"ts":1.0,"kind":"job_start","job":"j","attempt":0,"hang_timeout":10.0}'
    assert msgspec.json.decode(line, type=OldEvent).kind == "job_start"
    assert decode_line(line).hang_timeout == 10.0
    # this engine with kinds it does not know (what an older engine sees of the new ones)
    log = [
        ev(0, "job_start", None),
        ev(1, "warp_init_start"),
        ev(3, "warp_init_end"),
        *steps(1, 5, 4),
        ev(10, "job_end", None, status="completed"),
    ]
    rep = analyze(tmp_path, log, ideal_step_time=1.0)
    assert rep.total_seconds == 10.0
    assert math.isclose(sum(rep.buckets.values()), 10.0)
    assert rep.bucket("untracked") == 5.0  # the unknown interval is not counted
    assert set(codes(rep)) == {"unknown_kind"}


# ----------------------------------------------------------------------------- hung


def hung_log(status: str | None, end: float, timeout: float | None = None) -> list[dict[str, Any]]:
    """Two ranks run steps 1..10 (t 1..11); rank 0 starts step 11 and stops, rank 1 never
    does; heartbeats go on; the attempt ends at ``end``; attempt 1 runs 5 steps."""
    start = {"hang_timeout": timeout} if timeout else {}
    log = [ev(0, "job_start", None, **start), *steps(1, 10, 1, 0), *steps(1, 10, 1, 1)]
    log += [ev(11, "step_start", 0, step=11)]
    log += [ev(t, "heartbeat", r) for t in range(12, int(end), 2) for r in (0, 1)]
    log += [ev(end, "attempt_end", None, status=status, exit_code=1)]
    log += [ev(end + 1, "job_start", None, 1), *steps(11, 5, end + 2, 0, 1)]
    log += [ev(end + 8, "job_end", None, 1, status="completed")]
    return log


def test_an_attempt_killed_for_a_hang_is_hung_from_its_last_progress(tmp_path: Path) -> None:
    rep = analyze(tmp_path, hung_log("hung", 30, timeout=10.0), ideal_step_time=1.0)
    # last progress: step 11's start at 11; the open step counts its typical second
    # (wasted: the restart redid it), then 12..30 is hung
    assert rep.bucket("hung") == 18.0
    assert rep.bucket("wasted") == 1.0
    assert codes(rep) == []
    (stall,) = rep.stalls
    assert (stall.attempt, stall.threshold, stall.first_stopped) == ("0", 10.0, [1])
    assert stall.buckets == {"hung": 18.0, "wasted": 1.0}


def test_a_final_silence_longer_than_the_stall_threshold_is_hung(tmp_path: Path) -> None:
    # no launcher status: the default threshold max(10 x 1 s, 60 s) decides
    short = analyze(tmp_path, hung_log("failed", 70), ideal_step_time=1.0)
    assert short.bucket("hung") == 0.0  # 58 s of silence: a crash, not a hang
    assert short.bucket("untracked") == 58.0 + 1.0 + 2.0  # + before the steps, each attempt
    long = analyze(tmp_path, hung_log("failed", 80), ideal_step_time=1.0)
    assert long.bucket("hung") == 68.0
    # a recorded hang timeout is the threshold
    timed = analyze(tmp_path, hung_log("failed", 30, timeout=10.0), ideal_step_time=1.0)
    assert timed.bucket("hung") == 18.0


def test_a_completed_attempt_and_a_running_one_are_never_hung(tmp_path: Path) -> None:
    log = [ev(0, "job_start", None), *steps(1, 5, 1), ev(300, "job_end", None, status="completed")]
    assert analyze(tmp_path, log, ideal_step_time=1.0).bucket("hung") == 0.0
    running = [ev(0, "job_start", None), *steps(1, 5, 1)]
    acc = Accountant("j")
    acc.ingest_events([Event(**e) for e in running])
    assert acc.report(now=300.0, ideal_step_time=1.0).bucket("hung") == 0.0


def test_hung_time_in_windows_adds_up(tmp_path: Path) -> None:
    acc = Accountant("j")
    acc.ingest_events(
        [Event(**e) for e in sorted(hung_log("hung", 30, 10.0), key=lambda e: e["ts"])]
    )
    whole = acc.report(ideal_step_time=1.0)
    left = acc.report(window=(0, 20), ideal_step_time=1.0)
    right = acc.report(window=(20, 50), ideal_step_time=1.0)
    assert left.bucket("hung") == 8.0 and right.bucket("hung") == 10.0
    assert left.bucket("hung") + right.bucket("hung") == whole.bucket("hung")


def test_a_late_rank_s_progress_in_a_closed_attempt_moves_its_hung_time() -> None:
    """The engine remembers each attempt's last progress between queries (a windowed
    report asks of every attempt): events of a closed attempt read later (another rank's
    file) are seen by the next query, windowed or not, as by a fresh read."""
    log = sorted(hung_log("hung", 30, 10.0), key=lambda e: e["ts"])
    acc = Accountant("j")
    acc.ingest_events([Event(**e) for e in log])
    assert acc.report(window=(0, 40), ideal_step_time=1.0).bucket("hung") == 18.0
    late = [ev(11, "step_start", 2, step=11), ev(15, "step_end", 2, step=11)]
    acc.ingest_events([Event(**e) for e in late])  # rank 2's file, read after the others'
    fresh = Accountant("j")
    fresh.ingest_events([Event(**e) for e in sorted(log + late, key=lambda e: e["ts"])])
    for window in ((0, 40), None):
        hung = acc.report(window=window, ideal_step_time=1.0).bucket("hung")
        assert hung == fresh.report(window=window, ideal_step_time=1.0).bucket("hung") == 15.0


@settings(max_examples=60, deadline=None)
@given(
    n_steps=st.integers(0, 12),
    silence=st.floats(0.0, 200.0),
    status=st.sampled_from(["hung", "failed", None]),
    timeout=st.one_of(st.none(), st.floats(0.5, 100.0)),
    ideal=st.one_of(st.none(), st.floats(0.2, 5.0)),
    cut=st.floats(0.0, 1.0),
)
def test_hung_takes_only_untracked_time_and_the_buckets_still_sum_to_the_total(  # noqa: PLR0917
    n_steps: int,
    silence: float,
    status: str | None,
    timeout: float | None,
    ideal: float | None,
    cut: float,
) -> None:
    start = {"hang_timeout": timeout} if timeout else {}
    log = [ev(0, "job_start", None, **start), *steps(1, n_steps, 1)]
    last = 1.0 + n_steps
    end = last + silence
    log += [ev(end, "attempt_end", None, status=status, exit_code=1)]
    log += [ev(end + 1, "job_start", None, 1), *steps(1, 3, end + 2, 0, 1)]
    log += [ev(end + 6, "job_end", None, 1, status="completed")]
    acc = Accountant("j")
    acc.ingest_events([Event(**e) for e in sorted(log, key=lambda e: e["ts"])])
    with_hung = acc.report(ideal_step_time=ideal)
    assert math.isclose(sum(with_hung.buckets.values()), with_hung.total_seconds, abs_tol=1e-6)
    assert all(v >= 0 for v in with_hung.buckets.values())
    # hung is at most the silence after the last progress, and only ever untracked time
    assert with_hung.bucket("hung") <= silence + 1e-9
    assert with_hung.bucket("hung") == 0.0 or n_steps > 0
    mid = end * cut
    parts = [acc.report(window=w, ideal_step_time=ideal) for w in ((0, mid), (mid, end + 6))]
    assert math.isclose(
        sum(p.bucket("hung") for p in parts), with_hung.bucket("hung"), abs_tol=1e-6
    )
    for name in ("hung", "untracked"):
        assert math.isclose(
            sum(p.bucket(name) for p in parts), with_hung.bucket(name), abs_tol=1e-6
        ), name


def test_user_set_stall_thresholds_win_over_the_recorded_timeout(tmp_path: Path) -> None:
    acc = Accountant("j")
    acc.ingest_events(
        [Event(**e) for e in sorted(hung_log("hung", 30, 10.0), key=lambda e: e["ts"])]
    )
    assert acc.hang_timeout == 10.0
    assert [s.threshold for s in acc.report().stalls] == [10.0]
    acc.rank_options = RankOptions(stall_floor=100.0)
    assert acc.report().stalls == []


# -------------------------------------------------------------------------- recorder


def run_py(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def kinds_of(store: Path) -> list[tuple[str, float]]:
    lines = [
        json.loads(line)
        for f in sorted(store.rglob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    return [(e["kind"], e["ts"]) for e in lines if e["kind"] != "heartbeat"]


LAUNCHED = {"BADPUT_LAUNCHER": "1", "BADPUT_ATTEMPT": "0", "BADPUT_JOB": "j"}


def test_under_badput_run_job_end_and_a_crash_begin_the_teardown(tmp_path: Path) -> None:
    done = run_py(
        tmp_path,
        """
        import badput
        rec = badput.Recorder(store="s")
        rec.record_job_start()
        with rec.step(1): pass
        rec.record_job_end()      # under badput run: the teardown begins
        rec.record_job_end()      # once
        """,
        **LAUNCHED,
    )
    assert done.returncode == 0, done.stderr
    kinds = [k for k, _ in kinds_of(tmp_path / "s")]
    assert kinds[-3:] == ["step_start", "step_end", "teardown_start"]
    crash = run_py(
        tmp_path,
        """
        import badput
        rec = badput.Recorder(store="c")
        rec.record_job_start()
        with rec.step(1):
            raise RuntimeError("boom")
        """,
        **LAUNCHED,
    )
    assert crash.returncode == 1 and "RuntimeError: boom" in crash.stderr  # traceback kept
    assert [k for k, _ in kinds_of(tmp_path / "c")][-1] == "teardown_start"
    plain = run_py(
        tmp_path,
        """
        import badput
        rec = badput.Recorder(store="p")
        rec.record_job_start()
        raise RuntimeError("boom")
        """,
        BADPUT_JOB="j",
        BADPUT_PROCESS_INIT="0",
    )
    assert plain.returncode == 1
    assert "teardown_start" not in [k for k, _ in kinds_of(tmp_path / "p")]  # no launcher


def test_a_hook_timed_before_the_recorder_is_written_in_time_order(tmp_path: Path) -> None:
    done = run_py(
        tmp_path,
        """
        import time
        import torch.distributed as dist
        import badput.integrations.torch  # installs the torch.distributed hooks
        dist.init_process_group("gloo", init_method="file://" + __import__("os").path.abspath("pg"),
                                rank=0, world_size=1)
        import badput
        rec = badput.Recorder(store="s")
        rec.record_job_start()
        dist.new_group(backend="gloo")   # a live recorder: recorded as it happens
        rec.record_job_end()
        dist.destroy_process_group()
        """,
        **LAUNCHED,
        BADPUT_PROCESS_INIT="1",
    )
    assert done.returncode == 0, done.stderr
    marks = kinds_of(tmp_path / "s")
    assert [ts for _, ts in marks] == sorted(ts for _, ts in marks)  # one file, in time order
    kinds = [k for k, _ in marks]
    assert kinds.count("distributed_init_start") == 2 == kinds.count("distributed_init_end")
    assert kinds[-1] == "teardown_start"
    rep = badput.analyze(tmp_path / "s", "j")
    assert set(codes(rep)) == {"no_ideal_step_time", "no_job_end"}  # no steps, no launcher
    assert rep.bucket("distributed_init") > 0.0
