"""A small Lightning fit (built in code, CPU) for the integration tests.

argv: total steps, checkpoint every N steps, devices (1 or 2: DDP with gloo).
Crashes inside step $BADPUT_TEST_CRASH_AT of attempt 0; resumes from the newest
checkpoint with ``ckpt_path``. The truth file: the script's own count of the samples and
tokens of each step it trained on (batches of 2 or 3 sequences), and of the parameters.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import torch
from _harness import Truth, crash_step
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch.utils.data import DataLoader, Dataset

from badput.integrations.lightning import BadputCallback

STEPS, EVERY, DEVICES = (int(a) for a in sys.argv[1:4])
FETCH_SECONDS = 0.01  # per sample; batches of 2
truth = Truth()
truth.values["attempt"] = os.environ.get("BADPUT_ATTEMPT")


class Slow(Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 3 * STEPS

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        with truth.timed("data_loading"):
            time.sleep(FETCH_SECONDS)
            return {"input_ids": torch.full((6,), i % 7, dtype=torch.long)}


class TimingIO(TorchCheckpointIO):
    """The run's own timing of Lightning's checkpoint I/O."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):  # type: ignore[no-untyped-def]
        with truth.timed("checkpoint_save"):
            time.sleep(0.05)  # a slower disk: the save must be visible
            super().save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(self, path, *args, **kwargs):  # type: ignore[no-untyped-def]
        with truth.timed("checkpoint_restore"):
            time.sleep(0.05)
            return super().load_checkpoint(path, *args, **kwargs)


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.net = torch.nn.Linear(8, 1)
        self.crash_at = crash_step()

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        step = self.trainer.global_step + 1
        if self.crash_at is not None and step == self.crash_at:
            raise RuntimeError("injected crash")
        time.sleep(0.02)
        ids = batch["input_ids"]
        truth.count(step, len(ids), sum(len(s) for s in ids))  # this rank's own count
        return self.net(self.emb(ids).mean(1)).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    ckpt_dir = Path("ckpt")
    ckpts = sorted(ckpt_dir.glob("step=*.ckpt"), key=lambda p: int(p.stem.split("=")[1]))
    trainer = pl.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        devices=DEVICES,
        strategy="ddp" if DEVICES > 1 else "auto",
        plugins=[TimingIO()],
        callbacks=[
            BadputCallback(),
            ModelCheckpoint(ckpt_dir, "{step}", every_n_train_steps=EVERY, save_top_k=-1),
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    truth.rank = trainer.global_rank
    truth.values["rank"] = trainer.global_rank
    model = Model()
    truth.values["params"] = sum(p.numel() for p in model.parameters())
    atexit.register(truth.write)
    if DEVICES == 1:  # batches of 2 and 3 samples in turn (a batch sampler of its own)
        sizes = [2 + i % 2 for i in range(STEPS)]
        starts = [sum(sizes[:i]) for i in range(STEPS)]
        batches = [list(range(a, a + n)) for a, n in zip(starts, sizes, strict=True)]
        loader = DataLoader(Slow(), batch_sampler=batches, num_workers=0)
    else:  # Lightning's DistributedSampler: each rank its own batches of 2
        loader = DataLoader(Slow(), batch_size=2, num_workers=0)
    trainer.fit(model, loader, ckpt_path=str(ckpts[-1]) if ckpts else None)


if __name__ == "__main__":
    main()
