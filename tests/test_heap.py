"""Freed heap memory handed back after a large pass (badput.runtime.heap): it is handed back
(glibc), nothing happens where the C library cannot, and the engine does it only after
a large per-rank derivation or a parallel read's merge, never on a small report. Large
blocks mapped on their own (what `badput report` asks for), and the per-rank pass of
large streams run beside the partition."""

from __future__ import annotations

import contextlib
import ctypes
import platform
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner

from badput import analysis
from badput.cli import main
from badput.engine import _accountant, cpu_time_with_helpers
from badput.monitor import Monitor
from badput.report import to_json
from badput.runtime import heap as _heap

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
        from badput.runtime import heap as _heap
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
    monkeypatch.setattr(_heap, "_libc", None)
    _heap.give_back()
    assert _heap._looked  # it looked once, and will not again
    assert _heap._malloc_trim() is None
    with _heap.large_blocks_mapped() as mapped:
        assert mapped is False
    assert loaded == []  # no C library opened off Linux


class _BrokenLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...]]] = []

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", (pad,)))
        raise OSError("no")

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", (param, value)))
        raise OSError("no")


def test_a_failing_c_library_never_fails_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = _BrokenLibc()
    monkeypatch.setattr(_heap, "_looked", True)
    monkeypatch.setattr(_heap, "_libc", libc)
    _heap.give_back()  # raises nothing
    with _heap.large_blocks_mapped() as mapped:  # nor this
        assert mapped is False
    # each was called: the trim with no padding kept, the threshold at 1 MiB (and, as it
    # could not be set, not set back)
    assert libc.calls == [("malloc_trim", (0,)), ("mallopt", (-3, 1 << 20))]


class _Libc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_large_blocks_are_mapped_inside_the_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = _Libc()
    monkeypatch.setattr(_heap, "_looked", True)
    monkeypatch.setattr(_heap, "_libc", libc)
    with pytest.raises(RuntimeError), _heap.large_blocks_mapped() as mapped:
        assert mapped is True
        assert libc.calls == [(-3, 1 << 20)]
        raise RuntimeError("the report failed")
    # set back, whatever happened: blocks up to 32 MiB from the heap, its top kept to 64 MiB
    assert libc.calls == [(-3, 1 << 20), (-3, 32 << 20), (-1, 64 << 20)]


@glibc_only
def test_large_blocks_mapped_on_their_own_are_unmapped_when_freed() -> None:
    """Once a large block was freed, glibc serves blocks that size from the heap, where
    freed ones stay resident; inside large_blocks_mapped() each is unmapped when freed, and
    after it they come from the heap again."""
    script = textwrap.dedent(
        """
        import contextlib, sys
        from badput.runtime import heap as _heap
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 >> 20
        def churn():
            blocks = [bytearray(b"x" * (2 << 20)) for _ in range(100)]
            kept = blocks[::8]
            before = rss()
            del blocks
            return before - rss()
        first = bytearray(4 << 20)
        del first  # a large block freed: glibc raises its own threshold to its size (4 MB)
        mapped = sys.argv[1] == "mapped"
        with _heap.large_blocks_mapped() if mapped else contextlib.nullcontext(True) as done:
            assert done
            inside = churn()
        print(inside, churn())
        """
    )

    def freed(how: str) -> tuple[int, int]:
        out = subprocess.run(
            [sys.executable, "-c", script, how], check=True, capture_output=True, text=True
        ).stdout
        inside, after = map(int, out.split())
        return inside, after

    inside, after = freed("mapped")
    assert inside >= 150  # of the 175 MB freed
    assert after <= 50  # set back: from the heap again, holes kept resident
    inside, after = freed("default")
    assert inside <= 50 and after <= 50


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


def test_a_large_rank_pass_runs_beside_the_partition_and_changes_no_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-rank pass of a few large streams runs in a thread beside the partition:
    the report is the one made with the passes one after the other."""
    write_steps(tmp_path, "j", 300, per_attempt=True)
    besides: list[int] = []
    original = _accountant._beside

    def counted(side: Any, main: Any) -> Any:
        besides.append(1)
        return original(side, main)

    monkeypatch.setattr(_accountant, "_beside", counted)

    def report(beside: bool) -> str:
        limit = 0 if beside else 10**12
        monkeypatch.setattr(_accountant, "BESIDE_MIN_VALUES", limit)
        monkeypatch.setattr(_accountant, "BESIDE_MIN_VALUES_PER_STREAM", limit)
        live = analysis.LiveJob(tmp_path, "j", parallel=False)
        live.update()
        return to_json(live.report())

    assert report(beside=True) == report(beside=False)
    assert besides == [1]  # taken once, by the first report only


def test_a_failure_beside_is_raised_after_both_are_done() -> None:
    done: list[str] = []

    def side() -> None:
        raise ValueError("side")

    def main() -> Any:
        done.append("main")
        return "report"

    with pytest.raises(ValueError, match="side"):
        _accountant._beside(side, main)
    assert done == ["main"]  # the partition ran to its end first

    def main_fails() -> Any:
        raise KeyError("main")

    with pytest.raises(KeyError):  # the partition's own failure comes first
        _accountant._beside(side, main_fails)


def test_badput_report_maps_large_blocks_for_its_report_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command owns its process: its report, not its read nor what follows (their
    blocks of a megabyte or two are quicker left to the heap)."""
    write_steps(tmp_path, "j", 50, per_attempt=True)
    order: list[str] = []
    update, report = analysis.LiveJob.update, analysis.LiveJob.report

    def updated(self: analysis.LiveJob) -> int:
        order.append("read")
        return update(self)

    def reported(self: analysis.LiveJob, **kwargs: Any) -> Any:
        order.append("report")
        return report(self, **kwargs)

    monkeypatch.setattr(analysis.LiveJob, "update", updated)
    monkeypatch.setattr(analysis.LiveJob, "report", reported)

    @contextlib.contextmanager
    def mapped() -> Iterator[bool]:
        order.append("map")
        yield True
        order.append("heap")

    monkeypatch.setattr(_heap, "large_blocks_mapped", mapped)
    result = CliRunner().invoke(main, ["report", str(tmp_path), "--job", "j", "--json"])
    assert result.exit_code == 0, result.output
    assert order == ["read", "map", "report", "heap"]


def test_an_interrupted_wait_for_the_pass_beside_waits_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while the partition waits for the per-rank pass: the pass ends before the
    interruption is raised (a query that follows must not run beside it)."""
    joins: list[str] = []
    real_join = threading.Thread.join

    def join(self: threading.Thread, timeout: float | None = None) -> None:
        if not joins:
            joins.append("interrupted")
            raise KeyboardInterrupt
        joins.append("waited")
        real_join(self, timeout)

    monkeypatch.setattr(threading.Thread, "join", join)
    ended = threading.Event()

    def side() -> None:
        time.sleep(0.05)
        ended.set()

    with pytest.raises(KeyboardInterrupt):
        _accountant._beside(side, lambda: "report")  # type: ignore[arg-type,return-value]
    assert joins == ["interrupted", "waited"]
    assert ended.is_set()  # the pass had ended when the interruption came out


def test_the_cpu_time_of_a_pass_beside_is_the_callers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU time of the thread beside is added to what the calling thread's queries
    cost (``cpu_time_with_helpers``), which a monitor counts as its cycles' CPU time: the
    per-rank pass of a cycle that runs beside is not left out of the monitor's figure."""

    def side() -> None:
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.05:
            pass

    before, mine = cpu_time_with_helpers(), time.thread_time()
    _accountant._beside(side, lambda: cast(Any, "report"))
    assert time.thread_time() - mine < 0.05  # (this thread only waited)
    assert cpu_time_with_helpers() - before >= 0.05
    # and a monitor's cycles count it
    write_steps(tmp_path, "j", 300, per_attempt=True)
    monkeypatch.setattr(_accountant, "BESIDE_MIN_VALUES", 0)
    monkeypatch.setattr(_accountant, "BESIDE_MIN_VALUES_PER_STREAM", 0)
    real = _accountant._beside
    spent: list[float] = []

    def slow(side_: Any, main: Any) -> Any:
        def slower() -> object:
            side()
            spent.append(0.05)
            return side_()

        return real(slower, main)

    monkeypatch.setattr(_accountant, "_beside", slow)
    mon = Monitor("j", tmp_path, [], include_step_deviation=True)
    mon.run_once()
    assert spent
    assert mon.cpu_seconds >= 0.05
