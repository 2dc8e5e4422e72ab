"""Interval helpers: pairing, innermost-wins flattening, coverage."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine._intervals import (
    Coverage,
    IntervalMark,
    Marks,
    Piece,
    RecordedInterval,
    Spans,
    _pair_adjacent,
    _pair_nested,
    flatten_innermost,
    flatten_spans,
    innermost_order,
    innermost_rank,
    pair_columns,
    pair_marks,
)
from badput.engine._rows import covered_by
from badput.engine._steps import clipped_piece_sums, clipped_sums
from badput.engine._stream import StepLog


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
    cov = Coverage.of_pieces(pieces)
    assert np.allclose(cov.between(a, b), cov.between_sorted(a, b))
    expected = [
        sum(max(0.0, min(y, p.end) - max(x, p.start)) for p in pieces)
        for x, y in zip(a, b, strict=False)
    ]
    assert np.allclose(cov.between_sorted(a, b), expected)


BUCKETS = ["a", "b", "c"]


def _columns(marks: list[IntervalMark]) -> Marks:
    n = len(marks)
    return Marks(
        np.array([m.ts for m in marks], np.float64),
        np.array([m.seq for m in marks], np.int64),
        np.array([BUCKETS.index(m.bucket) for m in marks], np.int32),
        np.array([m.is_start for m in marks], np.bool_),
        np.array([m.blocking for m in marks], np.bool_),
        np.full(n, -1, np.int64),
        np.full(n, -1, np.int32),
    )


def _merged(pieces: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Adjacent pieces of one bucket joined (the sweep joins them, the fast path need not)."""
    out: list[tuple[float, float, str]] = []
    for a, b, bucket in pieces:
        if out and out[-1][2] == bucket and out[-1][1] == a:
            out[-1] = (out[-1][0], b, bucket)
        else:
            out.append((a, b, bucket))
    return out


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 20), st.integers(0, 2), st.booleans(), st.booleans()),
        max_size=40,
    ),
    st.integers(0, 30),
)
def test_columnar_pairing_and_flattening_agree_with_the_plain_rules(
    rows: list[tuple[int, int, bool, bool]], close_at: int
) -> None:
    """The engine's vectorised pairing (bracket depths) and flattening (clusters) give what
    the per-object functions give, on any marks: nesting, ties, unpaired starts and ends."""
    marks = sorted(
        (
            IntervalMark(float(t), i, BUCKETS[b], start, blocking, None, None)
            for i, (t, b, start, blocking) in enumerate(rows)
        ),
        key=lambda m: (m.ts, m.seq),
    )
    intervals, unpaired_starts, unpaired_ends = pair_marks(marks, float(close_at))
    paired = pair_columns(_columns(marks), float(close_at))
    got = paired.intervals
    assert sorted((i.start, i.end, i.bucket, i.blocking, i.order) for i in intervals) == sorted(
        zip(
            got.start.tolist(),
            got.end.tolist(),
            [BUCKETS[c] for c in got.bucket.tolist()],
            got.blocking.tolist(),
            got.order.tolist(),
            strict=True,
        )
    )
    assert [(m.ts, m.seq) for m in unpaired_starts] == list(
        zip(paired.unpaired_starts.ts.tolist(), paired.unpaired_starts.seq.tolist(), strict=True)
    )
    assert [(m.ts, m.seq) for m in unpaired_ends] == list(
        zip(paired.unpaired_ends.ts.tolist(), paired.unpaired_ends.seq.tolist(), strict=True)
    )
    # innermost wins, ranked as the engine ranks them
    by_rank = sorted(intervals, key=innermost_order)
    expected = flatten_innermost(
        [RecordedInterval(i.start, i.end, i.bucket, True, k) for k, i in enumerate(by_rank)]
    )
    spans = Spans(got.start, got.end, got.bucket, np.ones(len(got), np.bool_), got.order)
    spans = Spans(spans.start, spans.end, spans.bucket, spans.blocking, innermost_rank(spans))
    flat = flatten_spans(spans)
    assert _merged([(p.start, p.end, p.bucket) for p in expected]) == _merged(
        list(
            zip(
                flat.start.tolist(),
                flat.end.tolist(),
                [BUCKETS[c] for c in flat.bucket.tolist()],
                strict=True,
            )
        )
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    st.integers(0, 40),
)
def test_each_start_followed_by_its_end_pairs_as_the_nested_path_does(
    rows: list[tuple[int, int, int, bool]], close_at: int
) -> None:
    """The shortcut for marks that go start, end, start, end (a data load per step) gives
    exactly what bracket matching gives, in the same order, ties in time included."""
    marks: list[IntervalMark] = []
    t = 0
    for gap, length, b, blocking in rows:
        t += gap
        seq = len(marks)
        marks.append(IntervalMark(float(t), seq, BUCKETS[b], True, blocking, None, None))
        t += length
        marks.append(IntervalMark(float(t), seq + 1, BUCKETS[b], False, blocking, None, None))
    cols = _columns(marks)
    fast, nested = _pair_adjacent(cols), _pair_nested(cols, float(close_at))
    assert fast is not None
    for field in ("start", "end", "bucket", "blocking", "order"):
        assert getattr(fast.intervals, field).tolist() == getattr(nested.intervals, field).tolist()
    assert len(fast.unpaired_starts) == len(nested.unpaired_starts) == 0
    assert len(fast.unpaired_ends) == len(nested.unpaired_ends) == 0
    # one end moved before its start, or a start left open: not the shortcut's case
    assert _pair_adjacent(cols.take(np.arange(len(marks) - 1))) is None


def disjoint_pieces(gaps: list[float], lengths: list[float], codes: list[int]) -> Spans:
    """Flattened pieces: disjoint and in time order, each ``length`` long after ``gap``."""
    starts, ends, t = [], [], 0.0
    for gap, length in zip(gaps, lengths, strict=False):
        t += gap
        starts.append(t)
        t += length
        ends.append(t)
    n = len(starts)
    return Spans(
        np.array(starts, np.float64),
        np.array(ends, np.float64),
        np.array(codes[:n], np.int32),
        np.ones(n, np.bool_),
        np.zeros(n, np.int64),
    )


@given(
    gaps=st.lists(st.floats(0.0, 5.0), min_size=0, max_size=40),
    lengths=st.lists(st.floats(0.0, 5.0), min_size=40, max_size=40),
    codes=st.lists(st.integers(0, 3), min_size=40, max_size=40),
    lo=st.floats(-10.0, 250.0),
    width=st.floats(0.0, 250.0),
)
def test_clipped_piece_sums_look_only_at_the_window_and_give_clipped_sums(
    gaps: list[float], lengths: list[float], codes: list[int], lo: float, width: float
) -> None:
    """Flattened pieces (disjoint, in time order) summed inside a window from the pieces
    that can meet it: the same sums as clipping every piece, edges and empty windows
    included."""
    pieces = disjoint_pieces(gaps, lengths, codes)
    whole = [(float(pieces.start[0]), float(pieces.end[-1]))] if len(pieces) else []
    for a, b in [(lo, lo + width), (lo, lo), *whole]:
        assert clipped_piece_sums(pieces, a, b) == clipped_sums(pieces, a, b)


@given(
    gaps=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=40),
    lengths=st.lists(st.floats(0.0, 5.0), min_size=40, max_size=40),
    a=st.floats(-10.0, 250.0),
    width=st.floats(-1.0, 250.0),
)
def test_covered_by_the_pieces_that_meet_a_span_is_the_coverage_of_all(
    gaps: list[float], lengths: list[float], a: float, width: float
) -> None:
    """How much of one span disjoint pieces cover, from the pieces that meet it alone: the
    coverage (prefix sums over every piece) within rounding, 0 for an empty span."""
    pieces = disjoint_pieces(gaps, lengths, [0] * len(gaps))
    b = a + width
    expected = float(Coverage.of(pieces).between(np.array([a]), np.array([b]))[0])
    got = covered_by(pieces, a, b)
    assert math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-9)
    assert (got == 0.0) if b <= a else got >= 0.0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from([0.0, 1.0, 1.5, 2.0, 3.0]), min_size=1, max_size=6),
        min_size=1,
        max_size=5,
    ),
    st.lists(st.booleans(), min_size=5, max_size=5),
    st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_a_step_log_told_its_rows_order_knows_it_as_one_that_looks(
    batches: list[list[float]], lazy: list[bool], asked: list[bool]
) -> None:
    """Rows appended with their time order checked by the ingest (``append_checked``)
    leave ``unsorted`` what looking at every row says, mixed with rows it must look at,
    asked after any of them or only at the end."""
    told, looked = StepLog(), StepLog()
    for i, (rows, look) in enumerate(zip(batches, lazy, strict=False)):
        ts = np.array(rows)
        raw = ts.tobytes(), np.zeros(len(rows), np.int64), bytes(len(rows))
        looked.ts.frombytes(raw[0])
        if look:  # appended without telling: unsorted looks at them
            told.ts.frombytes(raw[0])
            told.step.extend(raw[1])
            told.is_end.frombytes(raw[2])
        else:
            descends = bool((ts[1:] < ts[:-1]).any())
            told.append_checked(*raw, first_ts=float(ts[0]), descends=descends)
        if asked[i] or i == len(batches) - 1:
            expected = bool((np.diff(np.frombuffer(looked.ts)) < 0).any())
            assert told.unsorted == expected
