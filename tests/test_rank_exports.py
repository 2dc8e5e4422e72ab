"""Stalls and stragglers reach every exporter: Prometheus (per rank), TensorBoard (top-k),
OpenTelemetry; and ``badput watch``'s status line."""

from __future__ import annotations

from pathlib import Path

from msgspec.structs import replace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from badput.engine import Accountant
from badput.monitor import Snapshot
from badput.monitor.otel import OpenTelemetryExporter
from badput.monitor.prometheus import PrometheusExporter
from badput.monitor.tensorboard import TensorBoardExporter
from badput.report._watch import status_line
from test_export_otel import collected, value
from test_export_tensorboard import accumulate, points
from test_ranks import T0, hung_job

NOW = T0 + 10.2 + 90.0  # 90 s after the last progress: stalled (threshold 60 s)


def snapshot() -> Snapshot:
    """Rank 2 hung in forward 90 s ago; rank 1 is slow in forward (a straggler)."""
    streams = hung_job(stall=90.0)
    streams.pop()  # still hung: no attempt_end
    slow = {"min": 0.5, "p50": 0.5, "p90": 0.5, "max": 0.5}  # rank 1: 0.5 s, the others 0.2 s
    streams[1] = [
        replace(e, quantiles=slow) if e.kind == "section_summary" and e.count == 10 else e
        for e in streams[1]
    ]
    acc = Accountant("j")
    for i, events in enumerate(streams):
        acc.ingest_events(events, source=f"r{i}")
    report = acc.report(now=NOW)
    return Snapshot(job="j", time=NOW, report=report, last_event_time=acc.last_event_ts)


def test_the_snapshot_has_an_ongoing_stall_and_a_straggler() -> None:
    rep = snapshot().report
    (stall,) = rep.stalls
    assert stall.ongoing and stall.first_stopped == [2]
    assert [(s.rank, s.section) for s in rep.stragglers] == [(1, "forward")]


def test_prometheus_per_rank_gauges() -> None:
    registry = CollectorRegistry()
    exp = PrometheusExporter(port=None, registry=registry)
    exp.export(snapshot())
    text = generate_latest(registry).decode()
    exp.close()
    assert 'badput_stalled{job="j"} 1.0' in text
    assert 'badput_stall_seconds{job="j"} 90.0' in text
    assert 'badput_stall_first_stopped{job="j",rank="2"} 1.0' in text
    assert 'badput_stragglers{job="j"} 1.0' in text
    assert 'badput_straggler{host="h0",job="j",rank="1",section="forward"} 1.0' in text
    assert 'badput_rank_score{job="j",rank="1",score="relative",section="forward"} 0.4' in text
    assert 'badput_rank_score{job="j",rank="0",score="relative",section="forward"} 1.0' in text


def test_tensorboard_gets_the_top_k(tmp_path: Path) -> None:
    exp = TensorBoardExporter(tmp_path, flush_secs=1)
    exp.export(snapshot())
    exp.close()
    acc = accumulate(tmp_path)
    assert points(acc, "ranks/stalled")[0][2] == 1.0
    assert points(acc, "ranks/stall_seconds")[0][2] == 90.0
    assert points(acc, "ranks/stragglers")[0][2] == 1.0
    assert points(acc, "ranks/straggler_1/rank")[0][2] == 1.0
    assert abs(points(acc, "ranks/straggler_1/score")[0][2] - 0.4) < 1e-6
    tags = set(acc.Tags()["scalars"])  # type: ignore[attr-defined]
    assert "ranks/straggler_2/rank" not in tags


def test_opentelemetry_gauges() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    exp = OpenTelemetryExporter(meter_provider=provider)
    exp.export(snapshot())
    got = collected(reader)
    exp.close()
    provider.shutdown()
    assert value(got["badput.stalled"], job="j") == 1.0
    assert value(got["badput.stall_seconds"], job="j") == 90.0
    assert value(got["badput.stragglers"], job="j") == 1.0
    score = value(got["badput.straggler.score"], job="j", rank="1", section="forward")
    assert abs(score - 0.4) < 1e-9


def test_watch_status_line_says_stalled_and_names_the_ranks() -> None:
    line = status_line(snapshot())
    assert "STALLED: no progress for 1m 30s (> 1m 00s), last step 10" in line
    assert "stopped first: rank 2 (in 'forward')" in line
    assert "stragglers: rank 1 forward 0.40" in line


def test_watch_status_line_says_stalled_once_when_the_log_is_silent_too() -> None:
    """Ten minutes later no event came either: the progress stall says so, once."""
    snap = snapshot()
    line = status_line(snap, now=snap.time + 600.0)
    assert line.count("STALLED") == 1, line
    assert "STALLED: no progress for 11m 30s (> 1m 00s), last step 10" in line
    assert "DOWN: no event for 10m 00s (> 1m 00s), not even a heartbeat" in line
