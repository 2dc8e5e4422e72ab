"""The allocator setting of the badput command (badput._memory)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_blocks_are_their_own_mappings_once_set() -> None:
    """Freed after the setting, a 4 MiB block goes back to the system at once: the
    process's resident size drops by it (without the setting glibc may keep it)."""
    script = r"""
import ctypes, sys
from badput._memory import return_large_blocks
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1])
if not return_large_blocks():
    print("not glibc"); sys.exit(0)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 4 << 20
for _ in range(3):  # without the setting, the first free raises the threshold to 4 MiB
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    before = rss()
    libc.free(p)
    after = rss()
    assert before - after >= (size // 4096) * 0.9, (before, after)
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in {"ok", "not glibc"}


def test_the_library_leaves_the_allocator_alone() -> None:
    """Importing badput's analysis and its command does not set it: only running the
    command (console_main) does."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, badput.analysis, badput.cli; print('badput._memory' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "False"
