"""The ``badput`` command: click's CliRunner, plus one real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from _worked_example import EXPECTED_MINUTES, JOB, MIN, T0, worked_example_events
from badput import __version__
from badput.cli import main, parse_timestamp
from badput.events import Event
from badput.formats.codec import encode_lines
from badput.store import JsonlStore


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store root holding the worked example of ACCOUNTING.md §7."""
    root = tmp_path / "runs"
    path = root / JOB / "0" / "h-0-1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(worked_example_events()))
    return root


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_version() -> None:
    code, out, _ = invoke("--version")
    assert code == 0
    assert __version__ in out


def test_help_lists_commands() -> None:
    code, out, _ = invoke("--help")
    assert code == 0
    for command in ("demo", "report", "run"):
        assert command in out


def test_report_json_reproduces_the_worked_example(store: Path) -> None:
    code, out, err = invoke("report", str(store), "--json", "--ideal-step-time", "120")
    assert code == 0, err
    data = json.loads(out)
    assert data["job"] == JOB
    assert data["end_reason"] == "job_end"
    assert data["total_seconds"] == pytest.approx(200 * MIN)
    assert data["goodput"] == pytest.approx(0.5)
    assert data["observed_goodput"] == pytest.approx(0.625)
    for bucket, minutes in EXPECTED_MINUTES.items():
        assert data["buckets"][bucket] == pytest.approx(minutes * MIN), bucket
    assert data["ideal_step_time_source"] == "configured"
    assert [str(a["id"]) for a in data["attempts"]] == ["0", "1"]
    assert data["steps"]["wasted"] == 20


def test_report_table_from_root_job_dir_and_single_file(store: Path) -> None:
    single = store / JOB / "0" / "h-0-1.jsonl"
    for path in (store, store / JOB, single):
        code, out, err = invoke("report", str(path), "--ideal-step-time", "120")
        assert code == 0, err
        assert JOB in out
        assert "50.0%" in out  # goodput
        assert "1h 40m" in out  # productive
        assert "40m 00s" in out  # wasted


def test_report_window_and_now(store: Path) -> None:
    a = datetime.fromtimestamp(T0 + 100 * MIN, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    b = str(T0 + 120 * MIN)
    code, out, err = invoke("report", str(store), "--json", "--window", a, b)
    assert code == 0, err
    data = json.loads(out)
    assert data["total_seconds"] == pytest.approx(20 * MIN)
    assert data["buckets"]["recovery"] == pytest.approx(15 * MIN)
    assert data["buckets"]["checkpoint_restore"] == pytest.approx(5 * MIN)
    assert data["window"] == [pytest.approx(T0 + 100 * MIN), pytest.approx(T0 + 120 * MIN)]

    code, out, err = invoke("report", str(store), "--json", "--now", str(T0 + 300 * MIN))
    assert code == 0, err
    assert json.loads(out)["job"] == JOB


def one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("badput report: error: ")
    return lines[0]


def test_report_bad_path_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    line = one_line_error(*invoke("report", str(missing)))
    assert str(missing) in line
    empty = tmp_path / "empty"
    empty.mkdir()
    line = one_line_error(*invoke("report", str(empty)))
    assert "no .jsonl" in line


def test_report_job_problems_are_one_line_and_exit_2(store: Path) -> None:
    line = one_line_error(*invoke("report", str(store), "--job", "nope"))
    assert "nope" in line
    assert JOB in line  # says which jobs there are
    other = store / "other" / "0" / "h-0-1.jsonl"
    other.parent.mkdir(parents=True)
    other.write_bytes(encode_lines([Event(ts=T0, kind="job_start", job="other", attempt="0")]))
    line = one_line_error(*invoke("report", str(store)))
    assert "several jobs" in line
    code, out, _ = invoke("report", str(store), "--job", "other", "--json")
    assert code == 0
    assert json.loads(out)["job"] == "other"


def test_report_bad_options_exit_2(store: Path) -> None:
    code, _, err = invoke("report", str(store), "--now", "yesterday-ish")
    assert code == 2
    assert "not a time" in err
    code, _, err = invoke("report", str(store), "--window", str(T0 + 10), str(T0))
    assert code == 2
    assert "start must be before the end" in err
    code, _, _ = invoke("report", str(store), "--ideal-step-time", "0")
    assert code == 2


def test_report_attempts_option(store: Path) -> None:
    code, out, _ = invoke("report", str(store), "--attempts", "1")
    assert code == 0
    assert "1 of 2 attempts not listed (--attempts all lists them" in out
    for value in ("all", "ALL", "2"):
        code, out, _ = invoke("report", str(store), "--attempts", value)
        assert code == 0
        assert "not listed" not in out
    for bad in ("0", "-3", "many", ""):
        code, _, err = invoke("report", str(store), "--attempts", bad)
        assert code == 2
        assert "expected a positive number or 'all'" in err


def test_parse_timestamp() -> None:
    assert parse_timestamp("1732000000.5") == 1732000000.5
    assert parse_timestamp("2024-11-19T07:06:40Z") == T0
    assert parse_timestamp("2024-11-19T07:06:40") == T0  # no zone: UTC
    assert parse_timestamp("2024-11-19T08:06:40+01:00") == T0
    now = parse_timestamp("now")
    assert abs(now - datetime.now(tz=timezone.utc).timestamp()) < 60
    for bad in ("nan", "inf", "tomorrow", ""):
        with pytest.raises(ValueError):
            parse_timestamp(bad)


def lifecycle(root: Path, job: str) -> list[tuple[str, str, str | None, int | None]]:
    result = JsonlStore(root).read(job)
    evs = sorted(
        (i for c in result.chunks for i in c.items if isinstance(i, Event)), key=lambda e: e.ts
    )
    return [
        (e.kind, str(e.attempt), e.status, e.exit_code)
        for e in evs
        if e.kind in ("job_start", "attempt_end", "job_end")
    ]


def test_run_passes_the_command_through_and_exits_with_its_status(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    code, _, err = invoke(
        "run",
        "--job",
        "j",
        "--store",
        str(root),
        "--max-restarts",
        "1",
        "--",
        sys.executable,
        "-c",
        "import sys; sys.exit(int(sys.argv[1]))",
        "4",  # an argument of the command, not of badput
    )
    assert code == 4
    assert "badput run: attempt 1: failed with exit code 4; no restarts left" in err
    assert lifecycle(root, "j") == [
        ("job_start", "0", None, None),
        ("attempt_end", "0", "failed", 4),
        ("job_start", "1", None, None),
        ("attempt_end", "1", "failed", 4),
        ("job_end", "1", "failed", None),
    ]


def test_run_options_after_the_command_belong_to_the_command(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    out = tmp_path / "argv.json"
    code, _, err = invoke(
        "run",
        "--job",
        "j",
        "--store",
        str(root),
        sys.executable,
        "-c",
        f"import json, sys; json.dump(sys.argv[1:], open({str(out)!r}, 'w'))",
        "--job",
        "--max-restarts",
    )
    assert code == 0, err
    assert json.loads(out.read_text()) == ["--job", "--max-restarts"]
    assert lifecycle(root, "j")[-1] == ("job_end", "0", "completed", None)


def test_run_needs_a_command() -> None:
    code, _, err = invoke("run", "--job", "j")
    assert code == 2
    assert "COMMAND" in err


def test_installed_entry_point_runs() -> None:
    exe = Path(sys.executable).parent / "badput"
    result = subprocess.run(
        [str(exe), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "report" in result.stdout
    assert "demo" in result.stdout
    version = subprocess.run(
        [str(exe), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert __version__ in version.stdout


def test_installed_report_ends_without_freeing_its_state_and_loses_no_output(
    store: Path,
) -> None:
    """`badput report` leaves the job's state to the process exit (os._exit after a flush):
    the whole output arrives, through a pipe and through a file, with the command's status."""
    exe = Path(sys.executable).parent / "badput"
    as_json = subprocess.run(
        [str(exe), "report", str(store), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["job"] == JOB  # one whole JSON object
    table = subprocess.run(
        [str(exe), "report", str(store)], capture_output=True, text=True, timeout=120, check=False
    )
    assert table.returncode == 0, table.stderr
    assert "ideal step time" in table.stdout.splitlines()[-1]  # the last line is there
    missing = subprocess.run(
        [str(exe), "report", str(store / "nothing-here")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert missing.returncode == 2
    assert "badput report: error:" in missing.stderr


def test_run_leaves_state_to_the_exit_only_for_the_real_command() -> None:
    """Inside another program (CliRunner, a test), nothing is kept for an exit that never
    comes: the state is freed as usual."""
    from badput.cli import _commands as cli

    assert cli._left_for_exit is None
    cli._leave_for_exit(object())
    assert cli._left_for_exit is None
