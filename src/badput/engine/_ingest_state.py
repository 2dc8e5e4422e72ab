"""What ingest keeps of one job's events, and what is done with that state as a whole.

:class:`IngestState` holds the streams (one per (attempt, rank)), the lifecycle events,
the steps of checkpoints, the id-less events' times and the diagnostics found so far; it
joins another read's state to its own (a parallel read), moves a source's line numbers,
gives a view as of a time, and pickles packed. The ingest itself, which fills it batch by
batch, is its subclass :class:`~badput.engine._ingest.Ingestor`.
"""

from __future__ import annotations

import bisect
import math
from array import array
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import numpy as np

from badput.engine._pack import pack, unpack
from badput.engine._stream import NameTable, Stream, join_writers

__all__ = [
    "MAX_DIAGNOSTICS_PER_CODE",
    "DiagnosticLog",
    "IngestState",
    "LifecycleEvent",
    "unknown_kind_message",
]

# Diagnostics kept per code; the rest are counted.
MAX_DIAGNOSTICS_PER_CODE = 20


class LifecycleEvent(NamedTuple):
    """A job_start, job_end, attempt_end or job_scheduled, as the partition reads it (a
    tuple: made for every attempt's start and end, 0.3 µs against 1.2 µs as a frozen
    dataclass)."""

    ts: float
    seq: int
    kind: str
    attempt: str | None
    host: str | None
    rank: int | None
    status: str | None
    exit_code: int | None
    source: str | None
    line: int | None
    hang_timeout: float | None = None  # a launcher's job_start (``badput run --hang-timeout``)


#: One diagnostic as ingest keeps it: (message, file, line).
Entry = tuple[str, str | None, int | None]


def place(entry: Entry) -> tuple[bool, str, int]:
    """Where a diagnostic is in the job: its file (by path: the order a read goes through a
    job's files), then its line; those of no file (events given directly) first."""
    _message, source, line = entry
    return source is not None, source or "", -1 if line is None else line


@dataclass
class DiagnosticLog:
    """Diagnostics found while ingesting, capped per code (the rest counted), kept so that
    how the job's lines were cut into reads (slices, row groups, a parallel read's parts)
    changes nothing: each code keeps its first :data:`MAX_DIAGNOSTICS_PER_CODE` by
    :func:`place`, in that order, whatever order they were found in; :meth:`listed` gives
    the codes in the order of their first diagnostic's place.

    ``entries``: each code's kept diagnostics (:meth:`add`); ``firsts``: per (code, key)
    the first diagnostic by place (:meth:`add_first`: one per unknown kind, one per file
    holding another job's events); ``counts``: the diagnostics of each code in all."""

    entries: dict[str, list[Entry]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    firsts: dict[tuple[str, str], Entry] = field(default_factory=dict)

    def add(self, code: str, message: str, source: str | None, line: int | None) -> None:
        """Count a diagnostic; keep it if it is among its code's first by place."""
        self.counts[code] = self.counts.get(code, 0) + 1
        self._keep(code, (message, source, line))

    def _keep(self, code: str, entry: Entry) -> None:
        kept = self.entries.setdefault(code, [])
        if len(kept) >= MAX_DIAGNOSTICS_PER_CODE and place(entry) >= place(kept[-1]):
            return  # the usual past the cap: found in order, after those kept
        bisect.insort(kept, entry, key=place)
        if len(kept) > MAX_DIAGNOSTICS_PER_CODE:
            kept.pop()

    def add_first(
        self, code: str, key: str, message: str, source: str | None, line: int | None
    ) -> bool:
        """Keep the diagnostic if it is the first by place of ``key`` within ``code`` (not
        counted: the caller counts). Returns whether ``key`` is new."""
        entry = (message, source, line)
        known = self.firsts.get((code, key))
        if known is None or place(entry) < place(known):
            self.firsts[(code, key)] = entry
        return known is None

    def absorb(self, other: DiagnosticLog) -> None:
        """Add what another read found (its counts added: the caller corrects those of
        keys :meth:`add_first` met in both)."""
        for code, entries in other.entries.items():
            for entry in entries:
                self._keep(code, entry)
        for code, n in other.counts.items():
            self.counts[code] = self.counts.get(code, 0) + n
        for (code, key), entry in other.firsts.items():
            self.add_first(code, key, *entry)

    def shift_lines(self, source: str, by: int) -> None:
        """Move the line numbers of ``source`` by ``by`` (its order among the rest stays)."""

        def moved(entry: Entry) -> Entry:
            message, where, line = entry
            return (message, where, line + by) if where == source and line is not None else entry

        for entries in self.entries.values():
            entries[:] = [moved(e) for e in entries]
        self.firsts = {k: moved(e) for k, e in self.firsts.items()}

    def listed(self) -> list[tuple[str, list[Entry], int]]:
        """Each code's shown diagnostics (its first by place) and its count, the codes in
        the order of their first diagnostic's place (codes with none shown last)."""
        shown = {code: list(entries) for code, entries in self.entries.items()}
        for (code, _key), entry in self.firsts.items():
            shown.setdefault(code, []).append(entry)
        for entries in shown.values():
            entries.sort(key=place)
            del entries[MAX_DIAGNOSTICS_PER_CODE:]
        codes = [*shown, *(code for code in self.counts if code not in shown)]
        codes.sort(key=lambda c: (not shown.get(c), place(shown[c][0]) if shown.get(c) else ()))
        return [(code, shown.get(code, []), self.counts.get(code, 0)) for code in codes]


def unknown_kind_message(kind: str) -> str:
    return f"unknown event kind {kind!r} (kept, ignored by the accounting)"


_State = TypeVar("_State", bound="IngestState")


class IngestState:
    """What ingest keeps of one job's events (see the module docstring)."""

    def __init__(self, job: str | None, *, first_seq: int = 0) -> None:
        self.job = job
        self.streams: dict[tuple[str | None, int], Stream] = {}
        self.lifecycle: list[LifecycleEvent] = []
        self.checkpoints_saved = array("q")  # steps of checkpoint_save_end
        self.checkpoints_committed = array("q")  # steps of checkpoint_committed
        self.idless_ts = array("d")  # ts of non-step events without attempt id
        self.first_idless: tuple[str | None, int | None] | None = None  # where one was seen
        self.n_events = 0
        self.diagnostics = DiagnosticLog()
        self.unknown_kinds: dict[str, int] = {}
        self._seq = first_seq
        self._source_last_ts: dict[str, float] = {}
        self._by_raw: dict[tuple[object, int | None], Stream] = {}
        #: Interval buckets and sources by code (the marks' columns hold codes).
        self.buckets = NameTable()
        self.sources = NameTable()
        #: The recorded hang timeouts, as of the lifecycle list's identity and length
        #: (engine._hung: worked out once, not at each windowed report).
        self.hang_timeouts_memo: (
            tuple[tuple[int, int], dict[str | None, float], float | None] | None
        ) = None

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle keeps: the streams packed by field (:mod:`._pack`: a parallel
        read's worker sends its state of thousands of streams back in a few columns);
        ``_by_raw`` as places among them (it names the same streams)."""
        state = dict(vars(self))
        streams = list(self.streams.values())
        place = {id(s): i for i, s in enumerate(streams)}
        if any(id(s) not in place for s in self._by_raw.values()):
            return state  # not expected; pickled as it is
        state["streams"] = (list(self.streams), pack(streams))
        state["_by_raw"] = [(raw, place[id(s)]) for raw, s in self._by_raw.items()]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state["streams"], tuple):
            keys, packed = state["streams"]
            streams = unpack(packed)
            state["streams"] = dict(zip(keys, streams, strict=True))
            state["_by_raw"] = {raw: streams[i] for raw, i in state["_by_raw"]}
        vars(self).update(state)

    def shift_lines(self, source: str, by: int) -> None:
        """See ``Accountant.shift_lines``: every line number of ``source`` kept anywhere
        (diagnostics, lifecycle events, interval marks, the first id-less event)."""
        if not by:
            return

        def moved(where: str | None, line: int | None) -> int | None:
            return line + by if where == source and line is not None else line

        self.diagnostics.shift_lines(source, by)
        self.lifecycle = [
            e._replace(line=moved(e.source, e.line)) if e.source == source else e
            for e in self.lifecycle
        ]
        if self.first_idless is not None:
            where, line = self.first_idless
            self.first_idless = (where, moved(where, line))
        codes = self.sources.known([source])
        if not codes:
            return
        code = codes[0]
        for stream in self.streams.values():
            stream.marks.shift_lines(code, by)

    def absorb(self, other: IngestState) -> None:
        """Add the state of ``other``, which ingested *later* sources of the same job.

        Used to merge the work of processes that each read different files: the
        states concatenate. ``other``'s arrival numbers must all be above ours (give
        it a higher ``first_seq``), so ties in time still break by file order.
        """
        if other.job is not None and self.job is not None and other.job != self.job:
            raise ValueError(f"cannot merge job {other.job!r} into job {self.job!r}")
        self.job = self.job or other.job
        buckets = self.buckets.codes_of(other.buckets)
        sources = self.sources.codes_of(other.sources)
        for theirs in other.streams.values():  # their codes, in our tables
            theirs.marks.recode(buckets, sources)
        for key, theirs in other.streams.items():
            mine = self.streams.get(key)
            if mine is None:
                self.streams[key] = theirs
                continue
            mine.steps.ts.extend(theirs.steps.ts)
            mine.steps.step.extend(theirs.steps.step.column())
            mine.steps.is_end.extend(theirs.steps.is_end)
            mine.steps.recheck()
            mine.marks.append_columns(theirs.marks.raw())
            mine.marks.unsorted |= theirs.marks.unsorted
            mine.restores.extend(theirs.restores)
            mine.checkpoints.extend(theirs.checkpoints)
            mine.other_ts.extend(theirs.other_ts)
            mine.first_ts = min(mine.first_ts, theirs.first_ts)
            mine.last_ts = max(mine.last_ts, theirs.last_ts)
            join_writers(mine, theirs)
        # Their writers, to our streams (ours are kept: each names the stream of its key).
        # Not rebuilt whole: a parallel read merges dozens of parts of 10,000 attempts.
        for raw, st in other._by_raw.items():
            self._by_raw[raw] = self.streams[(st.attempt, st.rank)]
        self.lifecycle.extend(other.lifecycle)
        self.checkpoints_saved.extend(other.checkpoints_saved)
        self.checkpoints_committed.extend(other.checkpoints_committed)
        self.idless_ts.extend(other.idless_ts)
        self.first_idless = self.first_idless or other.first_idless
        self.n_events += other.n_events
        # An unknown kind is counted once (shown where it first appears: `add_first`).
        self.diagnostics.absorb(other.diagnostics)
        both = len(self.unknown_kinds.keys() & other.unknown_kinds.keys())
        if both:
            self.diagnostics.counts["unknown_kind"] -= both
        for kind, count in other.unknown_kinds.items():
            self.unknown_kinds[kind] = self.unknown_kinds.get(kind, 0) + count
        self._seq = max(self._seq, other._seq)
        newest = self._source_last_ts  # (the newer of the two: a part may end earlier)
        for source, ts in other._source_last_ts.items():
            if ts > newest.get(source, -math.inf):
                newest[source] = ts

    def newest_in(self, source: str) -> float | None:
        """See :meth:`Accountant.newest_in`."""
        return self._source_last_ts.get(source)

    def stream(self, attempt: str | None, rank: int) -> Stream:
        key = (attempt, rank)
        s = self.streams.get(key)
        if s is None:
            s = self.streams[key] = Stream(attempt=attempt, rank=rank)
        return s

    def malformed(self, message: str, source: str | None, line: int | None) -> None:
        self.diagnostics.add("malformed_line", message, source, line)

    @property
    def last_ts(self) -> float:
        return max((s.last_ts for s in self.streams.values()), default=-math.inf)

    def attempt_spans(self) -> dict[str | None, tuple[float, float]]:
        """First and last event time of every attempt key (all its streams), in one pass."""
        spans: dict[str | None, tuple[float, float]] = {}
        for s in self.streams.values():
            known = spans.get(s.attempt)
            if known is None:  # (one stream an attempt: a job of one rank)
                spans[s.attempt] = (s.first_ts, s.last_ts)
            else:
                spans[s.attempt] = (min(known[0], s.first_ts), max(known[1], s.last_ts))
        return spans

    def as_of(self: _State, t: float) -> _State:
        """A copy of the state with every event stamped after ``t`` left out (ACCOUNTING.md
        §9.10: for a report ``--now t`` later events do not exist). O(state)."""
        out = type(self)(self.job)
        out.buckets, out.sources = self.buckets, self.sources
        for key, stream in self.streams.items():
            kept = stream.as_of(t)
            if kept.first_ts <= t:  # a stream all of whose events came later does not exist
                out.streams[key] = kept
        out.lifecycle = [e for e in self.lifecycle if e.ts <= t]
        out.checkpoints_saved = array("q")
        out.checkpoints_committed = array("q")
        for s in out.streams.values():
            for _ts, step, committed in s.checkpoints:
                (out.checkpoints_committed if committed else out.checkpoints_saved).append(step)
        idless = np.frombuffer(self.idless_ts, dtype=np.float64)
        out.idless_ts = array("d", idless[idless <= t].tobytes())
        out.first_idless = self.first_idless
        out.n_events = self.n_events
        out.diagnostics = self.diagnostics
        out.unknown_kinds = self.unknown_kinds
        return out

    def attempt_keys(self) -> list[str]:
        return sorted({s.attempt for s in self.streams.values() if s.attempt is not None})
