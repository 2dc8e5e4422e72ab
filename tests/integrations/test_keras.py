"""Keras 3 under ``badput run``: BackupAndRestore replays an epoch after a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from _harness import (
    assert_agrees,
    assert_bucket_agrees,
    assert_clean,
    assert_model,
    assert_untracked_share,
    assert_work,
    assert_work_by_step,
    badput_run,
    report,
    script,
    truth_sum,
    truths,
)

from badput.engine import Report

pytestmark = pytest.mark.slow


def test_backup_and_restore_replay_is_wasted(tmp_path: Path) -> None:
    # 3 epochs of 4 steps, a backup at each epoch's end (steps 4, 8, 12); attempt 0
    # crashes inside step 7 (epoch 2); attempt 1 restores the backup of step 4 and
    # replays epoch 2: steps 5..7 of attempt 0 are wasted.
    badput_run(
        tmp_path,
        "keras",
        [*script("keras_train.py"), "3", "4", "epoch"],
        env={"BADPUT_TEST_CRASH_AT": "7", "KERAS_BACKEND": "jax"},
    )
    rep = report(tmp_path, "keras")
    assert_clean(rep)
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (12, 3, 12)
    a0, a1 = rep.attempts
    assert (a0.first_step, a0.last_step) == (1, 7)
    assert (a1.restore_step, a1.first_step, a1.last_step) == (4, 5, 12)
    # the samples and tokens of the steps it trained on, by the script's own count
    # (batches of 2 and 3 sequences, in the order fit shuffled them into: each step's
    # own, as its compiled train step reported it); steps 5 and 6 of attempt 0 were
    # replayed
    assert_work(rep, tmp_path, {("0", 5), ("0", 6)})
    assert_work_by_step(tmp_path, "keras")
    (params,) = {t["params"] for t in truths(tmp_path)}
    assert params == 16 * 8 + 8 + 1
    assert_model(rep, tmp_path, "keras", params, devices=1)
    # backups: step 4 (attempt 0), 8 and 12 (attempt 1); one restore
    assert_bucket_agrees(rep, tmp_path, "checkpoint_save", 3)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_restore", 1)
    # Keras fetches the next batch in a thread while a step runs: only the wait for it
    # blocks, which is at most the fetch time the dataset measured.
    assert rep.bucket("data_loading") <= truth_sum(tmp_path, "data_loading")
    assert rep.bucket("process_init") > 0.5
    assert_every_second_named(rep, tmp_path)


def assert_every_second_named(rep: Report, tmp_path: Path) -> None:
    """JAX's compilations, as the script's own listener saw them (the model's initialisers
    before the recorder, the first step, the metrics at the first epoch's end), are
    ``compile``; what no hook names is at most 5 % of the job."""
    assert truth_sum(tmp_path, "compile_spans", rank=None) > 0
    assert_agrees("compile", rep.bucket("compile"), truth_sum(tmp_path, "compile", rank=None), 1)
    assert_untracked_share(rep, 0.05)


def test_backup_mid_epoch_restores_at_the_epoch_start(tmp_path: Path) -> None:
    # 2 epochs of 8 steps, BackupAndRestore(save_freq=5): backups at steps 5 and 10;
    # attempt 0 crashes inside step 13 (epoch 2, batch 5). Attempt 1 loads the backup of
    # step 10 but, as Keras does, starts epoch 2 from its first batch (step 9): in the
    # steps' own numbering it restored step 8, and steps 9..13 of attempt 0 are wasted.
    badput_run(
        tmp_path,
        "keras",
        [*script("keras_train.py"), "2", "8", "5"],
        env={"BADPUT_TEST_CRASH_AT": "13", "KERAS_BACKEND": "jax"},
    )
    rep = report(tmp_path, "keras")
    assert_clean(rep)
    # the run's own log: the batches each attempt began, where the restart resumed
    log0, log1 = sorted(truths(tmp_path), key=lambda t: t["attempt"])
    assert (log1["resumed_epoch"], log1["iterations_at_start"]) == (1, 10)
    restored = log1["steps"][0] - 1  # the data position it replays from, minus 1
    assert restored == 8
    kept = [s for s in log0["steps"] if s <= restored] + log1["steps"]
    wasted = [s for s in log0["steps"] if s > restored]
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (len(kept), len(wasted), 16)
    a0, a1 = rep.attempts
    assert (a0.first_step, a0.last_step) == (1, max(log0["steps"]))
    assert (a1.restore_step, a1.first_step, a1.last_step) == (restored, restored + 1, 16)
    assert_work(rep, tmp_path, {("0", s) for s in wasted})
    assert_work_by_step(tmp_path, "keras")
    saves = int(truth_sum(tmp_path, "checkpoint_save_calls"))
    assert_bucket_agrees(rep, tmp_path, "checkpoint_save", saves)
    assert truth_sum(tmp_path, "checkpoint_restore_calls") == 1
    assert_bucket_agrees(rep, tmp_path, "checkpoint_restore", 1)
    assert_every_second_named(rep, tmp_path)
