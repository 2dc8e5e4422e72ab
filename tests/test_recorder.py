"""The Recorder: events, identity, context managers, background writing, failures."""

from __future__ import annotations

import itertools
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.events import Event, EventError, validate
from badput.recorder import NullRecorder, Recorder
from badput.runtime import env as _env
from badput.store import JsonlStore, MemoryStore, WriterKey, open_store
from badput.testing import (
    Timeline,
    events_to_jsonl,
    events_to_store,
    read_all,
    recorder_for_tests,
)

JOB = "rec-job"

_ENV_VARS = [
    _env.BADPUT_JOB,
    _env.BADPUT_STORE,
    _env.BADPUT_ATTEMPT,
    _env.BADPUT_DISABLE,
    _env.BADPUT_HEARTBEAT_INTERVAL,
    _env.TORCHELASTIC_RESTART_COUNT,
    _env.SLURM_RESTART_COUNT,
    _env.RANK,
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in _ENV_VARS:
        monkeypatch.delenv(var, raising=False)


def badput_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "badput" and r.levelno >= logging.WARNING]


def written(rec: Recorder) -> list[Event]:
    assert rec.flush(timeout=5)
    assert rec.store is not None
    evs, errors = read_all(rec.store, rec.job)
    assert errors == []
    return evs


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "badput-writer"]


# ------------------------------------------------------------- every record_*

CASES: list[tuple[str, tuple[Any, ...], dict[str, Any], str, dict[str, Any]]] = [
    ("record_job_scheduled", (), {}, "job_scheduled", {}),
    ("record_job_start", (), {}, "job_start", {}),
    ("record_job_end", (), {}, "job_end", {}),
    ("record_job_end", ("completed",), {}, "job_end", {"status": "completed"}),
    ("record_attempt_end", (), {}, "attempt_end", {}),
    (
        "record_attempt_end",
        ("failed", 137),
        {},
        "attempt_end",
        {"status": "failed", "exit_code": 137},
    ),
    ("record_heartbeat", (), {}, "heartbeat", {}),
    ("record_step_start", (7,), {}, "step_start", {"step": 7}),
    ("record_step_end", (7,), {}, "step_end", {"step": 7}),
    (
        "record_step_start",
        (8,),
        {"tokens": 8192, "samples": 4},
        "step_start",
        {"step": 8, "tokens": 8192, "samples": 4},
    ),
    ("record_step_end", (8,), {"samples": 4}, "step_end", {"step": 8, "samples": 4}),
    (
        "record_model",
        (),
        {"params": 8_030_261_248, "layers": 32, "hidden": 4096, "seq_len": 8192, "devices": 8},
        "model",
        {"params": 8_030_261_248, "layers": 32, "hidden": 4096, "seq_len": 8192, "devices": 8},
    ),
    ("record_accelerator_init_start", (), {}, "accelerator_init_start", {}),
    ("record_accelerator_init_end", (), {}, "accelerator_init_end", {}),
    ("record_training_prep_start", (), {}, "training_prep_start", {}),
    ("record_training_prep_end", (), {}, "training_prep_end", {}),
    ("record_checkpoint_restore_start", (50,), {}, "checkpoint_restore_start", {"step": 50}),
    ("record_checkpoint_restore_end", (50,), {}, "checkpoint_restore_end", {"step": 50}),
    ("record_checkpoint_save_start", (60,), {}, "checkpoint_save_start", {"step": 60}),
    ("record_checkpoint_save_end", (60,), {}, "checkpoint_save_end", {"step": 60}),
    ("record_checkpoint_committed", (60,), {}, "checkpoint_committed", {"step": 60}),
    ("record_data_loading_start", (), {}, "data_loading_start", {}),
    ("record_data_loading_start", (False,), {}, "data_loading_start", {"blocking": False}),
    ("record_data_loading_end", (), {"blocking": False}, "data_loading_end", {"blocking": False}),
    ("record_data_loading_end", (), {}, "data_loading_end", {}),
    ("record_compile_start", (), {}, "compile_start", {}),
    ("record_compile_end", (), {}, "compile_end", {}),
    ("record_custom_start", ("eval",), {}, "custom_start", {"name": "eval"}),
    ("record_custom_end", ("eval",), {}, "custom_end", {"name": "eval"}),
    ("record_elastic_wait_start", ("scale_up",), {}, "elastic_wait_start", {"name": "scale_up"}),
    ("record_elastic_wait_end", ("scale_up",), {}, "elastic_wait_end", {"name": "scale_up"}),
    ("record_elastic_reinit_start", (), {}, "elastic_reinit_start", {}),
    ("record_elastic_reinit_end", (), {}, "elastic_reinit_end", {}),
    ("record_distributed_init_start", (), {}, "distributed_init_start", {}),
    ("record_distributed_init_end", (), {}, "distributed_init_end", {}),
    ("record_model_build_start", (), {}, "model_build_start", {}),
    ("record_model_build_end", (), {}, "model_build_end", {}),
    ("record_teardown_start", (), {}, "teardown_start", {}),
    ("record_teardown_end", (), {}, "teardown_end", {}),
    (
        "record_elastic_slices",
        (3, 4, 2),
        {},
        "elastic_slices",
        {"active": 3, "total": 4, "available": 2},
    ),
]
OPTIONAL = (
    "step",
    "name",
    "blocking",
    "status",
    "exit_code",
    "active",
    "total",
    "available",
    "tokens",
    "samples",
    "params",
    "layers",
    "hidden",
    "seq_len",
    "devices",
)


def test_cases_cover_every_record_method() -> None:
    methods = {m for m in dir(Recorder) if m.startswith("record_")}
    assert methods == {c[0] for c in CASES}


def test_every_record_method_writes_its_event() -> None:
    rec = recorder_for_tests(JOB, attempt=3, rank=2, host="node-7")
    before = time.time()
    for method, args, kwargs, _, _ in CASES:
        getattr(rec, method)(*args, **kwargs)
    after = time.time()
    evs = written(rec)
    assert len(evs) == len(CASES)
    for event, (_, _, _, kind, fields) in zip(evs, CASES, strict=True):
        assert event.kind == kind
        assert {f: getattr(event, f) for f in OPTIONAL if getattr(event, f) is not None} == fields
        assert (event.job, event.attempt, event.host, event.rank, event.pid) == (
            JOB,
            3,
            "node-7",
            2,
            os.getpid(),
        )
        assert before <= event.ts <= after
        assert validate(event) is None
    assert [e.ts for e in evs] == sorted(e.ts for e in evs)
    assert rec.recorded_events == len(CASES) and rec.dropped_events == 0
    rec.close()


def test_explicit_ts_is_honoured() -> None:
    rec = recorder_for_tests(JOB)
    rec.record_job_start(ts=100.5)
    rec.record_step_start(1, ts=101.0)
    rec.record_custom_end("eval", ts=102)
    rec.record_elastic_slices(1, 2, 1, ts=103.25)
    rec.record("step_end", ts=104.0, step=1)
    assert [e.ts for e in written(rec)] == [100.5, 101.0, 102.0, 103.25, 104.0]
    rec.close()


def test_generic_record() -> None:
    rec = recorder_for_tests(JOB)
    rec.record("custom_start", name="sdc_check")
    rec.record("future_kind")
    rec.record("job_end", status="cancelled")
    evs = written(rec)
    assert [(e.kind, e.name, e.status) for e in evs] == [
        ("custom_start", "sdc_check", None),
        ("future_kind", None, None),
        ("job_end", None, "cancelled"),
    ]
    rec.close()


def test_unknown_and_identity_fields_are_ignored_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = recorder_for_tests(JOB, rank=0)
    rec.record("step_start", step=1, flavour="x", rank=9)
    (event,) = written(rec)
    assert event.step == 1 and event.rank == 0
    assert rec.dropped_events == 0
    assert len(badput_warnings(caplog)) == 2  # one per ignored field name
    rec.close()


def test_numpy_values_are_coerced_and_invalid_values_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = recorder_for_tests(JOB)
    rec.record_step_start(np.int64(5))  # type: ignore[arg-type]
    rec.record_step_end(3.0)  # type: ignore[arg-type]
    rec.record_step_start("seven")  # type: ignore[arg-type]
    rec.record_step_start(None)  # type: ignore[arg-type]
    rec.record_job_start(ts=float("nan"))
    rec.record_step_end(8, ts=np.float64(9.5))  # type: ignore[arg-type]
    evs = written(rec)
    assert [(e.kind, e.step) for e in evs] == [("step_start", 5), ("step_end", 3), ("step_end", 8)]
    assert type(evs[0].step) is int
    assert evs[2].ts == 9.5
    assert rec.dropped_events == 3
    assert len(badput_warnings(caplog)) == 1
    rec.close()


# ----------------------------------------------------------- context managers

SPANS: list[tuple[str, tuple[Any, ...], str, dict[str, Any]]] = [
    ("step", (4,), "step", {"step": 4}),
    ("checkpoint_save", (10,), "checkpoint_save", {"step": 10}),
    ("checkpoint_restore", (9,), "checkpoint_restore", {"step": 9}),
    ("data_loading", (), "data_loading", {}),
    ("data_loading", (False,), "data_loading", {"blocking": False}),
    ("custom", ("eval",), "custom", {"name": "eval"}),
    ("accelerator_init", (), "accelerator_init", {}),
    ("training_prep", (), "training_prep", {}),
    ("compile", (), "compile", {}),
    ("elastic_wait", ("slice_down",), "elastic_wait", {"name": "slice_down"}),
    ("elastic_reinit", (), "elastic_reinit", {}),
]


@pytest.mark.parametrize(("method", "args", "base", "fields"), SPANS)
def test_context_manager_records_start_and_end(
    method: str, args: tuple[Any, ...], base: str, fields: dict[str, Any]
) -> None:
    rec = recorder_for_tests(JOB)
    with getattr(rec, method)(*args):
        time.sleep(0.001)
    with pytest.raises(KeyError, match="boom"), getattr(rec, method)(*args):
        raise KeyError("boom")
    evs = written(rec)
    assert [e.kind for e in evs] == [f"{base}_start", f"{base}_end"] * 2
    for e in evs:
        assert {f: getattr(e, f) for f in OPTIONAL if getattr(e, f) is not None} == fields
    assert evs[1].ts - evs[0].ts >= 0.001
    rec.close()


def test_nested_context_managers() -> None:
    rec = recorder_for_tests(JOB)
    try:
        with rec.step(1), rec.data_loading():
            raise RuntimeError("user error")
    except RuntimeError:
        pass
    kinds = [e.kind for e in written(rec)]
    assert kinds == ["step_start", "data_loading_start", "data_loading_end", "step_end"]
    rec.close()


# ---------------------------------------------------------------- identity


def test_job_from_env_and_missing_job(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="BADPUT_JOB"):
        Recorder(store=MemoryStore())
    monkeypatch.setenv(_env.BADPUT_JOB, "env-job")
    rec = Recorder(store=MemoryStore(), heartbeat_interval=0)
    assert rec.job == "env-job"
    rec.close()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # torchrun's restart inside the launcher's attempt: a new attempt, never merged
        (
            {"TORCHELASTIC_RESTART_COUNT": "2", "SLURM_RESTART_COUNT": "5", "BADPUT_ATTEMPT": "9"},
            "9.2",
        ),
        ({"TORCHELASTIC_RESTART_COUNT": "2", "SLURM_RESTART_COUNT": "5"}, "5.2"),
        # the first worker group is the launcher's attempt itself
        ({"TORCHELASTIC_RESTART_COUNT": "0", "BADPUT_ATTEMPT": "3"}, 3),
        ({"TORCHELASTIC_RESTART_COUNT": "3"}, 3),
        ({"SLURM_RESTART_COUNT": "5", "BADPUT_ATTEMPT": "9"}, 9),
        ({"SLURM_RESTART_COUNT": "5"}, 5),
        ({"BADPUT_ATTEMPT": "9"}, 9),
        ({"BADPUT_ATTEMPT": "retry-b"}, "retry-b"),
        ({"TORCHELASTIC_RESTART_COUNT": "", "BADPUT_ATTEMPT": "4"}, 4),
    ],
)
def test_attempt_from_env_in_priority_order(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str | int
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rec = recorder_for_tests(JOB, attempt=None)  # type: ignore[arg-type]
    assert rec.attempt == expected
    rec.record_job_start()
    # (a launched process also records its process_init: same attempt)
    events = written(rec)
    assert [e.kind for e in events][-1] == "job_start"
    assert {e.attempt for e in events} == {expected}
    assert isinstance(rec.store, MemoryStore)
    assert rec.store.streams(JOB)[0].startswith(f"{expected}/")
    rec.close()
    # the argument wins over everything
    rec = recorder_for_tests(JOB, attempt="explicit")
    assert rec.attempt == "explicit"
    rec.close()


def test_fresh_attempt_id_when_no_env() -> None:
    rec = recorder_for_tests(JOB, attempt=None)  # type: ignore[arg-type]
    assert isinstance(rec.attempt, str)
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}-{os.getpid()}", rec.attempt)
    rec.close()


def test_rank_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = recorder_for_tests(JOB, rank=None)
    assert rec.rank is None
    rec.close()
    monkeypatch.setenv(_env.RANK, "3")
    rec = recorder_for_tests(JOB, rank=None)
    assert rec.rank == 3
    rec.record_heartbeat()
    assert written(rec)[0].rank == 3
    rec.close()
    assert recorder_for_tests(JOB, rank=1).rank == 1


# ---------------------------------------------------------------- disabled


def _assert_null(rec: Recorder, root: Path) -> None:
    assert isinstance(rec, NullRecorder)
    assert not rec.enabled
    before = len(writer_threads())
    for method, args, kwargs, _, _ in CASES:
        getattr(rec, method)(*args, **kwargs)
    rec.record("step_start", step=1)
    for method, args, _, _ in SPANS:
        with getattr(rec, method)(*args):
            pass
    assert rec.flush() is True
    rec.close()
    rec.close()
    assert len(writer_threads()) == before
    assert not root.exists()
    assert rec.dropped_events == 0 and rec.recorded_events == 0


def test_disabled_by_argument(tmp_path: Path) -> None:
    _assert_null(Recorder(JOB, tmp_path / "s", enabled=False), tmp_path / "s")


def test_disabled_by_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(_env.BADPUT_DISABLE, "1")
    _assert_null(Recorder(JOB, tmp_path / "s", enabled=True), tmp_path / "s")
    # no job needed when disabled
    assert isinstance(Recorder(), NullRecorder)


def test_leader_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _assert_null(Recorder(JOB, tmp_path / "s", rank=1, leader_only=True), tmp_path / "s")
    monkeypatch.setenv(_env.RANK, "2")
    _assert_null(Recorder(JOB, tmp_path / "s", leader_only=True), tmp_path / "s")
    monkeypatch.setenv(_env.RANK, "0")
    leader = Recorder(JOB, MemoryStore(), leader_only=True, heartbeat_interval=0)
    assert type(leader) is Recorder and leader.enabled and leader.rank == 0
    leader.close()


def test_null_recorder_direct() -> None:
    rec = NullRecorder()
    rec.record_step_start(1)
    with rec.step(2):
        pass
    assert rec.flush() and rec.dropped_events == 0


# --------------------------------------------------------- background writer


def test_writer_thread_is_lazy_and_stops_on_close() -> None:
    rec = recorder_for_tests(JOB)
    assert rec._thread is None
    rec.record_step_start(0)
    thread = rec._thread
    assert thread is not None and thread.is_alive() and thread.daemon
    rec.close()
    assert not thread.is_alive()


def test_background_flush_without_explicit_flush() -> None:
    store = MemoryStore()
    rec = recorder_for_tests(JOB, store, flush_interval=0.02)
    rec.record_step_start(0)
    deadline = time.time() + 5
    while not store.read(JOB).chunks and time.time() < deadline:
        time.sleep(0.01)
    assert read_all(store, JOB)[0][0].step == 0
    rec.close()


def test_lifecycle_events_are_written_promptly() -> None:
    store = MemoryStore()
    rec = recorder_for_tests(JOB, store, flush_interval=60)
    rec.record_step_start(0)
    time.sleep(0.2)
    assert read_all(store, JOB)[0] == []  # steps wait for the next periodic write
    rec.record_checkpoint_committed(0)
    deadline = time.time() + 5
    while len(read_all(store, JOB)[0]) < 2 and time.time() < deadline:
        time.sleep(0.01)
    assert [e.kind for e in read_all(store, JOB)[0]] == ["step_start", "checkpoint_committed"]
    rec.close()


def test_heartbeats() -> None:
    rec = recorder_for_tests(JOB, heartbeat_interval=0.05, flush_interval=0.01)
    assert rec.heartbeat_interval == 0.05
    rec.record_job_start()
    time.sleep(0.4)
    evs = written(rec)
    beats = [e for e in evs if e.kind == "heartbeat"]
    assert 3 <= len(beats) <= 10
    gaps = [b.ts - a.ts for a, b in itertools.pairwise(beats)]
    assert all(g > 0.03 for g in gaps)
    rec.close()
    n = len(read_all(rec.store, JOB)[0])  # type: ignore[arg-type]
    time.sleep(0.15)
    assert len(read_all(rec.store, JOB)[0]) == n  # type: ignore[arg-type]  # stopped


def test_heartbeat_interval_from_env_and_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_env.BADPUT_HEARTBEAT_INTERVAL, "2.5")
    rec = Recorder(JOB, MemoryStore())
    assert rec.heartbeat_interval == 2.5
    rec.close()
    rec = Recorder(JOB, MemoryStore(), heartbeat_interval=0, flush_interval=0.01)
    rec.record_job_start()
    time.sleep(0.1)
    assert [e.kind for e in written(rec)] == ["job_start"]
    rec.close()
    monkeypatch.delenv(_env.BADPUT_HEARTBEAT_INTERVAL)
    rec = Recorder(JOB, MemoryStore())
    assert rec.heartbeat_interval == 10.0
    rec.close()


def test_close_is_idempotent_and_later_records_are_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = recorder_for_tests(JOB, flush_interval=60)
    rec.record_step_start(0)
    rec.close()  # flushes what was buffered
    assert [e.step for e in read_all(rec.store, JOB)[0]] == [0]  # type: ignore[arg-type]
    assert rec.closed
    rec.close()
    rec.record_step_start(1)
    with rec.step(2):
        pass
    assert rec.flush()
    assert rec.dropped_events == 3
    assert len(badput_warnings(caplog)) == 1


def test_context_manager_closes() -> None:
    store = MemoryStore()
    with recorder_for_tests(JOB, store, flush_interval=60) as rec:
        rec.record_job_start()
        rec.record_step_start(0)
    assert rec.closed
    assert len(read_all(store, JOB)[0]) == 2


def test_flush_from_many_threads_keeps_every_event() -> None:
    rec = recorder_for_tests(JOB, flush_interval=0.005)

    def work(base: int) -> None:
        for i in range(2000):
            rec.record_step_start(base + i)
            if i % 100 == 0:
                rec.flush()

    threads = [threading.Thread(target=work, args=(k * 10_000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    steps = sorted(e.step or 0 for e in written(rec))
    assert steps == sorted(k * 10_000 + i for k in range(4) for i in range(2000))
    rec.close()


# ---------------------------------------------------------------- failures


def test_unwritable_store_never_raises_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    rec = Recorder(JOB, blocker / "store", heartbeat_interval=0, flush_interval=0.005)
    for i in range(300):
        with rec.step(i):
            pass
        if i % 50 == 0:
            rec.flush()
            time.sleep(0.005)
    rec.record_checkpoint_committed(1)
    assert rec.flush(timeout=5)
    rec.close()
    assert rec.dropped_events == 601
    assert rec.recorded_events == 0
    warnings = badput_warnings(caplog)
    assert len(warnings) == 1
    assert "cannot write" in warnings[0].getMessage()


def test_failed_batches_are_dropped_and_later_ones_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    rec = recorder_for_tests(JOB, store, flush_interval=60)
    rec.record_step_start(0)
    rec.flush()
    store.fail_writes = True
    rec.record_step_start(1)
    rec.record_step_start(2)
    rec.flush()
    rec.record_step_start(3)
    rec.flush()
    store.fail_writes = False
    rec.record_step_start(4)
    rec.flush()
    assert [e.step for e in read_all(store, JOB)[0]] == [0, 4]
    assert rec.dropped_events == 3 and rec.recorded_events == 2
    assert len(badput_warnings(caplog)) == 1
    rec.close()


def test_store_uri_argument() -> None:
    rec = Recorder(JOB, "memory://rec-uri-test", heartbeat_interval=0)
    rec.record_job_start()
    rec.flush()
    assert read_all(open_store("memory://rec-uri-test"), JOB)[0][0].kind == "job_start"
    rec.close()
    with pytest.raises(ValueError, match="scheme"):
        Recorder(JOB, "ftp://nope")  # (s3://, gs://, az:// are object stores: issue 34)


# ------------------------------------------------------------ processes

_CHILD = textwrap.dedent(
    """
    import sys, time
    from badput.recorder import Recorder
    from badput.store import JsonlStore

    class PieceWriter:  # many small syscalls per batch: a kill can tear a line
        def __init__(self, inner):
            self.inner = inner
        def write(self, data):
            for i in range(0, len(data), 777):
                self.inner.write(data[i : i + 777])
        def flush(self):
            self.inner.flush()
        def close(self):
            self.inner.close()

    class PieceStore(JsonlStore):
        def open_writer(self, job, key):
            return PieceWriter(super().open_writer(job, key))

    rec = Recorder("killed", PieceStore(sys.argv[1]), attempt=0, rank=0, host="h",
                   heartbeat_interval=0, flush_interval=0.002)
    i = 0
    while True:
        rec.record_step_start(i)
        rec.record_step_end(i)
        i += 1
        if i % 500 == 0:
            rec.flush()
            print("flushed", i, flush=True)
    """
)


def test_sigkill_mid_stream_loses_no_complete_line(tmp_path: Path) -> None:
    root = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # wait until it is writing
        assert first.startswith("flushed"), proc.stderr.read() if proc.stderr else ""
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    # Only whole lines: the kill may cut the child's last "flushed N" line short (seen: a
    # line of one word), and a cut number would be a wrong count.
    whole = [first.rstrip("\n"), *out.split("\n")[:-1]]
    flushed = max(int(line.split()[1]) for line in whole if line.startswith("flushed "))

    store = JsonlStore(root)
    result = store.read("killed")
    items = [it for c in result.chunks for it in c.items]
    errors = [it for it in items if isinstance(it, EventError)]
    assert errors == []  # a torn last line is skipped, not reported
    evs = [it for it in items if isinstance(it, Event)]
    starts = [e.step for e in evs if e.kind == "step_start"]
    ends = [e.step for e in evs if e.kind == "step_end"]
    assert starts == list(range(len(starts)))  # a contiguous prefix 0..k
    assert ends == list(range(len(ends)))
    assert len(starts) - len(ends) in (0, 1)
    assert len(ends) >= flushed  # everything flushed before the kill survived
    assert len(evs) > 1000
    (stream,) = store.streams("killed")
    size = (root / "killed" / stream).stat().st_size
    offset, lines = result.cursor.offsets[stream]
    assert lines == len(evs)
    data = (root / "killed" / stream).read_bytes()
    assert offset == data.rfind(b"\n") + 1 <= size


def test_events_are_flushed_at_exit(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from badput.recorder import Recorder
        rec = Recorder("exiting", sys.argv[1], heartbeat_interval=0, flush_interval=60)
        for i in range(100):
            rec.record_step_start(i)
        rec.record_job_end("completed")
        rec.record_step_start(100)
        """
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=30)
    evs, errors = read_all(JsonlStore(tmp_path), "exiting")
    assert errors == []
    assert len(evs) == 102 and evs[-1].step == 100


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_records_its_own_stream(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    rec = Recorder(JOB, store, attempt=0, rank=0, heartbeat_interval=0, flush_interval=60)
    for i in range(5):
        rec.record_step_start(i)  # buffered, not yet written
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            rec.record_step_start(100)
            rec.record_job_end("completed")
            ok = rec.flush(timeout=5) and rec.pid == os.getpid() and rec.pid != parent
            ok = ok and rec._thread is not None and rec._thread.is_alive()
            rec.close()
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    rec.flush()
    by_pid: dict[int | None, list[tuple[str, int | None]]] = {}
    for e in read_all(store, JOB)[0]:
        by_pid.setdefault(e.pid, []).append((e.kind, e.step))
    assert by_pid == {
        parent: [("step_start", i) for i in range(5)],
        pid: [("step_start", 100), ("job_end", None)],
    }
    assert sorted(store.streams(JOB)) == sorted(
        [f"0/{rec.host}-0-{parent}.jsonl", f"0/{rec.host}-0-{pid}.jsonl"]
    )
    rec.close()


# ------------------------------------------------------------------ testing


def test_testing_helpers(tmp_path: Path) -> None:
    tl = Timeline("tl-job", start=1000.0)
    tl.emit("job_start")
    tl.span("accelerator_init", 10.0)
    tl.steps(3, 2.0)
    tl.span("custom", 5.0, name="eval")
    tl.steps(1, 2.0)
    tl.emit("job_end", dt=1.0, status="completed")
    assert [e.ts for e in tl.events][-1] == 1000.0 + 10 + 6 + 5 + 2 + 1
    assert [e.step for e in tl.events if e.kind == "step_start"] == [0, 1, 2, 3]
    assert all(validate(e) is None for e in tl.events)

    path = events_to_jsonl(tmp_path / "tl-job" / "0" / "x.jsonl", [*tl.events, "garbage"])
    evs, errors = read_all(JsonlStore(tmp_path), "tl-job")
    assert evs == tl.events
    assert len(errors) == 1 and errors[0].file == str(path)

    mem = MemoryStore()
    events_to_store(mem, tl.events)
    events_to_store(mem, ["bad line"], job="tl-job", key=WriterKey("1", "h", 0, 2))
    evs, errors = read_all(mem, "tl-job")
    assert evs == tl.events and len(errors) == 1 and errors[0].line == 1

    rec = recorder_for_tests("t")
    assert isinstance(rec.store, MemoryStore) and rec.heartbeat_interval == 0
    assert (rec.attempt, rec.rank) == (0, 0)
    rec.close()


# Identity text the hot calls' bytes templates must carry through as data: ``%`` (the
# templates' own marker), quotes, backslashes, control and non-ASCII characters.
_identity_text = (
    st.lists(st.sampled_from(["%", "%d", "%%", "%s", '"', "\\", "\n", "é", "a", "0"]), max_size=6)
    .map("".join)
    .map(lambda s: s.strip() or "j")
)


@settings(max_examples=60, deadline=None)
@given(
    job=_identity_text,
    host=_identity_text,
    attempt=st.one_of(_identity_text, st.integers(0, 2**40)),
    steps=st.lists(st.integers(-(2**53) + 1, 2**53 - 1), min_size=1, max_size=4),
)
def test_hot_calls_write_any_identity_and_step_exactly(
    job: str, host: str, attempt: str | int, steps: list[int]
) -> None:
    rec = recorder_for_tests(job, host=host, attempt=attempt, rank=5)
    for step in steps:
        rec.record_data_loading_start()
        rec.record_data_loading_end()
        rec.record_step_start(step)
        rec.record_step_end(step)
    assert rec.store is not None and rec.flush(timeout=5)
    evs, errors = read_all(rec.store, job)
    rec.close()
    assert errors == [] and rec.dropped_events == 0
    kinds = ["data_loading_start", "data_loading_end", "step_start", "step_end"]
    assert [e.kind for e in evs] == kinds * len(steps)
    assert [e.step for e in evs if e.kind.startswith("step")] == [s for s in steps for _ in "se"]
    assert {(e.job, e.host, e.attempt, e.rank, e.pid) for e in evs} == {
        (job, host, attempt, 5, os.getpid())
    }
    assert all(e.blocking is None for e in evs)


def test_hot_calls_out_of_range_or_odd_values_take_the_checked_path() -> None:
    rec = recorder_for_tests(JOB)
    rec.record_step_start(2**53)  # beyond what every JSON reader holds: dropped, counted
    rec.record_step_end(True)  # a bool is no step number: coerced to 1 by the checked path
    rec.record_step_start(np.int64(7))
    rec.record_data_loading_start(blocking=False)
    rec.record_data_loading_end(blocking=0)
    evs = written(rec)
    assert [(e.kind, e.step, e.blocking) for e in evs] == [
        ("step_end", 1, None),
        ("step_start", 7, None),
        ("data_loading_start", None, False),
        ("data_loading_end", None, False),
    ]
    assert rec.dropped_events == 1
    rec.close()
