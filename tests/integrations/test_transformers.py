"""Hugging Face Trainer under ``badput run``: a real run on CPU that crashes and resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from _harness import (
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


@pytest.mark.parametrize("mode", ["plain", "added_later"])
def test_resume_records_the_restore(tmp_path: Path, mode: str) -> None:
    # 12 steps, checkpoint-5 and checkpoint-10; attempt 0 crashes inside step 8; the
    # restart resumes from checkpoint-5 and runs 6..12. plain: the one-line callback and
    # trainer.train(resume_from_checkpoint=True), no wrapper; added_later: the callback
    # given to trainer.add_callback, and the documented wrapper callback.train(trainer, ...).
    badput_run(
        tmp_path,
        "hf",
        [*script("transformers_train.py"), "12", "5", mode],
        env={"BADPUT_TEST_CRASH_AT": "8"},
    )
    rep = report(tmp_path, "hf")
    assert_clean(rep)
    # the run's own log: the steps each attempt began, the step the restart resumed at
    log0, log1 = sorted(truths(tmp_path), key=lambda t: t["attempt"])
    restored = log1["resumed_at"]
    assert restored == 5
    kept = [s for s in log0["steps"] if s <= restored] + log1["steps"]
    wasted = [s for s in log0["steps"] if s > restored]
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (len(kept), len(wasted), 12)
    a0, a1 = rep.attempts
    assert (a0.first_step, a0.last_step) == (1, max(log0["steps"]))
    assert a0.end_reason == "attempt_end:failed"
    assert (a1.restore_step, a1.first_step, a1.last_step) == (restored, restored + 1, 12)
    # the samples and tokens (sequences of 4 to 6) of the steps it trained on, by the run's
    # own count: plain, from the step's batches; added_later, the Trainer's own count
    # (include_num_input_tokens_seen); the steps after the restore point were redone
    assert_work(rep, tmp_path, {(log0["attempt"], s) for s in wasted})
    (params,) = {t["params"] for t in truths(tmp_path)}
    assert_model(rep, tmp_path, "hf", params, devices=1)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_save", 2)
    # weights, optimizer and scheduler, scaler, RNG state: the Trainer's four loads
    loads = int(truth_sum(tmp_path, "checkpoint_restore_calls"))
    assert loads == 4
    assert_bucket_agrees(rep, tmp_path, "checkpoint_restore", loads)
    # the preparation between the loads (its data loader, optimizer) is not restore time
    assert rep.bucket("training_prep") >= truth_sum(tmp_path, "prep_pause")
    # 8 + 7 steps fetched, plus the first fetch of each attempt (iterator start)
    assert_bucket_agrees(rep, tmp_path, "data_loading", 17)
    assert rep.bucket("process_init") > 0.5
    # the crash and the end of training begin the teardown; every second has a name
    assert rep.bucket("teardown") > 0.0
    assert_untracked_share(rep, 0.05)
