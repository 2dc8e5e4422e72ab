"""A small Hugging Face Trainer run (model built in code, CPU) for the integration tests.

argv: total steps, checkpoint every N steps, and ``plain`` or ``added_later``. Crashes
inside step $BADPUT_TEST_CRASH_AT of attempt 0; a restart resumes from the newest
checkpoint-N as users write it: ``plain``, ``trainer.train(resume_from_checkpoint=True)``
with ``callbacks=[BadputCallback()]``; ``added_later``, the callback given to
``trainer.add_callback`` and ``callback.train(trainer, resume_from_checkpoint=True)``.
``added_later`` also turns on ``include_num_input_tokens_seen`` (the Trainer's own token
count), ``plain`` leaves it off. The model is a tiny GPT-2 built in code.
The run's own log (the truth file): the steps it began, the step it resumed at, its
own timing of the batch fetches, checkpoint writes and loads, its own count of the
samples and tokens of each step it trained on, and the model's ``num_parameters()``.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from typing import Any

import torch
from _harness import Truth, crash_step
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from badput.integrations.transformers import BadputCallback

STEPS, EVERY = (int(a) for a in sys.argv[1:3])
MODE = sys.argv[3]
truth = Truth()
truth.values.update(attempt=os.environ.get("BADPUT_ATTEMPT"), steps=[], resumed_at=None)
atexit.register(truth.write)
current_step = [0]  # the step the Trainer began last (the run's own log)


class Slow(Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 2 * STEPS

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        with truth.timed("data_loading"):
            time.sleep(0.01)
            return {"input_ids": torch.full((8,), i % 7, dtype=torch.long)}


def collate(features: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A batch whose sequences are 4 to 6 tokens long, by its first sample's id."""
    ids = torch.stack([f["input_ids"] for f in features])
    ids = ids[:, : 4 + int(ids[0, 0]) % 3]
    return {"input_ids": ids, "labels": ids.clone()}


class Model(GPT2LMHeadModel):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=16, n_positions=8))
        self.calls = 0
        self.crash_at = crash_step()

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        if self.training:
            self.calls += 1
            if self.crash_at is not None and self.calls == self.crash_at:
                raise RuntimeError("injected crash")
            time.sleep(0.02)
            # the run's own count of what the step trains on
            truth.count(current_step[0], input_ids.shape[0], input_ids.numel())
        return super().forward(input_ids=input_ids, **kwargs)


class TimedTrainer(Trainer):
    """The run's own timing of the Trainer's checkpoint writes and reads, and a slow
    preparation (a measuring instrument of the test, not how badput times them)."""

    def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        with truth.timed("checkpoint_save"):
            time.sleep(0.05)
            super()._save_checkpoint(*args, **kwargs)

    def _timed_load(self, method: Any, pause: float, *args: Any, **kwargs: Any) -> Any:
        truth.add("checkpoint_restore_calls", 1)
        with truth.timed("checkpoint_restore"):
            time.sleep(pause)
            return method(*args, **kwargs)

    def _load_from_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self._timed_load(super()._load_from_checkpoint, 0.1, *args, **kwargs)

    def _load_optimizer_and_scheduler(self, *args: Any, **kwargs: Any) -> None:
        self._timed_load(super()._load_optimizer_and_scheduler, 0.05, *args, **kwargs)

    def _load_scaler(self, *args: Any, **kwargs: Any) -> None:
        self._timed_load(super()._load_scaler, 0.0, *args, **kwargs)

    def _load_rng_state(self, *args: Any, **kwargs: Any) -> None:
        self._timed_load(super()._load_rng_state, 0.0, *args, **kwargs)

    def get_train_dataloader(self) -> Any:
        with truth.timed("prep_pause"):  # preparation between the loads, not a restore
            time.sleep(0.2)
        return super().get_train_dataloader()


class Log(TrainerCallback):  # type: ignore[misc]
    """The run's own log: the step it resumed at and every step it began."""

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        truth.values["resumed_at"] = state.global_step

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        truth.values["steps"].append(state.global_step + 1)
        current_step[0] = state.global_step + 1


def restarted() -> bool:
    """A checkpoint-N of an earlier attempt is in the output directory."""
    return os.path.isdir("out") and get_last_checkpoint("out") is not None


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
        include_num_input_tokens_seen="no" if MODE == "plain" else "all",
    )
    model = Model()
    truth.values["params"] = model.num_parameters()
    common = {"model": model, "args": args, "train_dataset": Slow(), "data_collator": collate}
    if MODE == "plain":
        trainer = TimedTrainer(**common, callbacks=[BadputCallback(), Log()])
        if restarted():
            trainer.train(resume_from_checkpoint=True)
        else:
            trainer.train()
    else:
        trainer = TimedTrainer(**common, callbacks=[Log()])
        callback = BadputCallback()
        trainer.add_callback(callback)
        if restarted():
            callback.train(trainer, resume_from_checkpoint=True)
        else:
            callback.train(trainer)


if __name__ == "__main__":
    main()
