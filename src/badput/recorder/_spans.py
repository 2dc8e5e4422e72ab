"""The recorder's context managers (``with rec.step(n):``): the table of every span, the
span that records its start and end, and the one a null recorder hands out."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Final

__all__ = ["SPANS"]

#: Every context manager of a recorder: method name -> (start method, end method).
#: Both :class:`Recorder` and :class:`NullRecorder` build their spans from it.
SPANS: Final[dict[str, tuple[str, str]]] = {
    "step": ("record_step_start", "record_step_end"),
    "checkpoint_save": ("record_checkpoint_save_start", "record_checkpoint_save_end"),
    "checkpoint_restore": ("record_checkpoint_restore_start", "record_checkpoint_restore_end"),
    "data_loading": ("record_data_loading_start", "record_data_loading_end"),
    "custom": ("record_custom_start", "record_custom_end"),
    "accelerator_init": ("record_accelerator_init_start", "record_accelerator_init_end"),
    "training_prep": ("record_training_prep_start", "record_training_prep_end"),
    "compile": ("record_compile_start", "record_compile_end"),
    "elastic_wait": ("record_elastic_wait_start", "record_elastic_wait_end"),
    "elastic_reinit": ("record_elastic_reinit_start", "record_elastic_reinit_end"),
    "distributed_init": ("record_distributed_init_start", "record_distributed_init_end"),
    "model_build": ("record_model_build_start", "record_model_build_end"),
    "teardown": ("record_teardown_start", "record_teardown_end"),
}


class _Span:
    """``with rec.<span>(...):`` records the start, then the end even on error."""

    __slots__ = ("_args", "_end", "_start")

    def __init__(
        self, start: Callable[..., None], end: Callable[..., None], args: tuple[Any, ...]
    ) -> None:
        self._start = start
        self._end = end
        self._args = args

    def __enter__(self) -> None:
        self._start(*self._args)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end(*self._args)


class _NullSpan:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL_SPAN: Final = _NullSpan()
