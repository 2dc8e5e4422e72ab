"""A slow, simple reference implementation of ACCOUNTING.md, for logs with attempt ids.

One Python object per row and per interval, no sealing, no prefix sums, no numpy: each
rule written as plainly as the page states it. tests/test_engine_reference.py checks the
engine's columnar path against it on random logs. Covers: attempts (ids, ends, a later
job_end moving the end, end events without id ending the attempt running at their time,
overlap clipping, events after the end ignored), the accounting rank (lowest rank with
steps or intervals), recorded intervals (pairing, innermost wins), step rows (own ends,
sparse records, segments, open last steps), typical step time, startup, the ideal step
time estimate, restore points, kept/wasted, at risk, windows, hung time. Not covered: logs without
any attempt id, ``now``, step-less logs beyond the rule of §7.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field

from badput.events import Event, bucket_of, interval_base

__all__ = ["RefReport", "reference_report"]

END_KINDS = ("job_end", "attempt_end")


@dataclass
class RefReport:
    total: float
    buckets: dict[str, float]
    at_risk: float
    ideal: float | None
    kept: int
    wasted: int


@dataclass
class _Att:
    key: str
    start: float
    end: float
    ended: bool
    by_job_end: bool
    events: list[tuple[int, Event]] = field(default_factory=list)  # (arrival, event)
    eff_start: float = 0.0
    eff_end: float = 0.0
    status: str | None = None  # of its end events, the newest that has one


@dataclass
class _Interval:
    start: float
    end: float
    bucket: str
    blocking: bool
    key: tuple[float, float, int]  # a later key is more inner


@dataclass
class _Row:
    start: float
    end: float | None  # None: open
    cap: float
    step: int
    count: float
    first: bool
    d: float = 0.0
    known: bool = True
    clean: bool = False
    startup: float = 0.0


def _clip(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


def _frac(x: float, step: int, count: float) -> float:
    if x == math.inf:
        return 1.0
    if x == -math.inf:
        return 0.0
    return min(1.0, max(0.0, (x - step + 1) / count))


def _attempts(events: list[Event]) -> list[_Att]:
    by_key: dict[str, _Att] = {}
    launcher: list[tuple[int, Event]] = []  # end events without attempt id
    for i, e in enumerate(events):
        if e.attempt is None:
            if e.kind in END_KINDS:
                launcher.append((i, e))
            continue  # other events without id are not accounted in a log with ids
        key = str(e.attempt)
        att = by_key.get(key)
        if att is None:
            att = by_key[key] = _Att(key, math.inf, -math.inf, False, False)
        att.events.append((i, e))
    for att in by_key.values():
        times = [e.ts for _, e in att.events]
        starts = [e.ts for _, e in att.events if e.kind == "job_start"]
        att.start = min(starts) if starts else min(times)
        att.end = max(times)
    attempts = sorted(by_key.values(), key=lambda a: (a.start, a.key))
    ends: dict[str, list[tuple[int, Event]]] = {a.key: [] for a in attempts}
    for att in attempts:
        ends[att.key] += [(i, e) for i, e in att.events if e.kind in END_KINDS]
    for i, e in launcher:  # ends the attempt running at its time (the first for earlier times)
        running = [a for a in attempts if a.start <= e.ts] or attempts[:1]
        ends[running[-1].key].append((i, e))
    for att in attempts:
        # The first end event ends the attempt; every later job_end moves the end (§2: the
        # job ends at its last job_end).
        for _, e in sorted(ends[att.key], key=lambda p: (p[1].ts, p[0])):
            if not att.ended or e.kind == "job_end":
                att.ended, att.end, att.by_job_end = True, e.ts, e.kind == "job_end"
                att.status = e.status or att.status
        if att.ended:  # events after the end do not exist (§9.5)
            att.events = [(i, e) for i, e in att.events if e.ts <= att.end]
    prev = -math.inf
    for att in attempts:
        att.eff_start = max(att.start, prev)
        att.eff_end = max(att.end, att.eff_start)
        prev = att.eff_end
    return attempts


def _leader(att: _Att) -> list[tuple[int, Event]]:
    """Events of the lowest rank with step or interval events, in (ts, arrival) order."""
    ranks = sorted(
        {
            e.rank or 0
            for _, e in att.events
            if e.kind in ("step_start", "step_end") or interval_base(e.kind) is not None
        }
    )
    if not ranks:
        return []
    mine = [(i, e) for i, e in att.events if (e.rank or 0) == ranks[0]]
    return sorted(mine, key=lambda p: (p[1].ts, p[0]))


def _intervals(evs: list[tuple[int, Event]], lo: float, hi: float) -> list[_Interval]:
    stacks: dict[str, list[tuple[int, Event]]] = {}
    raw: list[tuple[float, float, str, bool, int]] = []
    for i, e in evs:
        split = interval_base(e.kind)
        if split is None:
            continue
        base, is_start = split
        bucket = bucket_of(base, e.name)
        if is_start:
            stacks.setdefault(bucket, []).append((i, e))
        elif stacks.get(bucket):
            j, s = stacks[bucket].pop()
            blocking = not (base == "data_loading" and s.blocking is False)
            raw.append((s.ts, max(e.ts, s.ts), bucket, blocking, j))
    for stack in stacks.values():
        for j, s in stack:
            base = interval_base(s.kind)
            assert base is not None
            blocking = not (base[0] == "data_loading" and s.blocking is False)
            raw.append((s.ts, max(hi, s.ts), bucket_of(base[0], s.name), blocking, j))
    out = []
    for start, end, bucket, blocking, j in raw:
        a, b = max(start, lo), min(end, hi)
        if b >= a:
            out.append(_Interval(a, b, bucket, blocking, (start, -end, j)))
    return out


def _owner_pieces(intervals: list[_Interval]) -> list[tuple[float, float, str]]:
    """Disjoint pieces: each elementary stretch goes to its innermost covering interval."""
    blocking = [iv for iv in intervals if iv.blocking and iv.end > iv.start]
    points = sorted({t for iv in blocking for t in (iv.start, iv.end)})
    pieces = []
    for x, y in itertools.pairwise(points):
        covering = [iv for iv in blocking if iv.start <= x and iv.end >= y]
        if covering:
            pieces.append((x, y, max(covering, key=lambda iv: iv.key).bucket))
    return pieces


def _covered(pieces: list[tuple[float, float, str]], a: float, b: float) -> float:
    return sum(_clip(x, y, a, b) for x, y, _ in pieces) if b > a else 0.0


def _rows(evs: list[tuple[int, Event]], lo: float, hi: float) -> list[_Row]:
    starts = [(i, e) for i, e in evs if e.kind == "step_start"]
    rows: list[_Row] = []
    own_end: dict[int, float] = {}
    last_start = -1
    for _i, e in evs:
        if e.kind == "step_start":
            last_start += 1
        elif (
            e.kind == "step_end"
            and last_start >= 0
            and starts[last_start][1].step == e.step
            and last_start not in own_end
        ):
            own_end[last_start] = e.ts
    prev_step: int | None = None
    for _i, e in starts:
        step = e.step
        assert step is not None
        first = prev_step is None or step <= prev_step
        prev_step = step
        rows.append(_Row(e.ts, None, math.inf, step, 1.0, first))
    for k, row in enumerate(rows):
        nxt = rows[k + 1] if k + 1 < len(rows) else None
        same_next = nxt is not None and not nxt.first
        row.cap = max(min(nxt.start if nxt else math.inf, hi), min(max(row.start, lo), hi))
        if k in own_end:
            row.end, row.count = own_end[k], 1.0
        elif same_next:
            assert nxt is not None
            row.end, row.count = nxt.start, float(max(nxt.step - row.step, 1))
        else:
            row.known = False
        row.start = min(max(row.start, lo), hi)
        if row.end is not None:
            row.end = max(min(max(row.end, lo), hi), row.start)
    return rows


def _hung_spans(attempts: list[_Att], ideal: float | None) -> list[tuple[float, float]]:
    """The silences of the attempts that ended hung (§3 "Hung time"): not completed, not
    ended by a job_end without a status, and either killed for a hang (status ``hung``) or
    silent longer than the stall threshold (a ``hang_timeout`` on its job_start, else
    max(10 I, 60 s)) from its last step or interval event (not a teardown) to its end."""
    out = []
    for att in attempts:
        if att.status == "completed" or (att.by_job_end and att.status is None):
            continue
        timeouts = [
            e.hang_timeout
            for _, e in att.events
            if e.kind == "job_start" and e.hang_timeout is not None
        ]
        limit = timeouts[-1] if timeouts else max(10 * ideal if ideal else 0.0, 60.0)
        killed = att.status == "hung"
        progress = [
            e.ts
            for _, e in att.events
            if e.kind in ("step_start", "step_end")
            or ((mark := interval_base(e.kind)) is not None and mark[0] != "teardown")
        ]
        end = att.eff_end
        if not progress or max(progress) >= end:  # (no silence after its last progress)
            continue
        if not killed and end - att.eff_start <= limit:
            continue
        newest = max(progress)
        if killed or end - newest > limit:
            out.append((max(newest, att.eff_start), end))
    return out


def reference_report(
    events: list[Event],
    *,
    ideal_step_time: float | None = None,
    window: tuple[float, float] | None = None,
    hung: bool = True,
) -> RefReport:
    """The report of ``events`` (``window``: of that span); ``hung``: whether the untracked
    silences of attempts that ended hung are moved to ``hung`` (not in the report of such a
    silence that measures them)."""
    attempts = _attempts(events)
    final = attempts[-1]
    scheduled = [e.ts for e in events if e.kind == "job_scheduled"]
    t_start = attempts[0].eff_start
    if scheduled and min(scheduled) < t_start:
        t_start = min(scheduled)
    t_end = max(final.eff_end, t_start)
    lo, hi = t_start, t_end
    if window is not None:
        lo, hi = max(lo, window[0]), min(hi, window[1])
        hi = max(hi, lo)
    buckets: dict[str, float] = {}

    def add(name: str, v: float) -> None:
        buckets[name] = buckets.get(name, 0.0) + v

    if scheduled:
        add("queued", _clip(min(scheduled), attempts[0].eff_start, lo, hi))
    for a, b in itertools.pairwise(attempts):
        add("recovery", _clip(a.eff_end, b.eff_start, lo, hi))

    # per attempt: intervals, rows, segments
    segments: list[tuple[int, list[_Row], int]] = []  # (attempt index, rows, restore point)
    per_attempt: list[tuple[list[tuple[float, float, str]], list[_Row]]] = []
    restored_safe: list[int] = []
    committed: list[int] = []
    saved: list[int] = []
    for ai, att in enumerate(attempts):
        for _, e in att.events:
            if e.kind == "checkpoint_committed":
                committed.append(e.step or 0)
            elif e.kind == "checkpoint_save_end":
                saved.append(e.step or 0)
        evs = _leader(att)
        ivs = _intervals(evs, att.eff_start, att.eff_end)
        pieces = _owner_pieces(ivs)
        unclean = [p for p in pieces if p[2] != "data_loading"]
        rows = _rows(evs, att.eff_start, att.eff_end)
        restores = [e for _, e in evs if e.kind.startswith("checkpoint_restore")]
        restored_safe += [e.step or 0 for e in restores if e.kind == "checkpoint_restore_end"]
        for row in rows:
            if row.known:
                assert row.end is not None
                row.d = row.end - row.start - _covered(pieces, row.start, row.end)
                row.clean = not row.first and _covered(unclean, row.start, row.end) == 0.0
        starts_idx = [k for k, r in enumerate(rows) if r.first] + [len(rows)]
        for j in range(len(starts_idx) - 1):
            seg = rows[starts_idx[j] : starts_idx[j + 1]]
            prev_start = rows[starts_idx[j] - 1].start if starts_idx[j] > 0 else -math.inf
            in_gap = [e for e in restores if prev_start < e.ts <= seg[0].start]
            ends = [e for e in in_gap if e.kind == "checkpoint_restore_end"]
            chosen = (ends or in_gap)[-1] if in_gap else None
            point = (chosen.step or 0) if chosen is not None else seg[0].step - 1
            segments.append((ai, seg, point))
        per_attempt.append((pieces, rows))
        for x, y, bucket in pieces:
            add(bucket, _clip(x, y, lo, hi))

    # ideal step time
    ideal = ideal_step_time
    if ideal is None:
        clean = [r.d / r.count for _, rows in per_attempt for r in rows if r.clean]
        n = len(clean)
        if n >= 5:
            w = 100 if n >= 1000 else max(5, n // 10)
            blocks = [clean[i : i + w] for i in range(0, (n // w) * w, w)]
            ideal = min(statistics.median(b) for b in blocks)

    # typical step time, open rows, startup
    for ai, seg, _point in segments:
        pieces = per_attempt[ai][0]
        vals = sorted(r.d / r.count for r in seg[1:] if r.known)
        m = statistics.median(vals) if vals else ideal
        for k, r in enumerate(seg):
            if r.known:
                continue
            stride = seg[k - 1].count if k > 0 else 1.0
            end = r.start if m is None else max(r.start, min(r.start + m * stride, r.cap))
            r.end, r.count = end, stride
            r.d = max(0.0, end - r.start - _covered(pieces, r.start, end))
        if m is not None:
            seg[0].startup = max(0.0, seg[0].d - m * seg[0].count)

    # kept / wasted / at risk
    durable = committed or saved
    safe = float(max(durable + restored_safe, default=-math.inf))
    if final.by_job_end:
        safe = math.inf
    kept = kept_n = wasted = startup = at_risk = 0.0
    kept_count = wasted_count = 0.0
    step_time = [0.0] * len(attempts)
    for j, (ai, seg, _point) in enumerate(segments):
        keep = min((p for _, _, p in segments[j + 1 :]), default=math.inf)
        pieces = per_attempt[ai][0]
        for r in seg:
            assert r.end is not None
            fk, fs = _frac(keep, r.step, r.count), _frac(min(keep, safe), r.step, r.count)
            kept_count += fk * r.count
            wasted_count += (1 - fk) * r.count
            if r.d <= 0:
                continue
            a, b = min(max(r.start, lo), hi), min(max(r.end, lo), hi)
            w = min(1.0, max(0.0, (b - a - _covered(pieces, a, b)) / r.d))
            work = w * (r.d - r.startup)
            kept += fk * work
            kept_n += fk * w * r.count
            wasted += (1 - fk) * work
            at_risk += (fk - fs) * work
            startup += w * r.startup
            step_time[ai] += w * r.d
    productive = min(kept, kept_n * ideal) if ideal is not None else kept
    add("productive", productive)
    add("slowdown", kept - productive)
    add("wasted", wasted)
    add("startup", startup)
    for ai, att in enumerate(attempts):
        pieces = per_attempt[ai][0]
        span = _clip(att.eff_start, att.eff_end, lo, hi)
        add("untracked", span - sum(_clip(x, y, lo, hi) for x, y, _ in pieces) - step_time[ai])
    if not segments and (committed or saved) and ideal is not None and (lo, hi) == (t_start, t_end):
        # a log without steps: net checkpoint progress x I, out of the untracked time (§7)
        all_restores = [
            e.step or 0
            for att in attempts
            for _, e in _leader(att)
            if e.kind.startswith("checkpoint_restore")
        ]
        progress = max(0, max(committed + saved) - min(all_restores, default=0))
        moved = min(progress * ideal, buckets.get("untracked", 0.0))
        add("untracked", -moved)
        add("productive", moved)
        kept_count = progress
    for start, stop in _hung_spans(attempts, ideal) if hung else []:
        silent_lo, silent_hi = max(start, lo), min(stop, hi)
        if silent_hi <= silent_lo:
            continue
        silence = reference_report(
            events, ideal_step_time=ideal_step_time, window=(silent_lo, silent_hi), hung=False
        )
        moved = min(silence.buckets.get("untracked", 0.0), buckets.get("untracked", 0.0))
        add("untracked", -moved)
        add("hung", moved)
    return RefReport(
        total=hi - lo,
        buckets={k: v for k, v in buckets.items() if v > 1e-12},
        at_risk=max(at_risk, 0.0),
        ideal=ideal,
        kept=round(kept_count),
        wasted=round(wasted_count),
    )
