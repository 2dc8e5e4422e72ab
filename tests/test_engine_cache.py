"""The query cache's ideal step time estimate (engine/_cache.py): what it carries over from
one query to the next is keyed by the sealed parts themselves, so that a part made later
is never taken for one it was computed over, however the memory is reused."""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine import _ideal
from badput.engine._cache import IdealCache
from badput.engine._ideal import best_sustained_step_time, min_block_median


class Part:
    """Stands for a sealed attempt's rows (only its identity matters to the cache)."""


def test_a_different_part_of_the_same_length_is_estimated_afresh() -> None:
    rng = np.random.default_rng(7)
    slow, fast = rng.uniform(1.0, 2.0, 3_000), rng.uniform(0.5, 0.6, 3_000)
    cache = IdealCache()
    assert cache.estimate([(Part(), slow)], np.zeros(0)) == best_sustained_step_time(slow)
    # Another part with as many values: not an extension of the first, whatever its id.
    assert cache.estimate([(Part(), fast)], np.zeros(0)) == best_sustained_step_time(fast)


def test_values_appended_to_the_same_part_are_carried_over() -> None:
    rng = np.random.default_rng(8)
    values = rng.uniform(1.0, 2.0, 5_000)
    part = Part()
    cache = IdealCache()
    cache.estimate([(part, values[:3_000])], np.zeros(0))
    got = cache.estimate([(part, values)], np.zeros(0))
    assert got == best_sustained_step_time(values)


def test_the_cache_keeps_the_parts_it_was_computed_over_alive() -> None:
    # Keyed by id() instead, a part freed after a query could be followed by a new one at
    # the same address, of the same length, taken for it: a stale estimate.
    part = Part()
    alive = weakref.ref(part)
    cache = IdealCache()
    cache.estimate([(part, np.full(2_000, 1.5))], np.zeros(0))
    del part
    gc.collect()
    assert alive() is not None
    cache.estimate([(Part(), np.full(2_000, 1.5))], np.zeros(0))
    gc.collect()
    assert alive() is None  # let go once the cache moved on


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.floats(0.01, 100.0), min_size=0, max_size=1_200),
    st.sampled_from([5, 7, 100]),
    st.sampled_from([1, 3, 2048]),
)
def test_block_medians_taken_a_few_blocks_at_a_time_are_those_of_every_block(
    values: list[float], w: int, at_once: int
) -> None:
    """min_block_median takes its blocks' medians a few thousand at a time (a million clean
    steps are not copied whole): the smallest of them is the smallest of all."""
    v = np.array(values, np.float64)
    full = (len(values) // w) * w
    every = [float(np.median(v[i : i + w])) for i in range(0, full, w)]
    saved, _ideal._BLOCKS_AT_ONCE = _ideal._BLOCKS_AT_ONCE, at_once
    try:
        assert min_block_median(v, w) == min(every, default=math.inf)
    finally:
        _ideal._BLOCKS_AT_ONCE = saved


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 900), min_size=1, max_size=5),
    st.integers(0, 300),
    st.integers(0, 2**32 - 1),
)
def test_the_estimate_of_sealed_parts_grown_query_by_query_is_the_cold_one(
    grown: list[int], n_tail: int, seed: int
) -> None:
    """One part growing by ``grown`` values query after query (a running attempt's sealed
    rows, read where they are, not copied; the values after the last complete block carried
    to the next query): each estimate is that of the whole sequence."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.5, 2.0, sum(grown))
    tail = rng.uniform(0.5, 2.0, n_tail)
    part, cache, n = Part(), IdealCache(), 0
    for more in grown:
        n += more
        cold = best_sustained_step_time(np.concatenate((values[:n], tail)))
        assert cache.estimate([(part, values[:n])], tail) == cold


def test_a_nan_median_in_any_group_of_blocks_is_the_result_as_in_one_min() -> None:
    """(Clean step times are finite; should one not be, the result is numpy's min over all
    the medians, whichever group of blocks holds it.)"""
    for at in (0, 250, 999):
        v = np.full(1_000, 1.0)
        v[at] = np.nan
        saved, _ideal._BLOCKS_AT_ONCE = _ideal._BLOCKS_AT_ONCE, 1
        try:
            got = min_block_median(v, 100)
        finally:
            _ideal._BLOCKS_AT_ONCE = saved
        assert math.isnan(got)
        assert math.isnan(float(np.median(v.reshape(-1, 100), axis=1).min()))
