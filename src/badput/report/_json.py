"""The JSON view: the ACCOUNTING.md §8 object."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from badput.engine import Report, Snapshot

__all__ = ["dumps_finite", "to_json"]


def _finite(value: Any) -> Any:
    """Replace NaN/inf (not valid JSON) by ``None``, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@lru_cache(maxsize=64)
def _flat_encoder(indent: int, depth: int) -> json.JSONEncoder:
    """An encoder whose compact output of a container holding no container is that
    container's ``json.dumps(indent=indent)`` text at ``depth``, short of the line breaks
    after its opening and before its closing bracket. Without ``indent`` the standard
    library encodes in C; with it, in Python, about 6 times slower (0.17 s for the 2.6 MB
    report of 10,000 attempts)."""
    return json.JSONEncoder(separators=(",\n" + " " * (indent * depth), ": "), allow_nan=False)


def _key_text(key: Any) -> str:
    """A dictionary key as the standard library's encoder writes it (it accepts
    strings, numbers, booleans and None)."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key, allow_nan=False)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _indented(value: Any, indent: int, depth: int, out: list[str]) -> None:
    """Append ``value``'s text as ``json.dumps(value, indent=indent)`` writes it at
    ``depth``, with non-finite numbers written as ``null``."""
    is_dict = isinstance(value, dict)
    if not is_dict and not isinstance(value, (list, tuple)):
        if isinstance(value, float) and not math.isfinite(value):
            out.append("null")
        else:
            out.append(_flat_encoder(indent, depth).encode(value))
        return
    if not value:
        out.append("{}" if is_dict else "[]")
        return
    items = value.values() if is_dict else value
    inner = " " * (indent * (depth + 1))
    # (an empty container is written "[]" or "{}" at any depth: as a number, it has no
    # line of its own; a report of 10,000 attempts has one in each)
    if not any(isinstance(item, (dict, list, tuple)) and item for item in items):
        try:
            text = _flat_encoder(indent, depth + 1).encode(value)
        except ValueError:  # a non-finite number (never expected): written as null
            text = _flat_encoder(indent, depth + 1).encode(_finite(value))
        out.append(f"{text[0]}\n{inner}{text[1:-1]}\n{' ' * (indent * depth)}{text[-1]}")
        return
    out.append("{\n" if is_dict else "[\n")
    key_encoder = _flat_encoder(indent, depth + 1)
    for k, (key, item) in enumerate(value.items() if is_dict else enumerate(value)):
        out.append(",\n" + inner if k else inner)
        if is_dict:
            out.append(key_encoder.encode(_key_text(key)) + ": ")
        _indented(item, indent, depth + 1, out)
    out.append(f"\n{' ' * (indent * depth)}{'}' if is_dict else ']'}")


def dumps_finite(value: Any, *, indent: int | None = 2) -> str:
    """``json.dumps(value, indent=indent)`` with NaN and infinities written as ``null``:
    always valid JSON, the same text as the standard library's, written faster when
    indented (containers without containers inside are encoded in C)."""
    if indent is None:
        try:
            return json.dumps(value, allow_nan=False)
        except ValueError:
            return json.dumps(_finite(value), allow_nan=False)
    out: list[str] = []
    _indented(value, indent, 0, out)
    return "".join(out)


def to_json(
    view: Snapshot | Report, *, indent: int | None = 2, extra: Mapping[str, Any] | None = None
) -> str:
    """The report of ``view`` (a snapshot, or a report alone) as the JSON object of
    ``badput report --json`` (ACCOUNTING.md §8), with the keys of ``extra`` added (what
    a caller computed beside the report: ``badput report`` adds ``advice``).

    Always valid JSON: a non-finite number (never expected) is written as ``null``.
    """
    out = report_of(view).to_dict()
    if extra:
        out.update(extra)
    return dumps_finite(out, indent=indent)


def report_of(view: Snapshot | Report) -> Report:
    """The report a view renders: a snapshot's, or the report itself (a view that shows
    the partition alone takes either). Told apart without importing the engine: this
    module is loaded with ``badput.report``, before any view needs numpy."""
    return cast("Report", getattr(view, "report", view))
