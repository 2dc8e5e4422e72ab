"""JAX / Orbax: timed ``orbax.checkpoint.CheckpointManager`` saves, commits and restores.

::

    from badput.integrations.jax import TimedCheckpointManager, recorder

    rec = recorder()                                   # rank = jax.process_index()
    mngr = TimedCheckpointManager(ocp.CheckpointManager(path, options=...), rec)
    mngr.save(step, args=ocp.args.StandardSave(state))  # one line changed

- ``checkpoint_save``: the blocking part of ``save`` (the call; with async
  checkpointing Orbax copies the arrays to host memory and returns).
- ``checkpoint_committed``: when the background write of that step has finished
  (``is_saving_in_progress()`` turns false; a small watcher thread polls it every
  10 ms while a save is in flight, so the commit time is known to 10 ms). A
  synchronous save is committed when ``save`` returns.
- ``checkpoint_restore``: ``restore`` (its step: the one asked for, else the latest).
- ``data_loading``: wrap a batch iterator in :func:`timed_batches`;
  ``with batches.step(n):`` then records step ``n`` with the samples of its batch (the
  batch's leading dimension: a global ``jax.Array``'s is the job's; for per-process
  batches give ``replicas=jax.process_count()``) and its tokens (the size of its
  ``input_ids`` when the batch is a mapping that has them).
- :func:`record_model`: the parameter count of a parameter pytree (the sum of its
  leaves' sizes), ``jax.devices()[0].device_kind`` and ``jax.device_count()``.
- ``compile``: every compilation, as JAX times it (tracing, lowering, XLA), recorded by a
  ``jax.monitoring`` listener installed when this module is imported (see
  :mod:`badput.integrations._jax_compile`); a compilation inside a step is taken out of it.

Every other attribute is the wrapped manager's. The entries Orbax writes to its own
checkpoint logger (which MaxText's goodput reads) reach badput's store through the
ml-goodput-measurement compatibility layer (docs/compat.md), not through this module.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from badput.integrations._common import timed_batches
from badput.integrations._jax_compile import install_compile_listener
from badput.integrations._work import jax_devices, record_model_once
from badput.recorder import Recorder
from badput.runtime.optional import import_optional

jax = import_optional("jax", "jax")
install_compile_listener(jax)

__all__ = ["TimedCheckpointManager", "device", "record_model", "recorder", "timed_batches"]

#: Seconds between two looks at an async save in flight.
COMMIT_POLL_INTERVAL = 0.01


def recorder(job: str | None = None, store: Any = None, **kwargs: Any) -> Recorder:
    """A :class:`~badput.recorder.Recorder` whose rank is ``jax.process_index()`` when
    the job runs on several processes (call it after ``jax.distributed.initialize()``)."""
    if "rank" not in kwargs and jax.process_count() > 1:
        kwargs["rank"] = int(jax.process_index())
    return Recorder(job, store, **kwargs)


def device() -> tuple[str, int]:
    """``(jax.devices()[0].device_kind, jax.device_count())``: ``"cpu"`` on a CPU, which
    the table of peaks does not hold (MFU is then omitted, never invented)."""
    return jax_devices(jax)


def param_count(params: Any) -> int | None:
    """The parameters of a pytree of arrays: the sum of its leaves' sizes, else None."""
    try:
        return int(sum(int(getattr(x, "size", 0)) for x in jax.tree_util.tree_leaves(params)))
    except Exception:
        return None


def record_model(rec: Recorder, params: Any, **sizes: Any) -> None:
    """Record the parameter count of ``params`` (a pytree) and :func:`device` on ``rec``,
    once, before training; ``sizes``: ``layers=``, ``hidden=``, ``seq_len=``. Never raises."""
    record_model_once(rec, param_count(params), device(), **sizes)


class TimedCheckpointManager:
    """Wraps an ``orbax.checkpoint.CheckpointManager``: saves, commits and restores are
    recorded on ``rec``."""

    def __init__(self, manager: Any, rec: Recorder) -> None:
        self.manager = manager
        self.recorder = rec
        self._watcher: threading.Thread | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)

    def save(self, step: int, *args: Any, **kwargs: Any) -> Any:
        """``manager.save(step, ...)``; returns what it returns (whether it saved)."""
        rec = self.recorder
        self._join_watcher()  # the previous commit is recorded before this save starts
        start = time.time()
        saved = self.manager.save(step, *args, **kwargs)
        end = time.time()
        if not saved:
            return saved  # the manager's policy skipped this step: nothing was written
        rec.record_checkpoint_save_start(step, ts=start)
        rec.record_checkpoint_save_end(step, ts=end)
        if self._in_progress():
            self._watcher = threading.Thread(
                target=self._watch_commit, args=(step,), name="badput-orbax-commit", daemon=True
            )
            self._watcher.start()
        else:
            rec.record_checkpoint_committed(step, ts=end)
        return saved

    def _in_progress(self) -> bool:
        check = getattr(self.manager, "is_saving_in_progress", None)
        try:
            return bool(check()) if callable(check) else False
        except Exception:
            return False

    def _watch_commit(self, step: int) -> None:
        while self._in_progress():
            time.sleep(COMMIT_POLL_INTERVAL)
        # A save that failed in the background leaves no finalized step: no commit.
        try:
            committed = step in self.manager.all_steps()
        except Exception:
            committed = True
        if committed:
            self.recorder.record_checkpoint_committed(step)

    def _join_watcher(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.join()

    def wait_until_finished(self) -> None:
        """``manager.wait_until_finished()``, then the commit is recorded."""
        self.manager.wait_until_finished()
        self._join_watcher()

    def restore(self, step: int | None = None, *args: Any, **kwargs: Any) -> Any:
        """``manager.restore(step, ...)`` as ``checkpoint_restore`` of that step."""
        if step is None:
            step = self.manager.latest_step()
        if step is None:
            return self.manager.restore(step, *args, **kwargs)  # Orbax says what is wrong
        with self.recorder.checkpoint_restore(step):
            return self.manager.restore(step, *args, **kwargs)

    def close(self) -> None:
        self.manager.close()
        self._join_watcher()
