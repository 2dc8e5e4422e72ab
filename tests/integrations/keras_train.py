"""A small Keras 3 fit (JAX backend, CPU, model built in code) for the integration tests.

argv: epochs, steps per epoch, and ``BackupAndRestore``'s ``save_freq`` (``epoch``, or
every N batches). Attempt 0 crashes inside step $BADPUT_TEST_CRASH_AT; attempt 1 restores
the backup and, as Keras does, replays the epoch it was in from its start. The run's own
log (the truth file): each batch begun (its data position, ``epoch * steps + batch + 1``),
the epoch it resumed at, the optimizer's iterations then, and its own timing of the
batch fetches, of the backups written and read, and of JAX's compilations; and its own
count of the samples and tokens of each step it trained on (batch ``i`` of an epoch:
``2 + i % 2`` sequences of ``SEQ`` tokens), and of the parameters.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax
import keras
import numpy as np
from _harness import Truth, crash_step, time_jax_compiles

from badput.integrations.keras import BadputCallback

EPOCHS, STEPS = (int(a) for a in sys.argv[1:3])
SAVE_FREQ: int | str = int(sys.argv[3]) if sys.argv[3].isdigit() else sys.argv[3]
SEQ = 6
truth = Truth()
truth.values.update(attempt=os.environ.get("BADPUT_ATTEMPT"), steps=[], resumed_epoch=None)
atexit.register(truth.write)
time_jax_compiles(truth)


class Slow(keras.utils.PyDataset):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__(workers=1, use_multiprocessing=False)

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, i: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        with truth.timed("data_loading"):
            time.sleep(0.02)
            n = size(i)
            x = {"input_ids": np.full((n, SEQ), i % 7, dtype="int32")}
            return x, np.ones((n, 1), dtype="float32")


def size(batch: int) -> int:
    """The sequences of batch ``batch`` of the dataset."""
    return 2 + batch % 2


trained: list[tuple[int, int]] = []  # (samples, tokens) of the steps computed, not yet logged


def computed(input_ids: np.ndarray) -> None:
    trained.append((int(input_ids.shape[0]), int(input_ids.size)))


class Model(keras.Model):  # type: ignore[misc]
    """A functional model whose compiled train step reports the batch it trained on."""

    def train_step(self, state: Any, data: Any) -> Any:
        jax.debug.callback(computed, data[0]["input_ids"])
        return super().train_step(state, data)


class Crash(keras.callbacks.Callback):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.at = crash_step()
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.at is not None and self.epoch * STEPS + batch + 1 == self.at:
            raise RuntimeError("injected crash")


class Log(keras.callbacks.Callback):  # type: ignore[misc]
    """The run's own log: the epoch it (re)started at, the optimizer's iterations then
    (the weights' progress), and every batch begun, by data position."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epoch = epoch
        if truth.values["resumed_epoch"] is None:
            truth.values["resumed_epoch"] = epoch
            iterations = keras.ops.convert_to_numpy(self.model.optimizer.iterations)
            truth.values["iterations_at_start"] = int(iterations)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        truth.values["steps"].append(self.epoch * STEPS + batch + 1)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        jax.effects_barrier()  # the step's callback has run
        ((samples, tokens),) = trained  # one batch a step
        trained.clear()
        truth.count(self.epoch * STEPS + batch + 1, samples, tokens)


class TimedBackup(keras.callbacks.BackupAndRestore):  # type: ignore[misc]
    """The run's own timing of the backups (through the model's save/load methods)."""

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        save, load = model.save_weights, model.load_weights

        def timed_save(*a: Any, **k: Any) -> Any:
            truth.add("checkpoint_save_calls", 1)
            with truth.timed("checkpoint_save"):
                time.sleep(0.05)
                return save(*a, **k)

        def timed_load(*a: Any, **k: Any) -> Any:
            truth.add("checkpoint_restore_calls", 1)
            with truth.timed("checkpoint_restore"):
                time.sleep(0.05)
                return load(*a, **k)

        model.save_weights, model.load_weights = timed_save, timed_load


def main() -> None:
    ids = keras.Input((SEQ,), name="input_ids", dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(16, 8)(ids))
    model = Model({"input_ids": ids}, keras.layers.Dense(1)(pooled))
    model.compile(optimizer="sgd", loss="mse")
    truth.values["params"] = model.count_params()
    model.fit(
        Slow(),
        epochs=EPOCHS,
        verbose=0,
        # the run's own timing wraps first, badput's around it
        callbacks=[TimedBackup("backup", save_freq=SAVE_FREQ), BadputCallback(), Log(), Crash()],
    )


if __name__ == "__main__":
    main()
