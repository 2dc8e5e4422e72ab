"""High-cardinality names (issue 32): a job that names a custom event per step.

Every view and exporter shows at most ``MAX_NAMED_BUCKETS`` named buckets one by one and
adds the others into ``custom:(other)`` (``elastic_wait:(other)``), through one function,
:func:`badput.engine.group_buckets`; the partition still sums. The JSON report keeps every
name. On the 20,000-name job: the HTML page stays small and a Prometheus scrape stays
under 200 series (time is measured by ``bench/bench_cardinality.py``, not asserted here).
"""

from __future__ import annotations

import io
import json
import math
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from _views_jobs import T0, many_names_seconds, write_many_names_job
from badput.analysis import LiveJob
from badput.engine import (
    MAX_NAMED_BUCKETS,
    PRODUCTIVE,
    GroupedBuckets,
    Report,
    StepCounts,
    group_buckets,
)
from badput.engine._model import BUCKETS
from badput.monitor import Monitor, Snapshot
from badput.monitor._base import BucketSeries
from badput.report import html_report, render_table, render_watch, to_json
from badput.testing import Timeline, events_to_jsonl

NAMES = 20_000
GROUPED = NAMES - MAX_NAMED_BUCKETS

# --------------------------------------------------------------- the grouping itself

seconds = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
custom = st.text(min_size=1, max_size=6).map(lambda s: "custom:" + s)
elastic = st.sampled_from(["a", "b", "c", "(other)"]).map(lambda s: "elastic_wait:" + s)


@st.composite
def partitions(draw: st.DrawFn) -> dict[str, float]:
    fixed = draw(st.dictionaries(st.sampled_from(BUCKETS), seconds, max_size=6))
    named = draw(st.dictionaries(st.one_of(custom, elastic), seconds, max_size=60))
    return {**fixed, **named}


def _named(name: str) -> bool:
    return name.startswith(("custom:", "elastic_wait:"))


def _reserved(name: str) -> bool:
    return name in ("custom:(other)", "elastic_wait:(other)")


def check_grouping(buckets: dict[str, float], g: GroupedBuckets, limit: int) -> None:
    """What holds of any grouping: the sum, fixed buckets untouched, every name somewhere."""
    total = math.fsum(buckets.values())
    assert math.fsum(g.buckets.values()) == pytest.approx(total, rel=1e-12, abs=1e-9)
    assert len(g.named) <= limit and len(set(g.named)) == len(g.named)
    for name, value in buckets.items():
        if not _named(name):
            assert g.buckets[name] == value
        assert g.bucket_of(name) in g.buckets
        shown_as_itself = name in g.named or not _named(name) or _reserved(name)
        assert (g.bucket_of(name) == name) == shown_as_itself
    named = [n for n in buckets if _named(n)]
    assert len(g.named) + g.grouped == len(named)
    for group, (count, secs) in g.groups.items():
        members = [buckets[n] for n in named if g.bucket_of(n) == group]
        assert count == len(members) and secs == pytest.approx(math.fsum(members), abs=1e-9)
    assert set(g.buckets) == {n for n in buckets if not _named(n)} | set(g.named) | set(g.groups)
    if total > 0:  # goodput + every badput share is still 100 %
        shares = [v / total for k, v in g.buckets.items() if k != PRODUCTIVE]
        goodput = g.buckets.get(PRODUCTIVE, 0.0) / total
        assert goodput + math.fsum(shares) == pytest.approx(1.0, rel=1e-9)


@settings(max_examples=300, deadline=None)
@given(partitions(), st.integers(min_value=0, max_value=30))
def test_grouping_sums_and_keeps_the_largest_names(buckets: dict[str, float], limit: int) -> None:
    g = group_buckets(buckets, limit)
    check_grouping(buckets, g, limit)
    # the names kept are the `limit` largest (ties: by name), largest first
    ranked = sorted(
        ((n, v) for n, v in buckets.items() if _named(n) and not _reserved(n)),
        key=lambda kv: (-kv[1], kv[0]),
    )
    assert list(g.named) == [n for n, _ in ranked[:limit]]


@settings(max_examples=200, deadline=None)
@given(partitions(), st.lists(st.one_of(custom, elastic), max_size=25), st.integers(0, 30))
def test_names_asked_to_be_kept_take_their_places_first(
    buckets: dict[str, float], keep: list[str], limit: int
) -> None:
    g = group_buckets(buckets, limit, keep=keep)
    check_grouping(buckets, g, limit)
    wanted = [n for n in dict.fromkeys(keep) if not _reserved(n)][:limit]
    held = [n for n in wanted if n in buckets]
    assert list(g.named[: len(held)]) == held
    assert len(g.named) <= max(len(held), limit - len(wanted) + len(held))


def test_a_report_with_few_names_is_shown_as_it_is() -> None:
    buckets = {"productive": 50.0, "custom:eval": 3.0, "elastic_wait:slices": 2.0, "wasted": 1.0}
    g = group_buckets(buckets)
    assert dict(g.buckets) == buckets and g.groups == {} and g.grouped == 0
    assert g.label("custom:eval") == "custom:eval"


def test_a_log_bucket_named_like_a_group_is_in_the_group() -> None:
    g = group_buckets({"custom:(other)": 5.0, "custom:a": 1.0})
    assert g.named == ("custom:a",)
    assert g.groups == {"custom:(other)": (1, 5.0)}
    assert g.label("custom:(other)") == "custom:(1 other)"


def test_exporter_series_never_churn_and_stay_bounded() -> None:
    """Every snapshot brings a new name, larger than all before: the series a job has
    stay the first 20 names' (no series comes and goes) and the rest is in the group."""
    series = BucketSeries()
    shown: set[str] = set()
    for k in range(60):
        buckets = {"productive": 100.0, **{f"custom:n{i}": 1.0 + i for i in range(k + 1)}}
        rep = _report(buckets)
        series.update(Snapshot("j", T0 + k, rep, windows={60.0: rep}))
        names = dict(series.cumulative())
        assert shown <= set(names)  # nothing vanished
        shown = set(names)
        assert len(shown) <= MAX_NAMED_BUCKETS + 2
        assert math.fsum(names.values()) == pytest.approx(math.fsum(buckets.values()))
        assert dict(series.window(60.0)).keys() == names.keys()
    assert {n for n in shown if n.startswith("custom:n")} == {
        f"custom:n{i}" for i in range(MAX_NAMED_BUCKETS)
    }
    assert series.grouped == 60 - MAX_NAMED_BUCKETS


def _report(buckets: dict[str, float]) -> Report:
    total = math.fsum(buckets.values())
    return Report(
        job="j",
        start=T0,
        end=T0 + total,
        end_reason="last_event",
        total_seconds=total,
        goodput=buckets.get(PRODUCTIVE, 0.0) / total,
        observed_goodput=buckets.get(PRODUCTIVE, 0.0) / total,
        buckets=buckets,
        overlapped={},
        at_risk_seconds=0.0,
        ideal_step_time=None,
        ideal_step_time_source=None,
        attempts=[],
        steps=StepCounts(0, 0, None),
    )


# ------------------------------------------------- the job of 20,000 custom names


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_many_names_job(tmp_path_factory.mktemp("names"), NAMES)


@pytest.fixture(scope="module")
def live(job: Path) -> LiveJob:
    lj = LiveJob(job.parent, job.name)
    lj.update()
    return lj


@pytest.fixture(scope="module")
def report(live: LiveJob) -> Report:
    return live.report()


def _grouped_seconds() -> float:
    return math.fsum(many_names_seconds(i) for i in range(GROUPED))


def test_the_json_report_keeps_every_name(report: Report) -> None:
    data = json.loads(to_json(report))
    names = [k for k in data["buckets"] if k.startswith("custom:")]
    assert len(names) == NAMES and "custom:(other)" not in data["buckets"]


def test_the_table_shows_20_names_and_says_how_many_were_grouped(report: Report) -> None:
    con = Console(file=io.StringIO(), width=160, record=True)
    render_table(report, con)
    out = con.export_text()
    assert len(set(re.findall(r"custom:eval-\d+", out))) == MAX_NAMED_BUCKETS
    assert "custom:eval-19999" in out and "custom:eval-19979" not in out  # the largest
    assert f"custom:({GROUPED:,} others)" in out
    flat = " ".join(out.split())
    assert f"{GROUPED:,} custom names grouped into custom:({GROUPED:,} others): 6m 39s" in flat
    assert "6m 39s" in flat  # their total (399.4 s)


def test_the_html_page_is_small_and_names_the_group(live: LiveJob, report: Report) -> None:
    page = html_report(live.accountant.snapshot(report=report, drawing=True))
    size = len(page.encode("utf-8"))
    assert size <= 5 * 2**20, size  # was 120 MB
    match = re.search(r'<script type="application/json" id="badput-data">(.*?)</script>', page)
    assert match is not None
    data = json.loads(match.group(1))
    names = [b["name"] for b in data["buckets"]]
    assert len(names) <= len(BUCKETS) + MAX_NAMED_BUCKETS + 3  # the groups and "attempt"
    assert f"custom:({GROUPED:,} others)" in names
    assert data["shown"][:2] == ["productive", f"custom:({GROUPED:,} others)"]
    group = data["buckets"][names.index(f"custom:({GROUPED:,} others)")]
    assert group["seconds"] == pytest.approx(_grouped_seconds(), abs=1e-3)
    for lane in data["spans"]:  # every time bin has a column per bucket shown, no more
        assert all(len(row) == len(names) for row in lane["base"].get("sh", []))
        assert all(0 <= b < len(names) for b in lane["base"]["b"] + lane["top"]["b"])
    assert 'id="grouped-note"' in page and f"{GROUPED:,} custom names grouped into" in page


@pytest.fixture(scope="module")
def snapshot(job: Path) -> Snapshot:
    mon = Monitor(None, job, rolling_windows=(600.0,), clock=lambda: T0 + 2400)
    try:
        return mon.run_once()
    finally:
        mon.stop(final_flush=False)


def test_the_watch_view_shows_the_group(snapshot: Snapshot) -> None:
    con = Console(file=io.StringIO(), width=120, height=50, record=True)
    con.print(render_watch(snapshot))
    out = con.export_text()
    assert f"custom:({GROUPED:,} others)" in out
    assert len(set(re.findall(r"custom:eval-\d+", out))) <= MAX_NAMED_BUCKETS


def test_compare_shows_the_names_either_job_shows(report: Report) -> None:
    from badput.report import compare_dict, render_compare

    small = _small_report()
    con = Console(file=io.StringIO(), width=160, record=True)
    render_compare(report, small, con)
    out = con.export_text()
    rows = set(re.findall(r"^ *(custom:\S+)", out, re.M))  # the first cell of each row
    assert rows == {f"custom:eval-{i}" for i in range(GROUPED, NAMES)} | {
        "custom:eval",
        "custom:(other)",
    }
    flat = " ".join(out.split())
    assert f"A: {GROUPED:,} custom names grouped into custom:({GROUPED:,} others)" in flat
    assert "B:" not in flat  # the small job has nothing grouped
    assert len(compare_dict(report, small)["buckets"]) > NAMES  # --json: every name


def _small_report() -> Report:
    tl = Timeline("small", start=T0)
    tl.emit("job_start")
    tl.steps(5, 1.0, first=1)
    tl.span("custom", 2.0, name="eval")
    tl.emit("job_end", status="completed")
    from badput.engine import Accountant

    acc = Accountant("small")
    acc.ingest_events(tl.events)
    return acc.report()


# ------------------------------------------------------- Prometheus, a real scrape


def _scrape(url: str) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return [
        (s.name, dict(s.labels), s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


@pytest.fixture
def prometheus() -> Iterator[object]:
    from badput.monitor.prometheus import PrometheusExporter

    exp = PrometheusExporter(host="127.0.0.1", port=0)
    yield exp
    exp.close()


def test_a_scrape_of_the_job_has_fewer_than_200_series(job: Path, prometheus: object) -> None:
    from badput.monitor.prometheus import PrometheusExporter

    assert isinstance(prometheus, PrometheusExporter) and prometheus.url is not None
    mon = Monitor(None, job, [prometheus], rolling_windows=(600.0,), clock=lambda: T0 + 2400)
    try:
        mon.run_once()
        samples = _scrape(prometheus.url)  # (stop closes the exporter)
    finally:
        mon.stop(final_flush=False)
    assert len(samples) <= 200, len(samples)  # was 20,003 (40,000 with the window)
    seconds = {s[1]["bucket"]: s[2] for s in samples if s[0] == "badput_seconds"}
    assert len([b for b in seconds if b.startswith("custom:")]) == MAX_NAMED_BUCKETS + 1
    assert seconds["custom:(other)"] == pytest.approx(_grouped_seconds())
    elapsed = next(s[2] for s in samples if s[0] == "badput_elapsed_seconds")
    assert math.fsum(seconds.values()) == pytest.approx(elapsed)  # the partition still sums
    grouped = next(s[2] for s in samples if s[0] == "badput_grouped_buckets")
    assert grouped == GROUPED
    window = [s for s in samples if s[0] == "badput_window_seconds"]
    assert {s[1]["bucket"] for s in window} <= set(seconds)
    assert next(s[2] for s in samples if s[0] == "badput_up") == 1.0


def test_metrics_are_served_before_the_first_cycle(tmp_path: Path, prometheus: object) -> None:
    """The endpoint answers at once: badput_up 0 until a snapshot of the job is exported
    (here the job has not started yet), then 1."""
    from badput.monitor.prometheus import PrometheusExporter

    assert isinstance(prometheus, PrometheusExporter) and prometheus.url is not None
    store = tmp_path / "store"
    store.mkdir()
    assert _scrape(prometheus.url) == [("badput_up", {}, 0.0)]  # before any cycle
    mon = Monitor("late", store, [prometheus])
    try:
        mon.run_once()  # no event yet: nothing exported
        assert _scrape(prometheus.url) == [("badput_up", {}, 0.0)]
        tl = Timeline("late", start=T0)
        tl.emit("job_start")
        tl.steps(3, 1.0)
        events_to_jsonl(store / "late" / "0" / "h-0-1.jsonl", tl.events)
        mon.run_once()
        samples = _scrape(prometheus.url)
    finally:
        mon.stop(final_flush=False)
    assert ("badput_up", {}, 1.0) in samples
    assert any(s[0] == "badput_goodput_ratio" and s[1]["job"] == "late" for s in samples)


def test_opentelemetry_and_tensorboard_are_bounded(snapshot: Snapshot, tmp_path: Path) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from badput.monitor.otel import OpenTelemetryExporter
    from badput.monitor.tensorboard import TensorBoardExporter

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    otel = OpenTelemetryExporter(meter_provider=provider)
    otel.export(snapshot)
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        m.name: [dict(p.attributes or {}) for p in m.data.data_points]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    otel.close()
    provider.shutdown()
    assert sum(map(len, points.values())) <= 200
    custom = {a["bucket"] for a in points["badput.seconds"] if a["bucket"].startswith("custom:")}
    assert len(custom) == MAX_NAMED_BUCKETS + 1 and "custom:(other)" in custom
    window = {a["bucket"] for a in points["badput.window.seconds"]}
    assert window <= {a["bucket"] for a in points["badput.seconds"]}

    tb = TensorBoardExporter(tmp_path / "tb")
    tb.export(snapshot)
    tb.close()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert len(tags) <= 200
    # (tensorboardX writes ":", "(" and ")" in a tag as "_")
    assert len([t for t in tags if t.startswith("badput/custom_")]) == MAX_NAMED_BUCKETS + 1
    assert "badput/custom__other_" in tags
