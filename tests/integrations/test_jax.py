"""JAX + Orbax under ``badput run``: async saves, their commits, a crash and a restore."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _harness import (
    assert_agrees,
    assert_bucket_agrees,
    assert_clean,
    assert_model,
    assert_untracked_share,
    assert_work,
    badput_run,
    report,
    script,
    truth_sum,
    truths,
)

pytestmark = pytest.mark.slow


def test_crash_and_resume_from_orbax(tmp_path: Path) -> None:
    # 12 steps, async saves at 5 and 10; attempt 0 crashes inside step 8; attempt 1
    # restores latest_step() = 5 and runs 6..12.
    badput_run(
        tmp_path, "jax", [*script("jax_train.py"), "12", "5"], env={"BADPUT_TEST_CRASH_AT": "8"}
    )
    rep = report(tmp_path, "jax")
    assert_clean(rep)
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (12, 3, 12)
    a0, a1 = rep.attempts
    assert (a0.first_step, a0.last_step) == (1, 8)
    assert (a1.restore_step, a1.first_step, a1.last_step) == (5, 6, 12)
    # the samples and tokens of the steps it trained on, by the script's own count (batches
    # of 2 or 3 sequences): steps 6 and 7 of attempt 0 were redone after the restore of 5
    assert_work(rep, tmp_path, {("0", 6), ("0", 7)})
    trained = [*range(1, 8), *range(6, 13)]  # step s fetched batch s - 1: 2 + (s - 1) % 2
    assert rep.program is not None and rep.program.samples == sum(2 + (s - 1) % 2 for s in trained)
    (params,) = {t["params"] for t in truths(tmp_path)}
    assert params == 16 * 8 + 8
    assert_model(rep, tmp_path, "jax", params, devices=1)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_save", 2)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_restore", 1)
    # 8 + 7 fetches, plus the empty fetch that ends each loop
    assert_bucket_agrees(rep, tmp_path, "data_loading", 17)
    # every compilation JAX timed (the script's own listener): compile, taken out of the
    # first steps; the manager's set-up is training_prep; at most 5 % is untracked
    assert truth_sum(tmp_path, "compile_spans") > 0
    assert_agrees("compile", rep.bucket("compile"), truth_sum(tmp_path, "compile"), 1)
    assert rep.bucket("training_prep") > 0
    assert_untracked_share(rep, 0.05)
    # each async save is committed once its background write is done, after its blocking part
    events = [
        json.loads(line)
        for f in (tmp_path / "runs" / "jax").rglob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    ends = {e["step"]: e["ts"] for e in events if e["kind"] == "checkpoint_save_end"}
    commits = {e["step"]: e["ts"] for e in events if e["kind"] == "checkpoint_committed"}
    assert sorted(ends) == sorted(commits) == [5, 10]
    assert all(commits[s] >= ends[s] for s in ends)
    assert all((tmp_path / "ckpt" / str(s)).is_dir() for s in (5, 10))
