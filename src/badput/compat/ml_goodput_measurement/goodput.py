"""``ml_goodput_measurement.goodput``: the recorder and calculator, on badput's store and engine.

Drop-in for ml-goodput-measurement 0.2.x: same classes, constructor parameters (names,
order, defaults), methods and return shapes. What changes underneath:

- :class:`GoodputRecorder` writes badput events to a badput store (``store=``, else
  ``$BADPUT_STORE``, else ``./badput-runs``), keyed by ``job_name``; no Cloud Logging, no
  credentials. Each ``record_*`` call builds exactly the payload the library would send
  and converts it with the same decoder that reads the library's own logs
  (:mod:`badput.formats.mgm`), so a log written here and a log imported from Cloud Logging give
  the same numbers.
- :class:`GoodputCalculator` reads that store incrementally and asks badput's engine for
  the partition of the job's time (ACCOUNTING.md), then maps it onto the library's
  buckets (``docs/compat.md``): observed goodput (slow steps count as productive), the
  first step of a segment beyond the *mean* of its other steps as PROGRAM_STARTUP, the
  library's ideal step time (mean within median + 3 x MAD) for step deviation. Where the
  library double counts or misses a restart, the engine's answer stands; docs/compat.md
  lists each such difference with a worked number.
"""

from __future__ import annotations

import datetime
import functools
import logging
import operator
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, cast

from badput.compat.ml_goodput_measurement import exclusion_utils, goodput_utils
from badput.compat.ml_goodput_measurement._jobview import JobView
from badput.compat.ml_goodput_measurement._mapping import (
    LibraryBuckets,
    checkpoint_time,
    subtract,
)
from badput.compat.ml_goodput_measurement.checkpoint_badput_calculator import (
    CheckpointBadputCalculator,
    CheckpointLoggerOptions,
    add_logged_entries,
    entries_from_events,
)
from badput.compat.ml_goodput_measurement.goodput_cache import GoodputCache
from badput.engine import Accountant, ProgramGoodput, Report
from badput.events import Event, Kind
from badput.formats import mgm as pl
from badput.recorder import Recorder, resolve_attempt
from badput.store import EventStore, open_store

__all__ = [
    "BadputType",
    "CheckpointBadputCalculator",
    "CheckpointLoggerOptions",
    "GoodputCache",
    "GoodputCalculator",
    "GoodputRecorder",
    "GoodputType",
    "IntervalMetricType",
    "IntervalWorkloadMetricDetails",
    "MetricType",
    "StepInfo",
    "UnproductiveTimeDict",
    "WorkloadMetricDetails",
    "compute_ideal_step_time",
    "get_extra_time_from_anomalous_steps",
    "get_timestamp_from_log_entry",
]

logger = logging.getLogger(__name__)
_F = TypeVar("_F", bound=Callable[..., None])

BadputType = goodput_utils.BadputType
GoodputType = goodput_utils.GoodputType
GoodputInfo = goodput_utils.GoodputInfo
MetricType = goodput_utils.MetricType
IntervalMetricType = goodput_utils.IntervalMetricType
StepInfo = goodput_utils.StepInfo
WorkloadMetricDetails = goodput_utils.WorkloadMetricDetails
IntervalWorkloadMetricDetails = goodput_utils.IntervalWorkloadMetricDetails
UnproductiveTimeDict = dict[goodput_utils.BadputType, float | dict[str, float]]
compute_ideal_step_time = goodput_utils.compute_ideal_step_time
get_extra_time_from_anomalous_steps = goodput_utils.get_extra_time_from_anomalous_steps
get_timestamp_from_log_entry = goodput_utils.get_timestamp_from_log_entry

# The library's payload keys under its own (module-private) names: code written against
# the library reads log entries with them (``goodput._JOB_NAME``).
_JOB_NAME: Final = pl.JOB_NAME
_STEP_COUNT: Final = pl.STEP_COUNT
_STEP_START_TIME: Final = pl.STEP_START_TIME
_JOB_START_TIME: Final = pl.JOB_START_TIME
_JOB_END_TIME: Final = pl.JOB_END_TIME
_TPU_INIT_START_TIME: Final = pl.TPU_INIT_START_TIME
_TPU_INIT_END_TIME: Final = pl.TPU_INIT_END_TIME
_TRAINING_PREPARATION_START_TIME: Final = pl.TRAINING_PREP_START_TIME
_TRAINING_PREPARATION_END_TIME: Final = pl.TRAINING_PREP_END_TIME
_DATA_LOADING_START_TIME: Final = pl.DATA_LOADING_START_TIME
_DATA_LOADING_END_TIME: Final = pl.DATA_LOADING_END_TIME
_CUSTOM_BADPUT_EVENT_TYPE: Final = pl.CUSTOM_BADPUT_EVENT_TYPE
_CUSTOM_BADPUT_EVENT_START_TIME: Final = pl.CUSTOM_BADPUT_EVENT_START_TIME
_CUSTOM_BADPUT_EVENT_END_TIME: Final = pl.CUSTOM_BADPUT_EVENT_END_TIME

_ZERO_TIME: Final = (
    "Total job time is zero, Goodput cannot be calculated. Please fix the logging entries."
)


def _now_datetime() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _posix(value: datetime.datetime) -> float:
    """POSIX seconds of a recorded time. A naive datetime is local time, as
    ``datetime.timestamp()`` (which the library calls) takes it: the library's own examples
    pass ``datetime.datetime.now()``."""
    return value.timestamp()


def _posix_utc(value: datetime.datetime) -> float:
    """POSIX seconds of a query bound; a naive datetime is UTC, as the library's Cloud
    Logging filter takes it."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return value.timestamp()


def _never_raises(method: _F) -> _F:
    """Recorder methods run inside training loops: log a bad call, never raise it."""

    @functools.wraps(method)
    def wrapper(self: GoodputRecorder, *args: Any, **kwargs: Any) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception as exc:
            logger.warning("badput: %s not recorded: %r", method.__name__, exc)

    return cast("_F", wrapper)


class GoodputRecorder:
    """Records a job's goodput events (ml-goodput-measurement's recorder API).

    Args:
        job_name: the job (badput's ``job``).
        logger_name: kept as :attr:`logger_name` (the library's Cloud Logging log name);
            it does not choose where events go: ``store`` does.
        logging_enabled: record only where this is ``True`` (e.g. worker 0), as in the
            library; elsewhere every method is a no-op.
        cloud_logger: accepted for signature compatibility and ignored.
        background_grace_period_s, background_batch_size, background_max_latency_s:
            accepted for compatibility; badput's writer thread flushes every 0.5 s and
            at once after job and checkpoint events.
        store: badput extension: an ``EventStore`` or URI (default ``$BADPUT_STORE``, else
            ``./badput-runs``).

    Each job start (``record_job_start_time``) opens a new attempt: its id is taken from
    the environment like badput's own recorder (TORCHELASTIC_RESTART_COUNT, ...), or is
    fresh per process, with ``.<n>`` appended for later starts in the same process.
    Like the library, the recorder writes no heartbeats.
    """

    def __init__(
        self,
        job_name: str,
        logger_name: str,
        logging_enabled: bool = False,
        cloud_logger: Any = None,
        *,
        background_grace_period_s: float = 5.0,
        background_batch_size: int = 100,
        background_max_latency_s: float = 2.0,
        store: EventStore | str | os.PathLike[str] | None = None,
    ) -> None:
        self.job_name = job_name
        self.logger_name = logger_name
        self._enabled = bool(logging_enabled)
        self._lock = threading.Lock()
        self._recorders: dict[str | int | None, Recorder] = {}
        # The library writes each payload to cloud_logger.write_cloud_logging_entry; a
        # caller that passes its own logger (a test double, a mirror) still gets them.
        self._cloud_logger = (
            cloud_logger
            if callable(getattr(cloud_logger, "write_cloud_logging_entry", None))
            else None
        )
        if not self._enabled:
            logger.info("Logging is disabled for this process.")
            self._store: EventStore | None = None
            return
        self._store = open_store(store)
        self._decoder = pl.PayloadDecoder(job_name, attempt=resolve_attempt(None))
        _live_recorders.add(self)

    @property
    def store(self) -> EventStore | None:
        """Where events go (``None`` when logging is disabled)."""
        return self._store

    def _write(
        self,
        payload: dict[str, Any],
        timestamp: float | None = None,
        work: dict[str, Any] | None = None,
    ) -> None:
        """Record the events of one payload (``work``: the step's tokens and samples, on
        its ``step_start``); never raises into the training loop."""
        if not self._enabled:
            return
        try:
            with self._lock:
                events = self._decoder.decode(payload, timestamp)
                for event in events:
                    fields = _fields(event)
                    if work and event.kind == Kind.STEP_START:
                        fields.update(work)
                    self._recorder(event.attempt).record(event.kind, ts=event.ts, **fields)
        except Exception as exc:  # a bad timestamp from the caller, say
            logger.warning("badput: goodput event %r not recorded: %s", payload, exc)
            return
        if self._cloud_logger is not None:
            try:
                self._cloud_logger.write_cloud_logging_entry(payload)
            except Exception as exc:  # the caller's logger must not break the loop either
                logger.warning("badput: cloud_logger failed on %r: %s", payload, exc)

    def _recorder(self, attempt: str | int | None) -> Recorder:
        rec = self._recorders.get(attempt)
        if rec is None:
            for old in self._recorders.values():
                old.close()  # the previous attempt is over: flush it
            rec = Recorder(
                self.job_name,
                store=self._store,
                attempt=attempt,
                heartbeat_interval=0,
                enabled=True,
            )
            self._recorders = {attempt: rec}
        return rec

    def flush(self) -> None:
        """Block until everything recorded so far is in the store."""
        with self._lock:
            recorders = list(self._recorders.values())
        for rec in recorders:
            rec.flush()

    def _record_time(self, key: str, when: datetime.datetime | None) -> None:
        if not self._enabled:
            return
        ts = _posix(when) if when is not None else time.time()
        self._write({pl.JOB_NAME: self.job_name, key: ts})

    @_never_raises
    def record_step_start_time(
        self,
        step: int,
        start_time: datetime.datetime | None = None,
        *,
        tokens: int | None = None,
        samples: int | None = None,
    ) -> None:
        """Record the start of training step ``step``. badput extension: the step's
        ``tokens`` and ``samples`` (the job's), for program goodput (the library has no
        such fields; its payload is unchanged)."""
        if not self._enabled:
            return
        ts = _posix(start_time) if start_time is not None else time.time()
        work = {k: v for k, v in (("tokens", tokens), ("samples", samples)) if v is not None}
        payload = {pl.JOB_NAME: self.job_name, pl.STEP_COUNT: step, pl.STEP_START_TIME: ts}
        self._write(payload, None, work)

    @_never_raises
    def record_model(self, **fields: Any) -> None:
        """badput extension (no payload of the library's): the job's model and devices,
        :meth:`badput.Recorder.record_model`'s keywords (``params``, ``layers``,
        ``hidden``, ``seq_len``, ``flops_per_token``, ``devices``, ``device``,
        ``peak_flops``), for program goodput (docs/program-goodput.md)."""
        if not self._enabled:
            return
        with self._lock:
            self._recorder(self._decoder.attempt).record_model(**fields)

    @_never_raises
    def record_checkpoint_progress(self, step: int, checkpoint_start_time: Any) -> None:
        """A no-op in the library; here it records that ``step`` is durably checkpointed
        (``checkpoint_committed``), which badput uses for its at-risk figure."""
        if not self._enabled:
            return
        ts = (
            _posix(checkpoint_start_time)
            if isinstance(checkpoint_start_time, datetime.datetime)
            else float(checkpoint_start_time)
        )
        with self._lock:
            attempt = self._decoder.attempt
            self._recorder(attempt).record(
                Kind.CHECKPOINT_COMMITTED, ts=ts, step=operator.index(step)
            )

    @_never_raises
    def record_job_start_time(self, start_time: datetime.datetime | None = None) -> None:
        """Record the start of the job, or of its restart (a new attempt)."""
        self._record_time(pl.JOB_START_TIME, start_time)

    @_never_raises
    def record_job_end_time(self, end_time: datetime.datetime | None = None) -> None:
        """Record the end of the job (it finished for good)."""
        self._record_time(pl.JOB_END_TIME, end_time)
        self.flush()

    @_never_raises
    def record_tpu_init_start_time(self, start_time: datetime.datetime | None = None) -> None:
        self._record_time(pl.TPU_INIT_START_TIME, start_time)

    @_never_raises
    def record_tpu_init_end_time(self, end_time: datetime.datetime | None = None) -> None:
        self._record_time(pl.TPU_INIT_END_TIME, end_time)

    @_never_raises
    def record_training_preparation_start_time(
        self, start_time: datetime.datetime | None = None
    ) -> None:
        self._record_time(pl.TRAINING_PREP_START_TIME, start_time)

    @_never_raises
    def record_training_preparation_end_time(
        self, end_time: datetime.datetime | None = None
    ) -> None:
        self._record_time(pl.TRAINING_PREP_END_TIME, end_time)

    @_never_raises
    def record_data_loading_start_time(self, start_time: datetime.datetime | None = None) -> None:
        """Data loading starts: blocking before the first step of an attempt, overlapping
        training after it (the library's SYNC / ASYNC)."""
        self._record_time(pl.DATA_LOADING_START_TIME, start_time)

    @_never_raises
    def record_data_loading_end_time(self, end_time: datetime.datetime | None = None) -> None:
        self._record_time(pl.DATA_LOADING_END_TIME, end_time)

    @_never_raises
    def record_custom_badput_event_start_time(
        self,
        start_time: datetime.datetime | None = None,
        custom_badput_event_type: str = "unknown",
    ) -> None:
        """A custom badput event (eval, SDC check, ...) starts; reported per type."""
        self._record_named(
            pl.CUSTOM_BADPUT_EVENT_TYPE,
            custom_badput_event_type,
            pl.CUSTOM_BADPUT_EVENT_START_TIME,
            start_time,
        )

    @_never_raises
    def record_custom_badput_event_end_time(
        self,
        end_time: datetime.datetime | None = None,
        custom_badput_event_type: str = "unknown",
    ) -> None:
        self._record_named(
            pl.CUSTOM_BADPUT_EVENT_TYPE,
            custom_badput_event_type,
            pl.CUSTOM_BADPUT_EVENT_END_TIME,
            end_time,
        )

    def _record_named(
        self, type_key: str, name: str, key: str, when: datetime.datetime | None
    ) -> None:
        if not self._enabled:
            return
        ts = _posix(when) if when is not None else time.time()
        self._write({pl.JOB_NAME: self.job_name, type_key: name, key: ts})

    @_never_raises
    def record_payload(self, payload: Mapping[str, Any], timestamp: float | None = None) -> None:
        """badput extension: record one raw payload in the library's (or Orbax's checkpoint
        logger's) format, e.g. forwarded from Orbax, whose save/restore entries are the
        library's only source of checkpoint time. ``timestamp``: when it was logged."""
        if not self._enabled:
            return
        self._write({pl.JOB_NAME: self.job_name, **payload}, timestamp)

    def close(self) -> None:
        """badput extension: flush and stop the writer threads (also done at exit)."""
        with self._lock:
            recorders, self._recorders = list(self._recorders.values()), {}
        for rec in recorders:
            rec.close()


# This process's enabled recorders: a calculator of the same job flushes them before it
# reads, so that a query in the training process sees what was recorded (not only what
# the writer threads have committed so far).
_live_recorders: weakref.WeakSet[GoodputRecorder] = weakref.WeakSet()


def live_recorder(job_name: str) -> GoodputRecorder | None:
    """An enabled recorder of ``job_name`` in this process, if any (the newest)."""
    found = [r for r in list(_live_recorders) if r.job_name == job_name]
    return found[-1] if found else None


def _flush_live_recorders(job_name: str) -> None:
    for rec in [r for r in list(_live_recorders) if r.job_name == job_name]:
        try:
            rec.flush()
        except Exception as exc:  # a query must still answer from what is stored
            logger.warning("badput: could not flush the recorder of %s: %s", job_name, exc)


def _fields(event: Event) -> dict[str, Any]:
    """The schema fields of a decoded event, for :meth:`Recorder.record`."""
    out: dict[str, Any] = {}
    for name in ("step", "name", "blocking", "status", "active", "total", "available"):
        value = getattr(event, name)
        if value is not None:
            out[name] = value
    return out


class GoodputCalculator:
    """Computes a job's goodput, badput breakdown and step deviation (the library's API).

    Args:
        job_name, logger_name, cloud_logger, using_pathways, max_logs_retention_period,
        gcs_path, cache_dir: as in the library (``cloud_logger``, ``gcs_path``,
            ``cache_dir`` and the retention period are accepted and unused: badput
            reads its own store incrementally and keeps its state in memory).
        store: badput extension: where the recorder wrote (default ``$BADPUT_STORE``,
            else ``./badput-runs``).
        clock: badput extension: the query time source (POSIX seconds), for tests and
            replays of old logs.
    """

    #: The library's breakdown of the engine's partition (the elastic calculator's adds
    #: its three types).
    _buckets_class: type[LibraryBuckets] = LibraryBuckets

    def __init__(
        self,
        job_name: str,
        logger_name: str,
        cloud_logger: Any = None,
        using_pathways: bool = False,
        max_logs_retention_period: datetime.timedelta | None = None,
        gcs_path: str | None = None,
        cache_dir: str = "/tmp",  # the library's default, unused here
        *,
        store: EventStore | str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.job_name = job_name
        self.logger_name = logger_name
        self.using_pathways = using_pathways
        self._clock = clock
        # The library's calculator reads the log it is given, where Orbax writes its
        # checkpoint entries straight: those entries count here too (the job's own events
        # come from the store).
        self._cloud_logger = (
            cloud_logger
            if callable(getattr(cloud_logger, "read_cloud_logging_entries", None))
            else None
        )
        self._view = JobView(
            open_store(store), job_name, functools.partial(_flush_live_recorders, job_name)
        )
        self._buckets = self._buckets_class(self._view)
        self._lock = threading.Lock()
        self._goodput_info: goodput_utils.GoodputInfo | None = None
        self._step_info: goodput_utils.StepInfo | None = None
        self._number_of_interruptions = 0

    # ----------------------------------------------------------------- queries

    def get_job_goodput(
        self,
        include_badput_breakdown: bool = False,
        configured_ideal_step_time: float | None = None,
    ) -> tuple[float, UnproductiveTimeDict, int]:
        """(goodput %, badput breakdown % or ``{}``, last productive step) of the whole job.

        Raises ``ValueError`` when the job has no recorded start (total time zero), as
        the library does.
        """
        with self._lock:
            report, productive, seconds = self._job_partition()
            total = report.total_seconds
            self._remember(report, productive, seconds, total, 0.0, configured_ideal_step_time)
            breakdown = (
                self._buckets.percentages(seconds, total) if include_badput_breakdown else {}
            )
            return productive / total * 100.0, breakdown, _last_productive_step(report)

    def get_job_goodput_with_exclusions(
        self,
        exclusion_intervals: list[tuple[datetime.datetime, datetime.datetime]],
        include_badput_breakdown: bool = False,
        configured_ideal_step_time: float | None = None,
    ) -> tuple[float, UnproductiveTimeDict, int, float]:
        """(goodput %, breakdown % or ``{}``, last productive step, excluded seconds) of
        the job with ``exclusion_intervals`` (UTC ``(start, end)`` pairs) left out.

        The library's exclusion rule: excluded time is the part of the intervals that the
        log accounts for (steps, recorded intervals, recovery); untracked time inside
        them (the library's OTHER) is not excluded and stays in OTHER. Each bucket loses
        its share of the excluded time, and percentages are of the job's time less the
        excluded time. Intervals not in UTC, or empty, are ignored (logged).
        """
        windows = exclusion_utils.normalize_intervals(exclusion_intervals)
        with self._lock:
            report, productive, seconds = self._job_partition()
            excluded = 0.0
            for lo, hi in windows:
                a, b = max(lo, report.start), min(hi, report.end)
                if a >= b:
                    continue
                _, w_productive, w_seconds = self._buckets.partition(
                    self._view.accountant, self._view.step_starts, report.end, (a, b)
                )
                untracked = w_seconds.get(BadputType.OTHER, 0.0)
                excluded += (b - a) - (untracked if isinstance(untracked, float) else 0.0)
                productive -= w_productive
                subtract(seconds, w_seconds, keep=(BadputType.OTHER,))
            total = max(0.0, report.total_seconds - excluded)
            last_step = _last_productive_step(report)
            if total <= 0.0:
                return 0.0, {}, last_step, excluded
            self._remember(report, productive, seconds, total, excluded, configured_ideal_step_time)
            breakdown = (
                self._buckets.percentages(seconds, total) if include_badput_breakdown else {}
            )
            return productive / total * 100.0, breakdown, last_step, excluded

    def _job_partition(self) -> tuple[Report, float, dict[goodput_utils.BadputType, Any]]:
        """The whole job's partition with the library's definitions (lock held)."""
        now = self._clock()
        view = self._view
        view.update()
        if view.job_start is None:
            raise ValueError(_ZERO_TIME)
        if view.job_end is not None:
            # A job that has ended runs from its start to its end whatever the query
            # clock says (hosts with skewed clocks, back-filled timestamps).
            now = max(now, view.last_time)
        report, productive, seconds = self._buckets.partition(
            view.accountant, view.step_starts, now, None
        )
        if report.total_seconds <= 0.0:
            raise ValueError(_ZERO_TIME)
        # Checkpoint time as the library counts it: from Orbax's entries.
        entries = entries_from_events(view.checkpoints)
        if self._cloud_logger is not None:
            entries = add_logged_entries(entries, self._logged_entries())
        return report, checkpoint_time(entries, productive, seconds), seconds

    def _logged_entries(self) -> list[Mapping[str, Any]]:
        """The payloads of the ``cloud_logger`` given (read whole: it is a test double or
        a mirror of the job's log); none if reading fails (logged)."""
        assert self._cloud_logger is not None
        try:
            result = self._cloud_logger.read_cloud_logging_entries()
        except Exception as exc:  # the store still answers
            logger.warning("badput: could not read the cloud_logger given: %r", exc)
            return []
        if isinstance(result, tuple):  # (payloads, last entry info), as the library's
            result = result[0] if result else []
        return [p for p in result if isinstance(p, Mapping)] if isinstance(result, list) else []

    def _remember(
        self,
        report: Report,
        productive: float,
        seconds: dict[goodput_utils.BadputType, Any],
        total: float,
        excluded: float,
        configured_ideal_step_time: float | None,
    ) -> None:
        """Keep the last result for get_job_goodput_details (lock held)."""
        self._number_of_interruptions = max(0, len(report.attempts) - 1)
        self._goodput_info = goodput_utils.GoodputInfo(
            total_productive_time=productive,
            total_elapsed_time=total,
            total_unproductive_time=seconds,
            max_productive_step=_last_productive_step(report),
            last_recorded_step=report.steps.last or 0,
            last_updated_timestamp=_now_datetime(),
            number_of_disruptions=self._number_of_interruptions,
            total_excluded_time=excluded,
        )
        try:
            self._step_info = self._step_deviation(configured_ideal_step_time)
        except ValueError as exc:
            logger.info("Failed to compute step information: %s", exc)

    def get_job_goodput_interval(
        self, interval_start: datetime.datetime, interval_end: datetime.datetime
    ) -> tuple[float, UnproductiveTimeDict, int, float, int]:
        """(goodput %, breakdown %, last productive step, interval seconds, disruptions)
        of the window, clipped as the library clips it: to the events inside it."""
        if interval_start is None or interval_end is None:
            raise ValueError(
                "Start and end times are required to get log entries from an interval window."
            )
        with self._lock:
            view = self._view
            view.update()
            lo, hi = _posix_utc(interval_start), _posix_utc(interval_end)
            clipped = view.clip(lo, hi)
            if clipped is None:
                raise ValueError(
                    f"No log entries found within the interval window between {interval_start}"
                    f" and {interval_end}."
                )
            a, b = clipped
            if a >= b:
                raise ValueError(
                    "Start time is on or after end time, cannot compute total job time."
                )
            # The library computes a window from the window's own log entries: steps a
            # later restart redid are not wasted in it. So does this view.
            own = Accountant(view.job)
            own.ingest_events(view.events_in(lo, hi))
            steps = view.step_starts.between(lo, hi)
            # The window is its own entries: it ends at its last one, whatever the clock.
            report, productive, seconds = self._buckets.partition(own, steps, b, (a, b))
            total = b - a
            disruptions = sum(1 for att in report.attempts[1:] if a <= att.start <= b)
            return (
                productive / total * 100.0,
                self._buckets.percentages(seconds, total),
                view.last_step_in(lo, hi, ended=report.end_reason == "job_end"),
                total,
                disruptions,
            )

    def get_step_deviation(
        self, configured_ideal_step_time: float | None = None
    ) -> dict[int, float]:
        """{step: |step time - ideal step time|} with the library's ideal step time rule
        (mean of the step times within median + 3 x MAD) unless one is configured."""
        with self._lock:
            self._view.update()
            self._step_info = self._step_deviation(configured_ideal_step_time)
            return self._step_info.step_deviations

    def get_job_goodput_details(self) -> goodput_utils.WorkloadMetricDetails:
        """The last cumulative result in seconds (what the monitor sends to GCM)."""
        with self._lock:
            info, step = self._goodput_info, self._step_info
        if info is None:
            logger.warning("Goodput information unavailable and will not be uploaded to GCM")
            return {
                "goodput_time": {},
                "badput_time": {},
                "max_productive_step": 0,
                "total_elapsed_time": 0.0,
                "disruption_count": 0,
                "step_time_deviation": {},
                "ideal_step_time": 0.0,
                "total_excluded_time": 0.0,
            }
        return {
            "goodput_time": {GoodputType.TOTAL: info.total_productive_time},
            "badput_time": info.total_unproductive_time,
            "max_productive_step": info.max_productive_step,
            "total_elapsed_time": info.total_elapsed_time,
            "disruption_count": info.number_of_disruptions,
            "step_time_deviation": step.step_deviations if step else {},
            "ideal_step_time": step.ideal_step_time if step and step.ideal_step_time else 0.0,
            "total_excluded_time": info.total_excluded_time,
        }

    def get_interval_metric_details(
        self, interval_start: datetime.datetime, interval_end: datetime.datetime
    ) -> goodput_utils.IntervalWorkloadMetricDetails:
        """Interval goodput and badput (%) and the interval's size, for the monitor."""
        size = int((interval_end - interval_start).total_seconds())
        try:
            goodput, breakdown, _, _, _ = self.get_job_goodput_interval(
                interval_start, interval_end
            )
        except ValueError as exc:
            logger.warning("Failed to get interval metric details: %s", exc)
            return {"interval_goodput": {}, "interval_badput": {}, "interval_size": size}
        return {
            "interval_goodput": {GoodputType.TOTAL: goodput},
            "interval_badput": breakdown,
            "interval_size": size,
        }

    def get_program_goodput(
        self, peak: float | None = None, devices: int | None = None
    ) -> ProgramGoodput | None:
        """badput extension: the job's tokens, MFU and MPG (:func:`program_of`)."""
        with self._lock:
            return program_of(self._view, self._clock(), peak, devices)

    def sync_to_gcs(self) -> None:
        """The library syncs its on-disk cache to GCS; badput keeps no such cache."""

    def _step_deviation(self, configured: float | None) -> goodput_utils.StepInfo:
        """The library's step times: between consecutive step numbers' starts, the latest
        occurrence of a step winning; deviations from the ideal step time."""
        times: dict[int, float] = {}
        prev: tuple[float, int] | None = None
        for ts, step in self._view.step_starts:
            if prev is not None and step == prev[1] + 1:
                times[prev[1]] = ts - prev[0]
            prev = (ts, step)
        if not times:
            raise ValueError("No step times available and no previous step deviations found.")
        ideal = (
            configured if configured is not None else compute_ideal_step_time(list(times.values()))
        )
        if not ideal:
            raise ValueError("No ideal step time available and no previous step deviations found.")
        return goodput_utils.StepInfo(
            ideal_step_time=ideal,
            step_deviations={step: abs(t - ideal) for step, t in times.items()},
        )


def program_of(
    view: JobView, now: float, peak_flops: float | None, devices: int | None
) -> ProgramGoodput | None:
    """The library reports no tokens, FLOPs or MFU: the job's tokens, samples, MFU and ML
    Productivity Goodput from badput's own partition as of ``now`` (docs/program-goodput.md),
    None when the log records no step work and no model. ``peak_flops`` (one device's
    FLOP/s) and ``devices`` override the log's, for this query only."""
    view.update()
    if view.job_start is None:
        raise ValueError(_ZERO_TIME)
    if view.job_end is not None:
        now = max(now, view.last_time)
    accountant = view.accountant
    kept = accountant.peak_flops, accountant.devices
    accountant.peak_flops, accountant.devices = peak_flops, devices
    try:
        return accountant.report(now=now, ranks=False).program
    finally:
        accountant.peak_flops, accountant.devices = kept


def _last_productive_step(report: Report) -> int:
    """The last step known complete: the last recorded one if the job ended, else the one
    before it (the library's max productive step)."""
    last = report.steps.last
    if last is None:
        return 0
    return last if report.end_reason == "job_end" else max(last - 1, 0)
