"""Plain PyTorch under ``badput run -- torchrun``: DDP on 2 processes (gloo), timed batch
fetches, ``torch.distributed.checkpoint`` async saves and loads, and torchrun's own restart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _harness import assert_bucket_agrees, assert_clean, badput_run, report, script

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


def test_crash_free_two_ranks_waste_nothing(tmp_path: Path) -> None:
    badput_run(tmp_path, "ddp-ok", torchrun("8", "4", restarts=0), max_restarts=0)
    rep = report(tmp_path, "ddp-ok")
    assert_clean(rep)
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (8, 0, 8)
    assert rep.ideal_step_time is not None
    ranks = {e["rank"] for e in events(tmp_path, "ddp-ok") if e["kind"] == "step_start"}
    assert ranks == {0, 1}
