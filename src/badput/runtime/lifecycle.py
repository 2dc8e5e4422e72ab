"""One registry of process-lifecycle hooks: interpreter exit and fork.

The recorder, the monitor and the ml-goodput-measurement compat monitor each keep
live objects that must be finished at exit (flush, stop, close) and reset in a
forked child (threads and open files do not survive ``fork``). They register here
instead of each calling ``atexit.register`` / ``os.register_at_fork``, so that the
order is decided in one place: exit hooks run by ascending ``order`` (monitors'
final cycles before recorders are closed), fork hooks in registration order.

Every hook is called with exceptions suppressed: exit and fork must never fail
because of badput.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Final

__all__ = [
    "ORDER_MONITORS",
    "ORDER_RECORDERS",
    "live",
    "on_exit",
    "on_fork_child",
    "track",
    "untrack",
]

#: Exit order of the monitors' final cycles (first: they read the recorders' events).
ORDER_MONITORS: Final = 10
#: Exit order of the recorders' close (last).
ORDER_RECORDERS: Final = 90

_groups: dict[str, weakref.WeakSet[Any]] = {}
_exit_hooks: list[tuple[int, Callable[[], None]]] = []
_fork_hooks: list[Callable[[], None]] = []
_lock = threading.Lock()


def track(group: str, obj: object) -> None:
    """Remember ``obj`` (weakly) as a live member of ``group``."""
    with _lock:
        _groups.setdefault(group, weakref.WeakSet()).add(obj)


def untrack(group: str, obj: object) -> None:
    with _lock:
        members = _groups.get(group)
        if members is not None:
            members.discard(obj)


def live(group: str) -> list[Any]:
    """The live members of ``group`` (a snapshot)."""
    with _lock:
        return list(_groups.get(group, ()))


def on_exit(hook: Callable[[], None], order: int) -> None:
    """Run ``hook`` at interpreter exit, after the hooks of lower ``order``."""
    with _lock:
        _exit_hooks.append((order, hook))


def on_fork_child(hook: Callable[[], None]) -> None:
    """Run ``hook`` in the child process right after ``os.fork()``."""
    with _lock:
        _fork_hooks.append(hook)


def _run_exit_hooks() -> None:
    for _order, hook in sorted(_exit_hooks, key=lambda item: item[0]):
        with suppress(Exception):
            hook()


def _run_fork_hooks() -> None:
    global _lock
    _lock = threading.Lock()  # the parent's lock may have been held by another thread
    for hook in list(_fork_hooks):
        with suppress(Exception):
            hook()


atexit.register(_run_exit_hooks)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_fork_hooks)
