"""A small JAX training loop with Orbax async checkpoints, for the integration tests.

argv: total steps, checkpoint every N steps. Crashes inside step $BADPUT_TEST_CRASH_AT
of attempt 0; resumes from ``latest_step()``. The truth file: the script's own count of
the samples and tokens of each step it trained on, and of the parameters.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from _harness import Truth, crash_step, time_jax_compiles

from badput.integrations.jax import TimedCheckpointManager, record_model, recorder, timed_batches

STEPS, EVERY = (int(a) for a in sys.argv[1:3])
truth = Truth()
truth.values["attempt"] = os.environ.get("BADPUT_ATTEMPT")
atexit.register(truth.write)
time_jax_compiles(truth)
State = dict[str, jnp.ndarray]


def batches(start: int) -> Iterator[dict[str, np.ndarray]]:
    # host arrays, as an input pipeline yields them (a jnp.full here would be compiled
    # at its first call: compile inside the fetch, not data loading)
    for i in range(start, STEPS):
        with truth.timed("data_loading"):
            time.sleep(0.02)
            # batches of 2 or 3 sequences of 5 tokens
            ids = np.full((2 + i % 2, 5), i % 7, dtype=np.int32)
        yield {"input_ids": ids}


def loss(state: State, ids: jnp.ndarray) -> jnp.ndarray:
    return jnp.mean((state["emb"][ids].mean(1) @ state["w"] - 1.0) ** 2)


@jax.jit
def update(state: State, ids: jnp.ndarray) -> State:
    grad = jax.grad(loss)(state, ids)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, state, grad)


def main() -> None:
    rec = recorder()
    rec.record_job_start()
    with rec.training_prep():  # the manager, the state, the restore (nested: restore time)
        options = ocp.CheckpointManagerOptions(enable_async_checkpointing=True)
        manager = ocp.CheckpointManager(Path("ckpt").absolute(), options=options)
        mngr = TimedCheckpointManager(manager, rec)
        state = {"emb": jnp.ones((16, 8)), "w": jnp.zeros((8,))}
        truth.values["params"] = sum(x.size for x in jax.tree_util.tree_leaves(state))
        record_model(rec, state)
        done = 0
        latest = mngr.latest_step()
        if latest is not None:
            with truth.timed("checkpoint_restore"):
                state = mngr.restore(latest, args=ocp.args.StandardRestore(state))
            done = latest
    crash_at = crash_step()
    timed = timed_batches(batches(done), rec)
    for step, batch in enumerate(timed, start=done + 1):
        with timed.step(step):
            if step == crash_at:
                # The async write of checkpoint 5 has to have landed for the resume to use it
                # (on a loaded machine it may still be in flight 3 steps later).
                mngr.wait_until_finished()
                raise RuntimeError("injected crash")
            state = jax.block_until_ready(update(state, batch["input_ids"]))
        ids = batch["input_ids"]
        truth.count(step, ids.shape[0], ids.shape[0] * ids.shape[1])
        if step % EVERY == 0:
            with truth.timed("checkpoint_save"):
                mngr.save(step, args=ocp.args.StandardSave(state))
    mngr.wait_until_finished()
    mngr.close()
    rec.record_job_end()


if __name__ == "__main__":
    main()
