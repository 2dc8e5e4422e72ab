"""The rules of ACCOUNTING.md, one test per rule, with the numbers they must give."""

from __future__ import annotations

import math

import pytest

from _worked_example import EXPECTED_MINUTES, JOB, MIN, T0, worked_example_events
from badput.engine import Accountant, Report
from badput.events import Event


def report_of(events: list[Event], **kw: object) -> Report:
    ideal = kw.pop("ideal", None)
    acc = Accountant(events[0].job, ideal_step_time=ideal)  # type: ignore[arg-type]
    acc.ingest_events(events)
    return acc.report(**kw)  # type: ignore[arg-type]


def assert_partition(r: Report) -> None:
    assert all(v >= 0 for v in r.buckets.values()), r.buckets
    assert math.isclose(sum(r.buckets.values()), r.total_seconds, abs_tol=1e-6)


def E(ts: float, kind: str, **f: object) -> Event:  # noqa: N802 - short builder for tables
    f.setdefault("job", "j")
    return Event(ts=ts, kind=kind, **f)  # type: ignore[arg-type]


# ----------------------------------------------------------------- §7 worked example


@pytest.mark.parametrize("with_ids", [True, False], ids=["attempt-ids", "derived-attempts"])
@pytest.mark.parametrize("step_ends", [True, False], ids=["step-ends", "starts-only"])
@pytest.mark.parametrize("ideal", [120.0, None], ids=["configured", "estimated"])
def test_worked_example(with_ids: bool, step_ends: bool, ideal: float | None) -> None:
    r = report_of(worked_example_events(with_ids, step_ends), ideal=ideal)
    assert r.total_seconds == pytest.approx(200 * MIN)
    assert {k: round(v / MIN, 9) for k, v in r.buckets.items()} == EXPECTED_MINUTES
    assert r.goodput == pytest.approx(0.5)
    assert r.observed_goodput == pytest.approx(0.625)
    assert r.ideal_step_time == pytest.approx(120.0)
    assert r.ideal_step_time_source == ("configured" if ideal else "estimated")
    assert r.end_reason == "job_end"
    assert (r.steps.kept, r.steps.wasted, r.steps.last) == (50, 20, 75)
    assert [(a.restore_step, a.first_step, a.last_step) for a in r.attempts] == [
        (25, 26, 70),
        (50, 51, 75),
    ]
    assert r.attempts[0].end == T0 + 100 * MIN
    assert r.at_risk_seconds == 0.0
    assert not [d for d in r.diagnostics if d.code != "no_job_end"]
    assert_partition(r)


def test_worked_example_live_at_risk_before_the_end() -> None:
    """At minute 150 of attempt 2, steps 51..60 ran (3 min each) after checkpoint 50."""
    events = [e for e in worked_example_events() if e.ts <= T0 + 150 * MIN]
    r = report_of(events, ideal=120.0, now=T0 + 150 * MIN)
    assert r.end_reason == "now"
    assert r.total_seconds == pytest.approx(150 * MIN)
    # 10 steps of 3 min are at risk: kept now, wasted if it crashed this second.
    assert r.at_risk_seconds == pytest.approx(30 * MIN)
    assert r.bucket("wasted") == pytest.approx(40 * MIN)
    assert_partition(r)


def test_worked_example_window() -> None:
    """[90, 130] min: 10 min of wasted steps, 15 of recovery, 5 restore, 10 of slow steps."""
    r = report_of(worked_example_events(), ideal=120.0, window=(T0 + 90 * MIN, T0 + 130 * MIN))
    assert r.total_seconds == pytest.approx(40 * MIN)
    minutes = {k: round(v / MIN, 9) for k, v in r.buckets.items()}
    assert minutes == {
        "wasted": 10,
        "recovery": 15,
        "checkpoint_restore": 5,
        # steps 51..53 after 120: 10 min of step time for 10/3 steps → 6.67 ideal minutes
        "productive": pytest.approx(20 / 3),
        "slowdown": pytest.approx(10 - 20 / 3),
    }
    assert_partition(r)


# ----------------------------------------------------------------- §2 intervals


def test_innermost_interval_wins_restore_inside_prep() -> None:
    r = report_of(
        [
            E(0, "job_start"),
            E(0, "training_prep_start"),
            E(10, "checkpoint_restore_start", step=0),
            E(30, "checkpoint_restore_end", step=0),
            E(40, "training_prep_end"),
            E(40, "job_end"),
        ]
    )
    assert r.buckets == {"checkpoint_restore": 20.0, "training_prep": 20.0}
    assert_partition(r)


def test_interval_inside_step_is_taken_out_of_the_step() -> None:
    events = [E(0, "job_start")]
    for n in range(10):
        events.append(E(10 * n, "step_start", step=n))
        events.append(E(10 * n + 10, "step_end", step=n))
    # an eval of 4 s inside step 5
    events += [E(52, "custom_start", name="eval"), E(56, "custom_end", name="eval")]
    events.append(E(100, "job_end"))
    r = report_of(events, ideal=10.0)
    assert r.bucket("custom:eval") == 4.0
    assert r.bucket("productive") == 96.0
    assert r.total_seconds == 100.0
    assert_partition(r)


def test_non_blocking_load_is_overlapped_not_partitioned() -> None:
    r = report_of(
        [
            E(0, "job_start"),
            E(0, "data_loading_start", blocking=False),
            E(8, "data_loading_end", blocking=False),
            E(2, "data_loading_start"),
            E(5, "data_loading_end"),
            E(10, "job_end"),
        ]
    )
    assert r.overlapped == {"data_loading": 8.0}
    assert r.buckets == {"data_loading": 3.0, "untracked": 7.0}


def test_unpaired_start_closed_at_attempt_end_and_unpaired_end_ignored() -> None:
    r = report_of(
        [
            E(0, "job_start"),
            E(1, "compile_end"),
            E(5, "custom_start", name="eval"),
            E(20, "heartbeat"),
        ]
    )
    assert r.end_reason == "last_event"
    assert r.buckets == {"untracked": 5.0, "custom:eval": 15.0}
    codes = [d.code for d in r.diagnostics]
    assert "unpaired_start" in codes and "unpaired_end" in codes and "no_job_end" in codes


# ----------------------------------------------------------------- attempts, recovery, queue


def test_queued_and_recovery_and_live_recovery_to_now() -> None:
    events = [
        E(0, "job_scheduled", attempt=0),
        E(30, "job_start", attempt=0),
        E(50, "attempt_end", attempt=0, status="preempted"),
    ]
    r = report_of(events, now=80)
    assert r.buckets == {"queued": 30.0, "untracked": 20.0, "recovery": 30.0}
    assert r.attempts[0].end_reason == "attempt_end:preempted"
    r2 = report_of(events)
    assert r2.total_seconds == 50.0 and r2.end_reason == "last_event"


def test_multi_host_starts_merge_into_one_attempt() -> None:
    events = [E(0.0 + 0.1 * h, "job_start", host=f"h{h}", rank=h) for h in range(4)]
    events += [E(10, "step_start", step=1, rank=0), E(20, "step_end", step=1, rank=0)]
    events += [E(30.0 + 0.1 * h, "job_start", host=f"h{h}", rank=h) for h in range(4)]
    events += [E(40, "job_end")]
    r = report_of(events, ideal=10.0)
    assert len(r.attempts) == 2
    assert r.attempts[1].start == 30.0


def test_step_rewind_in_one_attempt_starts_a_new_segment() -> None:
    events = [E(0, "job_start")]
    t = 0.0
    for n in range(1, 11):
        events += [E(t, "step_start", step=n), E(t + 1, "step_end", step=n)]
        t += 1
    events += [E(t, "checkpoint_restore_start", step=5), E(t + 1, "checkpoint_restore_end", step=5)]
    t += 1
    for n in range(6, 11):
        events += [E(t, "step_start", step=n), E(t + 1, "step_end", step=n)]
        t += 1
    events.append(E(t, "job_end"))
    r = report_of(events, ideal=1.0)
    assert r.bucket("wasted") == 5.0  # steps 6..10 of the first run
    assert r.bucket("productive") == 10.0
    assert r.bucket("checkpoint_restore") == 1.0


def test_restart_from_scratch_wastes_everything_before() -> None:
    events = [E(0, "job_start", attempt=0)]
    for n in range(5):
        events += [E(n, "step_start", attempt=0, step=n), E(n + 1, "step_end", attempt=0, step=n)]
    events += [E(10, "job_start", attempt=1)]
    for n in range(5):
        events += [
            E(10 + n, "step_start", attempt=1, step=n),
            E(11 + n, "step_end", attempt=1, step=n),
        ]
    events.append(E(15, "job_end", attempt=1))
    r = report_of(events, ideal=1.0)
    assert r.bucket("wasted") == 5.0
    assert r.bucket("recovery") == 5.0
    assert r.bucket("productive") == 5.0


# ----------------------------------------------------------------- §4 step time


def test_startup_is_first_step_beyond_typical() -> None:
    events = [E(0, "job_start"), E(0, "step_start", step=0), E(30, "step_end", step=0)]
    for n in range(1, 11):
        events += [E(30 + 2 * (n - 1), "step_start", step=n), E(30 + 2 * n, "step_end", step=n)]
    events.append(E(50, "job_end"))
    r = report_of(events, ideal=2.0)
    assert r.buckets == {"startup": 28.0, "productive": 22.0}


def test_startup_baseline_mean_for_the_compat_view() -> None:
    """typical="mean" (ml-goodput-measurement's rule): the first step beyond the mean of the
    others, not their median. Steps after the first: 2, 2, 2, 8 s (median 2, mean 3.5)."""
    events = [E(0, "job_start"), E(0, "step_start", step=0), E(20, "step_end", step=0)]
    t = 20.0
    for n, d in enumerate([2.0, 2.0, 2.0, 8.0], start=1):
        events += [E(t, "step_start", step=n), E(t + d, "step_end", step=n)]
        t += d
    events.append(E(t, "job_end"))
    assert report_of(events, ideal=2.0).bucket("startup") == 18.0
    mean = report_of(events, ideal=2.0, typical="mean")
    assert mean.bucket("startup") == 16.5
    assert mean.total_seconds == sum(mean.buckets.values()) == 34.0


def test_sparse_steps_count_as_k_steps() -> None:
    events = [E(0, "job_start")]
    for i in range(6):
        events.append(E(10 * i, "step_start", step=10 * i))
    events.append(E(60, "job_end"))
    r = report_of(events, ideal=1.0)
    # spans of 10 s stand for 10 steps each: all productive; the last one lasts m = 10 s
    assert r.buckets == {"productive": 60.0}
    assert r.steps.kept == 60


def test_last_step_without_end_lasts_typical_time_rest_untracked() -> None:
    events = [E(0, "job_start")]
    for n in range(5):
        events.append(E(2 * n, "step_start", step=n))
    events.append(E(30, "heartbeat"))
    r = report_of(events, ideal=2.0)
    assert r.buckets == {"productive": 10.0, "untracked": 20.0}


def test_slowdown_from_straggler_steps() -> None:
    events = [E(0, "job_start")]
    t = 0.0
    for n in range(20):
        d = 1.0 if n < 10 else 1.5
        events += [E(t, "step_start", step=n), E(t + d, "step_end", step=n)]
        t += d
    events.append(E(t, "job_end"))
    r = report_of(events)
    assert r.ideal_step_time == 1.0 and r.ideal_step_time_source == "estimated"
    assert r.buckets == {"productive": 20.0, "slowdown": 5.0}


def test_too_few_clean_steps_means_no_estimate() -> None:
    events = [E(0, "job_start")]
    for n in range(4):
        events += [E(n, "step_start", step=n), E(n + 1, "step_end", step=n)]
    events.append(E(4, "job_end"))
    r = report_of(events)
    assert r.ideal_step_time is None and r.ideal_step_time_source is None
    assert "no_ideal_step_time" in [d.code for d in r.diagnostics]
    assert r.buckets == {"productive": 4.0}


def test_leader_rank_is_lowest_rank() -> None:
    events = [E(0, "job_start")]
    for rank, d in ((1, 3.0), (0, 1.0)):
        for n in range(10):
            events += [
                E(n * d, "step_start", step=n, rank=rank),
                E(n * d + d, "step_end", step=n, rank=rank),
            ]
    events.append(E(30, "job_end"))
    r = report_of(events, ideal=1.0)
    assert r.bucket("productive") == 10.0 and r.bucket("untracked") == 20.0


# ----------------------------------------------------------------- diagnostics


def test_diagnostics_each_code() -> None:
    events = [
        E(0, "job_start", attempt=0),
        E(1, "custom_end", attempt=0, name="eval"),  # unpaired_end
        E(2, "custom_start", attempt=0, name="x"),  # unpaired_start
        E(3, "mystery_kind", attempt=0),  # unknown_kind
        E(1.5, "heartbeat", attempt=0),  # clock_backwards (same source, ts goes back)
        E(4, "step_end", attempt=0, step=3),  # events_out_of_order: end without start
        E(5, "job_end", attempt=0),
        E(6, "job_start", attempt=1),  # reused_job_name
        E(7, "job_end", attempt=1),
        Event(ts=8, kind="heartbeat", job="other"),  # foreign_job
    ]
    acc = Accountant("j")
    acc.ingest_events(events, source="log.jsonl")
    r = acc.report()
    codes = {d.code for d in r.diagnostics}
    assert {
        "unpaired_end",
        "unpaired_start",
        "unknown_kind",
        "clock_backwards",
        "events_out_of_order",
        "reused_job_name",
        "foreign_job",
    } <= codes
    clock = next(d for d in r.diagnostics if d.code == "clock_backwards")
    assert (clock.file, clock.line) == ("log.jsonl", 5)
    assert_partition(r)


def test_events_without_attempt_in_a_log_with_ids_are_reported() -> None:
    acc = Accountant("j")
    acc.ingest_events(
        [
            E(0, "job_start", attempt=0),
            E(1, "step_start", attempt=0, step=1),
            E(2, "step_end", attempt=0, step=1),
            E(2, "step_start", step=2),  # a writer that forgot its attempt id
            E(3, "step_end", step=2),
            E(4, "job_end", attempt=0),
        ],
        source="mixed.jsonl",
    )
    r = acc.report(ideal_step_time=1.0)
    d = next(d for d in r.diagnostics if d.code == "events_without_attempt")
    assert (d.file, d.line) == ("mixed.jsonl", 4) and d.message.startswith("2 step")
    assert r.buckets == {"productive": 1.0, "untracked": 3.0}


def test_malformed_lines_are_reported_with_file_and_line() -> None:
    from badput.events import Chunk, EventError

    acc = Accountant("j")
    acc.ingest(
        [
            Chunk(
                "a.jsonl",
                1,
                [E(0, "job_start"), EventError("not a JSON object", "a.jsonl", 2), E(1, "job_end")],
            )
        ]
    )
    r = acc.report()
    bad = [d for d in r.diagnostics if d.code == "malformed_line"]
    assert [(d.file, d.line) for d in bad] == [("a.jsonl", 2)]
    assert r.total_seconds == 1.0


def test_bad_arguments_raise() -> None:
    acc = Accountant(JOB)
    acc.ingest_events(worked_example_events())
    with pytest.raises(ValueError, match="window"):
        acc.report(window=(10.0, 5.0))
    with pytest.raises(ValueError, match="ideal step time"):
        acc.report(ideal_step_time=-1.0)


def test_diagnostics_are_capped_per_code_and_the_rest_counted() -> None:
    events = [E(0, "job_start")]
    events += [E(1 + i, "compile_end") for i in range(500)]  # 500 unpaired ends
    events.append(E(600, "job_end"))
    r = report_of(events)
    unpaired = [d for d in r.diagnostics if d.code == "unpaired_end"]
    assert len(unpaired) == 21
    assert unpaired[-1].message == "... and 480 more unpaired_end"
    assert r.buckets == {"untracked": 600.0}


def test_overlapping_attempts_are_clipped_and_reported() -> None:
    """A late process of attempt 0 logs after attempt 1 started: no second counted twice."""
    events = [
        E(0, "job_start", attempt=0),
        E(0, "custom_start", attempt=0, name="eval"),
        E(50, "custom_end", attempt=0, name="eval"),
        E(40, "job_start", attempt=1),
        E(40, "training_prep_start", attempt=1),
        E(70, "training_prep_end", attempt=1),
        E(80, "job_end", attempt=1),
    ]
    r = report_of(events)
    assert [d.code for d in r.diagnostics].count("attempt_overlap") == 1
    # attempt 1 counts from 50, where attempt 0 ended: prep 50..70, untracked 70..80
    assert r.buckets == {"custom:eval": 50.0, "training_prep": 20.0, "untracked": 10.0}
    assert_partition(r)


def test_empty_log_gives_an_empty_report_with_a_diagnostic() -> None:
    acc = Accountant("nothing")
    r = acc.report()
    assert r.total_seconds == 0.0 and r.buckets == {} and r.attempts == []
    assert [d.code for d in r.diagnostics] == ["empty_log"]


@pytest.mark.parametrize("with_ids", [True, False], ids=["attempt-ids", "derived-attempts"])
def test_worked_example_without_steps_gives_goodput_from_checkpoint_progress(
    with_ids: bool,
) -> None:
    """§7: only job_start, checkpoint_restore end, checkpoint_save end and job_end, as the
    resiliency library writes it: 50 % from net saved progress (75 - 25) x 2 min."""
    keep = {"job_start", "checkpoint_restore_end", "checkpoint_save_end", "job_end"}
    events = [e for e in worked_example_events(with_ids) if e.kind in keep]
    r = report_of(events, ideal=120.0)
    assert r.total_seconds == pytest.approx(200 * MIN)
    assert r.goodput == pytest.approx(0.5)
    assert r.bucket("productive") == pytest.approx(100 * MIN)
    # attempt 1's last word is its save at minute 60; the restart is at 115
    assert r.bucket("recovery") == pytest.approx(55 * MIN)
    assert r.bucket("untracked") == pytest.approx(45 * MIN)
    assert (r.steps.kept, r.steps.last) == (50, 75)
    assert [a.restore_step for a in r.attempts] == [25, 50]
    progress = [d for d in r.diagnostics if d.code == "checkpoint_progress"]
    assert len(progress) == 1 and "could not be separated" in progress[0].message
    assert_partition(r)
    # without an ideal step time there is nothing to multiply the progress by: said so
    r2 = report_of(events)
    assert r2.goodput == 0.0
    assert "--ideal-step-time" in next(
        d.message for d in r2.diagnostics if d.code == "checkpoint_progress"
    )
