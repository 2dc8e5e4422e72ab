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
from badput.runtime import lifecycle as _lifecycle
from badput.runtime.worker import PeriodicWorker
from badput.store import EventStore, is_job_path, open_store

__all__ = [
    "EXIT_TIMEOUT",
    "MAX_BACKOFF_CYCLES",
    "MAX_BACKOFF_SECONDS",
    "Monitor",
]

logger = logging.getLogger("badput")

#: Longest back-off of a failing exporter, in cycles.
MAX_BACKOFF_CYCLES: Final = 32
#: ... and in seconds (``interval`` x cycles; at least one cycle is always skipped).
MAX_BACKOFF_SECONDS: Final = 300.0
#: How long the ``atexit`` hook waits for each monitor still running.
EXIT_TIMEOUT: Final = 5.0
#: How long the ``atexit`` hook waits for each recorder's last events before the final cycle.
_RECORDER_FLUSH_TIMEOUT: Final = 1.0

StoreLike = EventStore | str | os.PathLike[str]


class _Lane:
    """One exporter's own daemon thread: an exporter that hangs holds only its lane.

    One task at a time: :meth:`run` refuses a new task while the last one runs, or
    (``after_busy``) queues it to run next.
    """

    __slots__ = ("_done", "_lock", "_name", "_next", "_next_done", "_ready", "_task", "_thread")

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._task: Callable[[], None] | None = None
        self._done = threading.Event()
        self._done.set()
        self._next: Callable[[], None] | None = None
        self._next_done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        return not self._done.is_set()

    def run(self, task: Callable[[], None], *, after_busy: bool = False) -> threading.Event | None:
        """Start ``task`` on the lane; the event is set when it is over. ``None``: busy."""
        with self._lock:
            if not self._done.is_set():
                if not after_busy:
                    return None
                self._next, self._next_done = task, threading.Event()
                return self._next_done
            done = self._done = threading.Event()
            self._task = task
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name=f"badput-export-{self._name}", daemon=True
                )
                self._thread.start()
            self._ready.set()
        return done

    def _loop(self) -> None:
        while True:
            self._ready.wait()
            self._ready.clear()
            while True:
                with self._lock:
                    task, self._task, done = self._task, None, self._done
                if task is None:
                    break
                try:
                    task()  # tasks catch and record their own errors
                finally:
                    with self._lock:
                        if self._next is not None:  # queued while busy: it runs next
                            self._task, self._next = self._next, None
                            self._done = self._next_done
                    done.set()
                if task is _QUIT:
                    return


def _quit() -> None:
    return None


_QUIT: Final = _quit

# How many monitors use each exporter: the last one to stop closes it. Keyed by id, with the
# exporter held, so that no new object takes its id while it is counted: a monitor dropped
# without stop() leaves its count behind, and a new exporter at the freed address was then
# counted as shared with it and never closed.
_exporter_users: dict[int, tuple[Exporter, int]] = {}
_users_lock = threading.Lock()


class _ExporterState:
    """One exporter, its lane and its failure book-keeping."""

    __slots__ = ("exporter", "failures", "lane", "name", "skip", "streak", "warned")

    def __init__(self, name: str, exporter: Exporter) -> None:
        self.name = name
        self.exporter = exporter
        self.lane = _Lane(name)
        self.failures = 0  # failures so far (errors and deadlines missed)
        self.streak = 0  # consecutive failures
        self.skip = 0  # cycles still to skip
        self.warned = False


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
    return LiveJob(store, job, ideal_step_time=ideal, rank_options=rank_options)


def _exporter_name(exporter: Exporter, taken: set[str]) -> str:
    base = str(getattr(exporter, "name", "") or type(exporter).__name__)
    name, k = base, 2
    while name in taken:
        name, k = f"{base}#{k}", k + 1
    taken.add(name)
    return name


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
        windows: list[float] = []
        for raw in rolling_windows:
            w = float(raw)
            if not (math.isfinite(w) and w > 0):
                raise ValueError(f"rolling windows must be positive seconds, got {raw}")
            if w not in windows:
                windows.append(w)
        if not (math.isfinite(slowdown_factor) and slowdown_factor > 0):
            raise ValueError(f"slowdown_factor must be positive, got {slowdown_factor}")
        if ideal_step_time is not None and not (
            math.isfinite(ideal_step_time) and ideal_step_time > 0
        ):
            raise ValueError(f"ideal_step_time must be positive, got {ideal_step_time}")
        self._live = _open_live(job, store, ideal_step_time, rank_options)
        self.job: str = self._live.job
        self.interval = interval
        self.rolling_windows: tuple[float, ...] = tuple(windows)
        self.include_step_deviation = include_step_deviation
        self.slowdown_factor = float(slowdown_factor)
        self._clock = clock
        self._on_snapshot = on_snapshot
        taken: set[str] = set()
        self._exporters = [_ExporterState(_exporter_name(e, taken), e) for e in exporters]
        if exporter_timeout is None:
            exporter_timeout = max(1.0, min(interval, 30.0))
        if not (math.isfinite(exporter_timeout) and exporter_timeout > 0):
            raise ValueError(f"exporter_timeout must be positive, got {exporter_timeout}")
        self.exporter_timeout = float(exporter_timeout)
        with _users_lock:
            for st in self._exporters:
                key = id(st.exporter)
                users = _exporter_users.get(key, (st.exporter, 0))[1]
                _exporter_users[key] = (st.exporter, users + 1)
        self._max_skip = max(1, min(MAX_BACKOFF_CYCLES, int(MAX_BACKOFF_SECONDS // interval)))
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
        self._stop_deadline: float | None = None  # monotonic time stop() stops waiting
        self._left_behind = False  # the shutdown gave up on a hung exporter

    def _after_fork_child(self) -> None:
        """In a forked child: a stopped monitor (no thread; the parent's exporters left alone)."""
        self._setup_process()
        self._stopping = True
        self._closed = True
        for st in self._exporters:
            st.lane = _Lane(st.name)  # the parent's lane threads do not exist here
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
        return {st.name: st.failures for st in self._exporters}

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
                    return not thread.is_alive() and not self._left_behind
                return self._closed and not self._left_behind
            self._stopping = True
            self._final_flush = final_flush
            if timeout is not None:
                # Exports and closes of the shutdown give up in time for this call.
                self._stop_deadline = time.monotonic() + 0.9 * timeout
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
        return not thread.is_alive() and not self._left_behind

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

    def _deadline(self) -> float:
        """When the exports of this cycle stop being waited for (monotonic)."""
        deadline = time.monotonic() + self.exporter_timeout
        stop = self._stop_deadline
        return deadline if stop is None else min(deadline, stop)

    def _close_exporters(self) -> None:
        """Close each exporter this monitor is the last user of, each on its lane, in
        parallel, bounded by the exporter deadline (and stop()'s timeout)."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        waits: list[tuple[_ExporterState, threading.Event]] = []
        for st in self._exporters:
            with _users_lock:
                key = id(st.exporter)
                left = _exporter_users.get(key, (st.exporter, 1))[1] - 1
                if left > 0:
                    _exporter_users[key] = (st.exporter, left)
                else:
                    _exporter_users.pop(key, None)
            if left > 0:  # another monitor still exports to it
                continue

            def close(st: _ExporterState = st) -> None:
                try:
                    st.exporter.close()
                except Exception as exc:
                    logger.warning("badput: closing exporter %r failed: %r", st.name, exc)

            done = st.lane.run(close, after_busy=True)  # after a hung export returns
            assert done is not None
            waits.append((st, done))
        deadline = self._deadline()
        for st, done in waits:
            if not done.wait(max(deadline - time.monotonic(), 0.0)):
                self._left_behind = True
                logger.warning(
                    "badput: exporter %r did not finish within %gs; it is closed in the "
                    "background when it returns",
                    st.name,
                    self.exporter_timeout,
                )
            else:
                st.lane.run(_QUIT)

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
                    self._export(snapshot, final=final)
                return snapshot
            finally:
                self._cpu += cpu_time_with_helpers() - t0

    def _export(self, snapshot: Snapshot, *, final: bool) -> None:
        """Hand ``snapshot`` to every exporter on its own lane, all at once; wait for
        them until the deadline. A slow exporter delays no other one."""
        running: list[tuple[_ExporterState, threading.Event, list[BaseException]]] = []
        for st in self._exporters:
            if st.skip > 0 and not final:  # the final cycle tries every exporter
                st.skip -= 1
                continue
            errors: list[BaseException] = []

            def export(st: _ExporterState = st, errors: list[BaseException] = errors) -> None:
                try:
                    st.exporter.export(snapshot)
                except BaseException as exc:
                    errors.append(exc)

            done = st.lane.run(export)
            if done is None:  # still in an export that missed its deadline
                self._left_behind = final
                logger.debug("badput: exporter %r is still busy; skipped", st.name)
                continue
            running.append((st, done, errors))
        deadline = self._deadline()
        for st, done, errors in running:
            if not done.wait(max(deadline - time.monotonic(), 0.0)):
                self._left_behind = final
                self._failed(
                    st, TimeoutError(f"no answer within {self.exporter_timeout:g}s (hung?)")
                )
            elif errors:
                self._failed(st, errors[0])
            else:
                if st.streak:
                    logger.debug(
                        "badput: exporter %r works again after %d failures", st.name, st.streak
                    )
                st.streak = 0
                st.skip = 0

    def _failed(self, st: _ExporterState, exc: BaseException) -> None:
        st.failures += 1
        st.streak += 1
        st.skip = min(2 ** (st.streak - 1), self._max_skip)
        if not st.warned:
            st.warned = True
            logger.warning(
                "badput: exporter %r failed: %s: %s; backing off (skipping it for "
                "1, 2, 4... cycles while it fails; further failures are logged at "
                "debug level). The training run is not affected.",
                st.name,
                type(exc).__name__,
                exc,
            )
        else:
            logger.debug(
                "badput: exporter %r failed again (%d in a row): %r; skipping %d cycles",
                st.name,
                st.streak,
                exc,
                st.skip,
            )

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
