"""A job that names a custom event per step (issue 32): the views and the series it makes.

    python bench/bench_cardinality.py [--names N] [--keep DIR]

The job (``tests/_views_jobs.write_many_names_job``): one rank, N steps of 0.1 s, each
followed by a custom interval of a name used once (``eval-0`` ... ``eval-19999``; 20,000
by default). Prints:

- ``badput report --html`` as a command: wall time, peak memory (the child's maximum
  resident set) and the page's size; then the page alone after the log is read (timeline,
  goodput windows, rendering);
- a real scrape of ``PrometheusExporter`` over 127.0.0.1 after one monitor cycle (with a
  600 s rolling window): how many series, how many of ``badput_seconds``.

Run it against another checkout with ``PYTHONPATH=<that>/src`` to compare.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _views_jobs import T0, write_many_names_job
from badput.analysis import LiveJob
from badput.engine import Snapshot
from badput.monitor import Monitor
from badput.monitor.prometheus import PrometheusExporter
from badput.report._html import render_html


def command(job: Path, page: Path) -> tuple[float, float]:
    """``badput report JOB --html PAGE`` in a child: (wall seconds, peak RSS in MiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "badput.cli", "report", str(job), "--html", str(page)],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "120"},
    )
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024


def page_alone(job: Path) -> tuple[float, float, float, float, int]:
    """The page once the log is read: (read, timeline, goodput, render seconds, bytes)."""
    t0 = time.perf_counter()
    live = LiveJob(job.parent, job.name)
    live.update()
    report = live.report()
    t1 = time.perf_counter()
    timeline = live.accountant.timeline(report)
    t2 = time.perf_counter()
    series = live.accountant.goodput_over_time(report)
    t3 = time.perf_counter()
    page = render_html(
        Snapshot(report.job, report.end, report, timeline=timeline, goodput_over_time=series)
    )
    t4 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, t4 - t3, len(page.encode("utf-8"))


def scrape(job: Path) -> tuple[int, int]:
    """(series on the page, of which badput_seconds) after one cycle with a 600 s window."""
    exporter = PrometheusExporter(host="127.0.0.1", port=0)
    mon = Monitor(None, job, [exporter], rolling_windows=(600.0,), clock=lambda: T0 + 2400)
    try:
        mon.run_once()
        assert exporter.url is not None
        with urllib.request.urlopen(exporter.url, timeout=60) as resp:
            text = resp.read().decode()
    finally:
        mon.stop(final_flush=False)
    samples = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return len(samples), sum(1 for ln in samples if ln.startswith("badput_seconds{"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--names", type=int, default=20_000)
    parser.add_argument("--keep", type=Path, help="write the job here (reused if present)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="badput-bench-names-"))
    try:
        job = root / "many-names"
        if not job.exists():
            write_many_names_job(root, args.names)
        page = root / "report.html"
        wall, peak = command(job, page)
        print(
            f"badput report --html: {wall:.2f} s, peak RSS {peak:.0f} MiB, "
            f"page {page.stat().st_size / 2**20:.2f} MiB"
        )
        read, tl, gp, render, size = page_alone(job)
        print(
            f"log read {read:.2f} s; page: timeline {tl:.2f} s, goodput windows {gp:.2f} s, "
            f"render {render:.2f} s; total {tl + gp + render:.2f} s, {size / 2**20:.2f} MiB"
        )
        series, buckets = scrape(job)
        print(f"prometheus scrape: {series:,} series ({buckets:,} badput_seconds)")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
