"""The query cache's ideal step time estimate (engine/_cache.py): what it carries over from
one query to the next is keyed by the sealed parts themselves, so that a part made later
is never taken for one it was computed over, however the memory is reused."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from badput.engine._cache import IdealCache
from badput.engine._ideal import best_sustained_step_time


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
