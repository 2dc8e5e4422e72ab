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
import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from typing import Any, Final, Protocol

from badput.compat.ml_goodput_measurement import goodput, goodput_utils
from badput.compat.ml_goodput_measurement.gcp_metrics import GCPMetrics, ValueType
from badput.monitor import MAX_BACKOFF_CYCLES, MAX_BACKOFF_SECONDS, flush_live_recorders, gcm
from badput.runtime import lifecycle as _lifecycle
from badput.runtime.optional import import_optional
from badput.runtime.worker import PeriodicWorker
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
_TENSORBOARD_GOODPUT_LABEL: Final = "goodput"
_TENSORBOARD_BADPUT_LABEL: Final = "badput"
_TENSORBOARD_STEP_DEVIATION_LABEL: Final = "step_deviation"
#: The library's default final flush timeout, and how long a stop with
#: ``skip_final_flush`` waits for a cycle in progress.
_PROCESS_TERMINATION_TIMEOUT_SECONDS: Final = 10
#: Seconds per Cloud Monitoring request (no automatic retries: the uploader backs off).
_GCM_TIMEOUT_SECONDS: Final = 10.0
_SLICE_EFFICIENCY: Final = ("stepping_slice_efficiency", "available_slice_efficiency")

StoreLike = EventStore | str | os.PathLike[str]


# ------------------------------------------------------------------ failure handling


class _Guard:
    """One stage of an uploader (its query, or one destination): the first failure is a
    warning, later ones are debug; a destination is skipped for 1, 2, 4... cycles while it
    fails (``backoff``), except in the final flush."""

    def __init__(self, what: str, job: str, interval: float, *, backoff: bool) -> None:
        self.what = what
        self.job = job
        self.max_skip = (
            max(1, min(MAX_BACKOFF_CYCLES, int(MAX_BACKOFF_SECONDS // interval))) if backoff else 0
        )
        self.failures = 0
        self.streak = 0
        self.skip = 0
        self.warned = False

    def run(self, fn: Callable[[], None], *, final: bool) -> bool:
        """Run ``fn`` unless backing off; ``True`` when it ran and succeeded."""
        return self.due(final) and self.call(fn)

    def due(self, final: bool) -> bool:
        """``False`` while backing off (this cycle is then counted as skipped)."""
        if self.skip > 0 and not final:
            self.skip -= 1
            return False
        return True

    def call(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` now; ``True`` when it succeeded."""
        try:
            fn()
        except Exception as exc:
            self.failed(exc)
            return False
        if self.streak:
            logger.debug("badput: %s works again after %d failures", self.what, self.streak)
        self.streak = 0
        self.skip = 0
        return True

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        self.streak += 1
        self.skip = min(2 ** (self.streak - 1), self.max_skip)
        if not self.warned:
            self.warned = True
            logger.warning(
                "badput: %s failed for job %r: %s: %s%s. The training run is not affected; "
                "further failures are logged at debug level.",
                self.what,
                self.job,
                type(exc).__name__,
                exc,
                "; backing off while it fails" if self.max_skip else "; skipping this cycle",
            )
        else:
            logger.debug("badput: %s failed again (%d in a row): %r", self.what, self.streak, exc)


# ------------------------------------------------------------------------ TensorBoard


_writer_ids = itertools.count()
_writer_open_lock = threading.Lock()


class _TensorBoard:
    """One uploader's tensorboardX writer (each uploader has its own event file, as each
    of the library's worker processes does), opened at the first write: an unwritable
    directory fails inside a cycle, where it is caught, never in the training script."""

    def __init__(self, tbx: Any, logdir: str, name: str) -> None:
        self._tbx = tbx  # tensorboardX ships no type information
        self.logdir = logdir
        # tensorboardX names a file events.out.tfevents.<second>.<host>: two writers opened
        # in the same second would share (and truncate) one file without a suffix.
        self._suffix = f".{name}.{os.getpid()}.{next(_writer_ids)}"
        self._writer: Any = None
        self._deviations: dict[int, float] = {}  # step -> deviation written

    def _open(self) -> Any:
        if self._writer is None:
            # tensorboardX creates the directory with exists-then-makedirs: two uploaders
            # opening their writers at once would race (FileExistsError).
            with _writer_open_lock:
                self._writer = self._tbx.SummaryWriter(self.logdir, filename_suffix=self._suffix)
        return self._writer

    def scalars(
        self, prefix: str, data: Mapping[str, float | Mapping[str, float]], step: int
    ) -> None:
        """The library's ``_log_tensorboard_scalars``: ``prefix/name``, nested dicts as
        ``prefix/name/sub`` (lower case), each with its display name."""
        writer = self._open()
        for name, value in data.items():
            if isinstance(value, Mapping):
                for sub, subval in value.items():
                    tag = f"{prefix}/{name}/{sub}".lower()
                    writer.add_scalar(tag, float(subval), step, display_name=sub.lower())
            else:
                tag = f"{prefix}/{name.lower()}"
                writer.add_scalar(tag, float(value), step, display_name=name.lower())
        writer.flush()

    def goodput(
        self, job_goodput: float, badput: UnproductiveTimeDict, last_step: int, breakdown: bool
    ) -> None:
        """``goodput/goodput`` and, with the breakdown, ``badput/*`` at ``last_step``."""
        self.scalars(
            _TENSORBOARD_GOODPUT_LABEL, {_TENSORBOARD_GOODPUT_LABEL: job_goodput}, last_step
        )
        if breakdown:
            flat: dict[str, float | Mapping[str, float]] = {
                bt.name.lower(): (
                    {k.lower(): v for k, v in value.items()} if isinstance(value, dict) else value
                )
                for bt, value in badput.items()
            }
            self.scalars(_TENSORBOARD_BADPUT_LABEL, flat, last_step)

    def step_deviation(self, deviations: Mapping[int, float]) -> None:
        """``step_deviation`` at each step. The library rewrites every step each cycle;
        this writes from the first step whose value changed on (in step order, so that
        TensorBoard, which drops a tag's points at or after a step written again, keeps
        the same final curve), which after the first cycle is usually just the new steps."""
        changed = [s for s, v in deviations.items() if self._deviations.get(s) != v]
        if not changed:
            return
        first = min(changed)
        writer = self._open()
        for step in sorted(s for s in deviations if s >= first):
            value = float(deviations[step])
            writer.add_scalar(_TENSORBOARD_STEP_DEVIATION_LABEL, value, step)
            self._deviations[step] = value
        writer.flush()

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


# ---------------------------------------------------------------- Cloud Monitoring


def _flatten_badput(badput: Mapping[Any, float | Mapping[str, float]]) -> list[tuple[str, float]]:
    """``(badput_source, value)``: ``TYPE``, or ``TYPE.SUBTYPE`` for custom events."""
    out: list[tuple[str, float]] = []
    for bt, value in badput.items():
        if isinstance(value, Mapping):
            out.extend((f"{bt.name}.{sub.upper()}", float(v)) for sub, v in value.items())
        else:
            out.append((bt.name, float(value)))
    return out


class _CloudMonitoring:
    """Writes the calculator's detail dicts as the library's ``workload/*`` series."""

    def __init__(
        self,
        options: goodput_utils.GCPOptions,
        job_name: str,
        client: Any,
        clock: Callable[[], float],
    ) -> None:
        self._types: Any = import_optional("google.cloud.monitoring_v3", "gcp")  # untyped
        self.client: Any = client if client is not None else self._types.MetricServiceClient()
        assert options.project_id and options.location
        self.project_id: str = options.project_id
        self._clock = clock
        self._resource = {
            "type": gcm.RESOURCE_TYPE,
            "labels": {
                "location": options.location,
                "workload_id": job_name,
                "replica_id": str(options.replica_id),
            },
        }
        self._accelerator = options.acc_type or "UNKNOWN"
        self._optional = {"cluster_name": options.cluster_name} if options.cluster_name else {}

    def _labels(self, **labels: str) -> dict[str, str]:
        return {**labels, "accelerator_type": self._accelerator, **self._optional}

    def _send(self, metrics: list[tuple[str, float, str, dict[str, str]]]) -> None:
        if not metrics:
            return
        end = self._clock()
        series = [
            gcm.make_series(m, v, k, labels, self._resource, end_time=end)
            for m, v, k, labels in metrics
        ]
        gcm.create_time_series(
            self.client, self._types, self.project_id, series, timeout=_GCM_TIMEOUT_SECONDS
        )

    def cumulative(self, details: Mapping[str, Any], slice_efficiency: bool) -> None:
        """The library's ``_upload_goodput_metrics_to_gcm``."""
        out: list[tuple[str, float, str, dict[str, str]]] = []
        for gt, value in details[MetricType.GOODPUT_TIME.value].items():
            if gt.name not in ACTIVITY_EXCLUSION_LIST:
                out.append(
                    ("goodput_time", float(value), gcm.DOUBLE, self._labels(goodput_source=gt.name))
                )
        for source, value in _flatten_badput(details[MetricType.BADPUT_TIME.value]):
            if source not in ACTIVITY_EXCLUSION_LIST:
                out.append(("badput_time", value, gcm.DOUBLE, self._labels(badput_source=source)))
        cumulative = MonitoringWindowType.CUMULATIVE.value
        disruptions = int(details[MetricType.DISRUPTION_COUNT.value])
        out.append(("disruptions", disruptions, gcm.INT, self._labels(window_type=cumulative)))
        max_step = int(details[MetricType.MAX_PRODUCTIVE_STEP.value])
        out.append(("max_productive_steps", max_step, gcm.INT, self._labels()))
        deviations = details.get(MetricType.STEP_TIME_DEVIATION.value)
        if deviations:
            value = goodput_utils.compute_step_deviation_from_baseline(deviations)
            out.append(("step_time_deviation", value, gcm.DOUBLE, self._labels()))
        elapsed = float(details[MetricType.TOTAL_ELAPSED_TIME.value])
        out.append(
            ("total_elapsed_time", elapsed, gcm.DOUBLE, self._labels(window_type=cumulative))
        )
        ideal = float(details[MetricType.IDEAL_STEP_TIME.value])
        out.append(("performance", ideal, gcm.DOUBLE, {}))
        if slice_efficiency:
            labels = self._labels(window_type="CUMULATIVE", rolling_window_size="0")
            for key in _SLICE_EFFICIENCY:
                if details.get(key) is not None:
                    out.append((key, float(details[key]), gcm.DOUBLE, labels))
        self._send(out)

    def step_deviation(self, deviations: Mapping[int, float]) -> None:
        """The library's ``_send_step_deviation_metric_to_gcp``: ``performance`` = the mean
        step deviation."""
        if not deviations:
            return
        mean = sum(deviations.values()) / len(deviations)
        if not math.isnan(mean):
            self._send([("performance", float(mean), gcm.DOUBLE, {})])

    def interval(self, details: Mapping[str, Any], slice_efficiency: bool) -> None:
        """The library's ``_upload_interval_goodput_metrics_to_gcm``."""
        size = details.get(IntervalMetricType.INTERVAL_SIZE.value)
        if not size:
            logger.warning("Interval size not found in metric details. Skipping upload.")
            return
        window = str(size)
        out: list[tuple[str, float, str, dict[str, str]]] = []
        for gt, value in details.get(IntervalMetricType.INTERVAL_GOODPUT.value, {}).items():
            if gt.name not in ACTIVITY_EXCLUSION_LIST:
                labels = self._labels(goodput_source=gt.name, rolling_window_size=window)
                out.append(("interval_goodput", float(value), gcm.DOUBLE, labels))
        badput = details.get(IntervalMetricType.INTERVAL_BADPUT.value, {})
        for source, value in _flatten_badput(badput):
            if source not in ACTIVITY_EXCLUSION_LIST:
                labels = self._labels(badput_source=source, rolling_window_size=window)
                out.append(("interval_badput", value, gcm.DOUBLE, labels))
        if slice_efficiency:
            labels = self._labels(rolling_window_size=window, window_type="INTERVAL")
            for key in _SLICE_EFFICIENCY:
                if details.get(key) is not None:
                    out.append((key, float(details[key]), gcm.DOUBLE, labels))
        self._send(out)


# ------------------------------------------------------------------------ uploaders


class _Session(Protocol):
    """One run of an uploader: its cycles and its resources (a TensorBoard writer)."""

    def cycle(self, final: bool) -> None: ...

    def close(self) -> None: ...


class _GoodputSession:
    """Cumulative goodput: TensorBoard and ``workload/*`` cumulative series."""

    def __init__(self, mon: GoodputMonitor, interval: float) -> None:
        self._mon = mon
        job = mon._job_name
        self._tb = _TensorBoard(mon._tbx, mon._logdir, "goodput")
        self._query = _Guard("goodput query", job, interval, backoff=False)
        self._tb_guard = _Guard("goodput upload to TensorBoard", job, interval, backoff=True)
        self._gcm_guard = _Guard("goodput upload to Cloud Monitoring", job, interval, backoff=True)

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
        self._tb = _TensorBoard(mon._tbx, mon._logdir, "step_deviation")
        self._query = _Guard("step deviation query", job, interval, backoff=False)
        self._tb_guard = _Guard("step deviation upload to TensorBoard", job, interval, backoff=True)
        self._gcm_guard = _Guard(
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
        self._query = _Guard("rolling window query", job, interval, backoff=False)
        self._gcm_guard = _Guard(
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


class _Uploader:
    """One of the monitor's uploaders: badput's periodic worker running a session's cycles
    every ``interval`` seconds (the first one ``interval`` after the start, as in the
    library), then a final cycle when stopped with a final flush."""

    def __init__(
        self, name: str, job: str, interval: float, new_session: Callable[[], _Session]
    ) -> None:
        self.name = name
        self.job = job
        self.interval = interval
        self.new_session = new_session
        self.cycles = 0  # cycles run (final flushes included)
        self._lock = threading.Lock()
        self._worker: PeriodicWorker | None = None

    @property
    def running(self) -> bool:
        worker = self._worker
        return worker is not None and worker.running

    def start(self) -> bool:
        """Start the thread; ``False`` when it is already running."""
        with self._lock:
            if self.running:
                return False
            sessions: list[_Session] = []  # opened on the worker's thread

            def tick() -> None:
                if sessions:
                    self._cycle(sessions[0], final=False)

            def finish(final: bool) -> None:
                try:
                    if final and sessions:
                        self._cycle(sessions[0], final=True)
                finally:
                    for session in sessions:
                        with suppress(Exception):
                            session.close()

            worker = PeriodicWorker(
                f"badput-goodput-{self.name}",
                self.interval,
                tick,
                finish=finish,
                tick_at_start=False,
                setup=lambda: sessions.append(self.new_session()),
            )
            worker.start()
            self._worker = worker
        return True

    def signal(self, final_flush: bool) -> PeriodicWorker | None:
        """Ask the thread to stop (after a final cycle if ``final_flush``); its worker, or
        ``None`` when it was not started."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.signal(final_flush)
        return worker

    def _cycle(self, session: _Session, *, final: bool) -> None:
        session.cycle(final)
        self.cycles += 1

    def one_off(self) -> None:
        """The final query and upload of an uploader that never ran (in the caller's
        helper thread)."""
        session: _Session | None = None
        try:
            session = self.new_session()
            self._cycle(session, final=True)
        except Exception as exc:
            logger.warning("badput: final %s upload of job %r failed: %r", self.name, self.job, exc)
        finally:
            if session is not None:
                with suppress(Exception):
                    session.close()


def _join(thread: threading.Thread, timeout: float | None, what: str) -> bool:
    thread.join(timeout)
    if thread.is_alive():
        logger.warning(
            "%s did not complete within %s seconds and will be abandoned to avoid blocking"
            " workload shutdown. The job may be missing its final goodput metrics upload.",
            what,
            timeout,
        )
        return False
    return True


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
        self._uploaders = {
            "goodput": _Uploader(
                "goodput", job_name, upload, lambda: _GoodputSession(self, upload)
            ),
            "step_deviation": _Uploader(
                "step_deviation",
                job_name,
                step_interval,
                lambda: _StepDeviationSession(self, step_interval),
            ),
            "rolling_window": _Uploader(
                "rolling_window",
                job_name,
                upload,
                lambda: _WindowSession(self, upload, self._windows),
            ),
            "interval": _Uploader(
                "interval",
                job_name,
                upload,
                lambda: _WindowSession(self, upload, self._interval_windows),
            ),
        }
        self._initialized = True
        _lifecycle.track(_LIVE_GROUP, self)

    def _open_cloud_monitoring(self, client: Any) -> _CloudMonitoring | None:
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
                return _CloudMonitoring(opts, self._job_name, client, self._clock)
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
                _join(run.thread, timeout, what)
            elif not skip:
                # Never started: a one-off query and upload, bounded the same way.
                helper = threading.Thread(
                    target=uploader.one_off, name=f"badput-goodput-{name}-final", daemon=True
                )
                helper.start()
                _join(helper, self._final_flush_timeout_seconds, what)
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
                _join(run.thread, left, f"Final goodput upload at exit for job: {self._job_name}")

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
