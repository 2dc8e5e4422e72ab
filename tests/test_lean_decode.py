"""Blocks of one writer's lines are decoded as lean events (events.LeanEvent): the writer's
fields typed as exactly the first line's values, so that any line of another writer, or
one that repeats a writer's field with another value, sends the block to the full decode.

What is checked: whatever the lines, the lean decode gives the items, columns and writer
the full decode gives (or falls back to it); the engine reaches the same report from
either, on the read-path fuzzer's damaged logs, read serially and in parallel; and the
items a store hands its readers are plain :class:`Event` s.
"""

from __future__ import annotations

import json
import pickle
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import fields

from _log_fuzz import JOB, make_case, write_case
from _spy import spy
from badput import analysis
from badput.analysis import LiveJob, analyze
from badput.engine import Accountant
from badput.events import Event, LeanEvent, LeanRows
from badput.formats import codec
from badput.formats.codec import decode_block_coded, encode_lines
from badput.report import to_json
from badput.store import JsonlStore
from test_codec import decoded_with_columns

_WRITER_FIELDS = ("job", "attempt", "host", "rank", "pid")

# Writers as their fields (None: the field is left out), and values of the wrong type.
_WRITERS: list[dict[str, Any]] = [
    {"job": "j", "attempt": 0, "host": "h", "rank": 0, "pid": 7},
    {"job": "j", "attempt": None, "host": None, "rank": 0, "pid": 7},
    {"job": "j", "attempt": "a0", "host": "h", "rank": None, "pid": None},
]
_OTHER_VALUES: dict[str, list[Any]] = {
    "job": ["k", "J", ""],
    "attempt": [1, "0", None, True, 0.0, 2**60],
    "host": ["g", None, 5],
    "rank": [1, "0", None, 0.5, -1],
    "pid": [8, 7.0, None, "7"],
}
_BODIES = [
    '"kind":"step_start","step":3',
    '"kind":"step_end","step":3',
    '"kind":"step_end"',  # a step kind without its step: an error item
    '"kind":"data_loading_start"',
    '"kind":"data_loading_end","blocking":true',
    '"kind":"custom_start","name":"eval"',
    '"kind":"custom_end"',  # a named kind without its name: an error item
    '"kind":"heartbeat","extra":{"rank":9}',  # a writer's name inside an unknown field
    '"kind":"future_kind"',
    '"kind":"checkpoint_committed","step":2',
    '"kind":"step_end","step":4,"tokens":512',  # step work: opens the writer's fields
    '"kind":"step_start","step":5,"samples":8,"tokens":null',
    '"kind":"step_end","step":5,"tok\\u0065ns":7',  # the same name, spelled with an escape
]


def _pairs(writer: dict[str, Any]) -> list[str]:
    return [f'"{k}":{json.dumps(v)}' for k, v in writer.items() if v is not None]


# How a line's writer is spelled: as the block's writer, or not quite.
_SPELLINGS = ["same", "other", "again_same", "again_other", "before_other", "escaped", "null"]


@st.composite
def _block(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A block of lines and whether every line is plainly of its first line's writer."""
    writer = draw(st.sampled_from(_WRITERS))
    n = draw(st.integers(1, 12))
    lines = []
    plain = True
    for i in range(n):
        body = draw(st.sampled_from(_BODIES))
        spelling = "same" if i == 0 else draw(st.sampled_from(_SPELLINGS))
        field = draw(st.sampled_from(_WRITER_FIELDS))
        other = draw(st.sampled_from(_OTHER_VALUES[field]))
        fields = dict(writer)
        head = [f'"ts":{1.5 + i}', body]
        tail: list[str] = []
        if spelling == "other":
            fields[field] = other
        elif spelling == "again_same" and writer[field] is not None:
            tail.append(f'"{field}":{json.dumps(writer[field])}')
        elif spelling == "again_other":  # the later value is the one that counts
            tail.append(f'"{field}":{json.dumps(other)}')
        elif spelling == "before_other":  # ... so this one is overridden (not lean, though)
            head.insert(0, f'"{field}":{json.dumps(other)}')
        elif spelling == "escaped":  # the same name, spelled with an escape
            escaped = f"\\u{ord(field[0]):04x}{field[1:]}"
            tail.append(f'"{escaped}":{json.dumps(other)}')
        elif spelling == "null":
            tail.append(f'"{field}":null')
        lines.append("{" + ",".join(head + _pairs(fields) + tail) + "}")
        plain = plain and spelling == "same"
    return ("\n".join(lines) + "\n").encode(), plain


@settings(max_examples=400, deadline=None)
@given(block=_block())
def test_a_block_decodes_lean_as_it_decodes_in_full(block: tuple[bytes, bool]) -> None:
    """``decoded_with_columns`` checks the lean items, columns and writer against the full
    decode's; a block whose every line plainly has its first line's writer is decoded lean
    (the speed of the common case is not lost without notice)."""
    data, plain = block
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(codec, "_VECTOR_CHECK_BYTES", 0)
        mp.setattr(codec, "_LEAN_NEW_BYTES", 0)
        if decode_block_coded(data, "f.jsonl", 3) is None:  # a line is no event
            assert decode_block_coded(data, "f.jsonl", 3, lean=True) is None  # (line by line)
            return
    items, columns = decoded_with_columns(data, "f.jsonl", 3)
    if plain and isinstance(items[0], Event):
        assert columns.writer is not None


def test_each_way_of_not_being_the_writer_falls_back() -> None:
    """Explicit examples: the second line is of another writer, repeats a writer's field
    with another value (before or after), spells it with an escape, or gives it the wrong
    type; a field repeated with the same value is still the writer's."""
    first = '{"ts":1,"kind":"heartbeat","job":"j","attempt":0,"rank":0,"pid":7}'
    seconds = [
        '{"ts":2,"kind":"heartbeat","job":"j","attempt":1,"rank":0,"pid":7}',
        '{"ts":2,"kind":"heartbeat","job":"j","attempt":0,"rank":0,"pid":7,"pid":8}',
        '{"ts":2,"kind":"heartbeat","job":"j","attempt":0,"rank":0,"\\u0070id":8}',
        '{"ts":2,"kind":"heartbeat","job":"j","attempt":0,"rank":0,"pid":7.0}',
        '{"ts":2,"kind":"heartbeat","job":"j","attempt":"0","rank":0,"pid":7}',
        '{"ts":2,"kind":"heartbeat","job":"j","rank":0,"pid":7}',
        '{"ts":2,"kind":"heartbeat","job":"j","attempt":0,"rank":0,"pid":7,"host":"h"}',
    ]
    for second in seconds:
        block = f"{first}\n{second}\n".encode()
        if second.endswith("7.0}"):  # not an event at all: the block is read line by line
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(codec, "_VECTOR_CHECK_BYTES", 0)
                mp.setattr(codec, "_LEAN_NEW_BYTES", 0)
                assert decode_block_coded(block, "f", 1, lean=True) is None
            continue
        _, columns = decoded_with_columns(block, "f", 1)
        assert columns.writer is None, second
    same = '{"ts":2,"kind":"heartbeat","job":"j","pid":7,"attempt":0,"rank":0,"pid":7}'
    _, columns = decoded_with_columns(f"{first}\n{same}\n".encode(), "f", 1)
    assert columns.writer == ("j", 0, None, 0, 7)


def test_a_store_hands_out_events_not_lean_ones(tmp_path: Path) -> None:
    """A large file is decoded lean for the engine; its chunks' ``items`` are the
    :class:`Event` s a full decode gives (``==``, the same type, encoded the same)."""
    events = [
        Event(ts=1.0 + i, kind="step_start", job="j", attempt=0, host="h", rank=0, pid=7, step=i)
        for i in range(5000)
    ]
    path = tmp_path / "j" / "0" / "h-0-7.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(events))
    result = JsonlStore(tmp_path).read("j", lean=True)
    assert result.chunks[0].columns is not None
    assert result.chunks[0].columns.writer == ("j", 0, "h", 0, 7)
    items = [item for chunk in result.chunks for item in chunk.items]
    assert all(type(item) is Event for item in items)
    assert items == events
    assert encode_lines(items) == path.read_bytes()  # type: ignore[arg-type]
    assert result.n_items == 5000


def test_the_engine_keeps_values_of_lean_events_not_the_events(tmp_path: Path) -> None:
    """The engine reads lean events (the rare kinds too: lifecycle, checkpoints, named
    intervals, section summaries) and keeps values: its state pickles (a worker of a
    parallel read sends it back so; the class of a lean event, made at run time, cannot
    be pickled) and gives the same report once unpickled."""
    ident: dict[str, Any] = {"job": "j", "attempt": 0, "host": "h", "rank": 0, "pid": 7}
    events = [Event(ts=1.0, kind="job_start", **ident)]
    for i in range(3000):
        events.append(Event(ts=2.0 + i, kind="step_start", step=i, **ident))
        events.append(Event(ts=2.1 + i, kind="custom_start", name="eval", **ident))
        events.append(Event(ts=2.2 + i, kind="custom_end", name="eval", **ident))
        events.append(Event(ts=2.5 + i, kind="step_end", step=i, **ident))
        if i % 500 == 0:
            events.append(Event(ts=2.6 + i, kind="checkpoint_committed", step=i, **ident))
            events.append(
                Event(ts=2.6 + i, kind="section_summary", name="fwd", count=1, seconds=0.1, **ident)
            )
    path = tmp_path / "j" / "0" / "h-0-7.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(events))
    with spy(codec, "_decode_lean", lambda args, result: result is not None) as lean_blocks:
        live = LiveJob(tmp_path, "j", parallel=False)
        live.update()
    assert lean_blocks and all(lean_blocks)
    copy = pickle.loads(pickle.dumps(live.accountant))
    assert copy.report() == live.accountant.report()


def test_a_lean_chunk_decodes_its_events_once_for_all_its_slices() -> None:
    block = encode_lines([Event(ts=float(i), kind="heartbeat", job="j", pid=1) for i in range(10)])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(codec, "_VECTOR_CHECK_BYTES", 0)
        mp.setattr(codec, "_LEAN_NEW_BYTES", 0)
        coded = decode_block_coded(block, "f", 1, lean=True)
    assert coded is not None
    rows = coded[0]
    assert isinstance(rows, LeanRows)
    calls = []
    full = rows._full
    rows._full = lambda: calls.append(1) or full()  # type: ignore[method-assign]
    a, b = rows[0:4], rows[4:10]
    assert [e.ts for e in a.events()] == [0.0, 1.0, 2.0, 3.0]  # type: ignore[union-attr]
    assert [e.ts for e in b.events()] == [float(i) for i in range(4, 10)]  # type: ignore[union-attr]
    assert len(calls) == 1


def test_a_lean_block_names_the_fields_its_lines_may_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's lean decode says which optional fields a block's lines may hold: a
    data-load log that marks no load ``blocking`` is read without looking at any event's;
    once a line marks one, its writer's blocks say so, and the report is a full decode's."""
    monkeypatch.setattr(codec, "_VECTOR_CHECK_BYTES", 0)
    monkeypatch.setattr(codec, "_LEAN_NEW_BYTES", 0)
    monkeypatch.setattr(codec, "_lean_decoders", {})  # (none opened by an earlier test)
    monkeypatch.setattr(codec, "_shared_files", {})
    ident: dict[str, Any] = {"job": JOB, "attempt": 0, "rank": 0, "pid": 90_417}

    def steps(first: int, marked: int | None) -> list[Event]:
        out = []
        for step in range(first, first + 50):
            ts = 1_732_000_000.0 + step
            blocking = False if step == marked else None
            out += [
                Event(ts=ts, kind="step_start", step=step, **ident),
                Event(ts=ts + 0.1, kind="data_loading_start", blocking=blocking, **ident),
                Event(ts=ts + 0.3, kind="data_loading_end", blocking=blocking, **ident),
                Event(ts=ts + 0.9, kind="step_end", step=step, **ident),
            ]
        return out

    plain, marked = encode_lines(steps(0, None)), encode_lines(steps(50, 60))
    first = decode_block_coded(plain, "a.jsonl", 1, lean=True)
    assert first is not None and first[1] is not None
    assert "blocking" not in (first[1].fields or {"blocking"})
    assert {"ts", "step", "rank"} <= (first[1].fields or set())
    then = decode_block_coded(marked, "a.jsonl", 201, lean=True)
    assert then is not None and then[1] is not None and isinstance(then[0], LeanRows)
    assert "blocking" in (then[1].fields or set())
    path = tmp_path / JOB / "0" / "h-0-90417.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(plain + marked)
    lean, full = _reports(tmp_path)
    assert lean == full
    # 99 blocking loads of 0.2 s; the one marked blocking: false is not counted
    assert json.loads(lean)["buckets"]["data_loading"] == pytest.approx(99 * 0.2, abs=1e-4)


def _reports(root: Path, *, parallel: bool | None = False) -> tuple[str, str]:
    """The report of the fuzzed job with every block decoded lean where it can be, and with
    no block decoded lean."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(codec, "_VECTOR_CHECK_BYTES", 0)
        mp.setattr(codec, "_LEAN_NEW_BYTES", 0)
        lean = to_json(analyze(root, JOB, parallel=parallel))
        mp.setattr(codec, "_decode_lean", lambda *args: None)
        full = to_json(analyze(root, JOB, parallel=parallel))
    return lean, full


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.randoms(use_true_random=False))
def test_damaged_logs_give_the_same_report_lean_or_not(rnd: random.Random) -> None:
    """The read-path fuzzer's damaged logs (byte flips in writers' fields, swapped and
    duplicated lines, wrong types...): the engine's report is the same either way."""
    case = make_case(rnd)
    with tempfile.TemporaryDirectory() as tmp:
        write_case(case, Path(tmp))
        lean, full = _reports(Path(tmp))
    assert lean == full, case.mutations


def test_a_parallel_read_of_lean_blocks_gives_the_serial_report(tmp_path: Path) -> None:
    """Workers decode lean too, and send back only what the engine keeps (events, not
    lean ones: those cannot be pickled). Four attempt files of a few thousand lines."""
    rnd = random.Random(3)
    lines: dict[str, list[Event]] = {}
    ts = 1_732_000_000.0
    for attempt in range(4):
        evs = lines.setdefault(f"{attempt}/h-0-{100 + attempt}.jsonl", [])
        ident: dict[str, Any] = {"job": JOB, "attempt": attempt, "host": "h", "rank": 0}
        ident["pid"] = 100 + attempt
        evs.append(Event(ts=ts, kind="job_start", **ident))
        for step in range(800):
            evs.append(Event(ts=ts, kind="step_start", step=step, **ident))
            evs.append(Event(ts=ts + 0.01, kind="data_loading_start", **ident))
            evs.append(Event(ts=ts + 0.03, kind="data_loading_end", **ident))
            if step % 100 == 50:
                evs.append(Event(ts=ts + 0.04, kind="custom_start", name="eval", **ident))
                evs.append(Event(ts=ts + 0.06, kind="custom_end", name="eval", **ident))
            if step % 200 == 199:
                evs.append(Event(ts=ts + 0.07, kind="checkpoint_committed", step=step, **ident))
            ts += 0.1 + rnd.random() * 0.01
            evs.append(Event(ts=ts, kind="step_end", step=step, **ident))
        evs.append(Event(ts=ts + 1, kind="attempt_end", status="failed", exit_code=1, **ident))
        ts += 5
    for rel, evs in lines.items():
        path = tmp_path / JOB / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_lines(evs))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(analysis, "PARALLEL_MIN_BYTES", 0)
        mp.setattr(analysis, "PARALLEL_MIN_BYTES_PER_ATTEMPT", 0)
        mp.setattr(analysis, "READ_SLICE_BYTES", 64 * 1024)
        with spy(Accountant, "merge") as merged:
            lean_parallel, full_parallel = _reports(tmp_path, parallel=True)
    # the workers' parts were merged (a part holding a lean event cannot be sent back, and
    # its slices would be read again serially: the same report, without a word)
    assert len(merged) >= 2
    with spy(codec, "_decode_lean", lambda args, result: result is not None) as lean_blocks:
        lean_serial, full_serial = _reports(tmp_path)
    assert lean_parallel == full_serial
    assert full_parallel == full_serial
    assert lean_serial == full_serial
    assert lean_blocks.count(True) >= 4  # each attempt's file (and not only the full decode)
    report = json.loads(lean_serial)
    assert len(report["attempts"]) == 4
    assert report["buckets"]["data_loading"] > 0
    assert {r["host"] for r in report["ranks"]} == {"h"}  # (a lean block's: its writer's)


def test_a_writer_s_decoder_is_made_for_a_block_that_pays_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Making a writer's decoder costs what decoding some 1,400 lines lean saves: a small
    block of a new writer is decoded in full; once a large block made it, small blocks of
    that writer are decoded lean too. Once the decoder of any writer's lines is made (a
    file ranks share), a small block of a new writer is decoded lean by it, its writer
    named as a large block's is."""
    monkeypatch.setattr(codec, "_lean_decoders", {})
    ident: dict[str, Any] = {"job": "pays", "attempt": 0, "host": "h", "rank": 0, "pid": 4321}
    small = encode_lines([Event(ts=float(i), kind="heartbeat", **ident) for i in range(900)])
    large = encode_lines([Event(ts=float(i), kind="heartbeat", **ident) for i in range(3000)])
    assert 64 * 1024 <= len(small) < codec._LEAN_NEW_BYTES <= len(large)
    first = decode_block_coded(small, "f", 1, lean=True)
    assert first is not None
    assert first[1] is not None
    assert first[1].writer is None and first[1].writers is None
    assert decode_block_coded(large, "f", 1, lean=True)[1].writer == tuple(ident.values())  # type: ignore[index]
    again = decode_block_coded(small, "f", 1, lean=True)
    assert again is not None
    assert again[1] is not None
    assert again[1].writer == tuple(ident.values())
    shared = encode_lines(_shared_file_events(4, 200))
    assert len(shared) >= codec._LEAN_NEW_BYTES
    assert decode_block_coded(shared, "g", 1, lean=True)[1].writers is not None  # type: ignore[index]
    other = {**ident, "pid": 4322}  # a writer whose decoder is not made
    small = encode_lines([Event(ts=float(i), kind="heartbeat", **other) for i in range(900)])
    coded = decode_block_coded(small, "h", 1, lean=True)
    assert coded is not None and isinstance(coded[0], LeanRows)
    assert coded[1] is not None and coded[1].writer == tuple(other.values())
    assert tuple(other.values()) not in codec._lean_decoders


def test_kinds_of_v1_are_one_object_each_and_a_new_kind_is_still_read_lean() -> None:
    """A writer's decoder takes the kinds of schema v1 only (each kind one object: no new
    string a line); the first block with a kind v1 lacks (a newer recorder's) makes it take
    any kind, for that block and the writer's later ones, which are still decoded lean."""
    ident: dict[str, Any] = {"job": "kinds", "attempt": 0, "host": "h", "rank": 0, "pid": 98}
    plain = [Event(ts=float(i), kind="step_start", step=i, **ident) for i in range(3000)]
    block = encode_lines(plain)
    coded = decode_block_coded(block, "f", 1, lean=True)
    assert coded is not None
    assert isinstance(coded[0], LeanRows)
    rows = coded[0].rows
    assert rows[0].kind is rows[1].kind  # type: ignore[union-attr]
    newer = [*plain[:10], Event(ts=11.0, kind="future_kind", **ident), *plain[10:]]
    with spy(codec, "_lean_decoder", lambda args, result: args) as made:
        coded = decode_block_coded(encode_lines(newer), "f", 1, lean=True)
        assert coded is not None
        assert coded[1] is not None
        assert coded[1].writer == tuple(ident.values())
        items, columns = decoded_with_columns(encode_lines(newer), "f", 1)
        assert [e.kind for e in items if isinstance(e, Event)][10] == "future_kind"
        assert columns.kinds.tolist()[10] == -1
        again = decode_block_coded(block, "f", 1, lean=True)
        assert again is not None
        assert again[1] is not None
        assert again[1].writer == tuple(ident.values())
    assert [args[:2] for args in made] == [
        (tuple(ident.values()), frozenset({"kind", "step"}))
    ]  # made again: any kind (its step opened by the first block)


def test_a_lean_event_has_every_field_of_an_event_of_the_same_type() -> None:
    """``LeanEvent`` mirrors ``Event`` field for field: ``ts``, ``kind`` and ``job`` as
    fields of the same types, every other field as a class attribute with Event's default
    (what a field absent from a writer's lines reads as), and a writer's class with every
    field opened has each of Event's types and defaults: a field added to one and not the
    other would be dropped, or not checked, by a lean decode. ``event()`` gives back the
    same event."""

    def described(cls: type) -> list[tuple[str, object, object, bool]]:
        return [(f.name, f.type, f.default, f.required) for f in fields(cls)]

    assert described(LeanEvent) == described(Event)[:3]
    assert [f.name for f in fields(Event)][:3] == ["ts", "kind", "job"]
    for f in fields(Event)[3:]:
        assert getattr(LeanEvent, f.name) == f.default, f.name
        assert f.name in LeanEvent.__annotations__, f.name
    writer = ("j", "a", "h", 1, 2)
    opened = frozenset(Event.__struct_fields__) - {"ts", "job", *codec._WRITER_FIELDS}
    every = codec._lean_decoder(writer, opened).decoder.type
    by_name = {f.name: f for f in fields(every)}
    for f in fields(Event):
        if f.name not in codec._WRITER_FIELDS:
            assert (by_name[f.name].type, by_name[f.name].default) == (f.type, f.default)
    e = Event(
        ts=1.0,
        kind="custom_start",
        job="j",
        attempt="a",
        host="h",
        rank=1,
        pid=2,
        name="eval",
        quantiles={"p50": 0.5},
        v=1,
    )
    lean = every(**{f.name: getattr(e, f.name) for f in fields(Event)})
    assert lean.event() == e
    assert type(lean.event()) is Event
    # A writer's class that opened nothing: every optional field reads as Event's default.
    bare = codec._lean_decoder(writer).decoder.decode(
        b'{"ts":1.0,"kind":"heartbeat","job":"j","attempt":"a","host":"h","rank":1,"pid":2}'
    )
    assert bare.event() == Event(ts=1.0, kind="heartbeat", job="j", attempt="a", host="h",
                                 rank=1, pid=2)  # fmt: skip
    assert set(type(bare).__struct_fields__) == {"ts", "kind", "job", "v", *codec._WRITER_FIELDS}


def test_a_writer_s_fields_are_opened_by_the_first_line_that_holds_them() -> None:
    """A field the writer's lines have not held is no field of its class; the first block
    with one (an Event field, or a field schema v1 lacks, which is kept unread) opens it,
    and the block and the writer's later ones decode lean as they decode in full."""
    ident: dict[str, Any] = {"job": "opens", "attempt": 0, "host": "h", "rank": 0, "pid": 77}
    beats = [Event(ts=float(i), kind="heartbeat", **ident) for i in range(3000)]
    coded = decode_block_coded(encode_lines(beats), "f", 1, lean=True)
    assert coded is not None and coded[1] is not None and coded[1].writer is not None
    lines = [
        *beats,
        Event(ts=6.0, kind="custom_start", name="eval", **ident),
        Event(ts=7.0, kind="data_loading_start", blocking=False, **ident),
    ]
    block = encode_lines(lines)[:-2] + b',"from_a_newer_recorder":[1,2]}\n'
    with spy(codec, "_lean_decoder", lambda args, result: args) as made:
        coded = decode_block_coded(block, "f", 1, lean=True)
    assert coded is not None and coded[1] is not None
    assert coded[1].writer == tuple(ident.values())  # still lean
    assert [o for _, o, *_ in made] == [
        frozenset({"name"}),
        frozenset({"name", "blocking"}),
        frozenset({"name", "blocking", "from_a_newer_recorder"}),
    ]
    assert isinstance(coded[0], LeanRows)
    assert [r.event() for r in coded[0].rows] == lines  # type: ignore[union-attr]
    full = decode_block_coded(block, "f", 1, lean=False)
    assert full is not None and full[0] == lines


def test_a_writer_s_step_work_is_read_from_the_first_block_that_records_it(
    tmp_path: Path,
) -> None:
    """A writer's decoder first takes ``tokens`` and ``samples`` as absent, so that the
    engine knows a block of a writer that records no step work holds none (and reads
    neither field of its events); the first block with work opens both fields for it and
    for the writer's later blocks, whose work is counted in full."""
    ident: dict[str, Any] = {"job": "work", "attempt": 0, "host": "h", "rank": 0, "pid": 55}
    plain = [Event(ts=float(i), kind="step_start", step=i, **ident) for i in range(4000)]
    coded = decode_block_coded(encode_lines(plain), "f", 1, lean=True)
    assert coded is not None
    assert coded[1] is not None
    assert coded[1].writer == tuple(ident.values())
    assert coded[1].work is False
    worked = [Event(ts=4000.0 + i, kind="step_end", step=i, tokens=100 + i, **ident)
              for i in range(4000)]  # fmt: skip
    coded = decode_block_coded(encode_lines(worked), "f", 1, lean=True)
    assert coded is not None
    assert coded[1] is not None
    assert coded[1].writer == tuple(ident.values())  # still lean
    assert coded[1].work is True
    # Through a store: the writer's first blocks hold no work, the later ones do.
    ident = {**ident, "pid": 56}  # a writer whose decoder is not made yet
    early = [Event(ts=float(i), kind="step_start", step=i, **ident) for i in range(30_000)]
    late = [Event(ts=40_000.0 + i, kind="step_end", step=i, tokens=100 + i, **ident)
            for i in range(4000)]  # fmt: skip
    path = tmp_path / "work" / "0" / "h-0-56.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(early + late))
    assert path.stat().st_size > 2 * analysis.READ_SLICE_BYTES  # several blocks
    with spy(codec, "_decode_lean", lambda _, result: result and result[1].work) as work:
        live = LiveJob(tmp_path, "work", parallel=False)
        live.update()
        report = live.report()
    assert False in work and True in work  # blocks without work were known to hold none
    assert report.program is not None
    assert report.program.tokens == sum(100 + i for i in range(4000))


def test_a_writer_of_ever_new_unknown_fields_is_read_in_full_not_a_decoder_each() -> None:
    """Fields schema v1 lacks are opened a few at a time (a newer recorder's one or two);
    a writer that writes a new name on every line is read as Events, the same events,
    without a decoder made for each name."""
    ident: dict[str, Any] = {"job": "names", "attempt": 0, "host": "h", "rank": 0, "pid": 78}
    beats = [Event(ts=float(i), kind="heartbeat", **ident) for i in range(3000)]
    assert decode_block_coded(encode_lines(beats), "f", 1, lean=True) is not None
    lines = encode_lines(beats).split(b"\n")[:-1]
    odd = b"\n".join(line[:-1] + b',"x%d":1}' % i for i, line in enumerate(lines)) + b"\n"
    with spy(codec, "_lean_decoder", lambda args, result: args) as made:
        coded = decode_block_coded(odd, "f", 1, lean=True)
    assert len(made) == 8  # then the block is read in full
    assert coded is not None
    events = coded[0].events if isinstance(coded[0], LeanRows) else coded[0]  # type: ignore[union-attr]
    assert list(events) == beats


def _shared_file_events(ranks: int, steps: int) -> list[Event]:
    """``ranks`` ranks on two hosts writing one file, their lines interleaved."""
    t0 = 1_700_000_000.0
    who = [{"rank": r, "host": f"h{r % 2}", "pid": 300 + r} for r in range(ranks)]
    events = [Event(ts=t0, kind="job_start", job="shared", attempt=0, **w) for w in who]
    for i in range(1, steps + 1):
        for r, w in enumerate(who):
            t = t0 + i + 0.001 * r
            events += [
                Event(ts=t, kind="step_start", job="shared", attempt=0, step=i, **w),
                Event(ts=t + 0.1, kind="data_loading_start", job="shared", attempt=0, **w),
                Event(ts=t + 0.3, kind="data_loading_end", job="shared", attempt=0, **w),
                Event(ts=t + 0.9, kind="step_end", job="shared", attempt=0, step=i, **w),
            ]
    return events


def test_a_block_of_several_writers_is_decoded_lean_with_each_lines_writer() -> None:
    """Lines of four writers interleaved (a file several ranks share) decode lean, with each
    line's writer as a number into the writers met, in the order first met; the events
    are the full decode's."""
    events = _shared_file_events(4, 800)
    block = encode_lines(events)
    coded = decode_block_coded(block, "f", 1, lean=True)
    assert coded is not None
    rows, columns = coded
    assert isinstance(rows, LeanRows)
    assert columns is not None and columns.writer is None and columns.writers is not None
    index, writers = columns.writers
    assert writers == tuple(
        ("shared", 0, f"h{r % 2}", r, 300 + r) for r in range(4)
    )  # (job, attempt, host, rank, pid), as first met
    assert [writers[i] for i in index.tolist()] == [
        (e.job, e.attempt, e.host, e.rank, e.pid) for e in events
    ]
    assert rows.events() == events


def test_a_shared_file_reports_as_when_read_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report of a file four ranks share, its blocks decoded lean with each line's
    writer, is the report of the same file decoded in full, byte for byte (hosts, ranks,
    steps, data loads)."""
    path = tmp_path / "shared" / "0" / "h-0-1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(_shared_file_events(4, 6_000)))
    assert path.stat().st_size > 2 * analysis.READ_SLICE_BYTES  # several blocks

    def report() -> str:
        live = LiveJob(tmp_path, "shared", parallel=False)
        live.update()
        return to_json(live.snapshot(final=True))

    with spy(codec, "_decode_lean", lambda _, result: result and result[1].writers) as lean:
        shared = report()
    assert lean and all(w is not None for w in lean)  # every large block: lean, shared
    monkeypatch.setattr(codec, "_decode_lean", lambda *_: None)
    assert shared == report()
    assert '"host": "h1"' in shared


def test_a_shared_files_blocks_after_the_first_go_to_the_any_writer_decoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """80 ranks write one file: its first block makes its first line's writer's decoder and
    the decoder of any writer's lines; the next blocks go to the latter at once, so no
    decoder is made for each rank whose line begins a block (more ranks than are kept:
    before, a decoder made for most blocks)."""
    monkeypatch.setattr(codec, "_lean_decoders", {})
    monkeypatch.setattr(codec, "_shared_files", {})
    path = tmp_path / "shared" / "0" / "h-0-1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(_shared_file_events(80, 400)))
    assert path.stat().st_size > 8 * analysis.READ_SLICE_BYTES // 16  # (blocks of 1 MiB)
    with spy(codec, "_lean_decoder", lambda args, result: args[0]) as made:
        live = LiveJob(tmp_path, "shared", parallel=False)
        live.update()
    # the first line's writer's, then any writer's (made again as lines open a field)
    assert made[0] == ("shared", 0, "h0", 0, 300) and set(made[1:]) == {None}, made
    assert str(path) in codec._shared_files
