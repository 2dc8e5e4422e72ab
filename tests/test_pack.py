"""A worker's state crosses a pickle packed by field (engine/_pack.py): what arrives must be
the state that left, field for field, and give the same report."""

from __future__ import annotations

import pickle
from array import array
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine import Accountant
from badput.engine._pack import Packed, pack, unpack
from badput.engine._stream import RestoreMark, Stream
from badput.events import Chunk, Event
from test_engine_properties import event_logs


def _plain(value: Any, seen: set[int] | None = None) -> Any:
    """``value`` as plain data (arrays as lists, objects as their class and fields), to
    compare two states field for field."""
    if isinstance(value, array):
        return ("array", value.typecode, value.tolist())
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.tolist())
    if isinstance(value, dict):
        return {repr(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, *(_plain(v) for v in value)]
    if isinstance(value, (set, frozenset)):
        return sorted(map(repr, value))
    names = getattr(type(value), "__slots__", None)
    if names is not None and not hasattr(value, "__dict__"):
        return {n: _plain(getattr(value, n)) for n in names if hasattr(value, n)}
    if hasattr(value, "__dict__") and type(value).__module__.startswith("badput."):
        return [type(value).__name__, {k: _plain(v) for k, v in vars(value).items()}]
    return value


def _state(acc: Accountant) -> Any:
    return _plain(vars(acc._ing)), {repr(k): _plain(s) for k, s in acc._ranks.streams.items()}


@settings(max_examples=60, deadline=None)
@given(events=event_logs(), cut=st.floats(0, 1))
def test_an_accountant_crosses_a_pickle_field_for_field(events: list[Event], cut: float) -> None:
    """What a parallel read's worker sends: read in two parts (so that streams hold
    several appends), pickled, loaded: the same state, and the same report once merged."""
    k = int(cut * len(events))
    acc = Accountant("p")
    acc.ingest([Chunk("0/a.jsonl", 1, list(events[:k])), Chunk("0/b.jsonl", 1, events[k:])])
    back = pickle.loads(pickle.dumps(acc))
    assert _state(back) == _state(acc)
    assert back.report() == acc.report()
    # the streams of the copy are its own (a pickle shares nothing with what it copied)
    for key, stream in back._ing.streams.items():
        assert stream is not acc._ing.streams[key]
        assert back._ing._by_raw  # the raw keys name the copy's own streams
    assert set(map(id, back._ing._by_raw.values())) <= set(map(id, back._ing.streams.values()))


def test_objects_are_packed_by_field_and_come_back_equal() -> None:
    streams = [Stream(attempt=str(i), rank=i) for i in range(3)]
    for i, s in enumerate(streams):
        s.steps.ts.extend([1.0 * i, 2.0 * i])
        s.restores.extend([RestoreMark(float(j), j, j, bool(j % 2)) for j in range(i)])
        s.checkpoints.append((1.0, i, True))
    packed = pack(streams)
    assert isinstance(packed, Packed)
    fields = dict(packed.fields)
    assert isinstance(fields["steps"], Packed)  # nested objects of one class: by field too
    back = unpack(pickle.loads(pickle.dumps(packed)))
    assert [_plain(s) for s in back] == [_plain(s) for s in streams]
    assert back[1].restores == [RestoreMark(0.0, 0, 0, False)]
    back[0].steps.ts.append(9.0)  # each array is its own
    assert list(back[1].steps.ts) == [1.0, 2.0]


class _Open:
    __slots__ = ("a", "b")


def test_what_cannot_be_packed_stays_a_plain_list() -> None:
    """Mixed classes, a class not ours, a slot left unset: pickled as they are."""
    mixed = [Stream(), RestoreMark(1.0, 1, 1, True)]
    assert pack(mixed) == mixed
    assert pack([1, 2]) == [1, 2]
    half = _Open()
    half.a = 1
    _Open.__module__ = "badput.fake"
    try:
        assert pack([half]) == [half]
    finally:
        _Open.__module__ = __name__
    assert unpack([3]) == [3]
