"""Freed heap memory handed back after a large pass (badput._heap): it is handed back
(glibc), nothing happens where the C library cannot, and the engine does it only after
a large per-rank derivation or a parallel read's merge, never on a small report."""

from __future__ import annotations

import ctypes
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from badput import _heap, analysis
from badput.engine import _accountant

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_shapes import write_steps

glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's (nothing to hand back elsewhere)",
)


@glibc_only
def test_freed_heap_memory_is_handed_back() -> None:
    assert _heap._malloc_trim() is not None  # glibc has it: found, not silently skipped
    # 200 MB in 64 KB blocks (below glibc's mmap threshold: on the heap), of which one in
    # eight is kept: the free ones are holes glibc keeps resident until handed back.
    script = textwrap.dedent(
        """
        from badput import _heap
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 >> 20
        blocks = [bytearray(b"x" * (64 << 10)) for _ in range(3200)]
        kept = blocks[::8]
        del blocks
        before = rss()
        _heap.give_back()
        print(before, rss())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    before, after = map(int, out.split())
    assert before - after >= 100, (before, after)  # of the 175 MB freed


def test_off_linux_nothing_is_looked_up_or_called(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[object] = []
    monkeypatch.setattr(ctypes, "CDLL", lambda *args: loaded.append(args))
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(_heap, "_looked", False)
    monkeypatch.setattr(_heap, "_trim", None)
    _heap.give_back()
    assert _heap._looked  # it looked once, and will not again
    assert _heap._malloc_trim() is None
    assert loaded == []  # no C library opened off Linux


def test_a_failing_trim_never_fails_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def broken(pad: int) -> int:
        calls.append(pad)
        raise OSError("no")

    monkeypatch.setattr(_heap, "_looked", True)
    monkeypatch.setattr(_heap, "_trim", broken)
    _heap.give_back()  # raises nothing
    assert calls == [0]  # and it did call the trim, with no padding kept


def _count_give_backs(monkeypatch: pytest.MonkeyPatch, module: object) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(module, "give_back", lambda: calls.append(1))
    return calls


def test_a_report_hands_back_only_after_a_large_derivation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_steps(tmp_path, "j", 200, per_attempt=True)  # 200 steps, 200 loads: 800 values
    calls = _count_give_backs(monkeypatch, _accountant)
    live = analysis.LiveJob(tmp_path, "j", parallel=False)
    live.update()
    live.report()
    assert calls == []  # a small pass: nothing handed back (a monitor's cycle)
    monkeypatch.setattr(_accountant, "TRIM_AFTER_VALUES", 300)
    live = analysis.LiveJob(tmp_path, "j", parallel=False)
    live.update()
    live.report(window=(0.0, 2e9))
    assert calls == []  # a windowed report derives nothing
    live.report()
    assert calls == [1]  # the first cumulative report derived every value
    live.report()
    assert calls == [1]  # nothing new to derive
