"""Where ml-goodput-measurement 0.2.3 is wrong, and what badput's drop-in reports instead.

Each test reads the library's own answer from its golden (tools/reference_replay.py ran the
real library), checks that the library really gives the wrong number (so the golden and
this explanation stay true), then checks badput's answer against the number worked out by
hand. docs/compat.md has one paragraph per test, with the same numbers.
"""

from __future__ import annotations

from typing import Any

import pytest
from _golden import Golden, Replay, golden, load_goldens

# Every documented difference has a test below (test_every_difference_is_tested).
DIFFERENCES = {
    "restart_resumes_next_step",
    "restore_counted_as_prep",
    "first_data_load_after_restart_sync",
    "restart_from_step_0_other",
    "sparse_step_logging",
    "elastic_wait_in_loop",
    "interval_slice_efficiency",
    "eval_after_last_step",
    "exclusion_inside_steps",
}


def both(
    name: str, method: str = "get_job_goodput"
) -> tuple[Golden, dict[str, Any], dict[str, Any]]:
    """(golden, the library's answer, ours) to the scenario's first ``method`` query with
    the badput breakdown."""
    g = golden(name)
    query = next(
        q
        for q in g.data["queries"]
        if q["method"] == method and q.get("include_badput_breakdown", True)
    )
    return g, query["result"], Replay(g).run(query)


def adds_up(answer: dict[str, Any]) -> float:
    """Goodput + every badput bucket but the overlapped DATA_LOADING_ASYNC, in %."""
    total = answer["goodput"]
    for name, value in answer["badput"].items():
        if name == "DATA_LOADING_ASYNC":
            continue
        total += sum(value.values()) if isinstance(value, dict) else value
    return float(total)


def pct(seconds: float, total: float) -> Any:
    return pytest.approx(seconds / total * 100.0, abs=1e-9)


def test_every_difference_is_tested() -> None:
    assert {g.difference for g in load_goldens() if g.difference} == DIFFERENCES


def test_restart_resuming_at_the_next_step_is_a_restart() -> None:
    """Steps 0..20 (2 s each), the attempt dies after step 20 starts at 40 s; it restarts at
    102 s at step 21 (step 20 was checkpointed), steps 21..40, job end at 142 s. The library
    only sees a restart when a step number repeats: it takes step 20 as a 62 s step and
    reports 100 % goodput and no disruption. badput closes the attempt at its last event:
    40 s..102 s is recovery (62 s)."""
    _, ref, ours = both("restart_resumes_next_step")
    assert ref["goodput"] == pytest.approx(100.0)
    assert ref["badput"]["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == 0.0
    assert ours["goodput"] == pct(40 + 40, 142)  # steps 0..19 and 21..40
    assert ours["badput"]["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == pct(62, 142)
    assert adds_up(ours) == pytest.approx(100.0)


def test_restore_inside_preparation_is_counted_once() -> None:
    """Training preparation 0..20 s holds an Orbax restore of 10 s (5..15 s); steps 101..120
    of 2 s; 60 s in all. The library counts the restore twice (TRAINING_PREP 20 s and
    RESTORE 10 s: 116.7 % in all). badput: the innermost interval wins, so preparation is
    10 s and the restore 10 s."""
    _, ref, ours = both("restore_counted_as_prep")
    assert ref["badput"]["TRAINING_PREP"] == pct(20, 60)
    assert ref["badput"]["UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME"] == pct(10, 60)
    assert adds_up(ref) == pytest.approx(116.6667, abs=1e-3)
    assert ours["badput"]["TRAINING_PREP"] == pct(10, 60)
    assert ours["badput"]["UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME"] == pct(10, 60)
    assert ours["goodput"] == pct(40, 60)
    assert adds_up(ours) == pytest.approx(100.0)


def test_only_the_load_before_the_first_step_of_an_attempt_blocks() -> None:
    """A 1 s load before every step; steps 0..20; restart 30 s after the crash, steps
    11..30; 151 s in all. Blocking loads: the first of each attempt, 2 s. The library adds
    the restarted attempt's second load (inside its loop, overlapping training) to
    DATA_LOADING_SYNC too: 3 s."""
    _, ref, ours = both("first_data_load_after_restart_sync")
    assert ref["badput"]["DATA_LOADING_SYNC"] == pct(3, 151)
    assert ours["badput"]["DATA_LOADING_SYNC"] == pct(2, 151)
    # The load moved to the overlapped bucket; nothing else changes.
    assert ours["badput"]["DATA_LOADING_ASYNC"] == pytest.approx(
        ref["badput"]["DATA_LOADING_ASYNC"] + 1 / 151 * 100
    )
    assert ours["goodput"] == pytest.approx(ref["goodput"], abs=1e-9)
    assert adds_up(ours) == pytest.approx(100.0)


def test_restart_from_step_0_wastes_the_first_attempt() -> None:
    """Steps 0..20 (2 s), the attempt dies at 40 s with no checkpoint; it restarts at 60 s
    from step 0 and runs steps 0..30 to 122 s. The library skips a segment that restarts at
    step 0 (``if curr_step == 0: return 0.0, {}, 0``): the first attempt's 40 s of steps
    land in OTHER. badput: that progress was lost, so it is wasted."""
    _, ref, ours = both("restart_from_step_0_other")
    assert ref["badput"]["OTHER"] == pct(40, 122)
    assert ref["badput"]["WASTED_PROGRESS_FROM_DISRUPTION"] == 0.0
    assert ours["badput"]["WASTED_PROGRESS_FROM_DISRUPTION"] == pct(40, 122)
    assert ours["badput"]["OTHER"] == pytest.approx(0.0, abs=1e-9)
    assert ours["badput"]["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == pct(20, 122)
    assert adds_up(ours) == pytest.approx(100.0)


def test_sparse_step_logging_counts_every_step() -> None:
    """A step start logged every 10th step (0, 10, ..., 190), 2 s per step, job end at
    400 s. The library counts a step only when the next step number is logged, so only the
    last span (190 -> job end, 20 s) is productive: 5 %, the rest OTHER. badput counts each
    span as 10 steps of work: 100 %, last step 199."""
    _, ref, ours = both("sparse_step_logging")
    assert ref["goodput"] == pct(20, 400)
    assert ref["badput"]["OTHER"] == pct(380, 400)
    assert ref["last_step"] == 190
    assert ours["goodput"] == pytest.approx(100.0)
    assert ours["last_step"] == 199


def test_elastic_wait_inside_the_loop_is_not_also_step_time() -> None:
    """Steps 0..14 (2 s), then between two step starts a 20 s slice-down wait and 15 s of
    re-initialisation, then steps 15..29; 95 s. The library adds the 35 s to its elastic
    buckets but leaves them in step 14's time too: 100 % goodput + 36.8 % badput. badput:
    the recorded intervals are taken out of the step (ACCOUNTING.md §2), 60 s productive."""
    _, ref, ours = both("elastic_wait_in_loop")
    assert ref["goodput"] == pytest.approx(100.0)
    assert adds_up(ref) == pytest.approx(100.0 + 35 / 95 * 100)
    assert ours["goodput"] == pct(60, 95)
    assert ours["badput"]["ELASTIC_SLICE_DOWN"] == pct(20, 95)
    assert ours["badput"]["ELASTIC_REINITIALIZATION"] == pct(15, 95)
    assert adds_up(ours) == pytest.approx(100.0)


def test_interval_slice_efficiency_keeps_the_count_in_force() -> None:
    """2 of 4 slices from 0 s, 4 of 4 from 20 s, job end at 80 s; the window [10 s, 80 s].
    The library only sees slice records inside the window, so [10 s, 20 s] counts as 0
    slices: 60/70 = 0.857. badput carries the 2-of-4 record in force at 10 s:
    (10 x 0.5 + 60 x 1) / 70 = 0.929."""
    _, ref, ours = both("interval_slice_efficiency", "get_interval_metric_details")
    assert ref["stepping_slice_efficiency"] == pytest.approx(60 / 70)
    assert ours["stepping_slice_efficiency"] == pytest.approx(65 / 70)
    assert ours["available_slice_efficiency"] == pytest.approx(65 / 70)
    assert ours["interval_goodput"] == ref["interval_goodput"]


def test_an_eval_after_the_last_step_is_not_productive() -> None:
    """Steps 0..19 of 2 s, step 20 starts at 40 s, an eval 42..46 s, job end at 46 s. The
    library takes the last step's start to job_end (6 s) as productive and sees no eval
    (it counts a custom event only between two step starts): 100 % goodput. The drop-in
    also runs the last step to job_end (ACCOUNTING.md §6) but still takes recorded
    intervals out of it: 42 s productive, EVAL 4 s."""
    _, ref, ours = both("eval_after_last_step")
    assert ref["goodput"] == pytest.approx(100.0)
    assert ref["badput"]["CUSTOM_BADPUT_EVENTS"] == {}
    assert ours["goodput"] == pct(42, 46)
    assert ours["badput"]["CUSTOM_BADPUT_EVENTS"] == {"EVAL": pct(4, 46)}
    assert adds_up(ours) == pytest.approx(100.0)


def exclusion_query(index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    g = golden("exclusion_inside_steps")
    query = g.data["queries"][index]
    return query["result"], Replay(g).run(query)


def test_excluding_time_inside_steps_does_not_make_startup_badput() -> None:
    """Preparation 0..10 s, untracked 10..20 s, steps of 2 s from 20 s (an eval of 4 s after
    step 15), a crash at 64 s, restart at 79 s, job end at 105 s: 62 s of steps. Excluding
    25..33 s (inside steps 2..6, 8 s): the library shortens those steps, so the first step
    (2 s) looks slower than their mean and 0.47 s becomes PROGRAM_STARTUP. badput: the 8 s
    are left out and nothing else moves: 54 s productive of 97 s."""
    ref, ours = exclusion_query(0)
    assert ref["excluded"] == ours["excluded"] == pytest.approx(8.0)
    assert ref["badput"]["PROGRAM_STARTUP"] == pytest.approx(0.4851, abs=1e-4)
    assert ref["goodput"] == pytest.approx(55.1850, abs=1e-4)
    assert ours["badput"]["PROGRAM_STARTUP"] == 0.0
    assert ours["goodput"] == pct(54, 97)
    assert adds_up(ours) == pytest.approx(100.0)


def test_an_excluded_eval_is_not_badput() -> None:
    """The same job, excluding the eval (52..56 s). The library leaves the eval in
    CUSTOM_BADPUT_EVENTS (4 s), takes it out of the step's productive time a second time
    (so OTHER shrinks to 8 s) and finds 0.12 s of startup: goodput 59.29 %. badput: the
    excluded eval is gone from every bucket: 62 s productive of 101 s, OTHER the 10 s gap."""
    ref, ours = exclusion_query(1)
    assert ref["excluded"] == ours["excluded"] == pytest.approx(4.0)
    assert ref["badput"]["CUSTOM_BADPUT_EVENTS"]["EVAL"] == pct(4, 101)
    assert ref["badput"]["OTHER"] == pct(8, 101)
    assert ref["goodput"] == pytest.approx(59.2895, abs=1e-4)
    assert ours["badput"]["CUSTOM_BADPUT_EVENTS"].get("EVAL", 0.0) == 0.0
    assert ours["badput"]["OTHER"] == pct(10, 101)
    assert ours["goodput"] == pct(62, 101)
    assert adds_up(ours) == pytest.approx(100.0)
