"""``ml_goodput_measurement.monitoring``: the ``GoodputMonitor``, on the compat calculator.

Drop-in for ml-goodput-measurement 0.2.x: same class, constructor parameters (names,
order, defaults) and methods, and the same output, so TensorBoard dashboards and Cloud
Monitoring charts built on the library keep working:

- **TensorBoard** (tensorboardX, ``pip install 'badput[tensorboard]'``), under
  ``<tensorboard_dir>/goodput/``: ``goodput/goodput`` (%) at step = the last productive
  step; with ``include_badput_breakdown``, ``badput/<badput_type>`` (%, lower case, e.g.
  ``badput/program_startup``) and ``badput/custom_badput_events/<name>`` per custom event;
  the step deviation uploader writes ``step_deviation`` (seconds) at each step.
- **Google Cloud Monitoring** (``pip install 'badput[gcp]'``), when
  ``GCPOptions.enable_gcp_goodput_metrics`` / ``enable_gcp_step_deviation_metrics`` are on
  and a project and location are known (looked up on the GCE metadata server when
  ``None``; off GCP that fails: a warning, and Cloud Monitoring is off, nothing raises):
  the library's ``compute.googleapis.com/workload/*`` series: ``goodput_time``,
  ``badput_time`` per ``badput_source``, ``total_elapsed_time``,
  ``max_productive_steps``, ``disruptions``, ``step_time_deviation``, ``performance``,
  ``interval_goodput`` / ``interval_badput`` for rolling windows, and for the elastic
  monitor ``stepping_slice_efficiency`` / ``available_slice_efficiency``. The series are
  built with :mod:`badput.monitor.gcm`'s helpers (same metric types, monitored resource
  and ``create_time_series`` call as :class:`~badput.monitor.gcm.CloudMonitoringExporter`).

Every number is :class:`~badput.compat.ml_goodput_measurement.goodput.GoodputCalculator`'s
(``get_job_goodput``, ``get_step_deviation``, ``get_job_goodput_details``,
``get_interval_metric_details``): the library's buckets, not badput's own report.

**Threads, not processes.** The library runs each uploader in a ``multiprocessing``
process with its own calculator. Here each uploader is a daemon thread of the training
process, and the uploaders of one monitor share one calculator (badput reads its store
incrementally: a query after new events costs what the new events cost), so the final
flush is always a warm query. Why not :class:`badput.monitor.Monitor`: it computes
badput's own :class:`~badput.engine.Report` snapshot from a second reader of the store
each cycle, while these numbers must be the compat calculator's; its ``stop`` is final,
while the library's uploaders start and stop independently, each on its own interval,
and may be restarted; and the library's stop rules (a one-off flush when never started,
``skip_final_flush``, ``final_flush_timeout_seconds=None`` = wait) are not the Monitor's.
So this module has a small loop of its own with the Monitor's guarantees:

- nothing raises into the job once the monitor is built: a failed query is logged once
  per uploader and the cycle skipped; a failing destination (TensorBoard directory,
  Cloud Monitoring) is logged once and backed off for 1, 2, 4... cycles (as the Monitor
  does, at most ``MAX_BACKOFF_CYCLES`` / ``MAX_BACKOFF_SECONDS``); the final flush tries
  every destination;
- ``stop_*`` asks the thread for a final cycle (unless ``skip_final_flush``) and waits at
  most ``final_flush_timeout_seconds`` (``None``: until it is done), else abandons it
  (a daemon thread does not hold up the exit); with ``skip_final_flush`` it waits at most
  10 s for a cycle in progress. A stop when the uploader never ran makes a one-off query
  and upload, bounded the same way (the library's rule). Starting a running uploader
  logs a warning and does nothing;
- at interpreter exit (``atexit``) running uploaders are stopped with their final flush
  (after the process's badput recorders are flushed, so it sees their last events); in
  a child made by ``os.fork`` the inherited monitor is inert: no thread, every method a
  no-op (the parent's uploaders and files are left alone).

Extensions (keyword-only): ``store=`` (an ``EventStore`` or URI, passed to the
calculator; default ``$BADPUT_STORE``, else ``./badput-runs``), ``clock=`` (the query time
source, for tests and replays) and ``gcm_client=`` (a ``MetricServiceClient`` to write
with instead of a default one). Accepted and unused: ``gcs_sync_interval_seconds``,
``cache_dir`` and ``max_logs_retention_period`` (badput keeps no Cloud Logging cache).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from typing import Any, Final

from badput.compat.ml_goodput_measurement import goodput, goodput_utils
from badput.compat.ml_goodput_measurement._destinations import (
    CloudMonitoringWriter,
    TensorBoardWriter,
)
from badput.compat.ml_goodput_measurement._uploader import Guard, Uploader, join_or_abandon
from badput.compat.ml_goodput_measurement.gcp_metrics import GCPMetrics, ValueType
from badput.monitor import flush_live_recorders
from badput.runtime import lifecycle as _lifecycle
from badput.runtime.optional import import_optional
from badput.store import EventStore

__all__ = [
    "ACTIVITY_EXCLUSION_LIST",
    "BadputType",
    "GCPMetrics",
    "GCPOptions",
    "GoodputCalculator",
    "GoodputMonitor",
    "IntervalMetricType",
    "IntervalWorkloadMetricDetails",
    "MetricType",
    "MonitoringWindowType",
    "UnproductiveTimeDict",
    "ValueType",
    "WorkloadMetricDetails",
]

logger = logging.getLogger(__name__)

BadputType = goodput_utils.BadputType
GCPOptions = goodput_utils.GCPOptions
GoodputCalculator = goodput.GoodputCalculator
IntervalMetricType = goodput_utils.IntervalMetricType
IntervalWorkloadMetricDetails = goodput_utils.IntervalWorkloadMetricDetails
MetricType = goodput_utils.MetricType
MonitoringWindowType = goodput_utils.MonitoringWindowType
UnproductiveTimeDict = goodput.UnproductiveTimeDict
WorkloadMetricDetails = goodput_utils.WorkloadMetricDetails

ACTIVITY_EXCLUSION_LIST = goodput_utils.ACTIVITY_EXCLUSION_LIST
_TENSORBOARD_GCS_SUBDIR: Final = "goodput"
#: The library's default final flush timeout, and how long a stop with
#: ``skip_final_flush`` waits for a cycle in progress.
_PROCESS_TERMINATION_TIMEOUT_SECONDS: Final = 10

StoreLike = EventStore | str | os.PathLike[str]


# ------------------------------------------------------------------------- sessions


class _GoodputSession:
    """Cumulative goodput: TensorBoard and ``workload/*`` cumulative series."""

    def __init__(self, mon: GoodputMonitor, interval: float) -> None:
        self._mon = mon
        job = mon._job_name
        self._tb = TensorBoardWriter(mon._tbx, mon._logdir, "goodput")
        self._query = Guard("goodput query", job, interval, backoff=False)
        self._tb_guard = Guard("goodput upload to TensorBoard", job, interval, backoff=True)
        self._gcm_guard = Guard("goodput upload to Cloud Monitoring", job, interval, backoff=True)

    def cycle(self, final: bool) -> None:
        mon = self._mon
        breakdown = mon._include_badput_breakdown
        sender = mon._gcm if mon._gcp_options.enable_gcp_goodput_metrics else None
        details: Mapping[str, Any] | None = None
        try:
            with mon._query_lock:  # the details are those of this very query
                job_goodput, badput, last_step = mon._calculator.get_job_goodput(
                    include_badput_breakdown=breakdown
                )
                if sender is not None:
                    details = mon._calculator.get_job_goodput_details()
        except Exception as exc:
            self._query.failed(exc)
            return
        self._tb_guard.run(
            lambda: self._tb.goodput(job_goodput, badput, last_step, breakdown), final=final
        )
        if sender is not None and details is not None:
            slices = mon._include_slice_efficiency
            self._gcm_guard.run(lambda: sender.cumulative(details, slices), final=final)
        if final:
            logger.info(
                "Final goodput query and upload for job: %s completed with total goodput:"
                " %.2f%%, last step: %d",
                mon._job_name,
                job_goodput,
                last_step,
            )

    def close(self) -> None:
        self._tb.close()


class _StepDeviationSession:
    """Step deviation: TensorBoard ``step_deviation`` and ``workload/performance``."""

    def __init__(self, mon: GoodputMonitor, interval: float) -> None:
        self._mon = mon
        job = mon._job_name
        self._tb = TensorBoardWriter(mon._tbx, mon._logdir, "step_deviation")
        self._query = Guard("step deviation query", job, interval, backoff=False)
        self._tb_guard = Guard("step deviation upload to TensorBoard", job, interval, backoff=True)
        self._gcm_guard = Guard(
            "step deviation upload to Cloud Monitoring", job, interval, backoff=True
        )

    def cycle(self, final: bool) -> None:
        mon = self._mon
        try:
            with mon._query_lock:
                deviations = mon._calculator.get_step_deviation(mon._configured_ideal_step_time)
        except Exception as exc:
            self._query.failed(exc)
            return
        self._tb_guard.run(lambda: self._tb.step_deviation(deviations), final=final)
        sender = mon._gcm if mon._gcp_options.enable_gcp_step_deviation_metrics else None
        if sender is not None:
            self._gcm_guard.run(lambda: sender.step_deviation(deviations), final=final)

    def close(self) -> None:
        self._tb.close()


class _WindowSession:
    """Rolling windows ``[now - w, now]``: ``workload/interval_*`` (Cloud Monitoring only,
    as in the library)."""

    def __init__(self, mon: GoodputMonitor, interval: float, windows: tuple[float, ...]) -> None:
        self._mon = mon
        self._windows = windows
        job = mon._job_name
        self._query = Guard("rolling window query", job, interval, backoff=False)
        self._gcm_guard = Guard(
            "rolling window upload to Cloud Monitoring", job, interval, backoff=True
        )

    def cycle(self, final: bool) -> None:
        mon = self._mon
        sender = mon._gcm if mon._gcp_options.enable_gcp_goodput_metrics else None
        if sender is None or not self._windows:
            return
        if not self._gcm_guard.due(final):  # backing off: no query either
            return
        try:
            end = datetime.datetime.fromtimestamp(mon._clock(), datetime.timezone.utc)
            results = []
            for w in self._windows:
                start = end - datetime.timedelta(seconds=w)
                with mon._query_lock:
                    results.append(mon._calculator.get_interval_metric_details(start, end))
        except Exception as exc:
            self._query.failed(exc)
            return
        slices = mon._include_slice_efficiency

        def send() -> None:
            for details in results:
                sender.interval(details, slices)

        self._gcm_guard.call(send)

    def close(self) -> None:
        pass


def _positive(value: float, what: str) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    return v


# -------------------------------------------------------------------------- monitor


class GoodputMonitor:
    """Queries goodput, badput and step deviation and uploads them to TensorBoard and
    Google Cloud Monitoring at a regular interval, in background threads.

    Args (the library's; see its README): ``job_name``, ``logger_name`` (kept, unused:
    events come from ``store``), ``tensorboard_dir`` (scalars go to its ``goodput/``
    sub-directory), ``upload_interval`` (seconds between cumulative and rolling window
    uploads), ``monitoring_enabled`` (``False``: every method is a no-op),
    ``pathway_enabled``, ``include_badput_breakdown``, ``include_step_deviation``,
    ``configured_ideal_step_time``, ``step_deviation_interval_seconds``, ``gcp_options``
    (copied, never modified), ``skip_final_flush``, ``final_flush_timeout_seconds``
    (``None``: wait for the final flush however long it takes),
    ``gcs_sync_interval_seconds``, ``cache_dir``, ``max_logs_retention_period`` (accepted,
    unused).

    Keyword-only badput extensions: ``store`` (where the recorder writes), ``clock`` (the
    query time, POSIX seconds), ``gcm_client`` (a ``monitoring_v3.MetricServiceClient``).

    Construction may raise (``ValueError`` for a non-positive interval, ``MissingExtraError``
    when tensorboardX is not installed); no method raises into the job after it.
    """

    _calculator_class: type[goodput.GoodputCalculator] = goodput.GoodputCalculator

    def __init__(
        self,
        job_name: str,
        logger_name: str,
        tensorboard_dir: str,
        upload_interval: int,
        monitoring_enabled: bool = False,
        pathway_enabled: bool = False,
        include_badput_breakdown: bool = False,
        include_step_deviation: bool = False,
        configured_ideal_step_time: float | None = None,
        step_deviation_interval_seconds: float = 10,
        gcp_options: goodput_utils.GCPOptions = GCPOptions(),  # noqa: B008 - the library's default
        skip_final_flush: bool = False,
        final_flush_timeout_seconds: float | None = _PROCESS_TERMINATION_TIMEOUT_SECONDS,
        gcs_sync_interval_seconds: int = 3600,
        cache_dir: str = "/tmp",  # the library's default, unused here
        max_logs_retention_period: datetime.timedelta | None = None,
        *,
        store: StoreLike | None = None,
        clock: Callable[[], float] = time.time,
        gcm_client: Any = None,
    ) -> None:
        self._job_name = job_name
        self._logger_name = logger_name
        self._include_slice_efficiency = False
        self._forked = False
        if not monitoring_enabled:
            logger.info("Monitoring is disabled. GoodputMonitor will not be initialized.")
            self._initialized = False
            return
        upload = _positive(upload_interval, "upload_interval")
        step_interval = _positive(
            step_deviation_interval_seconds, "step_deviation_interval_seconds"
        )
        self._tbx: Any = import_optional("tensorboardX", "tensorboard")  # untyped
        self._logdir = os.path.join(tensorboard_dir, _TENSORBOARD_GCS_SUBDIR)
        self._include_badput_breakdown = bool(include_badput_breakdown)
        self._include_step_deviation = bool(include_step_deviation)
        self._configured_ideal_step_time = configured_ideal_step_time
        self._skip_final_flush = bool(skip_final_flush)
        self._final_flush_timeout_seconds = final_flush_timeout_seconds
        self._clock = clock
        self._calculator = self._calculator_class(
            job_name=job_name,
            logger_name=logger_name,
            using_pathways=pathway_enabled,
            max_logs_retention_period=max_logs_retention_period,
            gcs_path=tensorboard_dir,
            cache_dir=cache_dir,
            store=store,
            clock=clock,
        )
        # Serializes the uploaders' queries on the shared calculator, so that the details
        # sent to Cloud Monitoring are those of the query just made.
        self._query_lock = threading.Lock()
        self._gcp_options = dataclasses.replace(gcp_options)  # the default is shared
        self._gcm = self._open_cloud_monitoring(gcm_client)
        self._windows: tuple[float, ...] = ()
        self._interval_windows: tuple[float, ...] = ()
        self._uploaders = self._new_uploaders(upload, step_interval)
        self._initialized = True
        _lifecycle.track(_LIVE_GROUP, self)

    def _new_uploaders(self, upload: float, step_interval: float) -> dict[str, Uploader]:
        """The four uploaders, each with the session it runs (opened on its thread)."""
        job_name = self._job_name
        return {
            "goodput": Uploader("goodput", job_name, upload, lambda: _GoodputSession(self, upload)),
            "step_deviation": Uploader(
                "step_deviation",
                job_name,
                step_interval,
                lambda: _StepDeviationSession(self, step_interval),
            ),
            "rolling_window": Uploader(
                "rolling_window",
                job_name,
                upload,
                lambda: _WindowSession(self, upload, self._windows),
            ),
            "interval": Uploader(
                "interval",
                job_name,
                upload,
                lambda: _WindowSession(self, upload, self._interval_windows),
            ),
        }

    def _open_cloud_monitoring(self, client: Any) -> CloudMonitoringWriter | None:
        """The Cloud Monitoring writer, or ``None`` (with a warning when it was asked for)."""
        opts = self._gcp_options
        if not (opts.enable_gcp_goodput_metrics or opts.enable_gcp_step_deviation_metrics):
            return None
        try:
            if not opts.project_id:
                opts.project_id = goodput_utils.get_gcp_project_id()
            if not opts.location:
                opts.location = goodput_utils.get_node_zone()
            if not opts.acc_type:
                opts.acc_type = goodput_utils.get_accelerator_type()
            if opts.project_id and opts.location:
                return CloudMonitoringWriter(opts, self._job_name, client, self._clock)
            logger.warning(
                "Project ID or location could not be determined. Disabling GCP Monitoring."
            )
        except Exception as exc:  # no google-cloud-monitoring, no credentials...
            logger.warning("badput: Google Cloud Monitoring is disabled: %s", exc)
        opts.enable_gcp_goodput_metrics = False
        opts.enable_gcp_step_deviation_metrics = False
        return None

    @property
    def _active(self) -> bool:
        return self._initialized and not self._forked

    # ------------------------------------------------------------ cumulative goodput

    def start_goodput_uploader(self) -> None:
        """Start querying and uploading cumulative goodput every ``upload_interval`` s."""
        if self._active:
            self._start("goodput", "Cumulative goodput")

    def stop_goodput_uploader(self, skip_final_flush: bool | None = None) -> None:
        """Stop the cumulative goodput uploader after a final query and upload (unless
        ``skip_final_flush``); if it never ran, make that final upload once."""
        if self._active:
            self._stop("goodput", skip_final_flush)

    # ---------------------------------------------------------------- step deviation

    def start_step_deviation_uploader(self) -> None:
        """Start uploading step deviation every ``step_deviation_interval_seconds`` s
        (only with ``include_step_deviation``)."""
        if not self._active or not self._include_step_deviation:
            logger.info(
                "Step deviation monitoring is disabled. Returning without initializing"
                " step deviation uploader thread."
            )
            return
        self._start("step_deviation", "Step deviation")

    def stop_step_deviation_uploader(self, skip_final_flush: bool | None = None) -> None:
        """Stop the step deviation uploader after a final upload (unless skipped)."""
        if self._active and self._include_step_deviation:
            self._stop("step_deviation", skip_final_flush)

    # ------------------------------------------------------------- rolling windows

    def start_rolling_window_goodput_uploader(self, rolling_windows_seconds: list[int]) -> None:
        """Start uploading the goodput and badput of ``[now - w, now]`` for each window
        ``w`` (seconds) every ``upload_interval`` s, to Cloud Monitoring (as the library)."""
        if not self._active:
            return
        windows = _windows(rolling_windows_seconds)
        if self._uploaders["rolling_window"].running:
            logger.warning("Rolling window uploader for job %r is already running.", self._job_name)
            return
        self._windows = windows
        self._start("rolling_window", "Rolling window goodput")

    def stop_rolling_window_goodput_uploader(self, skip_final_flush: bool | None = None) -> None:
        """Stop the rolling window uploader after a final upload (unless skipped)."""
        if self._active:
            self._stop("rolling_window", skip_final_flush)

    # ---------------------------------------- interval window (the library's older API)

    def start_goodput_interval_uploader(self, window_size_seconds: float) -> None:
        """The older API: one rolling window of ``window_size_seconds`` (to Cloud
        Monitoring), independent of :meth:`start_rolling_window_goodput_uploader`."""
        if not self._active:
            return
        windows = _windows([window_size_seconds])
        if self._uploaders["interval"].running:
            logger.warning(
                "Goodput interval uploader for job %r is already running.", self._job_name
            )
            return
        self._interval_windows = windows
        self._start("interval", "Goodput interval")

    def stop_goodput_interval_uploader(self, skip_final_flush: bool | None = None) -> None:
        """Stop the interval uploader after a final upload (unless skipped)."""
        if self._active:
            self._stop("interval", skip_final_flush)

    # --------------------------------------------------------------------- internals

    def _start(self, name: str, what: str) -> None:
        try:
            uploader = self._uploaders[name]
            if not uploader.start():
                logger.warning("%s uploader for job %r is already running.", what, self._job_name)
                return
            logger.info(
                "%s uploader started for job: %s (every %s s, thread %s)",
                what,
                self._job_name,
                uploader.interval,
                f"badput-goodput-{name}",
            )
        except Exception as exc:  # e.g. no more threads: never into the job
            logger.warning("badput: could not start the %s uploader: %r", name, exc)

    def _stop(self, name: str, skip_final_flush: bool | None) -> None:
        try:
            skip = self._skip_final_flush if skip_final_flush is None else bool(skip_final_flush)
            uploader = self._uploaders[name]
            run = uploader.signal(final_flush=not skip)
            what = f"Final {name.replace('_', ' ')} query and upload for job: {self._job_name}"
            if run is not None and run.thread is not None:
                timeout = (
                    _PROCESS_TERMINATION_TIMEOUT_SECONDS
                    if skip
                    else self._final_flush_timeout_seconds
                )
                join_or_abandon(run.thread, timeout, what)
            elif not skip:
                # Never started: a one-off query and upload, bounded the same way.
                helper = threading.Thread(
                    target=uploader.one_off, name=f"badput-goodput-{name}-final", daemon=True
                )
                helper.start()
                join_or_abandon(helper, self._final_flush_timeout_seconds, what)
        except Exception as exc:
            logger.warning("badput: stopping the %s uploader failed: %r", name, exc)

    def _stop_at_exit(self) -> None:
        """Stop every running uploader (final flush unless ``skip_final_flush``), all at
        once, waiting at most ``final_flush_timeout_seconds`` in all."""
        if not self._active:
            return
        skip = self._skip_final_flush
        runs = [u.signal(final_flush=not skip) for u in self._uploaders.values() if u.running]
        timeout = (
            _PROCESS_TERMINATION_TIMEOUT_SECONDS if skip else self._final_flush_timeout_seconds
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        for run in runs:
            if run is not None and run.thread is not None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                join_or_abandon(
                    run.thread, left, f"Final goodput upload at exit for job: {self._job_name}"
                )

    def _after_fork_child(self) -> None:
        """In a forked child: inert (the parent's threads do not exist here; its files and
        final flush are the parent's)."""
        self._forked = True
        _lifecycle.untrack(_LIVE_GROUP, self)


def _windows(sizes: Iterable[float]) -> tuple[float, ...]:
    out: list[float] = []
    for raw in sizes:
        w = _positive(raw, "a rolling window")
        if w not in out:
            out.append(w)
    return tuple(out)


# Live monitors, for the exit and after-fork hooks (badput's one lifecycle registry).
_LIVE_GROUP: Final = "compat-monitors"


def _stop_all() -> None:
    monitors = [
        m for m in _lifecycle.live(_LIVE_GROUP) if any(u.running for u in m._uploaders.values())
    ]
    if not monitors:
        return
    flush_live_recorders()  # let the final flush see the job's last events
    for monitor in monitors:
        with suppress(Exception):
            monitor._stop_at_exit()


def _after_fork_in_child() -> None:
    for monitor in _lifecycle.live(_LIVE_GROUP):
        with suppress(Exception):
            monitor._after_fork_child()


_lifecycle.on_exit(_stop_all, _lifecycle.ORDER_MONITORS)
_lifecycle.on_fork_child(_after_fork_in_child)
