"""Who wrote each row of a row group of the archive (:mod:`badput.formats.archive`): the
fields of an event's writer as codes, one writer's fields, and each row's writer as an
index into the writers of a row group (a file shared by several ranks)."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from badput.events import Writer
from badput.formats._arrow_values import arrow, filled, valid, whole

__all__ = ["WRITER_FIELDS", "writer_at", "writer_codes", "writers_of"]


#: The fields of an event's writer (:attr:`DecodedColumns.writer
#: <badput.events.DecodedColumns>` is made of them, ``attempt_is_int`` with ``attempt``).
WRITER_FIELDS: Final = ("job", "attempt", "attempt_is_int", "host", "rank", "pid")


def writers_of(
    table: Any, known: dict[str, tuple[bool, Any]], codes: list[Any], a: int, b: int
) -> tuple[Any, tuple[Writer, ...]]:
    """The writers of rows ``a:b`` (:attr:`DecodedColumns.writers`): each row's index into
    them, numbered in order of first appearance; ``codes``: :func:`writer_codes`."""
    combined = np.zeros(b - a, np.int64)
    for column in codes:
        code, size = _dense(column[a:b])
        combined, _ = _dense(combined * size + code)  # (< the rows: no overflow)
    starts = np.flatnonzero(np.concatenate(([True], combined[1:] != combined[:-1])))
    present, first = np.unique(combined[starts], return_index=True)
    order = np.argsort(first)
    renumber = np.zeros(int(present[-1]) + 1, np.int32)
    renumber[present[order]] = np.arange(len(order), dtype=np.int32)
    at = (a + starts[first[order]]).tolist()
    return renumber[combined], tuple(writer_at(table, known, i) for i in at)


def _dense(values: Any) -> tuple[Any, int]:
    """``values`` (integers) as codes ``0..k-1`` (equal where they are), and ``k``: by a
    count over their range when it is small (a rank, a process id), else by sorting."""
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < max(4 * len(values), 1 << 16):
        shifted = values - lo
        present = np.bincount(shifted, minlength=hi - lo + 1) > 0
        return (np.cumsum(present) - 1)[shifted], int(np.count_nonzero(present))
    unique, inverse = np.unique(values, return_inverse=True)
    return inverse.reshape(-1), len(unique)


def writer_at(table: Any, known: dict[str, tuple[bool, Any]], i: int) -> Any:
    """The writer of row ``i`` (:attr:`DecodedColumns.writer <badput.events.DecodedColumns>`):
    each field as the statistics know it, else from its column."""
    values: dict[str, Any] = {}
    for name in WRITER_FIELDS:
        one, value = known[name]
        values[name] = value if one else table.column(name)[i].as_py()
    attempt = values["attempt"]
    if attempt is not None and values["attempt_is_int"]:
        attempt = int(attempt)
    return (values["job"], attempt, values["host"], values["rank"], values["pid"])


def writer_codes(table: Any) -> list[Any]:
    """A number a row for each field of an event's writer (job, attempt and its type, host,
    rank, pid): equal where the values are (null included)."""
    out = []
    for name in WRITER_FIELDS:
        if name not in table.column_names:
            continue  # (one value in every row: the statistics')
        column = whole(table.column(name))
        if column.null_count == len(column):
            continue
        if hasattr(column, "indices"):
            out.append(filled(column.indices, -1))
        elif column.type == arrow().bool_():
            out.append(filled(column, False) * 1 - (~valid(column)).astype(np.int64))
        else:
            out.append(filled(column, -(2**62)))
    return out
