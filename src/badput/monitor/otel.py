"""OpenTelemetry exporter: observable gauges (and one counter) read from the latest snapshot.

``pip install 'badput[otel]'``. The gauges are *observable*: ``export`` only
stores the snapshot, and the OpenTelemetry SDK reads it whenever its metric
reader collects (a periodic OTLP push, a Prometheus scrape, a test's
``InMemoryMetricReader``). So ``export`` never blocks on the network.

Gauges (every point but ``badput.up``'s carries the attribute ``job``):

=================================  ====  ============================================
name                               unit  value (extra attributes)
=================================  ====  ============================================
``badput.goodput``                 1     goodput, a fraction
``badput.observed_goodput``        1     productive + slowdown, a fraction
``badput.seconds``                 s     seconds per bucket (``bucket``)
``badput.elapsed``                 s     the job's total time so far
``badput.disruptions``             1     restarts so far (an observable counter: a sum)
``badput.last_step``               1     the last step reached
``badput.ideal_step_time``         s     the ideal step time
``badput.step_time_deviation``     s     the reference library's deviation statistic
``badput.at_risk``                 s     kept step time after the newest checkpoint
``badput.window.goodput``          1     goodput of a rolling window (``window``)
``badput.window.observed_goodput`` 1     observed goodput of a window (``window``)
``badput.window.seconds``          s     seconds per bucket in a window (``window``, ``bucket``)
``badput.window.elapsed``          s     the window's length, clipped to the job
``badput.grouped_buckets``         1     named buckets counted in ``custom:(other)``...
``badput.up``                      1     1 once a snapshot was exported, 0 before (no ``job``)
``badput.program.*``               1     program goodput (docs/program-goodput.md), each
                                         only when computed: ``tokens_per_second`` and
                                         ``productive_tokens_per_second`` (``{token}/s``),
                                         ``mfu``, ``scheduling_goodput``, ``runtime_goodput``,
                                         ``program_goodput``, ``mpg``
``badput.stalled``                 1     1 while no rank makes progress (docs/ranks.md)
``badput.stall_seconds``           s     how long (0 when not stalled)
``badput.stragglers``              1     ranks below the straggler score threshold
``badput.straggler.score``         1     each straggler's lower score (``rank``, ``section``)
=================================  ====  ============================================

``window`` is the window length as ``"<seconds>s"`` (``"60s"``, ``"3600s"``). A
bucket once seen keeps being reported (as 0 when empty) so a series does not
vanish from dashboards; the same for a window's buckets. At most
:data:`~badput.engine.MAX_NAMED_BUCKETS` named buckets (``custom:<name>``...) have
points of their own; the others are added into ``custom:(other)`` and
``elastic_wait:(other)`` (:class:`~badput.monitor._base.BucketSeries`).
"""

from __future__ import annotations

import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from badput import __version__
from badput.engine import Report
from badput.monitor._base import BucketSeries, Snapshot, Tally
from badput.monitor._rankmetrics import stall_state
from badput.monitor._vocab import METRICS, PROGRAM_METRICS, program_values, window_label
from badput.runtime.optional import import_optional

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

__all__ = ["OpenTelemetryExporter", "probe_collector", "window_label"]

_EXTRA = "otel"


class _JobState:
    """The latest snapshot of one job and its bucket series (bounded, stable)."""

    __slots__ = ("buckets", "disruptions", "grouped", "series", "snapshot", "tally", "windows")

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.series = BucketSeries()
        self.tally = Tally()  # the counter: restarts seen, never fewer
        self.disruptions = 0
        self.buckets: list[tuple[str, float]] = []
        self.windows: dict[float, list[tuple[str, float]]] = {}
        self.grouped = 0

    def update(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.series.update(snapshot)
        # new lists each time: a collection reads them without the lock
        self.buckets = self.series.cumulative()
        self.windows = {w: self.series.window(w) for w in snapshot.windows}
        self.grouped = self.series.grouped
        self.tally.update(snapshot)
        self.disruptions = self.tally.disruptions


class OpenTelemetryExporter:
    """Publishes snapshots as OpenTelemetry observable gauges.

    - ``meter_provider``: use this provider (the caller owns it: flush and shut it
      down yourself; ``close`` only stops reporting).
    - else ``endpoint`` (``http://collector:4318/v1/metrics``): build an SDK
      ``MeterProvider`` that pushes OTLP/HTTP protobuf every ``export_interval``
      seconds (the SDK default, 60 s, when ``None``) with ``headers``; each push
      times out after ``timeout`` seconds. The exporter owns that provider and
      shuts it down (a final push) in ``close``.
    - else the global provider (``opentelemetry.metrics.get_meter_provider()``),
      as configured by the application or by ``opentelemetry-instrument``.

    Several jobs may share one exporter: each job's latest snapshot is reported.
    """

    name = "otel"

    def __init__(
        self,
        *,
        meter_provider: MeterProvider | None = None,
        endpoint: str | None = None,
        export_interval: float | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        metrics = import_optional("opentelemetry.metrics", _EXTRA)
        self._lock = threading.Lock()
        self._jobs: dict[str, _JobState] = {}
        self._closed = False
        self._timeout = timeout
        self._owned: Any = None  # an SDK MeterProvider we built (untyped: lazily imported)
        self._pushes: _PushBook | None = None
        if meter_provider is not None:
            provider: MeterProvider = meter_provider
        elif endpoint is not None:
            self._pushes = _PushBook(endpoint)
            self._owned = _otlp_provider(endpoint, export_interval, headers, timeout, self._pushes)
            provider = self._owned
        else:
            provider = metrics.get_meter_provider()
        self.meter_provider = provider
        meter = provider.get_meter("badput", __version__)
        callbacks: dict[str, Callable[[CallbackOptions], Iterable[Observation]]] = {
            "goodput": self._goodput,
            "observed_goodput": self._observed,
            "seconds": self._seconds,
            "elapsed": self._elapsed,
            "last_step": self._last_step,
            "ideal_step_time": self._ideal,
            "step_time_deviation": self._deviation,
            "at_risk": self._at_risk,
            "window.goodput": self._w_goodput,
            "window.observed_goodput": self._w_observed,
            "window.seconds": self._w_sec,
            "window.elapsed": self._w_elapsed,
            "grouped_buckets": self._grouped,
            "cost": self._cost,
            "badput_cost_per_day": self._per_day,
            "window.badput_cost_per_day": self._w_per_day,
            "up": self._up,
        }
        gauges = [
            (METRICS[key].otel, METRICS[key].unit, METRICS[key].description, callback)
            for key, callback in callbacks.items()
        ]
        gauges += [  # program goodput: a point per job whose figure is computed
            (METRICS[key].otel, METRICS[key].unit, METRICS[key].description, self._program(key))
            for key in PROGRAM_METRICS.values()
        ]
        gauges += [  # the per-rank metrics (not shared with the other exporters)
            ("badput.stalled", "1", "1 while no rank makes progress", self._stalled),
            ("badput.stall_seconds", "s", "Seconds without progress", self._stall_seconds),
            ("badput.stragglers", "1", "Ranks below the straggler threshold", self._stragglers),
            ("badput.straggler.score", "1", "A straggler's lower score", self._straggler_score),
        ]
        self._observation: Any = metrics.Observation  # the class, bound once
        for gname, unit, description, callback in gauges:
            meter.create_observable_gauge(
                gname, callbacks=[callback], unit=unit, description=description
            )
        d = METRICS["disruptions"]  # restarts only add up: a cumulative, monotonic sum
        meter.create_observable_counter(
            d.otel, callbacks=[self._disruptions], unit=d.unit, description=d.description
        )

    # -- the Exporter protocol -------------------------------------------------

    def export(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` for the next collection (no I/O).

        With an ``endpoint``, pushes happen on the SDK's thread: a push that failed
        since the last call is raised here (``OSError``), so that the monitor
        counts it, backs off and warns once, as for the other exporters.
        """
        pushes = self._pushes
        if pushes is not None:
            failure = pushes.take_failure()
            if failure is not None:
                raise failure
        with self._lock:
            if self._closed:
                return
            state = self._jobs.get(snapshot.job)
            if state is None:
                state = self._jobs[snapshot.job] = _JobState(snapshot)
            state.update(snapshot)

    def close(self) -> None:
        """Stop reporting; shut down (final push) the provider built from ``endpoint``."""
        with self._lock:
            if self._closed:
                return
            owned = self._owned
        if owned is not None:
            # A final collection reads the latest snapshots, then the provider stops.
            owned.shutdown(timeout_millis=self._timeout * 1000)
        with self._lock:
            self._closed = True
            self._jobs.clear()

    def force_flush(self) -> bool:
        """Push now (only for the provider built from ``endpoint``; else ``True``)."""
        if self._owned is None:
            return True
        return bool(self._owned.force_flush(timeout_millis=self._timeout * 1000))

    # -- callbacks (called by the SDK at collection time) ------------------------

    def _states(self) -> list[_JobState]:
        with self._lock:
            return list(self._jobs.values())

    def _obs(self, value: float, job: str, **attrs: str) -> Observation:
        obs: Observation = self._observation(value, {"job": job, **attrs})
        return obs

    def _per_job(self, get: Callable[[Snapshot], float | None]) -> list[Observation]:
        out = []
        for st in self._states():
            value = get(st.snapshot)
            if value is not None:
                out.append(self._obs(value, st.snapshot.job))
        return out

    def _program(self, key: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """The callback of program goodput's metric ``key`` (none where not computed)."""
        return lambda _: self._per_job(lambda s: dict(program_values(s)).get(key))

    def _goodput(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: s.report.goodput)

    def _observed(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: s.report.observed_goodput)

    def _elapsed(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: s.report.total_seconds)

    def _disruptions(self, _: CallbackOptions) -> Iterable[Observation]:
        # a monotonic sum: what this exporter has seen, never the latest report's fewer
        return [self._obs(float(st.disruptions), st.snapshot.job) for st in self._states()]

    def _last_step(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: s.last_step)

    def _ideal(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: s.report.ideal_step_time)

    def _deviation(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: s.step_time.gcm_deviation if s.step_time else None)

    def _at_risk(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: s.report.at_risk_seconds)

    def _seconds(self, _: CallbackOptions) -> Iterable[Observation]:
        out = []
        for st in self._states():
            for bucket, value in st.buckets:
                out.append(self._obs(value, st.snapshot.job, bucket=bucket))
        return out

    def _cost(self, _: CallbackOptions) -> Iterable[Observation]:
        out = []
        for st in self._states():
            c = st.snapshot.report.cost
            if c is not None:
                for bucket, value in st.buckets:
                    out.append(self._obs(c.money(value), st.snapshot.job, bucket=bucket))
        return out

    def _per_day(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: s.report.cost.badput_per_day if s.report.cost else None)

    def _w_per_day(self, _: CallbackOptions) -> Iterable[Observation]:
        out = []
        for st in self._states():
            for w, rep in sorted(st.snapshot.windows.items()):
                if rep.cost is not None:
                    label = window_label(w)
                    out.append(self._obs(rep.cost.badput_per_day, st.snapshot.job, window=label))
        return out

    def _grouped(self, _: CallbackOptions) -> Iterable[Observation]:
        return [self._obs(float(st.grouped), st.snapshot.job) for st in self._states()]

    def _up(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            up = 1.0 if self._jobs else 0.0
        obs: Observation = self._observation(up, {})
        return [obs]

    def _per_window(self, get: Callable[[Report], float]) -> list[Observation]:
        out = []
        for st in self._states():
            for w, rep in sorted(st.snapshot.windows.items()):
                out.append(self._obs(get(rep), st.snapshot.job, window=window_label(w)))
        return out

    def _stalled(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: 1.0 if stall_state(s)[0] else 0.0)

    def _stall_seconds(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: stall_state(s)[1])

    def _stragglers(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_job(lambda s: float(len(s.report.stragglers)))

    def _straggler_score(self, _: CallbackOptions) -> Iterable[Observation]:
        out = []
        for st in self._states():
            snap = st.snapshot
            for s in snap.report.stragglers:
                score = min(s.relative_score or 1.0, s.individual_score or 1.0)
                out.append(self._obs(score, snap.job, rank=str(s.rank), section=s.section))
        return out

    def _w_goodput(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_window(lambda r: r.goodput)

    def _w_observed(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_window(lambda r: r.observed_goodput)

    def _w_elapsed(self, _: CallbackOptions) -> Iterable[Observation]:
        return self._per_window(lambda r: r.total_seconds)

    def _w_sec(self, _: CallbackOptions) -> Iterable[Observation]:
        out = []
        for st in self._states():
            windows = st.windows
            for w in sorted(windows):
                label = window_label(w)
                for bucket, value in windows[w]:
                    out.append(self._obs(value, st.snapshot.job, window=label, bucket=bucket))
        return out


class _PushBook:
    """Failures of the SDK's pushes, and their back-off (1, 2, 4... pushes skipped)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self.failures = 0  # pushes that failed
        self.skipped = 0  # pushes not attempted while backing off
        self._streak = 0
        self._skip = 0
        self._pending: OSError | None = None

    def should_skip(self) -> bool:
        with self._lock:
            if self._skip > 0:
                self._skip -= 1
                self.skipped += 1
                return True
            return False

    def failed(self, why: str) -> None:
        with self._lock:
            self.failures += 1
            self._streak += 1
            self._skip = min(2 ** (self._streak - 1), _MAX_SKIPPED_PUSHES)
            if self._pending is None:
                self._pending = OSError(f"OTLP push to {self.endpoint} failed: {why}")

    def succeeded(self) -> None:
        with self._lock:
            self._streak = 0
            self._skip = 0

    def take_failure(self) -> OSError | None:
        with self._lock:
            failure, self._pending = self._pending, None
            return failure


#: Most pushes skipped in a row while the collector keeps failing.
_MAX_SKIPPED_PUSHES = 32


def probe_collector(endpoint: str, timeout: float = 3.0) -> None:
    """Raise ``OSError`` (one line) when nothing accepts connections at ``endpoint``'s
    host and port (``badput monitor --otlp`` checks this before it starts)."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OSError(f"not an OTLP/HTTP URL: {endpoint!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError as exc:
        raise OSError(f"no OTLP collector at {endpoint}: {exc.strerror or exc}") from None


def _otlp_provider(
    endpoint: str,
    export_interval: float | None,
    headers: Mapping[str, str] | None,
    timeout: float,
    pushes: _PushBook,
) -> Any:  # an SDK MeterProvider (lazily imported)
    sdk_metrics = import_optional("opentelemetry.sdk.metrics", _EXTRA)
    sdk_export = import_optional("opentelemetry.sdk.metrics.export", _EXTRA)
    resources = import_optional("opentelemetry.sdk.resources", _EXTRA)
    http_exporter = import_optional(
        "opentelemetry.exporter.otlp.proto.http.metric_exporter", _EXTRA
    )

    base: Any = http_exporter.OTLPMetricExporter

    class CountingExporter(base):  # type: ignore[misc]
        """Counts failed pushes (the SDK only logs them) and backs off."""

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
            if pushes.should_skip():
                return sdk_export.MetricExportResult.FAILURE
            try:
                result = super().export(metrics_data, timeout_millis=timeout_millis, **kw)
            except Exception as exc:
                pushes.failed(f"{type(exc).__name__}: {exc}")
                return sdk_export.MetricExportResult.FAILURE
            if result == sdk_export.MetricExportResult.SUCCESS:
                pushes.succeeded()
            else:
                pushes.failed("the collector refused or did not answer")
            return result

    exporter = CountingExporter(
        endpoint=endpoint, headers=dict(headers) if headers else None, timeout=timeout
    )
    reader = sdk_export.PeriodicExportingMetricReader(
        exporter,
        export_interval_millis=None if export_interval is None else export_interval * 1000,
        export_timeout_millis=timeout * 1000,
    )
    return sdk_metrics.MeterProvider(
        metric_readers=[reader],
        resource=resources.Resource.create({"service.name": "badput"}),
        # close() shuts it down; an atexit hook would shut it down a second time.
        shutdown_on_exit=False,
    )
