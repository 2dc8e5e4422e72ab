"""``ml_goodput_measurement.gcp_metrics``: batches of metric points to Cloud Monitoring.

The library's ``GCPMetrics`` and ``ValueType`` with its signatures (also reachable as
``monitoring.GCPMetrics`` / ``monitoring.ValueType``): ``create_time_series`` builds one
``monitoring_v3.TimeSeries`` with a single point, ``send_metrics`` sends a list of metric
dicts in one ``create_time_series`` call and logs (never raises) a failure. The Google
client comes with ``badput[gcp]`` and is imported when a ``GCPMetrics`` is made.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Mapping
from typing import Any

from badput.runtime.optional import import_optional

__all__ = ["GCPMetrics", "ValueType"]

logger = logging.getLogger(__name__)


class ValueType(enum.Enum):
    """Which field of a ``TypedValue`` holds the metric's value."""

    BOOL = "bool_value"
    INT = "int64_value"
    DOUBLE = "double_value"
    STRING = "string_value"
    DISTRIBUTION = "distribution_value"


class GCPMetrics:
    """Sends metric points to Cloud Monitoring for ``project_id`` in batches."""

    def __init__(self, project_id: str) -> None:
        self._monitoring: Any = import_optional("google.cloud.monitoring_v3", "gcp")  # untyped
        self.project_id = project_id
        self.client = self._monitoring.MetricServiceClient()
        self.project_name = f"projects/{project_id}"

    def create_time_series(
        self,
        metric_type: str,
        value: Any,
        value_type: ValueType,
        metric_labels: Mapping[str, str],
        resource_type: str,
        resource_labels: Mapping[str, str],
        seconds: int,
        nanos: int,
    ) -> Any:
        """One ``TimeSeries`` holding one point at ``seconds`` + ``nanos``."""
        m = self._monitoring
        series = m.TimeSeries()
        series.metric.type = metric_type
        series.resource.type = resource_type
        series.resource.labels.update(resource_labels)
        if metric_labels:
            series.metric.labels.update(metric_labels)
        series.points.append(
            m.Point(
                interval=m.TimeInterval(end_time={"seconds": seconds, "nanos": nanos}),
                value=m.TypedValue(**{value_type.value: value}),
            )
        )
        return series

    def send_metrics(
        self, metrics: list[dict[str, Any]], context: dict[str, Any] | None = None
    ) -> None:
        """Send ``metrics`` (dicts with ``metric_type``, ``value``, ``value_type``,
        ``resource_type``, ``resource_labels`` and optional ``metric_labels``) in one call,
        stamped now. A bad metric is logged and left out; a failed call is logged."""
        now = time.time()
        seconds = int(now)
        nanos = int((now - seconds) * 10**9)
        series = []
        for metric in metrics:
            try:
                series.append(
                    self.create_time_series(
                        metric["metric_type"],
                        metric["value"],
                        metric["value_type"],
                        metric.get("metric_labels", {}),
                        metric["resource_type"],
                        metric["resource_labels"],
                        seconds,
                        nanos,
                    )
                )
            except Exception as exc:  # one bad metric must not lose the others
                logger.error(
                    "Failed to create time series for metric '%s': %s",
                    metric.get("metric_type", "UNKNOWN"),
                    exc,
                )
        if not series:
            logger.warning("No valid time series were created, skipping GCM upload.")
            return
        api_error: Any = import_optional("google.api_core.exceptions", "gcp").GoogleAPIError
        try:
            self.client.create_time_series(name=self.project_name, time_series=series)
        except api_error as exc:
            logger.error("Failed to send Goodput metrics to GCM Monitoring: %s", exc)
            return
        log_data: dict[str, Any] = {
            "message": "Sent Goodput metrics to GCM Monitoring.",
            "metrics_count": len(series),
        }
        if context:
            log_data.update(context)
        logger.info(log_data)
