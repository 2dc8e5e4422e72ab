"""Arrow arrays as numpy arrays, without pandas: what a reader of the archive
(:mod:`badput.formats.archive`) reads its columns with, and the one place pyarrow is imported.

pyarrow is imported when first needed (``badput[archive]``). ``to_numpy``, ``fill_null`` and
``is_valid`` are not used: each imports pandas or pyarrow.compute on its first call (0.15-1.9 s).
"""

from __future__ import annotations

import functools
from typing import Any, Final

import numpy as np

from badput.runtime.optional import import_optional

__all__ = ["arrow", "arrow_parquet", "bits", "filled", "numpy_of", "valid", "whole"]


@functools.cache  # (a failed import is not kept: the next call tries again)
def arrow() -> Any:
    """pyarrow (``badput[archive]``)."""
    return import_optional("pyarrow", "archive")


@functools.cache
def arrow_parquet() -> Any:
    """pyarrow.parquet (``badput[archive]``)."""
    return import_optional("pyarrow.parquet", "archive")


#: The numpy type of each Arrow type read as numbers (booleans are unpacked bits).
_NUMPY: Final = {"int32": "int32", "int64": "int64", "double": "float64", "uint8": "uint8"}


def whole(column: Any) -> Any:
    """A column of a table as one array (its one chunk as it is)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def numpy_of(array: Any) -> Any:
    """A numpy view of an Arrow array without nulls (booleans unpacked), from its buffer:
    ``to_numpy`` imports pandas (1.9 s) to convert."""
    pa = arrow()
    if array.type == pa.bool_():
        return bits(array.buffers()[1], array.offset, len(array))
    dtype = np.dtype(_NUMPY[str(array.type)])
    return np.frombuffer(
        array.buffers()[1], dtype, len(array), array.offset * dtype.itemsize
    ).astype(np.bool_ if dtype == np.uint8 else dtype, copy=False)


def filled(array: Any, fill: int) -> Any:
    """:func:`numpy_of` of an array with nulls: ``fill`` at each (no ``fill_null``: an Arrow
    scalar made of a Python value imports pandas)."""
    raw = numpy_of(array)
    if array.null_count:
        raw = np.where(valid(array), raw, fill)
    return raw


def bits(buffer: Any, offset: int, n: int) -> Any:
    """``n`` bits of an Arrow bitmap from bit ``offset``, as booleans."""
    raw = np.frombuffer(buffer, np.uint8)
    return np.unpackbits(raw, bitorder="little")[offset : offset + n].astype(np.bool_)


def valid(array: Any) -> Any:
    """Which values of an Arrow array are not null (``is_valid`` imports pyarrow.compute,
    0.15 s)."""
    n = len(array)
    if array.null_count == 0:
        return np.ones(n, np.bool_)
    if array.null_count == n or array.buffers()[0] is None:
        return np.zeros(n, np.bool_)
    return bits(array.buffers()[0], array.offset, n)
