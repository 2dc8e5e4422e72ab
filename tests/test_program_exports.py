"""Program goodput in every exporter (issue 35): Prometheus over a real loopback scrape,
OpenTelemetry through the SDK's in-memory reader, TensorBoard read back with
tensorboard's own reader, Cloud Monitoring through the real client against the loopback
gRPC fake; and ``badput monitor --peak-flops`` end to end. Figures of the worked example
(docs/program-goodput.md), by hand: 600 s queued, 1,000 s of steps, a 100 s save."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from _program_job import JOB, MFU, STEP, llama_log, write_llama
from badput.cli import main
from badput.engine import Accountant, Snapshot

TOKENS = 100 * 64 * 8192  # 52,428,800
#: metric key -> the figure by hand (8 H100s from the table)
EXPECTED = {
    "program.tokens_per_second": TOKENS / 1700,  # 30,840.5 over the job
    "program.productive_tokens_per_second": TOKENS / 1000,  # 52,428.8 over the kept steps
    "program.mfu": MFU,  # 40.4 %
    "program.scheduling_goodput": 1100 / 1700,  # 64.7 %
    "program.runtime_goodput": 1000 / 1100,  # 90.9 %
    "program.program_goodput": MFU,
    "program.mpg": MFU * 1000 / 1700,  # 23.8 %
}
WITHOUT_PEAK = ("program.mfu", "program.program_goodput", "program.mpg")


def snapshot(*, model: bool = True, job: str = JOB) -> Snapshot:
    events = [e for e in llama_log() if model or e.kind != "model"]
    a = Accountant(JOB, ideal_step_time=STEP)
    a.ingest_events(events)
    snap = a.snapshot()
    return Snapshot(job, snap.time, snap.report)


def without_peak() -> dict[str, float]:
    return {k: v for k, v in EXPECTED.items() if k not in WITHOUT_PEAK}


# -- Prometheus: a real scrape over loopback --------------------------------------


def test_prometheus_scrape_has_the_program_gauges() -> None:
    from badput.monitor._vocab import METRICS
    from badput.monitor.prometheus import PrometheusExporter
    from test_export_prometheus import scrape

    exp = PrometheusExporter(port=0)
    try:
        exp.export(snapshot())
        exp.export(snapshot(model=False, job="no-model"))
        types, samples = scrape(exp)
    finally:
        exp.close()
    for key, value in EXPECTED.items():
        name = METRICS[key].prometheus
        assert types[name] == "gauge"
        assert samples[(name, (("job", JOB),))] == pytest.approx(value), key
        has = (name, (("job", "no-model"),)) in samples
        assert has == (key not in WITHOUT_PEAK), key  # emitted only when computed
    assert samples[("badput_mfu_ratio", (("job", JOB),))] == pytest.approx(0.404452, abs=1e-6)


def test_prometheus_has_no_program_gauge_for_a_job_without_work() -> None:
    from badput.monitor.prometheus import PrometheusExporter
    from test_export_prometheus import scrape, snapshot_at

    exp = PrometheusExporter(port=0)
    try:
        exp.export(snapshot_at(30))
        types, _ = scrape(exp)
    finally:
        exp.close()
    assert "badput_goodput_ratio" in types and "badput_mfu_ratio" not in types
    assert not any(n.startswith(("badput_mpg", "badput_tokens")) for n in types)


# -- OpenTelemetry: the SDK's in-memory reader --------------------------------------


def test_otel_collects_the_program_gauges() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from badput.monitor.otel import OpenTelemetryExporter
    from test_export_otel import collected, value

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    exporter = OpenTelemetryExporter(meter_provider=provider)
    try:
        exporter.export(snapshot())
        exporter.export(snapshot(model=False, job="no-model"))
        got = collected(reader)
    finally:
        exporter.close()
        provider.shutdown()
    for key, expected in EXPECTED.items():
        points = got["badput." + key]
        assert value(points, job=JOB) == pytest.approx(expected), key
        assert any(a == {"job": "no-model"} for a, _ in points) == (key not in WITHOUT_PEAK)


# -- TensorBoard: read back with tensorboard's reader --------------------------------


def test_tensorboard_writes_the_program_scalars(tmp_path: Path) -> None:
    from badput.monitor.tensorboard import TensorBoardExporter
    from test_export_tensorboard import accumulate, points

    for name, snap, expected in (
        ("llama", snapshot(), EXPECTED),
        ("no-model", snapshot(model=False), without_peak()),
    ):
        exporter = TensorBoardExporter(tmp_path / name)
        exporter.export(snap)
        exporter.close()
        acc = accumulate(tmp_path / name)
        tags = {t for t in acc.Tags()["scalars"] if t.startswith("program/")}  # type: ignore[attr-defined]
        assert tags == {"program/" + k.removeprefix("program.") for k in expected}
        for key, value in expected.items():
            [(_, step, got)] = points(acc, "program/" + key.removeprefix("program."))
            assert step == 100 and got == pytest.approx(value, rel=1e-6), key


# -- Cloud Monitoring: the real client against the loopback gRPC fake ---------------


@pytest.fixture
def fake() -> Iterator[Any]:
    pytest.importorskip("grpc")
    pytest.importorskip("google.cloud.monitoring_v3")
    from _gcm_fake import FakeMetricService

    f = FakeMetricService()
    yield f
    f.stop()


def test_gcm_writes_the_program_series(fake: Any) -> None:
    from badput.monitor.gcm import PROGRAM_PREFIX, CloudMonitoringExporter

    exporter = CloudMonitoringExporter(
        "my-project", client=fake.client(), location="us-east5-a", accelerator_type="H100"
    )
    exporter.export(snapshot())
    got = [s for s in fake.series() if s["type"].startswith(PROGRAM_PREFIX)]
    assert {s["type"].removeprefix(PROGRAM_PREFIX) for s in got} == {
        k.replace(".", "/") for k in EXPECTED
    }
    for s in got:
        key = s["type"].removeprefix(PROGRAM_PREFIX).replace("/", ".")
        assert s["value"] == pytest.approx(EXPECTED[key]) and s["kind"] == "double_value"
        assert s["labels"] == {"accelerator_type": "H100"}
        assert s["resource_type"] == "generic_task"
        assert s["resource"] == {
            "project_id": "my-project",
            "location": "us-east5-a",
            "namespace": "badput",
            "job": JOB,
            "task_id": "0",
        }
    exporter = CloudMonitoringExporter("p", client=fake.client(), location="l", min_interval=0)
    before = len(fake.series())
    exporter.export(snapshot(model=False))
    later = [s["type"] for s in fake.series()[before:] if s["type"].startswith(PROGRAM_PREFIX)]
    assert sorted(later) == sorted(PROGRAM_PREFIX + k.replace(".", "/") for k in without_peak())


# -- badput monitor --peak-flops: the exporters' MFU from the command line ----------


def test_monitor_once_with_a_given_peak(tmp_path: Path) -> None:
    from test_export_tensorboard import accumulate, points

    log = write_llama(tmp_path / "logs")
    args = ["monitor", str(log), "--once", "--ideal-step-time", "10"]
    tb = tmp_path / "tb"
    out = CliRunner().invoke(
        main, [*args, "--tensorboard", str(tb), "--peak-flops", "2e15", "--devices", "4"]
    )
    assert out.exit_code == 0, out.output
    # 524,288 tokens x 61,066,469,376 FLOPs / 10 s of 4 x 2e15 FLOP/s
    assert "MFU 40.0%" in out.output
    acc = accumulate(tb)
    [(_, _, mfu)] = points(acc, "program/mfu")
    assert mfu == pytest.approx(3.2016417096204288e15 / 8e15, rel=1e-6)
