"""The Monitor: snapshots, back-off, bounded stop, fork, following a live log; `badput monitor`."""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import badput.monitor
from badput.analysis import LiveJob
from badput.cli import main
from badput.monitor import MAX_BACKOFF_CYCLES, Monitor, Snapshot
from badput.store import JsonlStore
from badput.testing import MemoryStore, Timeline, events_to_jsonl, events_to_store

T0 = 1_700_000_000.0
JOB = "mon-job"


def small_job() -> Timeline:
    """init 10 s, 20 steps of 1 s, a 2 s checkpoint, 10 more steps: 42 s, 30 productive."""
    tl = Timeline(JOB, start=T0)
    tl.emit("job_start")
    tl.span("accelerator_init", 10.0)
    tl.steps(20, 1.0)
    tl.span("checkpoint_save", 2.0, step=19)
    tl.steps(10, 1.0)
    return tl


class Clock:
    """A settable virtual clock."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeExporter:
    """Keeps what it is given; fails while ``fail`` > 0 (one failure per call)."""

    def __init__(self, name: str = "fake", fail: int = 0) -> None:
        self.name = name
        self.fail = fail
        self.snapshots: list[Snapshot] = []
        self.calls = 0
        self.closed = 0
        self.got = threading.Event()

    def export(self, snapshot: Snapshot) -> None:
        self.calls += 1
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("collector unreachable")
        self.snapshots.append(snapshot)
        self.got.set()

    def close(self) -> None:
        self.closed += 1


class HangingExporter(FakeExporter):
    """``export`` blocks for 30 s (or until released)."""

    def __init__(self) -> None:
        super().__init__("hangs")
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, snapshot: Snapshot) -> None:
        self.entered.set()
        self.release.wait(30.0)


def wait_for(cond: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore()
    events_to_store(s, small_job().events)
    return s


# ------------------------------------------------------------------ snapshots


def test_snapshot_carries_the_partition_windows_and_step_stats(store: MemoryStore) -> None:
    fake = FakeExporter()
    mon = Monitor(
        JOB,
        store,
        [fake],
        rolling_windows=(10, 20),
        ideal_step_time=1.0,
        clock=Clock(T0 + 42.0),
    )
    snap = mon.run_once()
    assert fake.snapshots == [snap] and mon.latest is snap
    assert snap.job == JOB and snap.time == T0 + 42.0 and snap.sequence == 0
    assert snap.last_event_time == pytest.approx(T0 + 42.0)
    rep = snap.report
    assert rep.goodput == pytest.approx(30 / 42)
    assert rep.buckets == pytest.approx(
        {"productive": 30.0, "accelerator_init": 10.0, "checkpoint_save": 2.0}
    )
    assert rep.at_risk_seconds == pytest.approx(10.0)  # the 10 steps after the checkpoint
    assert snap.last_step == 29 and snap.disruptions == 0
    # [T0+32, T0+42]: steps only; [T0+22, T0+42]: 18 s of steps and the 2 s save
    assert set(snap.windows) == {10.0, 20.0}
    assert snap.windows[10.0].goodput == pytest.approx(1.0)
    assert snap.windows[20.0].goodput == pytest.approx(0.9)
    assert snap.windows[20.0].buckets == pytest.approx({"productive": 18.0, "checkpoint_save": 2.0})
    st = snap.step_time
    assert st is not None
    assert st.ideal_step_time == 1.0 and st.recent_median == pytest.approx(1.0)
    assert st.deviation_p50 == pytest.approx(0.0) and st.deviation_p90 == pytest.approx(0.0)
    assert not st.slowdown_alarm
    assert mon.run_once().sequence == 1
    assert mon.cycles == 2 and mon.cpu_seconds > 0


def test_slowdown_alarm_and_no_step_stats_when_not_asked() -> None:
    tl = small_job()
    tl.steps(100, 2.0)  # twice the ideal
    s = MemoryStore()
    events_to_store(s, tl.events)
    clock = Clock(tl.now)
    snap = Monitor(JOB, s, ideal_step_time=1.0, slowdown_factor=1.5, clock=clock).run_once()
    assert snap.step_time is not None and snap.step_time.slowdown_alarm
    assert snap.step_time.deviation_p90 == pytest.approx(1.0)
    quiet = Monitor(JOB, s, include_step_deviation=False, clock=clock).run_once()
    assert quiet.step_time is None and quiet.windows == {}


def test_arguments_are_validated(store: MemoryStore) -> None:
    for bad in ({"interval": 0}, {"interval": float("nan")}, {"rolling_windows": (60, -1)}):
        with pytest.raises(ValueError):
            Monitor(JOB, store, **bad)
    with pytest.raises(ValueError, match="slowdown_factor"):
        Monitor(JOB, store, slowdown_factor=0)
    with pytest.raises(ValueError):
        Monitor(None, MemoryStore())  # an empty store: which job?


def test_the_thread_runs_cycles_and_stop_flushes_and_closes(store: MemoryStore) -> None:
    fake = FakeExporter()
    mon = Monitor(JOB, store, [fake], interval=0.02, clock=Clock(T0 + 42.0))
    assert not mon.running
    mon.start()
    mon.start()  # idempotent
    assert mon.running
    wait_for(lambda: len(fake.snapshots) >= 3)
    assert mon.stop(timeout=5.0) is True
    assert not mon.running
    n = len(fake.snapshots)
    seqs = [s.sequence for s in fake.snapshots]
    assert seqs == list(range(n))  # every cycle, in order, the final one included
    assert fake.closed == 1
    assert mon.stop() is True and fake.closed == 1  # idempotent
    with pytest.raises(RuntimeError):
        mon.start()
    with pytest.raises(RuntimeError):
        mon.run_once()


def test_context_manager_and_stop_without_final_flush(store: MemoryStore) -> None:
    fake = FakeExporter()
    with Monitor(JOB, store, [fake], interval=60.0, clock=Clock(T0 + 42.0)) as mon:
        assert mon.running
        assert fake.got.wait(5.0)  # the first cycle runs at once
    assert fake.closed == 1 and len(fake.snapshots) == 2  # first cycle + final flush
    other = FakeExporter()
    mon = Monitor(JOB, store, [other], interval=60.0, clock=Clock(T0 + 42.0))
    assert mon.stop(final_flush=False) is True  # never started: just closes
    assert other.calls == 0 and other.closed == 1


# ------------------------------------------------------------------- failures


def test_failing_exporter_is_logged_once_backed_off_and_recovers(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = FakeExporter("flaky", fail=3)
    healthy = FakeExporter("healthy")
    mon = Monitor(JOB, store, [flaky, healthy], interval=1.0, clock=Clock(T0 + 42.0))
    called_at = []
    with caplog.at_level(logging.DEBUG, logger="badput"):
        for cycle in range(1, 14):
            before = flaky.calls
            mon.run_once()  # never raises
            if flaky.calls > before:
                called_at.append(cycle)
    # fail (skip 1), fail (skip 2), fail (skip 4), then every cycle once it works
    assert called_at == [1, 3, 6, 11, 12, 13]
    assert len(healthy.snapshots) == 13  # the others are not held up
    assert mon.failures == {"flaky": 3, "healthy": 0}
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "flaky" in warnings[0].getMessage()
    assert "ConnectionError" in warnings[0].getMessage()


def test_back_off_is_capped(store: MemoryStore) -> None:
    always = FakeExporter("down", fail=10**6)
    mon = Monitor(JOB, store, [always], interval=100.0, clock=Clock(T0 + 42.0))  # cap: 3 cycles
    for _ in range(40):
        mon.run_once()
    gaps = []
    last = 0
    for cycle in range(40, 80):
        before = always.calls
        mon.run_once()
        if always.calls > before:
            gaps.append(cycle - last)
            last = cycle
    assert set(gaps[1:]) == {4}  # one call, then 3 cycles skipped
    assert MAX_BACKOFF_CYCLES >= 3


def test_exporters_with_the_same_name_are_counted_apart(store: MemoryStore) -> None:
    mon = Monitor(JOB, store, [FakeExporter("x", fail=1), FakeExporter("x")])
    mon.run_once()
    assert mon.failures == {"x": 1, "x#2": 0}


class BrokenStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    def read(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if self.broken:
            raise OSError("disk on fire")
        return super().read(*args, **kwargs)  # type: ignore[arg-type]


def test_a_store_error_is_logged_once_and_the_cycle_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = BrokenStore()
    events_to_store(s, small_job().events)
    fake = FakeExporter()
    mon = Monitor(JOB, s, [fake], interval=0.01, clock=Clock(T0 + 42.0))
    s.broken = True
    with pytest.raises(OSError):
        mon.run_once()  # a direct call says what went wrong
    with caplog.at_level(logging.WARNING, logger="badput"):
        mon.start()
        wait_for(lambda: mon.skipped_cycles >= 5)
        assert mon.running  # the thread carries on
        s.broken = False
        wait_for(lambda: len(fake.snapshots) >= 1)
        mon.stop(timeout=5.0)
    warnings = [r for r in caplog.records if "disk on fire" in r.getMessage()]
    assert len(warnings) == 1
    assert fake.snapshots[-1].report.goodput == pytest.approx(30 / 42)


def test_stop_returns_within_the_timeout_when_an_exporter_hangs(store: MemoryStore) -> None:
    hang = HangingExporter()
    mon = Monitor(JOB, store, [hang], interval=0.05, clock=Clock(T0 + 42.0))
    mon.start()
    try:
        assert hang.entered.wait(5.0)
        t0 = time.monotonic()
        assert mon.stop(timeout=1.0) is False  # did not finish: still stuck in export
        elapsed = time.monotonic() - t0
        assert 0.9 <= elapsed < 2.0
        assert not mon.running
    finally:
        hang.release.set()
    wait_for(lambda: hang.closed == 1)  # it finishes (and closes) once the exporter returns


def test_stop_of_a_never_started_monitor_is_bounded_too(store: MemoryStore) -> None:
    hang = HangingExporter()
    mon = Monitor(JOB, store, [hang], clock=Clock(T0 + 42.0))
    try:
        t0 = time.monotonic()
        assert mon.stop(timeout=0.5) is False  # the final flush hangs
        assert time.monotonic() - t0 < 1.5
    finally:
        hang.release.set()


# ----------------------------------------------------------------------- fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_in_a_forked_child_the_monitor_is_stopped(store: MemoryStore) -> None:
    fake = FakeExporter()
    mon = Monitor(JOB, store, [fake], interval=0.01, clock=Clock(T0 + 42.0))
    mon.start()
    assert fake.got.wait(5.0)
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        code = 0
        try:
            if mon.running:
                code = 1
            elif mon.stop(timeout=1.0) is not True:
                code = 2
            else:
                try:
                    mon.start()
                    code = 3
                except RuntimeError:
                    pass
            if fake.closed:
                code = 4  # the parent's exporter was closed by the child
        except BaseException:
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert mon.running  # the parent's monitor is untouched
    n = len(fake.snapshots)
    wait_for(lambda: len(fake.snapshots) > n)
    mon.stop(timeout=5.0)


# --------------------------------------------------------------- a live log


def test_follows_a_job_still_being_written(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    fake = FakeExporter()
    clock = Clock(T0 + 5.0)
    # the job has not written anything yet: a store root is fine
    mon = Monitor(JOB, root, [fake], rolling_windows=(10,), ideal_step_time=1.0, clock=clock)
    first = mon.run_once()
    assert first.last_event_time is None and fake.calls == 0  # nothing to export yet

    tl = small_job()
    path = root / JOB / "0" / "h-0-1.jsonl"
    lines = tl.events
    events_to_jsonl(path, lines[:20])  # job_start, init, 8 steps...
    clock.t = lines[19].ts
    a = mon.run_once()
    assert fake.calls == 1 and a.last_step is not None
    events_to_jsonl(path, lines[20:])
    with path.open("ab") as fh:  # a torn line: the writer is mid-write
        fh.write(b'{"ts": 1700000043.0, "kind": "step_start", "job": "mon-job", "att')
    clock.t = T0 + 42.0
    b = mon.run_once()
    assert b.last_step == 29 and b.report.goodput == pytest.approx(30 / 42)
    assert b.last_event_time == pytest.approx(T0 + 42.0)
    with path.open("ab") as fh:  # the line completes
        fh.write(b'empt": 0, "host": "test-host", "rank": 0, "step": 30}\n')
    clock.t = T0 + 43.0
    c = mon.run_once()
    assert c.last_event_time == pytest.approx(T0 + 43.0)
    assert c.report.total_seconds == pytest.approx(43.0)
    assert [s.sequence for s in fake.snapshots] == [1, 2, 3]


def test_store_argument_forms(tmp_path: Path, store: MemoryStore) -> None:
    root = tmp_path / "runs"
    events_to_jsonl(root / JOB / "0" / "h-0-1.jsonl", small_job().events)
    for source, job in ((root, JOB), (root, None), (root / JOB, None), (JsonlStore(root), JOB)):
        snap = Monitor(job, source, clock=Clock(T0 + 42.0)).run_once()
        assert snap.job == JOB and snap.last_step == 29
    assert isinstance(Monitor(JOB, store).live_job, LiveJob)


def test_default_store_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events_to_jsonl(tmp_path / "env-runs" / JOB / "0" / "h-0-1.jsonl", small_job().events)
    monkeypatch.setenv("BADPUT_STORE", str(tmp_path / "env-runs"))
    assert Monitor(JOB, clock=Clock(T0 + 42.0)).run_once().last_step == 29


def test_exporters_are_lazy_attributes() -> None:
    from badput.monitor.otel import OpenTelemetryExporter

    assert badput.monitor.OpenTelemetryExporter is OpenTelemetryExporter
    with pytest.raises(AttributeError):
        _ = badput.monitor.NoSuchExporter
    code = (
        "import sys, badput.monitor\n"
        "heavy = {'prometheus_client', 'tensorboardX', 'opentelemetry', 'google.cloud'}\n"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_at_exit_the_final_cycle_sees_the_recorders_last_events(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    script = textwrap.dedent(
        f"""
        from badput import Recorder
        from badput.monitor import Monitor

        class ToFile:
            name = "file"
            def __init__(self):
                self.last = None
            def export(self, snap):
                self.last = snap
            def close(self):
                with open({str(out)!r}, "w") as f:
                    f.write(f"{{self.last.sequence}} {{self.last.last_step}}")

        runs = {str(tmp_path / "runs")!r}
        # steps are buffered (flush_interval=60): only a flush at exit writes them
        rec = Recorder("j", runs, heartbeat_interval=0, flush_interval=60)
        rec.record_job_start()
        rec.flush()
        mon = Monitor("j", runs, [ToFile()], interval=60).start()
        while mon.latest is None:
            pass
        for step in range(5):
            with rec.step(step):
                pass
        # no stop(), no close(): the atexit hooks flush the recorder, then stop the monitor
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert out.read_text() == "1 4"  # the first cycle, then the final one with the steps


# ------------------------------------------------------------------------ CLI


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The small job, finished (the CLI's clock is the real one)."""
    tl = small_job()
    tl.emit("job_end", status="completed")
    r = tmp_path / "runs"
    events_to_jsonl(r / JOB / "0" / "h-0-1.jsonl", tl.events)
    return r


def test_cli_monitor_once_prints_a_status_line(root: Path) -> None:
    result = CliRunner().invoke(main, ["monitor", str(root), "--job", JOB, "--once"])
    assert result.exit_code == 0, result.output
    assert f"{JOB}: goodput 71.4% (observed 71.4%)" in result.stdout
    assert "step 29" in result.stdout and "finished" in result.stdout


class _Slotted:
    """A small exporter: a new one is allocated where a freed one was, as CPython does."""

    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed = 0

    def export(self, snapshot: Snapshot) -> None:
        pass

    def close(self) -> None:
        self.closed += 1


def test_a_monitor_dropped_without_stop_does_not_keep_a_new_exporter_open(
    store: MemoryStore,
) -> None:
    """The count of monitors sharing an exporter is kept by id: a monitor dropped without
    stop() leaves its exporter's count, and a new exporter that CPython put at the freed
    address was counted as shared with it and never closed (a test of the CLI failed so,
    now and then). The count holds its exporter, so no new one can take that id."""
    for _ in range(10):
        old = _Slotted()
        old_id = id(old)
        dropped = Monitor(JOB, store, [old], interval=60)
        del dropped, old
        gc.collect()
        made = [_Slotted() for _ in range(200)]
        fresh = next((e for e in made if id(e) == old_id), made[0])  # at the old address
        monitor = Monitor(JOB, store, [fresh], interval=60)
        assert monitor.stop(final_flush=False, timeout=5.0)
        assert fresh.closed == 1


def test_cli_monitor_once_with_injected_exporter(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeExporter()
    seen = []

    def build(**kwargs: object) -> list[FakeExporter]:
        seen.append(kwargs)
        return [fake]

    monkeypatch.setattr("badput.cli._live._build_exporters", build)
    args = ["monitor", str(root), "--job", JOB, "--once", "--window", "60", "--otlp", "http://x"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert seen == [
        {
            "prometheus": None,
            "pushgateway": None,
            "tensorboard": None,
            "otlp": "http://x",
            "gcp_project": None,
            "gcp_location": None,
        }
    ]
    assert len(fake.snapshots) == 1 and fake.closed == 1
    assert set(fake.snapshots[0].windows) == {60.0}
    assert "last 1m" in result.stdout


def test_cli_monitor_missing_extra_names_the_pip_command(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    result = CliRunner().invoke(main, ["monitor", str(root), "--prometheus", ":9464", "--once"])
    assert result.exit_code == 2
    assert "pip install 'badput[prometheus]'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_monitor_bad_arguments(root: Path, tmp_path: Path) -> None:
    bad = CliRunner().invoke(main, ["monitor", str(root), "--prometheus", "host:port", "--once"])
    assert bad.exit_code == 2 and "HOST:PORT" in bad.stderr
    missing = CliRunner().invoke(main, ["monitor", str(tmp_path / "nowhere"), "--once"])
    assert missing.exit_code == 2 and "error" in missing.stderr


def test_cli_monitor_serves_prometheus_once(root: Path) -> None:
    pytest.importorskip("prometheus_client")
    result = CliRunner().invoke(
        main, ["monitor", str(root), "--job", JOB, "--prometheus", "127.0.0.1:0", "--once"]
    )
    assert result.exit_code == 0, result.output


def test_cli_monitor_runs_until_sigterm(root: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboardX")
    tb = tmp_path / "tb"
    cmd = [
        str(Path(sys.executable).with_name("badput")),
        "monitor",
        str(root),
        "--job",
        JOB,
        "--interval",
        "0.2",
        "--tensorboard",
        str(tb),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert all("goodput" in line for line in lines), lines
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert list(tb.rglob("events.out.tfevents.*"))


def test_docs_in_process_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("prometheus_client")
    import contextlib
    import io
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "monitoring.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    assert "port=9464" in code
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace("port=9464", "port=0"), "docs/monitoring.md", "exec"), {})
    assert re.fullmatch(r"goodput \d+\.\d%\n", out.getvalue()), out.getvalue()


def test_an_unwritable_tensorboard_directory_never_raises_into_the_job(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The exporter is built fine; every export fails; the monitor warns once and backs off."""
    from badput.monitor.tensorboard import TensorBoardExporter

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    exporter = TensorBoardExporter(blocker / "tb")  # no error here, in the training script
    mon = Monitor(JOB, store=root, exporters=[exporter], interval=60.0)
    with caplog.at_level("WARNING", logger="badput"):
        for _ in range(4):
            mon.run_once()
    assert mon.failures["tensorboard"] >= 1
    warnings = [r for r in caplog.records if "tensorboard" in r.getMessage()]
    assert len(warnings) == 1
    mon.stop(timeout=2)
