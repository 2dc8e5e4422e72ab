"""How the ``badput`` command asks the C allocator to hand large blocks back at once.

glibc serves a large allocation from its own mapping, returned to the system when freed,
but raises that threshold to the size of each such block freed (up to 32 MiB): after a
read has made and dropped many slices' columns, later columns of a few MiB come from the
heap, which the merge of a shared read has left fragmented. The report's columns then
land on top of it: a cold read of the one-attempt data-load log (4 M events) peaked at
405-438 MB shared, 361 MB with the threshold fixed at 1 MiB, for about 0.1 s more of page
faults. A library must not change its host's allocator, so only the command does
(:func:`badput.cli.console_main`); the benchmarks call it to measure what the command does.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["LARGE_BLOCK", "return_large_blocks"]

#: Allocations of at least this many bytes get their own mapping.
LARGE_BLOCK = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


def return_large_blocks() -> bool:
    """Fix glibc's mapping threshold at :data:`LARGE_BLOCK` in this process (and the
    processes it forks); False where that is not glibc's to set (another C library or
    system)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):  # musl and others: not glibc's knob
            return False
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK))
    except (OSError, AttributeError):
        return False
