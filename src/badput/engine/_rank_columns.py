"""Float columns of the per-rank view that grow at their end (:class:`Growing`), and a
column of one rank (or attempt) joined over its streams with its medians taken only of
what grew since (:class:`Joined`)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
EMPTY: F64 = np.zeros(0)


class Growing:
    """A float column that grows at its end; a view taken of it stays as it was (a longer
    one is copied into a new buffer, twice the size: appending is amortised O(1)), unless
    it is cut back (:meth:`cut`): then what grows after the cut is written where the
    values cut were (a rank paired again at every monitor cycle from an earlier pairing:
    a copy of its million loads at every cycle, otherwise)."""

    __slots__ = ("buf", "cuts", "n", "n_cuts")

    def __init__(self) -> None:
        self.buf: F64 = EMPTY
        self.n = 0
        # The lengths it was cut back to (the newest few), and how many cuts there were:
        # what a Joined of it took before a cut may be kept up to there.
        self.cuts: list[int] = []
        self.n_cuts = 0

    def __len__(self) -> int:
        return self.n

    def extend(self, values: F64) -> None:
        k = len(values)
        if not k:
            return
        if not self.n:
            self.buf, self.n = values, k  # adopted, not copied (never written into)
            return
        if self.n + k > len(self.buf) or self.buf.base is not None:
            grown = np.empty(max(2 * (self.n + k), 16))
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : self.n + k] = values
        self.n += k

    def view(self) -> F64:
        return self.buf[: self.n]

    def cut(self, n: int) -> None:
        """Keep the first ``n`` values only. Views taken of the values cut see what grows
        in their place: whoever kept one learns of the cut (:meth:`unchanged_since`)."""
        self.n = min(self.n, n)
        self.cuts = [*self.cuts[-(_CUTS_KEPT - 1) :], self.n]
        self.n_cuts += 1

    def unchanged_since(self, n: int, n_cuts: int) -> int | None:
        """How many of its first values are as they were when it was ``n`` long after
        ``n_cuts`` cuts; None when that is no longer known."""
        k = self.n_cuts - n_cuts
        if k == 0:
            return n
        if k > len(self.cuts) or k < 0:
            return None
        return min(n, *self.cuts[-k:])


#: Cut lengths a :class:`Growing` keeps (a rank paired again at every monitor cycle is
#: joined at every cycle too).
_CUTS_KEPT = 16


#: Values set aside (unsorted) before a kept-sorted column is sorted again (:class:`Joined`).
MERGE_AFTER = 4096


def _concat(columns: list[Growing]) -> F64:
    """The columns end to end; the one itself when only one has values (a view, which
    nobody writes into: the step times of a million-step attempt are not copied)."""
    views = [c.view() for c in columns if len(c)]
    if len(views) == 1:
        return views[0]
    return np.concatenate(views) if views else EMPTY


class Joined:
    """A column of one rank (or attempt) joined over its streams in their order, and what
    was taken of it: its median, the medians of its blocks of data loads.

    Joined again from scratch at every change (a cold report) but when only the last
    stream's column grew since the last time (the running attempt of a job followed by
    a monitor): then only the new values are taken. Its values are kept sorted from that
    second time on, the new ones set aside (sorted among themselves) and merged in every
    :data:`MERGE_AFTER`: the median is found among the few sorted values around the
    middle and those set aside, and it is :func:`numpy.median`'s, bit for bit (a NaN,
    or a zero whose sign depends on the order numpy leaves equal values in, is found by
    numpy)."""

    __slots__ = (
        "block",
        "kept",
        "medians",
        "n_pending",
        "nan",
        "parts",
        "pending",
        "sorted",
        "values",
    )

    def __init__(self) -> None:
        # each stream's column, its length and cuts (see Growing.cut)
        self.parts: list[tuple[Growing, int, int]] = []
        self.kept = 0  # the first values as they were at the join before the last
        self.values: Growing | None = None  # kept once the column grew
        self.sorted: F64 | None = None
        self.pending: list[F64] = []
        self.n_pending = 0
        self.nan = False  # a NaN among the values: numpy.median's own rule
        # Data loads: the block size, the medians of the full blocks taken.
        self.block = 0
        self.medians = Growing()

    def join(self, columns: list[Growing]) -> tuple[F64, bool]:
        """The columns joined, and whether only the last one grew since the last join."""
        parts = self.parts
        last = len(columns) - 1
        unchanged = None
        if (
            len(parts) == len(columns) > 0
            and columns[last] is parts[last][0]
            and all(
                c is p and len(c) == n and c.n_cuts == k
                for (p, n, k), c in zip(parts[:last], columns[:last], strict=True)
            )
        ):
            # (the last column may have been cut back since: a rank paired again from an
            # earlier pairing; what comes before the cut is kept)
            unchanged = columns[last].unchanged_since(parts[last][1], parts[last][2])
        if unchanged is None:
            self.parts = [(c, len(c), c.n_cuts) for c in columns]
            self.values, self.sorted, self.pending, self.n_pending = None, None, [], 0
            self.block, self.kept = 0, 0
            return _concat(columns), False
        col, n, _ = parts[last]
        parts[last] = (col, len(col), col.n_cuts)
        offset = sum(p[1] for p in parts[:last])
        self.kept = offset + unchanged
        if unchanged < n and self.values is not None:  # cut back: its values taken again
            self.values.cut(offset + unchanged)
            self.sorted, self.pending, self.n_pending = None, [], 0
            n = unchanged
        if self.values is None:  # a second look: from now on, kept
            self.values = Growing()
            self.values.extend(_concat(columns))
            self.nan = bool(np.isnan(self.values.view()).any())
        elif len(col) > n:
            new = col.view()[n:]
            self.values.extend(new)
            if self.sorted is not None:
                self.pending.append(new)
                self.n_pending += len(new)
            self.nan = self.nan or bool(np.isnan(new).any())
        return self.values.view(), True

    def median(self, joined: F64) -> float | None:
        """The median of ``joined``, what :meth:`join` just gave."""
        n = len(joined)
        if not n:
            return None
        if self.values is None or self.nan:
            return float(np.median(joined))
        if self.sorted is None:
            self.sorted, self.pending, self.n_pending = np.sort(joined), [], 0
        elif self.n_pending > MERGE_AFTER:
            merged = np.concatenate((self.sorted, *self.pending))
            self.sorted, self.pending, self.n_pending = np.sort(merged, kind="stable"), [], 0
        k = n // 2
        if self.pending:
            aside = np.concatenate(self.pending)
            # Below index k - 1 - len(aside) of the sorted values, every value is among the
            # k - 1 least of all: the two middle ones are among the rest up to index k.
            lo = max(0, k - 1 - len(aside))
            near = np.sort(np.concatenate((self.sorted[lo : k + 1], aside)))
            upper, lower = near[k - lo], near[k - 1 - lo] if k else near[0]
        else:
            upper, lower = self.sorted[k], self.sorted[k - 1] if k else self.sorted[0]
        if upper == 0 or (lower == 0 and not n % 2):
            return float(np.median(joined))  # 0.0 or -0.0: which one, numpy's order says
        return float(upper) if n % 2 else float((lower + upper) / 2)
