"""What a first user types: an attempt directory, a typo, a window that misses, odd job names."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from badput.analysis import analyze
from badput.cli import main
from badput.engine import MAX_NAMED_BUCKETS
from badput.report import render_table
from badput.report._table import MAX_BUCKET_ROWS
from badput.report._watch import render_watch
from badput.store import JsonlStore, is_job_path, job_sources
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


def one_file_job(path: Path, job: str, steps: int, attempt: int | None = None) -> None:
    """A job (one attempt: ``attempt`` if given, else none) of ``steps`` steps of 1 s, that
    completes, in the one file ``path``."""
    tl = Timeline(job, start=T0)
    if attempt is not None:
        tl.identity["attempt"] = attempt
    tl.emit("job_start")
    tl.steps(steps, 1.0)
    tl.emit("job_end", status="completed")
    events_to_jsonl(path, tl.events)


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
def test_100_000_custom_names_are_grouped_into_one_row(tmp_path: Path) -> None:
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
    assert "custom:(99,980 others)" in out  # the 20 largest shown, the rest grouped
    assert out.count("custom:n") == MAX_NAMED_BUCKETS
    assert "99,980 custom names grouped into" in " ".join(out.split())
    from badput.monitor import Monitor

    mon = Monitor(None, tmp_path / "many", clock=lambda: T0 + 1000)
    snap = mon.run_once()
    mon.stop(final_flush=False)
    con = Console(file=io.StringIO(), width=120, record=True)
    con.print(render_watch(snap))
    watched = con.export_text()
    assert "custom:(99,980 others)" in watched, watched
    assert watched.count("custom:n") <= min(MAX_BUCKET_ROWS, MAX_NAMED_BUCKETS)


# ------------------------------------- renamed and copied job directories, odd names


def test_an_attempt_directory_of_a_renamed_copy_reports_the_whole_job(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    whole = analyze(root, "good")
    copy = tmp_path / "backup-of-good"
    (root / "good").rename(copy)
    for path in (copy / "0", copy / "1", copy):
        report = analyze(path)
        assert report.job == "good" and report.total_seconds == whole.total_seconds == 25.0
        assert report.buckets == whole.buckets and report.end_reason == "job_end"


def test_a_job_named_like_its_attempts(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store", job="0")  # <root>/0/0/..., <root>/0/1/...
    for path in (root, root / "0", root / "0" / "0", root / "0" / "1"):
        report = analyze(path)
        assert report.job == "0" and report.total_seconds == 25.0, path
        assert len(report.attempts) == 2


def test_job_given_for_an_attempt_directory_must_name_its_job(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    code, _, err = run("report", str(root / "good" / "0"), "--job", "other")
    assert code == 2 and "job 'good'" in err and "'other' was asked for" in err
    assert analyze(root / "good" / "0", "good").total_seconds == 25.0


def test_a_renamed_job_directory_in_a_store_is_read_by_either_name(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    (root / "good").rename(root / "renamed")
    for job in (None, "renamed", "good"):
        report = analyze(root, job)
        assert report.job == "good" and report.total_seconds == 25.0, job
        assert not [d for d in report.diagnostics if d.code in ("foreign_job", "empty_log")]
    a_job(root, "other", attempts=1)
    with pytest.raises(ValueError, match="several jobs"):
        analyze(root)
    assert analyze(root, "good").total_seconds == 25.0


def test_job_directories_not_named_as_the_recorder_names_them_are_jobs(tmp_path: Path) -> None:
    # Written by another tool: <root>/<job name as it is>/<stream>.jsonl
    root = tmp_path / "store"
    names = ["team\\llama", "x" * 200, "ok"]
    for name in names:
        one_file_job(root / name / "a.jsonl", name, 10)
    with pytest.raises(ValueError, match="several jobs"):
        analyze(root)
    for name in names:
        report = analyze(root, name)
        assert report.job == name and report.total_seconds == 10.0
        assert not [d for d in report.diagnostics if d.code == "foreign_job"]
    code, out, err = run("jobs", str(root), "--json")
    assert code == 0, err
    assert sorted(row["job"] for row in json.loads(out)) == sorted(names)
    assert {row["status"] for row in json.loads(out)} == {"completed"}


def test_jobs_lists_the_job_a_job_or_attempt_directory_or_file_holds_once(
    tmp_path: Path,
) -> None:
    root = a_job(tmp_path / "store")
    a_job(root, "other", attempts=1)
    code, out, _ = run("jobs", str(root), "--json")
    assert code == 0 and [r["job"] for r in json.loads(out)] == ["good", "other"]
    for path in (root / "good", root / "good" / "1", root / "good" / "1" / "h-0-1.jsonl"):
        code, out, err = run("jobs", str(path), "--json")
        assert code == 0, err
        rows = json.loads(out)
        assert [r["job"] for r in rows] == ["good"], path
        expected = 2 if path.suffix != ".jsonl" else 1  # a file holds its attempt only
        assert rows[0]["attempts"] == expected


def test_jobs_on_a_typo_fails_and_on_a_default_store_not_made_yet_says_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run("jobs", str(tmp_path / "typo"))
    assert code == 2 and "no such file or directory" in err
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BADPUT_STORE", raising=False)
    code, out, _ = run("jobs")
    assert code == 0 and out.startswith("no jobs in")
    monkeypatch.setenv("BADPUT_STORE", str(a_job(tmp_path / "store")))  # as the help says
    code, out, _ = run("jobs", "--json")
    assert code == 0 and [r["job"] for r in json.loads(out)] == ["good"]


def test_a_report_with_no_events_shows_no_span_dated_1970(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    for args in (["--now", "1000"], []):  # before the job began; an empty file
        path = root if args else tmp_path / "empty.jsonl"
        if not args:
            path.write_bytes(b"")
        code, out, err = run("report", str(path), *args)
        assert code == 0, err
        assert "1970" not in out and "none: no events to account for" in out
        assert "ended by" not in out


def test_watch_says_when_the_job_it_waits_for_is_not_in_the_store(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    badput = Path(sys.executable).with_name("badput")

    def first_words(job: str) -> tuple[str, str]:
        """Its first status line, and what it said on stderr before it (the note, if any)."""
        with subprocess.Popen(
            [str(badput), "watch", str(root), "--job", job, "--interval", "0.2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # piped: one status line per refresh
            proc.terminate()
            _, err = proc.communicate(timeout=10)
        return line, err

    line, err = first_words("nosuch")
    assert "nosuch: no events yet" in line
    assert "no job 'nosuch' in" in err and "(jobs: good); waiting for it to start" in err
    line, err = first_words("good")
    assert "good: goodput" in line and "no job" not in err


def test_a_flat_job_directory_named_like_its_attempt_is_its_job_s(tmp_path: Path) -> None:
    # <runs>/1/s.jsonl holds job x, attempt 1, beside <runs>/other of job y: not an
    # attempt's directory of a job kept in <runs> (which would read y's events as x's).
    runs = tmp_path / "runs"
    for name, job, attempt in (("1", "x", 1), ("other", "y", 0)):
        one_file_job(runs / name / "s.jsonl", job, 3, attempt)
    report = analyze(runs / "1")
    assert report.job == "x" and report.total_seconds == 3.0
    assert not [d for d in report.diagnostics if d.code == "foreign_job"]


def test_a_stray_file_of_another_job_renames_no_job(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    a_job(root, "other", attempts=1)
    stray = Timeline("zeta", start=T0)
    stray.identity["attempt"] = 0
    stray.emit("job_start")
    events_to_jsonl(root / "good" / "0" / "a-stray.jsonl", stray.events)  # sorts first
    for source, job in ((root, "good"), (root / "good", None), (root / "good" / "1", None)):
        report = analyze(source, job)
        assert report.job == "good" and report.total_seconds == 25.0, source
        assert len(report.attempts) == 2
    (root / "other").rename(tmp_path / "other")
    assert analyze(root).job == "good"  # the only job of the store, stray file or not


def test_a_lone_copy_or_link_of_an_attempt_directory_is_read_as_itself(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    scratch = tmp_path / "scratch"
    shutil.copytree(root / "good" / "1", scratch / "1")
    (scratch / "metrics.jsonl").write_text('{"not": "an event"}\n')
    (scratch / "notes").mkdir()
    (scratch / "notes" / "app.jsonl").write_text("plain text\n")
    copy = analyze(scratch / "1")
    assert copy.job == "good" and len(copy.attempts) == 1 and copy.total_seconds == 10.0
    assert not [d for d in copy.diagnostics if d.code == "malformed_line"]  # scratch unread
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "0").symlink_to(root / "good" / "0")
    linked = analyze(tmp_path / "links" / "0")
    assert linked.job == "good" and linked.total_seconds == 10.0


def test_job_given_as_an_attempt_of_a_job_directory_is_refused(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    with pytest.raises(ValueError, match="directory of job 'good', but job '0' was asked"):
        analyze(root / "good", "0")


def test_job_sources_of_a_store_object_reads_renamed_directories_as_their_jobs(
    tmp_path: Path,
) -> None:
    root = a_job(tmp_path / "store")
    (root / "good").rename(root / "renamed")
    for source in (root, str(root), JsonlStore(root)):
        ((store, job),) = job_sources(source)
        assert job == "good" and analyze(store, job).total_seconds == 25.0


def test_an_ancestor_named_like_the_job_is_not_its_directory(tmp_path: Path) -> None:
    # /tmp/<x>/.../store/renamed holding job <x>: the store, not /tmp/<x>, is read.
    job = tmp_path.name
    root = a_job(tmp_path / "deep" / "store", job=job)
    (root / job).rename(root / "renamed")
    (tmp_path / "junk.jsonl").write_text("not an event\n")
    for path in (root / "renamed", root / "renamed" / "0", root):
        report = analyze(path)
        assert report.job == job and report.total_seconds == 25.0, path
        assert not report.diagnostics, path


def test_a_job_directory_whose_first_sub_directories_are_empty(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store", job="team/llama")
    for k in range(10):
        (root / "team_llama" / f"+empty{k}").mkdir()  # (sorted before the attempts)
    (root / "team_llama").rename(root / "copy")
    for path in (root, root / "copy", root / "copy" / "1"):
        report = analyze(path)
        assert report.job == "team/llama" and report.total_seconds == 25.0, path


def test_a_stray_file_at_the_top_of_a_store_makes_no_job_of_it(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    a_job(root, "other", attempts=1)
    (root / "h-x-1.jsonl").write_text('{"ts":1,"kind":"job_start","job":"bad"}\n')
    code, out, err = run("jobs", str(root), "--json")
    assert code == 0, err
    assert [r["job"] for r in json.loads(out)] == ["good", "other"]
    with pytest.raises(ValueError, match="several jobs"):
        analyze(root)


def test_two_jobs_sharing_a_sanitised_directory_are_told_apart_by_job(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for job, attempt in (("team/llama", 0), ("team_llama", 1)):
        one_file_job(root / "team_llama" / str(attempt) / "h-0-1.jsonl", job, 4 + attempt, attempt)
    for job, seconds in (("team/llama", 4.0), ("team_llama", 5.0)):
        for source in (root, root / "team_llama"):
            report = analyze(source, job)
            assert (report.job, report.total_seconds) == (job, seconds), source


def test_analyze_of_a_store_object_reads_a_renamed_job_directory(tmp_path: Path) -> None:
    root = a_job(tmp_path / "store")
    (root / "good").rename(root / "renamed")
    for job in (None, "good", "renamed"):
        report = analyze(JsonlStore(root), job)
        assert report.job == "good" and report.total_seconds == 25.0, job


@pytest.mark.timeout(20)
def test_watch_of_a_job_directory_with_another_job_fails_at_once(tmp_path: Path) -> None:
    # No job "other" will start inside the directory of job "good": not waited for.
    root = a_job(tmp_path / "store")
    for path in (root / "good", root / "good" / "0"):
        code, _, err = run("watch", str(path), "--job", "other")
        assert code == 2, err
        assert "directory of job 'good', but job 'other' was asked for" in err
        assert "waiting" not in err
    assert is_job_path(root / "good") and is_job_path(root / "good" / "0" / "h-0-1.jsonl")
    assert not is_job_path(root) and not is_job_path(tmp_path / "empty-store-to-be")
    assert not is_job_path(f"file://{root}") and is_job_path(f"file://{root / 'good'}")


@pytest.mark.parametrize("attempt", [None, 0])
def test_flat_job_directories_under_other_names_in_one_directory_are_its_jobs(
    tmp_path: Path, attempt: int | None
) -> None:
    # <root>/dirA/a.jsonl of job alpha beside <root>/dirB/a.jsonl of job beta (another
    # tool's layout, or renamed): two jobs, not one job alpha with beta's events foreign.
    root = tmp_path / "runs"
    one_file_job(root / "dirA" / "a.jsonl", "alpha", 4, attempt)
    one_file_job(root / "dirB" / "a.jsonl", "beta", 6, attempt)
    with pytest.raises(ValueError, match="several jobs"):
        analyze(root)
    for job, seconds in (("alpha", 4.0), ("beta", 6.0)):
        report = analyze(root, job)
        assert report.job == job and report.total_seconds == seconds
        assert not [d for d in report.diagnostics if d.code == "foreign_job"]
    assert analyze(root, "dirB").job == "beta"  # by its directory's name too
    assert analyze(root / "dirA").job == "alpha"
    code, out, err = run("jobs", str(root), "--json")
    assert code == 0, err
    assert [row["job"] for row in json.loads(out)] == ["alpha", "beta"]


# ------------------------------------------------ output files that are FIFOs (issue 32)


def badput_process(*args: str) -> tuple[int, str, float]:
    """``badput ARGS`` in another process (a hang fails this test, not the suite): exit
    status, stderr, seconds taken."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "badput.cli", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode, done.stderr, time.monotonic() - start


@pytest.mark.parametrize("command", ["report --html", "export trace", "export csv"])
def test_an_output_fifo_nobody_reads_fails_at_once(tmp_path: Path, command: str) -> None:
    job = str(a_job(tmp_path / "store") / "good")
    fifo = tmp_path / "out"
    if command == "export csv":  # a FIFO where one of the CSV files goes
        fifo.mkdir()
        fifo = fifo / "attempts.csv"
        args = ["export", "csv", job, str(fifo.parent)]
    elif command == "export trace":
        args = ["export", "trace", job, str(fifo)]
    else:
        args = ["report", job, "--html", str(fifo)]
    os.mkfifo(fifo)
    code, err, took = badput_process(*args)  # it blocked for ever, opening the FIFO
    assert code == 2
    assert f"a FIFO that no process is reading (start its reader first): '{fifo}'" in err
    assert took < 10.0  # (an interpreter's start and the report included)


def test_an_output_fifo_with_its_reader_is_written(tmp_path: Path) -> None:
    job = str(a_job(tmp_path / "store") / "good")
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, err, _ = badput_process("export", "trace", job, str(fifo))
    reader.join(timeout=10)
    if reader.is_alive():  # never opened: let the reader go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert code == 0, err
    code, err, _ = badput_process("export", "trace", job, str(tmp_path / "trace.json"))
    assert code == 0, err
    assert got == [(tmp_path / "trace.json").read_bytes()]
    assert len(json.loads(got[0])["traceEvents"]) > 20
    code, err, _ = badput_process("report", job, "--html", os.devnull)  # a device: as before
    assert code == 0, err
    assert f"wrote {os.devnull}" in err
