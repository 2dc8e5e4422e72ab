"""The JSON view: the ACCOUNTING.md §8 object."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from badput.engine import Report

__all__ = ["to_json"]


def _finite(value: Any) -> Any:
    """Replace NaN/inf (not valid JSON) by ``None``, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def to_json(report: Report, *, indent: int | None = 2) -> str:
    """``report`` as the JSON object of ``badput report --json`` (ACCOUNTING.md §8).

    Always valid JSON: a non-finite number (never expected) is written as ``null``.
    """
    return json.dumps(_finite(report.to_dict()), indent=indent, allow_nan=False)
