"""Ideal step time: the best sustained step time of the job (ACCOUNTING.md §1)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = [
    "FULL_BLOCK",
    "MIN_CLEAN_STEPS",
    "best_sustained_step_time",
    "block_size",
    "min_block_median",
]

MIN_CLEAN_STEPS = 5
FULL_BLOCK = 100  # W once there are 1,000 clean steps
_FULL_BLOCK_FROM = 1_000


def block_size(n_clean: int) -> int:
    """W = 100, or max(5, n // 10) when there are fewer than 1,000 clean steps."""
    if n_clean >= _FULL_BLOCK_FROM:
        return FULL_BLOCK
    return max(MIN_CLEAN_STEPS, n_clean // 10)


#: Blocks whose medians are taken in one call (``np.median`` partitions a copy of what it
#: is given: of a million clean steps, 8 MB at once instead of one block at a time).
_BLOCKS_AT_ONCE = 2048


def min_block_median(values: npt.NDArray[np.float64], w: int) -> float:
    """Smallest median over the complete blocks of ``w`` consecutive values (inf if none)."""
    full = (int(values.shape[0]) // w) * w
    best = math.inf
    step = w * _BLOCKS_AT_ONCE
    for lo in range(0, full, step):
        blocks = values[lo : min(lo + step, full)].reshape(-1, w)
        # np.minimum, as one min over all the medians: a NaN median stays (Python's min
        # would drop it after the first group)
        best = float(np.minimum(best, np.median(blocks, axis=1).min()))
    return best


def best_sustained_step_time(clean_step_times: npt.NDArray[np.float64]) -> float | None:
    """Smallest median over consecutive blocks of W clean step times (in time order).

    An incomplete last block is ignored; fewer than 5 clean steps give no estimate.
    """
    n = int(clean_step_times.shape[0])
    if n < MIN_CLEAN_STEPS:
        return None
    return min_block_median(clean_step_times, block_size(n))
