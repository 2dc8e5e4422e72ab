"""Parity with the real ml-goodput-measurement 0.2.3, on its own goldens.

Every scenario in tests/compat/golden/ was replayed through the real library by
tools/reference_replay.py. Scenarios where the library is right must match within 0.01
percentage points (and exactly on steps, interval sizes and disruption counts); the
scenarios of its known bugs are checked, one by one, in test_mgm_differences.py.
"""

from __future__ import annotations

import pytest
from _golden import Golden, Replay, load_goldens, mismatches

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
