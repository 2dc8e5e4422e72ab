"""The work of a step as the integrations see it (samples, tokens), the model's size and
the devices: what program goodput is computed from (docs/program-goodput.md).

Nothing here imports a framework: each function reads what it is handed (a batch, a
module, the framework's own module) and returns ``None`` for what it cannot tell. None
of them raises: the training loop never sees an error of badput's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

from badput.recorder import Recorder

__all__ = [
    "StepWork",
    "TimedBatches",
    "WorkStep",
    "batch_samples",
    "batch_tokens",
    "jax_devices",
    "record_model_once",
    "torch_devices",
    "torch_params",
]

logger = logging.getLogger("badput")
T = TypeVar("T")

#: The key of a batch (a mapping) that holds token ids: Hugging Face's main input.
TOKEN_KEY = "input_ids"
_DEPTH = 4  # how far into nested tuples / mappings a batch's first array is looked for


def _leading(value: Any, depth: int = 0) -> int | None:
    shape = getattr(value, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) > 0 else None
        except Exception:
            return None
    if depth >= _DEPTH:
        return None
    if isinstance(value, Mapping):
        first = value.get(TOKEN_KEY) if TOKEN_KEY in value else next(iter(value.values()), None)
        return _leading(first, depth + 1)
    if isinstance(value, (list, tuple)) and value:
        return _leading(value[0], depth + 1)
    return None


def batch_samples(batch: Any) -> int | None:
    """The samples in ``batch``: the leading dimension of its array (of its
    ``input_ids``, else of its first array, in a mapping; of the first element of a
    tuple or list, as ``(inputs, labels)``), else None."""
    try:
        return _leading(batch)
    except Exception:
        return None


def batch_tokens(batch: Any, key: str = TOKEN_KEY) -> int | None:
    """The tokens in ``batch``: the number of elements of its ``input_ids`` (``key``)
    when it (or its first element: the inputs of ``(inputs, labels)``) is a mapping that
    holds them (padding included, as Hugging Face's
    ``include_num_input_tokens_seen="all"`` counts), else None."""
    try:
        for _ in range(_DEPTH):  # (inputs, labels): the inputs
            if not isinstance(batch, (list, tuple)) or not batch:
                break
            batch = batch[0]
        if isinstance(batch, Mapping) and key in batch:
            ids = batch[key]
            size = getattr(ids, "size", None)
            if isinstance(size, int):  # numpy, jax
                return size
            numel = getattr(ids, "numel", None)
            return int(numel()) if callable(numel) else None
    except Exception:
        return None
    return None


class StepWork:
    """The samples and tokens of one step's batches, as the integration sees them fetched.

    A batch seen outside a step (``add`` before ``begin``) is the next step's, replacing
    any seen before it (batches skipped past when resuming are not a step's work); once
    the step has begun (``begin``) the batches it fetches add up (its micro-batches);
    ``take`` ends it. ``replicas``: the data-parallel replicas that each fetch a batch of
    their own, so that the counts taken are the whole job's (docs/program-goodput.md)."""

    __slots__ = ("_open", "_pending", "replicas", "samples", "tokens")

    def __init__(self, replicas: int = 1) -> None:
        self.replicas = max(int(replicas), 1)
        self.samples: int | None = None
        self.tokens: int | None = None
        self._pending: tuple[int | None, int | None] = (None, None)
        self._open = False

    def add(self, samples: int | None, tokens: int | None) -> None:
        if not self._open:
            self._pending = (samples, tokens)
            return
        if samples is not None:
            self.samples = (self.samples or 0) + samples
        if tokens is not None:
            self.tokens = (self.tokens or 0) + tokens

    def add_batch(self, batch: Any) -> None:
        self.add(batch_samples(batch), batch_tokens(batch))

    def begin(self) -> None:
        """A step begins: its work is the batch seen last, and those it fetches."""
        (self.samples, self.tokens), self._pending = self._pending, (None, None)
        self._open = True

    def take(self) -> tuple[int | None, int | None]:
        """End the step: ``(samples, tokens)`` of the job in it (None: not known)."""
        n = self.replicas
        samples, tokens = self.samples, self.tokens
        self.samples = self.tokens = None
        self._open = False
        return (
            None if samples is None else samples * n,
            None if tokens is None else tokens * n,
        )


class WorkStep:
    """``with batches.step(n):`` records ``step_start`` and, when the body returns,
    ``step_end`` with the step's samples and tokens (a step that raised did none)."""

    __slots__ = ("_rec", "_step", "_work")

    def __init__(self, rec: Recorder, step: int, work: StepWork) -> None:
        self._rec = rec
        self._step = step
        self._work = work

    def __enter__(self) -> None:
        self._work.begin()
        self._rec.record_step_start(self._step)

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        samples, tokens = self._work.take()
        if exc_type is None and (samples is not None or tokens is not None):
            self._rec.record_step_end(self._step, samples=samples, tokens=tokens)
        else:
            self._rec.record_step_end(self._step)


class TimedBatches(Generic[T]):
    """Batches from ``batches``, each fetch (``next``) recorded as ``data_loading``, each
    batch's samples and tokens counted for :meth:`step` (:class:`StepWork`).

    ``blocking=False`` for a loader whose fetches overlap the step (a background
    prefetcher): they are then reported as overlapped time, outside the partition.
    """

    def __init__(
        self, batches: Iterable[T], rec: Recorder, *, blocking: bool = True, replicas: int = 1
    ) -> None:
        self._it = iter(batches)
        self.recorder = rec
        self.blocking = blocking
        self.work = StepWork(replicas)

    def __iter__(self) -> TimedBatches[T]:
        return self

    def __next__(self) -> T:
        rec = self.recorder
        rec.record_data_loading_start(self.blocking)
        try:
            batch = next(self._it)
        finally:
            rec.record_data_loading_end(self.blocking)
        self.work.add_batch(batch)
        return batch

    def step(self, step: int) -> WorkStep:
        """``with batches.step(n):`` a step whose work is the batch fetched last before
        it and those fetched inside it (``step_end`` carries the counts)."""
        return WorkStep(self.recorder, step, self.work)


def torch_params(module: Any) -> int | None:
    """``sum(p.numel() for p in module.parameters())``, else None."""
    try:
        return int(sum(p.numel() for p in module.parameters()))
    except Exception:
        return None


def torch_devices(torch: Any) -> tuple[str, int]:
    """``(device name, devices of the job)`` as PyTorch tells them: the name of CUDA
    device 0 (``torch.cuda.get_device_name``) when CUDA is available, else ``"cpu"``
    (which no table of peaks holds: MFU is then omitted, never invented); the devices
    are the processes of ``torch.distributed`` (one device each), else those CUDA sees
    when it is available, else 1."""
    name, count = "cpu", 1
    try:
        cuda = torch.cuda
        if cuda.is_available():
            name, count = str(cuda.get_device_name(0)), max(int(cuda.device_count()), 1)
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            count = int(dist.get_world_size())
    except Exception:
        logger.debug("badput: the torch device was not detected", exc_info=True)
    return name, count


def jax_devices(jax: Any) -> tuple[str, int]:
    """``(jax.devices()[0].device_kind, jax.device_count())``: the kind of the job's
    devices and their number over every process (``"cpu"`` on a CPU)."""
    try:
        return str(jax.devices()[0].device_kind), int(jax.device_count())
    except Exception:
        logger.debug("badput: the jax device was not detected", exc_info=True)
        return "unknown", 1


def record_model_once(
    rec: Recorder,
    params: int | None,
    device: tuple[str, int] | None,
    *,
    layers: int | None = None,
    hidden: int | None = None,
    seq_len: int | None = None,
) -> None:
    """``rec.record_model`` of what is known (the parameters, the device kind and count,
    the transformer's sizes); never raises."""
    try:
        name, count = device if device is not None else (None, None)
        rec.record_model(
            params=params or None,
            device=name,
            devices=count,
            layers=layers,
            hidden=hidden,
            seq_len=seq_len,
        )
    except Exception:
        logger.debug("badput: the model was not recorded", exc_info=True)
