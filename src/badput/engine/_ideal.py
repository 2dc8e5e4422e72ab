"""Ideal step time: the best sustained step time of the job (ACCOUNTING.md §1)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["MIN_CLEAN_STEPS", "best_sustained_step_time", "block_size"]

MIN_CLEAN_STEPS = 5
_FULL_BLOCK = 100
_FULL_BLOCK_FROM = 1_000


def block_size(n_clean: int) -> int:
    """W = 100, or max(5, n // 10) when there are fewer than 1,000 clean steps."""
    if n_clean >= _FULL_BLOCK_FROM:
        return _FULL_BLOCK
    return max(MIN_CLEAN_STEPS, n_clean // 10)


def best_sustained_step_time(clean_step_times: npt.NDArray[np.float64]) -> float | None:
    """Smallest median over consecutive blocks of W clean step times (in time order).

    An incomplete last block is ignored; fewer than 5 clean steps give no estimate.
    """
    n = int(clean_step_times.shape[0])
    if n < MIN_CLEAN_STEPS:
        return None
    w = block_size(n)
    full = (n // w) * w
    blocks = clean_step_times[:full].reshape(-1, w)
    return float(np.median(blocks, axis=1).min())
