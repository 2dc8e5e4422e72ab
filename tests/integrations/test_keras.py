"""Keras 3 under ``badput run``: BackupAndRestore replays an epoch after a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from _harness import assert_bucket_agrees, assert_clean, badput_run, report, script, truth_sum

pytestmark = pytest.mark.slow


def test_backup_and_restore_replay_is_wasted(tmp_path: Path) -> None:
    # 3 epochs of 4 steps, a backup at each epoch's end (steps 4, 8, 12); attempt 0
    # crashes inside step 7 (epoch 2); attempt 1 restores the backup of step 4 and
    # replays epoch 2: steps 5..7 of attempt 0 are wasted.
    badput_run(
        tmp_path,
        "keras",
        [*script("keras_train.py"), "3", "4"],
        env={"BADPUT_TEST_CRASH_AT": "7", "KERAS_BACKEND": "jax"},
    )
    rep = report(tmp_path, "keras")
    assert_clean(rep)
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (12, 3, 12)
    a0, a1 = rep.attempts
    assert (a0.first_step, a0.last_step) == (1, 7)
    assert (a1.restore_step, a1.first_step, a1.last_step) == (4, 5, 12)
    # backups: step 4 (attempt 0), 8 and 12 (attempt 1); one restore
    assert_bucket_agrees(rep, tmp_path, "checkpoint_save", 3)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_restore", 1)
    # Keras fetches the next batch in a thread while a step runs: only the wait for it
    # blocks, which is at most the fetch time the dataset measured.
    assert rep.bucket("data_loading") <= truth_sum(tmp_path, "data_loading")
    assert rep.bucket("process_init") > 0.5
