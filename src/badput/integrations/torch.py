"""Plain PyTorch: timed batch fetches and timed ``torch.distributed.checkpoint``.

::

    from badput.integrations.torch import TimedDataLoader, dcp_save, dcp_async_save, dcp_load

    record_model(rec, model)                  # its parameters, the device kind and count
    loader = TimedDataLoader(DataLoader(dataset, batch_size=32), rec)   # one line
    for step, batch in enumerate(loader, 1):  # each fetch is a data_loading interval
        with loader.step(step):               # the step, with its samples (and tokens)
            train_step(batch)
    dcp_load(rec, state, step, checkpoint_id=path)         # checkpoint_restore
    dcp_save(rec, state, step, checkpoint_id=path)         # checkpoint_save
    future = dcp_async_save(rec, state, step, checkpoint_id=path)
    # blocking part (staging) = checkpoint_save; checkpoint_committed when the upload completes

Nothing here needs ``torch.distributed`` to be initialised; each call forwards its
keyword arguments to the ``torch.distributed.checkpoint`` function of the same name.

``loader.step(n)`` records step ``n`` with the work of the batch fetched last before it
(and of any fetched inside it): samples, the batch's leading dimension (of its
``input_ids``, or of its first tensor); tokens, the size of its ``input_ids`` when it is a
mapping that has them. Both are the job's: times the ``DistributedSampler``'s
``num_replicas`` when the loader has one (each rank fetches its own share), else
``replicas``. They go on the step's end: a step that raised did no counted work.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from badput.integrations._common import timed_batches
from badput.integrations._distributed import install_distributed_hooks
from badput.integrations._work import TimedBatches, WorkStep, record_model_once, torch_devices
from badput.integrations._work import torch_params as _torch_params
from badput.recorder import Recorder
from badput.runtime.optional import import_optional

torch = import_optional("torch", "torch")
# process-group set-up is distributed_init; its destruction begins the teardown
install_distributed_hooks(import_optional("torch.distributed", "torch"))

__all__ = [
    "TimedDataLoader",
    "dcp_async_save",
    "dcp_load",
    "dcp_save",
    "device",
    "record_model",
    "timed_batches",
]

T = TypeVar("T")


def device() -> tuple[str, int]:
    """``(device name, devices of the job)``: ``torch.cuda.get_device_name(0)`` when CUDA
    is available, else ``"cpu"`` (not in the table of peaks: MFU omitted); the processes
    of ``torch.distributed`` when it is initialised, else the CUDA devices, else 1."""
    return torch_devices(torch)


def record_model(rec: Recorder, model: Any, **sizes: Any) -> None:
    """Record ``model``'s parameter count (``sum(p.numel())``) and :func:`device` on
    ``rec``, once, before training; ``sizes``: ``layers=``, ``hidden=``, ``seq_len=`` for
    the attention term of the FLOPs count. Never raises."""
    record_model_once(rec, _torch_params(model), device(), **sizes)


def _replicas(loader: Any) -> int:
    """The data-parallel replicas of ``loader``: its ``DistributedSampler``'s, else 1."""
    try:
        sampler = getattr(loader, "sampler", None)
        utils = torch.utils.data
        if isinstance(sampler, utils.distributed.DistributedSampler):
            return max(int(sampler.num_replicas), 1)
    except Exception:
        pass
    return 1


class TimedDataLoader(Generic[T]):
    """Wraps a ``DataLoader`` (or any iterable of batches): every batch fetch is timed,
    and :meth:`step` records a step with the samples and tokens of its batch.

    Iterating gives the loader's batches; ``len()`` and every other attribute
    (``dataset``, ``sampler``, ``batch_size``...) are the wrapped loader's.
    ``replicas``: the data-parallel replicas the counts are multiplied by (default: the
    loader's ``DistributedSampler``'s ``num_replicas``, else 1).
    """

    def __init__(
        self,
        loader: Iterable[T],
        rec: Recorder,
        *,
        blocking: bool = True,
        replicas: int | None = None,
    ) -> None:
        self.loader = loader
        self.recorder = rec
        self.blocking = blocking
        self.replicas = _replicas(loader) if replicas is None else replicas
        self._batches: TimedBatches[T] | None = None

    def __iter__(self) -> Iterator[T]:
        self._batches = timed_batches(
            self.loader, self.recorder, blocking=self.blocking, replicas=self.replicas
        )
        return self._batches

    def step(self, step: int) -> WorkStep:
        """``with loader.step(n):`` step ``n`` with the work of the batch fetched last
        (by the loader's newest iteration) and of those fetched inside it."""
        if self._batches is None:
            self._batches = timed_batches((), self.recorder, replicas=self.replicas)
        return self._batches.step(step)

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def _dcp() -> Any:
    return import_optional("torch.distributed.checkpoint", "torch")


def dcp_save(rec: Recorder, state_dict: Any, step: int, **kwargs: Any) -> Any:
    """``torch.distributed.checkpoint.save(state_dict, **kwargs)`` as a ``checkpoint_save`` of
    ``step`` (a synchronous save is committed when it returns: ``checkpoint_committed``)."""
    with rec.checkpoint_save(step):
        result = _dcp().save(state_dict, **kwargs)
    rec.record_checkpoint_committed(step)
    return result


def dcp_async_save(rec: Recorder, state_dict: Any, step: int, **kwargs: Any) -> Any:
    """``torch.distributed.checkpoint.async_save``: the call (staging the state to
    memory, which training waits for) is ``checkpoint_save``; ``checkpoint_committed``
    is recorded when the background write completes successfully.

    Returns what ``async_save`` returns (a ``Future``, or an ``AsyncSaveResponse``
    whose ``upload_completion`` is the write).
    """
    with rec.checkpoint_save(step):
        result = _dcp().async_save(state_dict, **kwargs)
    upload = getattr(result, "upload_completion", result)
    if isinstance(upload, Future) or hasattr(upload, "add_done_callback"):

        def committed(done: Any) -> None:
            if done.exception() is None:  # a failed write commits nothing
                rec.record_checkpoint_committed(step)

        upload.add_done_callback(committed)
    return result


def dcp_load(rec: Recorder, state_dict: Any, step: int, **kwargs: Any) -> None:
    """``torch.distributed.checkpoint.load(state_dict, **kwargs)`` as a
    ``checkpoint_restore`` of ``step`` (the step the checkpoint was saved at)."""
    with rec.checkpoint_restore(step):
        _dcp().load(state_dict, **kwargs)
