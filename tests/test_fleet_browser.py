"""The fleet's HTML page (``badput fleet --html --html-jobs``) in a real headless Chromium,
as a person opens it: it renders, its figures are the fleet JSON's, each job links to its
own report page, and job names and statuses from the logs (HTML payloads) stay text."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from _browser import browser, console_errors
from _fleet_jobs import write_fleet
from badput.cli import main
from badput.report import format_duration, format_percent
from badput.testing import Timeline, events_to_jsonl

# slow; and the first test may install chromium with apt-get (minutes on a fresh machine)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

#: Job names a log may hold: markup that would run, or break out of its cell, if not escaped.
IMG = "<img src=x onerror=\"document.title='pwned'\">"
BREAKOUT = "</td></tr></table><h1 id=injected>x</h1><script>document.title='pwned'</script>"
STATUS = "<b id=injected2>oom</b>"


def _hostile(root: Path, job: str, pid: int) -> None:
    tl = Timeline(job, start=1_767_300_000.0 + pid)
    tl.emit("job_start")
    tl.span("accelerator_init", 20.0)
    tl.steps(30, 1.0)
    tl.emit("attempt_end", dt=40.0, status=STATUS, exit_code=137)  # a failure, much badput
    events_to_jsonl(root / f"hostile{pid}" / "0" / f"h-0-{pid}.jsonl", tl.events)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A fleet of 12 generated jobs and two with hostile names, its page, job pages, JSON."""
    base = tmp_path_factory.mktemp("fleet")
    root = base / "store"
    write_fleet(root, 12)
    _hostile(root, IMG, 1)
    _hostile(root, BREAKOUT, 2)
    page = base / "fleet.html"
    args = ["fleet", str(root), "--engine", "serial", "--no-cache", "--worst", "50", "--json"]
    result = CliRunner().invoke(
        main, [*args, "--html", str(page), "--html-jobs", str(base / "jobs")]
    )
    assert result.exit_code == 0, result.output
    return page, json.loads(result.stdout)


def _table(driver: Any, table_id: str) -> list[list[str]]:
    rows: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' tbody tr')]"
        ".map(r => [...r.cells].map(c => c.textContent))",
        f"#{table_id}",
    )
    return rows


def _text(driver: Any, css: str) -> str:
    script = "return document.querySelector(arguments[0]).textContent"
    return str(driver.execute_script(script, css))


def screenshot(driver: Any, tmp_path: Path, name: str) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(int(height) + 40, 4000))
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000  # a picture, not an empty page
    keep = os.environ.get("BADPUT_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)


def test_the_page_shows_the_fleet_json(fleet: Any, tmp_path: Path) -> None:
    page, summary = fleet
    assert summary["jobs"] == 14 and len(summary["worst_jobs"]) == 14
    with browser() as driver:
        driver.get(page.as_uri())
        assert console_errors(driver) == []
        assert driver.title == f"badput fleet: {summary['source']}"
        assert _text(driver, "#goodput") == format_percent(summary["goodput"])
        assert _text(driver, "#jobs") == str(summary["jobs"])
        assert _table(driver, "lost") == [
            [
                r["bucket"],
                format_duration(r["seconds"]),
                format_percent(r["share"]),
                str(r["jobs"]),
                "",
            ]
            for r in summary["lost_by_cause"]
        ]
        assert _table(driver, "worst") == [
            [
                r["job"],
                format_duration(r["badput_seconds"]),
                format_percent(r["goodput"]),
                str(r["attempts"]),
                str(r["failures"]),
                r["top_cause"] or "-",
            ]
            for r in summary["worst_jobs"]
        ]
        weeks = _table(driver, "weeks")
        assert [w[:3] for w in weeks] == [
            [r["week"], r["start"], str(r["failures"])] for r in summary["weeks"]
        ]
        assert sum(int(w[2]) for w in weeks) == summary["failures"] > 0
        days = _table(driver, "days")
        assert [d[:4] for d in days] == [
            [r["day"], str(r["jobs"]), format_duration(r["seconds"]), format_percent(r["goodput"])]
            for r in summary["days"]
        ]
        # every bar is as wide as its figure says (the day's goodput, of 160 px)
        widths = driver.execute_script(
            "return [...document.querySelectorAll('#days .bar span')]"
            ".map(s => s.getBoundingClientRect().width)"
        )
        assert widths == pytest.approx([160 * r["goodput"] for r in summary["days"]], abs=0.6)
        screenshot(driver, tmp_path, "fleet")


def test_log_text_stays_text(fleet: Any) -> None:
    page, summary = fleet
    with browser() as driver:
        driver.get(page.as_uri())
        assert driver.title != "pwned"
        injected = driver.execute_script(
            "return document.querySelectorAll('script, img, #injected, #injected2, h1').length"
        )
        assert injected == 1  # the page's own heading, nothing from a log
        names = [row[0] for row in _table(driver, "worst")]
        assert IMG in names and BREAKOUT in names  # shown as the text they are
        assert len(_table(driver, "worst")[0]) == 6  # no cell was broken out of
        causes = {r["top_cause"] for r in summary["worst_jobs"]}
        assert causes <= {row[5] for row in _table(driver, "worst")} | {None}
        assert console_errors(driver) == []


def test_each_job_links_to_its_report(fleet: Any) -> None:
    page, summary = fleet
    worst = {r["job"]: r for r in summary["worst_jobs"]}
    with browser() as driver:
        driver.get(page.as_uri())
        links: list[list[str]] = driver.execute_script(
            "return [...document.querySelectorAll('#worst tbody a')]"
            ".map(a => [a.textContent, a.href])"
        )
        assert sorted(job for job, _ in links) == sorted(worst)
        for job, href in links:
            driver.get(href)  # the file beside the fleet page, as a click on it opens
            rendered = driver.execute_script(
                "return document.documentElement.getAttribute('data-rendered')"
            )
            assert rendered == "1", console_errors(driver)
            assert _text(driver, "#job") == job
            data = json.loads(_text(driver, "#badput-data"))
            assert data["job"] == job
            assert data["total"] == worst[job]["total_seconds"]  # the same report
            productive = sum(b["seconds"] for b in data["buckets"] if b["name"] == "productive")
            assert productive / data["total"] == pytest.approx(worst[job]["goodput"], abs=1e-3)
            assert console_errors(driver) == []
