"""The HTML report in a real headless Chromium, as a person opens it.

Each test saves a screenshot in its tmp_path; with ``BADPUT_SCREENSHOTS=DIR`` set
(``make screenshots``) they are also written to DIR: docs/images holds the ones
docs/views.md and the README show.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from _browser import browser, console_errors
from _views_jobs import (
    HOSTILE_EVAL,
    HOSTILE_HOST,
    HOSTILE_JOB,
    write_hostile_job,
    write_many_names_job,
    write_two_rank_job,
)
from badput.analysis import LiveJob
from badput.engine import MAX_NAMED_BUCKETS
from badput.report import html_report

# slow; and the first test may install chromium with apt-get (minutes on a fresh machine)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def write_page(source: Path, out: Path, job: str | None = None) -> tuple[Path, Any]:
    lj = LiveJob(source, job)
    lj.update()
    report = lj.report()
    out.write_text(
        html_report(lj.accountant.snapshot(report=report, drawing=True)), encoding="utf-8"
    )
    return out, report


def screenshot(driver: Any, tmp_path: Path, name: str, *, full: bool = True) -> Path:
    if full:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1400, min(int(height) + 40, 4000))
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000  # a picture, not an empty page
    keep = os.environ.get("BADPUT_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)
    return path


def open_page(driver: Any, page: Path) -> dict[str, Any]:
    driver.get(page.as_uri())
    rendered = driver.execute_script(
        "return document.documentElement.getAttribute('data-rendered')"
    )
    assert rendered == "1", console_errors(driver)
    view: dict[str, Any] = driver.execute_script("return window.badputView")
    return view


_PIXELS_JS = """
const canvas = document.querySelector('#timeline canvas');
const ctx = canvas.getContext('2d');
const img = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
const hex = (r, g, b) => '#' + [r, g, b].map(v => v.toString(16).padStart(2, '0')).join('');
const counts = {};
for (let i = 0; i < img.length; i += 4) {
  if (img[i + 3] !== 255) continue;
  const k = hex(img[i], img[i + 1], img[i + 2]);
  counts[k] = (counts[k] || 0) + 1;
}
return counts;
"""

_HOVER_JS = """
const [lane, t] = arguments;
const u = window.badputTimeline;
const nL = window.badputView.lanes;
const rect = u.over.getBoundingClientRect();
const x = rect.left + u.valToPos(t, 'x');
const y = rect.top + u.valToPos(nL - lane - 0.5, 'y');
const ev = {clientX: x, clientY: y, bubbles: true};
document.dispatchEvent(new MouseEvent('mousemove', ev));
u.over.dispatchEvent(new MouseEvent('mousemove', ev));
const tip = document.getElementById('tooltip');
return tip.hidden ? null : tip.textContent;
"""


def test_report_page_draws_lanes_charts_and_bars(tmp_path: Path) -> None:
    page, report = write_page(write_two_rank_job(tmp_path / "store"), tmp_path / "job.html")
    with browser() as driver:
        view = open_page(driver, page)
        assert console_errors(driver) == []
        assert view["lanes"] == 1 + 2 * 2  # the job, then 2 attempts x 2 ranks
        # 8 buckets and rank 1's last 0.5 s, untracked (the job ends at the last job_end)
        assert view["bucketBars"] == len(report.buckets) == 9
        assert view["charts"] == ["buckets", "timeline", "goodput", "steptime"]
        assert driver.execute_script("return document.querySelectorAll('.uplot').length") == 4
        colours = driver.execute_script(_PIXELS_JS)
        for bucket, colour in (
            ("productive", "#2e9e44"),
            ("wasted", "#d64541"),
            ("recovery", "#7f7f7f"),
            ("checkpoint_save", "#3b6fd8"),
        ):
            assert colours.get(colour, 0) > 50, bucket
        # hovering a step of attempt 0, rank 1 tells what it is
        t = report.start + 15.5  # inside step 8 (init 5 s, step 1 4 s, step k from k + 7 s)
        tip = driver.execute_script(_HOVER_JS, 2, t)
        assert tip is not None
        assert "attempt 0 rank 1 on node-a" in tip
        assert "step 8 · productive" in tip
        # the recovery gap on the job lane
        tip = driver.execute_script(_HOVER_JS, 0, report.start + 60.0)
        assert tip is not None and tip.startswith("recovery (20.0s)")
        # zooming the timeline zooms the time charts with it
        driver.execute_script(
            "window.badputTimeline.setScale('x', {min: arguments[0], max: arguments[1]})",
            report.start + 10,
            report.start + 20,
        )
        scales = driver.execute_script(
            "return window.badputTimeCharts.map(u => [u.scales.x.min, u.scales.x.max])"
        )
        assert len(scales) == 3  # timeline, goodput, step time
        for lo, hi in scales:
            assert (lo, hi) == (pytest.approx(report.start + 10), pytest.approx(report.start + 20))
        driver.execute_script(
            "window.badputTimeline.setScale('x', {min: arguments[0], max: arguments[1]})",
            report.start,
            report.end,
        )
        screenshot(driver, tmp_path, "views-report")
        assert console_errors(driver) == []


def test_a_job_of_20_000_custom_names_draws_20_and_the_group(tmp_path: Path) -> None:
    page, _ = write_page(write_many_names_job(tmp_path / "store"), tmp_path / "names.html")
    with browser() as driver:
        view = open_page(driver, page)
        assert console_errors(driver) == []
        assert view["binned"]  # 40,000 spans in one lane: time bins
        assert view["bucketBars"] == 1 + MAX_NAMED_BUCKETS + 1  # productive, 20, the group
        legend = driver.execute_script(
            "return [...document.querySelectorAll('#legend > span')].map(e => e.textContent)"
        )
        assert "custom:(19,980 others)" in legend
        assert len(legend) <= MAX_NAMED_BUCKETS + 6, legend
        note = driver.find_element("id", "grouped-note").text
        assert note.startswith("19,980 custom names grouped into custom:(19,980 others)")
        colours = driver.execute_script(_PIXELS_JS)
        screenshot(driver, tmp_path, "views-many-names")
        # the group's colour: a sixth of each time bin's height (anti-aliased at the edges)
        assert colours.get("#9aa0ac", 0) > 20, colours
        assert console_errors(driver) == []


def test_hostile_names_stay_text(tmp_path: Path) -> None:
    write_hostile_job(tmp_path / "store")
    page, _report = write_page(tmp_path / "store", tmp_path / "hostile.html", HOSTILE_JOB)
    with browser() as driver:
        view = open_page(driver, page)
        assert view["lanes"] == 5
        # no script of the log ran, and the page holds its own scripts only
        assert driver.execute_script("return window.pwned === undefined")
        assert driver.execute_script("return document.scripts.length") == 3
        assert driver.execute_script("return document.querySelectorAll('svg, img').length") == 0
        assert driver.execute_script("return document.getElementById('job').textContent") == (
            HOSTILE_JOB
        )
        assert driver.title == f"badput: {HOSTILE_JOB}"
        # the names reach the tooltip as text, too
        t = _report.start + 41.0  # inside the custom interval of rank 0 (40 s to 43 s)
        tips = [driver.execute_script(_HOVER_JS, 1, t + dt) for dt in (0.0, 0.5, 1.0)]
        assert any(tip and f"custom:{HOSTILE_EVAL}" in tip for tip in tips), tips
        assert any(tip and HOSTILE_HOST in tip for tip in tips), tips
        assert driver.execute_script("return window.pwned === undefined")
        assert console_errors(driver) == []
        screenshot(driver, tmp_path, "views-hostile", full=False)


def test_demo_job_page(tmp_path: Path) -> None:
    """The page of the demo job (a real small training run with a crash); the README's
    picture comes from here (``make screenshots`` runs the full-size demo)."""
    from badput.demo import DemoConfig, run_demo

    full = bool(os.environ.get("BADPUT_SCREENSHOTS"))
    config = DemoConfig() if full else DemoConfig.fast()
    run_demo(tmp_path / "runs", "demo", config, say=lambda _msg: None)
    page, report = write_page(tmp_path / "runs", tmp_path / "demo.html", "demo")
    with browser() as driver:
        view = open_page(driver, page)
        assert console_errors(driver) == []
        assert view["lanes"] == 1 + len(report.attempts) == 3  # the demo crashes once
        assert view["bucketBars"] == len(report.buckets)
        # every step of both attempts is on the page (the fast demo's are sub-millisecond
        # slivers on a one-second axis, so no pixel count here)
        assert view["spans"] >= report.steps.kept + report.steps.wasted
        screenshot(driver, tmp_path, "views-demo")


def test_pages_of_a_job_without_steps_and_of_an_empty_log(tmp_path: Path) -> None:
    from badput.testing import Timeline, events_to_jsonl

    tl = Timeline("no-steps", start=1_732_000_000.0)
    tl.emit("job_start")
    tl.span("accelerator_init", 5.0)
    tl.span("checkpoint_restore", 3.0, step=10)
    tl.emit("attempt_end", dt=2.0, status="crashed", exit_code=1)
    events_to_jsonl(tmp_path / "no-steps" / "0" / "h-0-1.jsonl", tl.events)
    no_steps, report = write_page(tmp_path / "no-steps", tmp_path / "no-steps.html")
    assert report.steps.kept == 0
    empty_file = tmp_path / "empty.jsonl"
    empty_file.write_text("not json\n")
    empty, empty_report = write_page(empty_file, tmp_path / "empty.html")
    assert empty_report.attempts == []
    with browser() as driver:
        view = open_page(driver, no_steps)
        assert console_errors(driver) == []
        assert view["lanes"] == 2
        assert (
            driver.execute_script("return document.getElementById('steptime-chart').textContent")
            == "No step times recorded."
        )
        view = open_page(driver, empty)
        assert console_errors(driver) == []
        assert view["lanes"] == 1 and view["bucketBars"] == 0
        text = driver.execute_script("return document.getElementById('diagnostics').textContent")
        assert "empty_log" in text or "malformed" in text
