"""Cost (docs/advice.md#cost): ``--price-per-device-hour`` turns every bucket into money in
every view: the report's table, JSON and HTML, ``jobs``, ``compare`` and the exporters.

The worked example (ACCOUNTING.md §7: 200 minutes, 100 productive) at 3.00 per
device-hour on 4 devices costs 0.20 a minute: 40.00 in all, 20.00 of it badput; its
devices cost 288.00 a day, half of it badput (144.00).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from _worked_example import EXPECTED_MINUTES, JOB, T0, t, worked_example_events
from badput.cli import main
from badput.engine import Accountant, Report, Snapshot, resolve_devices
from badput.events import Event
from badput.testing import Timeline, events_to_jsonl
from test_engine_properties import event_logs

PRICE, DEVICES = 3.0, 4
#: Each bucket's money by hand: minutes x 0.20 (4 devices x 3.00 an hour / 60).
EXPECTED_MONEY = {b: m * 0.2 for b, m in EXPECTED_MINUTES.items()}


def priced_report(events: list[Event], devices: int | None = DEVICES, **kw: float) -> Report:
    acc = Accountant(events[0].job, ideal_step_time=120.0)
    acc.ingest_events(events)
    acc.price_per_device_hour, acc.devices = PRICE, devices
    return acc.report(**kw)


def test_the_worked_example_in_money() -> None:
    c = priced_report(worked_example_events()).cost
    assert c is not None
    assert c.buckets == pytest.approx(EXPECTED_MONEY, rel=1e-12)
    assert EXPECTED_MONEY["productive"] == pytest.approx(20.0)
    assert (c.total, c.goodput, c.badput) == pytest.approx((40.0, 20.0, 20.0), rel=1e-12)
    assert (c.per_day, c.badput_per_day) == pytest.approx((288.0, 144.0), rel=1e-12)
    assert (c.devices, c.devices_source, c.price_per_device_hour) == (4, "given", 3.0)
    # without a price, no cost (and no number changes)
    acc = Accountant(JOB, ideal_step_time=120.0)
    acc.ingest_events(worked_example_events())
    plain = acc.report()
    assert plain.cost is None and "cost" in plain.to_dict() and plain.to_dict()["cost"] is None


def test_a_window_of_a_running_job_costs_its_own_badput_a_day() -> None:
    # At minute 100 the job runs (attempt 2 is restoring); the last hour of it, on 4
    # devices at 3.00: 288.00 a day at that hour's badput share.
    events = [e for e in worked_example_events() if e.ts <= t(100)]
    w = priced_report(events, now=t(100), window=(t(40), t(100)))
    assert w.cost is not None and w.total_seconds == pytest.approx(3600.0)
    assert w.cost.total == pytest.approx(12.0)  # an hour of 4 devices at 3.00
    assert w.cost.badput_per_day == pytest.approx(288.0 * (1.0 - w.goodput), rel=1e-12)
    assert w.cost.badput == pytest.approx(12.0 * (1.0 - w.goodput), rel=1e-12)


def test_devices_given_then_recorded_then_one_per_rank() -> None:
    assert resolve_devices(16, 8, 2) == (16, "given")
    assert resolve_devices(None, 8, 2) == (8, "recorded")
    assert resolve_devices(None, None, 2) == (2, "ranks")
    assert resolve_devices(None, True, 0) is None  # a bool is no count
    ranks = []
    for rank in (0, 1):
        tl = Timeline("two", rank=rank)
        tl.emit("job_start")
        tl.steps(10, 1.0)
        ranks += tl.events
    assert priced_report(ranks, devices=None).cost.devices == 2  # type: ignore[union-attr]
    model = Timeline("two", rank=0)
    model.emit("model", devices=8)
    recorded = priced_report([*ranks, *model.events], devices=None).cost
    assert recorded is not None and (recorded.devices, recorded.devices_source) == (8, "recorded")
    # 10 s of steps on 8 devices at 3.00 an hour
    assert recorded.total == pytest.approx(10.0 / 3600.0 * 8 * 3.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_logs())
def test_money_is_the_partition_at_a_price(events: list[Event]) -> None:
    """For every log: the buckets' money adds up to the job's device-hours at the price,
    goodput plus badput is the total, and badput a day is the badput share of a day."""
    r = priced_report(events, devices=3)
    c = r.cost
    assert c is not None
    assert set(c.buckets) == set(r.buckets)
    assert c.total == pytest.approx(r.total_seconds / 3600.0 * 3 * PRICE, rel=1e-9, abs=1e-9)
    assert math.isclose(c.goodput + c.badput, c.total, rel_tol=1e-12, abs_tol=1e-12)
    for name, seconds in r.buckets.items():
        assert c.buckets[name] == pytest.approx(c.money(seconds), rel=1e-12)
    share = 1.0 - r.goodput if r.total_seconds > 0 else 0.0
    assert c.badput_per_day == pytest.approx(3 * PRICE * 24 * share, rel=1e-9, abs=1e-9)


# ---------------------------------------------------------------------------- the CLI


def _log(tmp_path: Path, name: str = "job.jsonl") -> Path:
    return events_to_jsonl(tmp_path / name, worked_example_events())


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_report_json_table_and_html_carry_the_money(tmp_path: Path) -> None:
    log = str(_log(tmp_path))
    price = ["--price-per-device-hour", "3", "--devices", "4", "--ideal-step-time", "120"]
    doc = json.loads(_run("report", log, "--json", *price))
    assert doc["cost"]["buckets"] == pytest.approx(EXPECTED_MONEY, rel=1e-12)
    assert doc["cost"]["total"] == pytest.approx(40.0)
    assert doc["cost"]["badput_per_day"] == pytest.approx(144.0)
    assert doc["cost"]["devices_source"] == "given"
    text = _run("report", log, *price)
    assert re.search(r"productive .* 20\.00", text)
    assert re.search(r"wasted .* 8\.00", text)
    assert "40.00 (4 devices (given) at 3.00 per device-hour); badput 20.00, 144.00 per day" in (
        " ".join(text.split())
    )
    page = tmp_path / "r.html"
    _run("report", log, *price, "--html", str(page))
    html = page.read_text()
    assert "<th>cost</th>" in html and "<td class=num>8.00</td>" in html
    assert json.loads(_run("report", log, "--json"))["cost"] is None  # no price, no cost


def test_jobs_and_compare_in_money(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for name in ("a", "b"):
        (store / name).mkdir(parents=True)
        events = [msgspec.structs.replace(e, job=name) for e in worked_example_events()]
        if name == "b":  # the same job, scheduled 10 minutes before it started: 2.00 queued
            events.insert(0, Event(ts=T0 - 600.0, kind="job_scheduled", job=name))
        events_to_jsonl(store / name / "events.jsonl", events)
    price = ["--price-per-device-hour", "3", "--devices", "4"]
    rows = {r["job"]: r for r in json.loads(_run("jobs", str(store), "--json", *price))}
    assert (rows["a"]["cost"], rows["b"]["cost"]) == pytest.approx((40.0, 42.0))
    a = rows["a"]
    assert a["badput_cost"] == pytest.approx(40.0 * (1 - a["goodput"]), rel=1e-12)
    assert a["badput_cost_per_day"] == pytest.approx(288.0 * (1 - a["goodput"]), rel=1e-12)
    text = _run("jobs", str(store), *price)
    assert "cost" in text and "40.00" in text and "42.00" in text
    cmp = json.loads(_run("compare", str(store / "a"), str(store / "b"), "--json", *price))
    assert (cmp["a"]["cost"], cmp["b"]["cost"]) == pytest.approx((40.0, 42.0))
    queued, wasted = cmp["buckets"]["queued"], cmp["buckets"]["wasted"]
    assert (queued["a_cost"], queued["b_cost"]) == pytest.approx((0.0, 2.0))
    assert (wasted["a_cost"], wasted["b_cost"]) == pytest.approx((8.0, 8.0))
    text = _run("compare", str(store / "a"), str(store / "b"), *price)
    assert re.search(r"cost\s+40\.00\s+42\.00\s+\+2\.00", text)
    plain = json.loads(_run("jobs", str(store), "--json"))
    assert [r["cost"] for r in plain] == [None, None]


# ------------------------------------------------------------------------ exporters


def _snapshot() -> Snapshot:
    """The worked example at its end, priced, with an hour's window."""
    events = worked_example_events()
    acc = Accountant(JOB, ideal_step_time=120.0)
    acc.ingest_events(events)
    acc.price_per_device_hour, acc.devices = PRICE, DEVICES
    now = t(200)
    return Snapshot(
        JOB, now, acc.report(now=now), windows={3600.0: acc.report(now=now, window=(t(140), now))}
    )


def test_prometheus_serves_the_money() -> None:
    pytest.importorskip("prometheus_client")
    from badput.monitor.prometheus import PrometheusExporter
    from test_export_prometheus import key, scrape

    snap = _snapshot()
    exp = PrometheusExporter(port=0)
    try:
        exp.export(snap)
        types, samples = scrape(exp)
    finally:
        exp.close()
    assert types["badput_cost"] == "gauge"
    for bucket, money in EXPECTED_MONEY.items():
        assert samples[key("badput_cost", bucket=bucket)] == pytest.approx(money)
    assert samples[key("badput_badput_cost_per_day")] == pytest.approx(144.0)
    window = snap.windows[3600.0]
    assert samples[key("badput_window_badput_cost_per_day", window="3600s")] == pytest.approx(
        288.0 * (1 - window.goodput)
    )


def test_opentelemetry_and_tensorboard_export_the_same_money(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from badput.monitor.otel import OpenTelemetryExporter
    from test_export_otel import collected, value

    snap = _snapshot()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    exp = OpenTelemetryExporter(meter_provider=provider)
    try:
        exp.export(snap)
        got = collected(reader)
    finally:
        exp.close()
        provider.shutdown()
    assert value(got["badput.cost"], job=JOB, bucket="wasted") == pytest.approx(8.0)
    assert value(got["badput.badput_cost_per_day"], job=JOB) == pytest.approx(144.0)
    assert value(
        got["badput.window.badput_cost_per_day"], job=JOB, window="3600s"
    ) == pytest.approx(288.0 * (1 - snap.windows[3600.0].goodput))

    pytest.importorskip("tensorboard")
    from badput.monitor.tensorboard import TensorBoardExporter
    from test_export_tensorboard import accumulate, points

    tb = TensorBoardExporter(tmp_path, flush_secs=1)
    tb.export(snap)
    tb.close()
    acc = accumulate(tmp_path)
    assert points(acc, "cost/badput_per_day")[0][2] == pytest.approx(144.0)
    assert points(acc, "cost/productive")[0][2] == pytest.approx(20.0)


def test_badput_monitor_once_exports_the_money(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from test_export_tensorboard import accumulate, points

    log = str(_log(tmp_path))
    tb = tmp_path / "tb"
    _run("monitor", log, "--once", "--tensorboard", str(tb), "--ideal-step-time", "120",
         "--price-per-device-hour", "3", "--devices", "4")  # fmt: skip
    acc = accumulate(tb)
    # the monitor's clock is now: the job ended long ago, so its span is its 200 minutes
    assert points(acc, "cost/badput_per_day")[0][2] == pytest.approx(144.0)
    assert points(acc, "cost/wasted")[0][2] == pytest.approx(8.0)


def test_docs_cost_example_prints_its_documented_table(tmp_path: Path) -> None:
    """docs/advice.md#cost: accounting.md's hand-written JSONL at 3.00 on 4 devices."""
    from test_docs import DOCS, block_after

    log = tmp_path / "example.jsonl"
    log.write_text(block_after((DOCS / "accounting.md").read_text(), "### Run it: a hand-written"))
    text = (DOCS / "advice.md").read_text()
    documented = block_after(text, "prints, among the rest (80 columns):")
    out = _run("report", str(log), "--ideal-step-time", "120",
               "--price-per-device-hour", "3", "--devices", "4")  # fmt: skip
    lines = [line.rstrip() for line in out.splitlines()]
    want = [line.rstrip() for line in documented.strip("\n").splitlines()]
    start = lines.index(want[0])
    assert lines[start : start + len(want)] == want
