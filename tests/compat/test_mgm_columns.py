"""The compat calculator's compact event columns give back exactly the events kept, in the
order a time-sorted list with arrival breaking ties would hold them (what its interval
queries read), and its step starts stay sorted by (time, step)."""

from __future__ import annotations

import bisect
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from badput.compat.ml_goodput_measurement._columns import EventColumns, StepStarts
from badput.events import Event

kinds = st.sampled_from(["step_start", "step_end", "custom_start", "attempt_end", "heartbeat"])
events = st.builds(
    Event,
    ts=st.integers(0, 40).map(lambda t: 1_700_000_000.0 + t / 4),
    kind=kinds,
    job=st.just("j"),
    attempt=st.one_of(st.none(), st.integers(0, 2), st.sampled_from(["0", "a.1"])),
    host=st.one_of(st.none(), st.sampled_from(["h0", "h1"])),
    rank=st.one_of(st.none(), st.integers(0, 3)),
    pid=st.one_of(st.none(), st.integers(1, 2**40)),
    step=st.one_of(st.none(), st.integers(-(2**53) + 1, 2**53 - 1)),
    name=st.one_of(st.none(), st.sampled_from(["eval", "sdc"])),
    blocking=st.one_of(st.none(), st.booleans()),
    status=st.one_of(st.none(), st.sampled_from(["crashed", "completed"])),
    exit_code=st.one_of(st.none(), st.integers(-9, 1)),
    active=st.one_of(st.none(), st.integers(0, 4)),
    total=st.one_of(st.none(), st.integers(1, 4)),
    available=st.one_of(st.none(), st.integers(0, 4)),
)
# Batches as the store delivers them: each sorted by time, later ones possibly earlier.
batches = st.lists(
    st.lists(events, max_size=12).map(lambda b: sorted(b, key=lambda e: e.ts)), max_size=6
)


def reference(batches: list[list[Event]]) -> list[Event]:
    """What the calculator kept before: a list, appended to or insorted after equal times."""
    out: list[Event] = []
    for batch in batches:
        for e in batch:
            out.insert(bisect.bisect_right([x.ts for x in out], e.ts), e)
    return out


@given(batches)
def test_columns_give_back_the_events_in_time_then_arrival_order(
    batches: list[list[Event]],
) -> None:
    columns = EventColumns("j")
    for batch in batches:
        columns.extend(batch)
    expected = reference(batches)
    assert len(columns) == len(expected)
    assert columns.events(0, len(columns)) == expected
    # A window is the slice of events after its start, up to and including its end.
    if expected:
        lo, hi = expected[0].ts, expected[-1].ts - 1
        got = columns.events(columns.after(lo), columns.after(hi))
        assert got == [e for e in expected if lo < e.ts <= hi]


def test_columns_keep_twenty_bytes_an_event_for_a_long_run() -> None:
    """100,000 steps of one writer (start and end): three columns of 8 + 8 + 4 bytes, and
    two shapes."""
    columns = EventColumns("j")
    base: dict[str, Any] = {"job": "j", "attempt": 0, "host": "h", "rank": 0, "pid": 7}
    for k in range(0, 100_000, 1_000):
        batch = []
        for step in range(k, k + 1_000):
            batch.append(Event(ts=1e9 + step, kind="step_start", step=step, **base))
            batch.append(Event(ts=1e9 + step + 0.5, kind="step_end", step=step, **base))
        columns.extend(batch)
    assert len(columns) == 200_000
    size = sum(c.itemsize * len(c) for c in (columns.ts, columns._step, columns._shape))
    assert size == 200_000 * 20
    assert len(columns._templates) == 2
    assert columns.events(199_998, 200_000) == [
        Event(ts=1e9 + 99_999, kind="step_start", step=99_999, **base),
        Event(ts=1e9 + 99_999.5, kind="step_end", step=99_999, **base),
    ]


@given(st.lists(st.tuples(st.integers(0, 20).map(float), st.integers(0, 30)), max_size=40))
def test_step_starts_stay_sorted_by_time_then_step(pairs: list[tuple[float, int]]) -> None:
    starts = StepStarts()
    for ts, step in pairs:
        starts.add(ts, step)
    assert list(starts) == sorted(pairs)
    window = starts.between(5.0, 12.0)
    assert list(window) == sorted(p for p in pairs if 5.0 < p[0] <= 12.0)
    last = starts.last_start(3.0, 9.0)
    inside = [ts for ts, _ in pairs if 3.0 <= ts <= 9.0]
    assert last == (max(inside) if inside else None)
