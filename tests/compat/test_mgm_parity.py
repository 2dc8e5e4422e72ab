"""Parity with the real ml-goodput-measurement 0.2.3, on its own goldens.

Every scenario in tests/compat/golden/ was replayed through the real library by
tools/reference_replay.py. Scenarios where the library is right must match within 0.01
percentage points (and exactly on steps, interval sizes and disruption counts); the
scenarios of its known bugs are checked, one by one, in test_mgm_differences.py.
"""

from __future__ import annotations

import pytest
from _golden import Golden, Replay, golden, load_goldens, mismatches

from badput.analysis import analyze

GOLDENS = load_goldens()
MATCHING = [g for g in GOLDENS if g.difference is None]


def test_goldens_are_there() -> None:
    """The suite is not vacuous: at least 12 matching scenarios and the 5 documented bugs."""
    assert len(MATCHING) >= 12, [g.name for g in MATCHING]
    differences = {g.difference for g in GOLDENS if g.difference is not None}
    assert differences >= {
        "restart_resumes_next_step",
        "restore_counted_as_prep",
        "first_data_load_after_restart_sync",
        "restart_from_step_0_other",
        "sparse_step_logging",
    }
    for g in GOLDENS:
        assert g.data["reference"] == {"package": "ml-goodput-measurement", "version": "0.2.3"}


@pytest.mark.parametrize("g", MATCHING, ids=[g.name for g in MATCHING])
def test_matches_reference(g: Golden) -> None:
    replay = Replay(g)
    problems: list[str] = []
    for i, query in enumerate(g.data["queries"]):
        if "error" in query:
            with pytest.raises(ValueError):
                replay.run(query)
            continue
        ours = replay.run(query)
        problems += [f"query {i} {query['method']}{p}" for p in mismatches(ours, query["result"])]
    assert not problems, "\n".join(problems)


def test_a_job_ended_and_started_again_reads_as_the_library_reads_it() -> None:
    """Issue 33, point 6 (``restart_after_job_end``): steps 0..60 of 2 s (step 60 starts at
    120 s), ``job_end`` at 122 s; a new ``job_start`` at 167 s resumes at step 51 and runs
    steps 51..70 to 207 s, ``job_end``. The library keeps only the last ``job_end``: the
    first run reads as disrupted, its last step up to the restart (120..167 s) is recovery
    and steps 51..59 (18 s) are wasted. The drop-in gives the library's numbers (before:
    wasted 20 s, recovery 45 s, step 60 counted up to its ``job_end``); badput's own report
    keeps its rules: attempt 0 ended at its ``job_end``, step 60 is wasted progress."""
    g = golden("restart_after_job_end")
    replay = Replay(g)
    details = next(q for q in g.data["queries"] if q["method"] == "get_job_goodput_details")
    ref = details["result"]["badput_time"]
    assert (
        ref["WASTED_PROGRESS_FROM_DISRUPTION"],
        ref["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"],
    ) == (18.0, 47.0)
    ours = replay.run(details)
    assert ours["badput_time"]["WASTED_PROGRESS_FROM_DISRUPTION"] == pytest.approx(18.0)
    assert ours["badput_time"]["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == pytest.approx(47.0)
    assert ours["goodput_time"]["TOTAL"] == pytest.approx(142.0)
    assert ours["total_elapsed_time"] == pytest.approx(207.0)
    gp = next(q for q in g.data["queries"] if q.get("include_badput_breakdown"))
    mine = replay.run(gp)["badput"]
    assert mine["WASTED_PROGRESS_FROM_DISRUPTION"] == pytest.approx(18 / 207 * 100)  # 8.70 %
    assert mine["INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION"] == pytest.approx(47 / 207 * 100)
    own = analyze(replay.store, g.data["job_name"])
    assert [a.end_reason for a in own.attempts] == ["job_end", "job_end"]
    assert own.bucket("wasted") == pytest.approx(20.0)
    assert own.bucket("recovery") == pytest.approx(45.0)
