"""Interval helpers: pairing, innermost-wins flattening, coverage."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine._intervals import (
    Coverage,
    IntervalMark,
    Piece,
    RecordedInterval,
    flatten_innermost,
    pair_marks,
)


def iv(start: float, end: float, bucket: str, order: int) -> RecordedInterval:
    return RecordedInterval(start, end, bucket, True, order)


def test_innermost_wins_nested_and_overlapping() -> None:
    pieces = flatten_innermost(
        [iv(0, 100, "training_prep", 0), iv(10, 30, "checkpoint_restore", 1), iv(20, 25, "x", 2)]
    )
    assert [(p.start, p.end, p.bucket) for p in pieces] == [
        (0, 10, "training_prep"),
        (10, 20, "checkpoint_restore"),
        (20, 25, "x"),
        (25, 30, "checkpoint_restore"),
        (30, 100, "training_prep"),
    ]
    # partial overlap: the later start owns the overlap
    pieces = flatten_innermost([iv(0, 10, "a", 0), iv(5, 15, "b", 1)])
    assert [(p.start, p.end, p.bucket) for p in pieces] == [(0, 5, "a"), (5, 15, "b")]


def test_nested_pairs_of_one_kind_close_innermost_first() -> None:
    marks = [
        IntervalMark(0, 1, "custom:eval", True, True, None, None),
        IntervalMark(1, 2, "custom:eval", True, True, None, None),
        IntervalMark(2, 3, "custom:eval", False, True, None, None),
        IntervalMark(5, 4, "custom:eval", False, True, None, None),
        IntervalMark(6, 5, "custom:eval", False, True, "f", 9),
    ]
    intervals, unpaired_starts, unpaired_ends = pair_marks(marks, close_at=10)
    assert sorted((i.start, i.end) for i in intervals) == [(0, 5), (1, 2)]
    assert unpaired_starts == [] and [(m.ts, m.line) for m in unpaired_ends] == [(6, 9)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(0, 100), min_size=0, max_size=24),
    st.lists(st.floats(-5, 105), min_size=2, max_size=60),
    st.booleans(),
)
def test_coverage_between_sorted_equals_between(
    edges: list[float], points: list[float], zero_length: bool
) -> None:
    e = sorted(edges)
    pieces = [Piece(e[i], e[i + 1], "x") for i in range(0, len(e) - 1, 2) if e[i + 1] > e[i]]
    pts = np.sort(np.array(points[: len(points) // 2 * 2]))
    a, b = pts[0::2].copy(), pts[1::2].copy()
    if zero_length:
        b[:] = a
    cov = Coverage(pieces)
    assert np.allclose(cov.between(a, b), cov.between_sorted(a, b))
    expected = [
        sum(max(0.0, min(y, p.end) - max(x, p.start)) for p in pieces)
        for x, y in zip(a, b, strict=False)
    ]
    assert np.allclose(cov.between_sorted(a, b), expected)
