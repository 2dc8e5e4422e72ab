"""The decoder hands the engine the kind codes and steps it worked out (Chunk.columns): the
engine must reach the state it reaches reading them from the events."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine import Accountant
from badput.events import Chunk, DecodedColumns, Event
from badput.formats.codec import encode_lines
from test_codec import decoded_with_columns
from test_engine_properties import event_logs
from test_pack import _state


@settings(max_examples=60, deadline=None)
@given(events=event_logs(), bad=st.lists(st.integers(0, 200), max_size=3))
def test_decoded_columns_give_the_state_the_events_give(
    events: list[Event], bad: list[int]
) -> None:
    lines = encode_lines(events).split(b"\n")[:-1]
    for at in bad:  # invalid events (a step kind without step) split the runs
        lines.insert(min(at, len(lines)), b'{"ts":1,"kind":"step_end","job":"p"}')
    items, columns = decoded_with_columns(b"\n".join(lines) + b"\n", "0/a.jsonl", 1)
    with_columns, without = Accountant("p"), Accountant("p")
    half = len(items) // 2
    with_columns.ingest(
        [
            Chunk("0/a.jsonl", 1, items[:half], columns.rows(0, half)),
            Chunk("0/a.jsonl", 1 + half, items[half:], columns.rows(half, len(items))),
        ]
    )
    without.ingest(
        [Chunk("0/a.jsonl", 1, items[:half]), Chunk("0/a.jsonl", 1 + half, items[half:])]
    )
    assert _state(with_columns) == _state(without)
    assert with_columns.report() == without.report()


def test_a_read_without_columns_in_one_chunk_reads_them_all_from_the_events() -> None:
    """Columns are used only when every chunk of a read has them."""
    lines = encode_lines(
        [Event(ts=1.0 + i, kind="step_start", job="p", step=i, attempt=0) for i in range(4)]
    )
    items, columns = decoded_with_columns(lines, "0/a.jsonl", 1)
    wrong = columns._replace(steps=columns.steps + 100)  # would show if used
    acc, ref = Accountant("p"), Accountant("p")
    acc.ingest(
        [Chunk("0/a.jsonl", 1, items[:2], wrong.rows(0, 2)), Chunk("0/a.jsonl", 3, items[2:])]
    )
    ref.ingest([Chunk("0/a.jsonl", 1, items)])
    assert _state(acc) == _state(ref)


def test_runs_joined_keep_each_items_writer() -> None:
    """The runs of one read joined as one batch keep what their decoders said of the
    writers: one writer when every run is of it; else each item's (runs of one writer
    each, runs of several), as an index into the writers; else nothing."""
    import numpy as np

    from badput.engine._accountant import _joined

    w1, w2 = ("p", 0, "h", 0, 1), ("p", 0, "h", 1, 2)
    kinds, steps = np.zeros(2, np.int16), np.zeros(2, np.int64)
    one = DecodedColumns(kinds, steps, w1)
    several = DecodedColumns(kinds, steps, writers=(np.array([1, 0], np.int32), (w1, w2)))
    other = DecodedColumns(kinds, steps, writers=(np.array([0, 0], np.int32), (w2,)))

    def each(columns: DecodedColumns) -> list[object]:
        assert columns.writer is None and columns.writers is not None
        index, writers = columns.writers
        return [writers[i] for i in index.tolist()]

    assert each(_joined([several, other])) == [w2, w1, w2, w2]
    assert each(_joined([one, several])) == [w1, w1, w2, w1]
    assert each(_joined([one, DecodedColumns(kinds, steps, w2)])) == [w1, w1, w2, w2]
    assert _joined([one, one]).writer == w1
    assert _joined([one, one]).writers is None
    unknown = _joined([one, DecodedColumns(kinds, steps)])
    assert unknown.writer is None and unknown.writers is None
