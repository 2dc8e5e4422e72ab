"""Names every exporter shares, so that one rolling window or one source reads the same
in Prometheus, OpenTelemetry, TensorBoard and Cloud Monitoring."""

from __future__ import annotations

import math

__all__ = ["window_label"]


def window_label(seconds: float) -> str:
    """The name of a rolling window: ``2592000.0`` → ``"2592000s"``, ``0.5`` → ``"0.5s"``.

    Whole seconds are written as an integer (never ``2.592e+06s``); a fraction keeps
    Python's shortest exact form.
    """
    if math.isfinite(seconds) and float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{float(seconds)!r}s"
