"""Human formatting of durations, fractions, timestamps and log text (standard library only).

Every formatter here takes any float (huge, negative, NaN, infinite) and returns
text; none raises. :func:`inert` is the one way a string read from a log (job,
attempt, status, event names, file names, diagnostics) reaches a terminal.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Final

__all__ = [
    "GOODPUT_HEALTHY",
    "GOODPUT_LOW",
    "MAX_ATTEMPT_ROWS",
    "format_duration",
    "format_money",
    "format_percent",
    "format_ts",
    "goodput_health",
    "inert",
]

#: Goodput at or above this is shown healthy (green) ...
GOODPUT_HEALTHY = 0.8
#: ... at or above this, a warning (yellow); below it, bad (red). docs/views.md.
GOODPUT_LOW = 0.5

#: Attempts a table lists by default (the first half and the last half of them): a job of
#: 10,000 attempts is a table nobody reads, and rich takes seconds to draw it.
MAX_ATTEMPT_ROWS: Final = 20

_MINUTE = 60.0
_HOUR = 3600.0
_DAY = 86400.0
_LONG = 1e6 * _DAY  # beyond this (2,700 years: a corrupt clock), days in 4 digits
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)


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
    if seconds >= _LONG:
        return f"{seconds / _DAY:.4g}d"
    total_h = round(seconds / _HOUR)
    d, h = divmod(total_h, 24)
    return f"{d}d {h}h"


def format_percent(fraction: float, digits: int = 1) -> str:
    """``0.8123`` → ``81.2%``; NaN → ``n/a``."""
    if math.isnan(fraction):
        return "n/a"
    if abs(fraction) >= 1e4:  # never a share of a total: a corrupt figure, kept short
        return f"{fraction * 100.0:.3g}%"
    return f"{fraction * 100.0:.{digits}f}%"


def format_money(amount: float) -> str:
    """``1234.5`` → ``1,234.50`` (in the currency of the price per device-hour given)."""
    if not math.isfinite(amount):
        return "n/a"
    return f"{amount:,.2f}"


def goodput_health(fraction: float) -> str:
    """How a view colours goodput ``fraction``: ``"good"`` from :data:`GOODPUT_HEALTHY`
    on, ``"warn"`` from :data:`GOODPUT_LOW` on, else ``"bad"`` (NaN, no figure: ``"bad"``
    too: an unknown goodput is never shown healthy)."""
    if fraction >= GOODPUT_HEALTHY:
        return "good"
    if fraction >= GOODPUT_LOW:
        return "warn"
    return "bad"


def format_ts(ts: float, *, millis: bool = True) -> str:
    """A Unix timestamp as UTC ISO 8601: ``2024-11-19T07:06:40.000Z``.

    ``millis=False`` drops the fraction: ``2024-11-19T07:06:40Z``.
    """
    if not math.isfinite(ts):
        return "n/a"
    try:
        dt = _EPOCH + timedelta(seconds=ts)
    except OverflowError:  # before year 1 or after 9999: no calendar date to show
        return f"{ts:.6g}"
    day = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
    if not millis:
        return day + "Z"
    return f"{day}.{dt.microsecond // 1000:03d}Z"


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


#: Longest log string shown whole; longer ones are cut, saying how long they were.
MAX_SHOWN: Final = 200


def inert(value: object, limit: int = MAX_SHOWN) -> str:
    """``value`` as text that a terminal shows and never obeys.

    Every character that is not printable (ESC, BEL, CR, C1 CSI, line separators,
    bidirectional overrides, unassigned code points ...) becomes a visible escape
    (``\\x1b``, ``\\u202e``); a backslash is kept as is. Text longer than
    ``limit`` characters is cut (``…(5,000 chars)``). Rich markup is the
    renderer's business: the rich views put this text in ``rich.text.Text``
    objects, which are never parsed for markup. Plain, short, printable text
    (the common case) is returned unchanged.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = f"{text[: max(limit - 20, 1)]}…({len(text):,} chars)"
    if text.isprintable():  # C speed; also False for tab/newline, which are escaped
        return text
    # Not printable: controls (C0, C1, DEL), format characters (bidi overrides),
    # separators other than the space, surrogates, private-use and unassigned points.
    return "".join(c if c.isprintable() else _escape(c) for c in text)
