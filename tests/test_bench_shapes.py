"""``bench/bench_shapes.py --command`` times the command a user runs: the whole ``badput report
--json`` of a shape in a fresh process, and fails loudly when the command does. (The figures
are the bench's; here only that it measures that command.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_shapes import measure_command, write_steps


def test_the_whole_command_is_measured_with_its_peak(tmp_path: Path) -> None:
    write_steps(tmp_path, "d", 200, per_attempt=True)
    got = measure_command(tmp_path, "d")
    assert got["wall"] > 0
    assert 20 < got["rss_mb"] < 2000  # a Python process with numpy: tens of MB


def test_a_command_that_fails_stops_the_bench(tmp_path: Path) -> None:
    write_steps(tmp_path, "d", 20, per_attempt=True)
    with pytest.raises(SystemExit, match="badput report failed"):
        measure_command(tmp_path, "no-such-job")
