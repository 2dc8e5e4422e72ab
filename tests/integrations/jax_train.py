"""A small JAX training loop with Orbax async checkpoints, for the integration tests.

argv: total steps, checkpoint every N steps. Crashes inside step $BADPUT_TEST_CRASH_AT
of attempt 0; resumes from ``latest_step()``.
"""

from __future__ import annotations

import atexit
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from _harness import Truth, crash_step, time_jax_compiles

from badput.integrations.jax import TimedCheckpointManager, recorder, timed_batches

STEPS, EVERY = (int(a) for a in sys.argv[1:3])
truth = Truth()
atexit.register(truth.write)
time_jax_compiles(truth)


def batches(start: int) -> Iterator[np.ndarray]:
    # host arrays, as an input pipeline yields them (a jnp.full here would be compiled
    # at its first call: compile inside the fetch, not data loading)
    for i in range(start, STEPS):
        with truth.timed("data_loading"):
            time.sleep(0.02)
            x = np.full((2, 8), float(i % 7), dtype=np.float32)
        yield x


@jax.jit
def update(w: jnp.ndarray, x: np.ndarray) -> jnp.ndarray:
    grad = jax.grad(lambda w: jnp.mean((x @ w - 1.0) ** 2))(w)
    return w - 0.01 * grad


def main() -> None:
    rec = recorder()
    rec.record_job_start()
    with rec.training_prep():  # the manager, the state, the restore (nested: restore time)
        options = ocp.CheckpointManagerOptions(enable_async_checkpointing=True)
        manager = ocp.CheckpointManager(Path("ckpt").absolute(), options=options)
        mngr = TimedCheckpointManager(manager, rec)
        state = {"w": jnp.zeros((8,))}
        done = 0
        latest = mngr.latest_step()
        if latest is not None:
            with truth.timed("checkpoint_restore"):
                state = mngr.restore(latest, args=ocp.args.StandardRestore(state))
            done = latest
    crash_at = crash_step()
    for step, x in enumerate(timed_batches(batches(done), rec), start=done + 1):
        with rec.step(step):
            if step == crash_at:
                # The async write of checkpoint 5 has to have landed for the resume to use it
                # (on a loaded machine it may still be in flight 3 steps later).
                mngr.wait_until_finished()
                raise RuntimeError("injected crash")
            state = {"w": update(state["w"], x).block_until_ready()}
        if step % EVERY == 0:
            with truth.timed("checkpoint_save"):
                mngr.save(step, args=ocp.args.StandardSave(state))
    mngr.wait_until_finished()
    mngr.close()
    rec.record_job_end()


if __name__ == "__main__":
    main()
