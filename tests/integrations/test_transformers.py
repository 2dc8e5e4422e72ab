"""Hugging Face Trainer under ``badput run``: a real run on CPU that crashes and resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from _harness import assert_bucket_agrees, assert_clean, badput_run, report, script

pytestmark = pytest.mark.slow


def test_crash_and_resume_from_checkpoint_dir(tmp_path: Path) -> None:
    # 12 steps, checkpoint-5 and checkpoint-10; attempt 0 crashes inside step 8, attempt 1
    # resumes with resume_from_checkpoint=checkpoint-5 and runs 6..12.
    badput_run(
        tmp_path,
        "hf",
        [*script("transformers_train.py"), "12", "5"],
        env={"BADPUT_TEST_CRASH_AT": "8"},
    )
    rep = report(tmp_path, "hf")
    assert_clean(rep)
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (12, 3, 12)
    a0, a1 = rep.attempts
    assert (a0.first_step, a0.last_step, a0.end_reason) == (1, 8, "attempt_end:failed")
    assert (a1.restore_step, a1.first_step, a1.last_step) == (5, 6, 12)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_save", 2)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_restore", 1)
    # 8 + 7 steps fetched, plus the first fetch of each attempt (iterator start)
    assert_bucket_agrees(rep, tmp_path, "data_loading", 17)
    assert rep.bucket("process_init") > 0.5
