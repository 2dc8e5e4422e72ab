"""ACCOUNTING.md §9 "Settled points": each defect of issue 9 with the log that showed it.

Every case is checked without a window and in a window that covers the whole job (the
same numbers, at-risk included), and where it matters live (``now``) and with ids or not.
"""

from __future__ import annotations

import itertools
import math

import msgspec
import pytest

from badput.engine import Accountant, Report
from badput.engine._model import BUCKETS
from badput.events import Event


def E(ts: float, kind: str, **f: object) -> Event:  # noqa: N802 - short builder for tables
    f.setdefault("job", "j")
    return Event(ts=ts, kind=kind, **f)  # type: ignore[arg-type]


def steps(first: int, starts: list[float], *, ends: bool = True, **f: object) -> list[Event]:
    """Steps first, first+1, ... starting at ``starts``; each ends at the next start."""
    out = []
    for k, (a, b) in enumerate(itertools.pairwise(starts)):
        out.append(E(a, "step_start", step=first + k, **f))
        if ends:
            out.append(E(b, "step_end", step=first + k, **f))
    return out


def report(events: list[Event], ideal: float | None = 10.0, **kw: object) -> Report:
    acc = Accountant("j", ideal_step_time=ideal)
    acc.ingest_events(events)
    return acc.report(**kw)  # type: ignore[arg-type]


def both(events: list[Event], ideal: float | None = 10.0, **kw: object) -> Report:
    """The report without a window, checked equal to a window covering the whole job."""
    r = report(events, ideal, **kw)
    w = report(events, ideal, window=(r.start - 100.0, r.end + 100.0), **kw)
    assert w.total_seconds == pytest.approx(r.total_seconds)
    assert set(w.buckets) == set(r.buckets)
    for name, v in r.buckets.items():
        assert w.buckets[name] == pytest.approx(v, abs=1e-9), name
    assert w.at_risk_seconds == pytest.approx(r.at_risk_seconds, abs=1e-9)
    assert w.steps == r.steps
    assert math.isclose(sum(r.buckets.values()), r.total_seconds, abs_tol=1e-9)
    return r


def with_ids(events: list[Event], attempt_of: list[int]) -> list[Event]:
    """The same log with attempt ids."""
    return [msgspec.structs.replace(e, attempt=a) for e, a in zip(events, attempt_of, strict=True)]


# ------------------------------------------------------------------ defect 1 (§9.1)


def test_no_checkpoint_every_kept_step_is_at_risk() -> None:
    log = [E(0, "job_start"), *steps(1, [0, 10, 20, 30])]
    r = both(log)
    assert r.at_risk_seconds == pytest.approx(30.0)  # was 0 without a window, 30 with one
    assert r.buckets == {"productive": 30.0}
    # §9.10: a partial window only holds the at-risk time inside it
    assert report(log, window=(15.0, 30.0)).at_risk_seconds == pytest.approx(15.0)
    # live, before the end: the open last step reached by now is at risk up to now
    assert both(log, now=25.0).at_risk_seconds == pytest.approx(25.0)


# ------------------------------------------------------------------ defect 2 (§9.6)


def test_idless_job_end_after_attempt_end_ends_the_job() -> None:
    log = [
        E(0, "job_start"),
        *steps(1, [0, 10, 20]),
        E(20, "attempt_end", status="failed"),
        E(25, "job_end", status="failed"),  # the launcher has no restart left
    ]
    r = both(log)
    assert r.end_reason == "job_end"
    assert r.total_seconds == pytest.approx(25.0)  # was 20: cut at the attempt_end
    assert r.at_risk_seconds == 0.0  # the job is over: nothing left to lose
    assert not [d for d in r.diagnostics if d.code == "no_job_end"]
    assert r.buckets == {"productive": 20.0, "untracked": 5.0}
    same_with_ids = both(with_ids(log, [0] * len(log)))
    assert same_with_ids.buckets == r.buckets
    assert same_with_ids.end_reason == "job_end"


# ------------------------------------------------------------------ defect 3 (§9.3)


def test_step_wholly_covered_by_an_eval_counts_no_step_in_n_times_i() -> None:
    log = [
        E(0, "job_start"),
        *steps(1, [0, 11, 22, 33]),
        E(33, "step_start", step=4),
        E(33, "custom_start", name="eval"),
        E(43, "custom_end", name="eval"),
        E(43, "step_end", step=4),
        E(43, "job_end"),
    ]
    r = both(log)
    # 3 steps of 11 s, I = 10: productive 30, slowdown 3 (was 33/0 without a window)
    assert r.buckets == pytest.approx({"productive": 30.0, "slowdown": 3.0, "custom:eval": 10.0})
    assert r.steps.kept == 4  # the zero-time step still counts as a kept step


def test_open_last_step_reached_by_now_at_its_start_counts_no_step() -> None:
    log = [E(0, "job_start"), *steps(1, [0, 11, 22, 33], ends=False)]
    log.append(E(33, "step_start", step=4))
    r = both(log, now=33.0)
    assert r.buckets == pytest.approx({"productive": 30.0, "slowdown": 3.0})
    assert r.steps.kept == 4


def test_issue_figures_34_over_0_vs_30_over_4() -> None:
    """The issue's figures: productive/slowdown 34/0 without a window, 30/4 with one."""
    log = [
        E(0, "job_start"),
        *steps(1, [0, 10, 22, 34]),  # 10, 12, 12 s: no startup (m = 12)
        E(34, "step_start", step=4),
        E(34, "custom_start", name="eval"),
        E(44, "custom_end", name="eval"),
        E(44, "step_end", step=4),
        E(44, "job_end"),
    ]
    r = both(log)
    assert r.buckets == pytest.approx({"productive": 30.0, "slowdown": 4.0, "custom:eval": 10.0})


# ------------------------------------------------------------------ defect 4 (§9.4)


def test_sparse_record_straddling_the_checkpoint_is_split_by_step_number() -> None:
    log = [
        E(0, "job_start"),
        E(0, "step_start", step=1),
        E(100, "step_start", step=11),  # record 11..20
        E(150, "checkpoint_committed", step=15),
        E(200, "step_start", step=21),  # record 21..30
        E(300, "step_start", step=31),
        E(310, "step_end", step=31),
    ]
    r = both(log)
    # steps 16..20 (50 s) + 21..30 (100 s) + 31 (10 s); was 110 in a whole-job window
    assert r.at_risk_seconds == pytest.approx(160.0)
    assert r.steps.kept == 31


def test_issue_figures_150_vs_100() -> None:
    log = [
        E(0, "job_start"),
        E(0, "step_start", step=1),
        E(100, "step_start", step=11),
        E(150, "checkpoint_committed", step=15),
        E(200, "step_start", step=21),
        E(300, "step_start", step=31),
    ]
    r = both(log, now=300.0)
    assert r.at_risk_seconds == pytest.approx(150.0)  # 50 of record 11..20 + 100


# ------------------------------------------------------------------ defect 5 (§9.6)


def test_idless_accounting_rank_is_chosen_per_attempt() -> None:
    log = [
        E(0, "job_start", rank=0),
        *steps(1, [0, 10, 20], rank=0),
        E(30, "job_start", rank=0),  # attempt 2: only rank 1 records its steps
        *steps(3, [30, 40, 50], rank=1),
        E(55, "job_end", rank=0),
    ]
    attempt_of = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    r = both(log)
    ids = both(with_ids(log, attempt_of))
    assert r.buckets == ids.buckets
    assert r.goodput == pytest.approx(40 / 55)  # was 20/55: rank 0 was taken for attempt 2
    assert r.buckets == pytest.approx({"productive": 40.0, "recovery": 10.0, "untracked": 5.0})
    assert [(a.first_step, a.last_step) for a in r.attempts] == [(1, 2), (3, 4)]


def test_issue_figures_9_1_vs_36_4_percent() -> None:
    """Rank 0 writes the lifecycle only; each attempt's steps come from another rank."""
    log = [
        E(0, "job_start", rank=0),
        E(0, "custom_start", name="eval", rank=0),
        E(10, "custom_end", name="eval", rank=0),
        *steps(1, [10, 20], rank=0),
        E(30, "job_start", rank=0),
        *steps(2, [80, 90, 100, 110], rank=1),
    ]
    r = both(log, now=110.0)
    ids = both(with_ids(log, [0, 0, 0, 0, 0, 1, *[1] * 6]), now=110.0)
    assert r.goodput == pytest.approx(ids.goodput)
    assert r.goodput == pytest.approx(40 / 110)  # 36.4 % (was 9.1 %: 10/110)


# ------------------------------------------------------------------ defect 6 (§9.2)


def _restore_then_die(with_end: bool) -> list[Event]:
    log = [E(0, "job_start", attempt=0), *steps(1, [0, 10, 20, 30, 40, 50, 60, 70], attempt=0)]
    log += [E(80, "job_start", attempt=1), E(80, "checkpoint_restore_start", step=3, attempt=1)]
    log.append(
        E(85, "checkpoint_restore_end", step=3, attempt=1)
        if with_end
        else E(85, "heartbeat", attempt=1)
    )
    return log


def test_restore_of_an_attempt_that_died_before_its_first_step_marks_its_step_safe() -> None:
    r = both(_restore_then_die(with_end=True))
    assert r.at_risk_seconds == pytest.approx(40.0)  # steps 4..7 (was 70)
    assert r.buckets == pytest.approx(
        {"productive": 70.0, "recovery": 10.0, "checkpoint_restore": 5.0}
    )


def test_restore_that_never_completed_marks_nothing_safe() -> None:
    r = both(_restore_then_die(with_end=False))
    assert r.at_risk_seconds == pytest.approx(70.0)  # §9.10
    assert any(d.code == "unpaired_start" for d in r.diagnostics)


# ------------------------------------------------------------------ defect 7 (§9.5)


def _late_events_log(late: bool) -> list[Event]:
    log = [
        E(0, "job_start", attempt=0),
        *steps(1, [0, 10, 20, 30], attempt=0),
        E(30, "attempt_end", attempt=0, status="preempted"),
    ]
    if late:
        log += [
            E(35, "step_start", step=4, attempt=0),
            E(36, "checkpoint_committed", step=3, attempt=0),
            E(37, "custom_start", name="eval", attempt=0),
            E(38, "custom_end", name="eval", attempt=0),
        ]
    log += [E(50, "job_start", attempt=1), *steps(4, [50, 60, 70], attempt=1)]
    return log


def test_events_after_an_attempts_end_change_nothing() -> None:
    clean = both(_late_events_log(late=False))
    late = both(_late_events_log(late=True))
    assert late.buckets == clean.buckets
    assert late.at_risk_seconds == clean.at_risk_seconds == pytest.approx(50.0)
    assert late.steps == clean.steps
    assert late.steps.kept == 5  # the late step_start adds no step
    assert late.buckets == pytest.approx({"productive": 50.0, "recovery": 20.0})
    assert any(d.code == "events_out_of_order" for d in late.diagnostics)
    assert not any(d.code == "events_out_of_order" for d in clean.diagnostics)


def test_idless_events_after_an_end_change_nothing() -> None:
    log = [E(0, "job_start"), *steps(1, [0, 10, 20]), E(20, "attempt_end", status="failed")]
    late = [*log, E(22, "checkpoint_save_start", step=2), E(23, "checkpoint_save_end", step=2)]
    tail = [E(30, "job_start"), *steps(1, [30, 40, 50])]
    a, b = both(log + tail), both(late + tail)
    assert a.buckets == b.buckets
    assert a.at_risk_seconds == b.at_risk_seconds == pytest.approx(20.0)


# --------------------------------------------------------------------- also settled


def test_idless_events_before_the_first_job_start_with_an_end_form_the_first_attempt() -> None:
    log = [
        *steps(1, [0, 10, 20]),
        E(20, "attempt_end", status="preempted"),
        E(30, "job_start"),
        *steps(3, [30, 40, 50]),
        E(50, "job_end"),
    ]
    r = both(log)
    ids = both(with_ids(log, [0] * 5 + [1] * 6))
    assert r.buckets == ids.buckets == pytest.approx({"productive": 40.0, "recovery": 10.0})
    assert [(a.start, a.end, a.end_reason) for a in r.attempts] == [
        (0.0, 20.0, "attempt_end:preempted"),
        (30.0, 50.0, "job_end"),
    ]


def test_idless_job_end_before_the_first_job_start_ends_the_first_attempt() -> None:
    log = [*steps(1, [0, 10, 20]), E(20, "job_end"), E(30, "job_start"), *steps(3, [30, 40])]
    r = both(log)
    assert len(r.attempts) == 2
    assert r.attempts[0].end_reason == "attempt_end"
    assert r.buckets == pytest.approx({"productive": 30.0, "recovery": 10.0})


@pytest.mark.parametrize("restore_first", [True, False], ids=["restore-line-first", "prep-first"])
def test_intervals_starting_together_the_one_ending_first_is_inner(restore_first: bool) -> None:
    prep = E(0, "training_prep_start")
    restore = E(0, "checkpoint_restore_start", step=0)
    log = [E(0, "job_start"), *((restore, prep) if restore_first else (prep, restore))]
    log += [E(5, "checkpoint_restore_end", step=0), E(10, "training_prep_end"), E(10, "job_end")]
    r = both(log)
    assert r.buckets == pytest.approx({"checkpoint_restore": 5.0, "training_prep": 5.0})


def test_intervals_with_equal_start_and_end_the_later_line_is_inner() -> None:
    log = [
        E(0, "job_start"),
        E(0, "custom_start", name="eval"),
        E(0, "custom_start", name="sdc"),
        E(10, "custom_end", name="eval"),
        E(10, "custom_end", name="sdc"),
        E(10, "job_end"),
    ]
    assert both(log).buckets == {"custom:sdc": 10.0}


def test_typical_step_time_after_intervals_and_open_last_step_by_the_clock() -> None:
    log = [E(0, "job_start")]
    for k in range(4):  # 10 s steps, 2 s of data loading inside each: m = 8
        t = 10.0 * k
        log += [
            E(t, "step_start", step=k + 1),
            E(t, "data_loading_start"),
            E(t + 2, "data_loading_end"),
            E(t + 10, "step_end", step=k + 1),
        ]
    # open step 5: ends at 40 + m = 48 by the clock, its 5 s of loading taken out: 3 s
    log += [
        E(40, "step_start", step=5),
        E(40, "data_loading_start"),
        E(45, "data_loading_end"),
        E(60, "heartbeat"),
    ]
    r = both(log, ideal=8.0)
    assert r.buckets == pytest.approx({"productive": 35.0, "data_loading": 13.0, "untracked": 12.0})


def _wasted_startup_log() -> list[Event]:
    return [
        E(0, "job_start", attempt=0),
        *steps(1, [0, 30, 40, 50, 60], attempt=0),  # step 1 takes 30 s: 20 s of startup
        E(70, "job_start", attempt=1),
        *steps(1, [70, 80, 90], attempt=1),  # restarted from scratch: attempt 0 is wasted
        E(90, "job_end", attempt=1),
    ]


def test_startup_of_a_wasted_segment_is_startup() -> None:
    r = both(_wasted_startup_log())
    assert r.buckets == pytest.approx(
        {"startup": 20.0, "wasted": 40.0, "recovery": 10.0, "productive": 20.0}
    )


def test_window_edge_through_a_first_step_splits_startup_in_proportion() -> None:
    r = report(_wasted_startup_log(), window=(15.0, 90.0))
    # half of step 1 is inside: half its startup (10) and half its normal part (5, wasted)
    assert r.buckets == pytest.approx(
        {"startup": 10.0, "wasted": 35.0, "recovery": 10.0, "productive": 20.0}
    )


def test_at_risk_never_includes_startup() -> None:
    log = [E(0, "job_start"), *steps(1, [0, 20, 30, 40])]  # step 1: 10 s of startup
    r = both(log)
    assert r.bucket("startup") == pytest.approx(10.0)
    assert r.at_risk_seconds == pytest.approx(30.0)


def test_open_record_after_a_record_with_its_own_end_counts_one_step() -> None:
    log = [E(0, "job_start"), *steps(1, [0, 10]), E(10, "step_start", step=5)]
    log.append(E(30, "heartbeat"))
    r = both(log)
    assert r.steps.kept == 2
    assert r.steps.last == 5
    assert r.buckets == pytest.approx({"productive": 20.0, "untracked": 10.0})


def test_now_before_the_last_event_ignores_later_events() -> None:
    log = [E(0, "job_start"), *steps(1, [0, 10, 20, 30, 40]), E(45, "checkpoint_committed", step=4)]
    log.append(E(50, "job_end"))
    early = report(log, now=25.0)
    cut = report([e for e in log if e.ts <= 25.0], now=25.0)
    assert early.buckets == cut.buckets
    assert early.at_risk_seconds == cut.at_risk_seconds == pytest.approx(25.0)
    assert early.steps == cut.steps


# ------------------------------------------------------------------- API and input


def test_every_known_bucket_reads_zero_and_json_leaves_zeros_out() -> None:
    r = both([E(0, "job_start"), *steps(1, [0, 10, 20]), E(20, "job_end")])
    for name in BUCKETS:
        assert r.buckets[name] == (20.0 if name == "productive" else 0.0)
    assert r.buckets["custom:eval"] == 0.0
    assert r.buckets["elastic_wait:scale_up"] == 0.0
    with pytest.raises(KeyError):
        r.buckets["no-such-bucket"]
    assert r.to_dict()["buckets"] == {"productive": 20.0}
    assert "wasted" not in r.buckets
    # get() agrees with []: 0.0 for a bucket the report knows, the default for no bucket
    assert r.buckets.get("wasted") == r.buckets.get("custom:eval", 7.0) == 0.0
    assert r.buckets.get("productive") == 20.0
    assert r.buckets.get("no-such-bucket") is None and r.buckets.get("no-such", 1.5) == 1.5


def test_step_beyond_64_bits_is_a_diagnostic_not_a_crash() -> None:
    log = [
        E(0, "job_start"),
        *steps(1, [0, 10, 20]),
        E(20, "step_start", step=2**63),
        E(21, "checkpoint_save_end", step=2**64),
        E(22, "checkpoint_restore_end", step=-(2**70)),
        E(30, "job_end"),
    ]
    r = both(log)
    codes = [d.code for d in r.diagnostics]
    assert codes.count("step_out_of_range") == 3
    assert r.buckets == pytest.approx({"productive": 20.0, "untracked": 10.0})
    assert r.steps.kept == 2


def test_which_interval_is_inner_is_decided_before_clipping_to_the_attempt() -> None:
    """Found by the reference test: an interval that began before its attempt's counted
    start (clipped there) is still the outer one of an interval that began at that start."""
    log = [
        E(0, "job_start", attempt=0),
        *steps(1, [0, 10, 20], attempt=0),
        E(20, "attempt_end", attempt=0),
        E(15, "elastic_wait_start", name="sdc", attempt=1),  # before attempt 0 ended
        E(20, "training_prep_start", attempt=1),
        E(25, "elastic_wait_end", name="sdc", attempt=1),
        E(40, "training_prep_end", attempt=1),
        E(40, "job_end", attempt=1),
    ]
    r = both(log)
    assert r.buckets == pytest.approx({"productive": 20.0, "training_prep": 20.0})
    assert any(d.code == "attempt_overlap" for d in r.diagnostics)
