"""Every rank counts: the per-rank view, straggler scores and stalls (hangs).

The partition follows one timeline per attempt (ACCOUNTING.md); this module looks
at all of them. :class:`RankTracker` keeps a few columns per (attempt, rank),
fed the same events as the partition's ingest, O(1) per event; :meth:`RankTracker.analyze`
turns them into :class:`RankAnalysis` (pure: same state, same answer).

Straggler scores follow NVIDIA's straggler detection (nvidia-resiliency-ext,
``straggler/reporting.py``): per section, a score is a *reference* median time
divided by this rank's median time, so 1.0 is as fast as the reference and 0.5
twice as slow.

- **relative**: the reference is the smallest of the ranks' recent medians (the
  best rank of the job now);
- **individual**: the reference is this rank's own best median so far.

"Recent" is the newest ``section_summary`` period of the rank with at least
``min_samples`` runs (docs/ranks.md). Blocking data loads count as the section
``data_loading`` (recent: the median of the last block of loads).

Stalls: progress (steps, recorded intervals, section completions), not heartbeats,
decides liveness. A stall is a time during which no rank made progress for longer
than ``max(stall_factor x typical step time, stall_floor)``.

The tracker's parts: its answers (``_rank_model``), a stream's columns (``_rank_stream``,
``_rank_columns``), the ingest (``_rank_ingest``), what a query derives and pairs of the
columns (``_rank_derive``, ``_rank_settle``), the scores (``_rank_scores``) and the stalls
(``_rank_stalls``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from badput.engine._batch import Batch
from badput.engine._pack import pack, unpack
from badput.engine._rank_columns import Joined
from badput.engine._rank_derive import derive_streams, derived_of
from badput.engine._rank_ingest import absorb_stream, ingest_into
from badput.engine._rank_model import RankAnalysis, RankOptions, RankView
from badput.engine._rank_scores import (
    find_outliers,
    find_stragglers,
    in_time_order,
    rank_view,
    score_relative,
    sections_of,
)
from badput.engine._rank_settle import settle_streams
from badput.engine._rank_stalls import stalls_of
from badput.engine._rank_stream import RankStream
from badput.events import Event

__all__ = ["RankTracker"]


class RankTracker:
    """Per-(attempt, rank) columns, fed every event the Accountant ingests."""

    def __init__(self) -> None:
        self.streams: dict[tuple[str | None, int], RankStream] = {}
        self.version = 0  # bumped by every change (ingest, absorb)
        # Per rank (its step times, its data loads) and per attempt (step times): the
        # columns joined over streams, taken again only where they grew.
        self._joined: dict[tuple[str, object], Joined] = {}
        # The last analysis and what it was asked: (version, now, options, attempts, answer).
        self._analysis: (
            tuple[
                int,
                float | None,
                RankOptions,
                list[tuple[str, float, float, bool, bool]],
                RankAnalysis,
            ]
            | None
        ) = None

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle keeps: the streams packed by field (see ``Ingestor.__getstate__``),
        when nothing was derived from them yet (a parallel read's worker): what a query
        derives may be shared between streams, and is pickled as it is."""
        state = dict(vars(self))
        if not self._joined and self._analysis is None:
            state["streams"] = (list(self.streams), pack(list(self.streams.values())))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state["streams"], tuple):
            keys, packed = state["streams"]
            state["streams"] = dict(zip(keys, unpack(packed), strict=True))
        vars(self).update(state)

    def absorb(self, other: RankTracker) -> None:
        """Add what ``other`` read (later files of the same job)."""
        for key, theirs in other.streams.items():
            mine = self.streams.get(key)
            if mine is None:
                self.streams[key] = theirs
                continue
            absorb_stream(mine, theirs)
        self.version += 1

    def ingest(self, events: list[Event], job: str | None) -> None:
        """Route ``events`` (consecutive lines of one source) into the columns."""
        self.ingest_batch(Batch(events), job)

    def ingest_batch(self, batch: Batch, job: str | None) -> None:
        """Route a run of events (consecutive lines of one source), as columns, into the
        streams' columns; ``job``: keep only its events (``None``: all). See
        :func:`~badput.engine._rank_ingest.ingest_into`."""
        if ingest_into(self.streams, batch, job):
            self.version += 1

    # ------------------------------------------------------------------ query

    def progress(self, attempt: str) -> tuple[float | None, float | None, float | None]:
        """``(newest progress, newest other event of a process that made progress, typical
        step time)`` of ``attempt`` over every rank (``None`` when unknown)."""
        last: float | None = None
        seen: float | None = None
        streams = [s for s in self.streams.values() if s.attempt == attempt]
        derive_streams([s for s in streams if s.derived_at != s.changes])
        for s in streams:
            d = derived_of(s)
            if d.n_progress and (last is None or d.progress_last > last):
                last = d.progress_last
            alive = s.alive_until()
            if alive is not None and (seen is None or alive > seen):
                seen = alive
        joined = self._joined.setdefault(("attempt", attempt), Joined())
        times, _ = joined.join([s.covered.times for s in streams])
        return last, seen, joined.median(times)

    def _changed(self) -> tuple[list[RankStream], int]:
        """The streams that changed since the last :meth:`derive`, and their values."""
        changed = [s for s in self.streams.values() if s.derived_at != s.changes]
        values = sum(
            len(s.step_ts) + len(s.end_ts) + len(s.pair_ts) + len(s.extra_ts) for s in changed
        )
        return changed, values

    def pending(self) -> tuple[int, int]:
        """``(values, streams)``: what :meth:`derive` would go through now (the values that
        arrived since the last call, and the streams they arrived in)."""
        changed, values = self._changed()
        return values, len(changed)

    def derive(self) -> int:
        """Derive and pair what arrived since the last call (the first thing
        :meth:`analyze` does; each stream once per change, all changed streams at once).

        The :class:`~badput.engine.Accountant` calls it before a report's partition, so
        that the temporary columns of a cold pass over many streams are freed before the
        partition's are made, or, for a few large streams (mostly numpy: a million steps
        with their data loads), in a thread beside the partition. It touches only this
        tracker's streams. Returns how many values it went through (what its temporaries
        were made of).
        """
        changed, values = self._changed()
        derive_streams(changed)
        settle_streams(list(self.streams.values()))
        return values

    def analyze(
        self,
        attempts: list[tuple[str, float, float, bool, bool]],
        now: float | None,
        options: RankOptions,
    ) -> RankAnalysis:
        """The per-rank view, the stragglers and the stalls.

        ``attempts``: (id, start, end, ended, completed) of every attempt, as the
        partition reconstructed them (``completed``: ended by ``job_end``, so the
        time after its last progress is shutdown, not a stall); ``now`` (live) marks
        a stall still going on. Asked again with nothing changed, the same answer is
        given without computing it again.
        """
        kept = self._analysis
        if (
            kept is not None
            and kept[0] == self.version
            and kept[1] == now
            and kept[2] == options
            and kept[3] == attempts
        ):
            found = kept[4]
        else:
            found = self._analyze(attempts, now, options)
            self._analysis = (self.version, now, options, list(attempts), found)
        return RankAnalysis(list(found.ranks), list(found.stragglers), list(found.stalls))

    def _analyze(
        self,
        attempts: list[tuple[str, float, float, bool, bool]],
        now: float | None,
        options: RankOptions,
    ) -> RankAnalysis:
        self.derive()
        everything = list(self.streams.values())
        by_rank: dict[int, list[RankStream]] = {}
        for s in everything:
            by_rank.setdefault(s.rank, []).append(s)
        # Only ranks that did something count as ranks (a launcher writes lifecycle only).
        workers = {
            r: ss
            for r, ss in by_rank.items()
            if any(len(s.step_ts) or len(s.pair_ts) or len(s.extra_ts) or s.sections for s in ss)
        }
        joined = self._joined
        ordered = {r: in_time_order(ss) for r, ss in workers.items()}
        sections = {
            r: sections_of(ss, options, joined.setdefault(("loads", r), Joined()), ordered[r])
            for r, ss in workers.items()
        }
        score_relative(sections)
        stragglers = find_stragglers(sections, workers, options)
        typical_all: list[float] = []
        views: dict[int, RankView] = {}
        for r, ss in sorted(workers.items()):
            view = rank_view(
                r, ss, sections[r], joined.setdefault(("steps", r), Joined()), ordered[r]
            )
            views[r] = view
            if view.typical_step_time is not None:
                typical_all.append(view.typical_step_time)
        typical = float(np.median(typical_all)) if typical_all else None
        threshold = max(options.stall_factor * typical if typical else 0.0, options.stall_floor)
        stalls = stalls_of(attempts, everything, workers, now, threshold, typical)
        outliers = find_outliers(views, stragglers, stalls, options.min_excess)
        ranks = [
            RankView(**{**v.__dict__, "outlier": outliers.get(r, [])}) for r, v in views.items()
        ]
        return RankAnalysis(ranks, stragglers, stalls)
