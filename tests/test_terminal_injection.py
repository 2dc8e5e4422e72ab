"""Everything read from a log reaches a terminal as inert text: no control sequence, no markup.

A log whose job name, attempt ids, statuses, event names, unknown kinds and file
names carry terminal controls (set the title, clear the screen, a bidi override)
and rich markup (a hyperlink) is shown by ``badput report`` and ``badput watch``.
The output may hold rich's own colour codes (SGR) and nothing else.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from badput.analysis import analyze
from badput.monitor import Monitor
from badput.report import render_table
from badput.report._format import inert
from badput.report._watch import render_watch, run_watch, status_line

T0 = 1_732_000_000.0
TITLE = "\x1b]0;pwned\x07"  # sets the window title
CLEAR = "\x1b[2J"  # clears the screen
LINK = "[link=https://evil.example]CLICK[/link]"  # rich markup: a clickable link
C1 = "\x9b31m"  # the one-byte CSI of C1 controls
BIDI = "\u202e"  # right-to-left override
HOSTILE = f"{TITLE}{CLEAR}{LINK}{C1}{BIDI}[bold red]x[/]"

JOB = f"job{TITLE}{LINK}"
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own styling: the only escapes allowed


def hostile_log(root: Path) -> Path:
    """A crashed and restarted job whose every free-text field is hostile."""

    def ev(ts: float, kind: str, attempt: str, **fields: object) -> str:
        obj = {"ts": T0 + ts, "kind": kind, "job": JOB, "attempt": attempt, "rank": 0, **fields}
        return json.dumps(obj, ensure_ascii=False)

    a0, a1 = f"a0{CLEAR}{LINK}", f"a1{TITLE}"
    lines = [
        ev(0, "job_start", a0),
        *(ev(1 + i, "step_start", a0, step=i) for i in range(8)),
        ev(9, "custom_start", a0, name=HOSTILE),
        ev(11, "custom_end", a0, name=HOSTILE),
        ev(12, "elastic_wait_start", a0, name=HOSTILE),
        ev(13, "elastic_wait_end", a0, name=HOSTILE),
        ev(14, f"kind{CLEAR}{LINK}", a0),
        ev(15, "attempt_end", a0, status=HOSTILE, exit_code=1),
        ev(20, "job_start", a1),
        *(ev(21 + i, "step_start", a1, step=i) for i in range(8)),
        ev(30, "job_end", a1, status=HOSTILE),
    ]
    job_dir = root / "job_dir"
    (job_dir / "0").mkdir(parents=True)
    (job_dir / "0" / "h-0-1.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # A file whose name carries controls, with one malformed line: its diagnostic names it.
    (job_dir / "0" / f"evil{CLEAR}{TITLE}.jsonl").write_text("not json\n", encoding="utf-8")
    return job_dir


def assert_inert(out: str) -> None:
    bare = SGR.sub("", out)
    for bad in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert bad not in bare, (bad, bare)
    assert "]8;" not in out  # no OSC 8 hyperlink
    assert LINK in bare  # the markup is shown as the text it is


def terminal(width: int = 200) -> Console:
    return Console(
        file=io.StringIO(), force_terminal=True, color_system="truecolor", width=width, record=False
    )


@pytest.mark.parametrize("width", [80, 200])
def test_report_table_is_inert(tmp_path: Path, width: int) -> None:
    report = analyze(hostile_log(tmp_path))
    assert report.job == JOB
    assert {d.code for d in report.diagnostics} >= {"malformed_line", "unknown_kind"}
    con = terminal(width)
    render_table(report, con)
    out = con.file.getvalue()  # type: ignore[attr-defined]
    assert_inert(out)
    bare = SGR.sub("", out)
    assert "a0\\x1b[2J" in bare  # attempt id, escaped and visible
    assert "evil\\x1b[2J\\x1b]0;pwned\\x07.jsonl" in bare  # file name in the diagnostic


def test_badput_report_command_is_inert(tmp_path: Path) -> None:
    job_dir = hostile_log(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "badput.cli", "report", str(job_dir)],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "160", "FORCE_COLOR": "1", "TERM": "xterm-256color", "PATH": ""},
    )
    assert_inert(out.stdout)
    # A bad --job lists the store's jobs in its error: inert too.
    err = subprocess.run(
        [sys.executable, "-m", "badput.cli", "report", str(job_dir), "--job", f"x{TITLE}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert err.returncode == 2
    assert "\x1b" not in err.stderr and "\x07" not in err.stderr


def test_watch_view_status_line_and_loop_are_inert(tmp_path: Path) -> None:
    job_dir = hostile_log(tmp_path)
    mon = Monitor(None, job_dir, rolling_windows=(600,), clock=lambda: T0 + 31)
    snap = mon.run_once()
    mon.stop(final_flush=False)
    con = terminal()
    con.print(render_watch(snap))
    assert_inert(con.file.getvalue())  # type: ignore[attr-defined]
    line = status_line(snap)
    assert "\x1b" not in line and "\x07" not in line
    for force in (True, False):  # the live view and the piped status lines
        con = Console(file=io.StringIO(), force_terminal=force, color_system="truecolor")
        run_watch(job_dir, None, interval=0.01, console=con, max_cycles=2)
        out = con.file.getvalue()  # type: ignore[attr-defined]
        bare = SGR.sub("", out)
        assert "\x07" not in bare and "]0;pwned" not in bare.replace("\\x1b]0;pwned", "")
        assert "]8;" not in out


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_inert_leaves_no_control_character(text: str) -> None:
    shown = inert(text, limit=10_000)
    assert all(c.isprintable() or c == " " for c in shown if c not in "\\")
    if text.isprintable():
        assert shown == text
