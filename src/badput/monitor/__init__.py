"""Live monitoring: a Monitor thread that feeds exporters (TensorBoard, Prometheus, ...).

- :class:`Monitor`: polls the incremental engine every ``interval`` seconds and
  hands a :class:`Snapshot` to each :class:`Exporter` (see ``docs/monitoring.md``).
- Exporters are extras (``pip install 'badput[prometheus]'``...), imported lazily:
  ``badput.monitor.TensorBoardExporter``, ``PrometheusExporter``,
  ``OpenTelemetryExporter`` and ``CloudMonitoringExporter`` load their module (and
  its dependency) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from badput.monitor._base import Exporter, Snapshot
from badput.monitor._lanes import MAX_BACKOFF_CYCLES, MAX_BACKOFF_SECONDS
from badput.monitor._monitor import Monitor, flush_live_recorders
from badput.monitor._vocab import window_label
from badput.runtime.lazy import lazy_attributes

if TYPE_CHECKING:
    from badput.monitor.gcm import CloudMonitoringExporter
    from badput.monitor.otel import OpenTelemetryExporter
    from badput.monitor.prometheus import PrometheusExporter
    from badput.monitor.tensorboard import TensorBoardExporter

__all__ = [
    "MAX_BACKOFF_CYCLES",
    "MAX_BACKOFF_SECONDS",
    "CloudMonitoringExporter",
    "Exporter",
    "Monitor",
    "OpenTelemetryExporter",
    "PrometheusExporter",
    "Snapshot",
    "TensorBoardExporter",
    "flush_live_recorders",
    "window_label",
]

_LAZY = {
    "TensorBoardExporter": "badput.monitor.tensorboard",
    "PrometheusExporter": "badput.monitor.prometheus",
    "OpenTelemetryExporter": "badput.monitor.otel",
    "CloudMonitoringExporter": "badput.monitor.gcm",
}

__getattr__ = lazy_attributes(__name__, _LAZY)
