"""Prometheus exporter: a real scrape over loopback, and a loopback fake Pushgateway."""

from __future__ import annotations

import functools
import http.server
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _worked_example import JOB, t, worked_example_events
from badput.engine import Accountant, Report
from badput.monitor import Exporter, Snapshot
from badput.monitor.prometheus import PrometheusExporter
from badput.runtime.optional import MissingExtraError

WINDOW = 3600.0


def snapshot_at(minutes: float, k: int = 0, job: str = JOB) -> Snapshot:
    events = worked_example_events()
    now = t(minutes)
    acc = Accountant(JOB, ideal_step_time=120.0)
    acc.ingest_events([e for e in events if e.ts <= now])
    report = acc.report(now=now)
    window = acc.report(now=now, window=(now - WINDOW, now))
    return Snapshot(
        job,
        now,
        report,
        windows={WINDOW: window},
        step_time=acc.step_time_stats(now=now),
        sequence=k,
        last_event_time=acc.last_event_ts,
    )


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """(family name → type, (sample name, sorted labels) → value)."""
    from prometheus_client.parser import text_string_to_metric_families

    types: dict[str, str] = {}
    samples: Samples = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return types, samples


def scrape(exp: PrometheusExporter) -> tuple[dict[str, str], Samples]:
    assert exp.url == f"http://127.0.0.1:{exp.port}/metrics"
    with urllib.request.urlopen(exp.url, timeout=5) as resp:
        return parse(resp.read().decode())


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"job": JOB, **labels}.items()))


@pytest.fixture
def exporter() -> Iterator[PrometheusExporter]:
    exp = PrometheusExporter(port=0)
    yield exp
    exp.close()


def test_is_an_exporter_serving_on_loopback(exporter: PrometheusExporter) -> None:
    assert isinstance(exporter, Exporter)
    assert exporter.name == "prometheus"
    assert exporter.port is not None and exporter.port > 0
    assert exporter._server.server_address[0] == "127.0.0.1"
    # nothing exported yet: a valid page that says so, badput_up 0 and nothing else
    types, samples = scrape(exporter)
    assert [k for k in samples if k[0].startswith("badput_")] == [("badput_up", ())]
    assert samples[("badput_up", ())] == 0.0 and types["badput_up"] == "gauge"
    exporter.export(snapshot_at(180))
    _, samples = scrape(exporter)
    assert samples[("badput_up", ())] == 1.0


def test_scrape_gives_the_snapshot(exporter: PrometheusExporter) -> None:
    snap = snapshot_at(180)
    r = snap.report
    st = snap.step_time
    assert st is not None and st.gcm_deviation is not None
    exporter.export(snap)
    types, s = scrape(exporter)
    for name in (
        "badput_goodput_ratio",
        "badput_observed_goodput_ratio",
        "badput_seconds",
        "badput_elapsed_seconds",
        "badput_last_step",
        "badput_ideal_step_seconds",
        "badput_step_time_deviation_seconds",
        "badput_at_risk_seconds",
        "badput_window_goodput_ratio",
        "badput_window_seconds",
    ):
        assert types[name] == "gauge", name
    assert types["badput_disruptions"] == "counter"  # its samples: badput_disruptions_total
    assert s[key("badput_goodput_ratio")] == pytest.approx(r.goodput)
    assert s[key("badput_observed_goodput_ratio")] == pytest.approx(r.observed_goodput)
    assert s[key("badput_elapsed_seconds")] == pytest.approx(10800.0)
    assert s[key("badput_disruptions_total")] == 1.0
    assert s[key("badput_last_step")] == 71.0
    assert s[key("badput_ideal_step_seconds")] == 120.0
    assert s[key("badput_step_time_deviation_seconds")] == pytest.approx(st.gcm_deviation)
    assert s[key("badput_at_risk_seconds")] == pytest.approx(r.at_risk_seconds)
    assert s[key("badput_snapshot_timestamp_seconds")] == pytest.approx(snap.time)
    assert s[key("badput_last_event_timestamp_seconds")] == pytest.approx(t(180))
    buckets = {k[1][0][1]: v for k, v in s.items() if k[0] == "badput_seconds"}
    assert buckets == pytest.approx(r.buckets)
    assert "productive" in buckets
    assert sum(buckets.values()) == pytest.approx(r.total_seconds)
    w = snap.windows[WINDOW]
    assert s[key("badput_window_goodput_ratio", window="3600s")] == pytest.approx(w.goodput)
    assert s[key("badput_window_elapsed_seconds", window="3600s")] == pytest.approx(3600.0)
    wb = {
        dict(k[1])["bucket"]: v
        for k, v in s.items()
        if k[0] == "badput_window_seconds" and dict(k[1])["window"] == "3600s"
    }
    assert wb == pytest.approx(w.buckets)


def test_latest_snapshot_wins_and_buckets_stay(exporter: PrometheusExporter) -> None:
    exporter.export(snapshot_at(125))  # startup 60 s exists here, not later
    _, s = scrape(exporter)
    assert s[key("badput_seconds", bucket="startup")] == pytest.approx(60.0)
    assert s[key("badput_last_step")] == 52.0
    exporter.export(snapshot_at(200))
    _, s = scrape(exporter)
    assert s[key("badput_last_step")] == 75.0
    assert s[key("badput_goodput_ratio")] == pytest.approx(0.5)
    assert s[key("badput_seconds", bucket="startup")] == 0.0  # seen before: 0, not gone
    assert s[key("badput_seconds", bucket="wasted")] == pytest.approx(2400.0)


def test_unknown_statistics_are_left_out(exporter: PrometheusExporter) -> None:
    exporter.export(snapshot_at(3))  # before the first step
    _, s = scrape(exporter)
    assert s[key("badput_goodput_ratio")] == 0.0
    assert key("badput_last_step") not in s
    assert key("badput_step_time_deviation_seconds") not in s
    assert s[key("badput_seconds", bucket="checkpoint_restore")] == pytest.approx(180.0)


def test_several_jobs_and_a_given_registry() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    exp = PrometheusExporter(port=None, registry=registry)
    assert exp.port is None and exp.url is None
    exp.export(snapshot_at(100))
    exp.export(snapshot_at(200, job="other"))
    _, s = parse(generate_latest(registry).decode())
    assert s[key("badput_last_step")] == 70.0
    assert s[("badput_last_step", (("job", "other"),))] == 75.0
    exp.close()
    assert b"badput_" not in generate_latest(registry)  # unregistered by close()


def test_close_stops_the_server() -> None:
    exp = PrometheusExporter(port=0)
    url = exp.url
    assert url is not None
    exp.export(snapshot_at(60))
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200
    exp.close()
    exp.close()  # idempotent
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)
    with pytest.raises(RuntimeError, match="closed"):
        exp.export(snapshot_at(60))


class FakePushgateway:
    """A loopback HTTP server recording what is pushed to it."""

    def __init__(self) -> None:
        received: list[tuple[str, str, bytes]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append((self.command, self.path, body))
                self.send_response(200)
                self.end_headers()

            do_PUT = do_POST = _record  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.received = received
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def gateway() -> Iterator[FakePushgateway]:
    gw = FakePushgateway()
    yield gw
    gw.close()


def test_pushes_every_export_to_the_pushgateway(gateway: FakePushgateway) -> None:
    exp = PrometheusExporter(port=None, pushgateway=gateway.url)
    exp.export(snapshot_at(100))
    snap = snapshot_at(200)
    exp.export(snap)
    exp.close()
    assert [(m, p) for m, p, _ in gateway.received] == [("PUT", f"/metrics/job/{JOB}")] * 2
    types, s = parse(gateway.received[-1][2].decode())
    assert types["badput_goodput_ratio"] == "gauge"
    assert s[key("badput_goodput_ratio")] == pytest.approx(snap.report.goodput)
    assert s[key("badput_last_step")] == 75.0
    assert s[key("badput_disruptions_total")] == 1.0
    assert s[key("badput_seconds", bucket="wasted")] == pytest.approx(2400.0)
    assert s[key("badput_window_goodput_ratio", window="3600s")] == pytest.approx(
        snap.windows[WINDOW].goodput
    )


def test_push_job_names_the_group_and_only_the_exported_job_is_pushed(
    gateway: FakePushgateway,
) -> None:
    exp = PrometheusExporter(port=0, pushgateway=gateway.url, push_job="badput")
    exp.export(snapshot_at(100, job="other"))
    exp.export(snapshot_at(200))
    exp.close()
    assert [p for _, p, _ in gateway.received] == ["/metrics/job/badput"] * 2
    _, s = parse(gateway.received[-1][2].decode())
    jobs = {dict(k[1])["job"] for k in s if k[0].startswith("badput_")}
    assert jobs == {JOB}


def test_unreachable_pushgateway_raises_quickly() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exp = PrometheusExporter(port=None, pushgateway=f"http://127.0.0.1:{port}", push_timeout=2.0)
    start = time.monotonic()
    with pytest.raises(OSError):
        exp.export(snapshot_at(100))
    assert time.monotonic() - start < 3.0
    exp.close()


def test_silent_pushgateway_times_out() -> None:
    with socket.socket() as sock:  # accepts connections (backlog) but never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port = sock.getsockname()[1]
        exp = PrometheusExporter(
            port=None, pushgateway=f"http://127.0.0.1:{port}", push_timeout=0.5
        )
        start = time.monotonic()
        with pytest.raises(OSError):
            exp.export(snapshot_at(100))
        assert time.monotonic() - start < 3.0
        exp.close()


def test_missing_prometheus_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'badput\[prometheus\]'"):
        PrometheusExporter(port=None)


def test_counters_are_typed_as_counters_in_a_real_scrape(exporter: PrometheusExporter) -> None:
    """``badput_disruptions_total`` and ``badput_stalls_total`` only add up: the page served
    over 127.0.0.1 types them ``counter`` (they were gauges: rate() refused them), and
    every other family stays a gauge."""
    exporter.export(snapshot_at(180))
    with urllib.request.urlopen(exporter.url, timeout=5) as resp:
        text = resp.read().decode()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    assert types["badput_disruptions_total"] == "counter"
    assert types["badput_stalls_total"] == "counter"
    assert 'badput_disruptions_total{job="' + JOB + '"} 1.0' in text
    assert 'badput_stalls_total{job="' + JOB + '"} 0.0' in text
    others = {name: kind for name, kind in types.items() if not name.endswith("_total")}
    assert set(others.values()) == {"gauge"}, others
    assert len(others) >= 20


def test_counters_never_decrease_while_the_reports_stall_count_drops(
    exporter: PrometheusExporter,
) -> None:
    """A real Monitor follows a live job (hang timeout 4 s) and exports to the exporter served
    on 127.0.0.1; the report's stall count goes 1, 0 (the silence was a checkpoint save:
    named work once it ends), 1 (a real silence), 0 (a windowed report, no per-rank view);
    ``badput_stalls_total`` goes 1, 1, 2, 2 and ``badput_disruptions_total`` never drops."""
    from badput.monitor import Monitor
    from badput.testing import MemoryStore, read_all, recorder_for_tests

    store = MemoryStore()
    rec = recorder_for_tests(JOB, store)
    t0 = 1_700_000_000.0
    rec.record("job_start", ts=t0, hang_timeout=4.0)
    for k in range(3):
        rec.record_step_start(k, ts=t0 + 1 + k)
        rec.record_step_end(k, ts=t0 + 2 + k)
    rec.record_checkpoint_save_start(2, ts=t0 + 4)  # open: may be a hang
    rec.flush()
    clock = [t0 + 12.0]
    mon = Monitor(JOB, store, [exporter], clock=lambda: clock[0], ideal_step_time=1.0)
    seen: list[tuple[int, float, float]] = []

    def cycle(at: float) -> None:
        clock[0] = at
        snap = mon.run_once()
        _, samples = scrape(exporter)
        got = (samples[key("badput_stalls_total")], samples[key("badput_disruptions_total")])
        seen.append((len(snap.report.stalls), *got))

    cycle(t0 + 12.0)  # 8 s inside the open save: a stall going on
    rec.record_checkpoint_save_end(2, ts=t0 + 13.0)  # it was a save: no stall
    for k in range(3, 5):
        rec.record_step_start(k, ts=t0 + 10 + k)
        rec.record_step_end(k, ts=t0 + 11 + k)
    rec.flush()
    cycle(t0 + 16.0)
    rec.record_step_start(5, ts=t0 + 26.0)  # after 10 s without an event: a stall
    rec.record_step_end(5, ts=t0 + 27.0)
    rec.record_attempt_end("failed", 1, ts=t0 + 28.0)  # and a restart
    rec.flush()
    again = recorder_for_tests(JOB, store, attempt=1)
    again.record_job_start(ts=t0 + 29.0)
    again.flush()
    cycle(t0 + 30.0)
    # a snapshot of a windowed report: no per-rank view (0 stalls), one attempt
    acc = Accountant(JOB)
    acc.ingest_events(read_all(store, JOB)[0])
    window = acc.report(now=t0 + 30.0, window=(t0 + 29.0, t0 + 30.0))
    exporter.export(Snapshot(JOB, t0 + 30.0, window, last_event_time=t0 + 29.0))
    _, samples = scrape(exporter)
    seen.append(
        (
            len(window.stalls),
            samples[key("badput_stalls_total")],
            samples[key("badput_disruptions_total")],
        )
    )
    assert [n for n, _, _ in seen] == [1, 0, 1, 0]  # the report's count drops twice
    assert [c for _, c, _ in seen] == [1.0, 1.0, 2.0, 2.0]  # the counter never does
    assert [d for _, _, d in seen] == [0.0, 0.0, 1.0, 1.0]
    types, _ = scrape(exporter)
    assert types["badput_stalls"] == types["badput_disruptions"] == "counter"
    mon.stop(final_flush=False, timeout=1.0)


@functools.cache
def a_report() -> Report:
    return snapshot_at(0).report


@settings(max_examples=100, deadline=None)
@given(
    gaps=st.lists(st.tuples(st.floats(1.0, 50.0), st.floats(5.0, 50.0)), max_size=8),
    cuts=st.lists(st.tuples(st.floats(0.0, 1.0), st.booleans()), min_size=1, max_size=12),
)
def test_the_stall_counter_counts_each_stall_once_and_never_drops(
    gaps: list[tuple[float, float]], cuts: list[tuple[float, bool]]
) -> None:
    """Stalls of a live job, seen by an exporter at any sequence of times (each report lists
    those begun by then, the last one ongoing up to then; some reports are windows without
    them): the counter never decreases and ends at the number of stalls seen."""
    from badput.engine import Stall
    from badput.monitor._base import Tally

    spans, at = [], 0.0
    for before, length in gaps:
        spans.append((at + before, at + before + length))
        at += before + length
    tally, last, seen = Tally(), 0, set()
    rep = a_report()
    for cut, windowed in sorted(cuts):
        now = cut * (at + 1.0)
        stalls = [
            Stall("0", lo, min(hi, now), min(hi, now) - lo, hi > now, 4.0, None, [], "")
            for lo, hi in spans
            if lo < now
        ]
        snap = Snapshot(JOB, now, replace(rep, stalls=[] if windowed else stalls))
        tally.update(snap)
        assert tally.stalls >= last
        last = tally.stalls
        if not windowed:
            seen |= {s.start for s in stalls}
    assert tally.stalls == len(seen)
