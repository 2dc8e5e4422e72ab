"""Plain PyTorch: timed batch fetches and timed ``torch.distributed.checkpoint``.

::

    from badput.integrations.torch import TimedDataLoader, dcp_save, dcp_async_save, dcp_load

    loader = TimedDataLoader(DataLoader(dataset, batch_size=32), rec)   # one line
    for batch in loader: ...                  # each fetch is a data_loading interval
    dcp_load(rec, state, step, checkpoint_id=path)         # checkpoint_restore
    dcp_save(rec, state, step, checkpoint_id=path)         # checkpoint_save
    future = dcp_async_save(rec, state, step, checkpoint_id=path)
    # blocking part (staging) = checkpoint_save; checkpoint_committed when the upload completes

Nothing here needs ``torch.distributed`` to be initialised; each call forwards its
keyword arguments to the ``torch.distributed.checkpoint`` function of the same name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from badput.integrations._common import timed_batches
from badput.integrations._distributed import install_distributed_hooks
from badput.recorder import Recorder
from badput.runtime.optional import import_optional

torch = import_optional("torch", "torch")
# process-group set-up is distributed_init; its destruction begins the teardown
install_distributed_hooks(import_optional("torch.distributed", "torch"))

__all__ = ["TimedDataLoader", "dcp_async_save", "dcp_load", "dcp_save", "timed_batches"]

T = TypeVar("T")


class TimedDataLoader(Generic[T]):
    """Wraps a ``DataLoader`` (or any iterable of batches): every batch fetch is timed.

    Iterating gives the loader's batches; ``len()`` and every other attribute
    (``dataset``, ``sampler``, ``batch_size``...) are the wrapped loader's.
    """

    def __init__(self, loader: Iterable[T], rec: Recorder, *, blocking: bool = True) -> None:
        self.loader = loader
        self.recorder = rec
        self.blocking = blocking

    def __iter__(self) -> Iterator[T]:
        return timed_batches(self.loader, self.recorder, blocking=self.blocking)

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
