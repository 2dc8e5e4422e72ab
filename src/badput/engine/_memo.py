"""What queries remember of each closed attempt, and when it still holds.

A closed attempt's rows are sealed whole; its segments, their typical step times, its
interval totals, checkpoints, diagnostics and summary change only when something about it
does (its place among the attempts, its span and end, the sizes of its streams): the
:class:`~badput.engine._rows.ClosedMemo` kept in the query cache is reused while that key
is unchanged, so a query over thousands of attempts pays for them once.
"""

from __future__ import annotations

from typing import Any

from badput.engine._attempt_streams import AttemptStreams
from badput.engine._attempts import Attempt
from badput.engine._cache import QueryCache
from badput.engine._ingest import Ingestor
from badput.engine._rows import AttemptDiagnostics, AttemptRows, ClosedMemo

__all__ = ["ClosedMemos"]


class ClosedMemos:
    """The memos of one query's closed attempts (``by_index``: attempt index -> its memo,
    for those found or made by this query)."""

    def __init__(self, ing: Ingestor, cache: QueryCache, streams: AttemptStreams) -> None:
        self.ing = ing
        self.cache = cache
        self.streams = streams
        self.by_index: dict[int, ClosedMemo] = {}
        # attempt index -> (attempt, its key): asked three times a query per attempt; the
        # state is fixed during a query, and the attempt's bounds are once set
        self._keys: dict[int, tuple[Attempt, tuple[Any, ...]]] = {}

    def key(self, i: int, att: Attempt) -> tuple[Any, ...] | None:
        """What a closed attempt's results depend on; None when they are not kept (an
        attempt without id shares its streams with the others)."""
        if att.key is None:
            return None
        known = self._keys.get(i)
        if known is not None and known[0] is att:
            return known[1]
        streams = self.streams.of(att)
        sizes = (  # (one stream: an attempt of one rank)
            (streams[0][1].sizes(),)
            if len(streams) == 1
            else tuple(s.sizes() for _rank, s in streams)
        )
        key = (
            i,
            att.eff_start,
            att.eff_end,
            att.end,
            att.ended,
            att.end_reason,
            att.status,
            att.exit_code,
            att.open_ranks,
            sizes,
        )
        self._keys[i] = (att, key)
        return key

    def get(self, i: int, att: Attempt) -> ClosedMemo | None:
        """The memo of closed attempt ``i`` when what it depends on is unchanged."""
        key = self.key(i, att)
        memo = self.cache.closed.get((att.key, att.range_lo)) if key is not None else None
        if memo is None or memo.key != key:
            return None
        self.by_index[i] = memo
        return memo

    def remember(
        self, i: int, att: Attempt, ar: AttemptRows, diagnostics: AttemptDiagnostics
    ) -> None:
        """Keep what this query made of a closed attempt (and the ``diagnostics`` it found
        there) for the next queries."""
        key = self.key(i, att)
        if key is None or not ar.steps.whole or ar.tail.n:
            return
        memo = ClosedMemo(key, ar, diagnostics)
        self.cache.closed[(att.key, att.range_lo)] = memo
        self.by_index[i] = memo
