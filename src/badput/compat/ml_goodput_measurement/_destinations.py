"""Where the compat monitor's uploaders write: TensorBoard and Google Cloud Monitoring.

:class:`TensorBoardWriter` writes the library's scalars (tensorboardX) and
:class:`CloudMonitoringWriter` the library's ``compute.googleapis.com/workload/*`` series,
built with :mod:`badput.monitor.gcm`'s helpers; both from the compat calculator's results
(:mod:`~badput.compat.ml_goodput_measurement.monitoring`).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from badput.compat.ml_goodput_measurement import goodput_utils
from badput.compat.ml_goodput_measurement.goodput import UnproductiveTimeDict
from badput.compat.ml_goodput_measurement.goodput_utils import (
    ACTIVITY_EXCLUSION_LIST,
    IntervalMetricType,
    MetricType,
    MonitoringWindowType,
)
from badput.monitor import gcm
from badput.runtime.optional import import_optional

__all__ = ["CloudMonitoringWriter", "TensorBoardWriter"]

# The monitor's logger: its messages keep the name they have always had.
logger = logging.getLogger("badput.compat.ml_goodput_measurement.monitoring")

_TENSORBOARD_GOODPUT_LABEL: Final = "goodput"
_TENSORBOARD_BADPUT_LABEL: Final = "badput"
_TENSORBOARD_STEP_DEVIATION_LABEL: Final = "step_deviation"
#: Seconds per Cloud Monitoring request (no automatic retries: the uploader backs off).
_GCM_TIMEOUT_SECONDS: Final = 10.0
_SLICE_EFFICIENCY: Final = ("stepping_slice_efficiency", "available_slice_efficiency")

_writer_ids = itertools.count()
_writer_open_lock = threading.Lock()


class TensorBoardWriter:
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


def _flatten_badput(badput: Mapping[Any, float | Mapping[str, float]]) -> list[tuple[str, float]]:
    """``(badput_source, value)``: ``TYPE``, or ``TYPE.SUBTYPE`` for custom events."""
    out: list[tuple[str, float]] = []
    for bt, value in badput.items():
        if isinstance(value, Mapping):
            out.extend((f"{bt.name}.{sub.upper()}", float(v)) for sub, v in value.items())
        else:
            out.append((bt.name, float(value)))
    return out


class CloudMonitoringWriter:
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
