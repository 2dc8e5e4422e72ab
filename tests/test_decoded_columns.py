"""The decoder hands the engine the kind codes and steps it worked out (Chunk.columns): the
engine must reach the state it reaches reading them from the events."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from badput._codec import encode_lines
from badput.engine import Accountant
from badput.engine._batch import Batch
from badput.events import Chunk, Event
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


_WRITERS = [(0, 0, 11), (0, 1, 12), (1, 0, 13), (None, None, None), ("0", 0, 11)]


@st.composite
def files_of_writers(draw: st.DrawFn) -> list[list[Event]]:
    """A few blocks as a read gives them: each mostly by one writer ((attempt, rank, pid),
    0 and "0" among them), some mixing two; jobs now and then another's; ``blocking``
    set in some blocks only."""
    blocks = []
    ts = 1_700_000_000.0
    for _ in range(draw(st.integers(1, 5))):
        writers = draw(st.lists(st.sampled_from(_WRITERS), min_size=1, max_size=2))
        foreign = draw(st.booleans()) and draw(st.booleans())
        marked = draw(st.booleans())
        events = []
        for i in range(draw(st.integers(1, 30))):
            ts += draw(st.sampled_from([0.0, 0.5, 1.0]))
            attempt, rank, pid = writers[i % len(writers)]
            kind = draw(
                st.sampled_from(
                    [
                        "step_start",
                        "step_end",
                        "data_loading_start",
                        "data_loading_end",
                        "heartbeat",
                        "job_start",
                    ]
                )
            )
            fields: dict[str, object] = {}
            if kind.startswith("step"):
                fields["step"] = draw(st.integers(0, 50))
            if kind.startswith("data_loading") and marked and draw(st.booleans()):
                fields["blocking"] = draw(st.booleans())
            job = "q" if foreign and draw(st.booleans()) else "p"
            events.append(
                Event(ts=ts, kind=kind, job=job, attempt=attempt, rank=rank, pid=pid, **fields)  # type: ignore[arg-type]
            )
        blocks.append(events)
    return blocks


@settings(max_examples=150, deadline=None)
@given(files_of_writers())
def test_what_the_blocks_events_share_gives_the_batch_the_events_give(
    blocks: list[list[Event]],
) -> None:
    """The writer, job and ``blocking`` each block's events share (DecodedColumns.writer,
    .job, .loads_plain) give a batch the writers' numbering, the job mask and the plain
    loads that reading every event gives; and the engine the same state and report."""
    chunks, plain_chunks, events, runs, columns = [], [], [], [], []
    line = 1
    for evs in blocks:
        items, cols = decoded_with_columns(encode_lines(evs), "0/a.jsonl", line)
        chunks.append(Chunk("0/a.jsonl", line, items, cols))
        plain_chunks.append(Chunk("0/a.jsonl", line, items))
        runs.append((len(events), len(events) + len(items)))
        events += items
        columns.append(cols)
        line += len(items)
        # what every event shares, as the decoder says it
        writers = {(e.attempt, e.rank, e.pid) for e in evs}
        assert cols.writer == (next(iter(writers)) if len(writers) == 1 else None)
        assert cols.job == (evs[0].job if len({e.job for e in evs}) == 1 else None)
        assert cols.loads_plain == all(e.blocking is None for e in evs)
        assert cols.ts.tolist() == [e.ts for e in evs]
    fast, slow = Batch(events, runs, columns), Batch(events, runs)
    assert fast.keys == slow.keys
    assert fast.group.tolist() == slow.group.tolist()
    assert fast.ts.tolist() == slow.ts.tolist()
    for job in ("p", "q"):
        a, b = fast.same_job(job), slow.same_job(job)
        assert (a is None and b is None) or a.tolist() == b.tolist()  # type: ignore[union-attr]
    assert fast.loads_plain() == slow.loads_plain()
    with_columns, without = Accountant("p"), Accountant("p")
    with_columns.ingest(chunks)
    without.ingest(plain_chunks)
    assert _state(with_columns) == _state(without)
    assert with_columns.report() == without.report()
