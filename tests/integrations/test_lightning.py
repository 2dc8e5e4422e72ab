"""PyTorch Lightning: a real fit on CPU under ``badput run`` that crashes and resumes; two
fits in one process with one callback, the first crashing inside a step."""

from __future__ import annotations

import json
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
    truths,
)

pytestmark = pytest.mark.slow


def test_crash_and_resume_from_the_real_checkpoint(tmp_path: Path) -> None:
    # 12 steps, a checkpoint every 5; attempt 0 crashes inside step 8, attempt 1
    # resumes from step=5.ckpt and runs 6..12.
    badput_run(
        tmp_path,
        "lit",
        [*script("lightning_train.py"), "12", "5", "1"],
        env={"BADPUT_TEST_CRASH_AT": "8"},
    )
    rep = report(tmp_path, "lit")
    assert_clean(rep)
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (12, 3, 12)
    a0, a1 = rep.attempts
    assert (a0.first_step, a0.last_step, a0.end_reason) == (1, 8, "attempt_end:failed")
    assert (a1.restore_step, a1.first_step, a1.last_step) == (5, 6, 12)
    # the samples (batches of 2 and 3 in turn) and tokens of the steps it trained on, by the
    # script's own count; steps 6 and 7 of attempt 0 were redone after the restore of 5
    assert_work(rep, tmp_path, {("0", 6), ("0", 7)})
    (params,) = {t["params"] for t in truths(tmp_path) if "params" in t}
    assert params == 16 * 8 + 8 + 1
    assert_model(rep, tmp_path, "lit", params, devices=1)
    # 2 saves (5 in attempt 0, 10 in attempt 1), 1 restore, 15 batches fetched
    assert_bucket_agrees(rep, tmp_path, "checkpoint_save", 2)
    assert_bucket_agrees(rep, tmp_path, "checkpoint_restore", 1)
    assert_bucket_agrees(rep, tmp_path, "data_loading", 15)
    # interpreter start and `import lightning` in each attempt: named, not untracked
    assert rep.bucket("process_init") > 0.5
    assert rep.bucket("process_init") > rep.bucket("untracked")


def test_ddp_two_processes_write_per_rank_files_and_waste_nothing(tmp_path: Path) -> None:
    badput_run(tmp_path, "lit-ddp", [*script("lightning_train.py"), "8", "4", "2"], max_restarts=0)
    streams = sorted(
        p.name.split("-")[-2] for p in (tmp_path / "runs" / "lit-ddp").rglob("*.jsonl")
    )
    assert streams == ["0", "1", "x"]  # rank 0, rank 1, the launcher
    rep = report(tmp_path, "lit-ddp")
    assert_clean(rep)
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (8, 0, 8)
    assert rep.ideal_step_time is not None
    assert rep.bucket("wasted") == 0.0
    # each rank counted its own batches; rank 0 recorded them times the 2 replicas
    assert_work(rep, tmp_path, set())
    assert rep.program is not None and rep.program.samples == 8 * 2 * 2
    assert_model(rep, tmp_path, "lit-ddp", 16 * 8 + 8 + 1, devices=2)
    # the DDP launch and rendezvous (init_process_group, hooked) and the teardown are named:
    # rank 0 waits there for rank 1, which Lightning starts and which imports everything
    assert rep.bucket("distributed_init") > 0.5
    assert rep.bucket("teardown") > 0.0
    assert_untracked_share(rep, 0.05)
    # each rank timed the forward of each of its 8 batches (the compute section of docs/ranks.md)
    forwards: dict[int, int] = {}
    for f in (tmp_path / "runs" / "lit-ddp").rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e["kind"] == "section_summary" and e["name"] == "forward":
                forwards[e["rank"]] = forwards.get(e["rank"], 0) + e["count"]
    assert forwards == {0: 8, 1: 8}


def test_a_fit_after_a_crash_inside_a_step_counts_each_step_its_own_batch(
    tmp_path: Path,
) -> None:
    # One callback, two fits in one process: the first crashes inside step 3 (after its
    # batch was counted); the second resumes from the checkpoint of step 2, so its first
    # step is step 3 again, on the loader's first batch. Each step_end carries the batch
    # that step trained on (by the module's own count), none of a neighbour's.
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader

    from badput.integrations.lightning import BadputCallback

    trained: list[tuple[int, int, int]] = []  # (fit, step, samples) as the module saw them

    class Model(pl.LightningModule):
        def __init__(self, fit: int, crash_at: int | None) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)
            self.fit_no, self.crash_at = fit, crash_at

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            step = self.trainer.global_step + 1
            if step == self.crash_at:
                raise RuntimeError("injected crash")
            trained.append((self.fit_no, step, len(batch)))
            return self.net(batch).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    batches = [torch.ones(2 + i % 2, 4) for i in range(8)]  # 2, 3, 2, 3, ...
    callback = BadputCallback("pl", tmp_path / "runs")

    def fit(n: int, crash_at: int | None, ckpt: Path | None) -> None:
        pl.Trainer(
            max_steps=5,
            accelerator="cpu",
            callbacks=[callback, ModelCheckpoint(tmp_path / "ck", "{step}", every_n_train_steps=1)],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        ).fit(Model(n, crash_at), DataLoader(batches, batch_size=None), ckpt_path=ckpt)

    with pytest.raises(RuntimeError, match="injected crash"):
        fit(0, 3, None)
    fit(1, None, tmp_path / "ck" / "step=2.ckpt")
    callback.recorder.flush(timeout=5.0)
    steps = [
        (e["kind"], e["step"], e.get("samples"))
        for f in sorted((tmp_path / "runs").rglob("*.jsonl"))
        for e in map(json.loads, f.read_text().splitlines())
        if e["kind"] in ("step_start", "step_end")
    ]
    assert [(s, n) for _, s, n in trained] == [(1, 2), (2, 3), (3, 2), (4, 3), (5, 2)]
    ends = [(s, n) for kind, s, n in steps if kind == "step_end"]
    assert ends == [(s, n) for _, s, n in trained]
    starts = [s for kind, s, _ in steps if kind == "step_start"]
    assert starts == [1, 2, 3, 3, 4, 5]  # the crashed step 3, then step 3 of the resume
