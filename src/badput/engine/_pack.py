"""Many small objects of one class as a few columns, to cross a pickle quickly.

A parallel read's worker sends its state back to the parent: for a job of thousands of
attempts, thousands of per-stream objects, each holding a dozen small ``array.array``
columns. Pickled one by one, each array, object and dict costs a few microseconds each
way (10,000 streams: 1.1 s to pickle, 1.2 s to load, more than reading them). Packed,
each field of a class becomes one column over all its objects: the arrays' bytes joined
(one ``bytes``, sliced again on the other side), nested objects of one class packed in
turn, anything else a plain list. Loading makes the same objects, field for field.

Only state that no two objects share may be packed (identity is not kept across
objects): the callers pack their own per-stream objects, never a cache.
"""

from __future__ import annotations

from array import array
from collections import deque
from itertools import accumulate, repeat
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Packed", "pack", "unpack"]


class _Arrays(NamedTuple):
    """One ``array.array`` field of every object: their typecode, lengths and bytes."""

    typecode: str
    lengths: bytes  # int64 lengths, in items
    data: bytes


class _NdArrays(NamedTuple):
    """One 1-D numpy array field of every object (same dtype)."""

    dtype: str
    lengths: bytes
    data: bytes


class _Lists(NamedTuple):
    """One field of every object that is a list of objects of one class: the lists'
    lengths and all their items packed together."""

    lengths: bytes
    items: Packed | list[Any]


class Packed(NamedTuple):
    """Objects of one class, by field (see the module docstring)."""

    cls: type
    n: int
    fields: tuple[tuple[str, Any], ...]  # (name, _Arrays | _NdArrays | _Lists | Packed | list)


def _fields(obj: object) -> list[str]:
    slots = getattr(type(obj), "__slots__", None)
    if slots is not None and not hasattr(obj, "__dict__"):
        return [slots] if isinstance(slots, str) else list(slots)
    return list(vars(obj))


def _packable(obj: object) -> bool:
    """An object of a class of ours whose fields can be set again one by one (not a tuple,
    which is made whole)."""
    return (
        type(obj).__module__.startswith("badput.")
        and not isinstance(obj, tuple)
        and (hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__"))
    )


def pack(objects: list[Any]) -> Packed | list[Any]:
    """``objects``, all of one class, by field; a plain list when they are not packable
    (mixed classes, or not a class of ours)."""
    if not objects:
        return []
    cls = type(objects[0])
    if not _packable(objects[0]) or any(type(o) is not cls for o in objects):
        return list(objects)
    names = _fields(objects[0])
    if hasattr(objects[0], "__dict__") and any(list(vars(o)) != names for o in objects):
        return list(objects)  # attributes set in another order on some
    try:
        columns = tuple((name, _column(list(map(attrgetter(name), objects)))) for name in names)
    except AttributeError:  # a slot unset on some
        return list(objects)
    return Packed(cls, len(objects), columns)


def _column(values: list[Any]) -> Any:
    first = values[0]
    if isinstance(first, array):
        code = first.typecode
        if all(type(v) is array and v.typecode == code for v in values):
            lengths = array("q", map(len, values)).tobytes()
            return _Arrays(code, lengths, b"".join(v.tobytes() for v in values))
    elif isinstance(first, np.ndarray):
        dtype = first.dtype
        if all(
            type(v) is np.ndarray and v.dtype == dtype and v.ndim == 1 and v.flags.c_contiguous
            for v in values
        ):
            lengths = array("q", (v.shape[0] for v in values)).tobytes()
            data = np.concatenate(values).tobytes() if values else b""
            return _NdArrays(dtype.str, lengths, data)
    elif type(first) is list:
        if all(type(v) is list for v in values):
            items = [item for v in values for item in v]
            if items and _packable(items[0]):
                return _Lists(array("q", map(len, values)).tobytes(), pack(items))
    elif _packable(first):
        return pack(values)
    return values


def unpack(packed: Packed | list[Any]) -> list[Any]:
    """The objects :func:`pack` was given (new ones, equal field for field).

    Each field is set on all the objects by one C-level loop (``map``), not a Python loop
    per object: the parent of a parallel read of 10,000 attempts loads its workers'
    parts while it reads (a third less time)."""
    if not isinstance(packed, Packed):
        return packed
    cls = packed.cls
    new = object.__new__
    objects: list[Any] = [new(cls) for _ in range(packed.n)]
    for name, column in packed.fields:
        values = _values(column)
        if len(values) != len(objects):
            raise ValueError(f"packed field {name!r}: {len(values)} values, {len(objects)} objects")
        deque(map(_set, objects, repeat(name), values), maxlen=0)
    return objects


_set = object.__setattr__


def _bounds(lengths: bytes, size: int) -> tuple[list[int], list[int]]:
    """Where each of the int64 ``lengths`` (items of ``size`` bytes) starts and ends."""
    ends = list(accumulate(n * size for n in array("q", lengths)))
    return [0, *ends[:-1]], ends


def _values(column: Any) -> list[Any]:
    if isinstance(column, _Arrays):
        code, data = column.typecode, column.data
        starts, ends = _bounds(column.lengths, array(code).itemsize)
        return [array(code, data[a:b]) for a, b in zip(starts, ends, strict=True)]
    if isinstance(column, _NdArrays):
        lengths = np.frombuffer(column.lengths, np.int64)
        dtype = np.dtype(column.dtype)
        if not column.data:  # all empty (a column not grown yet): one read-only empty array
            empty = np.empty(0, dtype)
            empty.flags.writeable = False
            return [empty] * int(lengths.shape[0])
        flat = np.frombuffer(column.data, dtype).copy()  # writable
        return np.split(flat, np.cumsum(lengths)[:-1])
    if isinstance(column, _Lists):
        items = unpack(column.items)
        starts, ends = _bounds(column.lengths, 1)
        return [items[a:b] for a, b in zip(starts, ends, strict=True)]
    if isinstance(column, Packed):
        return unpack(column)
    return list(column)
