"""The per-rank view, straggler scores and stalls (engine/_ranks.py), on hand-made logs."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from badput.engine import Accountant, RankOptions, Report
from badput.events import Event
from badput.report import to_json
from badput.testing import Timeline

T0 = 1_700_000_000.0


def summary(tl: Timeline, p50: float, count: int = 10, **fields: Any) -> None:
    """A section_summary of ``count`` forward runs all lasting ``p50`` seconds."""
    q = {"min": p50, "p50": p50, "p90": p50, "max": p50}
    fields.setdefault("last", tl.now)
    tl.emit(
        "section_summary", name="forward", count=count, seconds=count * p50, quantiles=q, **fields
    )


def job(
    forward: dict[int, list[float]],
    *,
    ranks: int = 4,
    steps_per_period: int = 10,
    step: float = 0.5,
    end: bool = True,
) -> list[list[Event]]:
    """Each rank: job_start, periods of steps each followed by a summary of its forward p50
    (``forward[rank][period]``, default 0.02 s), job_end. One event list per rank."""
    out = []
    periods = max(len(v) for v in forward.values()) if forward else 3
    for r in range(ranks):
        tl = Timeline("j", start=T0, rank=r, host=f"h{r // 2}")
        tl.emit("job_start")
        n = 0
        for period in range(periods):
            for _ in range(steps_per_period):
                tl.span("data_loading", 0.01)
                tl.span("step", step, step=n)
                n += 1
            summary(tl, forward.get(r, [0.02] * periods)[period])
        if end:
            tl.emit("job_end", dt=0.1, status="completed")
        out.append(tl.events)
    return out


def report_of(streams: list[list[Event]], options: RankOptions | None = None, **kw: Any) -> Report:
    acc = Accountant("j")
    if options is not None:
        acc.rank_options = options
    for i, events in enumerate(streams):
        acc.ingest_events(events, source=f"rank{i}.jsonl")
    return acc.report(**kw)


def test_relative_score_names_the_slow_rank_only() -> None:
    rep = report_of(job({1: [0.05, 0.05, 0.05]}))
    assert [(s.rank, s.section) for s in rep.stragglers] == [(1, "forward")]
    s = rep.stragglers[0]
    # NVIDIA's relative score: the best rank's median / this rank's median.
    assert s.relative_score == pytest.approx(0.02 / 0.05)
    assert s.individual_score == pytest.approx(1.0)  # slow from the start: not slower than itself
    assert s.recent_seconds == pytest.approx(0.05)
    assert s.reference_seconds == pytest.approx(0.02)
    assert s.host == "h0"
    others = [v.sections["forward"].relative_score for v in rep.ranks if v.rank != 1]
    assert others == [pytest.approx(1.0)] * 3


def test_individual_score_catches_a_rank_that_slowed_down() -> None:
    rep = report_of(job({2: [0.02, 0.02, 0.04]}))
    (s,) = rep.stragglers
    assert s.rank == 2
    assert s.individual_score == pytest.approx(0.5)  # its best 0.02 / its recent 0.04
    assert s.relative_score == pytest.approx(0.5)
    assert rep.ranks[2].sections["forward"].best_p50 == pytest.approx(0.02)
    assert rep.ranks[2].sections["forward"].recent_p50 == pytest.approx(0.04)


def test_all_ranks_slowing_together_is_individual_not_relative() -> None:
    rep = report_of(job({r: [0.02, 0.02, 0.03] for r in range(4)}))
    assert sorted(s.rank for s in rep.stragglers) == [0, 1, 2, 3]
    for s in rep.stragglers:
        assert s.relative_score == pytest.approx(1.0)
        assert s.individual_score == pytest.approx(2 / 3)


def test_threshold_and_min_excess() -> None:
    # 0.02 vs 0.025: score 0.8, above the default 0.75; below a threshold of 0.9.
    streams = job({3: [0.025] * 3})
    assert report_of(streams).stragglers == []
    assert [
        s.rank for s in report_of(streams, RankOptions(straggler_threshold=0.9)).stragglers
    ] == [3]
    # Microsecond sections: half the speed but 20 us slower is noise, not a straggler.
    tiny = job({r: [20e-6] * 3 for r in range(4)} | {0: [40e-6] * 3})
    assert report_of(tiny).stragglers == []
    assert report_of(tiny, RankOptions(min_excess=0.0)).stragglers[0].rank == 0


def test_periods_with_too_few_runs_give_no_median() -> None:
    streams = job({})
    tl = Timeline("j", start=T0 + 1000, rank=1, host="h0")
    summary(tl, 0.5, count=2)  # two runs only: not a median (min_samples 3)
    streams.append(tl.events)
    rep = report_of(streams)
    assert rep.stragglers == []
    forward = rep.ranks[1].sections["forward"]
    assert forward.count == 32 and forward.recent_p50 == pytest.approx(0.02)


def test_data_loading_is_a_section() -> None:
    streams = job({})
    slow = Timeline("j", start=T0 + 100, rank=3, host="h1")
    for n in range(20):
        slow.span("data_loading", 0.2)
        slow.span("step", 0.5, step=100 + n)
    streams[3] = streams[3][:-1] + slow.events  # rank 3 then loads slowly (before job_end)
    rep = report_of(streams)
    (s,) = rep.stragglers
    assert (s.rank, s.section) == (3, "data_loading")
    assert s.relative_score == pytest.approx(0.01 / 0.2, rel=1e-5)
    assert s.individual_score == pytest.approx(0.01 / 0.2, rel=1e-5)


def test_per_rank_view() -> None:
    rep = report_of(job({}))
    assert [v.rank for v in rep.ranks] == [0, 1, 2, 3]
    v = rep.ranks[2]
    assert v.host == "h1" and v.attempts == 1
    assert v.steps == 30 and v.first_step == 0 and v.last_step == 29
    assert v.typical_step_time == pytest.approx(0.51)
    assert v.data_loading_seconds == pytest.approx(0.3)
    assert v.buckets == {"data_loading": pytest.approx(0.3)}
    assert v.first_event == T0 and v.last_event == pytest.approx(T0 + 30 * 0.51 + 0.1)
    assert v.last_progress == pytest.approx(T0 + 30 * 0.51)
    assert v.outlier == []
    data = __import__("json").loads(to_json(rep))
    assert data["ranks"][2]["sections"]["forward"]["count"] == 30
    assert data["stragglers"] == [] and data["stalls"] == []


def test_windowed_reports_have_no_rank_analysis() -> None:
    rep = report_of(job({1: [0.05] * 3}), window=(T0, T0 + 5))
    assert rep.ranks == [] and rep.stragglers == [] and rep.stalls == []


def hung_job(
    hang_rank: int = 2, stall: float = 120.0, *, heartbeats: bool = True
) -> list[list[Event]]:
    """4 ranks, 10 steps; at step 10 ``hang_rank`` stops inside forward while the others
    finish forward and wait; ``stall`` seconds later the launcher ends the attempt."""
    out = []
    for r in range(4):
        tl = Timeline("j", start=T0, rank=r, host=f"h{r // 2}")
        tl.emit("job_start")
        tl.steps(10, 1.0)
        summary(tl, 0.2)
        tl.emit("step_start", step=10)
        if r != hang_rank:
            tl.advance(0.2)
            summary(tl, 0.2, count=1)  # forward of step 10 done, then the all-reduce waits
        entered = tl.now - (0.2 if r != hang_rank else 0.0)
        if heartbeats:  # the writer thread lives on: heartbeats are not progress
            for k in range(int(stall // 10)):
                tl.emit("heartbeat", dt=10.0)
                if r == hang_rank and k == 0:  # its next summary: forward open since step 10
                    summary(tl, 0.2, count=0, last=T0 + 9.0, open_since=entered)
        out.append(tl.events)
    end = Timeline("j", start=T0 + 10 + 0.2 + stall, rank=None, host="h0")
    end.emit("attempt_end", status="hung", exit_code=137)
    out.append(end.events)
    return out


def test_stall_names_the_rank_that_never_finished_its_section() -> None:
    rep = report_of(hung_job())
    (stall,) = rep.stalls
    assert stall.first_stopped == [2]
    assert stall.why == "did not finish a section the others finished"
    assert stall.open_sections == {"2": "forward"}
    assert stall.last_step == 10
    assert stall.start == pytest.approx(T0 + 10.2)  # the others' last progress
    assert stall.seconds == pytest.approx(120.0)
    assert stall.threshold == 60.0  # max(10 x 1 s, the 60 s floor)
    assert not stall.ongoing
    # Where the partition put it (the open last step, then the attempt's final silence,
    # hung: docs/accounting.md "Hung time"), and it sums up.
    assert sum(stall.buckets.values()) == pytest.approx(120.0)
    assert stall.buckets["hung"] > 100
    assert rep.ranks[2].outlier == ["stopped first in a stall"]


def test_stall_names_the_rank_that_never_reached_the_step() -> None:
    streams = hung_job(hang_rank=-1, heartbeats=False)
    streams[3] = [e for e in streams[3] if not (e.kind == "step_start" and e.step == 10)]
    (stall,) = report_of(streams).stalls
    assert stall.first_stopped == [3]
    assert stall.why == "never reached the step the others reached"


def test_no_stall_below_the_threshold_and_short_floor() -> None:
    assert report_of(hung_job(stall=50.0)).stalls == []
    (stall,) = report_of(hung_job(stall=50.0), RankOptions(stall_floor=20.0)).stalls
    assert stall.threshold == 20.0 and stall.seconds == pytest.approx(50.0)


def test_live_stall_is_ongoing() -> None:
    streams = hung_job()
    streams.pop()  # no attempt_end yet: still hung
    t_stop = T0 + 10.2
    acc = Accountant("j")
    for i, events in enumerate(streams):
        acc.ingest_events(events, source=f"r{i}")
    assert acc.report(now=t_stop + 59.0).stalls == []
    (stall,) = acc.report(now=t_stop + 61.0).stalls
    assert stall.ongoing and stall.first_stopped == [2]
    assert stall.seconds == pytest.approx(61.0)
    assert acc.progress(0) == (
        pytest.approx(t_stop),
        pytest.approx(t_stop - 0.2 + 120.0),  # rank 2's heartbeats go on
        pytest.approx(1.0),
    )


def test_ranks_are_summarised_and_outliers_listed_first() -> None:
    from rich.console import Console

    from badput.report import render_table

    streams = job({7: [0.05] * 3}, ranks=40)
    rep = report_of(streams)
    con = Console(record=True, width=100)
    render_table(rep, con, ranks=True)
    text = con.export_text()
    rows = [line for line in text.splitlines() if line.strip().startswith("7 ")]
    assert len(rows) == 1 and "straggler in forward" in rows[0]
    assert "other ranks: 39 ranks on 20 hosts" in text
    assert "Stragglers (1)" in text


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=1, max_value=7))
def test_split_and_order_do_not_change_the_analysis(seed: int, pieces: int) -> None:
    """However the ranks' files are split into ingest calls, merged or ordered, same answer."""
    streams = hung_job(stall=90.0) + job({1: [0.05] * 3}, end=False)[:1]
    whole = report_of(streams)
    rng = random.Random(seed)
    chunks = []
    for i, events in enumerate(streams):
        cuts = sorted(rng.sample(range(1, len(events)), min(pieces, len(events) - 1)))
        for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True):
            chunks.append((f"f{i}", events[a:b]))
    rng.shuffle(chunks)
    half = len(chunks) // 2
    first, second = Accountant("j"), Accountant("j")
    for source, events in chunks[:half]:
        first.ingest_events(events, source=source)
    for source, events in chunks[half:]:
        second.ingest_events(events, source=source)
    first.merge(second)
    split = first.report()
    for field in ("ranks", "stragglers", "stalls"):  # sums may differ in the last bit only
        assert _rounded(split.to_dict()[field]) == _rounded(whole.to_dict()[field])


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def test_stall_names_a_rank_stuck_inside_its_section_when_counts_are_equal() -> None:
    """The others could not report finishing forward (their writer blocked with them): the
    rank whose summaries, written during the stall, show forward open since before it."""
    streams = hung_job()
    for r in (0, 1, 3):
        streams[r] = [e for e in streams[r] if not (e.kind == "section_summary" and e.count == 1)]
    (stall,) = report_of(streams).stalls
    assert stall.first_stopped == [2]
    assert stall.why == "stayed inside a timed section during the stall"


def test_no_stall_after_the_last_step_of_a_completed_job() -> None:
    streams = job({})  # then two minutes of shutdown after the last step, and job_end
    tail = Timeline("j", start=streams[0][-1].ts + 120.0, rank=None, host="h0")
    tail.emit("job_end", status="completed")
    streams = [[e for e in ev if e.kind != "job_end"] for ev in streams] + [tail.events]
    rep = report_of(streams)
    assert rep.end_reason == "job_end" and rep.total_seconds > 130
    assert rep.stalls == []


def test_outliers_need_a_real_excess() -> None:
    """Noise on tiny totals is not an outlier; a rank whose loads cost seconds more is."""
    streams = job({})
    tl = Timeline("j", start=T0 + 100, rank=3, host="h1")
    tl.span("data_loading", 0.0004)  # 0.4 ms more than the others: noise
    tl.span("step", 0.5, step=30)
    noisy = [*streams[:3], streams[3][:-1] + tl.events]
    assert all(not v.outlier for v in report_of(noisy).ranks)
    tl.span("data_loading", 2.0)  # 2 s more: over 1 % of its ~15 s of steps
    tl.span("step", 0.5, step=31)
    slow = [*streams[:3], streams[3][:-1] + tl.events]
    reasons = [[x for x in v.outlier if "loading" in x] for v in report_of(slow).ranks]
    assert reasons == [[], [], [], ["slow data loading"]]


def test_a_log_without_attempt_ids_has_its_stall_found() -> None:
    streams = hung_job()
    idless = [[replace(e, attempt=None) for e in events] for events in streams]
    (stall,) = report_of(idless).stalls
    assert stall.first_stopped == [2] and stall.seconds == pytest.approx(120.0)
