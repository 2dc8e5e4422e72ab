"""Property tests over random event logs, valid and broken (ACCOUNTING.md §2 invariants)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.analysis import LiveJob, analyze
from badput.engine import Accountant, Report, _sealing, _steps
from badput.events import Chunk, Event, EventError
from badput.formats.codec import encode_lines
from badput.store import MemoryStore

KINDS_WEIGHTED = [
    "step_start",
    "step_start",
    "step_start",
    "step_end",
    "step_end",
    "checkpoint_save_start",
    "checkpoint_save_end",
    "checkpoint_restore_start",
    "checkpoint_restore_end",
    "checkpoint_committed",
    "data_loading_start",
    "data_loading_end",
    "custom_start",
    "custom_end",
    "training_prep_start",
    "training_prep_end",
    "accelerator_init_start",
    "accelerator_init_end",
    "compile_start",
    "compile_end",
    "heartbeat",
    "job_start",
    "attempt_end",
    "job_end",
    "job_scheduled",
    "elastic_wait_start",
    "elastic_wait_end",
    "some_future_kind",
]


END_KINDS = ("attempt_end", "job_end")


@st.composite
def event_logs(draw: st.DrawFn, *, allow_ties: bool = True) -> list[Event]:
    """A random log: a few attempts and ranks, any kind in any order. Timestamps go up, and
    some logs have events sharing one (intervals starting together, a step and an interval).
    In logs with ids, end events now and then carry none (a launcher's); some logs end with
    a ``job_end`` from each rank in turn, or with a launcher's id-less ``attempt_end`` and
    ``job_end``."""
    n = draw(st.integers(min_value=1, max_value=160))
    with_ids = draw(st.booleans())
    ties = allow_ties and draw(st.booleans())
    gap = st.one_of(st.just(0.0), st.floats(0.001, 50.0)) if ties else st.floats(0.001, 50.0)
    gaps = draw(st.lists(gap, min_size=n, max_size=n))
    ts = 1_700_000_000.0
    events = []
    attempt = 0
    step = 0
    for i in range(n):
        ts += gaps[i]
        kind = draw(st.sampled_from(KINDS_WEIGHTED)) if i else "job_start"
        fields: dict[str, object] = {}
        if kind == "job_start" and i:
            attempt += 1
        if kind.startswith(("step", "checkpoint")):
            step = max(0, step + draw(st.integers(-5, 3)))
            fields["step"] = step
        if kind.startswith(("custom", "elastic_wait")):
            fields["name"] = draw(st.sampled_from(["eval", "sdc"]))
        if kind.startswith("data_loading"):
            fields["blocking"] = draw(st.booleans())
        if with_ids and not (kind in END_KINDS and draw(st.integers(0, 2)) == 0):
            fields["attempt"] = attempt
        fields["rank"] = draw(st.sampled_from([0, 0, 0, 1]))
        events.append(Event(ts=ts, kind=kind, job="p", **fields))  # type: ignore[arg-type]
    last = {"attempt": attempt} if with_ids else {}
    ending = draw(st.sampled_from(["as drawn", "each rank", "launcher"]))
    if ending == "each rank":  # rank 1 ends the job after event k, the leader last
        k = draw(
            st.sampled_from([k for k, e in enumerate(events) if e.attempt == last.get("attempt")])
        )
        later = events[k + 1].ts if k + 1 < n else ts + 1.0
        at = events[k].ts if allow_ties else (events[k].ts + later) / 2
        events.insert(k + 1, Event(ts=at, kind="job_end", job="p", rank=1, **last))  # type: ignore[arg-type]
        ts = max(ts, at) + draw(st.floats(0.001, 50.0))
        events.append(Event(ts=ts, kind="job_end", job="p", rank=0, **last))  # type: ignore[arg-type]
    elif ending == "launcher":  # no id: ends the attempt running at its time
        ts += draw(st.floats(0.001, 50.0))
        events.append(Event(ts=ts, kind="attempt_end", job="p", status="failed"))
        ts += draw(st.floats(0.001, 50.0))
        events.append(Event(ts=ts, kind="job_end", job="p", status="failed"))
    return events


def run(chunks: list[tuple[str, list[Event]]], **kw: object) -> Report:
    acc = Accountant("p")
    acc.ingest([Chunk(src, 1, list(evs)) for src, evs in chunks])
    return acc.report(**kw)  # type: ignore[arg-type]


def check_invariants(r: Report) -> None:
    assert r.total_seconds >= 0
    for name, v in r.buckets.items():
        assert v >= 0, (name, v)
    assert math.isclose(sum(r.buckets.values()), r.total_seconds, abs_tol=1e-6), (
        r.buckets,
        r.total_seconds,
    )
    assert 0.0 <= r.goodput <= r.observed_goodput + 1e-12 <= 1.0 + 1e-9
    assert not [d for d in r.diagnostics if d.code == "internal_inconsistency"]


def same(a: Report, b: Report) -> None:
    assert math.isclose(a.total_seconds, b.total_seconds, rel_tol=1e-12, abs_tol=1e-9)
    names = set(a.buckets) | set(b.buckets)
    for k in names:  # a bucket may be absent on one side and ~1e-12 on the other
        assert math.isclose(a.bucket(k), b.bucket(k), rel_tol=1e-9, abs_tol=1e-6), (
            k,
            a.buckets,
            b.buckets,
        )
    assert math.isclose(a.at_risk_seconds, b.at_risk_seconds, rel_tol=1e-9, abs_tol=1e-6), (
        a.at_risk_seconds,
        b.at_risk_seconds,
    )
    assert a.ideal_step_time == b.ideal_step_time
    assert a.steps == b.steps
    assert a.end_reason == b.end_reason


@pytest.fixture(autouse=True, scope="module", params=[2, 10_000], ids=["seal-often", "seal-never"])
def seal_threshold(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run every property with sealing forced (tiny tails, closed attempts sealed in
    blocks of a few events) and with sealing off."""
    saved = _steps.SEAL_MIN_TAIL, _sealing.CLOSED_BLOCK
    _steps.SEAL_MIN_TAIL = request.param
    _sealing.CLOSED_BLOCK = 3 if request.param == 2 else 10**9
    yield
    _steps.SEAL_MIN_TAIL, _sealing.CLOSED_BLOCK = saved


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(event_logs(), st.one_of(st.none(), st.floats(0.5, 20.0)))
def test_partition_is_exact_and_non_negative(events: list[Event], ideal: float | None) -> None:
    r = run([("a.jsonl", events)], ideal_step_time=ideal)
    check_invariants(r)


@SETTINGS
@given(event_logs(allow_ties=False), st.integers(0, 2**32 - 1))
def test_independent_of_file_split_and_file_order(events: list[Event], seed: int) -> None:
    rng = random.Random(seed)
    whole = run([("a.jsonl", events)])
    n_files = rng.randint(2, 4)
    files: list[list[Event]] = [[] for _ in range(n_files)]
    # each file keeps its lines in time order, like a writer process (events at the same time in
    # different files have no order but the files': hence distinct timestamps here)
    for e in events:
        files[rng.randrange(n_files)].append(e)
    parts = [(f"f{i}.jsonl", f) for i, f in enumerate(files)]
    rng.shuffle(parts)
    same(whole, run(parts))


@SETTINGS
@given(event_logs(), st.integers(0, 2**32 - 1))
def test_chunked_ingest_equals_ingest_at_once(events: list[Event], seed: int) -> None:
    rng = random.Random(seed)
    whole = run([("a.jsonl", events)])
    acc = Accountant("p")
    i = 0
    while i < len(events):
        j = i + rng.randint(1, 10)
        acc.ingest([Chunk("a.jsonl", i + 1, list(events[i:j]))])
        acc.report()  # interleaved queries must not disturb the state
        i = j
    same(whole, acc.report())


@SETTINGS
@given(event_logs(), st.data())
def test_live_and_windowed_queries_keep_invariants(
    events: list[Event], data: st.DataObject
) -> None:
    acc = Accountant("p")
    acc.ingest_events(events)
    last = events[-1].ts
    now = last + data.draw(st.floats(0.0, 100.0))
    check_invariants(acc.report(now=now))
    a = data.draw(st.floats(events[0].ts - 10, now))
    b = data.draw(st.floats(a, now + 10))
    w = acc.report(window=(a, b), now=now)
    check_invariants(w)
    full = acc.report(now=now)
    assert w.total_seconds <= full.total_seconds + 1e-6


@SETTINGS
@given(event_logs(), st.lists(st.integers(0, 200), max_size=5))
def test_broken_lines_are_skipped_not_fatal(events: list[Event], bad_at: list[int]) -> None:
    items: list[Event | EventError] = list(events)
    for pos in sorted(set(bad_at), reverse=True):
        items.insert(min(pos, len(items)), EventError("not a JSON object", "a.jsonl", pos + 1))
    acc = Accountant("p")
    acc.ingest([Chunk("a.jsonl", 1, items)])
    r = acc.report()
    check_invariants(r)
    same(r, run([("a.jsonl", events)]))
    assert sum(1 for d in r.diagnostics if d.code == "malformed_line") == len(set(bad_at))


@SETTINGS
@given(event_logs(), st.data())
def test_adjacent_windows_add_up(events: list[Event], data: st.DataObject) -> None:
    acc = Accountant("p")
    acc.ingest_events(events)
    full = acc.report()
    a = data.draw(st.floats(full.start - 5, full.end + 5))
    c = data.draw(st.floats(a, full.end + 5))
    b = data.draw(st.floats(a, c))
    left, right, whole = (acc.report(window=w) for w in ((a, b), (b, c), (a, c)))
    observed = ("productive", "slowdown")
    for name in set(whole.buckets) | set(left.buckets) | set(right.buckets):
        if name in observed:
            continue
        assert math.isclose(
            left.bucket(name) + right.bucket(name), whole.bucket(name), abs_tol=1e-6
        ), name
    assert math.isclose(
        sum(left.bucket(n) + right.bucket(n) for n in observed),
        sum(whole.bucket(n) for n in observed),
        abs_tol=1e-6,
    )


# ----------------------------------------------- ACCOUNTING.md §9: one number, however asked


@SETTINGS
@given(event_logs(), st.one_of(st.none(), st.floats(0.5, 20.0)), st.data())
def test_window_covering_the_whole_job_equals_no_window(
    events: list[Event], ideal: float | None, data: st.DataObject
) -> None:
    acc = Accountant("p", ideal_step_time=ideal)
    acc.ingest_events(events)
    live = data.draw(st.booleans())
    now = events[-1].ts + data.draw(st.floats(0.0, 30.0)) if live else None
    plain = acc.report(now=now)
    check_invariants(plain)
    margin_a, margin_b = data.draw(st.floats(0.0, 100.0)), data.draw(st.floats(0.0, 100.0))
    whole = acc.report(now=now, window=(plain.start - margin_a, plain.end + margin_b))
    check_invariants(whole)
    same(plain, whole)
    exact = acc.report(now=now, window=(plain.start, plain.end))
    same(plain, exact)


@SETTINGS
@given(event_logs(), st.integers(0, 2**32 - 1))
def test_live_job_fed_in_pieces_equals_the_cold_report(events: list[Event], seed: int) -> None:
    rng = random.Random(seed)
    cold_store = MemoryStore()
    cold_store.append("p", "a.jsonl", encode_lines(events))
    cold = analyze(cold_store, "p")
    check_invariants(cold)
    store = MemoryStore()
    live = LiveJob(store, "p")
    i = 0
    while i < len(events):
        j = i + rng.randint(1, 12)
        data = encode_lines(events[i:j])
        cut = rng.randint(0, len(data))  # a writer may be in the middle of a line
        store.append("p", "a.jsonl", data[:cut])
        live.update()
        check_invariants(live.report())
        store.append("p", "a.jsonl", data[cut:])
        live.update()
        i = j
    same(cold, live.report())


@SETTINGS
@given(event_logs(), st.data())
def test_now_sees_only_the_events_stamped_up_to_it(
    events: list[Event], data: st.DataObject
) -> None:
    now = data.draw(st.floats(events[0].ts, events[-1].ts))
    acc = Accountant("p", ideal_step_time=5.0)
    acc.ingest_events(events)
    early = acc.report(now=now)
    check_invariants(early)
    cut = Accountant("p", ideal_step_time=5.0)
    cut.ingest_events([e for e in events if e.ts <= now])
    same(early, cut.report(now=now))


@settings(SETTINGS, max_examples=50)
@given(event_logs(), st.one_of(st.none(), st.floats(0.5, 20.0)), st.data())
def test_goodput_seconds_are_the_windowed_reports_figures(
    events: list[Event], ideal: float | None, data: st.DataObject
) -> None:
    # The cheap query of the goodput-over-time chart (steps' time only, once the state was
    # reported on) gives exactly the windowed report's productive, slowdown and total.
    acc = Accountant("p", ideal_step_time=ideal)
    acc.ingest_events(events)
    full = acc.report()
    # the whole job, asked as the chart's last cumulative point is (its ideal estimated)
    productive, _slowdown, total = acc.goodput_seconds((full.start, full.end))
    assert (productive / total if total > 0 else 0.0) == pytest.approx(full.goodput)
    series = acc.goodput_over_time(full, bins=8)
    if series.t:
        assert series.cumulative[-1] == pytest.approx(full.goodput, abs=1e-5)
    for _ in range(4):
        a = data.draw(st.floats(full.start - 5, full.end + 5))
        b = data.draw(st.floats(a, full.end + 5))
        asked = data.draw(st.one_of(st.none(), st.floats(0.5, 20.0)))
        got = acc.goodput_seconds((a, b), asked)
        w = acc.report(window=(a, b), ideal_step_time=asked)
        assert got == (w.bucket("productive"), w.bucket("slowdown"), w.total_seconds)
