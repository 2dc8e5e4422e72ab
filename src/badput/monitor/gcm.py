"""Google Cloud Monitoring exporter, compatible with ml-goodput-measurement's metrics.

``pip install 'badput[gcp]'``. Writes the ``compute.googleapis.com/workload/*``
time series that Google's ml-goodput-measurement library writes, with the same
metric labels and monitored resource, so dashboards and alerts built on that
library keep working when badput does the accounting:

- ``goodput_time`` (double): seconds of observed goodput (productive + slowdown,
  as that library counts slow steps as productive); ``goodput_source="TOTAL"``.
- ``badput_time`` (double): seconds per ``badput_source`` (below).
- ``total_elapsed_time`` (double): seconds; ``window_type="cumulative"``.
- ``max_productive_steps`` (int64): the last step reached.
- ``disruptions`` (int64): restarts so far; ``window_type="cumulative"``.
- ``step_time_deviation`` (double): the reference library's deviation statistic
  (``StepTimeStats.gcm_deviation``), when known.
- ``performance`` (double): the ideal step time, when known; no metric labels.
- ``interval_goodput`` (double): observed goodput of each rolling window, in %;
  ``goodput_source="TOTAL"``, ``rolling_window_size="<seconds>"``.
- ``interval_badput`` (double): % of each rolling window per ``badput_source``;
  ``rolling_window_size``.

Every series but ``performance`` also has ``accelerator_type`` and any extra
``labels`` (``cluster_name``, ...). The monitored resource is
``compute.googleapis.com/Workload`` with ``location``, ``workload_id`` (the job)
and ``replica_id``.

Program goodput (docs/program-goodput.md), which that library does not have, is written
as user-defined metrics ``custom.googleapis.com/badput/program/<figure>`` (double,
labels ``accelerator_type`` and the extra ``labels``): ``tokens_per_second``,
``productive_tokens_per_second``, ``mfu``, ``scheduling_goodput``, ``runtime_goodput``,
``program_goodput``, ``mpg``, each only when computed, on the ``generic_task`` resource
(``location``, ``namespace="badput"``, ``job`` = the job, ``task_id`` = ``replica_id``;
user-defined metrics cannot be written to the Workload resource) or the
``monitored_resource`` given. So is the job's cost when it has a price per device-hour
(``report.cost``, docs/advice.md#cost), as the other exporters send it:
``custom.googleapis.com/badput/cost`` (each bucket's money so far, label ``bucket``: the
badput bucket names, grouped as ``badput_time``'s sources are), ``.../badput_cost_per_day``
(badput's cost a day at the job's share so far) and ``.../window/badput_cost_per_day``
(at each rolling window's, label ``rolling_window_size``).

``badput_source`` values are that library's ``BadputType`` names
(ACCOUNTING.md §6): ``TPU_INITIALIZATION`` = accelerator_init, ``TRAINING_PREP``
= training_prep, ``PROGRAM_STARTUP`` = startup + compile, ``DATA_LOADING_SYNC``
= data_loading, ``UNPRODUCTIVE_CHECKPOINT_SAVE_TIME`` / ``..._RESTORE_TIME`` =
checkpoint_save / checkpoint_restore, ``WASTED_PROGRESS_FROM_DISRUPTION`` =
wasted, ``INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION`` = recovery,
``CUSTOM_BADPUT_EVENTS.<NAME>`` = custom:<name> (name upper-cased, as that
library flattens it), ``ELASTIC_<KIND>`` = elastic_wait:<kind>,
``ELASTIC_REINITIALIZATION`` = elastic_reinit, ``OTHER`` = untracked + queued.
At most 20 named (custom and elastic) sources per job, ``MAX_NAMED_BUCKETS``: the
others are added into ``CUSTOM_BADPUT_EVENTS.(OTHER)`` and ``ELASTIC_(OTHER)``.
``DATA_LOADING_ASYNC`` (overlapped loads) is not uploaded, as that library does
not upload it either. The nine standard sources are always sent (0 when empty).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, Final

from badput.engine import Report
from badput.formats.mgm import SOURCE_OF_BUCKET
from badput.monitor._base import BucketSeries, Snapshot
from badput.monitor._vocab import program_values
from badput.runtime.optional import import_optional

__all__ = [
    "DOUBLE",
    "INT",
    "METRIC_PREFIX",
    "PROGRAM_PREFIX",
    "RESOURCE_TYPE",
    "STANDARD_SOURCES",
    "CloudMonitoringExporter",
    "badput_sources",
    "create_time_series",
    "gce_metadata",
    "goodput_seconds",
    "make_series",
]

log = logging.getLogger(__name__)

_EXTRA = "gcp"
METRIC_PREFIX = "compute.googleapis.com/workload/"
#: Program goodput's figures: user-defined metrics (the library has none).
PROGRAM_PREFIX = "custom.googleapis.com/badput/"
RESOURCE_TYPE = "compute.googleapis.com/Workload"
#: The ``TypedValue`` fields of the two value types the series use.
DOUBLE = "double_value"
INT = "int64_value"
_TOTAL = {"goodput_source": "TOTAL"}  # the library's only GoodputType
_MAX_SERIES_PER_REQUEST = 200  # Cloud Monitoring's limit per CreateTimeSeries call

_GOODPUT_BUCKETS = ("productive", "slowdown")

#: The badput sources always sent (ml-goodput-measurement's BadputType, minus the
#: async loads it does not upload and the per-name custom events).
STANDARD_SOURCES: tuple[str, ...] = (
    "TPU_INITIALIZATION",
    "TRAINING_PREP",
    "PROGRAM_STARTUP",
    "DATA_LOADING_SYNC",
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "WASTED_PROGRESS_FROM_DISRUPTION",
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "OTHER",
)


def _source_of(bucket: str) -> str:
    if bucket.startswith("custom:"):
        return f"CUSTOM_BADPUT_EVENTS.{bucket[len('custom:') :].upper()}"
    if bucket.startswith("elastic_wait:"):
        return f"ELASTIC_{bucket[len('elastic_wait:') :].upper()}"
    return SOURCE_OF_BUCKET.get(bucket, "OTHER")  # a bucket of a newer engine: OTHER


def make_series(
    metric: str,
    value: float,
    kind: str,
    labels: Mapping[str, str],
    resource: Mapping[str, Any],
    *,
    end_time: float,
    prefix: str = METRIC_PREFIX,
) -> dict[str, Any]:
    """One ``workload/<metric>`` point as a ``monitoring_v3.TimeSeries`` dict.

    ``kind`` is :data:`DOUBLE` or :data:`INT`; ``resource`` is ``{"type": ...,
    "labels": {...}}``; ``end_time`` is POSIX seconds; ``prefix`` goes before ``metric``.
    """
    seconds = math.floor(end_time)
    end = {"seconds": seconds, "nanos": int((end_time - seconds) * 1e9)}
    return {
        "metric": {"type": prefix + metric, "labels": dict(labels)},
        "resource": resource,
        "points": [{"interval": {"end_time": end}, "value": {kind: value}}],
    }


def create_time_series(
    client: Any, types: Any, project_id: str, series: list[dict[str, Any]], *, timeout: float
) -> None:
    """Write ``series`` (dicts of :func:`make_series`) to ``projects/<project_id>`` with
    ``client.create_time_series``, 200 per request, no hidden retries; raises on failure.

    ``types`` is the ``google.cloud.monitoring_v3`` module (imported lazily by the caller).
    """
    items = [types.TimeSeries(s) for s in series]
    name = f"projects/{project_id}"
    for i in range(0, len(items), _MAX_SERIES_PER_REQUEST):
        client.create_time_series(
            name=name,
            time_series=items[i : i + _MAX_SERIES_PER_REQUEST],
            timeout=timeout,
            retry=None,  # no hidden retry loop: the caller backs off
        )


def goodput_seconds(report: Report) -> float:
    """ml-goodput-measurement's productive time: productive + slowdown (observed goodput)."""
    return sum(report.bucket(b) for b in _GOODPUT_BUCKETS)


def badput_sources(
    report: Report, *, include_async: bool = False, buckets: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Seconds per ml-goodput-measurement badput source (its ``BadputType`` names).

    The standard sources are always present (0.0 when empty); custom and elastic
    ones when recorded. With ``include_async``, ``DATA_LOADING_ASYNC`` holds the
    overlapped (non-blocking) loads, which are outside the partition. ``buckets``: the
    report's buckets as grouped for publishing (default: ``report.buckets``, every name).
    """
    out = dict.fromkeys(STANDARD_SOURCES, 0.0)
    for bucket, secs in (report.buckets if buckets is None else buckets).items():
        if bucket in _GOODPUT_BUCKETS:
            continue
        source = _source_of(bucket)
        out[source] = out.get(source, 0.0) + secs
    if include_async:
        out["DATA_LOADING_ASYNC"] = report.overlapped.get("data_loading", 0.0)
    return out


class CloudMonitoringExporter:
    """Writes each snapshot as Cloud Monitoring time series (ml-goodput-measurement's).

    - ``project_id``: the project written to (``projects/<project_id>``).
    - ``client``: a ``google.cloud.monitoring_v3.MetricServiceClient`` (or one with
      its ``create_time_series``); by default one is built with the application
      default credentials.
    - ``location`` (alias ``zone``): the resource's ``location`` label, the zone or
      region of the workload. When not given it is, like ml-goodput-measurement
      does, the zone of the VM from the GCE metadata server (``GCE_METADATA_HOST``
      overrides its address), looked up at the first export; off GCE that export
      raises, asking for ``location``.
    - ``monitored_resource``: ``{"type": ..., "labels": {...}}`` to use instead of
      ``compute.googleapis.com/Workload`` (location, workload_id=job, replica_id).
    - ``labels``: extra metric labels on every series (``{"cluster_name": ...}``).
    - ``accelerator_type``: the ``accelerator_type`` label (``"TPU-v5p"``...).
    - ``include_intervals``: also write ``interval_goodput``/``interval_badput`` for
      the snapshot's rolling windows. (The seeds recommend PromQL ``offset`` over
      the cumulative series instead; both work.)
    - ``timeout``: seconds per request; no automatic retries (the monitor backs off).
    - ``min_interval``: Cloud Monitoring accepts one point per series every 5 s; a
      snapshot sooner than this after the last write is held back and written by
      the next export (or by ``close``).
    """

    name = "gcm"

    def __init__(
        self,
        project_id: str,
        *,
        client: Any = None,  # a monitoring_v3.MetricServiceClient (lazily imported: untyped)
        location: str | None = None,
        zone: str | None = None,
        monitored_resource: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        replica_id: str = "0",
        accelerator_type: str = "UNKNOWN",
        include_intervals: bool = True,
        timeout: float = 10.0,
        min_interval: float = 5.0,
    ) -> None:
        if not project_id:
            raise ValueError("project_id is required")
        if location is not None and zone is not None and location != zone:
            raise ValueError("give location or zone (an alias), not two different values")
        self._types: Any = import_optional("google.cloud.monitoring_v3", _EXTRA)  # untyped
        self.project_id = project_id
        self.location = location if location is not None else zone
        self._resource = (
            {
                "type": monitored_resource["type"],
                "labels": dict(monitored_resource.get("labels", {})),
            }
            if monitored_resource is not None
            else None
        )
        self.labels = dict(labels or {})
        self.replica_id = replica_id
        self.accelerator_type = accelerator_type
        self.include_intervals = include_intervals
        self.timeout = timeout
        self.min_interval = min_interval
        self.client: Any = client if client is not None else self._new_client()
        self._lock = threading.Lock()
        self._last_write: float | None = None
        self._pending: Snapshot | None = None
        self._closed = False
        self._series: dict[str, BucketSeries] = {}  # each job's named sources (bounded)

    # -- the Exporter protocol -------------------------------------------------

    def _new_client(self) -> Any:
        try:
            return self._types.MetricServiceClient()
        except Exception as exc:
            if "Credentials" not in type(exc).__name__:
                raise
            # google.auth's message spans many lines; one is enough to act on.
            raise OSError(
                "no Google Cloud credentials found (run `gcloud auth application-default "
                "login` or set GOOGLE_APPLICATION_CREDENTIALS)"
            ) from None

    def export(self, snapshot: Snapshot) -> None:
        """Write ``snapshot`` (one request per 200 series; raises on failure)."""
        with self._lock:
            if self._closed:
                return
            last = self._last_write
            if last is not None and snapshot.time - last < self.min_interval:
                self._pending = snapshot
                return
            self._pending = None
            self._write(snapshot)

    def close(self) -> None:
        """Write a held-back snapshot, if any; never raises (logs a warning)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending, self._pending = self._pending, None
            if pending is None:
                return
            try:
                self._write(pending)
            except Exception as exc:
                log.warning("badput: final Cloud Monitoring write failed: %s", exc)

    # -- building the time series ----------------------------------------------

    def time_series(self, snapshot: Snapshot) -> list[dict[str, Any]]:
        """The time series of ``snapshot``, as ``monitoring_v3.TimeSeries`` dicts.

        At most :data:`~badput.engine.MAX_NAMED_BUCKETS` custom and elastic sources per
        job (the first snapshots' largest, for good); the other names' time is in
        ``CUSTOM_BADPUT_EVENTS.(OTHER)`` / ``ELASTIC_(OTHER)`` (``BucketSeries``).
        """
        rep = snapshot.report
        named = self._series.setdefault(snapshot.job, BucketSeries())
        named.update(snapshot)
        resource = self._resource or {
            "type": RESOURCE_TYPE,
            "labels": {
                "location": self._location(),
                "workload_id": snapshot.job,
                "replica_id": self.replica_id,
            },
        }

        def series(metric: str, value: float, kind: str, labels: dict[str, str]) -> dict[str, Any]:
            return make_series(metric, value, kind, labels, resource, end_time=snapshot.time)

        # the user's extra labels first: the library's own labels win a clash
        common = {**self.labels, "accelerator_type": self.accelerator_type}
        cumulative = {**common, "window_type": "cumulative"}
        out = [
            series("goodput_time", goodput_seconds(rep), DOUBLE, {**common, **_TOTAL}),
            *(
                series("badput_time", secs, DOUBLE, {**common, "badput_source": source})
                for source, secs in badput_sources(rep, buckets=named.current()).items()
            ),
            series("disruptions", snapshot.disruptions, INT, cumulative),
            series("max_productive_steps", snapshot.last_step or 0, INT, common),
        ]
        st = snapshot.step_time
        if st is not None and st.gcm_deviation is not None and math.isfinite(st.gcm_deviation):
            out.append(series("step_time_deviation", st.gcm_deviation, DOUBLE, common))
        out.append(series("total_elapsed_time", rep.total_seconds, DOUBLE, cumulative))
        if rep.ideal_step_time is not None:
            out.append(series("performance", rep.ideal_step_time, DOUBLE, {}))
        out += self._custom_series(snapshot, _custom_values(snapshot, named, common))
        if not self.include_intervals:
            return out
        for w, wrep in sorted(snapshot.windows.items()):
            total = wrep.total_seconds
            if total <= 0:
                continue
            window = {**common, "rolling_window_size": str(int(w))}
            pct = 100.0 * goodput_seconds(wrep) / total
            out.append(series("interval_goodput", pct, DOUBLE, {**window, **_TOTAL}))
            for source, secs in badput_sources(wrep, buckets=named.current_window(w)).items():
                pct = 100.0 * secs / total
                labels = {**window, "badput_source": source}
                out.append(series("interval_badput", pct, DOUBLE, labels))
        return out

    def _custom_series(
        self, snapshot: Snapshot, values: list[tuple[str, float, dict[str, str]]]
    ) -> list[dict[str, Any]]:
        """``(metric key, value, labels)`` as user-defined metrics (program goodput, cost)."""
        if not values:
            return []
        resource = self._resource or {
            "type": "generic_task",
            "labels": {
                "project_id": self.project_id,
                "location": self._location(),
                "namespace": "badput",
                "job": snapshot.job,
                "task_id": self.replica_id,
            },
        }
        return [
            make_series(
                key.replace(".", "/"),
                value,
                DOUBLE,
                labels,
                resource,
                end_time=snapshot.time,
                prefix=PROGRAM_PREFIX,
            )
            for key, value, labels in values
        ]

    def _location(self) -> str:
        if not self.location:
            self.location = _metadata_zone(min(self.timeout, 2.0))
            if not self.location:
                raise RuntimeError(
                    "the workload's location is unknown (no GCE metadata server): "
                    "pass location='<zone or region>' or monitored_resource=..."
                )
        return self.location

    def _write(self, snapshot: Snapshot) -> None:
        # no hidden retry loop in there: export must return; the monitor backs off
        create_time_series(
            self.client,
            self._types,
            self.project_id,
            self.time_series(snapshot),
            timeout=self.timeout,
        )
        self._last_write = snapshot.time


def _custom_values(
    snapshot: Snapshot, named: BucketSeries, labels: dict[str, str]
) -> list[tuple[str, float, dict[str, str]]]:
    """The user-defined metrics of ``snapshot``: program goodput's computed figures, and
    its money when priced (the keys of :data:`~badput.monitor._vocab.METRICS`)."""
    out = [(key, value, labels) for key, value in program_values(snapshot)]
    c = snapshot.report.cost
    if c is not None:
        out += [("cost", c.money(s), {**labels, "bucket": b}) for b, s in named.current().items()]
        out.append(("badput_cost_per_day", c.badput_per_day, labels))
    for w, wrep in sorted(snapshot.windows.items()):
        if wrep.cost is not None:
            window = {**labels, "rolling_window_size": str(int(w))}
            out.append(("window.badput_cost_per_day", wrep.cost.badput_per_day, window))
    return out


#: HTTP answers of the metadata server worth asking again.
_RETRYABLE: Final = frozenset({429, 500, 502, 503, 504})


def gce_metadata(path: str, *, timeout: float = 2.0, retries: int = 1) -> str | None:
    """``computeMetadata/v1/<path>`` from the GCE metadata server, or ``None`` (off GCE,
    or an error). The one metadata client of badput (the compat layer uses it too).

    The server is ``$GCE_METADATA_HOST`` (else ``metadata.google.internal``), asked
    directly, never through a proxy; a busy answer (429, 5xx) is asked again up to
    ``retries`` times in all.
    """
    host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(max(1, retries)):
        request = urllib.request.Request(
            f"http://{host}/computeMetadata/v1/{path}", headers={"Metadata-Flavor": "Google"}
        )
        try:
            with opener.open(request, timeout=timeout) as resp:
                return str(resp.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code not in _RETRYABLE:
                return None
        except (OSError, ValueError):
            return None  # no metadata server: not on GCE
    return None


def _metadata_zone(timeout: float) -> str | None:
    """The VM's zone from the GCE metadata server (``None`` off GCE)."""
    text = gce_metadata("instance/zone", timeout=timeout)
    if text is None:
        return None
    zone = text.strip().rsplit("/", 1)[-1]  # projects/123/zones/us-central1-a
    return zone or None
