"""Fuzzing the read path: no mutated log stops a report, every bad line is named (§9.11).

Hypothesis drives the mutations of tests/_log_fuzz.py (byte flips, truncation, wrong
types, huge and non-finite numbers, deep nesting, bad encodings, NUL tails, long
lines, FIFOs) over real logs. The longer run (10,000+ cases, with hang and memory
limits) is bench/fuzz_read.py; its figures are in docs/performance.md.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _log_fuzz import MUTATORS, SEEDS, Case, check_case, make_case


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.randoms(use_true_random=False))
def test_no_mutated_log_breaks_the_report(rnd: random.Random) -> None:
    case = make_case(rnd)
    with tempfile.TemporaryDirectory() as tmp:
        assert check_case(case, Path(tmp)) == [], case.mutations


@pytest.mark.parametrize("name", sorted(MUTATORS))
def test_each_mutation_alone(name: str, tmp_path: Path) -> None:
    """Every kind of damage, on every seed log, a few times each (deterministic)."""
    rnd = random.Random(name)
    for k, seed in enumerate(SEEDS):
        for i in range(3):
            case = Case({"0/h-0-1.jsonl": MUTATORS[name](seed, rnd)}, fifo=i == 0 and k == 0)
            root = tmp_path / f"{k}-{i}"
            assert check_case(case, root) == [], (name, k, i)


def test_the_fuzzer_finds_bad_lines(tmp_path: Path) -> None:
    """The checker is not vacuous: damaged logs do produce the diagnostics it checks."""
    rnd = random.Random(7)
    seed = SEEDS[0]
    damaged = MUTATORS["deep_nesting"](seed, rnd)
    damaged = MUTATORS["bad_encoding"](damaged, rnd)
    damaged = damaged + b'{"ts":17'
    case = Case({"0/h-0-1.jsonl": damaged})
    assert check_case(case, tmp_path) == []
    from badput.analysis import analyze

    codes = {d.code for d in analyze(tmp_path, "fuzzed").diagnostics}
    assert {"malformed_line", "torn_line"} <= codes
