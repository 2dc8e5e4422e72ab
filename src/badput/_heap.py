"""Freed heap memory handed back to the operating system after a large temporary pass.

glibc keeps what a process frees for its own reuse. After a pass that made and dropped
hundreds of megabytes of columns (the per-rank derivation of a million-step stream, the
merge of a parallel read's parts), that memory stays resident, and what the next phase
allocates does not all fit in its holes: the peak of a cold report of a million steps with
a data load each was 15-20 MB higher than with the memory handed back (docs/performance.md).
``malloc_trim(0)`` hands back the free pages (a few milliseconds); called only after such a
pass, never per monitor cycle. Where the C library has no ``malloc_trim`` (musl, macOS,
Windows) this does nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Final

__all__ = ["TRIM_AFTER_VALUES", "give_back"]

#: Values (8 bytes each, several temporary columns of them) a pass goes through before the
#: memory it freed is handed back: a million make temporaries of tens of megabytes.
TRIM_AFTER_VALUES: Final = 1_000_000

_trim: Callable[[int], int] | None = None
_looked = False


def _malloc_trim() -> Callable[[int], int] | None:
    global _trim, _looked
    if not _looked:
        _looked = True
        if sys.platform.startswith("linux"):
            try:
                import ctypes  # noqa: PLC0415 (only a large pass needs it: `import badput` stays light)

                _trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
            except (OSError, AttributeError):  # no C library to load: nothing to hand back
                _trim = None
    return _trim


def give_back() -> None:
    """Hand the heap's free pages back to the operating system (glibc); else nothing."""
    trim = _malloc_trim()
    if trim is not None:
        with suppress(Exception):  # memory housekeeping never fails a report
            trim(0)
