"""`badput report` and `badput watch` at 80 and 120 columns: narrower, never cut."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from badput.engine import AttemptSummary
from badput.report import render_table
from badput.report._watch import render_watch
from test_report_view import T0, worked_example_report
from test_watch import T0 as WATCH_T0
from test_watch import job, snapshots

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
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
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
