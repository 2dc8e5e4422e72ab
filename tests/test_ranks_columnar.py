"""The rank tracker's columnar ingest and cached analysis give what the per-event loop gave.

``reference_ingest`` is the per-event loop ``RankTracker.ingest`` was before it read
:class:`~badput.engine._batch.Batch` columns (kept here as the reference); random logs
(several attempts, ranks and processes interleaved, foreign jobs, odd kinds, steps out
of range) must leave every stream in the same state and give the same analysis.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from _spy import spy
from badput.engine import (
    _batch,
    _rank_columns,
    _rank_derive,
    _rank_ingest,
    _rank_settle,
    _rank_stream,
)
from badput.engine._batch import Batch
from badput.engine._rank_columns import Growing, Joined
from badput.engine._rank_derive import derive_streams, derived_of
from badput.engine._rank_ingest import stream_of
from badput.engine._rank_model import RankOptions
from badput.engine._rank_scores import sections_of
from badput.engine._rank_settle import settle_streams
from badput.engine._rank_stalls import find_stalls, may_stall
from badput.engine._rank_stream import RankStream, SectionLog, in_chunks
from badput.engine._ranks import RankTracker
from badput.events import (
    KIND_CODE,
    MAX_INT,
    DecodedColumns,
    Event,
    Kind,
    bucket_of,
    interval_base,
)

T0 = 1_700_000_000.0
JOB = "j"


def _see(s: RankStream, ts: float, pid: int | None) -> None:
    s.first_ts = min(s.first_ts, ts)
    s.last_ts = max(s.last_ts, ts)
    if ts > s.pid_seen.get(pid, -math.inf):
        s.pid_seen[pid] = ts


def _reference_other(s: RankStream, ev: Event) -> None:
    kind = ev.kind
    if kind == Kind.SECTION_SUMMARY:
        log = s.sections.get(ev.name or "")
        if log is None:
            log = s.sections[ev.name or ""] = SectionLog()
        n = ev.count or 0
        if n:
            s.worker_pids.add(ev.pid)
        log.count += n
        log.parts.append(ev.seconds or 0.0)
        p50 = (ev.quantiles or {}).get("p50")
        if n:
            log.periods.append((ev.ts, n, math.nan if p50 is None else p50))
        if ev.open_since is not None:
            log.opens.append((ev.ts, ev.open_since))
        if ev.last is not None:
            log.last = max(log.last, ev.last)
        log.see_open(ev.ts, ev.open_since)
        return
    split = interval_base(kind)
    if split is None:
        return
    base, is_start = split
    if base == "data_loading" and ev.blocking is False:
        s.extra_ts.append(ev.ts)
        return
    s.pair_ts.append(ev.ts)
    s.pair_code.append(2 * s.code(bucket_of(base, ev.name)) + is_start)


def reference_ingest(tracker: RankTracker, events: list[Event], job: str | None) -> None:
    """The per-event loop (one Python iteration per event)."""
    cur: tuple[object, object, object] | None = None
    s: RankStream | None = None
    for ev in events:
        if job is not None and ev.job != job:
            continue
        key = (ev.attempt, ev.rank, ev.pid)
        if s is None or cur != key:
            cur = key
            attempt = None if ev.attempt is None else str(ev.attempt)
            s = stream_of(tracker.streams, (attempt, ev.rank or 0))
        if s.host is None:  # the first event naming one
            s.host = ev.host
        kind = ev.kind
        if kind == Kind.STEP_START:
            step = ev.step
            if step is None or not -MAX_INT <= step <= MAX_INT:
                continue
            s.step_ts.append(ev.ts)
            s.step_no.append(step)
            s.worker_pids.add(ev.pid)
        elif kind == Kind.STEP_END:
            s.end_ts.append(ev.ts)
        elif kind == Kind.DATA_LOADING_START and ev.blocking is None:
            s.pair_ts.append(ev.ts)
            s.pair_code.append(1)
        elif kind == Kind.DATA_LOADING_END and ev.blocking is None:
            s.pair_ts.append(ev.ts)
            s.pair_code.append(0)
        elif kind == Kind.HEARTBEAT:
            _see(s, ev.ts, ev.pid)
        else:
            _see(s, ev.ts, ev.pid)
            _reference_other(s, ev)


def state(tracker: RankTracker) -> list[Any]:
    """Everything a stream holds, in order (``repr``: NaN equals NaN)."""
    out = []
    for key, s in tracker.streams.items():
        sections = {
            name: (
                log.count,
                log.seconds,
                log.periods,
                log.opens,
                log.last,
                log.open_since,
                log.open_ts,
            )
            for name, log in s.sections.items()
        }
        out.append(
            repr(
                (
                    key,
                    s.host,
                    list(s.step_ts),
                    s.step_no.column().tolist(),
                    list(s.end_ts),
                    list(s.extra_ts),
                    list(s.pair_ts),
                    list(s.pair_code),
                    s.names,
                    sections,
                    s.first_ts,
                    s.last_ts,
                    sorted(s.worker_pids, key=repr),
                    sorted(s.pid_seen.items(), key=repr),
                )
            )
        )
    return out


_KINDS = [
    Kind.STEP_START,
    Kind.STEP_END,
    Kind.DATA_LOADING_START,
    Kind.DATA_LOADING_END,
    Kind.HEARTBEAT,
    Kind.SECTION_SUMMARY,
    Kind.CHECKPOINT_SAVE_START,
    Kind.CHECKPOINT_SAVE_END,
    Kind.CUSTOM_START,
    Kind.CUSTOM_END,
    Kind.JOB_START,
    Kind.ATTEMPT_END,
    "mystery_kind",
]


_WRITERS = st.tuples(
    st.sampled_from([None, 0, 1, "0", "b"]),  # attempt (0 and "0" are one attempt)
    st.sampled_from([None, 0, 1, 2]),  # rank (None is rank 0)
    st.sampled_from([None, 10, 11]),  # pid
)


@st.composite
def logs(draw: st.DrawFn) -> list[Event]:
    """Events of a few writers, interleaved in runs, of a few kinds (or all)."""
    writers = draw(st.lists(_WRITERS, min_size=1, max_size=4))
    kinds = draw(st.one_of(st.just(_KINDS), st.lists(st.sampled_from(_KINDS), min_size=1)))
    return [
        draw(events(writers[draw(st.integers(0, len(writers) - 1))], kinds))
        for _ in range(draw(st.integers(0, 100)))
    ]


@st.composite
def events(draw: st.DrawFn, writer: tuple[object, object, object], kinds: list[str]) -> Event:
    kind = draw(st.sampled_from(kinds))
    fields: dict[str, Any] = {
        "ts": T0 + draw(st.integers(0, 400)) * draw(st.sampled_from([0.5, 1.0, 7.0])),
        "kind": kind,
        "job": draw(st.sampled_from([JOB, JOB, JOB, "other"])),
        "attempt": writer[0],
        "rank": writer[1],
        "pid": writer[2],
        "host": draw(st.sampled_from([None, None, "h0", "h1"])),
    }
    if kind == Kind.STEP_START:
        fields["step"] = draw(
            st.one_of(st.integers(0, 30), st.sampled_from([None, MAX_INT + 1, -MAX_INT - 1]))
        )
    if kind in (Kind.DATA_LOADING_START, Kind.DATA_LOADING_END):
        fields["blocking"] = draw(st.sampled_from([None, None, None, True, False]))
    if kind in (Kind.CUSTOM_START, Kind.CUSTOM_END):
        fields["name"] = draw(st.sampled_from(["eval", "log"]))
    if kind == Kind.SECTION_SUMMARY:
        p50 = draw(st.sampled_from([0.01, 0.02, 0.05]))
        fields.update(
            name=draw(st.sampled_from(["forward", "opt"])),
            count=draw(st.integers(0, 5)),
            seconds=p50 * 4,
            quantiles=draw(st.sampled_from([None, {"p50": p50}])),
            last=draw(st.sampled_from([None, fields["ts"] - 0.5])),
            open_since=draw(st.sampled_from([None, fields["ts"] - 3.0])),
        )
    return Event(**fields)


def _runs(evs: list[Event], cuts: list[int]) -> list[list[Event]]:
    edges = sorted({0, len(evs), *(c % (len(evs) + 1) for c in cuts)})
    return [evs[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    logs(),
    st.lists(st.integers(0, 80), max_size=4),
    st.sampled_from([JOB, None]),
    st.sampled_from([0, 20, 1000]),
)
def test_columnar_ingest_leaves_the_state_the_per_event_loop_left(
    evs: list[Event], cuts: list[int], job: str | None, small_run: int
) -> None:
    """Every run through the columns (``SMALL_RUN`` 0), none (1000), or those of fewer
    than 20 events per writer event by event (20)."""
    columnar, reference = RankTracker(), RankTracker()
    saved, _rank_ingest.SMALL_RUN = _rank_ingest.SMALL_RUN, small_run
    try:
        for run in _runs(evs, cuts):
            columnar.ingest_batch(Batch(run), job)
            reference_ingest(reference, run, job)
    finally:
        _rank_ingest.SMALL_RUN = saved
    assert state(columnar) == state(reference)
    attempts = [("0", T0, T0 + 450.0, True, False), ("1", T0 + 100.0, T0 + 500.0, False, False)]
    options = RankOptions(stall_floor=20.0, min_samples=1)
    for now in (None, T0 + 600.0):
        got = columnar.analyze(attempts, now, options)
        want = reference.analyze(attempts, now, options)
        assert repr(got) == repr(want)


def test_a_run_of_foreign_events_only_creates_no_stream() -> None:
    tracker = RankTracker()
    tracker.ingest([Event(ts=T0, kind=Kind.STEP_START, job="other", step=1, rank=3)], JOB)
    assert tracker.streams == {}
    tracker.ingest([Event(ts=T0, kind=Kind.STEP_START, job=JOB, step=1, rank=3)], JOB)
    assert list(tracker.streams) == [(None, 3)]


def test_many_interval_marks_are_numbered_and_paired_as_written() -> None:
    """Over 32 marks of a stream take the vectorised numbering; a named interval in
    between (a single event) still gets its number in order of appearance."""
    kinds = [Kind.CHECKPOINT_SAVE_START, Kind.CHECKPOINT_SAVE_END]
    evs = [
        Event(ts=T0 + i, kind=kinds[i % 2], job=JOB, rank=1, pid=7, step=i) for i in range(3, 100)
    ]
    evs.insert(2, Event(ts=T0 + 2, kind=Kind.CUSTOM_START, job=JOB, rank=1, pid=7, name="eval"))
    evs.insert(0, Event(ts=T0, kind=Kind.COMPILE_START, job=JOB, rank=1, pid=7))
    evs.insert(1, Event(ts=T0 + 1, kind=Kind.COMPILE_END, job=JOB, rank=1, pid=7))
    columnar, reference = RankTracker(), RankTracker()
    columnar.ingest(evs, JOB)
    reference_ingest(reference, evs, JOB)
    assert state(columnar) == state(reference)
    (s,) = columnar.streams.values()
    assert s.names == {"data_loading": 0, "compile": 1, "checkpoint_save": 2, "custom:eval": 3}
    settle_streams([s])
    assert s.buckets == {"compile": 1.0, "checkpoint_save": 48.0}
    assert s.open == {"custom:eval": [T0 + 2]}


# ----------------------------------------------------------------- derived per stream


def reference_settle(
    s: RankStream,
) -> tuple[dict[str, float], dict[str, list[float]], list[float]]:
    """Buckets, open starts and blocking-load durations of one stream, by a stack in time
    order (at equal times, starts first), bucket by bucket."""
    names = {i: name for name, i in s.names.items()}
    marks = sorted(
        (names[c >> 1], t, not c & 1) for t, c in zip(s.pair_ts, s.pair_code, strict=True)
    )
    buckets: dict[str, float] = {}
    opened: dict[str, list[float]] = {}
    loads: list[float] = []
    for name, group in itertools.groupby(marks, key=lambda m: m[0]):
        stack: list[float] = []
        got: list[float] = []
        alternating = True
        for k, (_, t, is_end) in enumerate(group):
            alternating = alternating and is_end == (k % 2 == 1)
            if not is_end:
                stack.append(t)
            elif stack:
                got.append(max(0.0, t - stack.pop()))
        total = 0.0
        for x in got:
            total += x
        if got and (total > 0 or not alternating):
            buckets[name] = total
        if stack:
            opened[name] = stack
        if name == "data_loading":
            loads = got
    return buckets, opened, loads


def reference_derived(s: RankStream) -> tuple[Any, ...]:
    cols = [*s.step_ts, *s.end_ts, *s.pair_ts, *s.extra_ts]
    span = (min([s.first_ts, *cols]), max([s.last_ts, *cols]))
    lasts = [g.last for g in s.sections.values() if math.isfinite(g.last)]
    progress = sorted(cols + lasts)
    # The bound on the longest gap: section completions inside the columns' span are left
    # out (they may split a gap), those outside it count.
    if cols:
        lo, hi = min(cols), max(cols)
        outside = [x for x in lasts if not lo <= x <= hi]
        gaps = [b - a for a, b in itertools.pairwise(sorted(cols + outside))]
    else:
        gaps = [b - a for a, b in itertools.pairwise(progress)]
    step_no = s.step_no.column().tolist()
    steps = sorted(zip(s.step_ts, range(len(s.step_ts)), step_no, strict=True))
    times = [
        (t1 - t0) / (n1 - n0)
        for (t0, _, n0), (t1, _, n1) in itertools.pairwise(steps)
        if n1 - n0 > 0
    ]
    return (
        span,
        times,
        min(step_no, default=None),
        max(step_no, default=None),
        len(progress),
        progress[0] if progress else math.inf,
        progress[-1] if progress else -math.inf,
        max(gaps, default=-math.inf),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    logs(),
    st.lists(st.integers(0, 100), max_size=4),
    st.sampled_from([5, 1 << 16]),
    st.sampled_from([2, 4, 1 << 18]),
    st.booleans(),
)
def test_streams_derived_together_match_each_stream_on_its_own(
    evs: list[Event], cuts: list[int], chunk: int, piece: int, in_time_order: bool
) -> None:
    """Whether in one pass or in chunks of a few streams; a large stream's marks paired
    in one pass or a piece at a time (``piece``: a stream of more than 1.5 pieces is)."""
    if in_time_order:  # (as written, a piece's end is often not found: paired whole)
        evs = sorted(evs, key=lambda e: e.ts)
    tracker = RankTracker()
    for run in _runs(evs, cuts):
        tracker.ingest(run, JOB)
    streams = list(tracker.streams.values())
    saved = _rank_stream.CHUNK, _rank_settle._SETTLE_PIECE
    _rank_stream.CHUNK, _rank_settle._SETTLE_PIECE = chunk, piece
    try:
        derive_streams(streams)
        settle_streams(streams)
    finally:
        _rank_stream.CHUNK, _rank_settle._SETTLE_PIECE = saved
    for s in streams:
        assert _derived_state(s) == reference_derived(s)
        assert (s.buckets, s.open, s.loads.view().tolist()) == reference_settle(s)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    logs(),
    st.floats(0.0, 500.0),
    st.floats(0.0, 60.0),
    st.booleans(),
    st.sampled_from([None, T0 + 600.0]),
)
def test_an_attempt_screened_out_has_no_stall(
    evs: list[Event], end: float, threshold: float, completed: bool, now: float | None
) -> None:
    """``may_stall`` False (decided without looking at the progress times) means
    ``find_stalls``, looking at them, finds none."""
    tracker = RankTracker()
    tracker.ingest(evs, JOB)
    by_attempt: dict[str | None, list[RankStream]] = {}
    for s in tracker.streams.values():
        by_attempt.setdefault(s.attempt, []).append(s)
    for attempt, streams in by_attempt.items():
        found = find_stalls(
            str(attempt),
            streams=streams,
            start=T0,
            end=T0 + end,
            ended=now is None,
            completed=completed,
            now=now,
            threshold=threshold,
            typical=1.0,
        )
        if not may_stall(streams, T0 + end, completed, threshold):
            assert found == []


def test_the_screen_lets_a_real_stall_through() -> None:
    evs = [
        Event(ts=T0 + t, kind=Kind.STEP_START, job=JOB, step=i) for i, t in enumerate([0, 1, 90])
    ]
    tracker = RankTracker()
    tracker.ingest(evs, JOB)
    streams = list(tracker.streams.values())
    assert may_stall(streams, T0 + 100.0, False, 60.0)
    (stall,) = find_stalls(
        "0",
        streams=streams,
        start=T0,
        end=T0 + 100.0,
        ended=True,
        completed=False,
        now=None,
        threshold=60.0,
        typical=1.0,
    )
    assert (stall.start, stall.end) == (T0 + 1, T0 + 90)
    assert not may_stall(streams, T0 + 100.0, False, 89.0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.lists(st.integers(0, 100), max_size=5))
def test_analysis_asked_between_pieces_is_the_analysis_asked_at_the_end(
    evs: list[Event], cuts: list[int]
) -> None:
    """What is derived and cached per stream, and the last analysis, never outlive a
    change: a tracker asked after every piece answers as one asked only at the end."""
    attempts = [("0", T0, T0 + 450.0, True, False), ("b", T0, T0 + 500.0, False, True)]
    options = RankOptions(stall_floor=15.0, min_samples=1)
    asked, fresh = RankTracker(), RankTracker()
    for run in _runs(evs, cuts):
        asked.ingest(run, JOB)
        asked.analyze(attempts, None, options)
        asked.progress("0")
        fresh.ingest(run, JOB)
    for now in (None, T0 + 600.0, None):
        assert repr(asked.analyze(attempts, now, options)) == repr(
            fresh.analyze(attempts, now, options)
        )
    assert repr(asked.progress("0")) == repr(fresh.progress("0"))
    assert repr(asked.progress("b")) == repr(fresh.progress("b"))


def test_the_screen_counts_the_time_before_a_late_ranks_first_progress() -> None:
    """Rank 1 starts 45 s after rank 0: the time before its first step is a gap of rank 1
    (the ranks' common gap is 1..45 s)."""
    evs = [
        Event(ts=T0 + t, kind=Kind.STEP_START, job=JOB, attempt=0, rank=rank, step=i)
        for rank, times in ((0, [0, 1, 90, 99]), (1, [45, 60, 75, 99]))
        for i, t in enumerate(times)
    ]
    tracker = RankTracker()
    tracker.ingest(evs, JOB)
    streams = list(tracker.streams.values())
    assert may_stall(streams, T0 + 100.0, False, 30.0)
    (stall,) = find_stalls(
        "0",
        streams=streams,
        start=T0,
        end=T0 + 100.0,
        ended=True,
        completed=False,
        now=None,
        threshold=30.0,
        typical=1.0,
    )
    assert (stall.start, stall.end) == (T0 + 1, T0 + 45)
    assert not may_stall(streams, T0 + 100.0, False, 45.0)


def _derived_state(s: RankStream) -> tuple[Any, ...]:
    d = derived_of(s)
    return (
        (d.first_event, d.last_event),
        d.step_times.tolist(),
        d.step_lo,
        d.step_hi,
        d.n_progress,
        d.progress_first,
        d.progress_last,
        d.gap,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    logs(),
    st.lists(st.integers(0, 100), max_size=6),
    st.sampled_from(["written", "time", "time, a few late"]),
    st.sampled_from([5, 1 << 16]),
    st.booleans(),
)
def test_derivation_piece_by_piece_is_the_cold_derivation(
    evs: list[Event], cuts: list[int], order: str, chunk: int, absorbed: bool
) -> None:
    """A running job read piece by piece and asked after each (what a monitor does): each
    stream's derived values and pairing, the progress of each attempt, and the analysis
    of the running attempt are those of a tracker fed the log up to there at once; in time
    order (the values carried over), as written (out of order: derived again), or in time
    order but for a few events moved later (a late file); ``absorbed``: every other piece
    read by another tracker and absorbed (a parallel read's worker)."""
    if order != "written":
        evs = sorted(evs, key=lambda e: e.ts)
    if order == "time, a few late" and len(evs) > 3:
        evs = evs[::3][1:] + [e for i, e in enumerate(evs) if i % 3] + evs[:1]
    options = RankOptions(stall_floor=15.0, min_samples=1)
    live = RankTracker()
    fed: list[list[Event]] = []
    saved, _rank_stream.CHUNK = _rank_stream.CHUNK, chunk
    try:
        for k, run in enumerate(_runs(evs, cuts)):
            if absorbed and k % 2:
                worker = RankTracker()
                worker.ingest(run, JOB)
                live.absorb(worker)
            else:
                live.ingest(run, JOB)
            fed.append(run)
            cold = RankTracker()  # all at once, derived only now
            if absorbed:  # the same pieces absorbed (a section's seconds add up by piece)
                for j, piece in enumerate(fed):
                    if j % 2:
                        worker = RankTracker()
                        worker.ingest(piece, JOB)
                        cold.absorb(worker)
                    else:
                        cold.ingest(piece, JOB)
            else:
                cold.ingest([e for piece in fed for e in piece], JOB)
            newest = max(e.ts for piece in fed for e in piece)
            # the last attempt is running: not ended, asked at a time after its last event
            attempts = [("0", T0, T0 + 450.0, True, False), ("b", T0, newest, False, False)]
            for now in (newest + 100.0, None):
                assert repr(live.analyze(attempts, now, options)) == repr(
                    cold.analyze(attempts, now, options)
                )
            for attempt in ("0", "b", "None"):
                assert repr(live.progress(attempt)) == repr(cold.progress(attempt))
            for key, s in live.streams.items():
                assert _derived_state(s) == _derived_state(cold.streams[key])
                assert _derived_state(s) == reference_derived(s)
                settle_streams([s])
                assert (s.buckets, s.open, s.loads.view().tolist()) == reference_settle(s)
    finally:
        _rank_stream.CHUNK = saved


def test_a_running_stream_is_derived_from_what_arrived_since() -> None:
    """Appended in time order, a stream's earlier values are not taken again: the pairing
    and the step times go on from where they were (one open load carried over)."""
    tracker = RankTracker()
    evs = []
    for i in range(6):
        t = T0 + 10.0 * i
        evs += [
            Event(ts=t, kind=Kind.STEP_START, job=JOB, step=i),
            Event(ts=t + 1.0, kind=Kind.DATA_LOADING_START, job=JOB),
            Event(ts=t + 3.0, kind=Kind.DATA_LOADING_END, job=JOB),
        ]
    tracker.ingest(evs[:5], JOB)  # the second load is open
    (s,) = tracker.streams.values()
    settle_streams([s])
    assert (s.settled, s.open) == (3, {"data_loading": [T0 + 11.0]})
    assert derived_of(s).step_times.tolist() == [10.0]
    tracker.ingest(evs[5:], JOB)
    taken: list[int] = []
    saved = _rank_settle._settle_chunk

    def counting(todo: list[RankStream]) -> list[RankStream]:
        taken.append(sum(len(x.pair_ts) - x.settled for x in todo))
        return saved(todo)

    _rank_settle._settle_chunk = counting  # type: ignore[assignment]
    try:
        settle_streams([s])
    finally:
        _rank_settle._settle_chunk = saved  # type: ignore[assignment]
    assert taken == [9]  # the new marks only
    assert s.buckets == {"data_loading": 12.0}
    assert s.loads.view().tolist() == [2.0] * 6
    assert s.open == {}
    assert s.covered.at[0] == 2  # the columns taken by the last derivation
    assert derived_of(s).step_times.tolist() == [10.0] * 5
    assert s.covered.at[0] == 6


_VALUES = st.lists(
    st.one_of(
        st.sampled_from([0.0, 0.5, 1.0, 2.0, 1e-9, 1e300, -1.0]),
        st.floats(-10.0, 10.0),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), _VALUES), max_size=12),
    st.sampled_from([0, 3, 4096]),
    st.booleans(),
)
def test_a_joined_column_kept_sorted_gives_numpys_median(
    steps: list[tuple[int, list[float]]], merge_after: int, nan: bool
) -> None:
    """Columns of a few streams grow (mostly the last, the running one; sometimes an
    earlier one, or a stream is added; the last is cut back first, once or twice, as a
    rank paired again from an earlier pairing cuts its loads): the median of the joined
    columns, and the data load figures of a rank (block medians taken once per full
    block), are those found from scratch: numpy's median, to the bit."""
    columns = [Growing()]
    kept, sections = Joined(), Joined()
    options = RankOptions(min_samples=1)
    streams: list[RankStream] = []
    saved, _rank_columns.MERGE_AFTER = _rank_columns.MERGE_AFTER, merge_after
    try:
        for which, values in steps:
            if which == 3:
                columns.append(Growing())
            if which in (4, 5):
                columns[-1].cut(len(columns[-1]) // 2)
            if which == 5:  # grown again, then cut back less far than the first cut
                columns[-1].extend(np.array(values))
                columns[-1].cut(len(columns[-1]) - len(values) // 2)
            target = columns[-1] if which in (0, 1, 3, 4, 5) else columns[which % len(columns)]
            target.extend(np.array(values + ([math.nan] if nan and which == 2 else [])))
            joined, _ = kept.join(columns)
            want = np.concatenate([c.view() for c in columns])
            assert joined.tolist() == want.tolist() or nan
            got = kept.median(joined)
            assert repr(got) == repr(float(np.median(want)) if len(want) else None)
            streams = []
            for c in columns:
                s = RankStream("0", 0)
                s.loads = c
                streams.append(s)
            assert repr(sections_of(streams, options, sections, streams)) == repr(
                sections_of(streams, options, Joined(), streams)
            )
    finally:
        _rank_columns.MERGE_AFTER = saved


def _loads(attempt: int, t0: float, n: int, seconds: float) -> list[Event]:
    out = []
    for i in range(n):
        t = t0 + i
        out += [
            Event(ts=t, kind=Kind.STEP_START, job=JOB, attempt=attempt, step=attempt * 100 + i),
            Event(ts=t + 0.1, kind=Kind.DATA_LOADING_START, job=JOB, attempt=attempt),
            Event(ts=t + 0.1 + seconds, kind=Kind.DATA_LOADING_END, job=JOB, attempt=attempt),
        ]
    return out


def test_the_recent_data_loads_are_the_newest_attempts_and_kept_as_it_runs() -> None:
    """Read in the store's order (attempt 10 before attempt 2), a rank's streams are joined in
    time order: the recent data-load median is the newest attempt's, and while that attempt
    runs, only its new loads and steps are taken (the joined columns are kept, not redone)."""
    tracker = RankTracker()
    for a in sorted(range(12), key=str):  # 0, 1, 10, 11, 2, ..., 9
        tracker.ingest(
            _loads(a, T0 + 1000.0 * a, 30 if a == 11 else 8, 0.5 if a == 11 else 0.1), JOB
        )
    attempts = [(str(a), T0 + 1000.0 * a, T0 + 1000.0 * a + 40, a < 11, False) for a in range(12)]
    options = RankOptions()
    (view,) = tracker.analyze(attempts, None, options).ranks
    assert view.sections["data_loading"].recent_p50 == pytest.approx(0.5)
    assert view.sections["data_loading"].best_p50 == pytest.approx(0.1)
    more = _loads(11, T0 + 11_030.0, 5, 0.5)
    for k in range(3):  # the running attempt goes on
        tracker.ingest(more[5 * k : 5 * k + 5], JOB)
        got = tracker.analyze(attempts, None, options)
        assert tracker._joined[("loads", 0)].values is not None  # grown, not joined again
        assert tracker._joined[("steps", 0)].values is not None
        cold = RankTracker()
        for a in sorted(range(12), key=str):
            cold.ingest(
                _loads(a, T0 + 1000.0 * a, 30 if a == 11 else 8, 0.5 if a == 11 else 0.1), JOB
            )
        cold.ingest(more[: 5 * k + 5], JOB)
        assert repr(got) == repr(cold.analyze(attempts, None, options))


@settings(max_examples=300, deadline=None)
@given(
    writers=st.lists(
        st.tuples(
            st.sampled_from([0, 1, "0", None, True, 1.0]),  # 1, True and 1.0 are one key
            st.sampled_from([0, 1, None]),
            st.sampled_from([7, None]),
        ),
        min_size=1,
        max_size=60,
    ),
    cuts=st.lists(st.integers(0, 60), max_size=8),
)
def test_writers_looked_up_by_run_are_numbered_as_event_by_event(
    writers: list[tuple[Any, Any, Any]], cuts: list[int]
) -> None:
    """A batch told its runs (files) numbers its writers as one lookup per event does,
    whether a run has one writer (one lookup for the run) or several. Fails if a run's
    writer is numbered out of first-seen order or a run is filled with the wrong one."""
    evs = [
        Event(ts=T0 + i, kind=Kind.HEARTBEAT, job=JOB, attempt=a, rank=r, pid=p)
        for i, (a, r, p) in enumerate(writers)
    ]
    n = len(evs)
    bounds = sorted({0, n, *(c for c in cuts if c <= n)})
    runs = list(itertools.pairwise(bounds))
    saved, _batch._EVENTS_PER_RUN_MIN = _batch._EVENTS_PER_RUN_MIN, 1  # runs of any length
    try:
        plain, by_run = Batch(evs), Batch(evs, runs)
        # runs that do not cover the batch one after the other are not taken as runs
        partial = Batch(evs, [(0, n // 2)])
    finally:
        _batch._EVENTS_PER_RUN_MIN = saved
    assert by_run.keys == plain.keys
    assert by_run.group.tolist() == plain.group.tolist()
    assert all(by_run.keys[g] == w for g, w in zip(by_run.group.tolist(), writers, strict=True))
    assert partial.group.tolist() == plain.group.tolist()


def test_writers_looked_up_by_run_with_long_runs() -> None:
    """Runs of 48 events (a job of many one-process files): the shortcut is taken."""
    evs = [
        Event(ts=T0 + i, kind=Kind.HEARTBEAT, job=JOB, attempt=i // 48, rank=0, pid=1)
        for i in range(48 * 50)
    ]
    runs = [(k, k + 48) for k in range(0, len(evs), 48)]
    by_run = Batch(evs, runs)
    assert len(by_run.keys) == 50 and by_run.group.tolist() == [i // 48 for i in range(len(evs))]


@pytest.mark.parametrize(
    ("blocking", "plain"),
    [
        ({}, True),  # nothing sets blocking
        ({0: True}, True),  # only a custom interval does: the data loads are still plain
        ({1: False}, False),  # a data load says it overlaps
        ({0: True, 2: True}, False),
    ],
)
def test_loads_plain_looks_at_the_data_loading_marks(
    blocking: dict[int, bool], plain: bool
) -> None:
    kinds = [Kind.CUSTOM_START, Kind.DATA_LOADING_START, Kind.DATA_LOADING_END, Kind.CUSTOM_END]
    evs = [
        Event(
            ts=T0 + i,
            kind=kind,
            job=JOB,
            name="eval" if kind.startswith("custom") else None,
            blocking=blocking.get(i),
        )
        for i, kind in enumerate(kinds)
    ]
    assert Batch(evs).loads_plain() is plain


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=40))
def test_one_large_stream_pairs_its_marks_as_streams_paired_together(
    marks: list[tuple[int, bool]],
) -> None:
    """A stream with a pass of its own (a large one; here, the only one) pairs its
    blocking data-load marks as it would in a pass shared with others: at equal times
    starts first (so an end and the next start at one time nest), every bucket alone."""
    t = T0
    alone, shared, other = RankStream("0", 0), RankStream("0", 0), RankStream("1", 0)
    for gap, is_start in marks:
        t += gap  # a gap of 0: the same time as the mark before
        for s in (alone, shared):
            s.pair_ts.append(t)
            s.pair_code.append(int(is_start))  # bucket 0: data loading
    other.pair_ts.extend([T0, T0 + 1.0])
    other.pair_code.extend([1, 0])
    settle_streams([alone])
    settle_streams([shared, other])
    assert list(alone.loads.view()) == list(shared.loads.view())
    assert {b: (p.total, p.paired, p.irregular, p.stack) for b, p in alone.pairing.items()} == {
        b: (p.total, p.paired, p.irregular, p.stack) for b, p in shared.pairing.items()
    }
    assert (alone.buckets, alone.open) == (shared.buckets, shared.open)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 7, 50, 99, 100, 250]), max_size=12))
def test_streams_are_taken_in_runs_and_a_large_one_has_a_run_of_its_own(sizes: list[int]) -> None:
    """Runs of about CHUNK values, in order, every stream once; a stream of CHUNK values or
    more alone in its run, even after a small one (its passes then read its columns in
    place and pair its marks in pieces: a launcher's few marks before a trainer's two
    million made one pass over both, and its temporaries 60 MB)."""
    streams = [RankStream(str(i), 0) for i in range(len(sizes))]
    saved, _rank_stream.CHUNK = _rank_stream.CHUNK, 100
    try:
        chunks = in_chunks(streams, sizes)
    finally:
        _rank_stream.CHUNK = saved
    assert [s for chunk in chunks for s in chunk] == streams
    size_of = {id(s): n for s, n in zip(streams, sizes, strict=True)}
    for chunk in chunks:
        assert chunk
        if any(size_of[id(s)] >= 100 for s in chunk):
            assert len(chunk) == 1
        # a run is closed once it holds CHUNK values (each stream counts one more)
        assert sum(size_of[id(s)] + 1 for s in chunk[:-1]) < 100


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(20, 400),
    st.sampled_from([3, 16, 1 << 18]),
    st.booleans(),
)
def test_marks_of_two_processes_of_one_rank_paired_a_piece_at_a_time_in_time_order(
    seed: int, n_loads: int, piece: int, ties: bool
) -> None:
    """Two data-loader processes of one rank, each writing its own file: the stream's
    marks arrive as one file's loads then the other's, out of time order. Paired a piece at
    a time in time order (``piece``), with loads that sometimes nest or touch (``ties``:
    an end and the next start at one time), they give what one pass over all of them gives,
    and the reference: seconds, open starts and each load's duration in time order."""
    rng = np.random.default_rng(seed)
    by_pid: dict[int, list[Event]] = {2: [], 3: []}
    t = T0
    for i in range(n_loads):
        t += float(rng.choice([0.0, 0.5])) if ties else float(rng.uniform(0.1, 1.0))
        pid = 2 + int(rng.integers(0, 2))
        length = float(rng.choice([0.0, 0.2, 3.0]))  # 3 s: overlaps the next loads
        for kind, at in (("data_loading_start", t), ("data_loading_end", t + length)):
            by_pid[pid].append(Event(ts=at, kind=kind, job=JOB, attempt=0, rank=0, pid=pid))
        if i == n_loads - 1 and rng.integers(0, 2):
            by_pid[pid].pop()  # the last load still open
    events = by_pid[2] + by_pid[3]  # one file, then the other
    pieces, whole = RankTracker(), RankTracker()
    pieces.ingest(events, JOB)
    whole.ingest(events, JOB)
    (s,) = pieces.streams.values()
    (w,) = whole.streams.values()
    saved = _rank_settle._SETTLE_PIECE
    try:
        _rank_settle._SETTLE_PIECE = piece
        settle_streams([s])
        _rank_settle._SETTLE_PIECE = 1 << 30  # one pass
        settle_streams([w])
    finally:
        _rank_settle._SETTLE_PIECE = saved
    got = (s.buckets, s.open, s.loads.view().tolist())
    assert got == (w.buckets, w.open, w.loads.view().tolist())
    assert got == reference_settle(s)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**32 - 1),
    st.integers(10, 120),
    st.lists(st.integers(0, 3), min_size=1, max_size=30),
    st.booleans(),
)
def test_marks_that_arrive_late_at_every_look_are_paired_from_an_earlier_pairing(
    seed: int, n_loads: int, lags: list[int], ties: bool
) -> None:
    """A running rank written by two processes, each its own file, one read a few looks
    after the other (``lags``: how many looks each flush of the second one waits): its
    marks arrive late at most looks. Paired after every look, the stream goes back to an
    earlier pairing instead of its first mark, and gives the reference of the marks so far:
    seconds, open starts and each load's duration in time order (a compile interval of the
    second process beside the loads: another bucket)."""
    rng = np.random.default_rng(seed)
    t = T0
    looks: list[list[Event]] = [[] for _ in range(n_loads + max(lags) + 2)]
    for i in range(n_loads):
        t += float(rng.choice([0.0, 0.5])) if ties else float(rng.uniform(0.1, 1.0))
        pid = 2 + int(rng.integers(0, 2))
        wait = lags[i % len(lags)] if pid == 3 else 0
        # 3 s: overlaps the next loads, and its end is written a look later (a start is
        # open at a look); with ties, ends and starts of both processes meet at one time
        length = float(rng.choice([0.0, 0.5 if ties else 0.2, 3.0]))
        kinds = ["data_loading_start", "data_loading_end"]
        if pid == 3 and rng.integers(0, 4) == 0:
            kinds = ["compile_start", "compile_end"]
        for kind, at, later in zip(kinds, (t, t + length), (0, int(length > 1)), strict=True):
            looks[i + wait + later].append(
                Event(ts=at, kind=kind, job=JOB, attempt=0, rank=0, pid=pid)
            )
    live = RankTracker()
    with spy(_rank_settle, "_rewind") as rewinds:
        for look in looks:
            if not look:
                continue
            live.ingest(sorted(look, key=lambda e: (e.pid, e.ts)), JOB)
            (s,) = live.streams.values()
            settle_streams([s])
            assert (s.buckets, s.open, s.loads.view().tolist()) == reference_settle(s)
    if lags == [2] and not ties and n_loads >= 40:  # late flushes meet a pairing before them
        assert any(rewinds), "never paired from an earlier pairing"


def test_a_late_look_pairs_again_only_the_marks_since_an_earlier_pairing() -> None:
    """The property above on the shape it is for, counted: a loader process read two looks
    after the trainer's, 300 loads. Every look after the first few goes back, and the marks
    paired over all the looks are a few times the marks (pairing all of them again at each
    look: about looks x marks / 2)."""
    looks: list[list[Event]] = [[] for _ in range(303)]
    for i in range(300):
        t = T0 + i
        pid = 2 + i % 2
        for kind, at in (("data_loading_start", t), ("data_loading_end", t + 0.5)):
            looks[i + (2 if pid == 3 else 0)].append(
                Event(ts=at, kind=kind, job=JOB, attempt=0, rank=0, pid=pid)
            )
    live = RankTracker()
    with spy(_rank_settle, "_settle_columns", lambda args, _: len(args[1])) as passes:
        for look in looks:
            live.ingest(look, JOB)
            (s,) = live.streams.values()
            settle_streams([s])
    assert s.loads.view().tolist() == [0.5] * 300
    assert s.buckets == {"data_loading": 150.0}
    assert sum(passes) < 5 * 600, sum(passes)  # (the marks of each pass, all the passes)


def test_a_late_start_at_the_time_of_the_newest_mark_taken_is_paired_from_the_first() -> None:
    """A late start at the very time of the newest mark taken (an end of the other process)
    comes before that end in time order (starts first at equal times): no earlier pairing
    ends before it, so the stream is paired again from its first mark, as one pass pairs
    it (the pairing kept at that time would take the end first)."""
    a, b = 2, 3

    def load(pid: int, start: float, end: float) -> list[Event]:
        return [
            Event(ts=T0 + start, kind="data_loading_start", job=JOB, attempt=0, rank=0, pid=pid),
            Event(ts=T0 + end, kind="data_loading_end", job=JOB, attempt=0, rank=0, pid=pid),
        ]

    live = RankTracker()
    for look in (load(a, 0.0, 1.0), load(a, 3.0, 4.0), load(b, 1.0, 2.0)):
        live.ingest(look, JOB)
        (s,) = live.streams.values()
        settle_streams([s])
    # in time order: start 0, start 1, end 1 (pairs the start at 1), end 2, start 3, end 4
    assert s.loads.view().tolist() == [0.0, 2.0, 1.0] == reference_settle(s)[2]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**32 - 1),
    st.integers(10, 150),
    st.lists(st.integers(0, 3), min_size=1, max_size=20),
    st.booleans(),
)
@example(seed=1, n_steps=120, lags=[2], ties=False)
@example(seed=2, n_steps=120, lags=[2], ties=True)
# a point at a pass's newest time, then values of that time in a later pass (not late)
@example(seed=1152369, n_steps=105, lags=[1], ties=True)
def test_values_that_arrive_late_at_every_look_are_derived_from_a_gap_point(
    seed: int, n_steps: int, lags: list[int], ties: bool
) -> None:
    """A running rank: its trainer writes steps at once, a loader process writes the loads
    a few looks later (``lags``), sometimes with a long silence. Derived after every look,
    the stream goes on from a gap point before the late loads, not from its first value,
    and its derived values are the reference's: span, step times, count, first and last
    progress, longest gap (``ties``: times on a coarse grid, many equal)."""
    rng = np.random.default_rng(seed)
    looks: list[list[Event]] = [[] for _ in range(n_steps + max(lags) + 1)]
    t = T0
    for i in range(n_steps):
        t += float(rng.choice([0.0, 0.5, 1.0])) if ties else float(rng.uniform(0.1, 1.0))
        if rng.integers(0, 20) == 0:
            t += 30.0  # a silence: the longest gap moves
        looks[i].append(Event(ts=t, kind="step_start", job=JOB, attempt=0, rank=0, step=i))
        wait = lags[i % len(lags)]
        for kind, at in (("data_loading_start", t), ("data_loading_end", t + 0.5)):
            looks[i + wait].append(Event(ts=at, kind=kind, job=JOB, attempt=0, rank=0, pid=7))
    live = RankTracker()
    with spy(_rank_derive, "_derive_from_point") as from_points:
        for look in looks:
            if not look:
                continue
            live.ingest(look, JOB)
            (s,) = live.streams.values()
            assert _derived_state(s) == reference_derived(s)
    if lags == [2] and n_steps >= 60:  # late at every look, with points 8+ values back
        assert any(from_points), "never derived from a gap point"


@settings(max_examples=300, deadline=None)
@given(
    table=st.lists(
        st.tuples(
            st.sampled_from([JOB, "other"]),
            st.sampled_from([0, 1, "0", None]),
            st.sampled_from(["h", None]),
            st.sampled_from([0, 1, None]),
            st.sampled_from([7, None]),
        ),
        min_size=1,
        max_size=6,
    ),
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=60),
)
def test_writers_given_by_the_decoder_are_numbered_as_event_by_event(
    table: list[tuple[Any, Any, Any, Any, Any]], picks: list[int]
) -> None:
    """Each event's writer given as an index into a table of writers (an archive's rows of
    a shared file; runs of files each of one writer, joined): the batch numbers them, and
    says which events are of a job, as one lookup per event does. The table may hold a
    writer twice, one no event has, and two that differ only in job or host."""
    index = [p % len(table) for p in picks]
    evs = [
        Event(ts=T0 + i, kind=Kind.HEARTBEAT, job=j, attempt=a, host=h, rank=r, pid=p)
        for i, (j, a, h, r, p) in enumerate(table[w] for w in index)
    ]
    n = len(evs)
    columns = DecodedColumns(
        np.full(n, KIND_CODE[Kind.HEARTBEAT], np.int16),
        np.zeros(n, np.int64),
        writers=(np.array(index, np.int32), tuple(table)),
    )
    given_, plain = Batch(evs, None, columns), Batch(evs)
    assert given_.keys == plain.keys
    assert given_.group.tolist() == plain.group.tolist()
    for job in (JOB, "other"):
        mine, want = given_.same_job(job), plain.same_job(job)
        assert (mine is None) == (want is None)
        assert mine is None or want is None or mine.tolist() == want.tolist()
