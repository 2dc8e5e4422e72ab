"""The OpenTelemetry exporter: SDK in-memory reader, and OTLP/HTTP to a loopback receiver."""

from __future__ import annotations

import gzip
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from _exporter_job import JOB, T0, job_events
from badput.engine import Accountant
from badput.monitor import Snapshot

pytest.importorskip("opentelemetry.sdk.metrics")

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from badput.monitor.otel import OpenTelemetryExporter, window_label
from badput.runtime.optional import MissingExtraError


def make_snapshot(sequence: int = 0, upto: float | None = None) -> Snapshot:
    """A snapshot at ``upto`` seconds after T0 (default: one second after the last event)."""
    events, last = job_events()
    end = last + 1 if upto is None else upto
    acc = Accountant(JOB, ideal_step_time=2.0)
    acc.ingest_events([e for e in events if e.ts <= T0 + end])
    now = T0 + end
    return Snapshot(
        JOB,
        now,
        acc.report(now=now),
        windows={60.0: acc.report(now=now, window=(now - 60, now))},
        step_time=acc.step_time_stats(now=now),
        sequence=sequence,
    )


# -- helpers to read what the SDK collected -------------------------------------


def collected(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], float]]]:
    """metric name → [(attributes, value)] of one collection."""
    out: dict[str, list[tuple[dict[str, Any], float]]] = {}
    data = reader.get_metrics_data()
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                pts = out.setdefault(m.name, [])
                for dp in m.data.data_points:
                    pts.append((dict(dp.attributes or {}), dp.value))
    return out


def value(points: list[tuple[dict[str, Any], float]], **attrs: str) -> float:
    found = [v for a, v in points if a == attrs]
    assert len(found) == 1, (attrs, points)
    return found[0]


@pytest.fixture
def reader_exporter() -> Iterator[tuple[InMemoryMetricReader, OpenTelemetryExporter]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    exporter = OpenTelemetryExporter(meter_provider=provider)
    yield reader, exporter
    exporter.close()
    provider.shutdown()


# -- in-memory reader ------------------------------------------------------------


def test_gauges_names_values_and_attributes(
    reader_exporter: tuple[InMemoryMetricReader, OpenTelemetryExporter],
) -> None:
    reader, exporter = reader_exporter
    assert exporter.name == "otel"
    snap = make_snapshot()
    exporter.export(snap)
    got = collected(reader)
    assert set(got) == {
        "badput.goodput",
        "badput.observed_goodput",
        "badput.seconds",
        "badput.elapsed",
        "badput.disruptions",
        "badput.last_step",
        "badput.ideal_step_time",
        "badput.step_time_deviation",
        "badput.at_risk",
        "badput.window.goodput",
        "badput.window.observed_goodput",
        "badput.window.seconds",
        "badput.window.elapsed",
        "badput.grouped_buckets",
        "badput.up",
        "badput.stalled",
        "badput.stall_seconds",
        "badput.stragglers",
    }
    assert value(got["badput.grouped_buckets"], job=JOB) == 0  # one custom name: not grouped
    assert got["badput.up"] == [({}, 1)]
    assert value(got["badput.stalled"], job=JOB) == 0
    assert value(got["badput.stragglers"], job=JOB) == 0
    rep = snap.report
    assert value(got["badput.goodput"], job=JOB) == pytest.approx(60 / 151)
    assert value(got["badput.observed_goodput"], job=JOB) == pytest.approx(62 / 151)
    assert value(got["badput.elapsed"], job=JOB) == pytest.approx(151.0)
    assert value(got["badput.disruptions"], job=JOB) == 1
    assert value(got["badput.last_step"], job=JOB) == 30
    assert value(got["badput.ideal_step_time"], job=JOB) == 2.0
    assert value(got["badput.at_risk"], job=JOB) == pytest.approx(rep.at_risk_seconds)
    assert snap.step_time is not None and snap.step_time.gcm_deviation is not None
    assert value(got["badput.step_time_deviation"], job=JOB) == pytest.approx(
        snap.step_time.gcm_deviation
    )
    seconds = got["badput.seconds"]
    assert {a["bucket"] for a, _ in seconds} == set(rep.buckets)
    for bucket, secs in rep.buckets.items():
        assert value(seconds, job=JOB, bucket=bucket) == pytest.approx(secs)
    assert value(seconds, job=JOB, bucket="custom:eval") == pytest.approx(4.0)
    assert sum(v for _, v in seconds) == pytest.approx(rep.total_seconds)
    # the rolling window
    w = snap.windows[60.0]
    assert window_label(60.0) == "60s"
    assert value(got["badput.window.goodput"], job=JOB, window="60s") == pytest.approx(40 / 60)
    assert value(got["badput.window.observed_goodput"], job=JOB, window="60s") == pytest.approx(0.7)
    assert value(got["badput.window.elapsed"], job=JOB, window="60s") == pytest.approx(60.0)
    wsec = got["badput.window.seconds"]
    for bucket, secs in w.buckets.items():
        assert value(wsec, job=JOB, window="60s", bucket=bucket) == pytest.approx(secs)
    assert sum(v for _, v in wsec) == pytest.approx(60.0)


def test_callbacks_read_the_latest_snapshot_and_keep_seen_buckets(
    reader_exporter: tuple[InMemoryMetricReader, OpenTelemetryExporter],
) -> None:
    reader, exporter = reader_exporter
    assert collected(reader).get("badput.goodput", []) == []  # nothing exported yet
    later = make_snapshot(sequence=1)
    early = make_snapshot(sequence=0, upto=60.0)  # attempt 0, before the eval
    exporter.export(early)
    first = collected(reader)
    assert value(first["badput.elapsed"], job=JOB) == pytest.approx(60.0)
    assert value(first["badput.disruptions"], job=JOB) == 0
    exporter.export(later)
    second = collected(reader)
    assert value(second["badput.elapsed"], job=JOB) == pytest.approx(151.0)
    assert value(second["badput.disruptions"], job=JOB) == 1
    # a bucket seen once stays reported (at its current value, 0 when empty)
    seen = {a["bucket"] for a, _ in second["badput.seconds"]}
    assert seen == set(early.report.buckets) | set(later.report.buckets)


def test_several_jobs_share_one_exporter(
    reader_exporter: tuple[InMemoryMetricReader, OpenTelemetryExporter],
) -> None:
    reader, exporter = reader_exporter
    snap = make_snapshot()
    other = Snapshot("other-job", snap.time, snap.report, sequence=0)
    exporter.export(snap)
    exporter.export(other)
    got = collected(reader)
    assert {a["job"] for a, _ in got["badput.goodput"]} == {JOB, "other-job"}
    assert {a["job"] for a, _ in got["badput.window.goodput"]} == {JOB}  # other has no windows


def test_close_stops_reporting(
    reader_exporter: tuple[InMemoryMetricReader, OpenTelemetryExporter],
) -> None:
    reader, exporter = reader_exporter
    exporter.export(make_snapshot())
    assert collected(reader)["badput.goodput"]
    exporter.close()
    exporter.export(make_snapshot())  # ignored after close
    assert collected(reader).get("badput.goodput", []) == []
    exporter.close()  # idempotent


def test_no_step_time_and_no_windows() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    exporter = OpenTelemetryExporter(meter_provider=provider)
    snap = make_snapshot()
    exporter.export(Snapshot(JOB, snap.time, snap.report))
    got = collected(reader)
    assert got.get("badput.step_time_deviation", []) == []
    assert got.get("badput.window.goodput", []) == []
    assert value(got["badput.goodput"], job=JOB) == pytest.approx(60 / 151)
    provider.shutdown()


def test_global_provider_is_the_default() -> None:
    from opentelemetry import metrics

    exporter = OpenTelemetryExporter()
    assert exporter.meter_provider is metrics.get_meter_provider()
    exporter.export(make_snapshot())
    exporter.close()


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)
    with pytest.raises(MissingExtraError, match=r"badput\[otel\]"):
        OpenTelemetryExporter()


# -- OTLP/HTTP to a loopback receiver -------------------------------------------


class _Receiver:
    """A minimal OTLP/HTTP metrics receiver on 127.0.0.1 (protobuf, optional gzip)."""

    def __init__(self) -> None:
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.encodings: list[str | None] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.got = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = self.headers.get("Content-Encoding")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                req = metrics_service_pb2.ExportMetricsServiceRequest()
                req.ParseFromString(body)
                receiver.requests.append(req)
                receiver.encodings.append(encoding)
                receiver.paths.append(self.path)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                resp = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(resp)))
                self.end_headers()
                self.wfile.write(resp)
                receiver.got.set()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/metrics"

    def gauges(self, index: int = -1) -> dict[str, list[tuple[dict[str, str], float]]]:
        """metric name → [(attributes, value)] of one received request."""
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        req = self.requests[index]
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    # restarts only add up: a monotonic cumulative sum, every other a gauge
                    if m.name == "badput.disruptions":
                        assert kind == "sum" and m.sum.is_monotonic, m
                        assert m.sum.aggregation_temporality == 2  # cumulative
                    else:
                        assert kind == "gauge", m.name
                    pts = out.setdefault(m.name, [])
                    for dp in getattr(m, kind).data_points:
                        attrs = {kv.key: kv.value.string_value for kv in dp.attributes}
                        v = dp.as_double if dp.WhichOneof("value") == "as_double" else dp.as_int
                        pts.append((attrs, float(v)))
        return out

    def resource(self, index: int = -1) -> dict[str, str]:
        rm = self.requests[index].resource_metrics[0]
        return {kv.key: kv.value.string_value for kv in rm.resource.attributes}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    r = _Receiver()
    yield r
    r.close()


def _check_pushed(receiver: _Receiver, snap: Snapshot) -> None:
    got = receiver.gauges()
    assert value(got["badput.goodput"], job=JOB) == pytest.approx(snap.report.goodput)
    assert value(got["badput.observed_goodput"], job=JOB) == pytest.approx(62 / 151)
    assert value(got["badput.disruptions"], job=JOB) == 1
    assert value(got["badput.last_step"], job=JOB) == 30
    assert value(got["badput.seconds"], job=JOB, bucket="wasted") == pytest.approx(20.0)
    assert value(got["badput.seconds"], job=JOB, bucket="productive") == pytest.approx(60.0)
    assert value(got["badput.window.goodput"], job=JOB, window="60s") == pytest.approx(40 / 60)
    assert value(
        got["badput.window.seconds"], job=JOB, window="60s", bucket="recovery"
    ) == pytest.approx(9.0)
    assert receiver.resource()["service.name"] == "badput"


def test_otlp_http_push_to_loopback_receiver(receiver: _Receiver) -> None:
    exporter = OpenTelemetryExporter(
        endpoint=receiver.endpoint,
        export_interval=3600,  # only explicit flushes in this test
        headers={"x-tenant": "team-a"},
        timeout=5.0,
    )
    snap = make_snapshot()
    exporter.export(snap)
    assert exporter.force_flush()
    assert receiver.got.wait(5)
    assert receiver.paths == ["/v1/metrics"]
    assert receiver.headers[0]["x-tenant"] == "team-a"
    assert receiver.headers[0]["content-type"] == "application/x-protobuf"
    _check_pushed(receiver, snap)
    # close() pushes a final collection and shuts the provider down
    n = len(receiver.requests)
    exporter.close()
    assert len(receiver.requests) == n + 1
    _check_pushed(receiver, snap)
    exporter.close()  # idempotent


def test_otlp_http_gzip(receiver: _Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "gzip")
    exporter = OpenTelemetryExporter(endpoint=receiver.endpoint, export_interval=3600)
    snap = make_snapshot()
    exporter.export(snap)
    exporter.close()
    assert receiver.encodings == ["gzip"]
    _check_pushed(receiver, snap)


def test_otlp_periodic_push(receiver: _Receiver) -> None:
    exporter = OpenTelemetryExporter(endpoint=receiver.endpoint, export_interval=0.1)
    snap = make_snapshot()
    exporter.export(snap)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if receiver.requests and "badput.goodput" in receiver.gauges():
            break
        time.sleep(0.05)
    exporter.close()
    _check_pushed(receiver, snap)


def test_unreachable_endpoint_does_not_hang() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exporter = OpenTelemetryExporter(
        endpoint=f"http://127.0.0.1:{port}/v1/metrics", export_interval=3600, timeout=1.0
    )
    t0 = time.monotonic()
    exporter.export(make_snapshot())  # no I/O
    assert time.monotonic() - t0 < 0.5
    exporter.force_flush()
    exporter.close()
    assert time.monotonic() - t0 < 10


def test_the_disruptions_counter_never_decreases(
    reader_exporter: tuple[InMemoryMetricReader, OpenTelemetryExporter],
) -> None:
    """``badput.disruptions`` is a monotonic sum: after a snapshot with a restart, one whose
    report holds fewer attempts (an earlier cut, a window) leaves it at the restarts seen."""
    reader, exporter = reader_exporter
    exporter.export(make_snapshot(sequence=0))
    assert value(collected(reader)["badput.disruptions"], job=JOB) == 1
    fewer = make_snapshot(sequence=1, upto=60.0)  # attempt 0 only
    assert len(fewer.report.attempts) == 1
    exporter.export(fewer)
    got = collected(reader)
    assert value(got["badput.disruptions"], job=JOB) == 1  # it was 0 before: a "reset"
    assert value(got["badput.elapsed"], job=JOB) == pytest.approx(60.0)  # gauges: the latest
