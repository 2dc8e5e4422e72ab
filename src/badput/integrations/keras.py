"""Keras 3: ``model.fit(..., callbacks=[BadputCallback(), ...])``, one line.

What each bucket comes from (public Keras API only):

- steps: ``on_train_batch_begin`` / ``on_train_batch_end``, numbered globally as
  ``epoch * steps_per_epoch + batch + 1`` (``epoch`` from ``on_epoch_begin``,
  ``steps_per_epoch`` from the callback's ``params``), else by the optimizer's
  ``iterations``. When ``BackupAndRestore`` resumes at the start of an epoch, the
  replayed steps carry the same numbers as the lost ones, so the lost ones are ``wasted``.
- ``checkpoint_save`` / ``checkpoint_restore``: the callback wraps its model's public
  ``save``, ``save_weights`` and ``load_weights`` (in ``set_model``, before any
  callback's ``on_train_begin``), so what ``ModelCheckpoint`` and ``BackupAndRestore``
  write and read is timed whoever calls it. A save's step is the step last ended.
  A restore's step is in the steps' own numbering: the step before the first one
  trained after it (``epoch * steps_per_epoch`` when ``BackupAndRestore`` resumes at an
  epoch's start, whatever batch its backup was taken at), so it is recorded at the next
  epoch's or batch's start, where Keras has said where it resumes.
- the step's work, on its ``step_end``: samples, the leading dimension of each batch
  the step trained on (of the inputs of ``(inputs, labels)``), tokens, the size of the
  inputs' ``input_ids`` when they are a mapping with them. No callback hook hands over
  the batch: on the JAX and torch backends the callback wraps the model's
  ``train_function`` (which Keras builds before ``on_train_begin``) so that the batches
  it takes from the data iterator are counted as they pass; on TensorFlow, whose
  ``train_function`` is a graph, give ``BadputCallback(batch_size=N)`` (then each step
  is ``N`` samples).
- ``model`` (once: at the first step's start, else at its end when the model is built
  by its first batch): ``model.count_params()``, and the device:
  ``jax.devices()[0].device_kind`` and ``jax.device_count()`` on JAX,
  ``torch.cuda.get_device_name`` on torch (``"cpu"`` on a CPU: MFU omitted).
- ``data_loading``: from the last recorded moment (a batch's end, an epoch's start) to the
  next batch's start (Keras fetches the batch there; no hook surrounds the fetch).
- ``custom:eval``: ``on_test_begin`` / ``on_test_end`` (validation inside ``fit``).
- ``compile``: on the JAX backend, JAX's own timing of each compilation (tracing, lowering,
  XLA): the first step's, the model's initialisers' (before the recorder exists) and the
  metrics' results Keras computes at the first epoch's end (see
  :mod:`badput.integrations._jax_compile`). The rest of an epoch's end (the state synced
  back to the model's variables, the metrics' results) is ``untracked``, as time between
  steps that nothing covers is: ``on_epoch_end`` moves the mark, so it is not data loading.
- ``job_start`` at ``on_train_begin``, ``job_end`` at ``on_train_end`` (under
  ``badput run`` the launcher records the end). Keras has no exception hook: a crash
  ends the attempt at its last event (the recorder flushes at exit).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

from badput.integrations._common import RecorderSession
from badput.integrations._jax_compile import install_compile_listener
from badput.integrations._work import (
    StepWork,
    jax_devices,
    record_model_once,
    torch_devices,
)
from badput.recorder import Recorder
from badput.runtime.optional import import_optional
from badput.store import EventStore

keras = import_optional("keras", "keras")
_Callback: Any = keras.callbacks.Callback
if keras.backend.backend() == "jax":
    install_compile_listener(import_optional("jax", "jax"))

__all__ = ["BadputCallback"]


class BadputCallback(_Callback):  # type: ignore[misc]
    """Records a Keras ``fit`` (see the module doc for what comes from where).

    Args:
        job, store: where to record (default ``$BADPUT_JOB``, ``$BADPUT_STORE``).
        recorder: record through this recorder instead of building one.
        lifecycle: record ``job_start``/``job_end`` (default: when building its recorder).
        time_checkpoints: wrap the model's save/load methods (default on).
        batch_size: the samples of a step, where the batches cannot be counted
            (the TensorFlow backend); counted batches take precedence.
        recorder_kwargs: more ``Recorder`` arguments (rank: detected from the launcher).
    """

    def __init__(
        self,
        job: str | None = None,
        store: EventStore | str | os.PathLike[str] | None = None,
        *,
        recorder: Recorder | None = None,
        lifecycle: bool | None = None,
        time_checkpoints: bool = True,
        batch_size: int | None = None,
        **recorder_kwargs: Any,
    ) -> None:
        super().__init__()
        self.session = RecorderSession(job, store, recorder, lifecycle, recorder_kwargs)
        self.time_checkpoints = time_checkpoints
        self.batch_size = batch_size
        self._work = StepWork()  # the samples and tokens of the step in progress
        self._counting: Any = None  # the train_function wrapper installed
        self._modelled = False
        self._epoch = 0
        self._step: int | None = None
        self._last_step = 0  # the newest step ended (what a save holds)
        self._restore: tuple[float, float] | None = None  # a load, until its step is known

    @property
    def recorder(self) -> Recorder:
        return self.session.rec

    # -- checkpoints: the model's public save/load methods, wrapped on this model only

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        self.session.recorder()  # before any callback's on_train_begin restores a backup
        if self.time_checkpoints and not getattr(model, "_badput_timed", False):
            for name in ("save", "save_weights"):
                setattr(model, name, self._timed_save(getattr(model, name)))
            model.load_weights = self._timed_load(model.load_weights)
            model._badput_timed = True

    def _timed_save(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def save(*args: Any, **kwargs: Any) -> Any:
            start = time.time()
            try:
                return method(*args, **kwargs)
            finally:
                end = time.time()
                step = self._last_step
                rec = self.session.rec
                rec.record_checkpoint_save_start(step, ts=start)
                rec.record_checkpoint_save_end(step, ts=end)
                rec.record_checkpoint_committed(step, ts=end)
                self.session.touch(end)

        return save

    def _timed_load(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def load(*args: Any, **kwargs: Any) -> Any:
            start = time.time()
            result = method(*args, **kwargs)
            end = time.time()
            # Its step is the one before the first step trained from it: known at the
            # next epoch's start (BackupAndRestore sets the epoch it resumes at after
            # loading the weights) or batch's start.
            self._restore = (start, end)
            self.session.touch(end)
            return result

        return load

    def _record_restore(self, first_step: int) -> None:
        """Record the pending load as the restore of ``first_step - 1``."""
        if self._restore is None:
            return
        (start, end), self._restore = self._restore, None
        step = max(first_step - 1, 0)
        rec = self.session.rec
        rec.record_checkpoint_restore_start(step, ts=start)
        rec.record_checkpoint_restore_end(step, ts=end)
        self._last_step = step

    def _optimizer_step(self) -> int | None:
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        if iterations is None:
            return None
        try:
            return int(keras.ops.convert_to_numpy(iterations))
        except Exception:  # an optimizer not built yet
            return None

    # -- training

    def on_train_begin(self, logs: Any = None) -> None:
        self.session.job_start()
        self._count_batches()

    def _record_model(self) -> None:
        """``model.count_params()`` and the device, once the model is built."""
        if self._modelled:
            return
        try:
            params = int(self.model.count_params())
            device = _device()
        except Exception:  # not built before its first batch (a subclassed model)
            return
        self._modelled = True
        record_model_once(self.session.rec, params, device)

    def _count_batches(self) -> None:
        """Wrap the model's ``train_function`` (again, when Keras rebuilt it) so that the
        batches it takes are counted (JAX and torch backends)."""
        try:
            function = getattr(self.model, "train_function", None)
            if function is None or function is self._counting:
                return
            backend = keras.backend.backend()
            if backend not in ("jax", "torch"):
                return
            self._counting = _counted(function, self._work, backend)
            self.model.train_function = self._counting
        except Exception:
            pass

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch = int(epoch)
        self._record_restore(self._global_step(0))
        self.session.touch()  # the epoch's first fetch starts after this

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.session.touch()  # the epoch's end is not the next batch's loading

    def _global_step(self, batch: int) -> int:
        steps = (self.params or {}).get("steps")
        if isinstance(steps, int) and steps > 0:
            return self._epoch * steps + int(batch) + 1
        optimizer_step = self._optimizer_step()
        return (optimizer_step if optimizer_step is not None else self._last_step) + 1

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        s = self.session
        self._step = self._global_step(batch)
        self._record_restore(self._step)  # a load inside an epoch (by a user's callback)
        s.span_since_mark("data_loading_start", "data_loading_end")
        if not self._modelled:  # after the restore, whose events are dated earlier
            self._record_model()
        self._count_batches()
        self._work.begin()
        s.rec.record_step_start(self._step)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._step is not None:
            samples, tokens = self._work.take()
            if samples is None:
                samples = self.batch_size
            self.session.rec.record_step_end(self._step, samples=samples, tokens=tokens)
            self._last_step, self._step = self._step, None
            if not self._modelled:
                self._record_model()
        self.session.touch()

    def on_test_begin(self, logs: Any = None) -> None:
        if self._step is None:  # validation inside fit, not model.evaluate() alone
            self.session.rec.record_custom_start("eval")

    def on_test_end(self, logs: Any = None) -> None:
        if self._step is None:
            self.session.rec.record_custom_end("eval")
            self.session.touch()

    def on_train_end(self, logs: Any = None) -> None:
        self.session.job_end("completed")


class _Counting:
    """An iterator of batches that counts each one it gives (:class:`StepWork`)."""

    __slots__ = ("_it", "_work")

    def __init__(self, it: Any, work: StepWork) -> None:
        self._it = it
        self._work = work

    def __iter__(self) -> _Counting:
        return self

    def __next__(self) -> Any:
        batch = next(self._it)
        self._work.add_batch(batch)
        return batch


def _counted(function: Callable[..., Any], work: StepWork, backend: str) -> Callable[..., Any]:
    """``function`` (a Keras ``train_function``), counting the batches it trains on: on
    JAX it takes them from an iterator (its last argument), on torch it is handed a list."""

    @functools.wraps(function)
    def train_function(*args: Any) -> Any:
        if args:
            data = args[-1]
            if backend == "jax" and hasattr(data, "__next__"):
                args = (*args[:-1], _Counting(data, work))
            elif backend == "torch" and isinstance(data, list):
                for batch in data:
                    work.add_batch(batch)
        return function(*args)

    return train_function


def _device() -> tuple[str, int] | None:
    """The device kind and count as the backend tells them (JAX, torch), else None."""
    backend = keras.backend.backend()
    if backend == "jax":
        return jax_devices(import_optional("jax", "jax"))
    if backend == "torch":
        return torch_devices(import_optional("torch", "torch"))
    return None
