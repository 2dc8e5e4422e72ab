"""badput.compat.resiliency: the resiliency library's logs, its calculator, the import."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

import badput
from badput.cli import main
from badput.compat import resiliency
from badput.compat.resiliency import (
    LogProblem,
    ResiliencyLogError,
    import_resiliency,
    read_resiliency_log,
    resiliency_goodput,
    to_badput_events,
)
from badput.store import JsonlStore

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "resiliency"
BIG = FIXTURES / "event_log_112_nodes.jsonl"
TUTORIAL = FIXTURES / "fsdp_tutorial.jsonl"
BIG_JOB = "test-040104-goodput-n112-70b-a3m"

needs_fixtures = pytest.mark.skipif(
    not BIG.is_file() or not TUTORIAL.is_file(),
    reason=f"the shared resiliency fixtures are not at {FIXTURES} (shared/ beside the clone)",
)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def line(ts: str, event_type: str, job: str = "j", **extra: object) -> str:
    return json.dumps({"timestamp": ts, "job_name": job, "event_type": event_type, **extra})


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(f"{text}\n" for text in lines))
    return path


# ------------------------------------------------------------------ the fixtures


@needs_fixtures
def test_112_node_log_reproduces_the_calculator_exactly() -> None:
    events = read_resiliency_log(BIG)
    assert len(events) == 7798
    r = resiliency_goodput(events, 8.0)
    assert r.job_name == BIG_JOB
    assert r.job_started_count == 48
    assert r.total_runtime_seconds == 35364.285491
    assert r.min_loaded_step == 40
    assert r.max_saved_step == 1960
    assert r.step_diff == 1920
    assert r.effective_computation_time == 15360.0
    assert r.goodput_percentage == 43.43365004195837
    assert r.checkpoints_loaded == 44
    assert r.checkpoints_saved == 96
    assert dict(r.rows())["Goodput Percentage"] == "43.43%"
    assert dict(r.rows())["Total Runtime (hours)"] == "9.82"


@needs_fixtures
def test_tutorial_log_reproduces_the_published_table() -> None:
    r = resiliency_goodput(read_resiliency_log(TUTORIAL), 0.002569)
    assert round(r.goodput_percentage, 2) == 21.72
    # The table printed in the library's tutorial, row by row.
    assert r.rows() == [
        ("Total Events", "27"),
        ("Job Started Count", "2"),
        ("Checkpoints Loaded", "1"),
        ("Checkpoints Saved", "20"),
        ("Total Runtime (hours)", "0.03"),
        ("Min Loaded Step", "0"),
        ("Max Saved Step", "10000"),
        ("Step Difference", "10000"),
        ("Effective Computation Time (hours)", "0.01"),
        ("Goodput Percentage", "21.72%"),
    ]


@needs_fixtures
def test_cli_report_resiliency_json_and_table() -> None:
    code, out, err = invoke(
        "report", "--resiliency", "--reference-step-time", "8", "--json", str(BIG)
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["job_started_count"] == 48
    assert data["total_runtime_seconds"] == 35364.285491
    assert data["min_loaded_step"] == 40
    assert data["max_saved_step"] == 1960
    assert data["effective_computation_time"] == 15360
    assert data["goodput_percentage"] == 43.43365004195837

    code, out, err = invoke(
        "report", "--resiliency", "--reference-step-time", "0.002569", str(TUTORIAL)
    )
    assert code == 0, err
    assert "Goodput Percentage" in out
    assert "21.72%" in out
    code, out, err = invoke("report", "--resiliency", "--reference-step-time", "8", str(BIG))
    assert code == 0, err
    assert "43.43%" in out
    assert "43.43365004195837 %" in out


@needs_fixtures
def test_import_then_badput_report_explains_the_time(tmp_path: Path) -> None:
    root = tmp_path / "store"
    job, n = import_resiliency(BIG, JsonlStore(root))
    assert job == BIG_JOB
    assert n > 0
    report = badput.analyze(root, job, ideal_step_time=8.0)
    assert report.buckets["productive"] == pytest.approx((1960 - 40) * 8.0, abs=1e-9)
    assert len(report.attempts) == 48
    assert [a.id for a in report.attempts] == list(range(48))
    assert report.buckets["recovery"] > 0
    assert sum(report.buckets.values()) == pytest.approx(report.total_seconds, abs=1e-6)
    assert report.end_reason == "job_end"
    # This log starts with a job start and ends with a termination, so badput's span
    # is the calculator's "last event - first event" and the goodputs agree.
    assert report.total_seconds == pytest.approx(35364.285491, abs=1e-5)
    assert report.goodput * 100 == pytest.approx(43.43365004195837, abs=1e-9)
    codes = {d.code for d in report.diagnostics}
    assert codes == {"checkpoint_progress"}


@needs_fixtures
def test_cli_import_writes_and_says_how_to_report(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    code, out, err = invoke("import", "resiliency", str(TUTORIAL), "--store", str(root))
    assert code == 0, err
    assert "badput report" in out and "--ideal-step-time" in out
    report = badput.analyze(root, ideal_step_time=0.002569)
    assert len(report.attempts) == 2
    assert report.buckets["productive"] == pytest.approx(10000 * 0.002569)
    assert report.buckets["recovery"] == pytest.approx(
        datetime.fromisoformat("2025-09-27T04:52:07.013451").timestamp()
        - datetime.fromisoformat("2025-09-27T04:51:47.533941").timestamp()
    )
    assert sum(report.buckets.values()) == pytest.approx(report.total_seconds, abs=1e-6)
    # Importing the same job again would double it: refused, one line, exit 2.
    code, _, err = invoke("import", "resiliency", str(TUTORIAL), "--store", str(root))
    assert code == 2
    assert "already holds job" in err and "Traceback" not in err


# ------------------------------------------------------------ rules and errors


def test_consecutive_starts_are_one_start_the_last(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log.jsonl",
        line("2025-01-01T00:00:00", "job_started", node_rank=1),
        line("2025-01-01T00:00:05", "job_started", node_rank=0),
        line("2025-01-01T00:00:10", "checkpoint_loaded", step=0),
        line("2025-01-01T00:01:40", "checkpoint_saved", step=100),
        line("2025-01-01T00:01:50", "job_terminated", node_rank=0),
        line("2025-01-01T00:01:51", "job_terminated", node_rank=1),
        line("2025-01-01T00:02:00", "job_started", node_rank=0),
        line("2025-01-01T00:02:01", "job_started", node_rank=1),
        line("2025-01-01T00:02:10", "checkpoint_loaded", step=100),
        line("2025-01-01T00:03:50", "checkpoint_saved", step=200),
        line("2025-01-01T00:04:00", "job_terminated", node_rank=0),
    )
    events = read_resiliency_log(log)
    r = resiliency_goodput(events, 0.5)
    assert r.job_started_count == 2
    # proxy user_scheduled + 2 starts + 4 checkpoint events + 2 terminations
    assert r.total_events == 9
    assert r.total_runtime_seconds == 240.0
    assert r.goodput_percentage == 200 * 0.5 / 240 * 100

    out = to_badput_events(events)
    starts = [e for e in out if e.kind == "job_start"]
    assert [(e.attempt, e.rank) for e in starts] == [(0, 1), (1, 0)]
    assert starts[0].ts == datetime(2025, 1, 1, tzinfo=timezone.utc).timestamp()
    ends = [(e.kind, e.attempt, e.status) for e in out if e.kind in ("attempt_end", "job_end")]
    assert ends == [("attempt_end", 0, "terminated"), ("job_end", 1, "terminated")]
    attempt_end = next(e for e in out if e.kind == "attempt_end")
    assert attempt_end.ts == datetime(2025, 1, 1, 0, 1, 51, tzinfo=timezone.utc).timestamp()

    store = JsonlStore(tmp_path / "store")
    import_resiliency(log, store)
    report = badput.analyze(store, "j", ideal_step_time=0.5)
    assert report.buckets["recovery"] == pytest.approx(9.0)  # 00:01:51 -> 00:02:00
    assert report.buckets["productive"] == pytest.approx(100.0)
    assert report.total_seconds == pytest.approx(240.0)


def test_timestamps_are_utc_and_ties_follow_the_event_type_order(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log.jsonl",
        line("2025-01-01T00:00:10", "job_terminated"),
        line("2025-01-01T00:00:00Z", "checkpoint_saved", step=5),
        line("2025-01-01T01:00:00+01:00", "job_started"),  # 00:00:00 UTC
        line("2025-01-01T00:00:00", "checkpoint_loaded", step=1),
    )
    events = read_resiliency_log(log)
    assert events[0].time == datetime(2025, 1, 1, 0, 0, 10, tzinfo=timezone.utc)
    kinds = [e.kind for e in to_badput_events(events)]
    assert kinds == [
        "job_start",
        "checkpoint_restore_start",
        "checkpoint_restore_end",
        "checkpoint_save_start",
        "checkpoint_save_end",
        "job_end",
    ]
    r = resiliency_goodput(events, 1.0)
    assert (r.step_diff, r.total_runtime_seconds) == (4, 10.0)


def test_a_malformed_line_is_named_by_file_and_line(tmp_path: Path) -> None:
    log = write(
        tmp_path / "bad.jsonl",
        line("2025-01-01T00:00:00", "job_started"),
        "",
        '{"timestamp": "2025-01-01T00:00:01", "job_name": "j", "event_type": ',
        line("yesterday", "checkpoint_saved", step=1),
        line("2025-01-01T00:00:02", "checkpoint_saved", step=1.5),
        line("2025-01-01T00:00:03", "checkpoint_saved", step=10),
    )
    with pytest.raises(ResiliencyLogError) as info:
        read_resiliency_log(log)
    assert str(info.value).startswith(f"{log}:3: not JSON")
    problems: list[LogProblem] = []
    events = read_resiliency_log(log, problems=problems)
    assert len(events) == 2
    assert [(p.file, p.line) for p in problems] == [(str(log), 3), (str(log), 4), (str(log), 5)]
    assert "timestamp" in problems[1].message and "step" in problems[2].message

    code, out, err = invoke("report", "--resiliency", "--reference-step-time", "1", str(log))
    assert code == 0, err
    assert f"{log}:3:" in err and f"{log}:5:" in err and "Traceback" not in err
    assert "Goodput Percentage" in out


def test_unknown_event_types_are_kept_and_reported(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log.jsonl",
        line("2025-01-01T00:00:00", "job_started"),
        line("2025-01-01T00:00:01", "checkpoint_loaded", step=0),
        line("2025-01-01T00:00:05", "eval_started"),
        line("2025-01-01T00:00:10", "checkpoint_saved", step=10),
    )
    events = read_resiliency_log(log)
    r = resiliency_goodput(events, 0.5)
    assert r.unknown_event_types == {"eval_started": 1}
    assert r.total_events == 5  # counted, as that calculator counts them
    assert all(e.kind != "eval_started" for e in to_badput_events(events))
    code, out, _ = invoke("report", "--resiliency", "--reference-step-time", "0.5", str(log))
    assert code == 0
    assert "eval_started" in out


def test_several_files_several_jobs_and_usage_errors(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", line("2025-01-01T00:00:00", "job_started", job="x"))
    b = write(
        tmp_path / "b.jsonl",
        line("2025-01-01T00:00:01", "checkpoint_loaded", job="x", step=0),
        line("2025-01-01T00:00:09", "checkpoint_saved", job="x", step=4),
        line("2025-01-01T00:00:03", "job_started", job="y"),
    )
    code, out, err = invoke("report", "--resiliency", "--reference-step-time", "1", str(a), str(b))
    assert code == 2 and "several jobs" in err
    code, out, err = invoke(
        "report",
        "--resiliency",
        "--reference-step-time",
        "1",
        "--json",
        "--job",
        "x",
        str(a),
        str(b),
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["total_runtime_seconds"] == 9.0 and data["goodput_percentage"] == 4 / 9 * 100
    code, _, err = invoke("report", "--resiliency", str(a))
    assert code == 2 and "--reference-step-time" in err
    code, _, err = invoke("report", str(a), str(b))
    assert code == 2 and "one PATH" in err
    code, _, err = invoke("report", "--resiliency", "--reference-step-time", "1", "nope.jsonl")
    assert code == 2 and "nope.jsonl" in err
    with pytest.raises(ValueError, match="several jobs"):
        import_resiliency([a, b], JsonlStore(tmp_path / "s"))
    assert import_resiliency([a, b], JsonlStore(tmp_path / "s"), "y")[0] == "y"


def test_no_progress_gives_zero_goodput_like_the_calculator(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log.jsonl",
        line("2025-01-01T00:00:00", "job_started"),
        line("2025-01-01T00:01:00", "job_terminated"),
    )
    r = resiliency_goodput(read_resiliency_log(log), 1.0)
    assert (r.step_diff, r.effective_computation_time, r.goodput_percentage) == (None, 0.0, 0.0)
    assert [m for m, _ in r.rows()][-1] == "Goodput Percentage"
    assert not math.isnan(r.total_runtime_seconds)


def test_import_badput_is_still_light() -> None:
    code = "import sys, badput; print(any(m.startswith('badput.compat') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_denominators_differ_when_events_lie_outside_the_attempts(tmp_path: Path) -> None:
    """The worked number of docs/compat.md ("The denominators")."""
    log = write(
        tmp_path / "log.jsonl",
        line("2025-01-01T00:00:00", "checkpoint_loaded", step=0),
        line("2025-01-01T00:00:10", "job_started"),
        line("2025-01-01T00:01:00", "checkpoint_saved", step=10),
        line("2025-01-01T00:01:10", "job_terminated"),
        line("2025-01-01T00:01:30", "checkpoint_saved", step=20),
    )
    r = resiliency_goodput(read_resiliency_log(log), 1.0)
    assert (r.total_runtime_seconds, round(r.goodput_percentage, 1)) == (90.0, 22.2)
    import_resiliency(log, JsonlStore(tmp_path / "s"))
    report = badput.analyze(tmp_path / "s", "j", ideal_step_time=1.0)
    assert report.total_seconds == pytest.approx(60.0)
    # the save of step 20 came after the attempt's end: ignored (ACCOUNTING.md §9.5)
    assert round(report.goodput * 100, 1) == 16.7
    assert "events_out_of_order" in {d.code for d in report.diagnostics}


# ------------------------------------------------- files that are not logs (issue 32)

#: A fresh interpreter that runs the command given as its arguments and prints, last, the
#: command's peak resident set in kB. A child of this small process: ``ru_maxrss`` survives
#: ``exec``, and a child of the test process would report the test process's own peak.
_PEAK = (
    "import resource, subprocess, sys; "
    "done = subprocess.run(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
    "sys.exit(done.returncode)"
)


def badput_cli(*args: str, timeout: float = 20.0) -> tuple[int, str, str, float, float]:
    """``badput ARGS`` in another process group (a hang fails the test, not the suite, and
    leaves nothing running): exit status, stdout (without the peak line), stderr, seconds
    taken, peak RSS in MB."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", _PEAK, sys.executable, "-m", "badput.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the command too, not only its parent
        proc.communicate()
        raise
    took = time.monotonic() - start
    *out, peak = stdout.splitlines()
    return proc.returncode, "\n".join(out), stderr, took, int(peak) / 1024


def resiliency_command(command: str, path: Path, tmp_path: Path) -> list[str]:
    if command == "import":
        return ["import", "resiliency", str(path), "--store", str(tmp_path / "store")]
    return ["report", "--resiliency", "--reference-step-time", "1", str(path)]


@pytest.mark.parametrize("command", ["import", "report"])
def test_a_fifo_is_refused_at_once(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)  # nobody writes to it: opening it to read blocked for ever
    code, out, err, took, _ = badput_cli(*resiliency_command(command, fifo, tmp_path))
    assert (code, out) == (2, "")
    assert f"{fifo}: a FIFO, not a regular file: not read" in err
    assert took < 10.0  # (an interpreter's start included)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("command", ["import", "report"])
def test_a_device_that_never_ends_is_refused_at_once(tmp_path: Path, command: str) -> None:
    # /dev/zero: one endless line without a newline (memory grew by 0.5 GB a second)
    code, out, err, took, peak = badput_cli(
        *resiliency_command(command, Path("/dev/zero"), tmp_path), timeout=5.0
    )
    assert (code, out) == (2, "")
    assert "/dev/zero: a character device, not a regular file: not read" in err
    assert took < 10.0
    assert peak < 200


def test_a_line_without_end_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:
        f.truncate(1 << 30)  # 1 GiB of NUL bytes, no newline (sparse: no disk taken)
    small = write(tmp_path / "small.jsonl", line("2025-01-01T00:00:00", "job_started"))
    code, out, err, _, peak = badput_cli(
        "import", "resiliency", str(big), str(small), "--store", str(tmp_path / "store")
    )
    # The read holds at most one line of MAX_LINE_BYTES (64 MiB): 91 MB at the peak. It
    # held the whole gigabyte, decoded too (2.15 GB).
    assert peak < 200
    assert code == 0, err
    assert f"{big}:1: line of 1,073,741,824 bytes, longer than 67,108,864: not read" in err
    assert "wrote 1 events of job 'j'" in out


def test_a_line_over_the_bound_is_a_problem_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = (3 << 20) + 5  # a few of the reader's 1 MiB blocks, and not a multiple of them
    monkeypatch.setattr(resiliency, "MAX_LINE_BYTES", bound)
    first = line("2025-01-01T00:00:00", "job_started")
    log = tmp_path / "log.jsonl"
    log.write_bytes(
        b"".join(
            [
                f"{first}\n".encode(),
                b"x" * (bound + 1) + b"\n",  # one byte over: skipped, named
                b" " * bound + b"\n",  # as long as may be: read (blank, so skipped)
                f"{line('2025-01-01T00:00:10', 'job_terminated')}\n".encode(),
                b"y" * (5 << 20),  # the last line, unterminated and over the bound
            ]
        )
    )
    problems: list[LogProblem] = []
    events = read_resiliency_log(log, problems=problems)
    assert [(e.event_type, e.line) for e in events] == [("job_started", 1), ("job_terminated", 4)]
    assert problems == [
        LogProblem(str(log), 2, f"line of {bound + 1:,} bytes, longer than {bound:,}: not read"),
        LogProblem(str(log), 5, f"line of {5 << 20:,} bytes, longer than {bound:,}: not read"),
    ]
    with pytest.raises(ResiliencyLogError, match=rf"{log}:2: line of"):
        read_resiliency_log(log)


def test_a_line_that_is_not_text_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    # json takes a lone surrogate escape; the import then failed writing it, with no file
    # or line ("'utf-8' codec can't encode character"), and report --resiliency with a
    # traceback.
    lone = '{"timestamp": "2025-01-01T00:00:05", "job_name": "j\\ud800", "event_type": "x"}'
    log = tmp_path / "log.jsonl"
    log.write_bytes(
        "\n".join(
            [
                line("2025-01-01T00:00:00", "job_started"),
                lone,
                line("2025-01-01T00:00:10", "checkpoint_saved", step=10),
                line("2025-01-01T00:00:20", "job_terminated"),
            ]
        ).encode()
        + b'\n{"timestamp": "2025-01-01T00:00:30", "job_name": "caf\xe9"}\n'
    )
    problems: list[LogProblem] = []
    events = read_resiliency_log(log, problems=problems)
    assert [e.line for e in events] == [1, 3, 4]
    surrogate = (
        "a lone surrogate escape \\ud800 at byte 52 of the line: half of a UTF-16 pair, "
        "not a character (UTF-8 cannot hold it)"
    )
    not_utf8 = "not valid UTF-8: byte 54 of the line (e9): invalid continuation byte"
    assert problems == [LogProblem(str(log), 2, surrogate), LogProblem(str(log), 5, not_utf8)]
    code, out, err = invoke("report", "--resiliency", "--reference-step-time", "1", str(log))
    assert code == 0, err
    assert f"{log}:2: {surrogate} (line skipped)" in err
    code, out, err = invoke("import", "resiliency", str(log), "--store", str(tmp_path / "s"))
    assert code == 0, err
    assert "wrote 4 events of job 'j'" in out
