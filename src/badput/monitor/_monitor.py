"""The :class:`Monitor`: a daemon thread that polls the incremental engine and feeds exporters.

Every ``interval`` seconds one **cycle** runs:

1. ``LiveJob.update()``: read only the lines appended since the last cycle;
2. ``now = clock()``; the cumulative partition ``report(now=now)``; the partition
   of each rolling window ``[now - w, now]``; step-time statistics (if asked);
3. a :class:`~badput.monitor.Snapshot` (``sequence`` 0, 1, 2...) handed to each
   exporter in turn, on the monitor's thread.

It never hurts the job it watches:

- **Nothing raises into the job** once the monitor is built. An exporter that
  raises is logged ONCE (``logging.getLogger("badput")``, later failures at debug
  level), counted in :attr:`Monitor.failures`, and skipped for 1, 2, 4, ...
  cycles (at most :data:`MAX_BACKOFF_CYCLES`, and at most about
  :data:`MAX_BACKOFF_SECONDS`) until it succeeds again. An error of the engine or
  the store is logged once and that cycle is skipped.
- **Shutdown is bounded.** :meth:`Monitor.stop` runs a final cycle and closes the
  exporters on the monitor's thread and waits for it at most ``timeout`` seconds:
  an exporter stuck on the network cannot hang the job's exit. Monitors still
  running at interpreter exit are stopped by an ``atexit`` hook (final cycle
  included, :data:`EXIT_TIMEOUT` seconds each; recorders of the same process are
  flushed first so that the final snapshot sees their last events).
- **Fork.** In a child created by ``os.fork`` (``multiprocessing``'s fork start
  method, data-loader workers...), every monitor of the parent is *stopped*:
  :attr:`Monitor.running` is ``False``, it holds no thread, and ``start()`` and
  ``run_once()`` raise ``RuntimeError``. It does not close the exporters, which
  belong to the parent (a Prometheus port, a TensorBoard file...). A child that
  wants monitoring builds its own monitor.

Its own cost is small: a cycle costs what the engine's incremental queries cost
(about 2 ms for a cumulative query after new events on a 1,000,000-step job) plus
the exporters; :attr:`Monitor.cpu_seconds` reports the CPU time cycles took.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from pathlib import Path
from typing import Final

from badput.analysis import LiveJob
from badput.engine import DEFAULT_SLOWDOWN_FACTOR, RankOptions, cpu_time_with_helpers
from badput.monitor._base import Exporter, Snapshot
from badput.monitor._lanes import ExporterLanes
from badput.runtime import lifecycle as _lifecycle
from badput.runtime.worker import PeriodicWorker
from badput.store import EventStore, ObjectStore, is_job_path, open_store

__all__ = ["EXIT_TIMEOUT", "Monitor"]

logger = logging.getLogger("badput")

#: How long the ``atexit`` hook waits for each monitor still running.
EXIT_TIMEOUT: Final = 5.0
#: How long the ``atexit`` hook waits for each recorder's last events before the final cycle.
_RECORDER_FLUSH_TIMEOUT: Final = 1.0

StoreLike = EventStore | str | os.PathLike[str]


def _require_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive, got {value}")


def _rolling_windows(lengths: Iterable[float]) -> tuple[float, ...]:
    """The rolling windows asked for, in seconds, each once."""
    windows: list[float] = []
    for raw in lengths:
        w = float(raw)
        if not (math.isfinite(w) and w > 0):
            raise ValueError(f"rolling windows must be positive seconds, got {raw}")
        if w not in windows:
            windows.append(w)
    return tuple(windows)


def _has_job_events(path: Path, job: str) -> bool:
    try:
        return any((path / job).rglob("*.jsonl"))
    except OSError:
        return False


def _open_live(
    job: str | None,
    store: StoreLike | None,
    ideal: float | None,
    rank_options: RankOptions | None = None,
) -> LiveJob:
    """A LiveJob on ``store``; a path whose job has not written yet is taken as a store root."""
    if store is None:
        store = open_store()
    if isinstance(store, (str, os.PathLike)) and "://" not in os.fspath(store):
        try:
            return LiveJob(store, job, ideal_step_time=ideal, rank_options=rank_options)
        except ValueError:
            path = Path(store)
            if job is None or path.is_file() or _has_job_events(path, job) or is_job_path(path):
                raise  # (another job's directory: no job of that name will start in it)
            # The job has not written its first event yet: follow <path>/<job>/...
            store = open_store(path)
    elif isinstance(store, (str, os.PathLike)) and job is not None:
        try:
            return LiveJob(store, job, ideal_step_time=ideal, rank_options=rank_options)
        except ValueError:
            opened = open_store(store)
            if not isinstance(opened, ObjectStore) or opened.job_inside() is not None:
                raise  # (not an object store's root: a job's URI holds no other job)
            store = opened  # its first part not shipped yet: followed from it on
    return LiveJob(store, job, ideal_step_time=ideal, rank_options=rank_options)


class Monitor:
    """Periodically computes a job's goodput and hands it to exporters, on a daemon thread.

    Args:
        job: the job to watch (may be ``None`` when ``store`` holds exactly one job
            or is a job directory).
        store: anything :class:`~badput.analysis.LiveJob` reads: an
            :class:`~badput.store.EventStore`, a store URI, a store root, a job
            directory or a ``.jsonl`` file; default :func:`~badput.store.open_store`
            (``$BADPUT_STORE`` or ``./badput-runs``). A store root where ``job`` has
            not written yet is fine: the monitor waits for its first event.
        exporters: objects with ``name``, ``export(snapshot)`` and ``close()``
            (:class:`~badput.monitor.Exporter`).
        interval: seconds between cycles.
        rolling_windows: window lengths in seconds; each cycle adds the partition
            of ``[now - w, now]`` to the snapshot (``Snapshot.windows[w]``).
        include_step_deviation: add step-time statistics (``Snapshot.step_time``).
        ideal_step_time: the configured ideal step time (default: estimated).
        slowdown_factor: the step-time slowdown alarm fires when the recent median
            step time exceeds ideal x this.
        clock: the time source for ``now`` (tests pass a virtual clock).
        exporter_timeout: each exporter runs on its own thread with this deadline
            per export (default: the interval, between 1 and 30 seconds); one that
            misses it counts as a failure and delays no other exporter.
        on_snapshot: called with every snapshot, before the exporters and even
            before the job's first event (``badput monitor`` prints its status
            line with it); an error in it is logged once.
        rank_options: thresholds of the stragglers and stalls in each snapshot's
            report (:class:`~badput.engine.RankOptions`, docs/ranks.md).

    Snapshots are handed to exporters only once the job has at least one event
    (before that, :attr:`latest` still holds the empty snapshot).

    Construction validates arguments and opens the store, and may raise
    (``ValueError`` for a bad argument or a path holding no job); nothing after it
    raises into the caller except :meth:`run_once` (below).

    ::

        with Monitor("llama", exporters=[PrometheusExporter(port=9464)], interval=30):
            train()
    """

    def __init__(
        self,
        job: str | None,
        store: StoreLike | None = None,
        exporters: Iterable[Exporter] = (),
        *,
        interval: float = 30.0,
        rolling_windows: Iterable[float] = (),
        include_step_deviation: bool = True,
        ideal_step_time: float | None = None,
        slowdown_factor: float = DEFAULT_SLOWDOWN_FACTOR,
        clock: Callable[[], float] = time.time,
        on_snapshot: Callable[[Snapshot], None] | None = None,
        rank_options: RankOptions | None = None,
        exporter_timeout: float | None = None,
    ) -> None:
        interval = float(interval)
        if not (math.isfinite(interval) and interval > 0):
            raise ValueError(f"interval must be a positive number of seconds, got {interval}")
        windows = _rolling_windows(rolling_windows)
        _require_positive("slowdown_factor", slowdown_factor)
        if ideal_step_time is not None:
            _require_positive("ideal_step_time", ideal_step_time)
        self._live = _open_live(job, store, ideal_step_time, rank_options)
        self.job: str = self._live.job
        self.interval = interval
        self.rolling_windows = windows
        self.include_step_deviation = include_step_deviation
        self.slowdown_factor = float(slowdown_factor)
        self._clock = clock
        self._on_snapshot = on_snapshot
        if exporter_timeout is None:
            exporter_timeout = max(1.0, min(interval, 30.0))
        _require_positive("exporter_timeout", exporter_timeout)
        self.exporter_timeout = float(exporter_timeout)
        self._exporters = ExporterLanes(exporters, interval, self.exporter_timeout)
        self._sequence = 0
        self._latest: Snapshot | None = None
        self._warned: set[str] = set()
        self._cpu = 0.0
        self._cycles = 0
        self._skipped_cycles = 0
        self._setup_process()
        _lifecycle.track(LIVE_GROUP, self)

    def _setup_process(self) -> None:
        """Thread state (also reset in a forked child)."""
        self._cycle_lock = threading.Lock()  # one cycle at a time
        self._state_lock = threading.Lock()
        self._worker = PeriodicWorker(
            "badput-monitor", self.interval, self._cycle, finish=lambda final: self._shutdown()
        )
        self._thread: threading.Thread | None = None  # the thread that does the shutdown
        self._stopping = False  # stop() was called: no restart
        self._final_flush = True
        self._closed = False  # exporters closed

    def _after_fork_child(self) -> None:
        """In a forked child: a stopped monitor (no thread; the parent's exporters left alone)."""
        self._setup_process()
        self._stopping = True
        self._closed = True
        self._exporters.after_fork()
        _lifecycle.untrack(LIVE_GROUP, self)

    # ----------------------------------------------------------------- state

    @property
    def running(self) -> bool:
        """``True`` while the monitor's thread runs cycles (``False`` once stopping)."""
        return self._worker.running and not self._stopping

    @property
    def latest(self) -> Snapshot | None:
        """The snapshot of the last successful cycle (``None`` before the first)."""
        return self._latest

    @property
    def failures(self) -> dict[str, int]:
        """Failures so far, per exporter name (every exporter listed, 0 when none)."""
        return self._exporters.failures

    @property
    def cycles(self) -> int:
        """Cycles completed (snapshots built)."""
        return self._cycles

    @property
    def skipped_cycles(self) -> int:
        """Cycles skipped because the store or the engine failed."""
        return self._skipped_cycles

    @property
    def cpu_seconds(self) -> float:
        """CPU time spent in cycles so far: the thread's that ran them, and that of the
        helper threads its queries started (the per-rank analysis of a large change runs
        beside the accounting: :func:`badput.engine.cpu_time_with_helpers`)."""
        return self._cpu

    @property
    def live_job(self) -> LiveJob:
        """The :class:`~badput.analysis.LiveJob` the monitor reads."""
        return self._live

    # ---------------------------------------------------------------- control

    def start(self) -> Monitor:
        """Start the thread (its first cycle runs at once). Idempotent while running.

        ``RuntimeError`` once stopped (a stopped monitor has closed its exporters),
        and in a forked child.
        """
        with self._state_lock:
            if self._stopping:
                raise RuntimeError("this Monitor is stopped (or was inherited by fork)")
            self._worker.start()  # False when already running: idempotent
        return self

    def stop(self, final_flush: bool = True, timeout: float | None = 10.0) -> bool:
        """Stop: a final cycle (if ``final_flush``), then ``close()`` every exporter.

        Both run on the monitor's thread (or a helper thread if it was never
        started); this call waits at most ``timeout`` seconds for them. Returns
        ``True`` when they finished in time; otherwise they go on in the background
        (a daemon thread: it does not hold up the interpreter's exit). Idempotent.
        """
        with self._state_lock:
            if self._stopping:
                thread = self._thread
                if thread is not None and thread is not threading.current_thread():
                    thread.join(timeout)
                    return not thread.is_alive() and not self._exporters.left_behind
                return self._closed and not self._exporters.left_behind
            self._stopping = True
            self._final_flush = final_flush
            if timeout is not None:
                # Exports and closes of the shutdown give up in time for this call.
                self._exporters.stop_deadline = time.monotonic() + 0.9 * timeout
            thread = self._worker.signal(final=final_flush)
            if thread is None:  # never started: the shutdown runs on a helper thread
                thread = threading.Thread(
                    target=self._shutdown, name="badput-monitor-stop", daemon=True
                )
                thread.start()
            self._thread = thread
        _lifecycle.untrack(LIVE_GROUP, self)
        if thread is threading.current_thread():  # stop() called by an exporter
            return False
        thread.join(timeout)
        return not thread.is_alive() and not self._exporters.left_behind

    def run_once(self) -> Snapshot:
        """Run one cycle now, in the calling thread, and return its snapshot.

        Exporter failures are handled as on the thread (logged once, backed off);
        an error of the store or the engine is raised (the caller asked for a
        snapshot). ``RuntimeError`` once the monitor is stopped.
        """
        if self._stopping:
            raise RuntimeError("this Monitor is stopped (or was inherited by fork)")
        snapshot = self._cycle(raise_errors=True)
        assert snapshot is not None
        return snapshot

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else ("stopped" if self._stopping else "idle")
        return f"<Monitor job={self.job!r} interval={self.interval}s {state}>"

    # ----------------------------------------------------------------- thread

    def _shutdown(self) -> None:
        try:
            if self._final_flush:
                self._cycle(final=True)
        finally:
            self._close_exporters()

    def _close_exporters(self) -> None:
        """Close each exporter this monitor is the last user of, each on its lane, in
        parallel, bounded by the exporter deadline (and stop()'s timeout)."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._exporters.close()

    # ------------------------------------------------------------------ cycle

    def _snapshot(self) -> Snapshot:
        live = self._live
        live.update()
        now = self._clock()
        report = live.report(now=now)
        windows = {w: live.report(now=now, window=(now - w, now)) for w in self.rolling_windows}
        step_time = None
        if self.include_step_deviation:
            step_time = live.accountant.step_time_stats(
                now=now, slowdown_factor=self.slowdown_factor
            )
        return Snapshot(
            job=self.job,
            time=now,
            report=report,
            windows=windows,
            step_time=step_time,
            sequence=self._sequence,
            last_event_time=live.accountant.last_event_ts,
            hang_timeout=live.accountant.hang_timeout,
        )

    def _cycle(self, *, final: bool = False, raise_errors: bool = False) -> Snapshot | None:
        with self._cycle_lock:
            t0 = cpu_time_with_helpers()
            try:
                try:
                    snapshot = self._snapshot()
                except Exception as exc:
                    if raise_errors:
                        raise
                    self._skipped_cycles += 1
                    self._warn_once(
                        "engine",
                        "badput: monitor of job %r: reading or accounting failed (%r); "
                        "skipping this cycle. The training run is not affected.",
                        self.job,
                        exc,
                    )
                    return None
                self._sequence += 1
                self._cycles += 1
                self._latest = snapshot
                if self._on_snapshot is not None:
                    try:
                        self._on_snapshot(snapshot)
                    except Exception as exc:
                        self._warn_once("on_snapshot", "badput: on_snapshot failed: %r", exc)
                if snapshot.last_event_time is not None:
                    self._exporters.export(snapshot, final=final)
                return snapshot
            finally:
                self._cpu += cpu_time_with_helpers() - t0

    def _warn_once(self, key: str, msg: str, *args: object) -> None:
        if key in self._warned:
            logger.debug(msg, *args)
            return
        self._warned.add(key)
        logger.warning(msg, *args)


#: The lifecycle registry group of live monitors.
LIVE_GROUP: Final = "monitors"


def flush_live_recorders(timeout: float = _RECORDER_FLUSH_TIMEOUT) -> None:
    """At exit, before a monitor's final cycle: flush this process's recorders so that
    the final cycle sees the job's last events. Never raises."""
    for rec in _lifecycle.live("recorders"):
        with suppress(Exception):
            rec.flush(timeout=timeout)


def _stop_all() -> None:
    monitors = _lifecycle.live(LIVE_GROUP)
    if not monitors:
        return
    flush_live_recorders()
    for monitor in monitors:
        with suppress(Exception):
            monitor.stop(timeout=EXIT_TIMEOUT)


def _after_fork_in_child() -> None:
    for monitor in _lifecycle.live(LIVE_GROUP):
        with suppress(Exception):
            monitor._after_fork_child()


_lifecycle.on_exit(_stop_all, _lifecycle.ORDER_MONITORS)
_lifecycle.on_fork_child(_after_fork_in_child)
