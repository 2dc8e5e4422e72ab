"""The JSON-lines codec: round trips, stdlib compatibility, malformed lines."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.events import KIND_CODE, KINDS, DecodedColumns, Event, EventError, Kind, LeanRows
from badput.formats import codec
from badput.formats.codec import (
    _VECTOR_CHECK_BYTES,
    _lines_if_one_object_each,
    decode_block,
    decode_block_coded,
    decode_line,
    decode_lines,
    encode_line,
    encode_lines,
)

_STEP_KINDS = {
    Kind.STEP_START,
    Kind.STEP_END,
    Kind.CHECKPOINT_RESTORE_START,
    Kind.CHECKPOINT_RESTORE_END,
    Kind.CHECKPOINT_SAVE_START,
    Kind.CHECKPOINT_SAVE_END,
    Kind.CHECKPOINT_COMMITTED,
}
_NAMED_KINDS = {
    Kind.CUSTOM_START,
    Kind.CUSTOM_END,
    Kind.ELASTIC_WAIT_START,
    Kind.ELASTIC_WAIT_END,
    Kind.SECTION_SUMMARY,
}


def full_event(kind: str, i: int = 0) -> Event:
    """A valid event of ``kind`` carrying every field that kind uses."""
    fields: dict[str, Any] = {}
    if kind in _STEP_KINDS:
        fields["step"] = 10 + i
    if kind in _NAMED_KINDS:
        fields["name"] = "eval"
    if kind.startswith("data_loading"):
        fields["blocking"] = False
    if kind in (Kind.JOB_END, Kind.ATTEMPT_END):
        fields["status"] = "failed"
    if kind == Kind.ATTEMPT_END:
        fields["exit_code"] = 137
    if kind == Kind.JOB_START:
        fields["hang_timeout"] = 10.0 + i  # badput run --hang-timeout
    if kind == Kind.ELASTIC_SLICES:
        fields.update(active=3, total=4, available=3)
    if kind == Kind.SECTION_SUMMARY:
        fields.update(
            count=12,
            seconds=0.375,
            quantiles={"min": 0.0, "p50": 0.03125, "p90": 0.0625, "max": 0.125},
            last=1_732_000_000.0,
            open_since=1_732_000_000.5,
        )
    if kind == Kind.STEP_START:
        fields.update(tokens=8192, samples=4)
    if kind == Kind.MODEL:
        fields.update(
            params=8_030_261_248,
            layers=32,
            hidden=4096,
            seq_len=8192,
            flops_per_token=5.6e10,
            devices=8,
            peak_flops=989e12,
            device="NVIDIA H100 80GB HBM3",
        )
    return Event(
        ts=1_732_000_000.125 + i,
        kind=kind,
        job="llama-8b",
        attempt=i % 2 if i % 3 else f"a{i}",
        host="h0",
        rank=i,
        pid=4242,
        **fields,
    )


ALL_KINDS = sorted(KINDS)


def test_every_kind_is_covered() -> None:
    assert len(ALL_KINDS) == 37  # + model (issue 35), distributed_init, model_build, teardown (39)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_round_trip_every_kind(kind: str) -> None:
    event = full_event(kind, 3)
    line = encode_line(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_line(line) == event
    assert decode_line(line.rstrip(b"\n")) == event


def test_round_trip_batch_of_all_kinds() -> None:
    events = [full_event(kind, i) for i, kind in enumerate(ALL_KINDS)]
    data = encode_lines(events)
    lines = data.split(b"\n")
    assert lines[-1] == b""
    assert decode_lines(lines[:-1]) == events
    assert data == b"".join(encode_line(e) for e in events)


def test_stdlib_json_reads_every_line() -> None:
    events = [full_event(kind, i) for i, kind in enumerate(ALL_KINDS)]
    for event, line in zip(events, encode_lines(events).splitlines(), strict=True):
        obj = json.loads(line)
        assert obj["ts"] == event.ts
        assert obj["kind"] == event.kind
        assert obj["job"] == "llama-8b"
        assert obj["attempt"] == event.attempt
        assert obj["rank"] == event.rank
        # absent optional fields are left out, not written as null
        assert None not in obj.values()
        if event.step is not None:
            assert obj["step"] == event.step
        if event.kind == Kind.ELASTIC_SLICES:
            assert (obj["active"], obj["total"], obj["available"]) == (3, 4, 3)


def test_minimal_event_is_compact() -> None:
    line = encode_line(Event(ts=1.5, kind="heartbeat", job="j"))
    assert json.loads(line) == {"ts": 1.5, "kind": "heartbeat", "job": "j"}


def test_unknown_fields_and_kinds_are_kept_as_events() -> None:
    event = decode_line(b'{"ts":1,"kind":"future_kind","job":"j","extra":{"a":[1]}}')
    assert event.kind == "future_kind" and event.ts == 1.0


MALFORMED = [
    pytest.param(b"not json", "JSON", id="not-json"),
    pytest.param(b'{"ts":1,"kind":"step_start"', "JSON", id="truncated"),
    pytest.param(b"[1, 2]", "object", id="array"),
    pytest.param(b'{"kind":"heartbeat","job":"j"}', "ts", id="missing-ts"),
    pytest.param(b'{"ts":1,"job":"j"}', "kind", id="missing-kind"),
    pytest.param(b'{"ts":1,"kind":"heartbeat"}', "job", id="missing-job"),
    pytest.param(b'{"ts":1e999,"kind":"heartbeat","job":"j"}', "ts", id="ts-out-of-range"),
    pytest.param(b'{"ts":"1","kind":"heartbeat","job":"j"}', "ts", id="ts-string"),
    pytest.param(b'{"ts":1,"kind":"step_start","job":"j"}', "step", id="step-without-step"),
    pytest.param(b'{"ts":1,"kind":"checkpoint_committed","job":"j"}', "step", id="ckpt-no-step"),
    pytest.param(b'{"ts":1,"kind":"step_end","job":"j","step":1.5}', "step", id="step-float"),
    pytest.param(b'{"ts":1,"kind":"step_end","job":"j","step":"3"}', "step", id="step-str"),
    pytest.param(b'{"ts":1,"kind":"custom_start","job":"j"}', "name", id="custom-no-name"),
    pytest.param(b'{"ts":1,"kind":"custom_end","job":"j","name":""}', "name", id="custom-empty"),
    pytest.param(b'{"ts":1,"kind":"elastic_wait_start","job":"j"}', "name", id="wait-no-name"),
    pytest.param(b'{"ts":1,"kind":"elastic_slices","job":"j","active":1}', "total", id="slices"),
    pytest.param(b'{"ts":1,"kind":"heartbeat","job":""}', "job", id="empty-job"),
    pytest.param(b'{"ts":1,"kind":"heartbeat","job":7}', "job", id="job-int"),
    pytest.param(b'{"ts":1,"kind":"heartbeat","job":"j","rank":"0"}', "rank", id="rank-str"),
    pytest.param(b'{"ts":1,"kind":"heartbeat","job":"j","v":0}', "v", id="version-0"),
]


@pytest.mark.parametrize(("line", "mentions"), MALFORMED)
def test_malformed_line_names_file_and_line(line: bytes, mentions: str) -> None:
    with pytest.raises(EventError) as info:
        decode_line(line, "runs/j/0/h-0-1.jsonl", 17)
    err = info.value
    assert err.file == "runs/j/0/h-0-1.jsonl"
    assert err.line == 17
    assert str(err).startswith("runs/j/0/h-0-1.jsonl:17: ")
    assert mentions in err.message


@pytest.mark.parametrize(("line", "mentions"), MALFORMED)
def test_malformed_line_in_a_batch(line: bytes, mentions: str) -> None:
    good = encode_line(full_event(Kind.STEP_START)).rstrip(b"\n")
    results = decode_lines([good, line, good], "f.jsonl", first_lineno=40)
    assert isinstance(results[0], Event) and isinstance(results[2], Event)
    err = results[1]
    assert isinstance(err, EventError)
    assert (err.file, err.line) == ("f.jsonl", 41)
    assert mentions in err.message


def test_non_finite_ts_is_invalid() -> None:
    # JSON cannot carry NaN/inf; an Event built in memory can. validate() rejects it.
    from badput.events import validate

    for bad in (math.nan, math.inf, -math.inf):
        problem = validate(Event(ts=bad, kind="heartbeat", job="j"))
        assert problem is not None and "ts" in problem


def _per_line(lines: list[bytes], file: str, first: int) -> list[Event | EventError]:
    out: list[Event | EventError] = []
    for i, line in enumerate(lines):
        try:
            out.append(decode_line(line, file, first + i))
        except EventError as exc:
            out.append(exc)
    return out


def _same(a: list[Event | EventError], b: list[Event | EventError]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, EventError):
            assert isinstance(y, EventError)
            assert (x.file, x.line, x.message) == (y.file, y.line, y.message)
        else:
            assert x == y


@pytest.mark.parametrize(
    "bad",
    [
        [],
        [1],
        [0, 5],
        [3, 4],
        [9],
    ],
)
def test_batch_fallback_matches_per_line(bad: list[int]) -> None:
    lines = [encode_line(full_event(k, i)).rstrip(b"\n") for i, k in enumerate(ALL_KINDS[:10])]
    for i, b in enumerate(bad):
        lines[b] = MALFORMED[i * 3 % len(MALFORMED)].values[0]  # type: ignore[assignment]
    batch = decode_lines(lines, "x.jsonl", 100)
    _same(batch, _per_line(lines, "x.jsonl", 100))
    assert sum(isinstance(r, EventError) for r in batch) == len(bad)


def test_batch_with_a_valid_but_invalid_event_falls_back_per_line() -> None:
    # Decodes as JSON (batch succeeds) but fails validation: still per-line errors.
    lines = [
        b'{"ts":1,"kind":"heartbeat","job":"j"}',
        b'{"ts":2,"kind":"step_start","job":"j"}',
        b'{"ts":3,"kind":"custom_end","job":"j","name":"e"}',
    ]
    batch = decode_lines(lines, "f", 1)
    _same(batch, _per_line(lines, "f", 1))
    assert isinstance(batch[1], EventError) and batch[1].line == 2


def test_line_holding_two_objects_is_an_error() -> None:
    good = encode_line(full_event(Kind.HEARTBEAT)).rstrip(b"\n")
    lines = [good, good + b"," + good, good]
    batch = decode_lines(lines, "f", 1)
    _same(batch, _per_line(lines, "f", 1))
    assert isinstance(batch[1], EventError) and batch[1].line == 2


def test_batch_cannot_be_fooled_by_lines_that_rejoin() -> None:
    lines = [
        b'{"ts":1,"kind":"heartbeat","job":"j"',  # an object split over two lines...
        b'"x":1}',
        b'{"ts":2,"kind":"heartbeat","job":"j"},{"ts":3,"kind":"heartbeat","job":"j"}',
    ]
    _same(decode_lines(lines, "f", 1), _per_line(lines, "f", 1))


def test_empty_input() -> None:
    assert decode_lines([]) == []
    assert encode_lines([]) == b""


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"seconds": 1.0}, "count"),
        ({"count": -1, "seconds": 1.0}, "count"),
        ({"count": 2}, "seconds"),
        ({"count": 2, "seconds": -0.5}, "seconds"),
        ({"count": 2, "seconds": 1.0, "quantiles": {"p99": 0.1}}, "quantile"),
        ({"count": 2, "seconds": 1.0, "quantiles": {"p50": -0.1}}, "quantile"),
    ],
)
def test_section_summary_rules(fields: dict[str, Any], problem: str) -> None:
    line = json.dumps(
        {"ts": 1.0, "kind": "section_summary", "job": "j", "name": "forward", **fields}
    )
    with pytest.raises(EventError, match=problem):
        decode_line(line)
    # A block decode of the same line reports it too (the fast path validates named kinds).
    good = json.dumps({"ts": 1.0, "kind": "step_start", "job": "j", "step": 1})
    out = decode_lines([good.encode(), line.encode()], "f.jsonl")
    assert isinstance(out[0], Event)
    assert isinstance(out[1], EventError) and out[1].line == 2


# --- The whole-block check, small and large ------------------------------------------------

#: Lines a block may hold: one object each (the usual), and each way a line can break the
#: one-object-a-line rule that msgspec's decode_lines would still accept.
_LINE_SHAPES = [
    b'{"ts":1,"kind":"heartbeat","job":"j"}\n',
    b'{"ts":2,"kind":"heartbeat","job":"j","name":"}\\n{"}\n',  # the pattern inside a string
    b"\n",  # a blank line
    b' {"ts":3,"kind":"heartbeat","job":"j"}\n',  # leading space
    b'{"ts":4,"kind":"heartbeat","job":"j"} \n',  # trailing space
    b'{"ts":5,"kind":"heartbeat","job":"j"}{"ts":6,"kind":"heartbeat","job":"j"}\n',
    b'{"ts":7,"kind":"heartbeat",\n"job":"j"}\n',  # one object over two lines
    b'{"ts":8,"kind":"heartbeat","job":{"a":1}\n,"x":2}\n',  # a line that starts with ","
]


def _checked_by_counts(block: bytes) -> int:
    """The count-based rule (the small-block path), written out for any size."""
    n_lines = block.count(b"\n")
    ok = (
        n_lines > 0
        and block[:1] == b"{"
        and block[-2:] == b"}\n"
        and block.count(b"}\n{") == n_lines - 1
    )
    return n_lines if ok else 0


@settings(max_examples=300, deadline=None)
@given(
    shapes=st.lists(st.sampled_from(range(len(_LINE_SHAPES))), min_size=1, max_size=12),
    pad=st.sampled_from([0, 70_000]),  # 70,000 bytes a line: past the numpy threshold
    torn=st.booleans(),
)
def test_block_check_with_numpy_equals_the_counts(shapes: list[int], pad: int, torn: bool) -> None:
    """Fails if the numpy path of a large block accepts a block the counts reject (a line
    that rejoins, a blank line, two objects on a line) or counts its lines differently."""
    filler = b',"pad":"' + b"x" * pad + b'"}'
    block = b"".join(_LINE_SHAPES[k].replace(b"}\n", filler + b"\n", 1) for k in shapes)
    if torn:
        block = block[:-1]  # no newline at the end
    assert _lines_if_one_object_each(block) == _checked_by_counts(block)
    decoded = decode_block(block)
    if _checked_by_counts(block) and decoded is not None:
        assert len(decoded) == block.count(b"\n")


def test_large_block_of_events_is_decoded_whole() -> None:
    lines = [encode_line(full_event(Kind.HEARTBEAT, i)) for i in range(3_000)]
    block = b"".join(lines)
    assert len(block) > _VECTOR_CHECK_BYTES
    assert _lines_if_one_object_each(block) == 3_000
    decoded = decode_block(block)
    assert decoded is not None and len(decoded) == 3_000
    assert _lines_if_one_object_each(block[:-1]) == 0  # torn last line
    two = block.replace(b"}\n{", b"}{", 1)  # two objects on the first line: the lines
    assert _lines_if_one_object_each(two) == 2_999  # look right, the decoded count does not
    assert decode_block(two) is None


def decoded_with_columns(
    block: bytes, file: str, first_lineno: int
) -> tuple[list[Event | EventError], DecodedColumns]:
    """``decode_block_coded`` of ``block`` with its columns, whatever its size (below
    ``_VECTOR_CHECK_BYTES`` a block's events are checked one by one, without columns)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(codec, "_VECTOR_CHECK_BYTES", 0)
        mp.setattr(codec, "_LEAN_NEW_BYTES", 0)
        coded = decode_block_coded(block, file, first_lineno, lean=True)
        in_full = decode_block_coded(block, file, first_lineno)
    assert coded is not None
    assert in_full is not None
    items, columns = coded
    full, full_columns = in_full
    assert columns is not None
    assert full_columns is not None
    assert isinstance(full, list)
    assert full_columns.writer is None
    # Decoded lean (one writer's lines) or not, the same items and columns.
    assert columns.kinds.tolist() == full_columns.kinds.tolist()
    assert columns.steps.tolist() == full_columns.steps.tolist()
    if not columns.work:  # the engine then reads no event's step work: none may have any
        assert all(e.tokens is None and e.samples is None for e in full if isinstance(e, Event))
    if isinstance(items, LeanRows):
        # one writer's lines (the columns name it), or several's (each line's, as a number)
        assert (columns.writer is None) != (columns.writers is None)
        _same(items.events(), full)
        _same([x if isinstance(x, EventError) else x.event() for x in items.rows], full)
        for i, x in enumerate(full):  # the writer the columns name is the event's, in full
            if not isinstance(x, EventError):
                writer = columns.writer
                if columns.writers is not None:
                    index, writers = columns.writers
                    writer = writers[int(index[i])]
                assert (x.job, x.attempt, x.host, x.rank, x.pid) == writer
        return full, columns
    assert columns.writer is None
    _same(items, full)
    return items, columns


_STEPLESS = [b'{"ts":%d,"kind":"%s","job":"j"}' % (i, k.encode()) for i, k in enumerate(ALL_KINDS)]


@settings(max_examples=200, deadline=None)
@given(
    picks=st.lists(
        st.one_of(
            st.sampled_from(ALL_KINDS).map(lambda k: encode_line(full_event(k)).rstrip(b"\n")),
            st.sampled_from(_STEPLESS),  # a step kind without step, a named kind without name
            st.sampled_from(
                [
                    b'{"ts":1,"kind":"future_kind","job":"j"}',
                    b'{"ts":1,"kind":"custom_start","job":"j","name":""}',
                    b'{"ts":1,"kind":"elastic_slices","job":"j","active":1}',
                ]
            ),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_a_block_decodes_as_its_lines_do_with_each_kind_code(picks: list[bytes]) -> None:
    """The block decoder checks the per-kind rules on kind codes, not event by event: it
    must still give exactly the per-line results, each item's code (-1: an error, or a
    kind schema v1 lacks) and the step of each event of a step kind (0 elsewhere). A small
    block is checked event by event, and gives no columns."""
    block = b"\n".join(picks) + b"\n"
    small = decode_block_coded(block, "f.jsonl", 7)
    assert small is not None
    assert small[1] is None
    _same(small[0], _per_line(picks, "f.jsonl", 7))
    items, columns = decoded_with_columns(block, "f.jsonl", 7)
    _same(items, _per_line(picks, "f.jsonl", 7))
    expected = [-1 if isinstance(x, EventError) else KIND_CODE[x.kind] for x in items]
    assert columns.kinds.tolist() == expected
    assert columns.kinds.dtype == "int16"
    steps = [
        x.step if isinstance(x, Event) and x.kind in _STEP_KINDS and x.step is not None else 0
        for x in items
    ]
    assert columns.steps.tolist() == steps
    assert columns.rows(1, 3).steps.tolist() == steps[1:3]
