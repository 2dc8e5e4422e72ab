"""``torch.distributed`` hooks: process-group set-up is ``distributed_init``, and the
process group's destruction begins the ``teardown``.

Installed (once per process) by importing any torch-based integration
(``badput.integrations.torch``, ``.lightning``, ``.transformers``). Each wrapper calls the
original function with the same arguments and returns what it returns; the recording
around it never raises. Wrapped: ``init_process_group`` and ``new_group`` (rendezvous,
building the communicators), and ``destroy_process_group``. Frameworks that call them
through the module (Lightning's DDP strategy, Accelerate, torchrun scripts) are timed;
a name imported before the hook was installed (``from torch.distributed import
init_process_group``) calls the original, untimed.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

from badput.recorder import (
    LIVE_RECORDERS,
    begin_teardown,
    record_end,
    record_interval,
    record_start,
)
from badput.runtime import lifecycle as _lifecycle

__all__ = ["install_distributed_hooks", "time_calls"]

_MARK = "__badput_hook__"
_TIMED = ("init_process_group", "new_group")


def install_distributed_hooks(dist: Any) -> bool:
    """Wrap the set-up and teardown functions of module ``dist`` (``torch.distributed``);
    True if they are (now or already) wrapped, False when ``dist`` lacks them."""
    if not hasattr(dist, "init_process_group"):
        return False
    for name in _TIMED:
        original = getattr(dist, name, None)
        if original is not None and not getattr(original, _MARK, False):
            setattr(dist, name, _timed(original))
    original = getattr(dist, "destroy_process_group", None)
    if original is not None and not getattr(original, _MARK, False):
        dist.destroy_process_group = _ending(original)
    return True


def _timed(original: Any, base: str = "distributed_init") -> Any:
    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        # Live recorders get the start and the end as they happen (their lines stay in
        # time order); without one, the call is timed and kept for the first recorder.
        recorders = record_start(LIVE_RECORDERS, base)
        start = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            if recorders:
                record_end(recorders, base)
            else:
                record_interval(LIVE_RECORDERS, base, start, time.time())

    setattr(timed, _MARK, True)
    return timed


def _ending(original: Any) -> Any:
    @functools.wraps(original)
    def ending(*args: Any, **kwargs: Any) -> Any:
        for rec in _lifecycle.live(LIVE_RECORDERS):
            begin_teardown(rec)
        return original(*args, **kwargs)

    setattr(ending, _MARK, True)
    return ending


def time_calls(owner: Any, name: str, base: str, *, classmethod_: bool = False) -> None:
    """Wrap method ``name`` of class ``owner`` (once) so each call is interval ``base``,
    recorded by the live recorders or kept for the first one (nested calls: the outermost)."""
    original = owner.__dict__.get(name)
    if original is None or getattr(original, _MARK, False):
        return
    func = original.__func__ if classmethod_ else original
    depth = threading.local()

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        level = getattr(depth, "n", 0)
        if level:  # a subclass's call of the base one: timed once, by the outermost
            return func(*args, **kwargs)
        depth.n = 1
        recorders = record_start(LIVE_RECORDERS, base)
        start = time.time()
        try:
            return func(*args, **kwargs)
        finally:
            depth.n = 0
            if recorders:
                record_end(recorders, base)
            else:
                record_interval(LIVE_RECORDERS, base, start, time.time())

    setattr(timed, _MARK, True)
    wrapped: Any = classmethod(timed) if classmethod_ else timed
    if classmethod_:
        setattr(wrapped, _MARK, True)
    setattr(owner, name, wrapped)
