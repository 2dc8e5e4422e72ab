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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Final

__all__ = [
    "HEAP_BLOCK_BYTES",
    "LARGE_BLOCK_BYTES",
    "TRIM_AFTER_VALUES",
    "give_back",
    "large_blocks_mapped",
]

#: Values (8 bytes each, several temporary columns of them) a pass goes through before the
#: memory it freed is handed back: a million make temporaries of tens of megabytes.
TRIM_AFTER_VALUES: Final = 1_000_000

#: Blocks of at least this many bytes are mapped on their own inside
#: :func:`large_blocks_mapped` (a column of 131,072 values and more), ...
LARGE_BLOCK_BYTES: Final = 1 << 20
#: ... and blocks up to this many come from the heap after it (glibc's own ceiling for its
#: moving threshold on 64-bit systems).
HEAP_BLOCK_BYTES: Final = 32 << 20
_M_MMAP_THRESHOLD: Final = -3  # glibc's mallopt() parameters
_M_TRIM_THRESHOLD: Final = -1

_libc: Any = None
_looked = False


def _c_library() -> Any:
    """The C library (glibc on Linux), or None where there is none to call."""
    global _libc, _looked
    if not _looked:
        _looked = True
        if sys.platform.startswith("linux"):
            try:
                import ctypes  # noqa: PLC0415 (only a large pass needs it: `import badput` stays light)

                _libc = ctypes.CDLL(None)
            except OSError:  # no C library to load: nothing to hand back
                _libc = None
    return _libc


def _malloc_trim() -> Callable[[int], int] | None:
    trim: Callable[[int], int] | None = getattr(_c_library(), "malloc_trim", None)
    return trim


def _mallopt(param: int, value: int) -> bool:
    """glibc's ``mallopt(param, value)``; False where that cannot be set."""
    mallopt = getattr(_c_library(), "mallopt", None)
    if mallopt is None:
        return False
    with suppress(Exception):  # memory housekeeping never fails a command
        return bool(mallopt(param, value))
    return False


@contextmanager
def large_blocks_mapped() -> Iterator[bool]:
    """Inside the block, glibc maps every block of :data:`LARGE_BLOCK_BYTES` or more on its
    own and unmaps it when it is freed (``mallopt(M_MMAP_THRESHOLD)``); after it, blocks
    up to :data:`HEAP_BLOCK_BYTES` come from the heap again. Yields whether the setting
    could be made (False off glibc: then nothing changes).

    By default the threshold rises to 32 MB once a large block is freed, after which the
    columns a report makes and drops (8 to 32 MB each for a million steps) come from the
    heap and stay resident; and a thread allocates from an arena of its own. A cold report
    that runs its per-rank pass in a thread beside the partition peaked 60-80 MB higher
    than inside this block (docs/performance.md). ``badput report`` makes its report here,
    after its read: its read and what follows the report (the windowed reports of an HTML
    page) make and drop blocks of a megabyte or two by the thousand, which mapped afresh
    each took 0.5 s longer for the read of that log and 0.25 s for the page. glibc cannot
    be handed back its own moving thresholds once one was set: after the block they are
    set where the moving ones settle after large frees (blocks up to 32 MiB from the heap,
    its free top kept up to 64 MiB). Only for a process badput owns: a library call never
    changes its host process's allocator.
    """
    mapped = _mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES)
    try:
        yield mapped
    finally:
        if mapped:
            _mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_BYTES)
            # and the heap's free top kept up to twice that, as glibc's moving threshold
            # does: trimmed at its default 128 KB, each windowed query of a running job
            # grew the heap afresh (1.06 ms against 0.18 ms)
            _mallopt(_M_TRIM_THRESHOLD, 2 * HEAP_BLOCK_BYTES)


def give_back() -> None:
    """Hand the heap's free pages back to the operating system (glibc); else nothing."""
    trim = _malloc_trim()
    if trim is not None:
        with suppress(Exception):  # memory housekeeping never fails a report
            trim(0)
