"""The Cloud Monitoring exporter: the real client library against a loopback gRPC fake.

The client's only transports are gRPC ones (no REST), so the fake endpoint is a
``grpc`` server on 127.0.0.1 implementing ``google.monitoring.v3.MetricService/
CreateTimeSeries``, and the client talks to it over an insecure channel. No
credentials are needed and nothing leaves the machine.
"""

from __future__ import annotations

import dataclasses
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from _exporter_job import JOB, T0, job_events
from _gcm_fake import FakeMetricService
from badput.engine import Accountant
from badput.monitor import Snapshot

pytest.importorskip("grpc")
pytest.importorskip("google.cloud.monitoring_v3")

from google.cloud import monitoring_v3

from badput.monitor.gcm import (
    STANDARD_SOURCES,
    CloudMonitoringExporter,
    badput_sources,
    goodput_seconds,
)
from badput.runtime.optional import MissingExtraError

W = "compute.googleapis.com/workload/"


def make_snapshot(sequence: int = 0, shift: float = 0.0) -> Snapshot:
    """The job one second after its last event (``shift`` moves the snapshot's clock)."""
    events, last = job_events()
    acc = Accountant(JOB, ideal_step_time=2.0)
    acc.ingest_events(events)
    now = T0 + last + 1
    snap = Snapshot(
        JOB,
        now,
        acc.report(now=now),
        windows={
            60.0: acc.report(now=now, window=(now - 60, now)),
            300.0: acc.report(now=now, window=(now - 300, now)),
        },
        step_time=acc.step_time_stats(now=now),
        sequence=sequence,
    )
    return dataclasses.replace(snap, time=snap.time + shift)


# -- the fake Cloud Monitoring endpoint -----------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeMetricService]:
    f = FakeMetricService()
    yield f
    f.stop()


def one(series: list[dict[str, Any]], metric: str, **labels: str) -> dict[str, Any]:
    found = [
        s
        for s in series
        if s["type"] == W + metric and all(s["labels"].get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (metric, labels, found)
    return found[0]


# -- the bucket → badput_source mapping -----------------------------------------


def test_badput_sources_follow_accounting_section_6() -> None:
    rep = make_snapshot().report
    buckets = {
        "productive": 100.0,
        "slowdown": 7.0,
        "accelerator_init": 1.0,
        "training_prep": 2.0,
        "startup": 3.0,
        "compile": 4.0,
        "data_loading": 5.0,
        "checkpoint_save": 6.0,
        "checkpoint_restore": 8.0,
        "wasted": 9.0,
        "recovery": 10.0,
        "custom:eval": 11.0,
        "custom:sdc_check": 12.0,
        "elastic_wait:scale_up": 13.0,
        "elastic_wait:slice_down": 14.0,
        "elastic_reinit": 15.0,
        "untracked": 16.0,
        "queued": 17.0,
        "some_future_bucket": 0.5,
    }
    rep = dataclasses.replace(rep, buckets=buckets, overlapped={"data_loading": 2.5})
    assert goodput_seconds(rep) == 107.0
    assert badput_sources(rep) == {
        "TPU_INITIALIZATION": 1.0,
        "TRAINING_PREP": 2.0,
        "PROGRAM_STARTUP": 7.0,
        "DATA_LOADING_SYNC": 5.0,
        "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": 6.0,
        "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": 8.0,
        "WASTED_PROGRESS_FROM_DISRUPTION": 9.0,
        "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 10.0,
        "CUSTOM_BADPUT_EVENTS.EVAL": 11.0,
        "CUSTOM_BADPUT_EVENTS.SDC_CHECK": 12.0,
        "ELASTIC_SCALE_UP": 13.0,
        "ELASTIC_SLICE_DOWN": 14.0,
        "ELASTIC_REINITIALIZATION": 15.0,
        "OTHER": 33.5,
    }
    assert badput_sources(rep, include_async=True)["DATA_LOADING_ASYNC"] == 2.5
    # the partition is kept: goodput + badput = total
    total = sum(buckets.values())
    assert goodput_seconds(rep) + sum(badput_sources(rep).values()) == pytest.approx(total)


def test_standard_sources_are_always_present() -> None:
    rep = dataclasses.replace(make_snapshot().report, buckets={"productive": 5.0})
    assert badput_sources(rep) == dict.fromkeys(STANDARD_SOURCES, 0.0)


# -- against the fake endpoint ---------------------------------------------------


def test_writes_ml_goodput_measurement_series(fake: FakeMetricService) -> None:
    exporter = CloudMonitoringExporter(
        "my-project",
        client=fake.client(),
        location="us-central2-b",
        labels={"cluster_name": "c1"},
        accelerator_type="TPU-v5p",
    )
    assert exporter.name == "gcm"
    snap = make_snapshot()
    exporter.export(snap)
    assert len(fake.requests) == 1
    got = fake.series()
    assert {s["project"] for s in got} == {"projects/my-project"}
    assert {s["resource_type"] for s in got} == {"compute.googleapis.com/Workload"}
    assert {tuple(sorted(s["resource"].items())) for s in got} == {
        (("location", "us-central2-b"), ("replica_id", "0"), ("workload_id", JOB))
    }
    assert all(s["end"] == pytest.approx(snap.time) for s in got)
    assert {s["type"][len(W) :] for s in got} == {
        "goodput_time",
        "badput_time",
        "total_elapsed_time",
        "max_productive_steps",
        "disruptions",
        "step_time_deviation",
        "performance",
        "interval_goodput",
        "interval_badput",
    }
    common = {"accelerator_type": "TPU-v5p", "cluster_name": "c1"}

    g = one(got, "goodput_time")
    assert g["labels"] == {"goodput_source": "TOTAL", **common}
    assert g["kind"] == "double_value"
    assert g["value"] == pytest.approx(62.0)  # productive 60 + slowdown 2 (observed goodput)

    badput = {
        s["labels"]["badput_source"]: s["value"] for s in got if s["type"] == W + "badput_time"
    }
    assert badput == pytest.approx(
        {
            "TPU_INITIALIZATION": 10.0,
            "TRAINING_PREP": 5.0,
            "PROGRAM_STARTUP": 11.0,  # startup 5 + compile 6
            "DATA_LOADING_SYNC": 0.0,  # the only load was overlapped (not uploaded)
            "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": 3.0,
            "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": 5.0,
            "WASTED_PROGRESS_FROM_DISRUPTION": 20.0,
            "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": 20.0,
            "CUSTOM_BADPUT_EVENTS.EVAL": 4.0,
            "OTHER": 11.0,  # queued 10 + untracked 1
        }
    )
    assert one(got, "badput_time", badput_source="OTHER")["labels"] == {
        "badput_source": "OTHER",
        **common,
    }
    assert g["value"] + sum(badput.values()) == pytest.approx(snap.report.total_seconds)

    d = one(got, "disruptions")
    assert (d["kind"], d["value"]) == ("int64_value", 1)
    assert d["labels"] == {"window_type": "cumulative", **common}
    m = one(got, "max_productive_steps")
    assert (m["kind"], m["value"], m["labels"]) == ("int64_value", 30, common)
    e = one(got, "total_elapsed_time")
    assert e["value"] == pytest.approx(151.0)
    assert e["labels"] == {"window_type": "cumulative", **common}
    assert snap.step_time is not None
    dev = one(got, "step_time_deviation")
    assert dev["value"] == pytest.approx(snap.step_time.gcm_deviation)
    assert dev["labels"] == common
    p = one(got, "performance")
    assert (p["value"], p["labels"]) == (2.0, {})

    for size, window in (("60", 60.0), ("300", 300.0)):
        wrep = snap.windows[window]
        ig = one(got, "interval_goodput", rolling_window_size=size)
        assert ig["labels"] == {"goodput_source": "TOTAL", "rolling_window_size": size, **common}
        assert ig["value"] == pytest.approx(100 * goodput_seconds(wrep) / wrep.total_seconds)
        ib = {
            s["labels"]["badput_source"]: s["value"]
            for s in got
            if s["type"] == W + "interval_badput" and s["labels"]["rolling_window_size"] == size
        }
        assert ig["value"] + sum(ib.values()) == pytest.approx(100.0)
    assert one(got, "interval_goodput", rolling_window_size="60")["value"] == pytest.approx(70.0)
    ib60 = one(got, "interval_badput", rolling_window_size="60", badput_source="OTHER")
    assert ib60["value"] == pytest.approx(100 / 60)  # 1 s untracked in 60 s
    # no duplicate series in one request (Cloud Monitoring rejects them)
    keys = [(s["type"], tuple(sorted(s["labels"].items()))) for s in got]
    assert len(keys) == len(set(keys))


def test_monitored_resource_zone_and_no_intervals(fake: FakeMetricService) -> None:
    exporter = CloudMonitoringExporter(
        "p",
        client=fake.client(),
        monitored_resource={"type": "generic_task", "labels": {"namespace": "ml", "job": "j"}},
        include_intervals=False,
    )
    exporter.export(make_snapshot())
    got = fake.series()
    assert {s["resource_type"] for s in got} == {"generic_task"}
    assert {s["resource"]["namespace"] for s in got} == {"ml"}
    assert not [s for s in got if "interval" in s["type"]]
    assert one(got, "goodput_time")["labels"]["accelerator_type"] == "UNKNOWN"

    zoned = CloudMonitoringExporter("p", client=fake.client(), zone="europe-west4-a")
    assert zoned.location == "europe-west4-a"


def test_min_interval_holds_back_and_close_writes(fake: FakeMetricService) -> None:
    exporter = CloudMonitoringExporter("p", client=fake.client(), location="l", min_interval=5.0)
    exporter.export(make_snapshot(0))
    exporter.export(make_snapshot(1, shift=1.0))  # 1 s later: held back
    assert len(fake.requests) == 1
    exporter.export(make_snapshot(2, shift=2.0))  # replaces the held-back one
    assert len(fake.requests) == 1
    exporter.close()
    assert len(fake.requests) == 2
    ends = sorted({round(s["end"], 3) for s in fake.series()})
    assert ends == pytest.approx([make_snapshot().time, make_snapshot().time + 2])
    exporter.export(make_snapshot(3, shift=60.0))  # ignored after close
    assert len(fake.requests) == 2
    exporter.close()  # idempotent


def test_many_series_are_split_into_requests_of_200(fake: FakeMetricService) -> None:
    snap = make_snapshot()
    custom = {f"custom:event{i}": 1.0 + i for i in range(19)}  # + custom:eval: 20, no group
    rep = dataclasses.replace(snap.report, buckets={**snap.report.buckets, **custom})
    windows = {float(w): rep for w in range(60, 660, 60)}  # ten windows
    exporter = CloudMonitoringExporter("p", client=fake.client(), location="l")
    exporter.export(dataclasses.replace(snap, report=rep, windows=windows))
    assert [len(r.time_series) for r in fake.requests] == [200, len(fake.series()) - 200]
    # per window: interval_goodput and a source each (20 customs + the standard ones);
    # cumulative: the same as badput_time, and the six other metrics
    per = 1 + 20 + len(STANDARD_SOURCES)
    assert len(fake.series()) == 11 * per + 5


def test_named_sources_are_bounded(fake: FakeMetricService) -> None:
    """250 custom names: 20 sources of their own (the largest), the rest in one."""
    snap = make_snapshot()
    custom = {f"custom:event{i}": 1.0 + i for i in range(250)}
    rep = dataclasses.replace(snap.report, buckets={**snap.report.buckets, **custom})
    exporter = CloudMonitoringExporter(
        "p", client=fake.client(), location="l", include_intervals=False
    )
    exporter.export(dataclasses.replace(snap, report=rep))
    sources = {
        s["labels"]["badput_source"]: s["value"]
        for s in fake.series()
        if s["type"] == W + "badput_time"
    }
    named = {k for k in sources if k.startswith("CUSTOM_BADPUT_EVENTS.")}
    assert named == {f"CUSTOM_BADPUT_EVENTS.EVENT{i}" for i in range(230, 250)} | {
        "CUSTOM_BADPUT_EVENTS.(OTHER)"
    }
    grouped = sum(1.0 + i for i in range(230)) + rep.bucket("custom:eval")
    assert sources["CUSTOM_BADPUT_EVENTS.(OTHER)"] == pytest.approx(grouped)
    assert sum(sources.values()) + goodput_seconds(rep) == pytest.approx(sum(rep.buckets.values()))


def test_slow_endpoint_times_out() -> None:
    slow = FakeMetricService(delay=3.0)
    try:
        exporter = CloudMonitoringExporter("p", client=slow.client(), location="l", timeout=0.3)
        t0 = time.monotonic()
        with pytest.raises(Exception, match=r"(?i)deadline"):
            exporter.export(make_snapshot())
        assert time.monotonic() - t0 < 2.0
    finally:
        slow.stop()


def test_unreachable_endpoint_raises_quickly(fake: FakeMetricService) -> None:
    client = fake.client()
    fake.stop()  # nobody listens any more
    exporter = CloudMonitoringExporter("p", client=client, location="l", timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - ServiceUnavailable or DeadlineExceeded
        exporter.export(make_snapshot())
    with pytest.raises(Exception):  # noqa: B017 - nothing written yet: not held back
        exporter.export(make_snapshot(1, shift=1.0))
    exporter.close()  # nothing held back: nothing to do
    assert time.monotonic() - t0 < 5.0


def test_close_logs_instead_of_raising(
    fake: FakeMetricService, caplog: pytest.LogCaptureFixture
) -> None:
    client = fake.client()
    exporter = CloudMonitoringExporter("p", client=client, location="l", timeout=1.0)
    exporter.export(make_snapshot(0))
    exporter.export(make_snapshot(1, shift=1.0))  # held back
    fake.stop()
    exporter.close()
    assert "final Cloud Monitoring write failed" in caplog.text


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="project_id"):
        CloudMonitoringExporter("", client=object(), location="l")
    with pytest.raises(ValueError, match="alias"):
        CloudMonitoringExporter("p", client=object(), location="a", zone="b")


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.monitoring_v3", None)
    with pytest.raises(MissingExtraError, match=r"badput\[gcp\]"):
        CloudMonitoringExporter("p", location="l")


def test_extra_labels_never_override_the_librarys_own(fake: FakeMetricService) -> None:
    exporter = CloudMonitoringExporter(
        "p",
        client=fake.client(),
        location="l",
        labels={"badput_source": "x", "window_type": "x", "team": "infra"},
    )
    exporter.export(make_snapshot())
    got = fake.series()
    assert one(got, "disruptions")["labels"]["window_type"] == "cumulative"
    assert one(got, "badput_time", badput_source="OTHER")["labels"]["team"] == "infra"
    badput = [s for s in got if s["type"] in (W + "badput_time", W + "interval_badput")]
    assert "x" not in {s["labels"]["badput_source"] for s in badput}


def test_default_client_is_the_librarys(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, Any]] = []

    class StubClient:
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)

    monkeypatch.setattr(monitoring_v3, "MetricServiceClient", StubClient)
    exporter = CloudMonitoringExporter("p", location="l")
    assert isinstance(exporter.client, StubClient)
    assert built == [{}]  # application default credentials, the default endpoint


class _MetadataServer:
    """A loopback stand-in for the GCE metadata server (``GCE_METADATA_HOST``)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        md = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                md.paths.append(self.path)
                ok = self.headers.get("Metadata-Flavor") == "Google"
                body = b"projects/123456/zones/us-east5-b" if ok else b"forbidden"
                self.send_response(200 if ok else 403)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.host = f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_location_defaults_to_the_vm_zone_from_metadata(
    fake: FakeMetricService, monkeypatch: pytest.MonkeyPatch
) -> None:
    md = _MetadataServer()
    try:
        monkeypatch.setenv("GCE_METADATA_HOST", md.host)
        exporter = CloudMonitoringExporter("p", client=fake.client(), min_interval=0)
        exporter.export(make_snapshot(0))
        exporter.export(make_snapshot(1, shift=10))
    finally:
        md.close()
    assert md.paths == ["/computeMetadata/v1/instance/zone"]  # looked up once
    assert {s["resource"]["location"] for s in fake.series()} == {"us-east5-b"}


def test_no_location_off_gce_raises_at_export(
    fake: FakeMetricService, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{port}")
    exporter = CloudMonitoringExporter("p", client=fake.client())
    with pytest.raises(RuntimeError, match="location="):
        exporter.export(make_snapshot())
    assert fake.requests == []
