"""Human formatting of durations, fractions and timestamps (standard library only)."""

from __future__ import annotations

import math
from datetime import datetime, timezone

__all__ = ["format_duration", "format_percent", "format_ts"]

_MINUTE = 60.0
_HOUR = 3600.0
_DAY = 86400.0


def format_duration(seconds: float) -> str:
    """A short human duration: ``0s``, ``350ms``, ``45.2s``, ``3m 05s``, ``3h 12m``, ``2d 4h``.

    Precision drops as the duration grows (two units at most); negative values
    get a leading ``-``; NaN and infinities are spelled out.
    """
    if math.isnan(seconds):
        return "n/a"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if math.isinf(seconds):
        return "inf"
    if seconds == 0:
        return "0s"
    if seconds < 0.9995:
        ms = seconds * 1000.0
        if ms < 1.0:
            return "<1ms"
        return f"{ms:.0f}ms"
    if round(seconds, 1) < _MINUTE:
        return f"{seconds:.1f}s"
    total_s = round(seconds)
    if total_s < _HOUR:
        m, s = divmod(total_s, 60)
        return f"{m}m {s:02d}s"
    total_m = round(seconds / _MINUTE)
    if total_m < _DAY / _MINUTE:
        h, m = divmod(total_m, 60)
        return f"{h}h {m:02d}m"
    total_h = round(seconds / _HOUR)
    d, h = divmod(total_h, 24)
    return f"{d}d {h}h"


def format_percent(fraction: float, digits: int = 1) -> str:
    """``0.8123`` → ``81.2%``; NaN → ``n/a``."""
    if math.isnan(fraction):
        return "n/a"
    return f"{fraction * 100.0:.{digits}f}%"


def format_ts(ts: float, *, millis: bool = True) -> str:
    """A Unix timestamp as UTC ISO 8601: ``2024-11-19T07:06:40.000Z``.

    ``millis=False`` drops the fraction: ``2024-11-19T07:06:40Z``.
    """
    if not math.isfinite(ts):
        return "n/a"
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    if not millis:
        return dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
