"""The fields a ``record(kind, **fields)`` call may set, each coerced to its schema type; the
identity fields are the recorder's own."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Final

from badput.events import WORK_COUNTS

__all__ = ["as_int", "clean_fields"]

# Fields the recorder owns (identity); ``record(kind, **fields)`` cannot set them.
_IDENTITY_FIELDS: Final = frozenset({"ts", "kind", "job", "attempt", "host", "rank", "pid", "v"})
_INT_FIELDS: Final = frozenset(
    {"step", "exit_code", "active", "total", "available", "count", *WORK_COUNTS}
)
_FLOAT_FIELDS: Final = frozenset(
    {"seconds", "last", "open_since", "flops_per_token", "peak_flops", "hang_timeout"}
)
_STR_FIELDS: Final = frozenset({"name", "status", "device"})
_BOOL_FIELDS: Final = frozenset({"blocking"})


def as_int(value: Any) -> int:
    """An integer field's value: ints, numpy or torch integers, integral floats; else
    ``TypeError``."""
    if type(value) is int:
        return value
    try:
        return operator.index(value)  # numpy / torch integers
    except TypeError:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise


def clean_fields(fields: dict[str, Any], warn_once: Callable[..., None]) -> dict[str, Any]:
    """``fields`` coerced to their schema types, without ``None`` values; an identity or
    unknown field is left out with one warning (``warn_once(key, message, *args)``)."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if key in _INT_FIELDS:
            out[key] = as_int(value)
        elif key in _STR_FIELDS:
            out[key] = value if type(value) is str else str(value)
        elif key in _BOOL_FIELDS:
            out[key] = bool(value)
        elif key in _FLOAT_FIELDS:
            out[key] = float(value)
        elif key == "quantiles":
            out[key] = {str(k): float(v) for k, v in dict(value).items()}
        else:
            what = "identity" if key in _IDENTITY_FIELDS else "unknown"
            warn_once(f"field:{key}", "badput: ignoring %s field %r in recorded events", what, key)
    return out
