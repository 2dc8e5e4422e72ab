"""``badput report --html`` and ``badput export trace`` on a 1,000,000-step job.

    python bench/bench_html.py [--steps N] [--keep DIR]

The job is ``make_big_job.py``'s (4 attempts, an eval every 100 steps, a checkpoint
every 1,000). Prints the time to build the page (timeline, windowed goodput,
rendering; the log read is measured by bench_report.py), its size, and the time
Debian's headless Chromium takes from navigation to the page's charts being drawn
(``performance.now()`` when the page's script finishes; median of 3 loads), then
the trace export's time and size. Needs ``chromium`` and ``chromium-driver``
(``make browser``) for the browser figure; skips it otherwise.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

sys.path.insert(0, str(Path(__file__).parent))
from badput.analysis import LiveJob
from badput.engine import Snapshot
from badput.report._html import render_html
from badput.report._trace import write_trace
from make_big_job import JOB, write_job

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser_render_ms(page: Path, loads: int = 3) -> list[float] | None:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        return None
    profile = tempfile.mkdtemp(prefix="badput-bench-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1800",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    try:
        out = []
        for _ in range(loads):
            driver.get("about:blank")
            driver.get(page.as_uri())
            ms = driver.execute_script("return window.badputView && window.badputView.renderMs")
            assert ms is not None, "the page did not finish drawing"
            out.append(float(ms))
        return out
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="write the job here (reused if present)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="badput-bench-html-"))
    try:
        if not (root / JOB).exists():
            write_job(root, args.steps)
        live = LiveJob(root, JOB)
        live.update()
        report = live.report()
        t0 = time.perf_counter()
        timeline = live.accountant.timeline(report)
        t1 = time.perf_counter()
        series = live.accountant.goodput_over_time(report)
        t2 = time.perf_counter()
        page = render_html(
            Snapshot(report.job, report.end, report, timeline=timeline, goodput_over_time=series)
        )
        t3 = time.perf_counter()
        path = root / "report.html"
        path.write_text(page, encoding="utf-8")
        print(f"steps: {len(timeline.steps):,}, intervals: {len(timeline.intervals):,}")
        print(
            f"html: timeline {t1 - t0:.2f} s, goodput windows {t2 - t1:.2f} s, "
            f"render {t3 - t2:.2f} s; total {t3 - t0:.2f} s; "
            f"file {path.stat().st_size / 1024:.0f} KiB"
        )
        ms = browser_render_ms(path)
        if ms is None:
            print("browser: chromium not installed (make browser), skipped")
        else:
            print(f"browser: drawn {statistics.median(ms):.0f} ms after navigation (loads: {ms})")
        sink = io.StringIO()
        t4 = time.perf_counter()
        n = write_trace(Snapshot(report.job, report.end, report, timeline=timeline), sink)
        t5 = time.perf_counter()
        print(f"trace: {n:,} events, {len(sink.getvalue()) / 2**20:.0f} MiB in {t5 - t4:.2f} s")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
