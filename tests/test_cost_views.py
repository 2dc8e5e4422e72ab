"""Cost (docs/advice.md#cost) in the views test_cost.py does not cover: ``badput watch``,
``badput export csv``, the Cloud Monitoring exporter and the Grafana dashboard.

The job of these tests: 10 minutes of accelerator init, then 600 steps of 1 s (the ideal):
20 minutes, half of it productive. At 3.00 per device-hour on 4 devices a second costs
1/300: 4.00 in all, 2.00 of it badput; the devices cost 288.00 a day, 144.00 of it badput
at the job's share; its last 10 minutes are all steps, so at that window's rate the job
loses 0.00 a day.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from badput.cli import main
from badput.engine import Accountant
from badput.monitor import Monitor, Snapshot
from badput.report._watch import cost_line, render_watch, status_line
from badput.testing import MemoryStore, Timeline, events_to_jsonl, events_to_store

T0 = 1_700_000_000.0
JOB = "priced"
PRICE, DEVICES = 3.0, 4
PRICED = ["--price-per-device-hour", "3", "--devices", "4"]


def half_init(finished: bool = False) -> Timeline:
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start")
    tl.span("accelerator_init", 600.0)
    tl.steps(600, 1.0)
    if finished:
        tl.emit("job_end", status="completed")
    return tl


def watched(price: float | None = PRICE, windows: tuple[float, ...] = (600.0,)) -> Snapshot:
    """The running job at T0 + 20 min, as ``badput watch`` sees it (a 10-minute window)."""
    store = MemoryStore()
    events_to_store(store, half_init().events, JOB)
    mon = Monitor(
        JOB, store, rolling_windows=windows, ideal_step_time=1.0, clock=lambda: T0 + 1200.0
    )
    acc = mon.live_job.accountant
    acc.devices, acc.price_per_device_hour = DEVICES, price
    return mon.run_once()


def test_watch_shows_the_cost_so_far_and_badput_a_day() -> None:
    snap = watched()
    assert snap.report.goodput == pytest.approx(0.5)
    want = (
        "4.00 so far (4 devices (given) at 3.00 per device-hour); badput 2.00, 144.00/day "
        "(last 10m: 0.00/day)"
    )
    assert cost_line(snap) == want
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(render_watch(snap, now=T0 + 1200.0))
    screen = console.export_text()
    assert re.search(r"^cost +" + re.escape(want), screen, re.MULTILINE), screen
    assert status_line(snap, now=T0 + 1200.0).endswith(f", cost {want}")
    unpriced = watched(price=None)
    assert cost_line(unpriced) is None and "cost" not in status_line(unpriced)


def test_badput_watch_takes_the_price(tmp_path: Path) -> None:
    log = events_to_jsonl(tmp_path / "job.jsonl", half_init(finished=True).events)
    result = CliRunner().invoke(
        main, ["watch", str(log), "--interval", "0.1", *PRICED], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    line = result.stdout.splitlines()[0]
    assert "cost 4.00 so far (4 devices (given) at 3.00 per device-hour); badput 2.00, " in line
    assert "144.00/day" in line


# ------------------------------------------------------------------------------- CSV


def test_csv_buckets_and_attempts_carry_their_money(tmp_path: Path) -> None:
    """ACCOUNTING.md §7's worked example at 3.00 on 4 devices (0.20 a minute): each bucket
    its minutes x 0.20; attempt 0 ran minutes 0-100 (20.00), attempt 1 115-200 (17.00)."""
    from _worked_example import EXPECTED_MINUTES, worked_example_events
    from badput.report import write_csv

    acc = Accountant("worked-example", ideal_step_time=120.0)
    acc.ingest_events(worked_example_events())
    acc.price_per_device_hour, acc.devices = PRICE, DEVICES
    write_csv(acc.snapshot(drawing=True), tmp_path / "priced")
    with open(tmp_path / "priced" / "buckets.csv", newline="") as f:
        buckets = {row["bucket"]: float(row["cost"]) for row in csv.DictReader(f)}
    assert buckets == pytest.approx({b: m * 0.2 for b, m in EXPECTED_MINUTES.items()}, rel=1e-12)
    assert buckets["wasted"] == pytest.approx(8.0)
    with open(tmp_path / "priced" / "attempts.csv", newline="") as f:
        attempts = [float(row["cost"]) for row in csv.DictReader(f)]
    assert attempts == pytest.approx([20.0, 17.0], rel=1e-12)
    acc.price_per_device_hour = None  # no price: the columns of before
    write_csv(acc.snapshot(drawing=True), tmp_path / "plain")
    heads = (tmp_path / "plain" / "buckets.csv").read_text().splitlines()[0]
    assert heads == "bucket,seconds,fraction,description"


def test_badput_export_csv_takes_the_price(tmp_path: Path) -> None:
    log = events_to_jsonl(tmp_path / "job.jsonl", half_init(finished=True).events)
    out = tmp_path / "csv"
    result = CliRunner().invoke(main, ["export", "csv", str(log), str(out), *PRICED])
    assert result.exit_code == 0, result.output
    with open(out / "buckets.csv", newline="") as f:
        rows = {row["bucket"]: float(row["cost"]) for row in csv.DictReader(f)}
    assert rows == pytest.approx({"productive": 2.0, "accelerator_init": 2.0})  # 600 s each
    with open(out / "attempts.csv", newline="") as f:
        assert [float(r["cost"]) for r in csv.DictReader(f)] == pytest.approx([4.0])


# -------------------------------------------------------------- Cloud Monitoring


def test_cloud_monitoring_writes_the_money_as_the_other_exporters_do() -> None:
    """The real client against the loopback gRPC fake: each bucket's money, badput a day
    so far (144.00) and at each window's rate: the last 10 minutes are all steps (0.00),
    the last 15 have 5 of init in them (a third: 96.00 a day)."""
    pytest.importorskip("google.cloud.monitoring_v3")
    from _gcm_fake import FakeMetricService
    from badput.monitor.gcm import PROGRAM_PREFIX, CloudMonitoringExporter

    snap = watched(windows=(600.0, 900.0))
    fake = FakeMetricService()
    try:
        exp = CloudMonitoringExporter(
            "p", client=fake.client(), location="us-east5-a", labels={"cluster_name": "c"}
        )
        exp.export(snap)
        exp.close()
        got = fake.series(strip=PROGRAM_PREFIX)
        exp = CloudMonitoringExporter("p", client=fake.client(), location="us-east5-a")
        exp.export(watched(price=None))
        unpriced = fake.series(strip=PROGRAM_PREFIX)[len(got) :]
    finally:
        fake.stop()
    common = {"accelerator_type": "UNKNOWN", "cluster_name": "c"}
    cost = {s["labels"]["bucket"]: s["value"] for s in got if s["type"] == "cost"}
    assert cost == pytest.approx({"productive": 2.0, "accelerator_init": 2.0})
    (per_day,) = [s for s in got if s["type"] == "badput_cost_per_day"]
    assert (per_day["value"], per_day["labels"]) == (pytest.approx(144.0), common)
    assert per_day["resource_type"] == "generic_task" and per_day["resource"]["job"] == JOB
    windows = {
        s["labels"]["rolling_window_size"]: s["value"]
        for s in got
        if s["type"] == "window/badput_cost_per_day"
    }
    assert windows == pytest.approx({"600": 0.0, "900": 96.0})
    assert not [s for s in unpriced if "cost" in s["type"]]
    assert any(s["type"].endswith("workload/goodput_time") for s in unpriced)


def test_docs_watch_and_csv_examples(tmp_path: Path) -> None:
    """docs/advice.md#in-each-view: the watch row and ``buckets.csv`` are what they print."""
    from test_docs import DOCS, block_after

    text = (DOCS / "advice.md").read_text()
    watch = block_after(text, "has this row in its summary (100 columns):")
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(render_watch(watched(), now=T0 + 1200.0))
    screen = [line.rstrip() for line in console.export_text().splitlines()]
    want = [line.rstrip() for line in watch.strip("\n").splitlines()]
    start = screen.index(want[0])
    assert screen[start : start + len(want)] == want
    log = tmp_path / "example.jsonl"
    log.write_text(block_after((DOCS / "accounting.md").read_text(), "### Run it: a hand-written"))
    out = tmp_path / "csv"
    result = CliRunner().invoke(main, ["export", "csv", str(log), str(out), *PRICED])
    assert result.exit_code == 0, result.output
    documented = block_after(text, "writes this `csv/buckets.csv`:")
    assert (out / "buckets.csv").read_text().splitlines() == documented.strip().splitlines()
