"""Cyclic garbage collection paused while badput builds or queries its state.

Reading a log and computing a report allocate many small containers that live as long
as the state (a job of 10,000 attempts holds several hundred thousand), none of them in
reference cycles. The collector cannot free any of them, yet each of its passes walks
them all: on such a job it took a quarter to a third of the time.

The pause is scoped and re-entrant; whoever paused first resumes it, and a collector
already disabled by the caller stays disabled. Pausing alone only defers the walk: the
objects made meanwhile are all still in the youngest generation, and the first
collection after the pause walks them (0.17 s after a report of 10,000 attempts). So
when the outermost pause ends having made many (:data:`AGE_AFTER`: a cold read, a first
report), what it made is moved to the oldest generation without a walk (``gc.freeze()``
then ``gc.unfreeze()``: two list splices). The same happens to the caller's young
objects; cyclic garbage among them is freed by the next full collection instead of a
young one. A small pause (a monitor's update inside a training job, every second) leaves
everything where it is, so the job's own young garbage is collected as usual. A caller
that froze objects itself (``gc.freeze()`` before a fork) keeps them frozen: then the
objects are left where they are.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from badput.runtime import lifecycle as _lifecycle

__all__ = ["gc_paused"]

#: Objects made (net) during a pause from which they are moved to the oldest generation.
AGE_AFTER = 100_000

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
            # 0 already: this process is a child forked during the pause, which ended it
            if _depth > 0:
                _depth -= 1
                if _depth == 0 and _resume:
                    _age_young()
                    gc.enable()


def _age_young() -> None:
    """Move every tracked object to the oldest generation without walking them, when the
    pause made many."""
    if gc.get_count()[0] >= AGE_AFTER and gc.get_freeze_count() == 0:  # never thaw theirs
        gc.freeze()
        gc.unfreeze()


def _after_fork_in_child() -> None:
    """A child forked while a pause was on would run with the collector off for good:
    the pause belongs to a thread of the parent (a monitor's read inside a training job
    whose data loader forks its workers), and nobody in the child ends it. So the child
    ends it at once, and gets a lock no parent thread can be holding."""
    global _lock, _depth
    _lock = threading.Lock()
    if _depth:
        _depth = 0
        if _resume:
            gc.enable()


_lifecycle.on_fork_child(_after_fork_in_child)
