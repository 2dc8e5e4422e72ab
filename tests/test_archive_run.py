"""``badput run --compact``: the job's archive written when the job is over, whatever its exit;
a compaction that fails is said and changes neither the exit status nor the event files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from badput.cli import main
from badput.launcher import Launcher
from badput.store import ARCHIVE_NAME, ArchivedStore, open_source, read_meta

pytest.importorskip("pyarrow")

BADPUT = Path(sys.executable).with_name("badput")
JOB = "cj"

#: Ten steps with a data load in each, recorded by the command's own recorder, then exit N.
_STEPS = """
import sys
from badput import Recorder
rec = Recorder()
for step in range(10):
    with rec.step(step):
        with rec.data_loading():
            pass
rec.close()
sys.exit({code})
"""


def _command(code: int) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(_STEPS.format(code=code))]


def _report(path: Path) -> str:
    result = CliRunner().invoke(main, ["report", "--json", str(path)])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def _jsonl_report(job_dir: Path) -> str:
    """The report of the job's JSON lines alone (its archive moved away meanwhile)."""
    archive = job_dir / ARCHIVE_NAME
    aside = job_dir.parent / "aside.parquet"
    archive.rename(aside)
    try:
        return _report(job_dir)
    finally:
        aside.rename(archive)


@pytest.mark.parametrize("code", [0, 3])
def test_run_compact_writes_the_archive_whatever_the_exit(tmp_path: Path, code: int) -> None:
    runs = tmp_path / "runs"
    cmd = [str(BADPUT), "run", "--compact", "--job", JOB, "--store", str(runs), "--"]
    done = subprocess.run([*cmd, *_command(code)], capture_output=True, text=True, check=False)
    assert done.returncode == code, done.stderr
    job_dir = runs / JOB
    archive = job_dir / ARCHIVE_NAME
    assert archive.is_file(), done.stderr
    said = [line for line in done.stderr.splitlines() if "archive" in line]
    assert said == [
        f"badput run: archive {archive}: {archive.stat().st_size:,} bytes for "
        + said[0].split(" bytes for ")[1]
    ], done.stderr
    # every event of the job is in it: the launcher's job_end came before the compaction
    meta = read_meta(archive)
    covered = sum(int(b) for _, b, _ in meta["streams"])
    assert covered == sum(p.stat().st_size for p in job_dir.rglob("*.jsonl"))
    assert meta["rows"] == sum(len(p.read_bytes().splitlines()) for p in job_dir.rglob("*.jsonl"))
    store, name = open_source(job_dir)
    assert isinstance(store, ArchivedStore) and name == JOB
    from_archive = _report(job_dir)
    assert from_archive == _jsonl_report(job_dir)
    attempt = json.loads(from_archive)["attempts"][0]
    assert (attempt["last_step"], attempt["status"]) == (9, "completed" if code == 0 else "failed")


def test_run_compact_failure_is_said_and_changes_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    # the archive's temporary file cannot be made: a directory of its name is in the way
    (runs / JOB / (ARCHIVE_NAME + ".tmp")).mkdir(parents=True)
    cmd = [str(BADPUT), "run", "--compact", "--job", JOB, "--store", str(runs), "--"]
    done = subprocess.run([*cmd, *_command(5)], capture_output=True, text=True, check=False)
    assert done.returncode == 5, done.stderr
    assert f"badput run: cannot compact job {JOB!r}:" in done.stderr
    assert "the event files are as they were" in done.stderr
    assert not (runs / JOB / ARCHIVE_NAME).exists()
    shutil.rmtree(runs / JOB / (ARCHIVE_NAME + ".tmp"))
    report = json.loads(_report(runs / JOB))  # the JSON lines are whole: every event
    assert (report["attempts"][0]["last_step"], report["end_reason"]) == (9, "job_end")


def test_launcher_compact_option(tmp_path: Path) -> None:
    said: list[str] = []
    result = Launcher(_command(0), JOB, tmp_path / "runs", compact=True, on_event=said.append).run()
    assert result.exit_code == 0
    assert result.archive == str(tmp_path / "runs" / JOB / ARCHIVE_NAME)
    assert Path(result.archive).is_file()
    assert any(m.startswith(f"archive {result.archive}: ") for m in said), said
    plain = Launcher(_command(0), "other", tmp_path / "runs").run()
    assert plain.archive is None
    assert not (tmp_path / "runs" / "other" / ARCHIVE_NAME).exists()
