"""Cyclic garbage collection paused while the engine builds or queries its state.

Ingesting a log and computing a report allocate many small containers that live as
long as the state (a job of 10,000 attempts holds several hundred thousand), none of
them in reference cycles. The collector cannot free any of them, yet each of its
full passes walks them all: on such a job it took a quarter to a third of the time.
The pause is scoped and re-entrant; whoever paused first resumes it, and a collector
already disabled by the caller stays disabled.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]

_lock = threading.Lock()
_depth = 0
_resume = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the cyclic collector disabled (reference counting goes on)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
