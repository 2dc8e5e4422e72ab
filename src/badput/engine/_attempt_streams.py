"""Which streams hold an attempt's events, which of them leads, and what they record.

Found once per query and asked many times (a report of 10,000 attempts asks each of
these several times per attempt): the streams of each attempt, lowest rank first; its
*leader*, the lowest rank with step or interval events in its range (§9.6: the rank whose
rows the accounting uses, chosen per attempt with or without attempt ids); each stream's
time-ordered view; and the checkpoints and restores the attempt accounts for (none after
its end, §9.5). Pure lookups on the ingested state; no I/O.
"""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import pairwise

from badput.engine._attempts import Attempt
from badput.engine._ingest import Ingestor
from badput.engine._rows import StreamView, attempt_bounds, between
from badput.engine._stream import RestoreMark, Stream

__all__ = ["AttemptStreams"]

#: A stream's restores, at most this many and arrived in time order, are taken as they are
#: (no sorted view of the stream made: an attempt's restore is its start and its end).
_FEW = 4


class AttemptStreams:
    """The streams of each attempt of ``ing``, for one query (the state does not change
    during it)."""

    def __init__(self, ing: Ingestor) -> None:
        self.ing = ing
        self._by_attempt: dict[str | None, list[tuple[int, Stream]]] | None = None
        self._leaders: dict[int, Stream | None] = {}  # id(attempt) -> its leader
        self._views: dict[int, StreamView] = {}  # id(stream) -> its view

    def of(self, att: Attempt) -> list[tuple[int, Stream]]:
        """``(rank, stream)`` of the streams holding ``att``'s events, lowest rank first."""
        if self._by_attempt is None:
            index: dict[str | None, list[tuple[int, Stream]]] = defaultdict(list)
            for (akey, rank), st in self.ing.streams.items():
                index[akey].append((rank, st))
            for streams in index.values():
                streams.sort(key=lambda rs: rs[0])
            self._by_attempt = index
        return self._by_attempt.get(att.key, [])

    def leader(self, att: Attempt) -> Stream | None:
        """The lowest rank with step or interval events in this attempt (events without
        rank count as 0), chosen per attempt with or without attempt ids (§9.6)."""
        key = id(att)
        if key in self._leaders:
            return self._leaders[key]
        until = att.end if att.ended else math.inf
        found = None
        for _rank, s in self.of(att):
            if s.has_work and s.has_work_in(att.range_lo, att.range_hi, until):
                found = s
                break
        self._leaders[key] = found
        return found

    def view(self, s: Stream) -> StreamView:
        """``s``'s events in time order (each part sorted on first use)."""
        found = self._views.get(id(s))
        if found is None:
            found = self._views[id(s)] = StreamView(s)
        return found

    def restores(self, att: Attempt, s: Stream) -> list[RestoreMark]:
        """The checkpoint restores of stream ``s`` that ``att`` accounts for, in time order."""
        few = s.restores
        if not few:
            return []
        if len(few) <= _FEW and all((a.ts, a.seq) <= (b.ts, b.seq) for a, b in pairwise(few)):
            # a few in time order already (an attempt's restore: its start and its end)
            lo, top = attempt_bounds(att)
            return [r for r in few if lo <= r.ts < top]
        view = self.view(s)
        return view.restores[between(view.restore_ts, *attempt_bounds(att))]

    def checkpoints(self, att: Attempt) -> tuple[list[int], list[int], list[RestoreMark]]:
        """Steps of the checkpoints committed and saved by any rank, and the restores of
        the leader, among the events ``att`` accounts for."""
        committed: list[int] = []
        saved: list[int] = []
        bounds = attempt_bounds(att)
        for _rank, s in self.of(att):
            if not s.checkpoints:
                continue
            view = self.view(s)
            for _ts, step, is_commit in view.checkpoints[between(view.checkpoint_ts, *bounds)]:
                (committed if is_commit else saved).append(step)
        leader = self.leader(att)
        return committed, saved, self.restores(att, leader) if leader is not None else []

    def last_restore(self, att: Attempt) -> int | None:
        """Step of the attempt's last checkpoint restore (an end event preferred)."""
        leader = self.leader(att)
        if leader is None:
            return None
        marks = sorted(self.restores(att, leader), key=lambda r: (r.is_end, r.ts, r.seq))
        return marks[-1].step if marks else None
