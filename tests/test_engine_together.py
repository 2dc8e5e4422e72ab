"""A first query of many closed attempts takes them together (sealed in one pass, their
segments resolved and summed at once): every float of its report is the one the
attempt-by-attempt code makes, and so is every query after it.

The logs here are what such jobs write: many short attempts, each restoring, stepping a
few times (ties in step time, sparse steps, data loads and evals inside steps, an open
last step now and then), committing checkpoints and ending; with a second rank at times.
"""

from __future__ import annotations

from typing import Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.engine import Accountant, _inside, _sealing
from badput.events import Event
from badput.report import to_json

Typical = Literal["median", "mean"]
_INSIDE: dict[str, tuple[str, str, dict[str, object]]] = {
    "data": ("data_loading_start", "data_loading_end", {"blocking": True}),
    "eval": ("custom_start", "custom_end", {"name": "eval"}),
    "save": ("checkpoint_save_start", "checkpoint_save_end", {}),
}


@st.composite
def many_short_attempts(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = []
    ts = 1_700_000_000.0
    step = 0
    attempts = draw(st.integers(2, 14))
    for a in range(attempts):
        ranks = [0, 1] if draw(st.integers(0, 4)) == 0 else [0]

        def emit(kind: str, at: float, a: int = a, ranks: list[int] = ranks, **f: object) -> None:
            for rank in ranks:
                events.append(Event(ts=at, kind=kind, job="r", attempt=a, rank=rank, **f))  # type: ignore[arg-type]

        emit("job_start", ts)
        if a and draw(st.booleans()):
            restored = draw(st.integers(0, step))
            emit("checkpoint_restore_start", ts, step=restored)
            ts += draw(st.sampled_from([0.0, 2.0]))
            emit("checkpoint_restore_end", ts, step=restored)
            step = restored
        n_steps = draw(st.integers(0, 7))
        for s in range(n_steps):
            step += draw(st.sampled_from([1, 1, 1, 3]))  # now and then a sparse record
            ts += draw(st.sampled_from([0.0, 0.0, 0.5]))
            emit("step_start", ts, step=step)
            took = draw(st.sampled_from([1.0, 1.0, 1.25, 2.0, 3.75]))
            inside = draw(st.sampled_from([None, None, "data", "eval", "save"]))
            if inside is not None:
                start, end, fields = _INSIDE[inside]
                if inside == "save":
                    fields = {"step": step}
                emit(start, ts + 0.125, **fields)
                emit(end, ts + 0.375, **fields)
            if s < n_steps - 1 or draw(st.integers(0, 4)):  # else an open last step
                emit("step_end", ts + took, step=step)
            ts += took
            if draw(st.integers(0, 3)) == 0:
                emit("checkpoint_committed", ts, step=step)
        ts += draw(st.sampled_from([0.5, 3.0]))
        if a < attempts - 1:
            emit("attempt_end", ts, status="failed", exit_code=1)
            ts += draw(st.sampled_from([0.0, 30.0]))
        elif draw(st.booleans()):
            emit("job_end", ts, status="completed")
    return events


def _reports(
    events: list[Event], together: bool, typical: Typical, window: tuple[float, float]
) -> list[str]:
    """The whole report, the same again, and a window, as JSON, with closed attempts
    sealed and summed together (always) or one by one (never)."""
    saved = _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS
    _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS = (1, 1) if together else (10**9, 10**9)
    try:
        acc = Accountant("r")
        acc.ingest_events(events)
        return [
            to_json(acc.report(typical=typical)),
            to_json(acc.report(typical=typical)),
            to_json(acc.report(typical=typical, window=window)),
        ]
    finally:
        _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS = saved


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(many_short_attempts(), st.sampled_from(["median", "mean"]), st.data())
def test_many_closed_attempts_taken_together_report_every_float_as_one_by_one(
    events: list[Event], typical: Typical, data: st.DataObject
) -> None:
    first, last = events[0].ts, events[-1].ts
    a = data.draw(st.floats(first - 5, last + 5), label="window start")
    b = data.draw(st.floats(a, last + 5), label="window end")
    assert _reports(events, True, typical, (a, b)) == _reports(events, False, typical, (a, b))


def _long_job(attempts: int, steps: int) -> list[Event]:
    """``attempts`` attempts of ``steps`` steps each (step times varying, a restore and a
    slow first step in each): over 1,000 clean steps, so the ideal step time is taken over
    blocks of 100 and its block medians are kept for the next query."""
    events: list[Event] = []
    ts = 1_700_000_000.0
    step = 0
    for a in range(attempts):
        f: dict[str, object] = {"job": "r", "attempt": a, "rank": 0}
        events.append(Event(ts=ts, kind="job_start", **f))  # type: ignore[arg-type]
        step -= step % 10
        events.append(Event(ts=ts, kind="checkpoint_restore_end", step=step, **f))  # type: ignore[arg-type]
        for s in range(steps):
            step += 1
            took = 1.0 + 0.01 * ((a * 7 + s * 3) % 11) + (2.5 if s == 0 else 0.0)
            events.append(Event(ts=ts, kind="step_start", step=step, **f))  # type: ignore[arg-type]
            ts += took
            events.append(Event(ts=ts, kind="step_end", step=step, **f))  # type: ignore[arg-type]
            if step % 10 == 0:
                events.append(Event(ts=ts, kind="checkpoint_committed", step=step, **f))  # type: ignore[arg-type]
        events.append(Event(ts=ts + 1.0, kind="attempt_end", status="failed", **f))  # type: ignore[arg-type]
        ts += 20.0
    return events


def test_over_a_thousand_clean_steps_taken_together_and_after_a_new_attempt() -> None:
    events = _long_job(60, 21)
    window = (events[0].ts + 300.0, events[-1].ts - 300.0)
    together = _reports(events, True, "median", window)
    assert together == _reports(events, False, "median", window)
    assert '"ideal_step_time": 1.0' in together[0]  # the best block of 100 (by its median)
    # A new attempt after a first query of 60 sealed together: the block medians kept
    # from it are extended, and the report is the cold one.
    more = _long_job(61, 21)
    saved = _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS
    _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS = 1, 1
    try:
        live = Accountant("r")
        live.ingest_events(more[: len(events)])
        live.report()
        live.ingest_events(more[len(events) :])
        cold = Accountant("r")
        cold.ingest_events(more)
        assert to_json(live.report()) == to_json(cold.report())
    finally:
        _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS = saved


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(many_short_attempts(), st.data())
def test_a_live_job_fed_in_pieces_reports_as_the_cold_one_by_one(
    events: list[Event], data: st.DataObject
) -> None:
    """Attempts sealed together at one query, then more events (a new attempt, the end of a
    running one, late events of a closed one, arriving out of order): each later query
    reuses, extends or drops what the earlier ones sealed, and the last gives every float
    of the cold report computed one by one."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=3), label="cuts"))
    late = data.draw(st.integers(0, 2), label="late events")
    order = list(events)
    for _ in range(late):  # an event of an earlier attempt arriving after later ones
        i = data.draw(st.integers(0, len(order) - 1))
        order.append(order.pop(i))
    saved = _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS
    try:
        _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS = 1, 1
        live = Accountant("r")
        start = 0
        for cut in [*cuts, len(order)]:
            live.ingest_events(order[start:cut])
            start = max(start, cut)
            live.report()
        got = to_json(live.report())
        _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS = 10**9, 10**9
        cold = Accountant("r")
        cold.ingest_events(order)
        assert got == to_json(cold.report())
    finally:
        _sealing.BULK_MIN_ATTEMPTS, _inside.MIN_SEGMENTS = saved


def test_equal_buckets_come_in_the_same_order_however_the_report_was_asked_for() -> None:
    """A data load and an eval of 0.25 s each, written by two ranks: a live job first asked
    while the load was open and the cold report listed them in different orders (the JSON
    differed by that alone). Equal buckets now come by name."""
    events: list[Event] = []

    def emit(at: float, kind: str, attempt: int = 0, **f: object) -> None:
        for rank in (0, 1):
            events.append(
                Event(ts=1_700_000_000.0 + at, kind=kind, job="r", attempt=attempt, rank=rank, **f)  # type: ignore[arg-type]
            )

    emit(0.0, "job_start")
    emit(0.0, "step_start", step=1)
    emit(0.125, "data_loading_start", blocking=True)
    emit(0.375, "data_loading_end", blocking=True)
    emit(1.0, "step_end", step=1)
    emit(1.0, "step_start", step=2)
    emit(1.125, "custom_start", name="eval")
    emit(1.375, "custom_end", name="eval")
    emit(2.0, "step_end", step=2)
    emit(2.5, "attempt_end", status="failed", exit_code=1)
    emit(2.5, "job_start", attempt=1)
    emit(3.0, "attempt_end", attempt=1, status="failed", exit_code=1)
    live = Accountant("r")
    live.ingest_events(events[:5])  # the load open, not yet ended
    live.report()
    live.ingest_events(events[5:])
    cold = Accountant("r")
    cold.ingest_events(events)
    got, expected = live.report(), cold.report()
    assert to_json(got) == to_json(expected)
    names = list(got.buckets)
    assert names.index("custom:eval") < names.index("data_loading")
    assert got.buckets["custom:eval"] == got.buckets["data_loading"] == 0.25
