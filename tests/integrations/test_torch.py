"""Plain PyTorch under ``badput run -- torchrun``: DDP on 2 processes (gloo), timed batch
fetches, ``torch.distributed.checkpoint`` async saves and loads, and torchrun's own restart."""

from __future__ import annotations

import json
import math
import sys
import time
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
    truths,
)

pytestmark = pytest.mark.slow


def torchrun(*args: str, restarts: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        str(restarts),
        *script("torch_train.py")[1:],
        *args,
    ]


def events(tmp_path: Path, job: str) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for f in sorted((tmp_path / "runs" / job).rglob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]


def test_torchrun_restart_inside_badput_run_is_a_new_attempt(tmp_path: Path) -> None:
    # badput run (no restarts) -- torchrun --max-restarts 1: rank 1 crashes inside step 8;
    # torchrun restarts both workers, which load checkpoint 5 and run 6..12.
    badput_run(
        tmp_path,
        "ddp",
        torchrun("12", "5", restarts=1),
        max_restarts=0,
        env={"BADPUT_TEST_CRASH_AT": "8"},
    )
    streams = sorted(
        str(p.relative_to(tmp_path / "runs" / "ddp")).rsplit("-", 1)[0]
        for p in (tmp_path / "runs" / "ddp").rglob("*.jsonl")
    )
    host = streams[0].split("/")[1].rsplit("-", 1)[0]
    assert streams == sorted(
        f"{a}/{host}-{r}" for a in ("0", "0.1") for r in ("0", "1", "x")
    )  # per attempt: rank 0, rank 1, the launcher (its start in 0, its end in 0.1)
    rep = report(tmp_path, "ddp")
    assert_clean(rep)
    assert [a.id for a in rep.attempts] == [0, "0.1"]
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (12, 3, 12)
    assert (rep.attempts[1].restore_step, rep.attempts[1].first_step) == (5, 6)
    # the samples and tokens each rank trained on, by its own count, summed over the ranks
    # (the report's are rank 0's, times the DistributedSampler's 2 replicas); the first
    # worker group's steps 6 and 7 were redone after the restore of 5
    assert_work(rep, tmp_path, {("0.0", 6), ("0.0", 7)})
    assert rep.program is not None and rep.program.samples == 14 * 2 * 2  # 14 steps, 2 x 2
    (params,) = {t["params"] for t in truths(tmp_path) if "params" in t}
    assert params == 16 * 8 + 8 + 1  # the Embedding and the Linear
    assert_model(rep, tmp_path, "ddp", params, devices=2)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_restore", 1)
    # rank 0 fetched 8 + 7 batches, plus the batches skipped past on resume (5)
    assert_bucket_agrees(rep, tmp_path, "data_loading", 20)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_save", 2)
    # each async save is committed by every rank once written; the crash lost none
    commits = sorted(
        (e["rank"], e["step"])
        for e in events(tmp_path, "ddp")
        if e["kind"] == "checkpoint_committed"
    )
    assert commits == [(0, 5), (0, 10), (1, 5), (1, 10)]
    # After the crash: each rank's teardown, from its exception (or job end) to the end of
    # its attempt; the rest of the job is named too.
    crashed = [t for t in truths(tmp_path) if t.get("rank") == 1 and "exit_at" in t]
    assert any("teardown_from" in t for t in crashed)
    assert rep.bucket("teardown") > 0.0
    assert rep.bucket("distributed_init") > 0.0 and rep.bucket("model_build") > 0.0
    assert rep.bucket("hung") == 0.0  # a crash, not a hang
    assert_untracked_share(rep, 0.05)


def test_crash_free_two_ranks_waste_nothing(tmp_path: Path) -> None:
    launched = time.time()
    badput_run(tmp_path, "ddp-ok", torchrun("8", "4", restarts=0), max_restarts=0)
    returned = time.time()
    rep = report(tmp_path, "ddp-ok")
    assert_clean(rep)
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (8, 0, 8)
    assert rep.ideal_step_time is not None
    ranks = {e["rank"] for e in events(tmp_path, "ddp-ok") if e["kind"] == "step_start"}
    assert ranks == {0, 1}
    # The new buckets against the run's own clock (rank 0, the accounting rank):
    (own,) = [t for t in truths(tmp_path) if t["rank"] == 0]
    # distributed_init: its init_process_group and new_group calls, plus torchrun's own
    # start, which lies between the launch and the script's first line after its imports
    calls = own["distributed_init"]
    assert calls <= rep.bucket("distributed_init") + 0.016
    assert rep.bucket("distributed_init") <= calls + (own["script_start"] - launched)
    assert_agrees("model_build", rep.bucket("model_build"), own["model_build"], 1)
    # teardown: from record_job_end to the launcher's end, which is after the script's exit
    # and before badput run returned
    assert own["exit_at"] - own["teardown_from"] <= rep.bucket("teardown")
    assert rep.bucket("teardown") <= returned - own["teardown_from"]
    assert rep.bucket("hung") == 0.0
    assert_untracked_share(rep, 0.05)


def test_hang_killed_by_the_launcher_is_hung_time_with_the_rank_that_stopped(
    tmp_path: Path,
) -> None:
    # Rank 1 hangs before step 4 of attempt 0 (it sleeps); rank 0 waits in DDP's all-reduce.
    # badput run --hang-timeout 4 kills the attempt and restarts it; attempt 1 completes.
    badput_run(
        tmp_path,
        "ddp-hang",
        torchrun("8", "4", restarts=0),
        max_restarts=1,
        env={"BADPUT_TEST_HANG_AT": "4"},
        options=["--hang-timeout", "4"],
    )
    rep = report(tmp_path, "ddp-hang")
    assert rep.end_reason == "job_end" and rep.attempts[-1].status == "completed"
    assert [a.end_reason for a in rep.attempts] == ["attempt_end:hung", "job_end"]
    assert [d.code for d in rep.diagnostics] == []
    (hung_rank,) = [t for t in truths(tmp_path) if "hung_from" in t]
    hung_at, killed = hung_rank["hung_from"], rep.attempts[0].end
    # hung: from the last progress (rank 0 began step 4, which rank 1 never did) to the
    # kill; the open step counts its typical time first
    assert rep.bucket("hung") > 0.0
    assert killed - hung_at - 0.5 <= rep.bucket("hung") <= killed - hung_at
    # the launcher waited its timeout (4 s) and more before it killed
    assert killed - hung_at >= 4.0
    # the report's stall threshold is the launcher's timeout, and its one stall of the
    # attempt is the hang, naming rank 1. (Start-up phases longer than 4 s, each inside
    # one recorded interval the rank closed, are named work, not stalls.)
    (stall,) = [s for s in rep.stalls if s.attempt == "0"]
    assert stall.threshold == 4.0 and stall.end == killed
    assert stall.first_stopped == [1]
    assert stall.why == "never reached the step the others reached"
    assert math.isclose(stall.buckets["hung"], rep.bucket("hung"))
    assert_untracked_share(rep, 0.05)
