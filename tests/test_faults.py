"""Faults: the recorder loses nothing it acknowledged, and every event is written or counted.

"Acknowledged": the record call returned. The killed children below write their own
ack ledger with ``os.write`` (an ``O_APPEND`` file, in the kernel when the call
returns) right after each record call returns; every ledger entry must be in the store.
The long campaign (hundreds of kills, 8 processes x 4 threads) is
``bench/fault_campaign.py``; its figures are in ``docs/reliability.md``.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.events import Event, EventError
from badput.recorder import SPANS, NullRecorder, Recorder
from badput.recorder import _recorder as recorder_module
from badput.recorder import _stream as stream_module
from badput.recorder import _writer_thread as writer_thread_module
from badput.store import EventWriter, JsonlStore, WriterKey
from badput.testing import read_all

JOB = "fault-job"


def badput_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "badput" and r.levelno >= logging.WARNING
    ]


def read_store(root: Path, job: str = JOB) -> tuple[list[Event], list[EventError]]:
    return read_all(JsonlStore(root), job)


# --------------------------------------------------------------- kills

_KILLED_CHILD = textwrap.dedent(
    """
    import os, sys, threading
    from badput.recorder import Recorder

    root, ledger = sys.argv[1], sys.argv[2]
    rec = Recorder("killed", root, attempt=0, rank=0, host="h", heartbeat_interval=0)
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    ready = threading.Barrier(5)

    def work(k):
        ready.wait()
        i = 0
        while True:
            step = k * 1_000_000_000 + i
            rec.record_step_start(step)
            os.write(fd, b"%d\\n" % step)  # acknowledged: the call above returned
            if i % 1000 == 0:
                rec.record_checkpoint_committed(step)
            i += 1

    for k in range(4):
        threading.Thread(target=work, args=(k,), daemon=True).start()
    ready.wait()
    print("go", flush=True)
    threading.Event().wait()
    """
)


def _acked(ledger: Path) -> set[int]:
    lines = ledger.read_bytes().split(b"\n")
    return {int(x) for x in lines[:-1]}  # the last entry may be torn by the kill


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_process_keeps_every_acknowledged_event(tmp_path: Path, signum: int) -> None:
    for run in range(3):
        root, ledger = tmp_path / f"store{run}", tmp_path / f"ledger{run}"
        proc = subprocess.Popen(
            [sys.executable, "-c", _KILLED_CHILD, str(root), str(ledger)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == "go\n"
        time.sleep(0.2 + 0.1 * run)
        proc.send_signal(signum)
        proc.wait(timeout=30)
        assert proc.returncode == -signum
        acked = _acked(ledger)
        evs, errors = read_store(root, "killed")
        assert errors == []
        steps = {e.step for e in evs if e.kind == "step_start"}
        assert len(acked) > 100
        assert acked - steps == set()  # 0 acknowledged events lost
        # at most one in flight per thread was recorded but not yet acknowledged
        assert len(steps - acked) <= 4


# ------------------------------------------------------- the store goes away


def test_deleted_job_directory_is_recreated_with_every_event(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder(JOB, tmp_path, attempt=0, heartbeat_interval=0, flush_interval=0.01)
    for i in range(100):
        rec.record_step_start(i)
    shutil.rmtree(tmp_path / JOB)
    for i in range(100, 150):
        rec.record_step_start(i)
    deadline = time.monotonic() + 10
    while not (tmp_path / JOB).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    for i in range(150, 200):
        rec.record_step_start(i)
    rec.close()
    evs, errors = read_store(tmp_path)
    assert errors == []
    assert sorted(e.step for e in evs if e.step is not None) == list(range(200))
    assert rec.dropped_events == 0 and rec.recorded_events == 200
    warnings = badput_warnings(caplog)
    assert len(warnings) == 1 and "deleted or replaced" in warnings[0]


def test_a_spool_segment_whose_directory_is_deleted_while_it_is_made_is_made_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's directory deleted from outside while the background thread makes the next
    spool segment (its directory made, then gone before the file is named: CI saw it once
    in the test above): the segment is made again, nothing is lost, and no "cannot write"
    warning is given for it."""
    real_rename = os.rename
    deleted: list[str] = []

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if str(src).endswith(".making") and not deleted:  # the first segment made
            deleted.append(str(src))
            shutil.rmtree(tmp_path / JOB, ignore_errors=True)
        real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    rec = Recorder(JOB, tmp_path, attempt=0, heartbeat_interval=0, flush_interval=0.01)
    for i in range(200):
        rec.record_step_start(i)
    rec.close()
    monkeypatch.setattr(os, "rename", real_rename)
    assert len(deleted) == 1
    evs, errors = read_store(tmp_path)
    assert errors == []
    assert sorted(e.step for e in evs if e.step is not None) == list(range(200))
    assert rec.dropped_events == 0 and rec.recorded_events == 200
    assert not [w for w in badput_warnings(caplog) if "cannot write" in w]


def test_replaced_stream_file_is_left_alone_and_events_rewritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder(JOB, tmp_path, attempt=0, heartbeat_interval=0, flush_interval=0.01)
    rec.record_job_start()
    for i in range(10):
        rec.record_step_start(i)
    (stream,) = JsonlStore(tmp_path).streams(JOB)
    path = tmp_path / JOB / stream
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"")  # somebody moves an empty file over ours
    os.replace(other, path)
    deadline = time.monotonic() + 10
    while len(JsonlStore(tmp_path).streams(JOB)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    rec.record_step_start(10)
    rec.close()
    assert path.read_bytes() == b""  # not ours any more: never written to
    evs, errors = read_store(tmp_path)
    assert errors == []
    assert [e.step for e in evs if e.kind == "step_start"] == list(range(11))
    assert len(badput_warnings(caplog)) == 1


_FULL_CHILD = textwrap.dedent(
    """
    import resource, sys, time
    from badput.recorder import Recorder
    # A file may not grow past 64 KiB: what a full disk does to every write.
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
    rec = Recorder("full", sys.argv[1], attempt=0, heartbeat_interval=0, flush_interval=0.01)
    for i in range(5000):
        rec.record_step_start(i)
    t0 = time.monotonic()
    rec.close()
    print(rec.recorded_events, rec.dropped_events, round(time.monotonic() - t0, 3))
    """
)


def test_full_disk_every_event_written_or_counted(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FULL_CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    recorded, dropped, close_seconds = out.stdout.split()
    evs, errors = read_store(tmp_path, "full")
    assert errors == []
    on_disk = len(evs)
    assert 0 < on_disk < 5000 and int(dropped) > 0
    assert on_disk + int(dropped) == 5000  # every event on disk or counted, never both
    assert int(recorded) == on_disk
    assert float(close_seconds) < 5
    assert out.stderr.count("badput:") == 1  # one warning


def test_read_only_store_counts_every_event(caplog: pytest.LogCaptureFixture) -> None:
    # sysfs refuses new directories even to root, like a read-only mount.
    rec = Recorder(JOB, "/sys/badput-store", heartbeat_interval=0, flush_interval=0.01)
    for i in range(1000):
        rec.record_step_start(i)
    assert rec.flush(timeout=10)
    rec.close()
    assert not os.path.exists("/sys/badput-store")
    assert rec.dropped_events == 1000 and rec.recorded_events == 0
    assert len(badput_warnings(caplog)) == 1


class _FifoStore:
    """A store whose stream is a FIFO nobody reads: opening it for writing hangs, as a
    frozen disk or a stuck network mount would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fifo = root / "stream.jsonl"
        os.mkfifo(self.fifo)

    @property
    def uri(self) -> str:
        return str(self.root)

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        from badput.store._jsonl import JsonlWriter

        return JsonlWriter(self.fifo)

    def jobs(self) -> list[str]:
        return []

    def read(self, job: str, cursor: Any = None, *, max_bytes: int | None = None) -> Any:
        raise NotImplementedError

    def release(self) -> None:
        """Unblock the hung writer (open the FIFO for reading and close it at once)."""
        fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        time.sleep(0.2)
        os.close(fd)


def test_hanging_store_bounded_memory_counted_and_prompt_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(stream_module, "MAX_BUFFERED_BYTES", 200_000)
    store = _FifoStore(tmp_path)
    assert stat.S_ISFIFO(os.stat(store.fifo).st_mode)
    rec = Recorder(JOB, store, heartbeat_interval=0, flush_interval=0.01)  # type: ignore[arg-type]
    calls = 20_000
    try:
        for i in range(calls):
            rec.record_step_start(i)
        assert rec._buf_bytes <= 200_000  # bounded while the store hangs
        assert rec.flush(timeout=0.2) is False
        t0 = time.monotonic()
        rec.close(timeout=0.5)
        assert time.monotonic() - t0 < 2
        assert rec.recorded_events == 0 and rec.dropped_events == calls
        warnings = badput_warnings(caplog)
        assert len(warnings) == 2  # overflow, then the hung store at close
        assert "not taking events" in warnings[0] and "did not take" in warnings[1]
    finally:
        store.release()


# ----------------------------------------------------- hostile arguments

_HOSTILE: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("record", ([],), {}),
    ("record", (float("nan"),), {}),
    ("record", (None,), {}),
    ("record", ("",), {}),
    ("record", ("step_start",), {"step": float("nan")}),
    ("record", ("step_start",), {"step": "x"}),
    ("record", ("custom_start",), {"name": ""}),
    ("record", ("job_start",), {"ts": float("inf")}),
    ("record", ("job_start",), {"ts": "soon"}),
    ("record_data_loading_start", (np.array([1, 2]),), {}),
    ("record_data_loading_end", (np.array([1, 2]),), {}),
    ("record_step_start", (1.5,), {}),
    ("record_step_end", (object(),), {}),
    ("record_step_start", (1,), {"ts": float("nan")}),
    ("record_heartbeat", (), {"ts": [1]}),
    ("record_custom_start", ("",), {}),
    ("record_elastic_slices", ("a", 2, 3), {}),
    ("record_attempt_end", ("failed", "x"), {}),
]


def test_hostile_arguments_never_raise_and_nothing_unreadable_is_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder(JOB, tmp_path, heartbeat_interval=0)
    for method, args, kwargs in _HOSTILE:
        getattr(rec, method)(*args, **kwargs)
    with rec.data_loading(np.array([1, 2])):  # type: ignore[arg-type]
        pass
    rec.record_step_start(2**53)  # past what every JSON reader holds exactly
    rec.record_step_end(2**53 - 1, ts=1e300)  # past the year 9999
    rec.record_step_end(2**53 - 1)
    rec.close()
    evs, errors = read_store(tmp_path)
    assert errors == []
    assert [(e.kind, e.step) for e in evs] == [("step_end", 2**53 - 1)]
    assert rec.dropped_events == len(_HOSTILE) + 4
    assert len(badput_warnings(caplog)) == 1


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.binary(max_size=3),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.one_of(_values, st.sampled_from(["step_start", "custom_end", "job_end"])),
    step=_values,
    name=_values,
    ts=_values,
)
def test_record_never_raises_and_every_line_reads_back(
    tmp_path_factory: pytest.TempPathFactory, kind: Any, step: Any, name: Any, ts: Any
) -> None:
    root = tmp_path_factory.mktemp("prop")
    rec = Recorder(JOB, root, heartbeat_interval=0)
    rec.record(kind, step=step, name=name, ts=ts)
    rec.record_step_start(step, ts=ts)
    rec.record_custom_start(name, ts=ts)
    rec.record_data_loading_start(step, ts=ts)
    rec.close()
    evs, errors = read_store(root)
    assert errors == []
    assert len(evs) == rec.recorded_events
    assert rec.recorded_events + rec.dropped_events == 4


def test_job_names_past_the_file_name_limit(tmp_path: Path) -> None:
    job = "j" * 300 + "-é" * 50
    rec = Recorder(job, tmp_path, attempt="a" * 300, host="h" * 300, heartbeat_interval=0)
    rec.record_job_start()
    rec.record_step_start(0)
    rec.close()
    assert rec.dropped_events == 0
    evs, errors = read_all(JsonlStore(tmp_path), job)
    assert errors == []
    assert [(e.kind, e.job, e.attempt) for e in evs] == [
        ("job_start", job, "a" * 300),
        ("step_start", job, "a" * 300),
    ]
    for path in tmp_path.rglob("*"):
        assert len(path.name.encode()) <= 255


# ---------------------------------------------------------- NullRecorder


def _public_methods(cls: type) -> set[str]:
    return {
        name
        for name, value in inspect.getmembers(cls)
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def test_null_recorder_writes_out_every_public_recorder_method() -> None:
    recorder_methods = _public_methods(Recorder)
    assert recorder_methods  # the check below is over a real list
    spans_via_table = set(SPANS) - {"step"}
    missing = {m for m in recorder_methods - spans_via_table if m not in vars(NullRecorder)}
    assert missing == set()
    assert set(SPANS) <= recorder_methods  # the table names real span methods
    for name, (start, end) in SPANS.items():
        assert start in vars(NullRecorder) and end in vars(NullRecorder)
        assert callable(getattr(Recorder, name))  # its own, or its phase records
    null = NullRecorder()
    for name in SPANS:
        params = inspect.signature(getattr(Recorder, name)).parameters
        args = ["x"] * (len(params) - 1 - sum(p.default is not p.empty for p in params.values()))
        with getattr(null, name)(*args):
            pass
    assert null.recorded_events == 0 and null.dropped_events == 0


def test_fork_while_recording_from_threads(tmp_path: Path) -> None:
    rec = Recorder(JOB, tmp_path, attempt=0, heartbeat_interval=0)
    stop = threading.Event()

    def spin() -> None:
        i = 0
        while not stop.is_set():
            rec.record_step_start(i)
            i += 1

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        time.sleep(0.05)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                rec.record_job_end("completed")
                rec.close()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        stop.set()
        worker.join()
    rec.close()
    evs, errors = read_store(tmp_path)
    assert errors == []
    parent = [e for e in evs if e.pid == os.getpid()]
    child = [e for e in evs if e.pid == pid]
    assert [e.kind for e in child] == ["job_end"]
    steps = [e.step for e in parent]
    assert steps == list(range(len(steps)))


# -------------------------------------------------------------- badput run


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for a parent to reap it is not running)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def wait_until_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


# The command: starts a background child and a setsid one (its own session), writes
# the three pids, then sleeps.
_FAMILY = textwrap.dedent(
    """
    import os, subprocess, sys, time
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    child = subprocess.Popen(sleep)
    detached = subprocess.Popen(sleep, start_new_session=True)
    with open({marker!r} + ".tmp", "w") as f:
        f.write(f"{{os.getpid()}} {{child.pid}} {{detached.pid}}")
    os.replace({marker!r} + ".tmp", {marker!r})
    if {exit_at_once!r}:
        sys.exit(0)
    time.sleep(120)
    """
)


def _launcher_process(tmp_path: Path, command: list[str]) -> subprocess.Popen[bytes]:
    code = (
        "import sys; from badput.launcher._run import run_job; "
        f"sys.exit(run_job({command!r}, {JOB!r}, {str(tmp_path / 'runs')!r}))"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def _read_pids(marker: Path) -> list[int]:
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the command did not start"
        time.sleep(0.02)
    return [int(p) for p in marker.read_text().split()]


def test_sigkilled_launcher_leaves_no_process_and_the_next_launch_ends_the_attempt(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "pids"
    family = _FAMILY.format(marker=str(marker), exit_at_once=False)
    launcher = _launcher_process(tmp_path, [sys.executable, "-c", family])
    try:
        pids = _read_pids(marker)
        assert all(alive(p) for p in pids)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        assert wait_until_gone(pids) == []  # the command, its child and the setsid one
    finally:
        launcher.kill()
        for pid in _read_pids(marker) if marker.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    store = JsonlStore(tmp_path / "runs")
    before = read_all(store, JOB)[0]
    assert [e.kind for e in before] == ["job_start"]
    from badput.launcher._run import run_job

    assert run_job([sys.executable, "-c", "pass"], JOB, tmp_path / "runs") == 0
    ending = ("attempt_end", "job_end")
    evs = sorted(read_all(store, JOB)[0], key=lambda e: (e.ts, e.kind in ending))
    assert [(e.kind, e.attempt, e.status) for e in evs] == [
        ("job_start", 0, None),
        ("attempt_end", 0, "orphaned"),  # at the orphaned attempt's last event
        ("job_start", 1, None),
        ("job_end", 1, "completed"),
    ]
    assert evs[1].ts == evs[0].ts


def test_what_an_attempt_started_is_killed_when_its_command_exits(tmp_path: Path) -> None:
    from badput.launcher._run import run_job

    marker = tmp_path / "pids"
    family = _FAMILY.format(marker=str(marker), exit_at_once=True)
    t0 = time.monotonic()
    assert run_job([sys.executable, "-c", family], JOB, tmp_path / "runs") == 0
    pids = _read_pids(marker)
    assert wait_until_gone(pids, timeout=0.5) == []  # gone when run_job returned
    assert time.monotonic() - t0 < 30


def test_crash_loop_backs_off_exponentially_up_to_the_cap(tmp_path: Path) -> None:
    from badput.launcher._run import run_job

    messages: list[str] = []
    # A command that fails at once: an attempt that ran longer than backoff_max would
    # (rightly) reset the back-off and change the delays. backoff_max is 1.2 s, not 0.3 s:
    # on a loaded machine (make test runs two test processes) an attempt of `sh -c` took
    # longer than 0.3 s in CI and reset the back-off.
    rc = run_job(
        ["sh", "-c", "exit 2"],
        JOB,
        tmp_path / "runs",
        max_restarts=4,
        backoff=0.3,
        backoff_max=1.2,
        on_event=messages.append,
    )
    assert rc == 2
    delays = [m.rsplit("restarting in ", 1)[1] for m in messages if "restarting in" in m]
    assert delays == ["0.3s", "0.6s", "1.2s", "1.2s"]
    evs = sorted(read_all(JsonlStore(tmp_path / "runs"), JOB)[0], key=lambda e: e.ts)
    ends = [e.ts for e in evs if e.kind == "attempt_end"]
    starts = [e.ts for e in evs if e.kind == "job_start"]
    gaps = [b - a for a, b in zip(ends, starts[1:], strict=False)]
    assert all(g >= d - 0.01 for g, d in zip(gaps, (0.3, 0.6, 1.2, 1.2), strict=True))


class _HangingStore:
    """A store whose every operation blocks until released (a frozen file system)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.release = threading.Event()

    @property
    def uri(self) -> str:
        return str(self.root)

    def streams(self, job: str) -> list[str]:
        self.release.wait()
        return []

    def open_mapped_writer(self, job: str, key: WriterKey, capacity: int) -> Any:
        self.release.wait()
        raise OSError("released")

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        self.release.wait()
        raise OSError("released")

    def jobs(self) -> list[str]:
        return []

    def read(self, job: str, cursor: Any = None, *, max_bytes: int | None = None) -> Any:
        raise NotImplementedError


def test_a_hanging_store_never_delays_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from badput.launcher import _run as _launcher

    monkeypatch.setattr(_launcher, "LIST_TIMEOUT", 0.3)
    monkeypatch.setattr(_launcher, "JOURNAL_TIMEOUT", 0.3)
    store = _HangingStore(tmp_path)
    started = tmp_path / "started"
    messages: list[str] = []
    code = f"import time; open({str(started)!r}, 'w').write(repr(time.time()))"
    try:
        t0 = time.time()
        launcher = _launcher.Launcher(
            [sys.executable, "-c", code], JOB, store, on_event=messages.append
        )  # type: ignore[arg-type]
        result = launcher.run()
        t1 = time.time()
    finally:
        store.release.set()
    assert result.exit_code == 0
    assert float(started.read_text()) - t0 < 0.3 + 2.0  # listing bounded, recording off-thread
    assert t1 - t0 < 0.3 + 0.3 + 3.0
    assert any("did not take the launcher's events" in m for m in messages)


# ------------------------------------------------------------------ monitor


class _TimedExporter:
    """Remembers when each snapshot arrived; ``hang`` blocks every export until released."""

    def __init__(self, name: str, *, hang: bool = False) -> None:
        self.name = name
        self.hang = hang
        self.release = threading.Event()
        self.arrivals: list[float] = []
        self.closed = 0

    def export(self, snapshot: Any) -> None:
        self.arrivals.append(time.monotonic())
        if self.hang:
            self.release.wait(60)

    def close(self) -> None:
        self.closed += 1


def _job_store() -> Any:
    from badput.store import MemoryStore
    from badput.testing import Timeline, events_to_store

    tl = Timeline(JOB, start=1_700_000_000.0)
    tl.emit("job_start")
    tl.steps(30, 1.0)
    store = MemoryStore()
    events_to_store(store, tl.events)
    return store


def test_a_hanging_exporter_delays_no_other_beyond_its_deadline() -> None:
    from badput.monitor import Monitor

    hung, fast = _TimedExporter("pushgateway", hang=True), _TimedExporter("prometheus")
    deadline, interval = 0.3, 0.05
    mon = Monitor(JOB, _job_store(), [hung, fast], interval=interval, exporter_timeout=deadline)
    threads_before = threading.active_count()
    try:
        mon.start()
        time.sleep(2.0)
        t0 = time.monotonic()
        assert mon.stop(timeout=1.0) is False  # the hung exporter is left behind
        assert time.monotonic() - t0 < 1.0 + 0.2
    finally:
        hung.release.set()
    gaps = [b - a for a, b in itertools.pairwise(fast.arrivals)]
    assert len(fast.arrivals) >= 10
    assert max(gaps) <= interval + deadline + 0.25  # waited for at most one deadline
    assert len(hung.arrivals) == 1  # still inside its first export: never called again
    assert mon.failures == {"pushgateway": 1, "prometheus": 0}
    assert threading.active_count() <= threads_before + 2  # one lane per exporter at most


def test_an_exporter_shared_by_two_monitors_is_closed_by_the_last_to_stop() -> None:
    from badput.monitor import Monitor

    shared = _TimedExporter("shared")
    store = _job_store()
    first = Monitor(JOB, store, [shared], interval=0.05)
    second = Monitor(JOB, store, [shared], interval=0.05)
    first.start()
    second.start()
    assert first.stop(timeout=5.0)
    assert shared.closed == 0
    n = len(shared.arrivals)
    time.sleep(0.3)
    assert len(shared.arrivals) > n  # the second monitor still exports to it
    assert second.stop(timeout=5.0)
    assert shared.closed == 1


class _Collector:
    """A loopback OTLP/HTTP collector that answers 500, or never answers (``hang``)."""

    def __init__(self, *, hang: bool = False) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        collector = self
        self.requests = 0
        self.release = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                collector.requests += 1
                if hang:
                    collector.release.wait(30)
                    return
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("hang", [False, True])
def test_otlp_push_failures_are_counted_backed_off_and_warned_once(
    hang: bool, caplog: pytest.LogCaptureFixture
) -> None:
    from badput.monitor import Monitor
    from badput.monitor.otel import OpenTelemetryExporter

    collector = _Collector(hang=hang)
    try:
        exporter = OpenTelemetryExporter(
            endpoint=collector.endpoint, export_interval=0.1, timeout=0.3
        )
        mon = Monitor(JOB, _job_store(), [exporter], interval=0.05, exporter_timeout=2.0)
        with caplog.at_level(logging.WARNING, logger="badput"):
            mon.start()
            deadline = time.monotonic() + 20
            while mon.failures["otel"] < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            mon.stop(final_flush=False, timeout=5.0)
        pushes = exporter._pushes
        assert pushes is not None
        assert mon.failures["otel"] >= 2
        assert pushes.failures >= 2 and pushes.skipped >= 1  # backed off between pushes
        warnings = [m for m in badput_warnings(caplog) if "otel" in m]
        assert len(warnings) == 1 and "OTLP push to" in warnings[0]
    finally:
        collector.close()


def test_cli_errors_for_a_missing_collector_and_missing_credentials(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens here once closed
    rec = Recorder(JOB, tmp_path, heartbeat_interval=0)
    rec.record_job_start()
    rec.close()
    badput = [sys.executable, "-m", "badput.cli", "monitor", str(tmp_path), "--job", JOB]
    env = {
        **os.environ,
        "GOOGLE_APPLICATION_CREDENTIALS": "",
        "GCE_METADATA_HOST": f"127.0.0.1:{port}",
        "GCE_METADATA_IP": f"127.0.0.1:{port}",
        "NO_GCE_CHECK": "True",
        "CLOUDSDK_CONFIG": str(tmp_path / "no-gcloud"),
        "HOME": str(tmp_path),
    }
    for flag, value, words in [
        ("--otlp", f"http://127.0.0.1:{port}/v1/metrics", "no OTLP collector"),
        ("--gcp-project", "my-project", "no Google Cloud credentials"),
    ]:
        out = subprocess.run(
            [*badput, flag, value, "--once"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], out.stderr


def test_one_window_vocabulary_for_every_exporter() -> None:
    from badput.monitor import _vocab, otel, prometheus, tensorboard, window_label

    assert window_label(2_592_000.0) == "2592000s"  # was 2.592e+06s in OpenTelemetry
    assert window_label(3600) == "3600s"
    assert window_label(0.5) == "0.5s"
    for module in (otel, prometheus, tensorboard):
        assert module.window_label is _vocab.window_label
        assert module.METRICS is _vocab.METRICS  # and one table of metric names
    # 15, and program goodput's 7 (docs/program-goodput.md)
    names = [(m.prometheus, m.otel) for m in _vocab.METRICS.values()]
    assert len({p for p, _ in names}) == len({o for _, o in names}) == len(names) == 25
    assert all(p.startswith("badput_") and o.startswith("badput.") for p, o in names)


def test_one_periodic_worker_and_one_lifecycle_registry_for_all_three() -> None:
    """The recorder, the Monitor and the compat GoodputMonitor's uploaders all tick on
    badput.runtime.worker.PeriodicWorker and register their exit/fork hooks in
    badput.runtime.lifecycle."""
    from badput.compat.ml_goodput_measurement import _uploader, monitoring
    from badput.monitor import Monitor, _monitor
    from badput.runtime import lifecycle as _lifecycle
    from badput.runtime import worker as _worker

    # The recorder's thread is made in its own module, its hooks registered in _recorder;
    # the compat monitor's uploader threads in _uploader, its hooks in monitoring.
    for made_in in (writer_thread_module, _monitor, _uploader):
        assert made_in.PeriodicWorker is _worker.PeriodicWorker
    for module in (recorder_module, _monitor, monitoring, writer_thread_module, _uploader):
        assert "atexit" not in vars(module) and "register_at_fork" not in inspect.getsource(module)
    for module in (recorder_module, _monitor, monitoring):
        assert module._lifecycle is _lifecycle
    rec = Recorder(JOB, _job_store(), heartbeat_interval=0)
    rec.record_job_start()
    mon = Monitor(JOB, _job_store(), [], interval=0.05)
    mon.start()
    try:
        assert isinstance(rec._worker, _worker.PeriodicWorker) and rec._worker.running
        assert isinstance(mon._worker, _worker.PeriodicWorker) and mon._worker.running
        assert rec in _lifecycle.live("recorders") and mon in _lifecycle.live("monitors")
    finally:
        mon.stop(timeout=5)
        rec.close()
    assert rec not in _lifecycle.live("recorders") and mon not in _lifecycle.live("monitors")


def test_periodic_worker_ticks_on_schedule_survives_errors_and_stops_bounded() -> None:
    from badput.runtime.worker import PeriodicWorker

    ticks: list[float] = []
    finished: list[bool] = []

    def tick() -> None:
        ticks.append(time.monotonic())
        if len(ticks) == 2:
            raise RuntimeError("a bug in one tick")

    worker = PeriodicWorker("t", 0.05, tick, finish=finished.append, tick_at_start=False)
    t0 = time.monotonic()
    assert worker.start() and not worker.start()
    time.sleep(0.4)
    worker.wake()  # an extra tick now
    time.sleep(0.02)
    thread = worker.signal(final=True)
    assert thread is not None and worker.join(2.0)
    assert finished == [True]
    assert ticks[0] - t0 >= 0.045  # not at start
    assert 6 <= len(ticks) <= 12  # kept ticking after the error
    assert not worker.running


def test_a_hanging_pushgateway_never_leaves_the_scrape_endpoint_stale() -> None:
    """As `badput monitor --prometheus ... --pushgateway ...` builds them: two exporters."""
    import re
    import socket
    import urllib.request

    from badput.cli._live import _build_exporters
    from badput.monitor import Monitor

    silent = socket.socket()  # accepts connections, never answers: a hung Pushgateway
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    gateway = f"http://127.0.0.1:{silent.getsockname()[1]}"
    exporters = _build_exporters(
        prometheus="127.0.0.1:0", pushgateway=gateway, tensorboard=None, otlp=None, gcp_project=None
    )
    assert len(exporters) == 2
    scrape_url = exporters[0].url
    mon = Monitor(JOB, _job_store(), exporters, interval=0.1, exporter_timeout=0.3)

    def elapsed() -> float:
        with urllib.request.urlopen(scrape_url, timeout=5) as resp:
            text = resp.read().decode()
        match = re.search(r"^badput_elapsed_seconds\{[^}]*\} (\S+)$", text, re.M)
        assert match is not None, text
        return float(match.group(1))

    try:
        mon.start()
        time.sleep(0.6)
        values = []
        for _ in range(5):
            values.append(elapsed())
            time.sleep(0.3)
        assert len(set(values)) == 5  # every read sees a newer snapshot
        assert mon.failures["prometheus"] == 0 and mon.failures["prometheus#2"] >= 1
    finally:
        mon.stop(timeout=2.0)
        silent.close()
