"""Attempts: the lives of a job's processes, rebuilt from lifecycle events (ACCOUNTING.md §1).

An attempt runs from its ``job_start`` (or first event) to its ``job_end``,
``attempt_end``, or last event. With attempt ids in the events, each id is an
attempt; without them, each ``job_start`` opens one, multi-host duplicates of a
start merged. Pure: reads the Ingestor's state, reports problems through ``diag``.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

import numpy as np

from badput.engine._ingest import Ingestor
from badput.engine._ingest_state import LifecycleEvent
from badput.engine._model import EndReason
from badput.events import Kind

__all__ = ["Attempt", "DiagnosticSink", "place_attempts", "reconstruct_attempts"]

_EPS = 1e-6
#: Lifecycle events in the order they happened (arrival breaks ties).
_TIME_ORDER = attrgetter("ts", "seq")
_END_KINDS: Final = frozenset((Kind.JOB_END, Kind.ATTEMPT_END))

DiagnosticSink = Callable[..., None]  # (code, message, file=None, line=None)


@dataclass(slots=True)
class Attempt:
    key: str | None  # stream key (None: events without attempt id)
    id: str | int
    start: float
    end: float  # end event ts, or last event
    end_reason: str
    ended: bool  # by job_end or attempt_end
    ended_by_job_end: bool
    status: str | None = None
    exit_code: int | None = None
    eff_start: float = 0.0  # after clipping overlaps (set by the partition)
    eff_end: float = 0.0
    # for attempts derived from job_start (no ids): the time range of their events
    range_lo: float = -math.inf
    range_hi: float = math.inf
    # ended by a job_end: the ranks that took part and have written no end of their own
    # yet (each rank of a job without launcher ends the job in turn; an end without a
    # rank, a launcher's, speaks for them all)
    open_ranks: tuple[int, ...] = ()


def _start_order(att: Attempt) -> tuple[float, str]:
    """Attempts in start order (ties by id)."""
    return att.start, str(att.id)


def reconstruct_attempts(ing: Ingestor, diag: DiagnosticSink) -> list[Attempt]:
    """The job's attempts in start order."""
    life = sorted(ing.lifecycle, key=_TIME_ORDER)
    explicit = ing.attempt_keys()
    if not explicit:
        return _derive_attempts(ing, life, diag)
    by_key: dict[str, list[LifecycleEvent]] = defaultdict(list)
    for e in life:
        if e.attempt is not None:
            by_key[e.attempt].append(e)
    spans = ing.attempt_spans()
    job_start = Kind.JOB_START
    attempts: list[Attempt] = []
    for key in explicit:
        starts = [e.ts for e in by_key.get(key, ()) if e.kind == job_start]
        first_ts, last_ts = spans[key]
        start = min(starts) if starts else first_ts
        attempts.append(Attempt(key, attempt_id(key), start, last_ts, "last_event", False, False))
    # Id-less end events (a launcher that writes no id) end the attempt running at their
    # time, in time order with the attempt's own: an id-less job_end after its attempt_end
    # moves the end, as the same event with the id does.
    extra: dict[int, list[LifecycleEvent]] = {}
    ends = [e for e in life if e.attempt is None and e.kind in _END_KINDS]
    if ends:
        in_order = sorted(attempts, key=_start_order)
        starts = [a.start for a in in_order]
        for e in ends:
            extra.setdefault(id(_attempt_at(in_order, starts, e.ts)), []).append(e)
    stream_ranks: dict[str | None, set[int]] = defaultdict(set)
    for a, r in ing.streams:
        stream_ranks[a].add(r)
    for key, att in zip(explicit, attempts, strict=True):
        evs: Sequence[LifecycleEvent] = by_key.get(key, ())
        more = extra.get(id(att))
        if more:
            evs = sorted([*evs, *more], key=_TIME_ORDER)
        _end_attempt(att, evs, att.end, diag)
        att.open_ranks = _open_ranks(att, evs, stream_ranks.get(key, set()))
    attempts.sort(key=_start_order)
    idless = [st for (a, _r), st in ing.streams.items() if a is None]
    n_idless = sum(len(st.steps) + len(st.marks) for st in idless)
    if n_idless and ing.first_idless is not None:
        diag(
            "events_without_attempt",
            f"{n_idless} step and interval events carry no attempt id in a log whose "
            "other events do; they are not accounted (give every writer an attempt id)",
            *ing.first_idless,
        )
    return attempts


def attempt_id(key: str) -> str | int:
    """The id as reported: numeric ids as integers ("007" stays a string)."""
    numeric = key.isascii() and key.isdigit() and len(key) <= 15  # not "²", not 5,000 digits
    return int(key) if numeric and (key == "0" or not key.startswith("0")) else key


def _end_attempt(
    att: Attempt, evs: Sequence[LifecycleEvent], last_ts: float, diag: DiagnosticSink
) -> None:
    """End ``att`` by its end events ``evs`` (in time order); report its events after the
    end (``last_ts``: its last event)."""
    for e in evs:
        if e.kind in _END_KINDS:
            _apply_end(att, e)
    if att.ended and last_ts > att.end + _EPS:
        diag(
            "events_out_of_order",
            f"attempt {att.id}: events up to {last_ts - att.end:.3f}s after its "
            f"{'job_end' if att.ended_by_job_end else 'attempt_end'} (ignored)",
        )


def _apply_end(att: Attempt, e: LifecycleEvent) -> None:
    """Apply end event ``e`` (end events come in time order). The first end event ends the
    attempt; every later ``job_end`` moves the end to it: a launcher giving up after the
    last failure (``attempt_end``, then ``job_end``), or each rank ending the job in turn
    (the job ends at its last ``job_end``, ACCOUNTING.md §2)."""
    if att.ended and e.kind != Kind.JOB_END:
        return
    att.ended = True
    att.end = e.ts
    att.ended_by_job_end = e.kind == Kind.JOB_END
    att.status = e.status or att.status
    att.exit_code = e.exit_code if e.exit_code is not None else att.exit_code
    if e.kind == Kind.JOB_END:
        att.end_reason = "job_end"
    else:
        att.end_reason = f"attempt_end:{e.status}" if e.status else "attempt_end"


def _open_ranks(att: Attempt, evs: Iterable[LifecycleEvent], ranks: set[int]) -> tuple[int, ...]:
    """The ranks of ``att`` (``ranks``: those of its streams, plus those its lifecycle
    events name) that wrote no end, when a ``job_end`` ended it: the job has ended only
    when each of them has (or an end without a rank, a launcher's, ended it for all)."""
    if not att.ended_by_job_end:
        return ()
    taking_part = set(ranks)
    ended: set[int] = set()
    for e in evs:
        if e.rank is not None:
            taking_part.add(e.rank)
        if e.kind in _END_KINDS:
            if e.rank is None:
                return ()
            ended.add(e.rank)
    return tuple(sorted(taking_part - ended))


def _derive_attempts(
    ing: Ingestor, life: list[LifecycleEvent], diag: DiagnosticSink
) -> list[Attempt]:
    """No attempt ids: each job_start opens an attempt, multi-host duplicates merged.

    Treated as the same log with ids would be (ACCOUNTING.md §9.6): a ``job_end`` after an
    ``attempt_end`` (a launcher with no restarts left) ends the job; events before the first
    ``job_start`` that include an end event form the first attempt, ended there.
    """
    idless = np.sort(
        np.concatenate(
            [np.frombuffer(ing.idless_ts, dtype=np.float64)]
            + [
                np.frombuffer(s.steps.ts, dtype=np.float64)
                for s in ing.streams.values()
                if s.attempt is None and len(s.steps)
            ]
        ),
        kind="stable",  # columns in time order: their runs merged
    )
    attempts: list[Attempt] = []
    seen: set[tuple[str | None, int | None]] = set()
    opened_by_end = False  # the first attempt was formed by an end before any job_start
    own: list[list[LifecycleEvent]] = []  # each attempt's lifecycle events
    for e in life:
        if e.kind == Kind.JOB_START:
            who = (e.host, e.rank)
            cur = attempts[-1] if attempts else None
            if cur is None or cur.ended or who in seen:
                attempts.append(
                    Attempt(None, len(attempts), e.ts, e.ts, "last_event", False, False)
                )
                own.append([])
                seen = set()
            seen.add(who)
            own[-1].append(e)
        elif e.kind in _END_KINDS:
            if not attempts:
                first = float(idless[0]) if idless.shape[0] else e.ts
                attempts.append(
                    Attempt(None, 0, min(first, e.ts), e.ts, "last_event", False, False)
                )
                own.append([])
                opened_by_end = True
            _apply_end(attempts[-1], e)
            own[-1].append(e)
    if opened_by_end and len(attempts) > 1 and attempts[0].ended_by_job_end:
        # A job_end before the first job_start ends that first attempt like an attempt_end
        # (§9.10): the job went on.
        attempts[0].ended_by_job_end = False
        attempts[0].end_reason = "attempt_end"
    if not attempts:
        if not len(idless):
            return []
        attempts.append(
            Attempt(None, 0, float(idless[0]), float(idless[-1]), "last_event", False, False)
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
            diag(
                "events_out_of_order",
                f"attempt {att.id}: events up to {last - att.end:.3f}s after its end (ignored)",
            )
        if att.ended_by_job_end and i < len(own):
            ranks = {
                s.rank
                for (a, _r), s in ing.streams.items()
                if a is None and s.last_ts >= att.range_lo and s.first_ts < att.range_hi
            }
            att.open_ranks = _open_ranks(att, own[i], ranks)
    return attempts


def _attempt_at(attempts: list[Attempt], starts: list[float], ts: float) -> Attempt:
    """The last attempt (in start order) started at or before ``ts`` (the first one for
    earlier times)."""
    return attempts[max(0, bisect.bisect_right(starts, ts) - 1)]


def place_attempts(
    attempts: list[Attempt], scheduled: float | None, now: float | None, diag: DiagnosticSink
) -> tuple[float, float, EndReason]:
    """Set each attempt's effective span (attempts never overlap in the partition: one that
    starts before the previous ended is counted from that end) and return the job's span
    and why it ends there: its ``job_end``, ``now`` (a live report), or its last event.

    ``scheduled``: the first ``job_scheduled`` time, where the job's span starts when it
    is earlier than the first attempt. A live report extends an attempt still running to
    ``now``; nothing runs past the job's end.
    """
    prev_end = -math.inf
    for att in attempts:
        att.eff_start = max(att.start, prev_end)
        if att.start < prev_end - _EPS:
            diag(
                "attempt_overlap",
                f"attempt {att.id} started {prev_end - att.start:.3f}s before the previous "
                "attempt ended; counted from that end",
            )
        att.eff_end = max(att.end, att.eff_start)
        prev_end = att.eff_end

    t_start = attempts[0].eff_start
    if scheduled is not None and scheduled < t_start:
        t_start = scheduled
    final = attempts[-1]
    end_reason: EndReason
    if final.ended_by_job_end:
        t_end, end_reason = final.eff_end, "job_end"
        if now is not None and now < t_end:
            t_end, end_reason = now, "now"
    elif now is not None:
        t_end, end_reason = now, "now"
        if not final.ended:
            final.eff_end = max(final.eff_end, now)
            final.end_reason = "now"
    else:
        t_end, end_reason = final.eff_end, "last_event"
    t_end = max(t_end, t_start)
    for att in attempts:
        att.eff_start = min(att.eff_start, t_end)
        att.eff_end = min(att.eff_end, t_end)
    return t_start, t_end, end_reason
