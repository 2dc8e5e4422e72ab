"""``ml_goodput_measurement.goodput_utils``: its enums, option classes and step-time helpers.

Same names, members and values as ml-goodput-measurement 0.2.x, so code that imports them
(``goodput_utils.BadputType.TPU_INITIALIZATION``, ``GCPOptions(project_id=...)``) keeps
working. The statistics (median absolute deviation) use numpy, not scipy, so this module
needs nothing beyond badput's own dependencies; the GCP metadata helpers use the standard
library with a short timeout and return ``None`` off GCP.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib
import logging
from typing import Any, Final, TypedDict

import numpy as np

from badput.runtime.optional import import_optional

__all__ = [
    "ACTIVITY_EXCLUSION_LIST",
    "MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING",
    "BadputType",
    "ElasticIntervalWorkloadMetricDetails",
    "ElasticWorkloadMetricDetails",
    "GCPOptions",
    "GoodputInfo",
    "GoodputType",
    "IntervalMetricType",
    "IntervalWorkloadMetricDetails",
    "MetricType",
    "MonitoringWindowType",
    "Retry",  # noqa: F822 (module __getattr__: urllib3, imported on use)
    "StepInfo",
    "WorkloadMetricDetails",
    "compute_ideal_step_time",
    "compute_percentile",
    "compute_step_deviation_from_baseline",
    "get_accelerator_type",
    "get_anomalous_and_normal_step_times",
    "get_cluster_name",
    "get_extra_time_from_anomalous_steps",
    "get_gcp_metadata",
    "get_gcp_project_id",
    "get_node_zone",
    "get_timestamp_from_log_entry",
]

logger = logging.getLogger(__name__)

_TIME_ENTRY: Final = "time"
_METADATA_SERVER_URL: Final = "http://metadata.google.internal/computeMetadata/v1/"
_METADATA_HEADERS: Final = {"Metadata-Flavor": "Google"}
_RETRIED_STATUS: Final = (429, 500, 502, 503, 504)

MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING: Final[dict[str, str]] = {
    "tpu7x": "TPU-7x",
    "ct6e": "TPU-v6e",
    "ct5p": "TPU-v5p",
    "ct5lp": "TPU-v5e",
    "ct5l": "TPU-v5e",
    "ct4p": "TPU-v4p",
    "ct3p": "TPU-v3",
    "ct3": "TPU-v3",
    "tpu-v2": "TPU-v2",
    "tpu": "TPU",
    "a3-edgegpu": "NVIDIA-H100",
    "a3-highgpu": "NVIDIA-H100",
    "a3-megagpu": "NVIDIA-H100",
    "a3-ultragpu": "NVIDIA-H200",
    "a2": "NVIDIA-A100",
    "gpu": "GPU",
}


@dataclasses.dataclass
class GCPOptions:
    """Where and whether the monitor writes to Google Cloud Monitoring."""

    project_id: str | None = None
    location: str | None = None
    replica_id: str = "0"
    acc_type: str | None = None
    cluster_name: str | None = None
    enable_gcp_goodput_metrics: bool = True
    enable_gcp_step_deviation_metrics: bool = True


class MetricType(enum.Enum):
    """The type of CUMULATIVE Metric."""

    GOODPUT_TIME = "goodput_time"
    BADPUT_TIME = "badput_time"
    MAX_PRODUCTIVE_STEP = "max_productive_step"
    TOTAL_ELAPSED_TIME = "total_elapsed_time"
    DISRUPTION_COUNT = "disruption_count"
    STEP_TIME_DEVIATION = "step_time_deviation"
    IDEAL_STEP_TIME = "ideal_step_time"
    TOTAL_EXCLUDED_TIME = "total_excluded_time"


class IntervalMetricType(enum.Enum):
    """The type of INTERVAL Metric."""

    INTERVAL_GOODPUT = "interval_goodput"
    INTERVAL_BADPUT = "interval_badput"
    INTERVAL_SIZE = "interval_size"


class GoodputType(enum.Enum):
    """The type of Goodput."""

    TOTAL = 1


class BadputType(enum.Enum):
    """The type of Badput (members and values of ml-goodput-measurement 0.2.x)."""

    TPU_INITIALIZATION = 1
    TRAINING_PREP = 2
    PROGRAM_STARTUP = 3
    DATA_LOADING_SYNC = 4
    DATA_LOADING_ASYNC = 5
    UNPRODUCTIVE_CHECKPOINT_SAVE_TIME = 6
    UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME = 7
    WASTED_PROGRESS_FROM_DISRUPTION = 8
    INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION = 9
    CUSTOM_BADPUT_EVENTS = 10
    OTHER = 11
    ELASTIC_SLICE_DOWN = 12
    ELASTIC_SCALE_UP = 13
    ELASTIC_REINITIALIZATION = 14


class WorkloadMetricDetails(TypedDict):
    goodput_time: dict[GoodputType, float]
    badput_time: dict[BadputType, float | dict[str, float]]
    max_productive_step: int
    total_elapsed_time: float
    disruption_count: int
    step_time_deviation: dict[int, float]
    ideal_step_time: float
    total_excluded_time: float


class IntervalWorkloadMetricDetails(TypedDict):
    interval_goodput: dict[GoodputType, float]
    interval_badput: dict[BadputType, float | dict[str, float]]
    interval_size: int  # seconds


class ElasticWorkloadMetricDetails(WorkloadMetricDetails, total=False):
    stepping_slice_efficiency: float
    available_slice_efficiency: float


class ElasticIntervalWorkloadMetricDetails(IntervalWorkloadMetricDetails, total=False):
    stepping_slice_efficiency: float
    available_slice_efficiency: float


#: DATA_LOADING_ASYNC overlaps training: not subtracted from goodput.
ACTIVITY_EXCLUSION_LIST: Final[list[str]] = ["DATA_LOADING_ASYNC"]


class MonitoringWindowType(enum.Enum):
    """The type of Monitoring Window."""

    CUMULATIVE = "cumulative"
    INTERVAL = "interval"


_DEFAULT_RECENT_WINDOW_SIZE: Final = 100
_DEFAULT_BASELINE_WINDOW_SIZE: Final = 1000
_DEFAULT_SPIKE_PERCENTILE: Final = 90


class GoodputInfo:
    """Goodput information (the calculator's last cumulative result)."""

    def __init__(
        self,
        total_productive_time: float = 0.0,
        total_elapsed_time: float = 0.0,
        total_unproductive_time: dict[BadputType, float | dict[str, float]] | None = None,
        max_productive_step: int = 0,
        last_recorded_step: int = 0,
        last_updated_timestamp: datetime.datetime | None = None,
        number_of_disruptions: int = 0,
        total_excluded_time: float = 0.0,
    ) -> None:
        self.total_productive_time = total_productive_time
        self.total_elapsed_time = total_elapsed_time
        self.total_unproductive_time = total_unproductive_time or {}
        self.max_productive_step = max_productive_step
        self.last_recorded_step = last_recorded_step
        self.last_updated_timestamp = last_updated_timestamp or datetime.datetime.now(
            datetime.timezone.utc
        )
        self.number_of_disruptions = number_of_disruptions
        self.total_excluded_time = total_excluded_time


class StepInfo:
    """Step information: the ideal step time and each step's deviation from it."""

    def __init__(self, ideal_step_time: float, step_deviations: dict[int, float]) -> None:
        self.ideal_step_time = ideal_step_time
        self.step_deviations = step_deviations


def compute_percentile(values: list[float], percentile: float) -> float:
    """The ``percentile`` of ``values``, linearly interpolated (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = (len(ordered) - 1) * (percentile / 100.0)
    lower = int(index)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (index - lower)


def compute_step_deviation_from_baseline(
    step_time_deviation: dict[int, float],
    mode: MonitoringWindowType = MonitoringWindowType.CUMULATIVE,
    recent_window_size: int = _DEFAULT_RECENT_WINDOW_SIZE,
    baseline_window_size: int = _DEFAULT_BASELINE_WINDOW_SIZE,
    spike_percentile: int = _DEFAULT_SPIKE_PERCENTILE,
) -> float:
    """A spike-sensitive step time deviation (the library's rule, unchanged).

    Fewer than 100 steps: the mean deviation. Interval mode: the ``spike_percentile`` of
    the recent window. Cumulative mode: that, minus the median of the baseline window
    before it (once there are enough steps for both windows).
    """
    if not step_time_deviation:
        return 0.0
    deviations = [abs(d) for d in step_time_deviation.values()]
    total = len(deviations)
    if total < _DEFAULT_RECENT_WINDOW_SIZE:
        return float(np.mean(deviations))
    recent = deviations[-recent_window_size:]
    if mode == MonitoringWindowType.INTERVAL:
        return compute_percentile(recent, spike_percentile)
    if mode == MonitoringWindowType.CUMULATIVE:
        if total < recent_window_size + baseline_window_size:
            return compute_percentile(recent, spike_percentile)
        baseline = deviations[-(recent_window_size + baseline_window_size) : -recent_window_size]
        if not baseline:
            return compute_percentile(recent, spike_percentile)
        return compute_percentile(recent, spike_percentile) - float(np.median(baseline))
    raise ValueError(f"Unsupported MonitoringWindowType mode: {mode}")


def _median_abs_deviation(values: list[float]) -> float:
    """scipy.stats.median_abs_deviation with its defaults (scale 1)."""
    arr = np.asarray(values, dtype=np.float64)
    return float(np.median(np.abs(arr - np.median(arr))))


def compute_ideal_step_time(step_times: list[float]) -> float | None:
    """The library's ideal step time: the mean of the step times (those of at least 1 s)
    that lie within median + 3 x MAD. ``None`` when there are none."""
    kept = [t for t in step_times if t >= 1.0]
    if not kept:
        return None
    mad = _median_abs_deviation(kept)
    med = float(np.median(kept))
    normal = [t for t in kept if t <= med + mad * 3]
    return float(np.mean(normal)) if normal else None


def get_anomalous_and_normal_step_times(step_times: list[Any]) -> tuple[list[Any], list[Any]]:
    """Split step times at median + 3 x MAD: (anomalous, normal)."""
    mad = _median_abs_deviation(step_times)
    med = float(np.median(step_times))
    anomalous = [t for t in step_times if t > med + mad * 3]
    normal = [t for t in step_times if t <= med + mad * 3]
    return anomalous, normal


def get_extra_time_from_anomalous_steps(step_times: list[Any]) -> float:
    """Time the anomalous steps took beyond the mean of the normal ones."""
    anomalous, normal = get_anomalous_and_normal_step_times(step_times)
    return float(sum(anomalous) - len(anomalous) * float(np.mean(normal)))


def get_timestamp_from_log_entry(entry: dict[str, Any]) -> datetime.datetime | None:
    """The time of a payload: its first key with ``time`` in the name (the library's rule)."""
    for label, value in entry.items():
        if _TIME_ENTRY in label:
            return datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
    return None


def get_gcp_metadata(
    category: str, attribute: str, timeout: float = 5, retries: int = 3
) -> str | None:
    """An attribute from the GCP metadata server, or ``None`` (off GCP, or on error).

    As the library: a ``requests`` session retrying 429 and 5xx answers (``Retry``,
    backoff 0.5 s). Without ``requests`` (it comes with ``badput[gcp]``), the standard
    library does the same with as many tries.
    """
    url = f"{_METADATA_SERVER_URL}{category}/{attribute}"
    try:
        requests: Any = importlib.import_module("requests")
    except ImportError:
        return _metadata_by_urllib(category, attribute, timeout, retries)
    session = requests.Session()
    retry = _retry_class()(
        total=retries, backoff_factor=0.5, status_forcelist=list(_RETRIED_STATUS)
    )
    session.mount("http://", requests.adapters.HTTPAdapter(max_retries=retry))
    try:
        response = session.get(url, headers=_METADATA_HEADERS, timeout=timeout)
        response.raise_for_status()
        return str(response.text)
    except requests.exceptions.RequestException as exc:
        logger.warning("Failed to retrieve metadata for %s/%s: %s", category, attribute, exc)
        return None
    finally:
        session.close()


def _metadata_by_urllib(category: str, attribute: str, timeout: float, retries: int) -> str | None:
    # Without requests: badput's one urllib metadata client (the monitor's).
    from badput.monitor.gcm import gce_metadata  # noqa: PLC0415 (only off the requests path)

    value = gce_metadata(f"{category}/{attribute}", timeout=timeout, retries=retries)
    if value is None:
        logger.warning("Failed to retrieve metadata for %s/%s", category, attribute)
    return value


def _retry_class() -> Any:
    return import_optional("urllib3.util.retry", "gcp").Retry


def __getattr__(name: str) -> Any:
    # ``Retry`` is urllib3's (the library's ``goodput_utils.Retry``), imported on use.
    if name == "Retry":
        return _retry_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_gcp_project_id() -> str | None:
    """The project id of the current GCP project."""
    return get_gcp_metadata("project", "project-id")


def get_node_zone() -> str | None:
    """The zone of the GCE instance (``projects/1/zones/us-central1-a`` -> ``us-central1-a``)."""
    zone_path = get_gcp_metadata("instance", "zone")
    return zone_path.rsplit("/", 1)[-1] if zone_path else None


def get_accelerator_type() -> str:
    """The accelerator type from the machine type, or ``'UNKNOWN'``."""
    machine_type_url = get_gcp_metadata("instance", "machine-type")
    name = machine_type_url.split("/")[-1] if machine_type_url else None
    if not name:
        return "UNKNOWN"
    for prefix, accelerator in MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING.items():
        if prefix.lower() in name.lower():
            return accelerator
    return "UNKNOWN"


def get_cluster_name() -> str | None:
    """The cluster name from the GCP metadata server."""
    return get_gcp_metadata("instance", "attributes/cluster-name")
