"""The drop-in's API beyond the goldens: what a training process sees of its own events,
a caller's cloud_logger, Orbax checkpoint entries (CheckpointBadputCalculator and
OrbaxCheckpointLogger), exclusion windows, GCPMetrics and GoodputCache."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from badput.compat.ml_goodput_measurement import (
    checkpoint_badput_calculator as cbc,
)
from badput.compat.ml_goodput_measurement import (
    exclusion_utils,
    goodput,
    goodput_cache,
    goodput_utils,
    monitoring,
)
from badput.compat.orbax_logger import OrbaxCheckpointLogger
from badput.store import MemoryStore

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 3, 1, tzinfo=UTC)
BadputType = goodput_utils.BadputType


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_a_query_in_the_training_process_sees_what_it_recorded() -> None:
    """Issue 14, cause 5: no flush() before the query. The recorder's writer thread commits
    steps every 0.5 s; the calculator flushes this process's recorders of its job first."""
    store = MemoryStore()
    rec = goodput.GoodputRecorder("live", "log", True, store=store)
    rec.record_job_start_time(at(0))
    for step in range(10):
        rec.record_step_start_time(step, at(5 + 2 * step))  # buffered, not yet committed
    calc = goodput.GoodputCalculator("live", "log", store=store, clock=lambda: T0.timestamp() + 25)
    gp, _, last_step = calc.get_job_goodput()
    # 25 s; steps 0..8 completed (18 s); step 9 runs since 23 s (OTHER until it completes).
    assert gp == pytest.approx(18 / 25 * 100)
    assert last_step == 8
    rec.close()


class ListLogger:
    """A caller's cloud_logger: the library's recorder calls write_cloud_logging_entry."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def write_cloud_logging_entry(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)


def test_the_recorder_writes_the_library_payloads_to_a_callers_cloud_logger() -> None:
    log = ListLogger()
    rec = goodput.GoodputRecorder("mirror", "log", True, log, store=MemoryStore())
    rec.record_job_start_time(at(0))
    rec.record_step_start_time(3, at(1))
    rec.record_custom_badput_event_start_time(at(2), "eval")
    rec.record_step_start_time(-1, "not a time")  # type: ignore[arg-type]  # dropped
    rec.close()
    assert log.entries == [
        {goodput._JOB_NAME: "mirror", goodput._JOB_START_TIME: at(0).timestamp()},
        {"job_name": "mirror", "step_count": 3, "step_start_time": at(1).timestamp()},
        {
            "job_name": "mirror",
            "custom_badput_event_type": "eval",
            "custom_badput_event_start_time": at(2).timestamp(),
        },
    ]


def save(step: int, directory: str, manager: float, **phases: float) -> dict[str, Any]:
    return {
        "step": step,
        "event_type": "save",
        "directory": directory,
        "checkpoint_manager_blocking_start_time": 0.0,
        "checkpoint_manager_blocking_duration_secs": manager,
        "checkpointer_blocking_duration_secs": phases.get("ckptr", 0.0),
        "wait_for_prev_duration_secs": phases.get("wait", 0.0),
        "get_old_steps_duration_secs": phases.get("old", 0.0),
    }


def restore(step: int, event_type: str, manager: float, **extra: float) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "step": step,
        "event_type": event_type,
        "directory": "gs://b/ckpt" if event_type == "restore" else "/local",
        "checkpoint_manager_start_time": 0.0,
        "checkpoint_manager_duration_secs": manager,
        "checkpointer_duration_secs": extra.get("ckptr", manager),
    }
    if "broadcast" in extra:
        entry["broadcast_duration_secs"] = extra["broadcast"]
    return entry


def given_entries(entries: list[dict[str, Any]]) -> cbc.CheckpointBadputCalculator:
    calc = cbc.CheckpointBadputCalculator(cbc.CheckpointLoggerOptions(use_goodput_logger=True))
    calc.entries = entries
    return calc


def test_save_statistics_average_the_hosts_of_a_step_then_go_across_steps() -> None:
    """Two hosts log step 10's GCS save (4 s and 6 s: 5 s for the step), one logs step 20's
    (2 s), one logs a local save of step 20 (1 s, a group of its own)."""
    calc = given_entries(
        [
            save(10, "gs://b/ckpt", 4.0, ckptr=1.0, wait=2.0),
            save(10, "gs://b/ckpt", 6.0, ckptr=3.0, wait=0.0),
            save(20, "gs://b/ckpt", 2.0, ckptr=2.0, old=0.5),
            save(20, "/local", 1.0),
            restore(10, "restore", 9.0),  # not a save
        ]
    )
    persistent = calc.calculate_save_operation_checkpoint_manager_blocking_time("persistent")
    assert persistent.total_checkpoint_manager_blocking_time == pytest.approx(7.0)  # 5 + 2
    assert persistent.average_checkpoint_manager_blocking_time == pytest.approx(3.5)
    assert persistent.minimum_checkpoint_manager_blocking_time == pytest.approx(2.0)
    assert persistent.maximum_checkpoint_manager_blocking_time == pytest.approx(5.0)
    assert persistent.standard_deviation_checkpoint_manager_blocking_time == pytest.approx(
        2.1213203, abs=1e-6
    )  # sample std of (5, 2)
    assert persistent.total_checkpointer_blocking_time == pytest.approx(4.0)  # 2 + 2
    assert persistent.total_wait_for_prev_time == pytest.approx(1.0)
    assert persistent.total_get_old_steps_time == pytest.approx(0.5)
    local = calc.calculate_save_operation_checkpoint_manager_blocking_time("local")
    assert local.total_checkpoint_manager_blocking_time == pytest.approx(1.0)
    assert local.standard_deviation_checkpoint_manager_blocking_time == 0.0
    both = calc.calculate_save_operation_checkpoint_manager_blocking_time()
    assert both.total_checkpoint_manager_blocking_time == pytest.approx(8.0)


def test_restore_broadcast_figures_count_only_steps_that_broadcast() -> None:
    """Emergency (local) restores of steps 1 and 2; only step 1 broadcasts (3 s): the
    average broadcast divides by 1 step, the minimum sees step 2's 0."""
    calc = given_entries(
        [
            restore(1, "emergency_restore", 4.0, ckptr=2.0, broadcast=3.0),
            restore(2, "emergency_restore", 6.0, ckptr=2.0),
            restore(3, "restore", 8.0),
        ]
    )
    local = calc.calculate_restore_operation_checkpoint_manager_blocking_time("local")
    assert local.total_checkpoint_manager_time == pytest.approx(10.0)
    assert local.average_restore_time == pytest.approx(2.0)
    assert local.total_broadcast_time == pytest.approx(3.0)
    assert local.average_broadcast_time == pytest.approx(3.0)
    assert local.minimum_broadcast_time == 0.0
    assert local.maximum_broadcast_time == pytest.approx(3.0)
    persistent = calc.calculate_restore_operation_checkpoint_manager_blocking_time("persistent")
    assert persistent.total_checkpoint_manager_time == pytest.approx(8.0)
    assert persistent.total_broadcast_time == 0.0
    assert cbc.CheckpointBadputCalculator(
        cbc.CheckpointLoggerOptions(use_goodput_logger=True)
    ).calculate_restore_operation_checkpoint_manager_blocking_time() == (
        cbc.RestoreCheckpointManagerVerticalStepStats()
    )


def test_orbax_entries_reach_badputs_store_in_the_jobs_attempt() -> None:
    """MaxText's checkpoint time comes from Orbax's logger: OrbaxCheckpointLogger writes
    the entries through the job's recorder, so they count in its attempt."""
    store = MemoryStore()
    rec = goodput.GoodputRecorder("ckpt", "log", True, store=store)
    orbax = OrbaxCheckpointLogger("ckpt", store=store)
    rec.record_job_start_time(at(0))
    for step in range(10):
        rec.record_step_start_time(step, at(2 * step))
    entry = save(10, "gs://b/ckpt", 3.0)
    entry["checkpoint_manager_blocking_start_time"] = at(20).timestamp()
    orbax.log_entry(entry)
    local = save(10, "/local/ckpt", 1.0)
    local["checkpoint_manager_blocking_start_time"] = at(23).timestamp()
    orbax.log_entry(local)
    orbax.log_entry({"event_type": "save"})  # no step: logged and dropped
    for step in range(10, 15):
        rec.record_step_start_time(step, at(24 + 2 * (step - 10)))
    rec.record_job_end_time(at(34))
    calc = goodput.GoodputCalculator("ckpt", "log", store=store)
    _, breakdown, _ = calc.get_job_goodput(include_badput_breakdown=True)
    assert breakdown[BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == pytest.approx(4 / 34 * 100)
    stats = goodput.CheckpointBadputCalculator(
        goodput.CheckpointLoggerOptions(job_name="ckpt"), store=store
    )
    persistent = stats.calculate_save_operation_checkpoint_manager_blocking_time("persistent")
    assert persistent.total_checkpoint_manager_blocking_time == pytest.approx(3.0)
    local_stats = stats.calculate_save_operation_checkpoint_manager_blocking_time("local")
    assert local_stats.total_checkpoint_manager_blocking_time == pytest.approx(1.0)
    rec.close()


class LogDouble(ListLogger):
    """A caller's log the calculator reads too, as the library's test double does."""

    def read_cloud_logging_entries(self) -> tuple[list[dict[str, Any]], None]:
        return list(self.entries), None


def test_orbax_entries_in_the_callers_log_count_wherever_they_fall() -> None:
    """The library's checkpoint badput is the CheckpointBadputCalculator's totals over the
    entries of the log it reads, whatever their times: Orbax entries written straight into
    the caller's log, stamped 10 s after the Unix epoch (a 6 s save, a 2 s restore), count
    in a job of 2026. A save forwarded through the recorder (1 s, inside step 9) reaches
    both the store and that log, and counts once."""
    log, store = LogDouble(), MemoryStore()
    rec = goodput.GoodputRecorder("ckpt-log", "log", True, log, store=store)
    rec.record_job_start_time(at(0))
    for step in range(10):
        rec.record_step_start_time(step, at(2 * step))
    forwarded = save(9, "gs://b/ckpt", 1.0)
    forwarded["checkpoint_manager_blocking_start_time"] = at(18.5).timestamp()
    rec.record_payload(forwarded)
    log.write_cloud_logging_entry(
        {"job_name": "ckpt-log", **save(1, "gs://b/p", 6.0)}
        | {"checkpoint_manager_blocking_start_time": 10.0}
    )
    log.write_cloud_logging_entry(
        {"job_name": "ckpt-log", **restore(1, "restore", 2.0)}
        | {"checkpoint_manager_start_time": 10.0}
    )
    log.write_cloud_logging_entry({"job_name": "ckpt-log", "event_type": "save", "step": 2})
    rec.record_job_end_time(at(20))
    calc = goodput.GoodputCalculator("ckpt-log", "log", log, store=store)
    gp, breakdown, last_step = calc.get_job_goodput(include_badput_breakdown=True)
    # 20 s of steps; saves 1 s (on the timeline) + 6 s (before the job), taken from
    # productive time: 13 s; the 2 s restore has no OTHER to come from (the library's
    # remainder, floored at 0).
    assert gp == pytest.approx(65.0)
    assert breakdown[BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == pytest.approx(35.0)
    assert breakdown[BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME] == pytest.approx(10.0)
    assert breakdown[BadputType.OTHER] == 0.0
    assert last_step == 9
    details = calc.get_job_goodput_details()
    assert details["goodput_time"][goodput_utils.GoodputType.TOTAL] == pytest.approx(13.0)
    # Without the caller's log, only the forwarded save is known.
    alone = goodput.GoodputCalculator("ckpt-log", "log", store=store)
    gp, breakdown, _ = alone.get_job_goodput(include_badput_breakdown=True)
    assert gp == pytest.approx(95.0)
    assert breakdown[BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME] == pytest.approx(5.0)
    assert breakdown[BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME] == 0.0
    rec.close()


def test_a_logged_entry_matches_one_stored_entry_at_most() -> None:
    """Two hosts log the same 4 s save of step 10; the store holds one of them (forwarded
    by a recorder): the other still counts, the mean stays 4 s. An entry without its
    durations is left out (the library would raise KeyError on it)."""
    stored = [
        dict(save(10, "gs://b/ckpt", 4.0, ckptr=4.0), checkpoint_manager_blocking_start_time=50.0)
    ]
    logged = [
        dict(stored[0]),
        dict(stored[0]),
        {"event_type": "save", "step": 11, "checkpoint_manager_blocking_duration_secs": 2.0},
        {"job_name": "j", "step_count": 3, "step_start_time": 1.0},  # not Orbax's
    ]
    merged = cbc.add_logged_entries(stored, logged)
    assert len(merged) == 2
    stats = given_entries(merged).calculate_save_operation_checkpoint_manager_blocking_time()
    assert stats.total_checkpoint_manager_blocking_time == pytest.approx(4.0)
    moved = dict(stored[0], checkpoint_manager_blocking_start_time=51.0)  # another save
    assert len(cbc.add_logged_entries(stored, [moved])) == 2


def test_checkpoint_events_pair_per_writer() -> None:
    """Hosts a and b save step 10 at once (a: 10..14 s, b: 10.5..16.5 s): each start pairs
    with its own host's end, 4 s and 6 s, so the step's mean is 5 s."""
    from badput.events import Event, Kind

    def ev(ts: float, kind: str, host: str) -> Event:
        return Event(ts=ts, kind=kind, job="j", attempt="0", host=host, step=10)

    entries = cbc.entries_from_events(
        [
            ev(10.0, Kind.CHECKPOINT_SAVE_START, "a"),
            ev(10.5, Kind.CHECKPOINT_SAVE_START, "b"),
            ev(14.0, Kind.CHECKPOINT_SAVE_END, "a"),
            ev(16.5, Kind.CHECKPOINT_SAVE_END, "b"),
        ]
    )
    durations = [e["checkpoint_manager_blocking_duration_secs"] for e in entries]
    assert durations == [4.0, 6.0]
    stats = given_entries(entries).calculate_save_operation_checkpoint_manager_blocking_time()
    assert stats.total_checkpoint_manager_blocking_time == pytest.approx(5.0)


intervals = st.lists(
    st.tuples(st.integers(-50, 150), st.integers(1, 60)).map(
        lambda p: (T0 + dt.timedelta(seconds=p[0]), T0 + dt.timedelta(seconds=p[0] + p[1]))
    ),
    max_size=6,
)


@given(intervals, st.integers(-60, 160), st.integers(0, 80))
def test_exclusion_overlap_is_the_measure_of_the_intersection(
    windows: list[tuple[dt.datetime, dt.datetime]], start: int, length: int
) -> None:
    merged = exclusion_utils.normalize_intervals(windows)
    assert all(a < b for a, b in merged)
    assert all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(merged))
    lo, hi = T0.timestamp() + start, T0.timestamp() + start + length
    covered = sum(
        1
        for second in range(start, start + length)
        if any(a.timestamp() <= T0.timestamp() + second < b.timestamp() for a, b in windows)
    )
    assert exclusion_utils.get_exclusion_overlap(lo, hi, merged) == pytest.approx(covered)


def exclusion_job() -> goodput.GoodputCalculator:
    store = MemoryStore()
    rec = goodput.GoodputRecorder("excl", "log", True, store=store)
    rec.record_job_start_time(at(0))
    rec.record_training_preparation_start_time(at(0))
    rec.record_training_preparation_end_time(at(10))
    for step in range(20):
        rec.record_step_start_time(step, at(20 + 2 * step))
    rec.record_job_end_time(at(60))
    rec.close()
    return goodput.GoodputCalculator("excl", "log", store=store)


@given(intervals)
def test_exclusions_leave_out_only_accounted_time(
    windows: list[tuple[dt.datetime, dt.datetime]],
) -> None:
    """Preparation 0..10 s, untracked 10..20 s, steps 20..60 s. Whatever the windows: the
    excluded time is their overlap with preparation and steps (never the untracked gap),
    goodput is productive time less its excluded part over the job less the excluded
    time, and the breakdown still adds up to 100 %."""
    calc = exclusion_job()
    merged = exclusion_utils.normalize_intervals(windows)
    base = T0.timestamp()
    prep = exclusion_utils.get_exclusion_overlap(base, base + 10, merged)
    steps = exclusion_utils.get_exclusion_overlap(base + 20, base + 60, merged)
    gp, breakdown, last, excluded = calc.get_job_goodput_with_exclusions(windows, True)
    assert excluded == pytest.approx(prep + steps)
    assert last == 19
    total = 60 - excluded
    assert gp == pytest.approx((40 - steps) / total * 100)
    assert breakdown[BadputType.TRAINING_PREP] == pytest.approx(library_pct(10 - prep, total))
    assert breakdown[BadputType.OTHER] == pytest.approx(library_pct(10, total))


def library_pct(seconds: float, total: float) -> float:
    """The library's percentage: 0 unless 0 < seconds < total."""
    return seconds / total * 100 if 0 < seconds < total else 0.0


def test_no_exclusion_is_the_plain_goodput() -> None:
    calc = exclusion_job()
    gp, breakdown, last = calc.get_job_goodput(include_badput_breakdown=True)
    assert calc.get_job_goodput_with_exclusions([], True) == (gp, breakdown, last, 0.0)
    not_utc = (dt.datetime(2026, 3, 1), dt.datetime(2026, 3, 2))  # naive: ignored
    assert calc.get_job_goodput_with_exclusions([not_utc])[0] == pytest.approx(gp)
    details = calc.get_job_goodput_details()
    assert details["total_excluded_time"] == 0.0


def test_gcp_metrics_sends_one_batch_over_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("google.cloud.monitoring_v3")
    from google.cloud import monitoring_v3

    from _gcm_fake import FakeMetricService

    fake = FakeMetricService()
    try:
        client = fake.client()  # the real client on a loopback channel
        monkeypatch.setattr(monitoring_v3, "MetricServiceClient", lambda: client)
        sender = monitoring.GCPMetrics("proj")
        sender.send_metrics(
            [
                {
                    "metric_type": "compute.googleapis.com/workload/goodput_time",
                    "value": 42.5,
                    "value_type": monitoring.ValueType.DOUBLE,
                    "metric_labels": {"goodput_source": "TOTAL"},
                    "resource_type": "compute.googleapis.com/Workload",
                    "resource_labels": {"workload_id": "w", "location": "l", "replica_id": "0"},
                },
                {"metric_type": "bad"},  # no value: logged, left out of the batch
            ]
        )
        assert len(fake.requests) == 1
        request = fake.requests[0]
        assert request.name == "projects/proj"
        (series,) = request.time_series
        assert series.metric.type == "compute.googleapis.com/workload/goodput_time"
        assert dict(series.metric.labels) == {"goodput_source": "TOTAL"}
        assert series.points[0].value.double_value == 42.5
    finally:
        fake.stop()


def test_goodput_cache_keeps_the_first_start_and_the_last_end() -> None:
    cache = goodput_cache.GoodputCache("job")
    assert cache.is_cache_empty()
    cache.update_cached_entries(
        [{"job_start_time": 5.0}, {"step_start_time": 6.0, "step_count": 1}], None
    )
    cache.update_cached_entries([{"job_start_time": 9.0}, {"job_end_time": 12.0}], None)
    assert cache.get_job_start_time() == dt.datetime.fromtimestamp(5.0, UTC)
    assert cache.get_job_end_time() == dt.datetime.fromtimestamp(12.0, UTC)
    assert cache.get_step_entries() == [{"step_start_time": 6.0, "step_count": 1}]
    cache.clear_cache()
    assert cache.is_cache_empty() and cache.get_job_start_time() is None


def test_the_checkpoint_and_exclusion_example_prints_its_documented_output() -> None:
    """docs/compat.md, "Checkpoints, exclusions and the other public API"."""
    text = (Path(__file__).parents[2] / "docs" / "compat.md").read_text()
    section = text[text.index("### Checkpoints, exclusions and the other public API") :]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S)
    output = re.search(r"Output:\n\n```\n(.*?)```", section, flags=re.S)
    assert code is not None and output is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), "docs/compat.md", "exec"), {"__name__": "docs_compat_ckpt"})
    assert out.getvalue().strip() == output.group(1).strip()


def test_metadata_without_requests_uses_badputs_one_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The urllib path goes through badput.monitor.gcm.gce_metadata: a busy answer (503) is
    # asked again, a real one returned; a loopback server stands in for the metadata server.
    import http.server
    import threading

    from badput.compat.ml_goodput_measurement import goodput_utils

    answers = [503, 200]
    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            paths.append(self.path)
            code = answers.pop(0)
            body = b"proj-7" if code == 200 else b"busy"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{server.server_port}")
        value = goodput_utils._metadata_by_urllib("project", "project-id", 2.0, 3)
    finally:
        server.shutdown()
        server.server_close()
    assert value == "proj-7"
    assert paths == ["/computeMetadata/v1/project/project-id"] * 2
