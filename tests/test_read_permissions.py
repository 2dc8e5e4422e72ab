"""A directory below a job that cannot be listed is said, never skipped in silence (issue 32).

Run as ``nobody`` (:mod:`tests._as_nobody`): root lists a mode-000 directory as any other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _as_nobody import readable_copy, run_as_nobody, shared_tmp

T0 = 1_732_000_000.0


def write(path: Path, events: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"job": "good", **e}) + "\n" for e in events))


def write_job(job_dir: Path) -> None:
    """Attempt 0: 100 s, its last 10 of them steps (10 % goodput on its own); attempt 1:
    810 s, 800 of them steps. Together 1,010 s, 90 s productive (8.9 %)."""
    a0: list[dict[str, Any]] = [{"ts": T0, "kind": "job_start", "attempt": 0}]
    a0 += [{"ts": T0 + 90 + i, "kind": "step_start", "attempt": 0, "step": i} for i in range(10)]
    a0 += [{"ts": T0 + 100, "kind": "attempt_end", "attempt": 0, "status": "failed"}]
    a1: list[dict[str, Any]] = [{"ts": T0 + 200, "kind": "job_start", "attempt": 1}]
    a1 += [
        {"ts": T0 + 210 + 10 * i, "kind": "step_start", "attempt": 1, "step": 10 + i}
        for i in range(80)
    ]
    a1 += [{"ts": T0 + 1010, "kind": "job_end", "attempt": 1, "status": "completed"}]
    write(job_dir / "0" / "h-0-1.jsonl", a0)
    write(job_dir / "1" / "h-0-2.jsonl", a1)


#: The child's work, on the warm-up copy as root, then on the data under test as nobody.
BODY = """
def body(root):
    from click.testing import CliRunner

    from badput.cli._list_ahead import ListingAhead
    from badput.analysis import LiveJob, analyze
    from badput.cli import main
    from badput.store import list_job

    def cli(*args):
        r = CliRunner().invoke(main, list(args))
        return [r.exit_code, r.stdout, r.stderr]

    def seen(report):
        return {
            "total": report.total_seconds,
            "productive": report.buckets.get("productive", 0.0),
            "goodput": report.goodput,
            "diagnostics": [[d.code, d.file, d.message] for d in report.diagnostics],
        }

    job = root + "/one-locked/good"
    listing = list_job(job)
    live = LiveJob(job, listing=listing)
    live.update()
    ahead = ListingAhead(job, None).result()
    ahead_live = LiveJob(job, listing=ahead)
    ahead_live.update()
    return {
        "analyze": seen(analyze(job)),
        "listed": list(listing.streams),
        "list_job": seen(live.report(final=True)),
        "ahead": None if ahead is None else list(ahead.streams),
        "ahead_report": seen(ahead_live.report(final=True)),
        "table": cli("report", job),
        "json": cli("report", job, "--json"),
        "all_locked": cli("report", root + "/all-locked/good"),
        "job_locked": cli("report", root + "/job-locked/good"),
        "root_job_locked": cli("report", root + "/job-locked", "--job", "good"),
    }
"""


@pytest.fixture(scope="module")
def seen() -> Any:
    with shared_tmp() as top:
        src = top / "src"
        write_job(src / "good")
        warm, real = top / "warm", top / "real"
        for case in ("one-locked", "all-locked", "job-locked"):
            readable_copy(src, warm / case)
            readable_copy(src, real / case)
        locked = [
            real / "one-locked" / "good" / "1",
            real / "all-locked" / "good" / "0",
            real / "all-locked" / "good" / "1",
            real / "job-locked" / "good",
        ]
        for directory in locked:
            directory.chmod(0)
        out = run_as_nobody(BODY, warm, real)
        out["real"] = str(real)
        yield out


def test_an_unreadable_attempt_directory_is_a_diagnostic(seen: Any) -> None:
    locked = f"{seen['real']}/one-locked/good/1"
    for how in ("analyze", "list_job", "ahead_report"):
        report = seen[how]
        # Only attempt 0 could be read: 100 s, 10 of them productive. The report says
        # that attempt 1 is missing from it, naming its directory and why.
        assert (report["total"], report["productive"]) == (100.0, 10.0), how
        assert report["goodput"] == pytest.approx(0.10), how
        (d,) = [d for d in report["diagnostics"] if d[0] == "unreadable_directory"]
        assert d[1] == locked, how
        assert "Permission denied" in d[2], how
    assert seen["listed"] == ["0/h-0-1.jsonl", "1/"]
    assert seen["ahead"] == ["0/h-0-1.jsonl", "1/"]  # the helper process's listing: the same


def test_the_report_names_the_unreadable_directory(seen: Any) -> None:
    locked = f"{seen['real']}/one-locked/good/1"
    code, out, err = seen["table"]
    assert code == 0, err
    assert f"{locked}: [unreadable_directory] cannot be listed (Permission denied)" in out
    code, out, err = seen["json"]
    assert code == 0, err
    (d,) = [d for d in json.loads(out)["diagnostics"] if d["code"] == "unreadable_directory"]
    assert d["file"] == locked


@pytest.mark.parametrize(
    ("case", "denied"),
    [
        ("all_locked", "all-locked/good/0"),
        ("job_locked", "job-locked/good"),
        ("root_job_locked", "job-locked/good"),
    ],
)
def test_nothing_readable_is_permission_denied(seen: Any, case: str, denied: str) -> None:
    code, out, err = seen[case]
    assert code == 2
    assert out == ""
    assert f"{seen['real']}/{denied}: Permission denied" in err
    assert "no .jsonl event files found" not in err
