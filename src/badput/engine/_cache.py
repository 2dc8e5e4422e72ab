"""What one query leaves for the next: the :class:`QueryCache` the Accountant owns.

Sealed rows per attempt (:mod:`badput.engine._steps`), what queries made of each closed
attempt and the window-independent part of the last report (:mod:`badput.engine._rows`),
and the block medians of the ideal step time estimate. Only values derivable from the
ingested state are kept: dropping the cache changes no number, only the cost of the next
query.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from badput.engine._ideal import (
    FULL_BLOCK,
    MIN_CLEAN_STEPS,
    best_sustained_step_time,
    block_size,
    min_block_median,
)
from badput.engine._intervals import joined
from badput.engine._rows import ClosedMemo, Structure
from badput.engine._steps import AttemptSteps

__all__ = ["IdealCache", "QueryCache"]

F64 = npt.NDArray[np.float64]


@dataclass
class IdealCache:
    """Block medians of the sealed clean-step sequence (W = 100 once there are 1,000)."""

    # (sealed part, its length) of each part the block medians were taken over: a part is
    # the object itself, compared by identity (an id() could be reused by another object)
    signature: list[tuple[object, int]] = field(default_factory=list)
    blocks_min: float = math.inf  # over the complete blocks of the sealed sequence
    carry: F64 = field(default_factory=lambda: np.zeros(0))  # sealed values after them

    def estimate(self, sealed: list[tuple[object, F64]], tail: F64) -> float | None:
        """Best sustained step time over ``sealed`` parts (in order) then ``tail``."""
        n = sum(int(v.shape[0]) for _, v in sealed) + int(tail.shape[0])
        w = block_size(n)
        if n < MIN_CLEAN_STEPS or w != FULL_BLOCK:
            # Few clean steps: W depends on n, so nothing carries over; the sequence is short.
            return best_sustained_step_time(np.concatenate([v for _, v in sealed] + [tail]))
        sig = [(key, int(v.shape[0])) for key, v in sealed]
        new_values = self._extension(sig, sealed)
        if new_values is None:
            self.blocks_min, self.carry = math.inf, np.zeros(0)
            new_values = joined([v for _, v in sealed])
        self.signature = sig
        pending = joined([self.carry, new_values])  # (one attempt's million: not copied)
        full = (pending.shape[0] // w) * w
        self.blocks_min = min(self.blocks_min, min_block_median(pending, w))
        self.carry = pending[full:].copy()  # (fewer than W: not a view of a sealed column)
        best = min(self.blocks_min, min_block_median(np.concatenate((self.carry, tail)), w))
        return best if math.isfinite(best) else None

    def _extension(
        self, sig: list[tuple[object, int]], sealed: list[tuple[object, F64]]
    ) -> F64 | None:
        """The values appended since the cached signature, or None when not an append."""
        old = self.signature
        if not old or len(sig) < len(old):
            return None
        for i, (key, length) in enumerate(old):
            nkey, nlen = sig[i]
            if nkey is not key or nlen < length or (nlen != length and i != len(old) - 1):
                return None
        parts = [sealed[len(old) - 1][1][old[-1][1] :]]
        parts += [v for _, v in sealed[len(old) :]]
        return joined(parts)


@dataclass
class QueryCache:
    """What one query leaves for the next, owned by the :class:`Accountant`: each attempt's
    sealed rows (keyed by attempt and, without ids, the start of its range) and the block
    medians of the ideal step time estimate. Only values derivable from the ingested state:
    dropping it changes no number, only the cost of the next query."""

    attempts: dict[tuple[str | None, float], AttemptSteps] = field(default_factory=dict)
    ideal: IdealCache = field(default_factory=IdealCache)
    #: What queries made of each closed attempt (``_rows.ClosedMemo``), same keys.
    closed: dict[tuple[str | None, float], ClosedMemo] = field(default_factory=dict)
    #: The last report's window-independent part (``_rows.Structure``), for windowed
    #: queries of the same state.
    structure: Structure | None = None
    #: Each attempt's last progress (``_hung.last_progress``) and the state it was found
    #: in (the marks left out, the lengths of its streams: they only grow): a windowed
    #: report asks of every attempt it overlaps, and the answer scans all of its marks.
    progress: dict[tuple[object, ...], tuple[object, float | None]] = field(default_factory=dict)

    def clear(self) -> None:
        self.attempts.clear()
        self.closed.clear()
        self.progress.clear()
        self.structure = None
        self.ideal = IdealCache()
