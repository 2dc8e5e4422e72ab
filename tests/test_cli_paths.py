"""What a first user types: an attempt directory, a typo, a window that misses, odd job names."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from badput.analysis import analyze
from badput.cli import main
from badput.report import render_table
from badput.report._table import MAX_BUCKET_ROWS
from badput.report._watch import render_watch
from badput.testing import Timeline, events_to_jsonl

T0 = 1_732_000_000.0


def a_job(root: Path, job: str = "good", attempts: int = 2) -> Path:
    tl = Timeline(job, start=T0)
    for a in range(attempts):
        tl.identity["attempt"] = a
        tl.emit("job_start", dt=5.0 if a else 0.0)
        tl.steps(10, 1.0)
        if a + 1 < attempts:
            tl.emit("attempt_end", status="failed", exit_code=1)
    tl.emit("job_end", status="completed")
    for a in range(attempts):
        events_to_jsonl(
            root / job.replace("/", "_") / str(a) / "h-0-1.jsonl",
            [e for e in tl.events if e.attempt == a],
        )
    return root


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_an_attempt_directory_reports_its_job(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    whole = analyze(root, "good")
    assert whole.total_seconds == 25.0
    for path in (root / "good" / "0", root / "good" / "1"):
        report = analyze(path)
        assert report.job == "good" and report.start == T0  # not a job "0" dated 1970
        assert report.buckets == whole.buckets
    code, out, err = run("report", str(root / "good" / "0"))
    assert code == 0, err
    assert "1970" not in out and "2024-11-19T07:06:40" in out


def test_a_store_root_under_a_directory_named_like_the_job(tmp_path: Path) -> None:
    root = a_job(tmp_path / "good" / "runs")  # /.../good/runs/good/0/...: still a store root
    assert analyze(root, "good").total_seconds == 25.0


def test_a_stray_file_in_the_store_root_does_not_hide_the_jobs(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    a_job(root, "other", attempts=1)
    (root / "h-x-1.jsonl").write_text('{"ts":1,"kind":"job_start","job":"bad"}\n')
    code, out, err = run("report", str(root), "--job", "good")
    assert code == 0, err
    assert "good" in out


def test_a_job_name_with_a_slash(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store", job="team/llama")
    for job in ("team/llama", "team_llama"):
        report = analyze(root, job)
        assert report.job == "team/llama" and report.total_seconds == 25.0
    assert analyze(root / "team_llama").job == "team/llama"
    renamed = root / "renamed"
    (root / "team_llama").rename(renamed)
    assert analyze(renamed).total_seconds == 25.0  # a copied/renamed job directory


@pytest.mark.timeout(20)
def test_watch_on_a_typo_fails_at_once(tmp_path: Path) -> None:
    typo = str(tmp_path / "typo")
    for args in (["watch", typo], ["watch", typo, "--job", "x"]):
        code, _, err = run(*args)
        assert code == 2
        assert err.startswith("badput watch: error:") and "no such file" in err
        assert err.count("\n") == 1


@pytest.mark.timeout(20)
def test_a_fifo_given_as_the_path_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    for command in ("report", "watch"):
        code, _, err = run(command, str(fifo))
        assert code == 2
        assert "not a regular file" in err


def test_a_window_that_misses_the_job_says_so(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    window = ("2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z")
    code, out, err = run("report", str(root), "--job", "good", "--window", *window)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "the window 2024-01-01T00:00:00.000Z → 2024-01-02T00:00:00.000Z" in flat
    assert "the job's span 2024-11-19T07:06:40.000Z → 2024-11-19T07:07:05.000Z do not meet" in flat
    code, out, err = run("report", str(root), "--job", "good", "--window", *window, "--json")
    assert code == 0 and '"total_seconds": 0.0' in out
    assert "do not meet" in err


@pytest.mark.slow
def test_100_000_custom_names_fold_into_one_row(tmp_path: Path) -> None:
    tl = Timeline("many", start=T0)
    tl.emit("job_start")
    for i in range(100_000):
        tl.span("custom", 0.001 * (1 + i % 7), name=f"n{i}")
    tl.emit("job_end")
    events_to_jsonl(tmp_path / "many" / "0" / "h.jsonl", tl.events)
    report = analyze(tmp_path / "many")
    assert len(report.buckets) == 100_000
    con = Console(file=io.StringIO(), width=160, record=True)
    render_table(report, con)
    out = con.export_text()
    assert f"({100_000 - MAX_BUCKET_ROWS + 1:,} more)" in out
    assert out.count("custom:n") <= 2 * MAX_BUCKET_ROWS
    from badput.monitor import Monitor

    mon = Monitor(None, tmp_path / "many", clock=lambda: T0 + 1000)
    snap = mon.run_once()
    mon.stop(final_flush=False)
    con = Console(file=io.StringIO(), width=120, record=True)
    con.print(render_watch(snap))
    watched = con.export_text()
    folded = re.search(r"\(([0-9,]+) more\)", watched)
    assert folded is not None and int(folded.group(1).replace(",", "")) > 99_000
    assert watched.count("custom:n") <= MAX_BUCKET_ROWS
