"""The compat GoodputMonitor / ElasticGoodputMonitor: what they write (TensorBoard files read
back with TensorBoard's EventAccumulator, Cloud Monitoring requests received by a loopback
gRPC fake driven by the real client), with the compat calculator's numbers; their start,
stop, final flush, time-out, exit and fork rules; and that they never raise into the job."""

from __future__ import annotations

import datetime as dt
import inspect
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _gcm_fake import FakeMetricService
from badput.compat.ml_goodput_measurement import (
    goodput,
    goodput_elastic,
    goodput_utils,
    monitoring,
    monitoring_elastic,
)
from badput.store import MemoryStore

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
JOB = "mon-job"
NOW = T0 + 40.0  # the monitor's (virtual) clock: 3 s after the job's end
W = "compute.googleapis.com/workload/"
NO_GCM = goodput_utils.GCPOptions(
    enable_gcp_goodput_metrics=False, enable_gcp_step_deviation_metrics=False
)


def at(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(T0 + t, dt.timezone.utc)


def clock() -> float:
    return NOW


@pytest.fixture(autouse=True)
def no_metadata_server(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Off GCP, and no test may reach for the real metadata server."""
    calls: list[tuple[str, str]] = []

    def lookup(category: str, attribute: str, *args: Any, **kwargs: Any) -> None:
        calls.append((category, attribute))

    monkeypatch.setattr(goodput_utils, "get_gcp_metadata", lookup)
    return calls


def record_job(store: MemoryStore) -> None:
    """init 0-5 s, prep 5-10 s, steps 0..9 from 10 s (step 0 6 s, step 5 3 s, the others
    2 s), an eval of 2 s after step 4, the job's end at 37 s."""
    rec = goodput.GoodputRecorder(JOB, "goodput_logger", logging_enabled=True, store=store)
    rec.record_job_start_time(at(0))
    rec.record_tpu_init_start_time(at(0))
    rec.record_tpu_init_end_time(at(5))
    rec.record_training_preparation_start_time(at(5))
    rec.record_training_preparation_end_time(at(10))
    t = 10.0
    for step in range(10):
        rec.record_step_start_time(step, at(t))
        t += 6.0 if step == 0 else 3.0 if step == 5 else 2.0
        if step == 4:
            rec.record_custom_badput_event_start_time(at(t), custom_badput_event_type="eval")
            rec.record_custom_badput_event_end_time(at(t + 2), custom_badput_event_type="eval")
            t += 2.0
    assert t == 37.0
    rec.record_job_end_time(at(t))
    rec.close()


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore()
    record_job(s)
    return s


def calculator(store: MemoryStore) -> goodput.GoodputCalculator:
    return goodput.GoodputCalculator(JOB, "goodput_logger", store=store, clock=clock)


def make_monitor(store: MemoryStore, tb: Path, **kwargs: Any) -> monitoring.GoodputMonitor:
    args: dict[str, Any] = {
        "job_name": JOB,
        "logger_name": "goodput_logger",
        "tensorboard_dir": str(tb),
        "upload_interval": 60,
        "monitoring_enabled": True,
        "include_badput_breakdown": True,
        "include_step_deviation": True,
        "step_deviation_interval_seconds": 60,
        "gcp_options": NO_GCM,
        "store": store,
        "clock": clock,
    }
    args.update(kwargs)
    return monitoring.GoodputMonitor(**args)


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


def uploader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("badput-goodput-")]


def read_tb(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag under ``logdir`` -> its (step, value) points."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def last(points: list[tuple[int, float]]) -> float:
    return points[-1][1]


# ------------------------------------------------------------------------ the API


def test_signatures_are_the_librarys() -> None:
    common_tail = [
        ("configured_ideal_step_time", None),
        ("step_deviation_interval_seconds", 10),
        ("gcp_options", goodput_utils.GCPOptions()),
        ("skip_final_flush", False),
        ("final_flush_timeout_seconds", 10),
        ("gcs_sync_interval_seconds", 3600),
        ("cache_dir", "/tmp"),
        ("max_logs_retention_period", None),
    ]
    head = ["job_name", "logger_name", "tensorboard_dir", "upload_interval"]
    expected = {
        monitoring.GoodputMonitor: [
            ("monitoring_enabled", False),
            ("pathway_enabled", False),
            ("include_badput_breakdown", False),
            ("include_step_deviation", False),
            *common_tail,
        ],
        monitoring_elastic.ElasticGoodputMonitor: [
            ("monitoring_enabled", False),
            ("include_badput_breakdown", False),
            ("include_step_deviation", False),
            ("include_slice_efficiency", False),
            *common_tail,
        ],
    }
    for cls, defaults in expected.items():
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert [p.name for p in positional] == head + [name for name, _ in defaults]
        assert all(p.default is p.empty for p in positional[:4])
        assert [p.default for p in positional[4:]] == [d for _, d in defaults]
        extensions = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        assert extensions == ["store", "clock", "gcm_client"]
    monitor = monitoring.GoodputMonitor
    for method, args in {
        "start_goodput_uploader": [],
        "stop_goodput_uploader": ["skip_final_flush"],
        "start_step_deviation_uploader": [],
        "stop_step_deviation_uploader": ["skip_final_flush"],
        "start_rolling_window_goodput_uploader": ["rolling_windows_seconds"],
        "stop_rolling_window_goodput_uploader": ["skip_final_flush"],
        "start_goodput_interval_uploader": ["window_size_seconds"],
        "stop_goodput_interval_uploader": ["skip_final_flush"],
    }.items():
        assert list(inspect.signature(getattr(monitor, method)).parameters)[1:] == args
    assert monitoring_elastic.GCPOptions is goodput_utils.GCPOptions


def test_importing_the_module_loads_no_exporter_library() -> None:
    code = (
        "import sys\n"
        "from badput.compat.ml_goodput_measurement import monitoring, monitoring_elastic\n"
        "heavy = {m for m in sys.modules if m.startswith(('tensorboardX', 'google', 'grpc'))}\n"
        "assert not heavy, sorted(heavy)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_intervals_are_refused_at_construction(store: MemoryStore, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="upload_interval"):
        make_monitor(store, tmp_path, upload_interval=0)
    with pytest.raises(ValueError, match="step_deviation_interval_seconds"):
        make_monitor(store, tmp_path, step_deviation_interval_seconds=float("nan"))
    mon = make_monitor(store, tmp_path)
    with pytest.raises(ValueError, match="rolling window"):
        mon.start_rolling_window_goodput_uploader([60, -1])
    assert not uploader_threads()


# -------------------------------------------------------------------- TensorBoard


def test_tensorboard_gets_the_calculators_numbers(store: MemoryStore, tmp_path: Path) -> None:
    expected_goodput, breakdown, last_step = calculator(store).get_job_goodput(
        include_badput_breakdown=True
    )
    deviations = calculator(store).get_step_deviation()
    # by hand: 37 s; init 5 + prep 5 + eval 2 + startup (6 s first step - the 19/9 s mean
    # of the others); step times 6, 2, 2, 2, 4 (the eval), 3, 2, 2, 2 against an ideal 2 s
    assert expected_goodput == pytest.approx(100 * (37 - 12 - (6 - 17 / 8)) / 37)
    assert last_step == 9
    assert deviations == pytest.approx({0: 4, 1: 0, 2: 0, 3: 0, 4: 2, 5: 1, 6: 0, 7: 0, 8: 0})

    mon = make_monitor(store, tmp_path, upload_interval=0.05, step_deviation_interval_seconds=0.05)
    mon.start_goodput_uploader()
    mon.start_step_deviation_uploader()
    assert len(uploader_threads()) == 2
    wait_for(lambda: min(u.cycles for u in mon._uploaders.values() if u.running) >= 3)
    mon.stop_goodput_uploader()
    mon.stop_step_deviation_uploader()
    assert not uploader_threads()

    logdir = tmp_path / "goodput"
    files = sorted(p.name for p in logdir.iterdir())
    assert len(files) == 2 and all(".tfevents." in f for f in files)  # one per uploader
    tb = read_tb(logdir)
    points = tb["goodput/goodput"]
    assert len(points) >= 4  # three cycles at least, then the final flush
    assert {step for step, _ in points} == {9}
    assert last(points) == pytest.approx(expected_goodput, rel=1e-6)
    badput_tags = {t for t in tb if t.startswith("badput/")}
    assert badput_tags == {
        *(f"badput/{bt.name.lower()}" for bt in breakdown if bt.name != "CUSTOM_BADPUT_EVENTS"),
        "badput/custom_badput_events/eval",
    }
    for bt, value in breakdown.items():
        if isinstance(value, dict):
            assert last(tb["badput/custom_badput_events/eval"]) == pytest.approx(
                value["EVAL"], rel=1e-6
            )
            assert value["EVAL"] == pytest.approx(2 / 37 * 100)
        else:
            assert last(tb[f"badput/{bt.name.lower()}"]) == pytest.approx(value, rel=1e-6, abs=0)
    assert last(tb["badput/tpu_initialization"]) == pytest.approx(5 / 37 * 100, rel=1e-6)
    assert last(tb["badput/program_startup"]) == pytest.approx((6 - 17 / 8) / 37 * 100, rel=1e-6)
    # step deviation: the last value written for each step is the calculator's
    dev = tb["step_deviation"]
    final = dict(dev)
    assert final == pytest.approx(deviations, abs=1e-6)
    assert sorted({s for s, _ in dev}) == list(range(9))


def test_step_deviation_is_not_rewritten_when_nothing_changed(
    store: MemoryStore, tmp_path: Path
) -> None:
    """The library rewrites every step each cycle; here unchanged steps are written once."""
    mon = make_monitor(store, tmp_path, step_deviation_interval_seconds=0.05)
    mon.start_step_deviation_uploader()
    wait_for(lambda: mon._uploaders["step_deviation"].cycles >= 3)
    mon.stop_step_deviation_uploader()
    assert len(read_tb(tmp_path / "goodput")["step_deviation"]) == 9


def test_monitoring_disabled_is_a_no_op(
    store: MemoryStore, tmp_path: Path, no_metadata_server: list[tuple[str, str]]
) -> None:
    mon = make_monitor(
        store, tmp_path / "tb", monitoring_enabled=False, gcp_options=goodput_utils.GCPOptions()
    )
    mon.start_goodput_uploader()
    mon.start_step_deviation_uploader()
    mon.start_rolling_window_goodput_uploader([60])
    mon.start_goodput_interval_uploader(60)
    assert not uploader_threads()
    mon.stop_goodput_uploader()
    mon.stop_step_deviation_uploader()
    mon.stop_rolling_window_goodput_uploader()
    mon.stop_goodput_interval_uploader()
    assert not (tmp_path / "tb").exists()
    assert no_metadata_server == []  # not even a metadata lookup


def test_skip_final_flush(store: MemoryStore, tmp_path: Path) -> None:
    logdir = tmp_path / "goodput"
    mon = make_monitor(store, tmp_path)
    mon.start_goodput_uploader()
    t0 = time.monotonic()
    mon.stop_goodput_uploader(skip_final_flush=True)
    assert time.monotonic() - t0 < 2.0
    assert not uploader_threads()
    assert not logdir.exists()  # no cycle ran (60 s interval), no final flush
    mon.stop_goodput_uploader(skip_final_flush=True)  # never started either: nothing
    assert not logdir.exists()

    # the constructor's default, and a call that overrides it
    skipping = make_monitor(store, tmp_path, skip_final_flush=True)
    skipping.start_goodput_uploader()
    skipping.stop_goodput_uploader()
    skipping.stop_step_deviation_uploader()
    assert not logdir.exists()
    skipping.stop_goodput_uploader(skip_final_flush=False)
    assert set(read_tb(logdir)) >= {"goodput/goodput"}


def test_stop_without_start_makes_the_one_off_final_flush(
    store: MemoryStore, tmp_path: Path
) -> None:
    expected, _, _ = calculator(store).get_job_goodput()
    deviations = calculator(store).get_step_deviation()
    mon = make_monitor(store, tmp_path, include_badput_breakdown=False)
    mon.stop_goodput_uploader()
    mon.stop_step_deviation_uploader()
    mon.stop_rolling_window_goodput_uploader()  # Cloud Monitoring only: nothing to write
    assert not uploader_threads()
    tb = read_tb(tmp_path / "goodput")
    assert set(tb) == {"goodput/goodput", "step_deviation"}  # no breakdown asked for
    assert tb["goodput/goodput"] == [(9, pytest.approx(expected, rel=1e-6))]
    assert dict(tb["step_deviation"]) == pytest.approx(deviations, abs=1e-6)

    # without include_step_deviation there is no step deviation flush either
    other = tmp_path / "other"
    make_monitor(store, other, include_step_deviation=False).stop_step_deviation_uploader()
    assert not other.exists()


def test_starting_twice_warns_and_restarting_works(
    store: MemoryStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mon = make_monitor(store, tmp_path, upload_interval=0.05)
    with caplog.at_level(logging.WARNING):
        mon.start_goodput_uploader()
        mon.start_goodput_uploader()
    assert "already running" in caplog.text
    assert len(uploader_threads()) == 1
    mon.stop_goodput_uploader()
    assert not uploader_threads()
    mon.start_goodput_uploader()  # a stopped uploader can be started again
    wait_for(lambda: mon._uploaders["goodput"].cycles >= 1)
    mon.stop_goodput_uploader()
    assert not uploader_threads()
    assert len(list((tmp_path / "goodput").iterdir())) == 2  # one event file per run


def test_a_job_that_has_not_started_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    empty = MemoryStore()
    mon = make_monitor(empty, tmp_path, upload_interval=0.02)
    with caplog.at_level(logging.INFO, logger="badput"):
        mon.start_goodput_uploader()
        wait_for(lambda: mon._uploaders["goodput"].cycles >= 4)
        mon.stop_goodput_uploader()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "goodput query failed" in warnings[0].getMessage()
    assert not (tmp_path / "goodput").exists()


def test_an_unwritable_tensorboard_directory_never_raises(
    store: MemoryStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    mon = make_monitor(store, blocker / "tb", upload_interval=0.02)
    with caplog.at_level(logging.WARNING, logger="badput"):
        mon.start_goodput_uploader()
        wait_for(lambda: mon._uploaders["goodput"].cycles >= 5)
        mon.stop_goodput_uploader()
        mon.stop_step_deviation_uploader()  # the one-off fails the same way
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    tensorboard = [m for m in warnings if "TensorBoard" in m]
    assert len(tensorboard) == 2, warnings  # once per uploader run, not once per cycle
    assert "backing off" in tensorboard[0]
    assert not uploader_threads()


# --------------------------------------------------------------- Cloud Monitoring


@pytest.fixture
def fake() -> Iterator[FakeMetricService]:
    pytest.importorskip("grpc")
    pytest.importorskip("google.cloud.monitoring_v3")
    f = FakeMetricService()
    yield f
    f.stop()


GCP = goodput_utils.GCPOptions(
    project_id="my-project", location="us-central2-b", acc_type="TPU-v5p", cluster_name="c1"
)
COMMON = {"accelerator_type": "TPU-v5p", "cluster_name": "c1"}


def one(series: list[dict[str, Any]], metric: str, **labels: str) -> dict[str, Any]:
    found = [
        s
        for s in series
        if s["type"] == metric and all(s["labels"].get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (metric, labels, found)
    return found[0]


def sources(badput: dict[Any, Any]) -> dict[str, float]:
    """The calculator's breakdown as Cloud Monitoring badput sources (the library's
    flattening; the overlapped DATA_LOADING_ASYNC is not uploaded)."""
    out: dict[str, float] = {}
    for bt, value in badput.items():
        if isinstance(value, dict):
            out.update({f"{bt.name}.{k.upper()}": v for k, v in value.items()})
        elif bt.name != "DATA_LOADING_ASYNC":
            out[bt.name] = value
    return out


def in_window(series: list[dict[str, Any]], metric: str, size: int) -> list[dict[str, Any]]:
    return [
        s for s in series if s["type"] == metric and s["labels"]["rolling_window_size"] == str(size)
    ]


def one_value(series: list[dict[str, Any]], metric: str, **labels: str) -> float:
    values = {
        s["value"]
        for s in series
        if s["type"] == metric and all(s["labels"].get(k) == v for k, v in labels.items())
    }
    assert len(values) == 1, (metric, labels, values)
    return float(values.pop())


def test_cloud_monitoring_gets_the_librarys_series(
    store: MemoryStore, tmp_path: Path, fake: FakeMetricService
) -> None:
    calc = calculator(store)
    calc.get_job_goodput()
    details = calc.get_job_goodput_details()
    mon = make_monitor(store, tmp_path, gcp_options=GCP, gcm_client=fake.client())
    mon.stop_goodput_uploader()  # never started: the one-off final upload
    assert len(fake.requests) == 1
    got = fake.series(strip=W)
    assert {s["project"] for s in got} == {"projects/my-project"}
    assert {s["resource_type"] for s in got} == {"compute.googleapis.com/Workload"}
    assert {tuple(sorted(s["resource"].items())) for s in got} == {
        (("location", "us-central2-b"), ("replica_id", "0"), ("workload_id", JOB))
    }
    assert all(s["end"] == pytest.approx(NOW) for s in got)
    assert {s["type"] for s in got} == {
        "goodput_time",
        "badput_time",
        "disruptions",
        "max_productive_steps",
        "step_time_deviation",
        "total_elapsed_time",
        "performance",
    }
    g = one(got, "goodput_time")
    assert g["labels"] == {"goodput_source": "TOTAL", **COMMON}
    productive = 37 - 12 - (6 - 17 / 8)
    assert g["value"] == pytest.approx(productive)
    assert g["value"] == pytest.approx(details["goodput_time"][goodput.GoodputType.TOTAL])

    badput = {s["labels"]["badput_source"]: s["value"] for s in got if s["type"] == "badput_time"}
    assert badput == pytest.approx(sources(details["badput_time"]))
    assert badput["CUSTOM_BADPUT_EVENTS.EVAL"] == pytest.approx(2.0)
    assert badput["TPU_INITIALIZATION"] == pytest.approx(5.0)
    assert badput["PROGRAM_STARTUP"] == pytest.approx(6 - 17 / 8)
    assert one(got, "badput_time", badput_source="OTHER")["labels"] == {
        "badput_source": "OTHER",
        **COMMON,
    }
    assert g["value"] + sum(badput.values()) == pytest.approx(37.0)

    d = one(got, "disruptions")
    assert (d["kind"], d["value"], d["labels"]) == (
        "int64_value",
        0,
        {"window_type": "cumulative", **COMMON},
    )
    m = one(got, "max_productive_steps")
    assert (m["kind"], m["value"], m["labels"]) == ("int64_value", 9, COMMON)
    e = one(got, "total_elapsed_time")
    assert (e["value"], e["labels"]) == (37.0, {"window_type": "cumulative", **COMMON})
    dev = one(got, "step_time_deviation")  # fewer than 100 steps: the mean deviation
    assert dev["value"] == pytest.approx(7 / 9) and dev["labels"] == COMMON
    p = one(got, "performance")  # the cumulative upload's: the ideal step time
    assert (p["value"], p["labels"]) == (2.0, {})


def test_step_deviation_and_rolling_windows_to_cloud_monitoring(
    store: MemoryStore, tmp_path: Path, fake: FakeMetricService
) -> None:
    mon = make_monitor(
        store,
        tmp_path,
        gcp_options=GCP,
        gcm_client=fake.client(),
        upload_interval=0.05,
        step_deviation_interval_seconds=0.05,
    )
    mon.start_step_deviation_uploader()
    mon.start_rolling_window_goodput_uploader([10, 1000])
    mon.start_goodput_interval_uploader(1000)  # the older API, an uploader of its own
    wait_for(lambda: min(u.cycles for u in mon._uploaders.values() if u.running) >= 2)
    mon.stop_step_deviation_uploader()
    mon.stop_rolling_window_goodput_uploader()
    mon.stop_goodput_interval_uploader()
    assert not uploader_threads()
    got = fake.series(strip=W)

    performance = [s for s in got if s["type"] == "performance"]
    assert len(performance) >= 3  # two cycles and the final flush
    assert all(s["value"] == pytest.approx(7 / 9) for s in performance)  # mean deviation
    assert {tuple(s["labels"].items()) for s in performance} == {()}

    calc = calculator(store)
    for size in (10, 1000):
        window = calc.get_interval_metric_details(
            dt.datetime.fromtimestamp(NOW - size, dt.timezone.utc),
            dt.datetime.fromtimestamp(NOW, dt.timezone.utc),
        )
        ig = in_window(got, "interval_goodput", size)
        assert ig and ig[0]["labels"] == {
            "goodput_source": "TOTAL",
            "rolling_window_size": str(size),
            **COMMON,
        }
        expected = window["interval_goodput"][goodput.GoodputType.TOTAL]
        assert all(s["value"] == pytest.approx(expected) for s in ig)
        ib = in_window(got, "interval_badput", size)
        badput = {s["labels"]["badput_source"]: s["value"] for s in ib}
        assert badput == pytest.approx(sources(window["interval_badput"]))
    # by hand: [30, 40] s is clipped to its events, steps 6..9 (31..37 s): all productive;
    # [-960, 40] s is clipped to the job, 0..37 s: the cumulative goodput
    sizes = {"10": 100.0, "1000": 100 * (37 - 12 - (6 - 17 / 8)) / 37}
    for size, value in sizes.items():
        assert one_value(got, "interval_goodput", rolling_window_size=size) == pytest.approx(value)
    # the interval uploader writes the 1000 s window too: twice as many of those points
    n10, n1000 = (len(in_window(got, "interval_goodput", size)) for size in (10, 1000))
    assert n1000 > n10 >= 3


def test_off_gcp_cloud_monitoring_is_disabled_with_a_warning(
    store: MemoryStore,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    no_metadata_server: list[tuple[str, str]],
) -> None:
    options = goodput_utils.GCPOptions()  # enabled, project and location from metadata
    with caplog.at_level(logging.WARNING):
        mon = make_monitor(store, tmp_path, gcp_options=options)
    assert "could not be determined. Disabling GCP Monitoring" in caplog.text
    assert ("project", "project-id") in no_metadata_server
    assert mon._gcm is None
    # the caller's options (and the shared default) are left as they were
    assert options == goodput_utils.GCPOptions()
    mon.stop_goodput_uploader()  # TensorBoard still works
    assert "goodput/goodput" in read_tb(tmp_path / "goodput")


def test_missing_gcp_extra_disables_cloud_monitoring(
    store: MemoryStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.monitoring_v3", None)
    with caplog.at_level(logging.WARNING):
        mon = make_monitor(store, tmp_path, gcp_options=GCP)
    assert mon._gcm is None
    assert "badput[gcp]" in caplog.text


def test_final_flush_timeout_bounds_a_hung_upload(
    store: MemoryStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("google.cloud.monitoring_v3")

    class HangingClient:
        def __init__(self) -> None:
            self.release = threading.Event()
            self.calls = 0

        def create_time_series(self, **kwargs: Any) -> None:
            self.release.wait(30.0)
            self.calls += 1

    client = HangingClient()
    mon = make_monitor(
        store, tmp_path, gcp_options=GCP, gcm_client=client, final_flush_timeout_seconds=0.3
    )
    mon.start_goodput_uploader()
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING):
        mon.stop_goodput_uploader()
    assert 0.25 <= time.monotonic() - t0 < 2.0
    assert "did not complete within 0.3 seconds and will be abandoned" in caplog.text
    client.release.set()
    wait_for(lambda: not uploader_threads())  # the abandoned thread finishes in the background
    assert client.calls == 1

    # None: wait for the final flush however long it takes
    waiting = make_monitor(
        store, tmp_path, gcp_options=GCP, gcm_client=client, final_flush_timeout_seconds=None
    )
    client.release.clear()
    threading.Timer(0.3, client.release.set).start()
    t0 = time.monotonic()
    waiting.stop_goodput_uploader()
    assert time.monotonic() - t0 >= 0.25
    assert client.calls == 2


# ------------------------------------------------------------------------ elastic


def test_elastic_monitor_sends_slice_efficiency(tmp_path: Path, fake: FakeMetricService) -> None:
    store = MemoryStore()
    rec = goodput_elastic.ElasticGoodputRecorder(JOB, "l", logging_enabled=True, store=store)
    rec.record_job_start_time(at(0))
    rec.record_elastic_slice_counts(4, 4, 4, timestamp=at(0))
    for step in range(5):
        rec.record_step_start_time(step, at(2.0 * step))
    rec.record_elastic_slice_counts(2, 4, 3, timestamp=at(10))  # 2 of 4 stepping, 3 available
    rec.record_elastic_wait_start_time("slice_down", at(10))
    rec.record_elastic_wait_end_time("slice_down", at(16))
    rec.record_elastic_reinit_start_time(at(16))
    rec.record_elastic_reinit_end_time(at(20))
    rec.record_elastic_slice_counts(4, 4, 4, timestamp=at(20))
    for step in range(5, 10):
        rec.record_step_start_time(step, at(20 + 2.0 * (step - 5)))
    rec.record_job_end_time(at(30))
    rec.close()

    calc = goodput_elastic.ElasticGoodputCalculator(JOB, "l", store=store, clock=clock)
    _, breakdown, _ = calc.get_job_goodput(include_badput_breakdown=True)
    details = calc.get_job_goodput_details()
    mon = monitoring_elastic.ElasticGoodputMonitor(
        JOB,
        "l",
        str(tmp_path),
        60,
        monitoring_enabled=True,
        include_badput_breakdown=True,
        include_slice_efficiency=True,
        gcp_options=GCP,
        store=store,
        clock=clock,
        gcm_client=fake.client(),
    )
    assert isinstance(mon._calculator, goodput_elastic.ElasticGoodputCalculator)
    mon.stop_goodput_uploader()
    mon.start_rolling_window_goodput_uploader([15])
    mon.stop_rolling_window_goodput_uploader()
    got = fake.series(strip=W)

    # by hand, over the job's 30 s: 4/4 for 10 s, 2/4 (3/4 available) for 10 s, 4/4 for 10 s
    stepping = one(got, "stepping_slice_efficiency", window_type="CUMULATIVE")
    assert stepping["value"] == pytest.approx(details["stepping_slice_efficiency"])
    assert stepping["value"] == pytest.approx(25 / 30)
    assert stepping["labels"] == {
        "window_type": "CUMULATIVE",
        "rolling_window_size": "0",
        **COMMON,
    }
    available = one(got, "available_slice_efficiency", window_type="CUMULATIVE")
    assert available["value"] == pytest.approx(27.5 / 30)
    # the rolling window [25, 40] s (the job's last 5 s at 4/4, then nothing recorded)
    window = calc.get_interval_metric_details(
        dt.datetime.fromtimestamp(NOW - 15, dt.timezone.utc),
        dt.datetime.fromtimestamp(NOW, dt.timezone.utc),
    )
    interval = one(got, "stepping_slice_efficiency", window_type="INTERVAL")
    assert interval["labels"] == {"window_type": "INTERVAL", "rolling_window_size": "15", **COMMON}
    assert interval["value"] == pytest.approx(window["stepping_slice_efficiency"])

    badput = {s["labels"]["badput_source"]: s["value"] for s in got if s["type"] == "badput_time"}
    assert badput["ELASTIC_SLICE_DOWN"] == pytest.approx(6.0)
    assert badput["ELASTIC_REINITIALIZATION"] == pytest.approx(4.0)
    tb = read_tb(tmp_path / "goodput")
    for bt in (
        goodput.BadputType.ELASTIC_SLICE_DOWN,
        goodput.BadputType.ELASTIC_SCALE_UP,
        goodput.BadputType.ELASTIC_REINITIALIZATION,
    ):
        assert last(tb[f"badput/{bt.name.lower()}"]) == pytest.approx(breakdown[bt], rel=1e-6)
    assert last(tb["badput/elastic_slice_down"]) == pytest.approx(6 / 30 * 100, rel=1e-6)


# ------------------------------------------------------------------ exit and fork


def test_at_exit_running_uploaders_make_their_final_flush(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import datetime as dt, time
        from badput.compat.ml_goodput_measurement import goodput, goodput_utils, monitoring

        runs, tb = {str(tmp_path / "runs")!r}, {str(tmp_path / "tb")!r}
        t0 = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=60)
        rec = goodput.GoodputRecorder("j", "l", logging_enabled=True, store=runs)
        rec.record_job_start_time(t0)
        mon = monitoring.GoodputMonitor(
            "j", "l", tb, 60, monitoring_enabled=True,
            gcp_options=goodput_utils.GCPOptions(
                enable_gcp_goodput_metrics=False, enable_gcp_step_deviation_metrics=False
            ),
            store=runs,
        )
        mon.start_goodput_uploader()
        for step in range(5):  # buffered by the recorder: only its flush at exit writes them
            rec.record_step_start_time(step, t0 + dt.timedelta(seconds=10 + step))
        # no stop: the exit hook flushes the recorder, then makes the final upload
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    points = read_tb(tmp_path / "tb" / "goodput")["goodput/goodput"]
    assert [step for step, _ in points] == [3]  # steps 0..4, the job still running: 3 done
    assert 0 < points[0][1] < 100


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_in_a_forked_child_the_monitor_is_inert(store: MemoryStore, tmp_path: Path) -> None:
    mon = make_monitor(store, tmp_path, upload_interval=0.02)
    mon.start_goodput_uploader()
    wait_for(lambda: mon._uploaders["goodput"].cycles >= 1)
    logdir = tmp_path / "goodput"
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        code = 0
        try:
            files = sorted(logdir.iterdir())
            if uploader_threads():
                code = 1
            mon.start_goodput_uploader()
            if uploader_threads():
                code = 2
            mon.stop_goodput_uploader()  # no final flush of the parent's job
            mon.stop_step_deviation_uploader()
            if sorted(logdir.iterdir()) != files:
                code = 3
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    n = mon._uploaders["goodput"].cycles
    wait_for(lambda: mon._uploaders["goodput"].cycles > n)  # the parent's thread runs on
    mon.stop_goodput_uploader()
    assert not uploader_threads()
