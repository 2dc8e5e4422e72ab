"""Teardown begins at a crash: the uncaught exception's hook records ``teardown_start``.

Under ``badput run`` the launcher records the attempt's end once every process is gone,
so what follows a crash (the traceback, the interpreter's exit, the other ranks and
torchrun noticing) until then is teardown (docs/accounting.md). Without a launcher
nothing would record that end, and the hook records nothing.
"""

from __future__ import annotations

import sys
import threading
from contextlib import suppress
from types import TracebackType
from typing import Any

from badput.runtime import lifecycle as _lifecycle

__all__ = ["begin_teardown", "install_crash_hook"]

_installed: list[str] = []
_lock = threading.Lock()


def begin_teardown(rec: Any) -> None:
    """``rec.record_teardown_start()`` when a launcher will record the attempt's end."""
    if getattr(rec, "_defer_job_end", False):
        with suppress(Exception):  # never fail the exit or the crash report
            rec.record_teardown_start()


def install_crash_hook(group: str) -> None:
    """Chain a hook before ``sys.excepthook`` (once per process) that begins the teardown of
    every live recorder of ``group``; the previous hook still prints the traceback."""
    with _lock:
        if _installed:
            return
        _installed.append(group)
    previous = sys.excepthook

    def crashed(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        for rec in _lifecycle.live(group):
            begin_teardown(rec)
        previous(kind, value, tb)

    sys.excepthook = crashed
