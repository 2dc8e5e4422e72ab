"""Hugging Face Transformers: ``Trainer(..., callbacks=[BadputCallback()])``, one line.

What each bucket comes from:

- steps: ``on_step_begin`` / ``on_step_end``, numbered by ``state.global_step``
  (optimizer steps from 1, as saved in ``checkpoint-N``), so a resume from
  ``checkpoint-50`` runs 51, 52, ...; a step spans its gradient-accumulation micro-batches.
- the step's work, on its ``step_end``: tokens, the growth of
  ``state.num_input_tokens_seen`` over the step when ``include_num_input_tokens_seen``
  is on (the Trainer gathers it over the processes), else the size of the main input
  (``model.main_input_name``, ``input_ids``) of the step's batches; samples, the leading
  dimension of that input. The batches are what the Trainer's ``get_batch_samples``
  returned for the step (wrapped on the Trainer attached, as the loaders below); what
  one process saw is multiplied by ``args.world_size``, so the counts are the job's.
- ``model`` (once, at ``on_train_begin``): ``model.num_parameters()`` (a plain
  ``torch.nn.Module``: ``sum(p.numel())``), ``config.num_hidden_layers`` and
  ``config.hidden_size`` when the model has them, ``torch.cuda.get_device_name``
  (``"cpu"`` without CUDA: MFU omitted) and the number of processes.
- ``data_loading``: from the last recorded moment to ``on_step_begin``: the Trainer
  fetches the step's batches there (``get_batch_samples``) and no event surrounds it.
- ``custom:eval``: from the step's end (or ``on_log``) to ``on_evaluate``.
- ``checkpoint_save``: from the last recorded moment to ``on_save`` (the Trainer
  announces a save only once it is written); committed then.
- ``checkpoint_restore`` of ``trainer.train(resume_from_checkpoint=...)`` (``True`` or a
  directory), as users write it: no callback event comes before or around the loads,
  so at ``on_init_end`` the callback finds the Trainer being built (the caller's frame:
  ``on_init_end`` is called from ``Trainer.__init__``) and wraps, on that instance only,
  its public ``train`` (the call's start) and the four methods that read a checkpoint:
  ``_load_from_checkpoint`` (weights), ``_load_optimizer_and_scheduler``,
  ``_load_scaler`` and ``_load_rng_state``. Each load between the ``train`` call and the
  first step is a ``checkpoint_restore`` interval of the step the Trainer restored
  (``state.global_step`` at ``on_train_begin``); the rest of the span from the call to
  ``on_train_begin`` (data loader, optimizer, ``accelerator.prepare``) is
  ``training_prep``, as is the whole span on a fresh start. The wrappers pass every
  argument and result through; a loader that a Transformers version lacks is not
  timed (its time stays ``training_prep``) and the restore is still recorded at its
  step, as a zero-length interval at ``on_train_begin``.
- A callback added after the Trainer is built (``trainer.add_callback``) misses
  ``on_init_end``: ``callback.train(trainer, ...)`` (``trainer.train`` with the Trainer
  handed over) times that call; called as ``trainer.train(...)``, the restore is still
  recorded at its step, and its time stays ``untracked``.
- ``model_build``: each ``PreTrainedModel.from_pretrained`` call (a model built in code is
  not seen: ``with rec.model_build():`` times it); ``training_prep`` also covers building
  the ``Trainer`` (its ``__init__``). Both are timed by wrappers installed on the classes
  when this module is imported, and recorded by the callback's recorder once it exists.
- ``distributed_init`` / ``teardown``: the ``torch.distributed`` hooks
  (``badput.integrations._distributed``); under ``badput run``, ``on_train_end`` begins
  the teardown, which lasts until the launcher records the end.
- ``job_start`` at ``on_init_end`` (the Trainer's construction), ``job_end`` at
  ``on_train_end`` (under
  ``badput run`` the launcher records the end). The Trainer has no exception event: a
  crash ends the attempt at its last event (the recorder flushes at exit).
"""

from __future__ import annotations

import functools
import inspect
import os
import time
import weakref
from collections.abc import Callable
from typing import Any

from badput.integrations._common import RecorderSession
from badput.integrations._distributed import install_distributed_hooks, time_calls
from badput.integrations._work import (
    StepWork,
    batch_samples,
    batch_tokens,
    record_model_once,
    torch_devices,
    torch_params,
)
from badput.recorder import Recorder
from badput.runtime.optional import import_optional
from badput.store import EventStore

_tf = import_optional("transformers", "transformers")
_TrainerCallback: Any = _tf.TrainerCallback
# process-group set-up is distributed_init; its destruction begins the teardown
install_distributed_hooks(import_optional("torch.distributed", "torch"))
torch = import_optional("torch", "torch")

__all__ = ["BadputCallback"]

# The Trainer's methods that read a checkpoint (each takes the checkpoint directory).
_LOADERS = (
    "_load_from_checkpoint",
    "_load_optimizer_and_scheduler",
    "_load_scaler",
    "_load_rng_state",
)


def _calling_trainer() -> Any | None:
    """The ``Trainer`` whose method is on the call stack (``__init__`` at ``on_init_end``,
    the training loop at ``on_train_begin``), else None."""
    cls = getattr(_tf, "Trainer", None)
    frame = inspect.currentframe()
    try:
        for _ in range(64):
            if frame is None or cls is None:
                return None
            owner = frame.f_locals.get("self") if "self" in frame.f_code.co_varnames else None
            if isinstance(owner, cls):
                return owner
            frame = frame.f_back
        return None
    finally:
        del frame


class BadputCallback(_TrainerCallback):  # type: ignore[misc]
    """Records a ``Trainer`` run (see the module doc for what comes from where).

    Args:
        job, store: where to record (default ``$BADPUT_JOB``, ``$BADPUT_STORE``).
        recorder: record through this recorder instead of building one.
        lifecycle: record ``job_start``/``job_end`` (default: when building its recorder).
        recorder_kwargs: more ``Recorder`` arguments; the rank defaults to
            ``args.process_index``.
    """

    def __init__(
        self,
        job: str | None = None,
        store: EventStore | str | os.PathLike[str] | None = None,
        *,
        recorder: Recorder | None = None,
        lifecycle: bool | None = None,
        **recorder_kwargs: Any,
    ) -> None:
        self.session = RecorderSession(job, store, recorder, lifecycle, recorder_kwargs)
        self._trainers: weakref.WeakSet[Any] = weakref.WeakSet()  # the Trainers attached
        self._called: float | None = None  # start of the train() call, until on_train_begin
        self._loads: list[tuple[float, float]] = []  # loads since, until on_train_begin
        self._restoring = False  # from a train() call to its first step: loads are restores
        self._restored: int | None = None  # the step restored, from on_train_begin
        self._step: int | None = None
        self._work = StepWork()  # the samples and tokens of the step's batches
        self._seen: int | None = None  # state.num_input_tokens_seen at the last step's end
        self._modelled = False

    @property
    def recorder(self) -> Recorder:
        return self.session.rec

    # -- the Trainer's train() call and its checkpoint loads

    def attach(self, trainer: Any) -> None:
        """Time ``trainer``'s ``train`` calls and checkpoint loads (done at ``on_init_end``
        for the Trainer being built; once per Trainer)."""
        if trainer is None or trainer in self._trainers:
            return
        self._trainers.add(trainer)
        trainer.train = self._timed_train(trainer.train)
        for name in _LOADERS:
            method = getattr(trainer, name, None)
            if callable(method):
                setattr(trainer, name, self._timed_load(method))
        fetch = getattr(trainer, "get_batch_samples", None)
        if callable(fetch):
            trainer.get_batch_samples = self._counted_fetch(trainer, fetch)

    def _counted_fetch(self, trainer: Any, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def get_batch_samples(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            try:
                key = getattr(trainer.model, "main_input_name", "input_ids")
                samples = tokens = None
                for batch in result[0]:  # (batches of the step, number of items)
                    ids = batch.get(key) if isinstance(batch, dict) else None
                    n = batch_samples(batch if ids is None else ids)
                    t = batch_tokens(batch, key)
                    samples = samples if n is None else (samples or 0) + n
                    tokens = tokens if t is None else (tokens or 0) + t
                self._work.add(samples, tokens)
            except Exception:
                pass
            return result

        return get_batch_samples

    def train(self, trainer: Any, *args: Any, **kwargs: Any) -> Any:
        """``trainer.train(*args, **kwargs)``, with ``trainer`` attached first: needed only
        for a callback added after the Trainer was built (``trainer.add_callback``)."""
        targs = getattr(trainer, "args", None)
        self.session.recorder(rank=int(getattr(targs, "process_index", 0)))
        self.attach(trainer)
        return trainer.train(*args, **kwargs)

    def _timed_train(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def train(*args: Any, **kwargs: Any) -> Any:
            self._called = time.time()
            self._loads = []
            self._restoring = True
            self._restored = None
            try:
                return method(*args, **kwargs)
            finally:
                self._called = None
                self._restoring = False

        return train

    def _timed_load(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def load(*args: Any, **kwargs: Any) -> Any:
            if not self._restoring:  # e.g. load_best_model_at_end: not a restore
                return method(*args, **kwargs)
            start = time.time()
            result = method(*args, **kwargs)
            self._loaded(start, time.time())
            return result

        return load

    def _loaded(self, start: float, end: float) -> None:
        if self._restored is None:  # before on_train_begin: the step is not known yet
            self._loads.append((start, end))
            return
        # After on_train_begin (the RNG state, loaded at the first epoch's start or once
        # the first step's batches are fetched): the fetch since the mark comes first.
        s = self.session
        rec = s.rec
        if s.mark is not None and start > s.mark:
            rec.record_data_loading_start(ts=s.mark)
            rec.record_data_loading_end(ts=start)
        rec.record_checkpoint_restore_start(self._restored, ts=start)
        rec.record_checkpoint_restore_end(self._restored, ts=end)
        s.touch(end)

    # -- callback events

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.recorder(rank=int(getattr(args, "process_index", 0)))
        self.session.job_start()
        self.attach(_calling_trainer())

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s = self.session
        rec = s.recorder(rank=int(getattr(args, "process_index", 0)))
        s.job_start()
        self.attach(_calling_trainer())  # added after it was built: times what comes next
        now = time.time()
        called, self._called = self._called, None
        loads, self._loads = self._loads, []
        step = int(state.global_step)  # > 0 only when the state came from a checkpoint
        if called is not None and now > called:
            rec.record_training_prep_start(ts=called)
        self._restoring = bool(loads) or step > 0  # loads until the first step restore too
        if self._restoring:
            for start, end in loads or [(now, now)]:
                rec.record_checkpoint_restore_start(step, ts=start)
                rec.record_checkpoint_restore_end(step, ts=end)
            self._restored = step
        if called is not None and now > called:
            rec.record_training_prep_end(ts=now)
        s.touch(now)
        self._work = StepWork(int(getattr(args, "world_size", 1) or 1))
        self._seen = _tokens_seen(args, state)
        if not self._modelled:
            self._modelled = True
            _record_model(rec, kwargs.get("model"))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s = self.session
        self._restoring, self._restored = False, None
        s.span_since_mark("data_loading_start", "data_loading_end")
        self._step = int(state.global_step) + 1
        self._work.begin()
        s.rec.record_step_start(self._step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._step is not None:
            samples, tokens = self._work.take()
            seen = _tokens_seen(args, state)
            if seen is not None and self._seen is not None and seen >= self._seen:
                tokens = seen - self._seen  # gathered over the processes by the Trainer
            self._seen = seen
            self.session.rec.record_step_end(self._step, samples=samples, tokens=tokens)
            self._step = None
        self.session.touch()

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.touch()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.span_since_mark("custom_start", "custom_end", {"name": "eval"})

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = int(state.global_step)
        now = self.session.span_since_mark(
            "checkpoint_save_start", "checkpoint_save_end", {"step": step}
        )
        self.session.rec.record_checkpoint_committed(step, ts=now)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._restoring, self._restored = False, None
        self.session.job_end("completed")


def _tokens_seen(args: Any, state: Any) -> int | None:
    """``state.num_input_tokens_seen`` when the Trainer counts it, else None."""
    if getattr(args, "include_num_input_tokens_seen", "no") in ("no", False, None):
        return None
    seen = getattr(state, "num_input_tokens_seen", None)
    return int(seen) if isinstance(seen, (int, float)) else None


def _record_model(rec: Recorder, model: Any) -> None:
    """The model's parameters (``num_parameters()``), layers and hidden size, and the
    device: recorded once, at the start of training; never raises."""
    try:
        count = getattr(model, "num_parameters", None)
        params = int(count()) if callable(count) else torch_params(model)
        config = getattr(model, "config", None)
        sizes = {
            name: value
            for name, attr in (("layers", "num_hidden_layers"), ("hidden", "hidden_size"))
            if isinstance(value := getattr(config, attr, None), int)
        }
    except Exception:
        return
    record_model_once(rec, params, torch_devices(torch), **sizes)


def _install_build_hooks() -> None:
    """``from_pretrained`` is ``model_build``; building a ``Trainer`` is ``training_prep``
    (moving the model to its device, the accelerator's state): both happen before the
    callback's recorder exists, which records them when built (``on_init_end``)."""
    model = getattr(_tf, "PreTrainedModel", None)
    if model is not None:
        time_calls(model, "from_pretrained", "model_build", classmethod_=True)
    trainer = getattr(_tf, "Trainer", None)
    if trainer is not None:
        time_calls(trainer, "__init__", "training_prep")


_install_build_hooks()
