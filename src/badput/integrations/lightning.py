"""PyTorch Lightning: ``Trainer(callbacks=[BadputCallback()])``, one line.

What each bucket comes from (Lightning's public hooks only):

- ``job_start``: ``setup`` (fit); ``job_end``: ``on_fit_end`` (under ``badput run``,
  the launcher records the end); an exception (``on_exception``) flushes.
- steps: ``on_train_batch_start`` / ``on_train_batch_end``, numbered by
  ``trainer.global_step`` (optimizer steps, from 1; with gradient accumulation a step
  spans its micro-batches), so a resume from a checkpoint of step 50 runs 51, 52, ...
- ``checkpoint_save`` / ``checkpoint_restore``: a ``CheckpointIO`` wrapper that the
  callback installs on ``trainer.strategy.checkpoint_io`` (a public setter) in
  ``setup``, before Lightning restores ``ckpt_path``; the step is the checkpoint's
  ``global_step``.
- ``training_prep``: ``setup`` to the first batch, less what is nested in it.
- ``data_loading``: from the last recorded moment (a step's end, a validation's end,
  a checkpoint written) to the next batch's start: Lightning fetches the next batch
  there and no hook surrounds the fetch itself.
- ``custom:eval``: ``on_validation_start`` / ``on_validation_end`` (the sanity check too).
- the step's work, on its ``step_end``: samples, the leading dimension of each batch
  of the step (``on_train_batch_start``'s ``batch``: of its ``input_ids`` or first
  tensor), tokens, the size of its ``input_ids`` when the batch is a mapping with them;
  both times the strategy's data-parallel replicas (``distributed_sampler_kwargs``'s
  ``num_replicas``), so they are the job's. A step that never ends did no counted work.
- ``model`` (once, at ``on_train_start``): the module's parameters (``sum(p.numel())``),
  ``torch.cuda.get_device_name`` (``"cpu"`` without CUDA: MFU omitted) and the world size.
- the compute section ``forward`` (``rec.section``, docs/ranks.md): from each batch's
  start to ``on_before_backward`` (``training_step``: forward and loss). Backward is
  not timed: under DDP it waits in the gradient all-reduce for the slowest rank.
"""

from __future__ import annotations

import os
import time
from typing import Any

from badput.integrations._common import RecorderSession
from badput.integrations._distributed import install_distributed_hooks
from badput.integrations._work import StepWork, record_model_once, torch_devices, torch_params
from badput.recorder import Recorder
from badput.runtime.optional import import_optional
from badput.store import EventStore

pl = import_optional("lightning.pytorch", "lightning")
# process-group set-up is distributed_init; its destruction begins the teardown
install_distributed_hooks(import_optional("torch.distributed", "torch"))
torch = import_optional("torch", "torch")
_io = import_optional("lightning.pytorch.plugins.io", "lightning")
_CheckpointIO: Any = _io.CheckpointIO
_Callback: Any = pl.Callback

__all__ = ["BadputCallback", "TimedCheckpointIO"]


def _step_of(checkpoint: Any) -> int | None:
    step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
    return step if isinstance(step, int) else None


def _replicas(trainer: Any) -> int:
    """The data-parallel replicas of ``trainer``'s strategy (each fetches its own batch)."""
    try:
        kwargs = trainer.strategy.distributed_sampler_kwargs
        return max(int(kwargs["num_replicas"]), 1) if kwargs else 1
    except Exception:
        return 1


class TimedCheckpointIO(_CheckpointIO):  # type: ignore[misc]
    """A ``CheckpointIO`` that records each save and load of the one it wraps.

    ``save_checkpoint`` is ``checkpoint_save`` of the checkpoint's ``global_step``;
    ``load_checkpoint`` is ``checkpoint_restore`` of the step it loaded (known once
    loaded, so both events are stamped then, with the load's start time).
    """

    def __init__(self, wrapped: Any, session: RecorderSession) -> None:
        super().__init__()
        self.wrapped = wrapped
        self._session = session

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        step = _step_of(checkpoint)
        rec = self._session.rec
        start = time.time()
        try:
            self.wrapped.save_checkpoint(checkpoint, path, storage_options=storage_options)
        finally:
            if step is not None:
                end = time.time()
                rec.record_checkpoint_save_start(step, ts=start)
                rec.record_checkpoint_save_end(step, ts=end)
                rec.record_checkpoint_committed(step, ts=end)
                self._session.touch(end)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        start = time.time()
        checkpoint: dict[str, Any] = self.wrapped.load_checkpoint(path, *args, **kwargs)
        step = _step_of(checkpoint)
        if step is not None:
            end = time.time()
            rec = self._session.rec
            rec.record_checkpoint_restore_start(step, ts=start)
            rec.record_checkpoint_restore_end(step, ts=end)
            self._session.touch(end)
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        self.wrapped.remove_checkpoint(path)

    def teardown(self) -> None:
        self.wrapped.teardown()


class BadputCallback(_Callback):  # type: ignore[misc]
    """Records a Lightning ``fit`` (see the module doc for what comes from where).

    Args:
        job, store: where to record (default ``$BADPUT_JOB``, ``$BADPUT_STORE``).
        recorder: record through this recorder instead of building one.
        lifecycle: record ``job_start``/``job_end`` (default: when building its recorder).
        time_checkpoints: install the :class:`TimedCheckpointIO` wrapper (default on).
        recorder_kwargs: more ``Recorder`` arguments; the rank defaults to
            ``trainer.global_rank``, so each DDP process writes its own stream.
    """

    def __init__(
        self,
        job: str | None = None,
        store: EventStore | str | os.PathLike[str] | None = None,
        *,
        recorder: Recorder | None = None,
        lifecycle: bool | None = None,
        time_checkpoints: bool = True,
        **recorder_kwargs: Any,
    ) -> None:
        super().__init__()
        self.session = RecorderSession(job, store, recorder, lifecycle, recorder_kwargs)
        self.time_checkpoints = time_checkpoints
        self._step: int | None = None  # the step in progress
        self._prep = False
        self._forward: Any = None  # the open "forward" section timer
        self._work = StepWork()  # the samples and tokens of the step in progress

    @property
    def recorder(self) -> Recorder:
        return self.session.rec

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        s = self.session
        rec = s.recorder(rank=int(trainer.global_rank))
        s.job_start()
        rec.record_training_prep_start()
        self._prep = True
        strategy = trainer.strategy
        if self.time_checkpoints and not isinstance(strategy.checkpoint_io, TimedCheckpointIO):
            strategy.checkpoint_io = TimedCheckpointIO(strategy.checkpoint_io, s)

    def _end_prep(self) -> None:
        if self._prep:
            self._prep = False
            self.session.rec.record_training_prep_end()
            self.session.touch()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._end_prep()
        # A fit after one that crashed inside a step (this callback again, resumed from
        # a checkpoint) begins its first step afresh, even when it has the same number.
        self._step = self._forward = None
        self._work = StepWork(_replicas(trainer))
        record_model_once(self.session.rec, torch_params(pl_module), torch_devices(torch))

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._end_prep()
        step = int(trainer.global_step) + 1
        if step != self._step:  # else another micro-batch of the step in progress
            s = self.session
            s.span_since_mark("data_loading_start", "data_loading_end")
            self._step = step
            self._work.begin()
            s.rec.record_step_start(step)
        self._work.add_batch(batch)
        self._end_forward()
        self._forward = self.session.rec.section("forward")
        self._forward.__enter__()

    def _end_forward(self) -> None:
        forward, self._forward = self._forward, None
        if forward is not None:
            forward.__exit__(None, None, None)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._end_forward()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._end_forward()  # a training_step that returned no loss has no backward
        step = self._step
        if step is not None and int(trainer.global_step) >= step:  # the optimizer stepped
            samples, tokens = self._work.take()
            self.session.rec.record_step_end(step, samples=samples, tokens=tokens)
            self._step = None
            self.session.touch()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self.session.rec.record_custom_start("eval")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self.session.rec.record_custom_end("eval")
        self.session.touch()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._end_prep()
        self.session.job_end("completed")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.session.crashed(exception)
