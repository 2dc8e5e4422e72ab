"""`badput report` and `badput watch` at 80 and 120 columns: narrower, never cut."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from _browser import ensure_debian
from badput.analysis import analyze
from badput.engine import AttemptSummary
from badput.report import JobRow, render_jobs, render_table
from badput.report._watch import render_watch
from badput.testing import Timeline, events_to_jsonl
from test_report_view import T0, worked_example_report
from test_watch import JOB, job, snapshots
from test_watch import T0 as WATCH_T0

WIDTHS = (80, 120)


def big_steps_report() -> object:
    return worked_example_report(
        attempts=[
            AttemptSummary(
                id="attempt-0",
                start=T0,
                end=T0 + 6000,
                end_reason="attempt_end:crashed",
                restore_step=None,
                first_step=1,
                last_step=12000,
                status="crashed",
                exit_code=137,
            ),
            AttemptSummary(
                id="attempt-1",
                start=T0 + 6500,
                end=T0 + 12000,
                end_reason="job_end",
                restore_step=11000,
                first_step=1200,
                last_step=1_200_000,
                status="completed",
            ),
        ]
    )


def text_at(width: int, draw: object) -> str:
    """What ``draw`` prints on a ``width``-column screen, tall enough for all of it."""
    console = Console(record=True, width=width, height=100, file=io.StringIO(), color_system=None)
    if callable(draw):
        draw(console)
    return console.export_text()


@pytest.mark.parametrize("width", WIDTHS)
def test_report_attempts_fit_and_keep_every_number(width: int) -> None:
    report = big_steps_report()
    text = text_at(width, lambda con: render_table(report, console=con))  # type: ignore[arg-type]
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    lines = text.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("id "))
    assert "ended by" in header
    row0 = next(line for line in lines if line.lstrip().startswith("attempt-0"))
    row1 = next(line for line in lines if line.lstrip().startswith("attempt-1"))
    assert row0.split()[-3:] == ["-", "1", "12000"]
    assert row1.split()[-3:] == ["11000", "1200", "1200000"]
    assert "crashed (exit" in text
    assert "137)" in text
    if width >= 110:
        assert "attempt_end:crashed (exit 137)" in row0
        assert "2024-11-19T07:06:40Z" in row0
    else:  # the date is in the header's span; the row keeps the time of day
        assert "07:06:40" in row0
        assert "2024-11-19T07:06:40Z" not in row0


@pytest.mark.parametrize("width", WIDTHS)
def test_watch_buckets_fit_without_ellipsis(width: int) -> None:
    tl = job(slow_steps=3, restart=True)
    first, last = snapshots(tl, [WATCH_T0 + 60, WATCH_T0 + 200])
    text = text_at(width, lambda con: con.print(render_watch(last, first)))
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    for name in ("productive", "untracked", "recovery", "checkpoint_restore", "accelerator_init"):
        assert any(line.lstrip().startswith(name + " ") for line in text.splitlines()), name
    untracked = next(line for line in text.splitlines() if line.lstrip().startswith("untracked"))
    assert untracked.split()[1:4] == ["1m", "50s", "55.0%"]
    assert ("down between attempts" in text) == (width >= 110)


def watch_screen(tl: Timeline, height: int) -> list[str]:
    first, last = snapshots(tl, [WATCH_T0 + 60, WATCH_T0 + 200])
    console = Console(record=True, width=80, height=height, file=io.StringIO(), color_system=None)
    console.print(render_watch(last, first))
    return console.export_text().rstrip("\n").splitlines()


def bucket_rows(lines: list[str]) -> list[str]:
    rows = [line.split()[0] for line in lines if line.startswith(" ") and "%   " in line]
    return [r for r in rows if r != "bucket"]


@pytest.mark.parametrize("customs", [0, 6])
def test_watch_fits_an_80x24_screen_folding_what_does_not_fit(customs: int) -> None:
    tl = job(slow_steps=3, restart=True)
    for i in range(customs):  # more buckets than 24 rows can show under the summary
        tl.span("custom", 1.0 + i, name=f"eval{i}")
    lines = watch_screen(tl, 24)
    assert len(lines) <= 24
    assert lines[-1].startswith("refreshed ")  # the last line is not pushed off the screen
    assert "…" not in "\n".join(lines)
    rows = bucket_rows(lines)
    assert rows[0] == "productive"
    n_buckets = 7 + customs
    if rows[-1].startswith("("):  # "(N more)": the smallest buckets folded into one row
        shown = len(rows) - 1
        assert rows[-1] == f"({n_buckets - shown}"
        assert 24 - len(lines) <= 1  # folded only because the screen is full
    else:
        assert len(rows) == n_buckets
    if customs:
        assert rows[-1].startswith("(")  # 13 buckets never fit under the summary in 24 rows
    tall = watch_screen(tl, 60)
    assert len(bucket_rows(tall)) == 7 + customs  # a tall screen shows every bucket


def test_badput_watch_in_an_80x24_tmux(tmp_path: Path) -> None:
    """As a person runs it: `badput watch` in a real 80x24 terminal (tmux)."""
    reason = ensure_debian(["tmux"], ["/usr/bin/tmux"])
    if reason is not None:
        pytest.skip(reason)
    tmux = "/usr/bin/tmux"
    tl = job(slow_steps=3, restart=True, finished=True)
    path = events_to_jsonl(tmp_path / JOB / "0" / "h-0-1.jsonl", tl.events)
    badput = Path(sys.executable).with_name("badput")
    session = f"badput-watch-{os.getpid()}"
    # (the job has ended: watch draws its last frame and exits; the shell keeps the pane)
    cmd = f"{badput} watch {path.parent.parent} --interval 0.5; sleep 60"
    subprocess.run(
        [tmux, "new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd], check=True
    )
    try:
        screen = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            screen = subprocess.run(
                [tmux, "capture-pane", "-p", "-t", session],
                check=False,
                capture_output=True,
                text=True,
            ).stdout
            if "refreshed" in screen and "badput watch: watched ended: " in screen:
                break
            time.sleep(0.2)
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], check=False, capture_output=True)
    lines = screen.rstrip("\n").splitlines()
    assert any(line.startswith("refreshed ") for line in lines), screen
    assert "…" not in screen and "..." not in screen, screen
    assert "finished (completed)" in screen
    # and it exited, saying so on one line (issue 39)
    assert any(line.startswith("badput watch: watched ended: ") for line in lines), screen
    assert any(line.split()[:1] == ["productive"] for line in lines), screen
    assert max(len(line) for line in lines) <= 80


LONG = "a_really_long_custom_interval_name_that_goes_on_and_on_" * 2


@pytest.mark.parametrize("width", WIDTHS)
def test_a_long_bucket_name_folds_and_takes_no_figure_away(width: int, tmp_path: Path) -> None:
    # A name of 80 characters made rich drop the time and share columns at 80 columns.
    tl = Timeline("wide", start=T0)
    tl.emit("job_start")
    tl.steps(19, 1.0)
    tl.span("custom", 5.0, name=LONG)
    tl.emit("job_end", status="completed")
    report = analyze(events_to_jsonl(tmp_path / "wide.jsonl", tl.events))
    text = text_at(width, lambda con: render_table(report, console=con))  # type: ignore[arg-type]
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    custom = next(line for line in text.splitlines() if "custom:a_really" in line)
    assert "5.0s" in custom and "20.8%" in custom and "█" in custom
    productive = next(line for line in text.splitlines() if line.lstrip().startswith("productive"))
    assert productive.split()[1:3] == ["19.0s", "79.2%"]
    lines = text.splitlines()
    at = lines.index(custom)
    folded = [line.split()[0] for line in lines[at : at + 8] if line.strip()]
    assert "".join(folded).startswith("custom:" + LONG)  # folded, whole


@pytest.mark.parametrize("width", WIDTHS)
def test_the_job_list_folds_long_names_and_statuses_and_cuts_no_figure(width: int) -> None:
    rows = [
        JobRow(LONG, "completed_" + LONG, T0, 24.0, 0.792, 0.8, 12345, T0 + 24),
        JobRow("j", "running", T0, 3600.0, 1.0, 1.0, 1, T0 + 3600),
    ]
    text = text_at(width, lambda con: render_jobs(rows, con))
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    first = next(line for line in text.splitlines() if line.lstrip().startswith("a_really"))
    figures = first.split()[3 if width >= 110 else 2 :]
    assert figures[:4] == ["24.0s", "79.2%", "80.0%", "12345"]
    last = "2024-11-19T07:07:04Z" if width >= 110 else "11-19 07:07:04"
    assert first.rstrip().endswith(last)
    lines = text.splitlines()
    at = lines.index(first)
    parts = [line.split() for line in lines[at : at + 12] if line.strip()]
    assert "".join(p[0] for p in parts).startswith(LONG)  # the job, folded, whole


def _attempts_of(ids: list[str], steps: list[int]) -> object:
    return worked_example_report(
        attempts=[
            AttemptSummary(
                id=attempt_id,
                start=T0 + 100 * k,
                end=T0 + 100 * k + 90,
                end_reason="attempt_end:crashed" if k < len(ids) - 1 else "job_end",
                restore_step=None if k == 0 else step // 2,
                first_step=step // 2 if k else 0,
                last_step=step,
                status="crashed" if k < len(ids) - 1 else "completed",
                exit_code=137 if k < len(ids) - 1 else None,
            )
            for k, (attempt_id, step) in enumerate(zip(ids, steps, strict=True))
        ]
    )


def test_default_attempt_ids_and_steps_past_1000_keep_every_column_at_80() -> None:
    # Default ids, <UTC start>-<pid>: before, the `last` column was dropped at 80 columns
    # (shown as `l` / `1`).
    ids = ["20261129T004500-41230", "20261129T004501-41231"]
    report = _attempts_of(ids, [1499, 123_451])
    text = text_at(80, lambda con: render_table(report, console=con))  # type: ignore[arg-type]
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    header = next(line for line in text.splitlines() if line.lstrip().startswith("id "))
    assert header.split()[-4:] == ["by", "restored", "first", "last"]
    assert "1499" in text.split() and "123451" in text.split()
    flat = text.replace("\n", "")
    assert all(i[:13] in flat for i in ids)  # the ids fold, whole, over two lines


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(
        st.text(alphabet="0123456789TZ-abcdefgh.", min_size=1, max_size=40),
        min_size=1,
        max_size=4,
        unique=True,
    ),
    magnitude=st.integers(min_value=0, max_value=9),  # up to ten-digit steps (10 billion)
)
def test_the_attempts_table_fits_80_columns_and_cuts_no_number(
    ids: list[str], magnitude: int
) -> None:
    steps = [10**magnitude + k for k in range(len(ids))]
    report = _attempts_of(ids, steps)
    text = text_at(80, lambda con: render_table(report, console=con))  # type: ignore[arg-type]
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    words = text.split()
    for step in steps:  # every last step, whole
        assert str(step) in words
    assert "…" not in text


def test_the_ranks_table_fits_80_columns_and_cuts_no_number(tmp_path: Path) -> None:
    from badput.recorder import Recorder
    from badput.report._ranks import render_ranks

    for rank in range(4):  # long host names, steps past 100,000, a slower rank 2
        t = 1_764_000_000.0
        rec = Recorder(
            "r80",
            tmp_path,
            attempt="20261129T004500-41230",
            rank=rank,
            host=f"node-{rank:03d}.cluster.example.com",
            heartbeat_interval=0,
        )
        rec.record_job_start(ts=t)
        for s in range(100_000, 100_300):
            rec.record_step_start(s, ts=t)
            t += 0.5 + (0.3 if rank == 2 and s % 7 == 0 else 0.0)
            rec.record_step_end(s, ts=t)
        rec.close()
    report = analyze(tmp_path, "r80", now=1_764_000_000.0 + 400)
    text = text_at(80, lambda con: render_ranks(report, con, full=True))
    table = text[text.index("Ranks (outliers first)") : text.index("  all:")]
    assert max(len(line.rstrip()) for line in table.splitlines()) <= 80
    assert "…" not in table  # before: ra…, ste…, 1002…, 500…, node-000.cluster.example.c…
    rows = [line.split() for line in table.splitlines() if line.split()[:1] in (["0"], ["2"])]
    assert [r[2:4] for r in rows] == [["300", "100299"], ["300", "100299"]]
    assert "".join(line[8:20].strip() for line in table.splitlines()).count("example.com") == 4
    # the step column is what it is: start to start, loading included (issue 39), and says so
    header = next(line.split() for line in table.splitlines() if line.split()[:1] == ["rank"])
    assert header[4:6] == ["cycle", "load"]
    assert "cycle: median step_start to step_start (loading included)" in table
