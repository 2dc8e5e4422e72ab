"""The advice in ``badput report`` (docs/advice.md): ``report["advice"]`` in the JSON is the
object of ``badput advise --json``, and the HTML page's Advice section shows it; a job
with too little data says why, with a null interval."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from _advice_sim import SimJob, simulate
from _browser import browser, console_errors
from badput.cli import main
from badput.report._html_advice import advice_section
from badput.store import JsonlStore
from badput.testing import Timeline, events_to_jsonl
from test_html_report import parse_elements

#: 3 failures in about 7.4 h: the rate is known to within a factor of 14 (a "wide" interval).
JOB = SimJob(step_time=10.0, save_cost=60.0, mtbf=7200.0, restart=120.0, restore=30.0,
             total_steps=2000, seed=1)  # fmt: skip


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("advice") / "store"
    simulate(JOB, 20, store=JsonlStore(root))
    return root


def test_report_json_carries_what_advise_gives(store: Path) -> None:
    price = ["--price-per-device-hour", "2.5", "--devices", "8"]
    report = json.loads(_run("report", str(store), "--json", *price))
    advised = json.loads(_run("advise", str(store), "--json", *price))
    assert report["advice"] == advised["advice"]
    assert report["advice_absent"] is None
    a = report["advice"]
    # the figures of the simulation: saves of 60 s every 20 steps of 10 s, 3 failures
    assert a["current"]["steps"] == 20 and a["current"]["seconds"] == pytest.approx(200.0)
    assert a["checkpoint_cost"]["median"] == pytest.approx(60.0)
    assert a["failure_rate"]["failures"] == 3 and a["failure_rate"]["wide"] is True
    mtbf = a["failure_rate"]["running_hours"] * 3600.0 / 3
    young = (2 * 60.0 * mtbf) ** 0.5  # delta/M < 1 %: Young's interval, in steps of 10 s
    assert a["formula"] == "young" and a["recommended"]["steps"] == round(young / 10.0)
    assert a["interval_reason"] is None
    assert any("rough guide" in n for n in a["notes"])
    # the levers' money: gain seconds x 8 devices x 2.5 an hour
    for lever in a["levers"]:
        assert lever["cost"] == pytest.approx(lever["gain_seconds"] / 3600.0 * 8 * 2.5)


def test_too_little_data_is_a_null_interval_and_the_reason(tmp_path: Path) -> None:
    tl = Timeline("nosave")
    tl.emit("job_start", attempt=0)
    tl.steps(50, 1.0)
    tl.emit("job_end", status="completed")
    log = str(events_to_jsonl(tmp_path / "nosave.jsonl", tl.events))
    doc = json.loads(_run("report", log, "--json"))
    a = doc["advice"]
    assert a["recommended"] is None and a["current"] is None
    assert a["interval_reason"] == (
        "the log has no blocking checkpoint save: no interval can be derived"
    )
    assert a["failure_rate"]["failures"] == 0
    # a window's report has no advice, and says why
    start = tl.events[0].ts
    windowed = json.loads(_run("report", log, "--json", "--window", str(start), str(start + 10)))
    assert windowed["advice"] is None
    assert "window" in windowed["advice_absent"]
    page = tmp_path / "nosave.html"
    _run("report", log, "--html", str(page))
    text = page.read_text()
    assert 'id="advice-interval-reason">No recommended interval: the log has no blocking' in text


def test_the_advice_section_escapes_every_string() -> None:
    hostile = "<img src=x onerror=\"window.pwned='advice'\">"
    advice: dict[str, Any] = {
        "failure_rate": {"failures": 1, "running_hours": 2.0, "per_hour": 0.5},
        "formula": hostile,
        "current": {"steps": hostile, "seconds": 60.0},
        "recommended": None,
        "interval_reason": hostile,
        "levers": [{"name": hostile, "gain_seconds": 1.0, "gain_share": 0.1, "detail": hostile}],
        "notes": [hostile],
    }
    for html in (advice_section(advice), advice_section(None, hostile)):
        assert "<img" not in html and "&lt;img src=x onerror=" in html
        elements = parse_elements(html)
        assert {tag for tag, _ in elements} <= {
            "section", "h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td", "ul", "li",
        }  # fmt: skip
        assert not [a for _, attrs in elements for a, _ in attrs if a.startswith("on")]
    assert advice_section(None) == ""  # a page made without advice has no section


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_page_shows_the_advice_in_chromium(store: Path, tmp_path: Path) -> None:
    price = ["--price-per-device-hour", "2.5", "--devices", "8"]
    page = tmp_path / "advice.html"
    _run("report", str(store), *price, "--html", str(page))
    a = json.loads(_run("advise", str(store), "--json", *price))["advice"]
    rec = a["recommended"]
    with browser() as driver:
        driver.get(page.as_uri())
        assert (
            driver.execute_script("return document.documentElement.getAttribute('data-rendered')")
            == "1"
        ), console_errors(driver)

        def cells(row: str) -> list[str]:
            return [
                str(c)
                for c in driver.execute_script(
                    f"return [...document.querySelectorAll('#advice-{row} td')]"
                    ".map(td => td.textContent)"
                )
            ]

        assert cells("recommended") == [
            "recommended",
            f"{rec['steps']:,}",
            f"{rec['seconds'] / 60:,.1f} min",
            f"{rec['expected_goodput'] * 100:.1f}%",
            f"{rec['replayed_goodput'] * 100:.1f}%",
        ]
        assert cells("current") == [
            "current", "20", "3.3 min", f"{a['goodput'] * 100:.1f}%", f"{a['goodput'] * 100:.1f}%",
        ]  # fmt: skip
        rate = driver.execute_script("return document.getElementById('advice-rate').textContent")
        assert rate.startswith("3 failures in ") and "95% interval" in rate
        notes = driver.execute_script("return document.getElementById('advice-notes').textContent")
        assert "rough guide" in notes
        levers = driver.execute_script(
            "return [...document.querySelectorAll('#advice-levers tbody tr')]"
            ".map(tr => [...tr.children].map(td => td.textContent))"
        )
        assert [row[0] for row in levers] == [lv["name"] for lv in a["levers"]]
        assert [row[3] for row in levers] == [f"{lv['cost']:,.2f}" for lv in a["levers"]]
        buckets_head = driver.execute_script(
            "return [...document.querySelectorAll('#buckets th')].map(th => th.textContent)"
        )
        assert "cost" in buckets_head
        assert console_errors(driver) == []
        assert re.search(r"\d", rate)
