"""Columns kept in as few bytes as their values allow (a stream's marks and steps, a sealed
attempt's rows): the same values as plain int64/float64 columns, in fewer bytes."""

from __future__ import annotations

from array import array

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from badput.engine import Accountant
from badput.engine._steps import _Col
from badput.engine._stream import STEP_LIMIT, PackedInts
from badput.events import Event

INT64 = st.integers(-(2**63), 2**63 - 1)
SMALL = st.integers(-3, 3)
STEP_EDGE = st.sampled_from([STEP_LIMIT - 1, STEP_LIMIT, -STEP_LIMIT, -STEP_LIMIT - 1])


@given(
    st.lists(
        st.tuples(st.lists(st.one_of(SMALL, INT64, STEP_EDGE), max_size=6), st.booleans()),
        max_size=6,
    ),
    st.sampled_from(
        [
            ("i", "q", False, 2**31),
            ("i", "q", False, STEP_LIMIT),  # step numbers (event streams, per-rank view)
            ("i", None, True, 2**31),
            ("b", None, True, 2**7),
        ]
    ),
)
def test_packed_ints_give_back_every_value_appended(
    chunks: list[tuple[list[int], bool]], kind: tuple[str, str | None, bool, int]
) -> None:
    """Whatever is appended (one value again and again, then others; values past int32 or
    the column's limit; a chunk at once or a value at a time), the column is the values in
    order, narrow while they are within its limit."""
    narrow, wide, constant, limit = kind
    col = PackedInts(narrow, wide, constant=constant, limit=limit)
    every: list[int] = []
    for drawn, one_by_one in chunks:
        # (a column without a wide type is given values that fit)
        values = drawn if wide is not None else [v % limit for v in drawn]
        if one_by_one:
            for v in values:
                col.append(v)
        else:
            col.extend(np.array(values, np.int64))
        every += values
        assert col.column().tolist() == every
        assert len(col) == len(every)
    fits = all(-limit <= v < limit for v in every)
    assert col.column().dtype.itemsize == (
        np.dtype(np.int8 if narrow == "b" else np.int32).itemsize if fits else 8
    )


@given(
    st.lists(st.lists(st.sampled_from([1.0, 1.0, 2.0, 0.0, -0.0, np.nan]), max_size=5), max_size=6)
)
def test_a_constant_column_keeps_every_float_as_it_was(chunks: list[list[float]]) -> None:
    """A row column kept as one value while every value is the same: bit for bit the
    values appended (0.0 is not -0.0, NaN is no value's equal), reserved or not."""
    col = _Col(np.float64, constant=True)
    col.reserve(3)
    every: list[float] = []
    for c in chunks:
        col.extend(np.array(c, np.float64))
        every += c
        assert col.a.tobytes() == np.array(every, np.float64).tobytes()


def _held(column: object) -> int:
    if isinstance(column, array):
        return len(column) * column.itemsize
    assert isinstance(column, PackedInts)
    arr = column._arr
    return 0 if arr is None else len(arr) * arr.itemsize


def test_a_data_load_log_keeps_17_bytes_a_mark_and_13_a_step_event() -> None:
    """A step with a data load in it: each mark keeps its time (8 bytes), arrival number
    (4), start flag (1) and line (4); its bucket, source and blocking flag, the same for
    every mark, take no room; each step event its time (8), step (4) and end flag (1).
    Before: 30 bytes a mark and 17 a step event."""
    n = 3000
    events = [Event(ts=0.0, kind="job_start", job="j", attempt=0, rank=0)]
    for s in range(1, n + 1):
        t = float(s)
        events += [
            Event(ts=t, kind="step_start", job="j", attempt=0, rank=0, step=s),
            Event(ts=t + 0.1, kind="data_loading_start", job="j", attempt=0, rank=0),
            Event(ts=t + 0.2, kind="data_loading_end", job="j", attempt=0, rank=0),
            Event(ts=t + 0.9, kind="step_end", job="j", attempt=0, rank=0, step=s),
        ]
    acc = Accountant("j")
    acc.ingest_events(events, source="j.jsonl")
    (stream,) = acc._ing.streams.values()
    marks, steps = stream.marks, stream.steps
    assert len(marks) == 2 * n
    held = sum(
        _held(getattr(marks, f))
        for f in ("ts", "seq", "bucket", "is_start", "blocking", "line", "source")
    )
    assert held == 17 * 2 * n
    assert sum(_held(c) for c in (steps.ts, steps.step, steps.is_end)) == (8 + 4 + 1) * 2 * n
    assert marks.bucket.column().tolist() == [marks.bucket.column()[0]] * 2 * n
