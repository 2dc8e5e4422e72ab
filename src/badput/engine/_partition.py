"""The partition of ACCOUNTING.md: every instant of the job given to one bucket.

``compute_report`` reads the ingested state and returns a :class:`Report`. It is
pure: the same state and arguments give the same numbers, whatever order the
events arrived in. Here is which attempts a query looks at, and in what order; the
adding up into buckets is :mod:`._tally`'s (the builder's base).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Literal

import numpy as np
import numpy.typing as npt

from badput.engine._attempts import Attempt, place_attempts, reconstruct_attempts
from badput.engine._cache import QueryCache
from badput.engine._diagnose import Recorded, ReportDiagnostics
from badput.engine._hung import HUNG, hung_spans
from badput.engine._ideal import MIN_CLEAN_STEPS
from badput.engine._ingest import Ingestor
from badput.engine._lineage import keep_upto, last_step, safe_step
from badput.engine._model import PRODUCTIVE, EndReason, Report, StepCounts
from badput.engine._rows import AttemptRows, Segment, Structure
from badput.engine._sealing import Sealer
from badput.engine._segments import Typical, add_segments, estimate_ideal, resolve_many
from badput.engine._stream import Stream
from badput.engine._tally import Tally
from badput.events import Kind

__all__ = ["compute_report", "goodput_seconds"]

F64 = npt.NDArray[np.float64]
_Source = Literal["configured", "estimated"] | None


class _Builder(Tally):
    """One query of the partition: which attempts are looked at, in what order, and what
    is kept of them for the next query (:class:`Tally` adds them up)."""

    def __init__(
        self,
        ing: Ingestor,
        now: float | None,
        window: tuple[float, float] | None,
        ideal_step_time: float | None,
        typical: Typical = "median",
        *,
        cache: QueryCache | None = None,
    ) -> None:
        cache = cache if cache is not None else QueryCache()
        if now is not None and now < ing.last_ts:
            ing = ing.as_of(now)  # events stamped after `now` do not exist for it (§9.10)
            cache = QueryCache()  # another state: the accountant's cache is not for it
        super().__init__(ing, cache, window, ideal_step_time)
        self.cache = cache
        self.typical = typical
        self.now = now
        self.rows: list[AttemptRows | None] = []
        self.ideal: float | None = None
        self.sealer = Sealer(ing, cache, self.streams)
        self.derive_hung = True  # False in the windows that measure a hung span

    # --------------------------------------------------------------- the report

    def state_key(self) -> tuple[object, ...]:
        """What a report depends on besides its window (the same state, asked the same).
        The state itself, not its id(): the key keeps it alive, so no other state can
        come to have its id while the key is kept (tuples compare it by identity)."""
        ing = self.ing
        return (
            ing,
            ing.n_events,
            len(ing.lifecycle),
            sum(ing.diagnostics.counts.values()),
            self.now,
            self.ideal_cfg,
            self.typical,
        )

    def build(self) -> Report:
        known = self.cache.structure
        if known is not None and self.window is not None and known.key == self.state_key():
            return self._windowed(known)
        ing = self.ing
        job = ing.job or ""
        attempts = reconstruct_attempts(self.ing, self.log.add)
        life = ing.lifecycle
        scheduled = [e.ts for e in life if e.kind == Kind.JOB_SCHEDULED]
        if not attempts:
            return self._empty(job)

        first_scheduled = min(scheduled) if scheduled else None
        t_start, t_end, end_reason = place_attempts(
            attempts, first_scheduled, self.now, self.log.add
        )
        final = attempts[-1]

        lo, hi = t_start, t_end
        if self.window is not None:
            lo, hi = max(lo, self.window[0]), min(hi, self.window[1])
            hi = max(hi, lo)
        self.clip_bounds = (lo, hi)
        self.span = (t_start, t_end)
        total = hi - lo

        self._gaps(attempts, first_scheduled, t_end)
        rows, segments, attempt_rest = self._attempt_parts(attempts)
        ideal, ideal_source = self._ideal_step_time(rows)
        self.rows, self.ideal = rows, ideal  # kept for recent_step_times()
        self._resolve_segments(rows, ideal)
        thresholds = keep_upto(segments)
        safe = math.inf if final.ended_by_job_end else safe_step(self._checkpoints(attempts))
        sums, step_time = self._add_step_time(
            rows, segments, attempts, thresholds, safe, (0, len(segments)), ideal
        )
        counts = StepCounts(round(sums.kept_count), round(sums.wasted_count), last_step(rows))
        whole_counts = counts
        for i, st in step_time.items():
            attempt_rest[i] -= st
        # What comes before holds for any window; keep it for windowed queries of this state.
        before = self.log.snapshot()
        self._untracked(attempts, range(len(attempts)), attempt_rest)
        if not segments:
            counts = self._checkpoint_progress(ideal, counts, attempts)

        after = self._job_diagnostics(attempts, ideal, end_reason)

        by_attempt: dict[int, list[Segment]] = defaultdict(list)
        for seg in segments:
            by_attempt[seg.attempt].append(seg)
        summaries = [self._summary_of(i, a, by_attempt.get(i, [])) for i, a in enumerate(attempts)]
        structure = Structure(
            key=self.state_key(),
            job=job,
            attempts=attempts,
            scheduled=first_scheduled,
            span=(t_start, t_end),
            end_reason=end_reason,
            rows=rows,
            segments=segments,
            keep_upto=thresholds,
            safe=safe,
            ideal=ideal,
            ideal_source=ideal_source,
            counts=whole_counts,
            summaries=summaries,
            before=before,
            after=after,
        )
        self.cache.structure = structure
        _derive_hung(self, structure, range(len(attempts)))
        return self._finish(structure, total, max(sums.at_risk, 0.0), counts)

    def _attempt_parts(
        self, attempts: list[Attempt]
    ) -> tuple[list[AttemptRows | None], list[Segment], list[float]]:
        """Per attempt: its recorded intervals added to their buckets, the leader's step
        rows and their segments (a closed attempt's from what earlier queries remembered);
        and what is left of its span once the intervals are taken out."""
        cold = not self.cache.closed  # no memo to find (a first query): none is looked for
        self._seal_closed_together(attempts, cold=cold)
        rows: list[AttemptRows | None] = []
        segments: list[Segment] = []
        rest: list[float] = []
        for i, att in enumerate(attempts):
            span = self.clip(att.eff_start, att.eff_end)
            closed = i < len(attempts) - 1 or att.ended
            memo = self.memos.get(i, att) if closed and not cold else None
            if memo is not None:
                ar = memo.rows
                in_pieces = self._memo_sums(att, memo)
            else:
                leader = self.streams.leader(att)
                if leader is None:
                    rows.append(None)
                    rest.append(span)
                    continue
                ar = self.sealer.rows(att, leader, closed)
                in_pieces = self._interval_sums(att, ar, diagnose=False)
                found = self._attempt_diagnostics(att, ar)
                self.log.replay(found)
                add_segments(i, ar, self.streams.restores(att, leader))
                if closed:
                    self.memos.remember(i, att, ar, found)
            segments.extend(ar.segments)
            rows.append(ar)
            rest.append(span - in_pieces)
        return rows, segments, rest

    def _resolve_segments(self, rows: list[AttemptRows | None], ideal: float | None) -> None:
        """Every segment's typical step time, open rows and startup (§4), except where an
        earlier query resolved them with what they need unchanged."""
        todo: list[int] = []
        todo_rows: list[AttemptRows] = []
        for i, attempt_rows in enumerate(rows):
            if attempt_rows is None:
                continue
            memo = self.memos.by_index.get(i)
            if memo is not None and memo.resolved and (memo.ideal == ideal or not memo.needs_ideal):
                continue
            todo.append(i)
            todo_rows.append(attempt_rows)
        found = resolve_many(todo_rows, ideal, self.typical)
        for i, needs_ideal in zip(todo, found, strict=True):
            memo = self.memos.by_index.get(i)
            if memo is not None:
                memo.resolved, memo.ideal, memo.needs_ideal = True, ideal, needs_ideal

    def _job_diagnostics(
        self, attempts: list[Attempt], ideal: float | None, end_reason: EndReason
    ) -> Recorded:
        """Ingest-time diagnostics, and what the log lacks; returned as recorded, for a
        windowed report of the same state to replay."""
        with self.log.recording() as after:
            self.log.add_ingest(self.ing.diagnostics)
            if ideal is None:
                self.log.add(
                    "no_ideal_step_time",
                    f"fewer than {MIN_CLEAN_STEPS} clean steps and no configured ideal step time: "
                    "kept step time is all counted as productive",
                )
            if end_reason == "last_event" and not attempts[-1].ended_by_job_end:
                self.log.add(
                    "no_job_end",
                    "the log ends without job_end: the job crashed or is still running; "
                    "time runs to the last event",
                )
            for a, b in itertools.pairwise(attempts):
                if a.ended_by_job_end:
                    self.log.add(
                        "reused_job_name",
                        f"attempt {b.id} started after job_end of attempt {a.id}: "
                        "is the job name reused for a new run?",
                    )
        return after

    def enter_window(self, known: Structure) -> tuple[int, int]:
        """Set the window's clip bounds on ``known``'s span; the range of attempts whose span
        can meet it (a few more is harmless: they add zero)."""
        window = self.window
        assert window is not None  # windowed queries only
        t_start, t_end = known.span
        lo, hi = max(t_start, window[0]), min(t_end, window[1])
        self.clip_bounds, self.span = (lo, max(hi, lo)), known.span
        first = max(0, int(np.searchsorted(known.eff_ends(), lo, "left")) - 1)
        stop = int(np.searchsorted(known.eff_starts(), max(hi, lo), "right")) + 1
        return first, min(len(known.attempts), stop)

    def _windowed(self, known: Structure) -> Report:
        """A window of a state already reported on: only the attempts the window meets are
        looked at (everything else is in ``known``), so it costs O(what the window holds).

        Adds the same terms, in the same order, as a full build would: the attempts outside
        the window add nothing to any bucket there either.
        """
        self.log = ReportDiagnostics(known.before)
        attempts = known.attempts
        t_end = known.span[1]
        first, stop = self.enter_window(known)
        lo, hi = self.clip_bounds
        if known.scheduled is not None:
            self.buckets["queued"] += self.clip(known.scheduled, attempts[0].eff_start)
        for i in range(max(first, 1), stop):
            self.buckets["recovery"] += self.clip(attempts[i - 1].eff_end, attempts[i].eff_start)
        self.buckets["recovery"] += self.clip(attempts[-1].eff_end, t_end)
        rest: list[float] = []
        for i in range(first, stop):
            att, ar = attempts[i], known.rows[i]
            span = self.clip(att.eff_start, att.eff_end)
            if ar is None:
                rest.append(span)
                continue
            memo = self.cache.closed.get((att.key, att.range_lo))
            if memo is not None and memo.rows is ar:
                in_pieces = self._memo_sums(att, memo, diagnose=False)
            else:
                in_pieces = self._interval_sums(att, ar, diagnose=False)
            rest.append(span - in_pieces)
        sums, step_time = self._add_step_time(
            known.rows,
            known.segments,
            attempts,
            known.keep_upto,
            known.safe,
            known.segments_of(first, stop),
            known.ideal,
        )
        for i, st in step_time.items():
            rest[i - first] -= st
        self._untracked(attempts, range(first, stop), rest)
        _derive_hung(self, known, range(first, stop))
        counts = known.counts
        if not known.segments:
            counts = self._checkpoint_progress(known.ideal, counts, attempts)
        self.log.replay_recorded(known.after)
        return self._finish(known, hi - lo, max(sums.at_risk, 0.0), counts)

    # ------------------------------------------------------------- step rows

    def _seal_closed_together(self, attempts: list[Attempt], *, cold: bool) -> None:
        """Seal every closed attempt that has nothing cached or remembered yet in one
        vectorised pass; the per-attempt path then finds them sealed. ``cold``: the cache
        remembers no attempt (none is looked for)."""
        todo: list[tuple[Attempt, Stream]] = []
        for i, att in enumerate(attempts):
            closed = i < len(attempts) - 1 or att.ended
            if not closed or att.key is None or (att.key, att.range_lo) in self.cache.attempts:
                continue
            if not cold and self.memos.get(i, att) is not None:
                continue
            s = self.streams.leader(att)
            if s is not None:
                todo.append((att, s))
        self.sealer.seal_closed(todo)

    def _ideal_step_time(self, rows: list[AttemptRows | None]) -> tuple[float | None, _Source]:
        if self.ideal_cfg is not None:
            return self.ideal_cfg, "configured"
        est = estimate_ideal(rows, self.cache.ideal)
        return (est, "estimated") if est is not None else (None, None)


def compute_report(
    ing: Ingestor,
    *,
    now: float | None = None,
    window: tuple[float, float] | None = None,
    ideal_step_time: float | None = None,
    typical: Typical = "median",
    cache: QueryCache | None = None,
) -> Report:
    """The partition of the ingested job as of ``now`` (or its last event), optionally windowed.

    ``typical`` is how a segment's typical step time (§4: the startup baseline, the length
    of an open last step) is taken from its other steps: ``"median"`` (ACCOUNTING.md) or
    ``"mean"`` (ml-goodput-measurement's rule, for its compatibility layer).
    """
    if window is not None and window[1] < window[0]:
        raise ValueError(f"window end {window[1]} is before its start {window[0]}")
    if ideal_step_time is not None and not (ideal_step_time > 0 and math.isfinite(ideal_step_time)):
        raise ValueError(f"ideal step time must be a positive number, got {ideal_step_time}")
    return _Builder(ing, now, window, ideal_step_time, typical, cache=cache).build()


def goodput_seconds(
    ing: Ingestor,
    window: tuple[float, float],
    *,
    ideal_step_time: float | None = None,
    cache: QueryCache | None = None,
) -> tuple[float, float, float]:
    """``(productive, slowdown, total)`` seconds of ``window``: what :func:`compute_report`
    of that window puts in those buckets, without the rest of the report. A window of a
    state already reported on needs only its steps' time (intervals, untracked and hung
    time hold no productive time): what a chart of goodput over time asks 181 times. A log
    with no steps takes its productive time from checkpoint progress, carved out of
    untracked time: that one is the whole windowed report's."""
    if window[1] < window[0]:
        raise ValueError(f"window end {window[1]} is before its start {window[0]}")
    builder = _Builder(ing, None, window, ideal_step_time, cache=cache)
    known = builder.cache.structure
    if known is None or known.key != builder.state_key() or not known.segments:
        report = builder.build()
        return report.bucket(PRODUCTIVE), report.bucket("slowdown"), report.total_seconds
    first, stop = builder.enter_window(known)
    builder._add_step_time(
        known.rows,
        known.segments,
        known.attempts,
        known.keep_upto,
        known.safe,
        known.segments_of(first, stop),
        known.ideal,
    )
    lo, hi = builder.clip_bounds
    return builder.buckets[PRODUCTIVE], builder.buckets["slowdown"], hi - lo


def _derive_hung(builder: _Builder, known: Structure, indices: range) -> None:
    """Move each hung attempt's untracked time after its last progress to ``hung``
    (:mod:`badput.engine._hung`): the same partition of that span, as a window."""
    if not builder.derive_hung:
        return
    live = known.end_reason == "now"
    found = hung_spans(
        builder.ing,
        builder.streams,
        known.attempts,
        indices,
        ideal=known.ideal,
        live=live,
        progress=builder.cache.progress,
    )
    lo, hi = builder.clip_bounds
    for span in found:
        a, b = max(span.start, lo), min(span.end, hi)
        if b <= a:
            continue
        inner = _Builder(
            builder.ing,
            builder.now,
            (a, b),
            builder.ideal_cfg,
            builder.typical,
            cache=builder.cache,
        )
        inner.derive_hung = False
        silent = inner.build().buckets.get("untracked", 0.0)
        moved = min(silent, builder.buckets["untracked"])
        builder.buckets["untracked"] -= moved
        builder.buckets[HUNG] += moved


def recent_step_times(
    ing: Ingestor,
    last: int,
    *,
    now: float | None = None,
    ideal_step_time: float | None = None,
    cache: QueryCache | None = None,
) -> tuple[F64, float | None]:
    """Time per step of the ``last`` most recent steps (oldest first), and the ideal step time.

    Steps of every attempt count, wasted ones too (they measure speed); the first step
    of a segment (startup) and a step still open are left out. Costs one report (cheap
    with sealed rows) plus O(``last``).
    """
    builder = _Builder(ing, now, None, ideal_step_time, cache=cache)
    known = builder.cache.structure
    if known is not None and known.key == builder.state_key():
        rows, ideal = known.rows, known.ideal  # this state was just reported on: its rows
    else:
        builder.build()
        rows, ideal = builder.rows, builder.ideal
    parts: list[F64] = []
    need = last
    for ar in reversed(rows):
        if ar is None or need <= 0:
            continue
        sealed = ar.sealed  # of the sealed rows, only look at as many as needed
        for part in (ar.tail, sealed.part(sealed.n - min(sealed.n, 2 * need + 16), sealed.n)):
            ok = ~part.first & ~np.isnan(part.d)
            values = part.d[ok] / part.count[ok]
            if values.shape[0]:
                parts.append(values[-need:])
                need -= min(need, int(values.shape[0]))
            if need <= 0:
                break
    times = np.concatenate(parts[::-1]) if parts else np.zeros(0)
    return times, ideal
