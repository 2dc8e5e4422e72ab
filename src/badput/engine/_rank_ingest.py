"""The per-rank view's ingest: events routed into each (attempt, rank)'s columns
(:class:`~badput.engine._rank_stream.RankStream`), a batch's columns cut for all its
streams at once; and the streams of a later read added to those of an earlier one."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from badput.engine._batch import Batch
from badput.engine._rank_stream import RankStream, SectionLog
from badput.engine._stream import STEP_LIMIT
from badput.events import (
    KIND_CODE,
    KIND_NAMES,
    MAX_INT,
    NAMED_INTERVAL_KINDS,
    Event,
    Kind,
    LeanEvent,
    bucket_of,
    interval_base,
)

#: The streams of a tracker, by (attempt, rank).
Streams = dict[tuple[str | None, int], RankStream]

#: Batches of at most this many events are ingested event by event (cheaper than the
#: few dozen numpy calls of a batch).
SMALL_RUN = 64


def stream_of(streams: Streams, key: tuple[str | None, int]) -> RankStream:
    s = streams.get(key)
    if s is None:
        s = streams[key] = RankStream(key[0], key[1])
    return s


def absorb_stream(mine: RankStream, theirs: RankStream) -> None:
    """Add to ``mine`` what ``theirs`` read of the same (attempt, rank), later."""
    mine.host = mine.host or theirs.host
    for name in ("step_ts", "end_ts", "extra_ts", "pair_ts"):
        getattr(mine, name).extend(getattr(theirs, name))
    mine.step_no.extend(theirs.step_no.column())
    _append_codes(mine, theirs)
    for name, log in theirs.sections.items():
        m = mine.sections.setdefault(name, SectionLog())
        m.count += log.count
        m.parts.extend(log.parts)
        m.periods = sorted(m.periods + log.periods)
        m.opens = sorted(m.opens + log.opens)
        m.last = max(m.last, log.last)
        m.see_open(log.open_ts, log.open_since)
    mine.first_ts = min(mine.first_ts, theirs.first_ts)
    mine.last_ts = max(mine.last_ts, theirs.last_ts)
    mine.worker_pids |= theirs.worker_pids
    for pid, ts in theirs.pid_seen.items():
        mine.pid_seen[pid] = max(ts, mine.pid_seen.get(pid, -math.inf))
    mine.changes += 1


def _append_codes(mine: RankStream, theirs: RankStream) -> None:
    """Append ``theirs``'s pair codes to ``mine``'s, in ``mine``'s bucket numbering.

    A shared read's worker numbers its buckets on its own; its marks (a million in half
    of a large data-load log) are renumbered with one table lookup, not one Python call
    each. Buckets new to ``mine`` are numbered in the order of their first mark, as
    taking the marks one by one would."""
    if not len(theirs.pair_code):
        return
    codes = np.frombuffer(theirs.pair_code, dtype=np.int32)
    buckets = codes >> 1
    seen, first = np.unique(buckets, return_index=True)
    names = {i: name for name, i in theirs.names.items()}
    remap = np.zeros(int(seen[-1]) + 1, np.int32)
    for b in seen[np.argsort(first)].tolist():  # in order of first sight
        remap[b] = mine.code(names[b])
    mine.pair_code.frombytes((2 * remap[buckets] + (codes & 1)).astype(np.int32).tobytes())


def stream_key(attempt: object, rank: object) -> tuple[str | None, int]:
    """The stream of a writer: attempt ids as text (0 and "0" are one), rank None is 0."""
    return (None if attempt is None else str(attempt), cast("int | None", rank) or 0)


def _pid(key: tuple[object, object, object]) -> int | None:
    return cast("int | None", key[2])


def _role(kind: str) -> int:
    if kind == Kind.STEP_START:
        return _STEP_START
    if kind == Kind.STEP_END:
        return _STEP_END
    if kind in (Kind.DATA_LOADING_START, Kind.DATA_LOADING_END):
        return _LOAD
    split = interval_base(kind)
    if split is not None and split[0] not in NAMED_INTERVAL_KINDS:
        return _MARK  # its bucket is its kind's
    if kind == Kind.SECTION_SUMMARY or split is not None:
        return _ROW  # a named interval (its bucket is in ``name``), a summary
    return _SEE


# What ingest does with each kind (indexed by ``Batch.kind``: an unknown kind, -1, is the
# last, only seen). The last three are "seen" (a heartbeat, a lifecycle event...): they stretch the
# stream's span and say its process is alive.
_STEP_START, _STEP_END, _LOAD, _MARK, _SEE, _ROW = range(6)
_N_ROLES = 6
_LOAD_START_CODE = KIND_CODE[Kind.DATA_LOADING_START]
_ROLE = np.array([*(_role(k) for k in KIND_NAMES), _SEE], np.int8)
#: ``(base, is_start)`` of each interval kind, by kind code.
_SPLIT: dict[int, tuple[str, bool]] = {
    i: split for i, k in enumerate(KIND_NAMES) if (split := interval_base(k)) is not None
}
#: The buckets of unnamed interval marks (role ``_MARK``), and by kind code: each mark's
#: index in it and whether it is a start.
_MARK_BASES = sorted({_SPLIT[i][0] for i in range(len(KIND_NAMES)) if _ROLE[i] == _MARK})
_MARK_BASE = np.array(
    [_MARK_BASES.index(_SPLIT[i][0]) if _ROLE[i] == _MARK else 0 for i in range(len(KIND_NAMES))],
    np.int64,
)
_MARK_STARTS = np.array(
    [int(_SPLIT[i][1]) if _ROLE[i] == _MARK else 0 for i in range(len(KIND_NAMES))], np.int32
)


_blocking = attrgetter("blocking")
_host = attrgetter("host")
_EMPTY_CODES = np.zeros(0, np.int32)


def _is_none(value: object) -> bool:
    return value is None


def ingest_into(streams: Streams, batch: Batch, job: str | None) -> bool:
    """Route a run of events (consecutive lines of one source), as columns, into the
    streams' columns; ``job``: keep only its events (``None``: all).

    Steps, step ends, blocking loads and heartbeats (the bulk) are cut out of the
    batch's columns for all its streams at once (a batch of 10,000 attempts' files
    costs a few numpy calls, and a few appends per stream); only the rare kinds
    (section summaries, named intervals, overlapped loads) are looked at one event
    at a time. Everything is paired and summed at query time, vectorised. A batch
    of a few events takes :func:`_ingest_few` instead (same result). Returns whether
    a stream changed.
    """
    if not batch.n:
        return False
    if batch.n <= SMALL_RUN:
        return _ingest_few(streams, batch.events, job)
    keep = None if job is None else batch.same_job(job)
    keys = batch.keys
    group = batch.group
    if keep is None:
        present = range(len(keys))  # group indices are in order of first appearance
    else:
        kept_groups = group[keep]
        if not len(kept_groups):
            return False
        uniq, first = np.unique(kept_groups, return_index=True)
        present = uniq[np.argsort(first)].tolist()
    # One stream per (attempt, rank), created in order of first appearance; several
    # raw keys may share one (attempt 0 and "0", rank None and 0, two pids).
    slot_of: dict[int, int] = {}  # group -> slot
    slot_by_key: dict[tuple[str | None, int], int] = {}
    slots: list[RankStream] = []
    for g in present:
        attempt, rank, _ = keys[g]
        key = stream_key(attempt, rank)
        i = slot_by_key.get(key, -1)
        if i < 0:
            i = slot_by_key[key] = len(slots)
            slots.append(stream_of(streams, key))
        slot_of[g] = i
    lookup = np.full(len(keys), len(slots), np.int32)  # len(slots): not kept
    for g, i in slot_of.items():
        lookup[g] = i
    slot = lookup[group]
    if keep is not None:
        slot[~keep] = len(slots)
    _hosts(batch, slot, slots)
    _ingest_columns(batch, slot, slots, slot_of)
    return True


def _ingest_columns(
    batch: Batch,
    slot: npt.NDArray[np.int32],
    slots: list[RankStream],
    slot_of: dict[int, int],
) -> None:
    """Add the batch's events to the streams ``slots`` (``slot``: each event's; one
    past the last: not kept), all streams at once: each column is cut out of the
    batch's for every stream in one pass, and handed to each stream as bytes."""
    n_slots = len(slots)
    events, ts = batch.events, batch.ts
    roles = _ROLE[batch.kind]
    dropped = slot == n_slots
    if dropped.any():
        roles[dropped] = _N_ROLES  # not kept: no role
    by_role = np.argsort(roles, kind="stable")  # each role's events, in order
    ends = [0, *np.cumsum(np.bincount(roles, minlength=_N_ROLES + 1)).tolist()]

    def of(role: int) -> npt.NDArray[np.intp]:
        return by_role[ends[role] : ends[role + 1]]

    _step_starts(batch, slot, slots, slot_of, of(_STEP_START))
    step_ends = of(_STEP_END)
    _hand(slots, slot, step_ends, ("end_ts", ts[step_ends]))
    # Marks to pair: blocking loads, other unnamed intervals, and single events (rows).
    loads = of(_LOAD)
    rows = of(_ROW)
    seen = by_role[ends[_MARK] : ends[_ROW + 1]]  # heartbeats, lifecycle, marks, rows
    load_codes = _EMPTY_CODES
    if len(loads):
        blocking = (
            []
            if batch.loads_plain()
            else list(map(_blocking, map(events.__getitem__, loads.tolist())))
        )
        if blocking.count(None) != len(blocking):  # blocking or overlapped: single events
            plain = np.fromiter(map(_is_none, blocking), np.bool_, len(blocking))
            rows = np.sort(np.concatenate((rows, loads[~plain])), kind="stable")  # two runs
            seen = np.concatenate((seen, loads[~plain]))
            loads = loads[plain]
        load_codes = (batch.kind[loads] == _LOAD_START_CODE).astype(np.int32)
    marks = of(_MARK)
    mark_codes, row_at, row_codes = _mark_codes(batch, slot, slots, marks, rows)
    pair_at = np.concatenate((loads, marks, np.array(row_at, np.intp)))
    pair_code = np.concatenate((load_codes, mark_codes, np.array(row_codes, np.int32)))
    if len(pair_at):
        order = np.argsort(pair_at, kind="stable")  # in the order they were written
        pair_at, pair_code = pair_at[order], pair_code[order]
        _hand(slots, slot, pair_at, ("pair_ts", ts[pair_at]), ("pair_code", pair_code))
    if len(seen):
        _seen(slots, slot_of, batch, seen)
    for s in slots:
        s.changes += 1


def _step_starts(
    batch: Batch,
    slot: npt.NDArray[np.int32],
    slots: list[RankStream],
    slot_of: dict[int, int],
    starts: npt.NDArray[np.intp],
) -> None:
    """The batch's step starts at ``starts`` (its events' indices) to their streams, and
    their processes as ones that made progress."""
    if not len(starts):
        return
    no, ok = batch.steps(starts)
    # out of range: the accounting reports it (a diagnostic); not a step here
    lo, hi = int(no.min()), int(no.max())
    if not ok.all() or lo < -MAX_INT or hi > MAX_INT:
        ok &= (no >= -MAX_INT) & (no <= MAX_INT)
        starts, no = starts[ok], no[ok]
        lo, hi = (int(no.min()), int(no.max())) if len(no) else (0, 0)
    _hand(slots, slot, starts, ("step_ts", batch.ts[starts]))
    _hand_steps(slots, slot, starts, no, fits=lo >= -STEP_LIMIT and hi < STEP_LIMIT)
    if len(starts):
        keys = batch.keys
        one = len(keys) == 1  # (else the groups present, in order: O(n), no sort)
        present = [0] if one else np.flatnonzero(np.bincount(batch.group[starts])).tolist()
        for g in present:
            slots[slot_of[g]].worker_pids.add(_pid(keys[g]))


def _mark_codes(
    batch: Batch,
    slot: npt.NDArray[np.int32],
    slots: list[RankStream],
    marks: npt.NDArray[np.intp],
    rows: npt.NDArray[np.intp],
) -> tuple[npt.NDArray[np.int32], list[int], list[int]]:
    """The pair codes of the unnamed interval marks at ``marks``, and of the rows at
    ``rows`` to be paired (where they are, their codes): rows are looked at one by one.

    Buckets are numbered per stream in the order they first appear (marks and rows
    alike): the first mark of each (stream, bucket) and the rows, in order."""
    mark_codes = _EMPTY_CODES
    row_at: list[int] = []
    row_codes: list[int] = []
    if len(marks) or len(rows):
        events = batch.events
        mark_kind = batch.kind[marks]
        mark_base = _MARK_BASE[mark_kind]
        mark_key = slot[marks].astype(np.int64) * len(_MARK_BASES) + mark_base
        uniq, first, inverse = np.unique(mark_key, return_index=True, return_inverse=True)
        firsts = marks[first]
        todo = sorted(
            [
                *zip(
                    firsts.tolist(),
                    slot[firsts].tolist(),
                    mark_base[first].tolist(),
                    range(len(uniq)),
                    strict=True,
                ),
                *((i, int(slot[i]), -1, -1) for i in rows.tolist()),
            ]
        )
        codes = [0] * len(uniq)
        for i, slot_i, base, j in todo:
            s = slots[slot_i]
            if j >= 0:
                codes[j] = s.code(_MARK_BASES[base])
            else:
                code = _other(s, events[i])
                if code is not None:
                    row_at.append(i)
                    row_codes.append(code)
        bucket = np.array(codes, np.int32)[inverse.reshape(-1)]
        mark_codes = 2 * bucket + _MARK_STARTS[mark_kind]
    return mark_codes, row_at, row_codes


def _hand(
    slots: list[RankStream],
    slot: npt.NDArray[np.int32],
    at: npt.NDArray[np.intp],
    *columns: tuple[str, npt.NDArray[Any]],
) -> None:
    """Append the values of the events at ``at`` (in order) to each one's stream's
    ``columns`` (name, values): one cut of bytes per stream."""
    if not len(at):
        return
    if len(slots) == 1:
        for name, values in columns:
            getattr(slots[0], name).frombytes(values.tobytes())
        return
    order, cuts = _by_stream(slot, at, len(slots))
    for name, values in columns:
        data = values[order].tobytes()
        width = values.itemsize
        for i, a, b in cuts:
            getattr(slots[i], name).frombytes(data[a * width : b * width])


def _hand_steps(
    slots: list[RankStream],
    slot: npt.NDArray[np.int32],
    at: npt.NDArray[np.intp],
    no: npt.NDArray[np.int64],
    *,
    fits: bool,
) -> None:
    """Append the step numbers ``no`` of the events at ``at`` to each one's stream
    (``fits``: whether every one is within ``STEP_LIMIT``, as ``PackedInts.fits``)."""
    if not len(at):
        return
    if len(slots) == 1:
        slots[0].step_no.extend(no, fits=fits)
        return
    order, cuts = _by_stream(slot, at, len(slots))
    ordered = no[order]
    for i, a, b in cuts:
        slots[i].step_no.extend(ordered[a:b], fits=fits)


def _by_stream(
    slot: npt.NDArray[np.int32], at: npt.NDArray[np.intp], n_slots: int
) -> tuple[npt.NDArray[np.intp], list[tuple[int, int, int]]]:
    """The events at ``at`` ordered by stream (stable), and each present stream's
    ``(slot, begin, end)`` in that order."""
    owner = slot[at]
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=n_slots)
    bounds = np.cumsum(counts).tolist()
    cuts = [(i, bounds[i] - int(counts[i]), bounds[i]) for i in np.flatnonzero(counts).tolist()]
    return order, cuts


def _seen(
    slots: list[RankStream],
    slot_of: dict[int, int],
    batch: Batch,
    at: npt.NDArray[np.intp],
) -> None:
    """Events other than steps and blocking loads: each stream's span, and the newest
    event of each process (writer)."""
    t = batch.ts[at]
    if len(batch.keys) == 1:
        newest = [(0, float(t.min()), float(t.max()))]
    else:
        g = batch.group[at]
        order = np.lexsort((t, g))
        g, t = g[order], t[order]
        head = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
        tail = np.concatenate((head[1:], [len(g)])) - 1
        newest = list(zip(g[head].tolist(), t[head].tolist(), t[tail].tolist(), strict=True))
    keys = batch.keys
    for g_i, lo, hi in newest:
        s = slots[slot_of[g_i]]
        s.first_ts, s.last_ts = min(s.first_ts, lo), max(s.last_ts, hi)
        pid = _pid(keys[g_i])
        if hi > s.pid_seen.get(pid, -math.inf):
            s.pid_seen[pid] = hi


def _ingest_few(streams: Streams, events: Sequence[Event | LeanEvent], job: str | None) -> bool:
    """:func:`ingest_into` one event at a time (a short run)."""
    writer: tuple[object, object, object] | None = None
    s: RankStream | None = None
    changed: list[RankStream] = []
    step_start, step_end, heartbeat = Kind.STEP_START, Kind.STEP_END, Kind.HEARTBEAT
    load_start = Kind.DATA_LOADING_START
    loads = (load_start, Kind.DATA_LOADING_END)
    for ev in events:
        if job is not None and ev.job != job:
            continue
        if s is None or writer != (ev.attempt, ev.rank, ev.pid):
            writer = (ev.attempt, ev.rank, ev.pid)
            s = stream_of(streams, stream_key(ev.attempt, ev.rank))
            changed.append(s)
        if s.host is None:
            s.host = ev.host
        kind = ev.kind
        if kind == step_start:
            step = ev.step
            # out of range: the accounting reports it (a diagnostic); not a step here
            if step is None or not -MAX_INT <= step <= MAX_INT:
                continue
            s.step_ts.append(ev.ts)
            s.step_no.append(step)
            s.worker_pids.add(ev.pid)
        elif kind == step_end:
            s.end_ts.append(ev.ts)
        elif kind in loads and ev.blocking is None:
            s.pair_ts.append(ev.ts)
            s.pair_code.append(int(kind == load_start))  # data_loading (index 0), start
        else:
            ts = ev.ts
            s.first_ts = min(s.first_ts, ts)
            s.last_ts = max(s.last_ts, ts)
            if ts > s.pid_seen.get(ev.pid, -math.inf):
                s.pid_seen[ev.pid] = ts
            if kind != heartbeat:
                code = _other(s, ev)
                if code is not None:
                    s.pair_ts.append(ts)
                    s.pair_code.append(code)
    for s in changed:
        s.changes += 1
    return bool(changed)


def _hosts(
    batch: Batch,
    slot: npt.NDArray[np.int32],
    slots: list[RankStream],
) -> None:
    """A stream's host: that of its first event that names one (however the log is
    cut in batches). Looked for only while a stream has none: first in each stream's
    first event (where a recorder's file names it), then in all its events."""
    missing = {i for i, s in enumerate(slots) if s.host is None}
    if not missing or (batch.fields is not None and "host" not in batch.fields):
        return  # (no event of the batch names a host: an archive's rows are not made)
    if batch.writer is not None:  # one writer's events: its host is every one's
        for i in missing if batch.writer[2] is not None else ():
            slots[i].host = batch.writer[2]
        return
    if batch.writers is not None:  # each event's writer, its host with it: no event made
        index, writers = batch.writers
        named = np.array([w[2] is not None for w in writers], np.bool_)[index]
        at = np.flatnonzero(named & np.isin(slot, list(missing)))
        owner, first = np.unique(slot[at], return_index=True)
        for i, pos in zip(owner.tolist(), at[first].tolist(), strict=True):
            slots[i].host = writers[int(index[pos])][2]
        return
    events = batch.events
    kept = np.flatnonzero(slot < len(slots))
    owner = slot[kept]
    runs = kept[np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))]
    unnamed: set[int] = set()
    for i, pos in zip(slot[runs].tolist(), runs.tolist(), strict=True):
        if i in missing:
            missing.discard(i)
            host = events[pos].host
            if host is None:
                unnamed.add(i)
            else:
                slots[i].host = host
            if not missing:
                break
    if not unnamed or (batch.fields is not None and "host" not in batch.fields):
        return
    hosts = list(map(_host, events))
    if hosts.count(None) == batch.n:  # no event of the batch names a host
        return
    named = np.fromiter(map(is_not, hosts, repeat(None)), np.bool_, batch.n)
    named &= np.isin(slot, list(unnamed))
    at = np.flatnonzero(named)
    owner, first = np.unique(slot[at], return_index=True)
    for i, pos in zip(owner.tolist(), at[first].tolist(), strict=True):
        slots[i].host = hosts[pos]


def _other(s: RankStream, ev: Event | LeanEvent) -> int | None:
    """A section summary, an interval mark other than a blocking data load, or an
    overlapped load: its pair code when it is to be paired, else ``None``."""
    kind = ev.kind
    if kind == Kind.SECTION_SUMMARY:
        log = s.sections.get(ev.name or "")
        if log is None:
            log = s.sections[ev.name or ""] = SectionLog()
        n = ev.count or 0
        if n:
            s.worker_pids.add(ev.pid)
        log.count += n
        log.parts.append(ev.seconds or 0.0)
        p50 = (ev.quantiles or {}).get("p50")
        if n:
            log.periods.append((ev.ts, n, math.nan if p50 is None else p50))
        if ev.open_since is not None:
            log.opens.append((ev.ts, ev.open_since))
        if ev.last is not None:
            log.last = max(log.last, ev.last)
        log.see_open(ev.ts, ev.open_since)
        return None
    split = interval_base(kind)
    if split is None:
        return None
    base, is_start = split
    if base == "data_loading" and ev.blocking is False:
        s.extra_ts.append(ev.ts)  # overlapped loads: progress, but not a wait
        return None
    return 2 * s.code(bucket_of(base, ev.name)) + is_start
