"""The partition of ACCOUNTING.md: every instant of the job given to one bucket.

``compute_report`` reads the ingested state and returns a :class:`Report`. It is
pure: the same state and arguments give the same numbers, whatever order the
events arrived in.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from badput.engine._ideal import MIN_CLEAN_STEPS, best_sustained_step_time
from badput.engine._ingest import Ingestor, LifecycleEvent, Stream
from badput.engine._intervals import (
    Coverage,
    Piece,
    RecordedInterval,
    flatten_innermost,
    pair_marks,
)
from badput.engine._model import (
    PRODUCTIVE,
    AttemptSummary,
    Diagnostic,
    EndReason,
    Report,
    StepCounts,
)
from badput.events import Kind

__all__ = ["compute_report"]

F64 = npt.NDArray[np.float64]
_Source = Literal["configured", "estimated"] | None
I64 = npt.NDArray[np.int64]
_EPS = 1e-6


@dataclass
class _Attempt:
    key: str | None  # stream key (None: events without attempt id)
    id: str | int
    start: float
    end: float  # end event ts, or last event
    end_reason: str
    ended: bool  # by job_end or attempt_end
    ended_by_job_end: bool
    status: str | None = None
    exit_code: int | None = None
    eff_start: float = 0.0
    eff_end: float = 0.0
    # for attempts derived from job_start (no ids): the time range of their events
    range_lo: float = -math.inf
    range_hi: float = math.inf


@dataclass
class _StepBlock:
    """The leader's steps of one attempt, as arrays (one row per step_start)."""

    start: F64  # span start (clipped to the attempt)
    end: F64  # span end; nan for an open last step until m is known
    cap: F64  # latest possible end of an open step
    step: I64
    count: F64  # steps of work the span stands for (sparse logging)
    seg: I64  # segment index (global)
    first: npt.NDArray[np.bool_]
    known: npt.NDArray[np.bool_]
    clean: npt.NDArray[np.bool_]
    coverage: Coverage
    d: F64 = field(default_factory=lambda: np.zeros(0))  # step time, recorded intervals taken out
    startup: F64 = field(default_factory=lambda: np.zeros(0))  # part of d that is startup


@dataclass
class _Segment:
    attempt: int
    lo: int  # row range in its attempt's block
    hi: int
    first_ts: float
    first_step: int
    last_step: int
    restore_point: int
    restored: bool


def _sorted_step_arrays(stream: Stream) -> tuple[F64, I64, npt.NDArray[np.int8]]:
    log = stream.steps
    ts = np.frombuffer(log.ts, dtype=np.float64) if len(log) else np.zeros(0)
    step = np.frombuffer(log.step, dtype=np.int64) if len(log) else np.zeros(0, np.int64)
    is_end = np.frombuffer(log.is_end, dtype=np.int8) if len(log) else np.zeros(0, np.int8)
    if log.unsorted:
        order = np.argsort(ts, kind="stable")  # arrival order breaks ties
        ts, step, is_end = ts[order], step[order], is_end[order]
    return ts, step, is_end


def _slice_range(
    ts: F64, step: I64, is_end: npt.NDArray[np.int8], lo: float, hi: float
) -> tuple[F64, I64, npt.NDArray[np.int8]]:
    a = int(np.searchsorted(ts, lo, side="left"))
    b = int(np.searchsorted(ts, hi, side="left"))
    return ts[a:b], step[a:b], is_end[a:b]


class _Builder:
    def __init__(
        self,
        ing: Ingestor,
        now: float | None,
        window: tuple[float, float] | None,
        ideal_step_time: float | None,
    ) -> None:
        self.ing = ing
        self.now = now
        self.window = window
        self.ideal_cfg = ideal_step_time
        self.diags: list[Diagnostic] = []
        self.buckets: dict[str, float] = defaultdict(float)
        self.overlapped: dict[str, float] = defaultdict(float)

    # ---------------------------------------------------------------- attempts

    def attempts(self) -> list[_Attempt]:
        ing = self.ing
        life = sorted(ing.lifecycle, key=lambda e: (e.ts, e.seq))
        explicit = ing.attempt_keys()
        attempts: list[_Attempt] = []
        if explicit:
            by_key: dict[str, list[LifecycleEvent]] = defaultdict(list)
            idless = [e for e in life if e.attempt is None]
            for e in life:
                if e.attempt is not None:
                    by_key[e.attempt].append(e)
            for key in explicit:
                evs = by_key.get(key, [])
                starts = [e.ts for e in evs if e.kind == Kind.JOB_START]
                first_ts, last_ts = ing.attempt_span(key)
                start = min(starts) if starts else first_ts
                attempts.append(self._finish_attempt(key, _attempt_id(key), start, evs, last_ts))
            attempts.sort(key=lambda a: (a.start, str(a.id)))
            # Id-less lifecycle events belong to the attempt running at their time.
            for e in idless:
                if e.kind in (Kind.JOB_END, Kind.ATTEMPT_END):
                    target = _attempt_at(attempts, e.ts)
                    if target is not None and not target.ended:
                        self._apply_end(target, e)
        else:
            attempts = self._derive_attempts(life)
        return attempts

    def _finish_attempt(
        self,
        key: str | None,
        aid: str | int,
        start: float,
        evs: Sequence[LifecycleEvent],
        last_ts: float,
    ) -> _Attempt:
        att = _Attempt(key, aid, start, last_ts, "last_event", False, False)
        for e in evs:
            if e.kind in (Kind.JOB_END, Kind.ATTEMPT_END):
                self._apply_end(att, e)
        if att.ended and last_ts > att.end + _EPS:
            self.diag(
                "events_out_of_order",
                f"attempt {aid}: events up to {last_ts - att.end:.3f}s after its "
                f"{'job_end' if att.ended_by_job_end else 'attempt_end'} (ignored)",
            )
        return att

    def _apply_end(self, att: _Attempt, e: LifecycleEvent) -> None:
        # The first end event ends the attempt; a later job_end upgrades an attempt_end.
        if att.ended and not (e.kind == Kind.JOB_END and not att.ended_by_job_end):
            return
        if att.ended and e.ts - att.end > _EPS:
            # attempt_end then job_end later: the job ended at the job_end.
            pass
        att.ended = True
        att.end = e.ts if not att.ended_by_job_end else att.end
        att.ended_by_job_end = e.kind == Kind.JOB_END
        att.status = e.status or att.status
        att.exit_code = e.exit_code if e.exit_code is not None else att.exit_code
        if e.kind == Kind.JOB_END:
            att.end_reason = "job_end"
        else:
            att.end_reason = f"attempt_end:{e.status}" if e.status else "attempt_end"

    def _derive_attempts(self, life: list[LifecycleEvent]) -> list[_Attempt]:
        """No attempt ids: each job_start opens an attempt, multi-host duplicates merged."""
        ing = self.ing
        attempts: list[_Attempt] = []
        seen: set[tuple[str | None, int | None]] = set()
        ends: list[list[LifecycleEvent]] = []
        for e in life:
            if e.kind == Kind.JOB_START:
                who = (e.host, e.rank)
                cur = attempts[-1] if attempts else None
                if cur is None or cur.ended or who in seen:
                    attempts.append(
                        _Attempt(None, len(attempts), e.ts, e.ts, "last_event", False, False)
                    )
                    ends.append([])
                    seen = set()
                seen.add(who)
            elif e.kind in (Kind.JOB_END, Kind.ATTEMPT_END):
                if not attempts:
                    continue  # an end before any start: reported by diagnostics below
                cur = attempts[-1]
                if not cur.ended:
                    self._apply_end(cur, e)
                    ends[-1].append(e)
        idless = np.sort(
            np.concatenate(
                [np.frombuffer(ing.idless_ts, dtype=np.float64)]
                + [
                    np.frombuffer(s.steps.ts, dtype=np.float64)
                    for s in ing.streams.values()
                    if s.attempt is None and len(s.steps)
                ]
            )
        )
        if not attempts:
            if not len(idless):
                return []
            attempts.append(
                _Attempt(None, 0, float(idless[0]), float(idless[-1]), "last_event", False, False)
            )
        # Events before the first job_start belong to the first attempt.
        for i, att in enumerate(attempts):
            att.range_lo = -math.inf if i == 0 else att.start
            att.range_hi = attempts[i + 1].start if i + 1 < len(attempts) else math.inf
            lo = int(np.searchsorted(idless, att.range_lo, side="left"))
            hi = int(np.searchsorted(idless, att.range_hi, side="left"))
            last = float(idless[hi - 1]) if hi > lo else att.start
            if not att.ended:
                att.end = max(last, att.start)
            elif last > att.end + _EPS:
                self.diag(
                    "events_out_of_order",
                    f"attempt {att.id}: events up to {last - att.end:.3f}s after its end (ignored)",
                )
        return attempts

    # ------------------------------------------------------------------ helpers

    def diag(
        self, code: str, message: str, file: str | None = None, line: int | None = None
    ) -> None:
        self.diags.append(Diagnostic(code, message, file, line))

    def clip(self, a: float, b: float) -> float:
        lo, hi = self.clip_bounds
        return max(0.0, min(b, hi) - max(a, lo))

    # --------------------------------------------------------------- the report

    def build(self) -> Report:
        ing = self.ing
        job = ing.job or ""
        attempts = self.attempts()
        life = ing.lifecycle
        scheduled = [e.ts for e in life if e.kind == Kind.JOB_SCHEDULED]
        if not attempts:
            return self._empty(job)

        # Effective spans: attempts never overlap in the partition.
        prev_end = -math.inf
        for att in attempts:
            att.eff_start = max(att.start, prev_end)
            if att.start < prev_end - _EPS:
                self.diag(
                    "attempt_overlap",
                    f"attempt {att.id} started {prev_end - att.start:.3f}s before the previous "
                    "attempt ended; counted from that end",
                )
            att.eff_end = max(att.end, att.eff_start)
            prev_end = att.eff_end

        t_start = attempts[0].eff_start
        if scheduled and min(scheduled) < t_start:
            t_start = min(scheduled)
        final = attempts[-1]
        end_reason: EndReason
        if final.ended_by_job_end:
            t_end, end_reason = final.eff_end, "job_end"
            if self.now is not None and self.now < t_end:
                t_end, end_reason = self.now, "now"
        elif self.now is not None:
            t_end, end_reason = self.now, "now"
            if not final.ended:
                final.eff_end = max(final.eff_end, self.now)
                final.end_reason = "now"
        else:
            t_end, end_reason = final.eff_end, "last_event"
        t_end = max(t_end, t_start)
        for att in attempts:
            att.eff_start = min(att.eff_start, t_end)
            att.eff_end = min(att.eff_end, t_end)

        lo, hi = t_start, t_end
        if self.window is not None:
            lo, hi = max(lo, self.window[0]), min(hi, self.window[1])
            hi = max(hi, lo)
        self.clip_bounds = (lo, hi)
        total = hi - lo

        # queued and recovery
        if scheduled:
            self.buckets["queued"] += self.clip(min(scheduled), attempts[0].eff_start)
        for a, b in zip(attempts, attempts[1:]):
            self.buckets["recovery"] += self.clip(a.eff_end, b.eff_start)
        self.buckets["recovery"] += self.clip(final.eff_end, t_end)

        # per attempt: intervals and step rows of the leader rank
        blocks: list[_StepBlock | None] = []
        segments: list[_Segment] = []
        attempt_rest: list[float] = []
        for i, att in enumerate(attempts):
            span = self.clip(att.eff_start, att.eff_end)
            leader = self._leader_stream(att)
            if leader is None:
                blocks.append(None)
                attempt_rest.append(span)
                continue
            pieces = self._intervals(att, leader)
            in_pieces = sum(self.clip(p.start, p.end) for p in pieces)
            for p in pieces:
                self.buckets[p.bucket] += self.clip(p.start, p.end)
            block = self._step_block(i, att, leader, pieces, segments)
            blocks.append(block)
            attempt_rest.append(span - in_pieces)

        ideal, ideal_source = self._ideal(blocks)
        self._finish_steps(blocks, segments, ideal)
        kept_time, kept_n, at_risk, counts = self._split_kept(
            attempts, blocks, segments, ideal, final_job_end=final.ended_by_job_end
        )
        for i, block in enumerate(blocks):
            if block is not None:
                attempt_rest[i] -= float(np.sum(self._step_weights(block) * block.d))
        if ideal is not None:
            productive = min(kept_time, kept_n * ideal)
        else:
            productive = kept_time
        self.buckets[PRODUCTIVE] += productive
        self.buckets["slowdown"] += max(0.0, kept_time - productive)
        for i, rest in enumerate(attempt_rest):
            if rest < -_EPS:
                self.diag(
                    "internal_inconsistency",
                    f"attempt {attempts[i].id}: {-rest:.6f}s counted twice; please report this log",
                )
            self.buckets["untracked"] += max(rest, 0.0)

        # Ingest-time diagnostics, and what the log lacks.
        self._collect_ingest_diagnostics()
        if ideal is None:
            self.diag(
                "no_ideal_step_time",
                f"fewer than {MIN_CLEAN_STEPS} clean steps and no configured ideal step time: "
                "kept step time is all counted as productive",
            )
        if end_reason == "last_event" and not final.ended_by_job_end:
            self.diag(
                "no_job_end",
                "the log ends without job_end: the job crashed or is still running; "
                "time runs to the last event",
            )
        for a, b in zip(attempts, attempts[1:]):
            if a.ended_by_job_end:
                self.diag(
                    "reused_job_name",
                    f"attempt {b.id} started after job_end of attempt {a.id}: "
                    "is the job name reused for a new run?",
                )

        buckets = {k: v for k, v in self.buckets.items() if v > 0.0}
        productive_s = buckets.get(PRODUCTIVE, 0.0)
        slowdown_s = buckets.get("slowdown", 0.0)
        return Report(
            job=job,
            start=t_start,
            end=t_end,
            end_reason=end_reason,
            total_seconds=total,
            goodput=productive_s / total if total > 0 else 0.0,
            observed_goodput=(productive_s + slowdown_s) / total if total > 0 else 0.0,
            buckets=dict(sorted(buckets.items(), key=lambda kv: -kv[1])),
            overlapped={k: v for k, v in self.overlapped.items() if v > 0.0},
            at_risk_seconds=at_risk,
            ideal_step_time=ideal,
            ideal_step_time_source=ideal_source,
            attempts=[self._summary(a, segments, i) for i, a in enumerate(attempts)],
            steps=counts,
            diagnostics=self.diags,
            window=self.window,
        )

    def _empty(self, job: str) -> Report:
        self._collect_ingest_diagnostics()
        self.diag("empty_log", "no events to account for")
        return Report(
            job=job, start=0.0, end=0.0, end_reason="last_event", total_seconds=0.0,
            goodput=0.0, observed_goodput=0.0, buckets={}, overlapped={},
            at_risk_seconds=0.0, ideal_step_time=self.ideal_cfg,
            ideal_step_time_source="configured" if self.ideal_cfg else None,
            attempts=[], steps=StepCounts(0, 0, None), diagnostics=self.diags,
            window=self.window,
        )

    def _summary(self, att: _Attempt, segments: list[_Segment], i: int) -> AttemptSummary:
        segs = [s for s in segments if s.attempt == i]
        return AttemptSummary(
            id=att.id,
            start=att.start,
            end=att.eff_end,
            end_reason=att.end_reason,
            restore_step=segs[0].restore_point if segs and segs[0].restored else None,
            first_step=segs[0].first_step if segs else None,
            last_step=segs[-1].last_step if segs else None,
            status=att.status,
            exit_code=att.exit_code,
        )

    # ------------------------------------------------------------- streams

    def _leader_stream(self, att: _Attempt) -> Stream | None:
        """The lowest rank with work in this attempt (events without rank count as 0)."""
        best: tuple[int, Stream] | None = None
        for (akey, rank), s in self.ing.streams.items():
            if akey != att.key or not s.has_work:
                continue
            if att.key is None and not _stream_touches(s, att):
                continue
            if best is None or rank < best[0]:
                best = (rank, s)
        return best[1] if best else None

    def _intervals(self, att: _Attempt, s: Stream) -> list[Piece]:
        marks = s.marks
        if s.marks_unsorted:
            marks = sorted(marks, key=lambda m: (m.ts, m.seq))
        if att.key is None:
            marks = [m for m in marks if att.range_lo <= m.ts < att.range_hi]
        intervals, unpaired_starts, unpaired_ends = pair_marks(marks, close_at=att.eff_end)
        for m in unpaired_starts:
            self.diag(
                "unpaired_start",
                f"{m.bucket} started at {m.ts:.3f} was never ended; closed at the end of "
                f"attempt {att.id}",
                m.source,
                m.line,
            )
        for m in unpaired_ends:
            self.diag(
                "unpaired_end", f"{m.bucket} end at {m.ts:.3f} without a start; ignored",
                m.source, m.line,
            )
        blocking = []
        for iv in intervals:
            a, b = max(iv.start, att.eff_start), min(iv.end, att.eff_end)
            if iv.blocking:
                if b > a:
                    blocking.append(RecordedInterval(a, b, iv.bucket, True, iv.order))
            else:
                self.overlapped[iv.bucket] += self.clip(a, b)
        return flatten_innermost(blocking)

    def _step_block(
        self, ai: int, att: _Attempt, s: Stream, pieces: list[Piece], segments: list[_Segment]
    ) -> _StepBlock | None:
        if not len(s.steps):
            return None
        ts, step, is_end = _sorted_step_arrays(s)
        if att.key is None:
            ts, step, is_end = _slice_range(ts, step, is_end, att.range_lo, att.range_hi)
        starts = is_end == 0
        st = ts[starts]
        sn = step[starts]
        n = int(st.shape[0])
        if n == 0:
            self.diag(
                "events_out_of_order",
                f"attempt {att.id}: {int(is_end.shape[0])} step_end events and no step_start; "
                "ignored",
            )
            return None
        et = ts[~starts]
        en = step[~starts]

        new_seg = np.empty(n, dtype=np.bool_)
        new_seg[0] = True
        new_seg[1:] = sn[1:] <= sn[:-1]
        same_next = np.append(~new_seg[1:], False)
        nxt_ts = np.append(st[1:], np.inf)
        nxt_n = np.append(sn[1:], 0)

        own_end = np.full(n, np.inf)
        if et.shape[0]:
            # Rows are in (ts, arrival) order: an end belongs to the last start before it.
            idx = (np.cumsum(starts) - 1)[~starts]
            ok = idx >= 0
            ok[ok] = sn[idx[ok]] == en[ok]
            if not ok.all():
                self.diag(
                    "events_out_of_order",
                    f"attempt {att.id}: {int((~ok).sum())} step_end events without a matching "
                    "step_start before them; ignored",
                )
            np.minimum.at(own_end, idx[ok], et[ok])
        has_end = np.isfinite(own_end)
        count = np.where(has_end | ~same_next, 1, np.maximum(nxt_n - sn, 1)).astype(np.float64)
        end = np.where(has_end, own_end, np.where(same_next, nxt_ts, np.nan))
        known = ~np.isnan(end)
        lo_, hi_ = att.eff_start, att.eff_end
        start_c = np.clip(st, lo_, hi_)
        end_c = np.where(known, np.clip(np.where(known, end, 0.0), lo_, hi_), np.nan)
        end_c = np.where(known, np.maximum(end_c, start_c), np.nan)
        cap = np.clip(np.minimum(nxt_ts, hi_), start_c, None)
        cov = Coverage(pieces)
        covered = np.where(known, cov.between(start_c, np.where(known, end_c, start_c)), 0.0)
        d = np.where(known, end_c - start_c - covered, 0.0)
        clean = known & ~new_seg & (covered <= 0.0)

        seg_local = np.cumsum(new_seg) - 1
        bounds = np.flatnonzero(new_seg).tolist() + [n]
        restores = sorted(s.restores, key=lambda r: (r.ts, r.seq))
        if att.key is None:
            restores = [r for r in restores if att.range_lo <= r.ts < att.range_hi]
        prev_last_start = -math.inf
        base = len(segments)
        for j in range(len(bounds) - 1):
            lo, hi = bounds[j], bounds[j + 1]
            first_ts = float(st[lo])
            in_gap = [r for r in restores if prev_last_start < r.ts <= first_ts]
            ends = [r for r in in_gap if r.is_end]
            chosen = (ends or in_gap or [None])[-1]
            first_step = int(sn[lo])
            segments.append(
                _Segment(
                    attempt=ai, lo=lo, hi=hi, first_ts=first_ts, first_step=first_step,
                    last_step=int(sn[hi - 1]),
                    restore_point=chosen.step if chosen is not None else first_step - 1,
                    restored=chosen is not None,
                )
            )
            prev_last_start = float(st[hi - 1])
        return _StepBlock(
            start=start_c, end=end_c, cap=cap, step=sn.astype(np.int64), count=count,
            seg=(seg_local + base).astype(np.int64), first=new_seg, known=known, clean=clean,
            coverage=cov, d=d, startup=np.zeros(n),
        )

    # ------------------------------------------------------------- step time

    def _ideal(self, blocks: list[_StepBlock | None]) -> tuple[float | None, _Source]:
        if self.ideal_cfg is not None:
            return self.ideal_cfg, "configured"
        parts = [b.d[b.clean] / b.count[b.clean] for b in blocks if b is not None]
        times = np.concatenate(parts) if parts else np.zeros(0)
        est = best_sustained_step_time(times)
        return (est, "estimated") if est is not None else (None, None)

    def _finish_steps(
        self, blocks: list[_StepBlock | None], segments: list[_Segment], ideal: float | None
    ) -> None:
        """Typical step time per segment: open last steps, then startup."""
        for seg in segments:
            b = blocks[seg.attempt]
            assert b is not None
            lo, hi = seg.lo, seg.hi
            per = b.d[lo:hi] / b.count[lo:hi]
            typical_rows = b.known[lo:hi].copy()
            typical_rows[0] = False
            m: float | None
            m = float(np.median(per[typical_rows])) if typical_rows.any() else ideal
            last = hi - 1
            if not b.known[last]:
                if hi - lo > 1:
                    # Sparse logging: the open last record stands for the typical stride.
                    b.count[last] = max(1.0, float(np.median(b.count[lo:last])))
                if m is not None:
                    e = min(b.start[last] + m * b.count[last], b.cap[last])
                else:
                    e = b.start[last]
                b.end[last] = e
                b.known[last] = True
                cov = float(b.coverage.between(np.array([b.start[last]]), np.array([e]))[0])
                b.d[last] = max(0.0, e - b.start[last] - cov)
            b_startup = 0.0
            if m is not None:
                b_startup = max(0.0, float(b.d[lo]) - m * float(b.count[lo]))
            b.startup[lo] = b_startup

    def _step_weights(self, b: _StepBlock) -> F64:
        """Share of each step's time that lies inside the query window."""
        if self.window is None:
            lo, hi = self.clip_bounds
            if b.start.shape[0] == 0 or (b.start[0] >= lo and np.nanmax(b.end) <= hi):
                return np.ones(b.d.shape[0])
        lo, hi = self.clip_bounds
        a = np.clip(b.start, lo, hi)
        e = np.clip(b.end, lo, hi)
        inside = np.maximum(e - a - b.coverage.between(a, e), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(b.d > 0, inside / b.d, 0.0)
        return np.clip(w, 0.0, 1.0)

    def _split_kept(
        self,
        attempts: list[_Attempt],
        blocks: list[_StepBlock | None],
        segments: list[_Segment],
        ideal: float | None,
        *,
        final_job_end: bool,
    ) -> tuple[float, float, float, StepCounts]:
        """Kept vs wasted steps (§3); returns kept time, kept steps, at-risk, counts."""
        order = sorted(range(len(segments)), key=lambda j: (segments[j].attempt, segments[j].lo))
        # K[j] = min restore point of every later segment: steps above it were redone.
        keep_upto = [math.inf] * len(segments)
        running = math.inf
        for j in reversed(order):
            keep_upto[j] = running
            running = min(running, segments[j].restore_point)
        ing = self.ing
        committed = np.frombuffer(ing.checkpoints_committed, dtype=np.int64)
        saved = np.frombuffer(ing.checkpoints_saved, dtype=np.int64)
        durable = committed if committed.shape[0] else saved
        safe = int(durable.max()) if durable.shape[0] else -(2**62)
        restored = [s.restore_point for s in segments if s.restored]
        if restored:
            safe = max(safe, max(restored))

        kept_time = kept_n = at_risk = 0.0
        kept_count = wasted_count = 0.0
        last_step: int | None = None
        startup_total = wasted_total = 0.0
        for i, b in enumerate(blocks):
            if b is None:
                continue
            w = self._step_weights(b)
            startup = b.startup
            work = b.d - startup
            k_upto = np.array([keep_upto[s] for s in range(len(segments))])[b.seg]
            with np.errstate(invalid="ignore"):
                frac = np.clip((k_upto - b.step + 1) / b.count, 0.0, 1.0)
            frac = np.where(np.isinf(k_upto), 1.0, frac)
            kept_time += float(np.sum(frac * work * w))
            kept_n += float(np.sum(frac * b.count * w))
            wasted_total += float(np.sum((1 - frac) * work * w))
            startup_total += float(np.sum(startup * w))
            kept_count += float(np.sum(frac * b.count))
            wasted_count += float(np.sum((1 - frac) * b.count))
            if not final_job_end:
                risky = b.step > safe
                at_risk += float(np.sum((frac * work * w)[risky]))
            if b.step.shape[0]:
                last_step = int(b.step[-1] + b.count[-1] - 1)
        self.buckets["wasted"] += wasted_total
        self.buckets["startup"] += startup_total
        counts = StepCounts(int(round(kept_count)), int(round(wasted_count)), last_step)
        del attempts
        return kept_time, kept_n, at_risk, counts

    def _collect_ingest_diagnostics(self) -> None:
        log = self.ing.diagnostics
        for code, entries in log.entries.items():
            for message, source, line in entries:
                self.diag(code, message, source, line)
            extra = log.counts.get(code, 0) - len(entries)
            if extra > 0:
                self.diag(code, f"... and {extra} more {code} diagnostics")


def _attempt_id(key: str) -> str | int:
    return int(key) if key.isdigit() and (key == "0" or not key.startswith("0")) else key


def _attempt_at(attempts: list[_Attempt], ts: float) -> _Attempt | None:
    found = None
    for a in attempts:
        if a.start <= ts:
            found = a
    return found if found is not None else (attempts[0] if attempts else None)


def _stream_touches(s: Stream, att: _Attempt) -> bool:
    return s.last_ts >= att.range_lo and s.first_ts < att.range_hi


def compute_report(
    ing: Ingestor,
    *,
    now: float | None = None,
    window: tuple[float, float] | None = None,
    ideal_step_time: float | None = None,
) -> Report:
    """The partition of the ingested job as of ``now`` (or its last event), optionally windowed."""
    if window is not None and window[1] < window[0]:
        raise ValueError(f"window end {window[1]} is before its start {window[0]}")
    if ideal_step_time is not None and not (ideal_step_time > 0 and math.isfinite(ideal_step_time)):
        raise ValueError(f"ideal step time must be a positive number, got {ideal_step_time}")
    return _Builder(ing, now, window, ideal_step_time).build()
