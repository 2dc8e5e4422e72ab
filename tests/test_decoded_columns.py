"""The decoder hands the engine the kind codes and steps it worked out (Chunk.columns): the
engine must reach the state it reaches reading them from the events."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine import Accountant
from badput.events import Chunk, Event
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
