"""What a report adds up: time into buckets, inside the window, and the :class:`Report` made of it.

:class:`Tally` holds a query's buckets and overlapped time and adds to them: the gaps
between attempts, an attempt's recorded intervals (from its rows or what a closed
attempt's memo kept), its step time, what is left untracked, the progress of a log
without steps; and makes the report. Its subclass, the partition's builder
(:mod:`._partition`), decides what is added: a whole job, or a window of a job already
reported on.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence

from badput.engine._attempt_streams import AttemptStreams
from badput.engine._attempts import Attempt
from badput.engine._cache import QueryCache
from badput.engine._diagnose import ReportDiagnostics
from badput.engine._ingest import Ingestor
from badput.engine._lineage import Checkpoints, checkpoint_progress, segment_sums
from badput.engine._memo import ClosedMemos
from badput.engine._model import PRODUCTIVE, AttemptSummary, Buckets, Report, StepCounts
from badput.engine._rows import (
    AttemptDiagnostics,
    AttemptRows,
    ClosedMemo,
    Segment,
    Structure,
    Sums,
    attempt_diagnostics,
)
from badput.engine._steps import add_sums, clipped_piece_sums, clipped_sums
from badput.engine._stream import RestoreMark

__all__ = ["Tally"]

_EPS = 1e-6


class Tally:
    """A query's buckets as they are added up (see the module docstring)."""

    #: The window's part of the job's span, and the job's span (set by a query).
    clip_bounds: tuple[float, float]
    span: tuple[float, float]

    def __init__(
        self,
        ing: Ingestor,
        cache: QueryCache,
        window: tuple[float, float] | None,
        ideal_step_time: float | None,
    ) -> None:
        self.ing = ing
        self.window = window
        self.ideal_cfg = ideal_step_time
        self.log = ReportDiagnostics()
        self.buckets: dict[str, float] = defaultdict(float)
        self.overlapped: dict[str, float] = defaultdict(float)
        self.streams = AttemptStreams(ing)
        self.memos = ClosedMemos(ing, cache, self.streams)
        self._checkpoint_cache: Checkpoints | None = None

    def clip(self, a: float, b: float) -> float:
        lo, hi = self.clip_bounds
        return max(0.0, min(b, hi) - max(a, lo))

    def _gaps(self, attempts: list[Attempt], scheduled: float | None, t_end: float) -> None:
        """Before the first attempt since the job was scheduled: queued; between attempts
        and after the last: recovery."""
        if scheduled is not None:
            self.buckets["queued"] += self.clip(scheduled, attempts[0].eff_start)
        for a, b in itertools.pairwise(attempts):
            self.buckets["recovery"] += self.clip(a.eff_end, b.eff_start)
        self.buckets["recovery"] += self.clip(attempts[-1].eff_end, t_end)

    def _finish(
        self, structure: Structure, total: float, at_risk: float, counts: StepCounts
    ) -> Report:
        buckets = {k: v for k, v in self.buckets.items() if v > 0.0}
        productive_s = buckets.get(PRODUCTIVE, 0.0)
        slowdown_s = buckets.get("slowdown", 0.0)
        return Report(
            job=structure.job,
            start=structure.span[0],
            end=structure.span[1],
            end_reason=structure.end_reason,
            total_seconds=total,
            goodput=productive_s / total if total > 0 else 0.0,
            observed_goodput=(productive_s + slowdown_s) / total if total > 0 else 0.0,
            buckets=Buckets(sorted(buckets.items(), key=_largest_first)),
            overlapped={k: v for k, v in self.overlapped.items() if v > 0.0},
            at_risk_seconds=at_risk,
            ideal_step_time=structure.ideal,
            ideal_step_time_source=structure.ideal_source,
            attempts=list(structure.summaries),
            steps=counts,
            diagnostics=self.log.finish(),
            window=self.window,
        )

    def _untracked(
        self, attempts: list[Attempt], indices: Iterable[int], rest: Sequence[float]
    ) -> None:
        """What is left of each attempt's time is untracked (less than nothing is a bug)."""
        for k, i in enumerate(indices):
            if rest[k] < -_EPS:
                self.log.add(
                    "internal_inconsistency",
                    f"attempt {attempts[i].id}: {-rest[k]:.6f}s counted twice; "
                    "please report this log",
                )
            self.buckets["untracked"] += max(rest[k], 0.0)

    def _interval_sums(self, att: Attempt, ar: AttemptRows, *, diagnose: bool = True) -> float:
        """Add the attempt's interval buckets and overlapped time; return their total."""
        steps, ivs = ar.steps, ar.tail_ivs
        lo, hi = self.clip_bounds
        names = self.ing.buckets.names
        total = 0.0
        inside = att.eff_start >= lo and att.eff_end <= hi
        if inside and not (len(ivs.pieces) or len(ivs.nonblocking)):  # (a closed attempt)
            pieces, overlapped = steps.piece_sums, steps.nonblocking_sums  # (only read here)
        elif inside:
            pieces = dict(steps.piece_sums)
            add_sums(pieces, ivs.pieces)
            overlapped = dict(steps.nonblocking_sums)
            add_sums(overlapped, ivs.nonblocking)
        elif self.clip(att.eff_start, att.eff_end) > 0.0:
            pieces = clipped_piece_sums(steps.pieces, lo, hi)
            for code, v in clipped_piece_sums(ivs.pieces, lo, hi).items():
                pieces[code] = pieces.get(code, 0.0) + v
            overlapped = clipped_sums(steps.nonblocking, lo, hi)
            for code, v in clipped_sums(ivs.nonblocking, lo, hi).items():
                overlapped[code] = overlapped.get(code, 0.0) + v
        else:
            pieces, overlapped = {}, {}
        for code, v in pieces.items():
            self.buckets[names[code]] += v
            total += v
        for code, v in overlapped.items():
            self.overlapped[names[code]] += v
        if diagnose:
            self.log.replay(self._attempt_diagnostics(att, ar))
        return total

    def _attempt_diagnostics(self, att: Attempt, ar: AttemptRows) -> AttemptDiagnostics:
        return attempt_diagnostics(att.id, ar, self.ing.buckets.names, self.ing.sources.names)

    def _memo_sums(self, att: Attempt, memo: ClosedMemo, *, diagnose: bool = True) -> float:
        """:meth:`_interval_sums` of a remembered attempt (its diagnostics as remembered
        when the window holds it whole)."""
        lo, hi = self.clip_bounds
        if att.eff_start >= lo and att.eff_end <= hi:
            # its rows' sums per bucket, as its sealing made them (nothing clipped)
            total = self._interval_sums(att, memo.rows, diagnose=False)
            if diagnose:
                self.log.replay(memo.diagnostics)
            return total
        return self._interval_sums(att, memo.rows, diagnose=diagnose)

    def _summary_of(self, i: int, att: Attempt, segs: list[Segment]) -> AttemptSummary:
        memo = self.memos.by_index.get(i)
        if memo is None:
            return self._summary(att, segs)
        if memo.summary is None:
            memo.summary = self._summary(att, segs)
        return memo.summary

    def _add_step_time(  # noqa: PLR0917 (the job's segments, and which of them)
        self,
        rows: list[AttemptRows | None],
        segments: list[Segment],
        attempts: list[Attempt],
        thresholds: list[float],
        safe: float,
        seg_range: tuple[int, int],
        ideal: float | None,
    ) -> tuple[Sums, dict[int, float]]:
        """Add the step time of segments ``seg_range`` inside the window to its buckets
        (§3, §4): wasted, startup, and the kept time as productive (at most n·I) and
        slowdown. Returns their sums (with at-risk time and step counts) and the step
        time of each attempt."""
        sums = Sums()
        step_time = segment_sums(
            rows, segments, attempts, thresholds, safe, *seg_range, sums, self.clip_bounds
        )
        self.buckets["wasted"] += max(sums.wasted, 0.0)
        self.buckets["startup"] += sums.startup
        productive = min(sums.kept, sums.kept_n * ideal) if ideal is not None else sums.kept
        self.buckets[PRODUCTIVE] += max(productive, 0.0)
        self.buckets["slowdown"] += max(0.0, sums.kept - productive)
        return sums, step_time

    def _checkpoints(self, attempts: list[Attempt]) -> Checkpoints:
        """Steps of the checkpoints committed and saved, and the restores (of the accounting
        rank), of the events the attempts account for (none after an attempt's end)."""
        if self._checkpoint_cache is not None:
            return self._checkpoint_cache
        committed: list[int] = []
        saved: list[int] = []
        restores: list[RestoreMark] = []
        for i, att in enumerate(attempts):
            memo = self.memos.by_index.get(i)
            found = memo.checkpoints if memo is not None else None
            if found is None:
                found = self.streams.checkpoints(att)
                if memo is not None:
                    memo.checkpoints = found
            committed += found[0]
            saved += found[1]
            restores += found[2]
        self._checkpoint_cache = (committed, saved, restores)
        return self._checkpoint_cache

    def _checkpoint_progress(
        self, ideal: float | None, counts: StepCounts, attempts: list[Attempt]
    ) -> StepCounts:
        """A log with no steps at all (e.g. the resiliency library's): goodput from net
        saved progress x the ideal step time, carved out of the untracked time (§7).

        Net saved progress = highest checkpoint saved - lowest checkpoint restored (0 when
        nothing was restored). Slowdown, startup and wasted steps cannot be told apart
        from the rest of the untracked time; the report says so.
        """
        found = checkpoint_progress(self._checkpoints(attempts))
        if found is None:
            return counts
        progress, highest = found
        if ideal is None:
            self.log.add(
                "checkpoint_progress",
                f"no steps recorded: {progress} steps of checkpoint progress, but without an "
                "ideal step time (--ideal-step-time) they cannot be turned into goodput",
            )
            return counts
        if self.clip_bounds != self.span:
            self.log.add(
                "checkpoint_progress",
                "no steps recorded: goodput from checkpoint progress is not apportioned to "
                "windows; query the whole job",
            )
            return counts
        untracked = self.buckets.get("untracked", 0.0)
        productive = min(progress * ideal, untracked)
        self.buckets["untracked"] = untracked - productive
        self.buckets[PRODUCTIVE] += productive
        self.log.add(
            "checkpoint_progress",
            f"no steps recorded: productive time is net checkpoint progress ({progress} steps) "
            f"x the ideal step time; slowdown, startup and wasted steps could not be separated "
            "from untracked time",
        )
        return StepCounts(progress, 0, highest)

    def _empty(self, job: str) -> Report:
        self.log.add_ingest(self.ing.diagnostics)
        self.log.add("empty_log", "no events to account for")
        return Report(
            job=job,
            start=0.0,
            end=0.0,
            end_reason="last_event",
            total_seconds=0.0,
            goodput=0.0,
            observed_goodput=0.0,
            buckets=Buckets(),
            overlapped={},
            at_risk_seconds=0.0,
            ideal_step_time=self.ideal_cfg,
            ideal_step_time_source="configured" if self.ideal_cfg else None,
            attempts=[],
            steps=StepCounts(0, 0, None),
            diagnostics=self.log.finish(),
            window=self.window,
        )

    def _summary(self, att: Attempt, segs: list[Segment]) -> AttemptSummary:
        if segs:
            restore_step = segs[0].restore_point if segs[0].restored else None
        else:  # no steps (e.g. a resiliency log): the attempt's own restore, if it made one
            restore_step = self.streams.last_restore(att)
        return AttemptSummary(
            id=att.id,
            start=att.start,
            end=att.eff_end,
            end_reason=att.end_reason,
            restore_step=restore_step,
            first_step=segs[0].first_step if segs else None,
            last_step=segs[-1].last_step if segs else None,
            status=att.status,
            exit_code=att.exit_code,
            open_ranks=att.open_ranks,
        )


def _largest_first(bucket: tuple[str, float]) -> tuple[float, str]:
    """Buckets largest first, equal ones by name: the same order however the state was
    built (in the order names were first met, equal buckets of a live job's report and of
    the cold one came out in different orders)."""
    return -bucket[1], bucket[0]
