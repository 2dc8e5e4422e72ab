"""Live monitoring: a Monitor thread that feeds exporters (TensorBoard, Prometheus, ...).

Exporters are extras (``pip install 'badput[prometheus]'``...), imported lazily.
"""

from __future__ import annotations

from badput.monitor._base import Exporter, Snapshot

__all__ = ["Exporter", "Snapshot"]
