"""A small Hugging Face Trainer run (model built in code, CPU) for the integration tests.

argv: total steps, checkpoint every N steps. Crashes inside step $BADPUT_TEST_CRASH_AT
of attempt 0; resumes with ``resume_from_checkpoint`` (the newest checkpoint-N).
"""

from __future__ import annotations

import atexit
import sys
import time
from typing import Any

import torch
from _harness import Truth, crash_step
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from badput.integrations.transformers import BadputCallback

STEPS, EVERY = (int(a) for a in sys.argv[1:3])
truth = Truth()
atexit.register(truth.write)


class Slow(Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 2 * STEPS

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        with truth.timed("data_loading"):
            time.sleep(0.01)
            return {"x": torch.full((8,), float(i % 7)), "labels": torch.tensor(1.0)}


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.calls = 0
        self.crash_at = crash_step()

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.training:
            self.calls += 1
            if self.crash_at is not None and self.calls == self.crash_at:
                raise RuntimeError("injected crash")
            time.sleep(0.02)
        return {"loss": (self.net(x).squeeze(-1) - labels).pow(2).mean()}


class TimedTrainer(Trainer):
    """The run's own timing of the Trainer's checkpoint writes (a measuring instrument
    of the test, not how badput times them)."""

    def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        with truth.timed("checkpoint_save"):
            time.sleep(0.05)
            super()._save_checkpoint(*args, **kwargs)

    def _load_from_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        with truth.timed("checkpoint_restore"):
            time.sleep(0.05)
            super()._load_from_checkpoint(*args, **kwargs)


def main() -> None:
    args = TrainingArguments(
        output_dir="out",
        max_steps=STEPS,
        save_steps=EVERY,
        save_strategy="steps",
        per_device_train_batch_size=2,
        learning_rate=0.01,
        report_to=[],
        use_cpu=True,
        logging_steps=1000,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    callback = BadputCallback()
    trainer = TimedTrainer(model=Model(), args=args, train_dataset=Slow(), callbacks=[callback])
    callback.train(trainer, resume_from_checkpoint=get_last_checkpoint("out"))


if __name__ == "__main__":
    main()
