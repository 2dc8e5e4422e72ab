"""Hugging Face Transformers: ``Trainer(..., callbacks=[BadputCallback()])``, one line.

What each bucket comes from (``TrainerCallback`` events only; no private method):

- steps: ``on_step_begin`` / ``on_step_end``, numbered by ``state.global_step``
  (optimizer steps from 1, as saved in ``checkpoint-N``), so a resume from
  ``checkpoint-50`` runs 51, 52, ...; a step spans its gradient-accumulation micro-batches.
- ``data_loading``: from the last recorded moment to ``on_step_begin``: the Trainer
  fetches the step's batches there (``get_batch_samples``) and no event surrounds it.
- ``custom:eval``: from the step's end (or ``on_log``) to ``on_evaluate``.
- ``checkpoint_save``: from the last recorded moment to ``on_save`` (the Trainer
  announces a save only once it is written); committed then.
- ``checkpoint_restore`` of ``resume_from_checkpoint``: no event comes before the
  Trainer loads it, so call ``callback.train(trainer, resume_from_checkpoint=...)``
  (a documented wrapper of ``trainer.train``): the restore runs from that call to the
  end of the model's ``load_state_dict`` (a public ``torch.nn.Module`` post-hook),
  its step the restored ``state.global_step``; from there to ``on_train_begin``
  (data loader, optimizer, its state) is ``training_prep``, as is the whole span on a
  fresh start. Called as ``trainer.train(...)``, that time stays ``untracked``.
- ``job_start`` at ``on_init_end`` (the Trainer's construction), ``job_end`` at
  ``on_train_end`` (under
  ``badput run`` the launcher records the end). The Trainer has no exception event: a
  crash ends the attempt at its last event (the recorder flushes at exit).
"""

from __future__ import annotations

import os
import time
from typing import Any

from badput._optional import import_optional
from badput.integrations._common import RecorderSession
from badput.recorder import Recorder
from badput.store import EventStore

_tf = import_optional("transformers", "transformers")
_TrainerCallback: Any = _tf.TrainerCallback

__all__ = ["BadputCallback"]


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
        self._entered: float | None = None
        self._loaded: float | None = None  # end of the model's load_state_dict
        self._step: int | None = None

    @property
    def recorder(self) -> Recorder:
        return self.session.rec

    def train(self, trainer: Any, *args: Any, **kwargs: Any) -> Any:
        """``trainer.train(*args, **kwargs)``, timing the restore of
        ``resume_from_checkpoint`` (or the preparation before the first step)."""
        self.session.touch()
        self._entered = time.time()
        self._loaded = None
        model = getattr(trainer, "model", None)
        hook = None
        if model is not None and hasattr(model, "register_load_state_dict_post_hook"):
            hook = model.register_load_state_dict_post_hook(self._weights_loaded)
        try:
            return trainer.train(*args, **kwargs)
        finally:
            if hook is not None:
                hook.remove()

    def _weights_loaded(self, module: Any, incompatible_keys: Any) -> None:
        if self._loaded is None:
            self._loaded = time.time()

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.recorder(rank=int(getattr(args, "process_index", 0)))
        self.session.job_start()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s = self.session
        rec = s.recorder(rank=int(getattr(args, "process_index", 0)))
        s.job_start()
        entered, self._entered = self._entered, None
        loaded, self._loaded = self._loaded, None
        now = time.time()
        step = int(state.global_step)
        if entered is not None and step > 0:  # the state came from a checkpoint
            restored = loaded if loaded is not None and entered <= loaded <= now else now
            rec.record_checkpoint_restore_start(step, ts=entered)
            rec.record_checkpoint_restore_end(step, ts=restored)
            entered = restored
        if entered is not None and now > entered:
            rec.record_training_prep_start(ts=entered)
            rec.record_training_prep_end(ts=now)
        s.touch(now)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        s = self.session
        s.span_since_mark("data_loading_start", "data_loading_end")
        self._step = int(state.global_step) + 1
        s.rec.record_step_start(self._step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._step is not None:
            self.session.rec.record_step_end(self._step)
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
        self.session.job_end("completed")
