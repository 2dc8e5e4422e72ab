"""Marks that arrived out of time order (two processes of one rank, each writing its own
file) are read by the partition through their order (engine/_rows.SortedMarks), not as a
sorted copy of every column: the same rows, and the same report."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine import Accountant, _rows, _sealing
from badput.engine._intervals import Marks
from badput.engine._rows import SortedMarks, narrowed
from badput.engine._stream import MarkLog
from badput.events import Chunk, Event

T0 = 1_700_000_000.0


def _marks(ts: list[float]) -> Marks:
    n = len(ts)
    rng = np.random.default_rng(n)
    return Marks(
        np.array(ts, np.float64),
        rng.permutation(n).astype(np.int64),  # arrival numbers, not in time order
        rng.integers(0, 3, n).astype(np.int32),
        rng.integers(0, 2, n).astype(np.bool_),
        rng.integers(0, 2, n).astype(np.bool_),
        np.arange(n, dtype=np.int64),
        rng.integers(-1, 2, n).astype(np.int32),
    )


def _rows_of(m: Marks) -> list[tuple[object, ...]]:
    return list(
        zip(
            m.ts.tolist(),
            m.seq.tolist(),
            m.bucket.tolist(),
            m.is_start.tolist(),
            m.blocking.tolist(),
            m.line.tolist(),
            m.source.tolist(),
            strict=True,
        )
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1.0, 1.5, 2.0, 7.0]), max_size=40),
    st.integers(0, 45),
    st.integers(0, 45),
    st.integers(0, 45),
    st.integers(0, 45),
)
def test_rows_read_through_the_order_are_the_sorted_rows(
    ts: list[float], a: int, b: int, c: int, d: int
) -> None:
    raw = _marks(ts)
    lazy, copy = SortedMarks(raw), raw.sorted()
    assert len(lazy) == len(copy)
    assert lazy.ts.tolist() == copy.ts.tolist()
    assert _rows_of(lazy.take(slice(a, b))) == _rows_of(copy.take(slice(a, b)))
    inner = narrowed(lazy, a, b)
    assert isinstance(inner, SortedMarks)  # still no copy
    assert _rows_of(inner.take(slice(c, d))) == _rows_of(copy.take(slice(a, b)).take(slice(c, d)))
    assert _rows_of(narrowed(copy, a, b)) == _rows_of(copy.take(slice(a, b)))


def _two_loaders(steps: int, seed: int) -> list[Chunk]:
    """A trainer's steps in one file; its loads written by two processes of the same rank,
    each in its own file (the stream's marks: one file's, then the other's)."""
    rng = np.random.default_rng(seed)
    trainer = [Event(ts=T0, kind="job_start", job="p", attempt=0, rank=0, pid=1)]
    loaders: dict[int, list[Event]] = {2: [], 3: []}
    t = T0
    for s in range(1, steps + 1):
        t += 1.0
        pid = 2 + int(rng.integers(0, 2))
        trainer.append(Event(ts=t, kind="step_start", job="p", attempt=0, rank=0, pid=1, step=s))
        for kind, at in (("data_loading_start", 0.1), ("data_loading_end", 0.3)):
            loaders[pid].append(Event(ts=t + at, kind=kind, job="p", attempt=0, rank=0, pid=pid))
        trainer.append(
            Event(ts=t + 0.9, kind="step_end", job="p", attempt=0, rank=0, pid=1, step=s)
        )
        if s % 50 == 0:
            trainer.append(
                Event(
                    ts=t + 0.95,
                    kind="checkpoint_committed",
                    job="p",
                    attempt=0,
                    rank=0,
                    pid=1,
                    step=s,
                )
            )
    trainer.append(Event(ts=t + 5.0, kind="job_end", job="p", attempt=0, rank=0, pid=1))
    return [
        Chunk("0/h-1.jsonl", 1, list(trainer)),
        Chunk("0/h-2.jsonl", 1, list(loaders[2])),
        Chunk("0/h-3.jsonl", 1, list(loaders[3])),
    ]


@pytest.mark.parametrize("closed_block", [64, 1 << 18])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_report_through_the_order_is_the_report_of_the_sorted_copy(
    monkeypatch: pytest.MonkeyPatch, closed_block: int, seed: int
) -> None:
    """Whole and windowed, sealed in blocks or whole: the report of marks read through
    their order is that of the sorted copy the partition read before."""
    monkeypatch.setattr(_sealing, "CLOSED_BLOCK", closed_block)
    chunks = _two_loaders(600, seed)
    lazy, copy = Accountant("p"), Accountant("p")
    lazy.ingest(chunks)
    copy.ingest(chunks)
    (stream,) = [s for s in lazy._ing.streams.values() if len(s.marks)]
    assert stream.marks.unsorted  # the case at hand
    reports = [lazy.report(), lazy.report(window=(T0 + 100.0, T0 + 300.0))]
    monkeypatch.setattr(
        _rows.StreamView,
        "marks",
        property(lambda view: view._stream.marks.raw().sorted()),  # the sorted copy
    )
    assert reports == [copy.report(), copy.report(window=(T0 + 100.0, T0 + 300.0))]
    assert reports[0].buckets["data_loading"] == pytest.approx(600 * 0.2)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0]), min_size=0, max_size=30),
            st.floats(-8.0, 8.0),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_the_kept_time_order_of_a_growing_log_is_the_sort_of_all_its_marks(
    pieces: list[tuple[list[float], float, bool]],
) -> None:
    """Marks appended piece by piece, each piece a little earlier or later than the last
    (a late file), sometimes numbered before marks already there (``older``: a worker's
    read merged): after every piece the kept ``(ts, seq)`` order and times are those of a
    sort of all the marks (merged in, written over the kept buffers, or sorted again)."""
    log = MarkLog()
    base, seq_hi, seq_lo = 0.0, 0, -1
    for gaps, shift, older in pieces:
        base += shift
        ts = base + np.cumsum(np.array(gaps, np.float64))
        if older:
            seq = np.arange(seq_lo - len(ts), seq_lo, dtype=np.int64)
            seq_lo -= len(ts)
        else:
            seq = np.arange(seq_hi, seq_hi + len(ts), dtype=np.int64)
            seq_hi += len(ts)
        log.ts.frombytes((T0 + ts).tobytes())
        log.seq.extend(seq, fits=False)
        if not len(log):
            continue
        order, times = log.time_order()
        all_ts = np.array(log.ts)  # (a copy: a view would keep the log from growing)
        want = np.lexsort((log.seq.column().copy(), all_ts))
        assert order.tolist() == want.tolist()
        assert times.tolist() == all_ts[want].tolist()


def test_a_logs_columns_in_time_order_are_its_sorted_copy() -> None:
    """``MarkLog.columns()`` of marks that arrived out of order gathers every column through
    the kept time order: the rows of a sort of all of them, after each late piece too."""
    log = MarkLog()
    rng = np.random.default_rng(7)
    seq_hi = seq_lo = 0
    for k in range(8):
        n = int(rng.integers(1, 40))
        ts = T0 + rng.choice([0.0, 1.0, 2.5, 4.0], n)  # ties, and earlier than before
        if k % 3 == 2:  # numbered before every mark there (a worker's read merged)
            seq = np.arange(seq_lo - n, seq_lo, dtype=np.int64)
            seq_lo -= n
        else:
            seq = np.arange(seq_hi, seq_hi + n, dtype=np.int64)
            seq_hi += n
        log.append_columns(dataclasses.replace(_marks(ts.tolist()), seq=seq))
        log.time_order()  # (a query's: kept, then merged into by the next piece)
        assert _rows_of(log.columns()) == _rows_of(log.raw().sorted())
    assert log.unsorted
