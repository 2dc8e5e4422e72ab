"""A run of events as columns: read once per batch, shared by every consumer of it.

The engine sees millions of events; a Python loop over them (even one doing little)
costs more than decoding them. :class:`Batch` pulls each field the engine needs out
of a run of events with C-level iteration (``map``/``attrgetter``/``np.fromiter``),
once, so that the :class:`~badput.engine._ingest.Ingestor` and the
:class:`~badput.engine._ranks.RankTracker` both work on numpy columns and look at
single events only for the rare kinds (lifecycle, checkpoints, sections...).

Events are grouped by the writer identity ``(attempt, rank, pid)`` as it appears in
the events (raw, before any normalisation): :attr:`Batch.group` gives each event's
index into :attr:`Batch.keys`. A file written by one process has one group.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import chain, repeat
from operator import attrgetter, eq, is_not
from typing import Any

import numpy as np
import numpy.typing as npt

from badput.events import KIND_CODE, DecodedColumns, Event, LeanEvent, Writer

__all__ = ["Batch", "JoinedRows"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I16 = npt.NDArray[np.int16]
BoolArray = npt.NDArray[np.bool_]

_STEP_START_CODE = KIND_CODE["step_start"]
_STEP_END_CODE = KIND_CODE["step_end"]
_LOAD_START_CODE = KIND_CODE["data_loading_start"]
_LOAD_END_CODE = KIND_CODE["data_loading_end"]

_ts = attrgetter("ts")
_kind = attrgetter("kind")
_job = attrgetter("job")
_attempt = attrgetter("attempt")
_rank = attrgetter("rank")
_pid = attrgetter("pid")
_step = attrgetter("step")
_name = attrgetter("name")
_blocking = attrgetter("blocking")

RawKey = tuple[object, object, object]  # (attempt, rank, pid) as written


class _KeyIndex(dict[RawKey, int]):
    def __missing__(self, key: RawKey) -> int:
        i = self[key] = len(self)
        return i


#: Events per run, on average, from which a batch's writers are looked up run by run.
_EVENTS_PER_RUN_MIN = 8


def _groups_by_run(
    attempts: list[Any],
    ranks: list[Any],
    pids: list[Any],
    index: _KeyIndex,
    runs: Sequence[tuple[int, int]],
) -> I32 | None:
    """The writer index of each event, looked up once per run where a run has one writer
    (a file written by one process: the usual file of a job of thousands of attempts);
    None when the runs are too short for that to pay. A run of several writers is looked
    up event by event; either way each writer's index is the one a lookup of every event
    in order gives (a writer is numbered when first met)."""
    n = len(attempts)
    if len(runs) * _EVENTS_PER_RUN_MIN > n:
        return None
    group = np.empty(n, np.int32)
    covered = 0
    for begin, end in runs:
        if begin != covered or end < begin:  # not runs one after the other: no shortcut
            return None
        covered = end
        if end == begin:
            continue
        a, r, p = attempts[begin:end], ranks[begin:end], pids[begin:end]
        size = end - begin
        if a.count(a[0]) == size and r.count(r[0]) == size and p.count(p[0]) == size:
            group[begin:end] = index[a[0], r[0], p[0]]
        else:
            group[begin:end] = np.fromiter(
                map(index.__getitem__, zip(a, r, p, strict=True)), np.int32, size
            )
    return group if covered == n else None


Row = Event | LeanEvent


class JoinedRows(Sequence[Row]):
    """The events of a read's runs, one after the other: a list of them, or, where a run's
    events are not a list (an archive's rows, made one by one when asked), the runs held as
    they are, so that events no one asks for are never made (:meth:`joined`)."""

    def __init__(self) -> None:
        self._list: list[Row] = []
        self._parts: list[Sequence[Row]] = []
        self._starts: list[int] = []
        self._n = 0

    def add(self, rows: Sequence[Row]) -> None:
        if isinstance(rows, list):
            self._list += rows
        else:
            self._flush()
            self._starts.append(self._n)
            self._parts.append(rows)
        self._n += len(rows)

    def _flush(self) -> None:
        if self._list:
            self._starts.append(self._n - len(self._list))
            self._parts.append(self._list)
            self._list = []

    def joined(self) -> Sequence[Row]:
        """The events: a list when every run's was one."""
        if not self._parts:
            return self._list
        self._flush()
        return self

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Row]:
        return chain.from_iterable(self._parts)

    def __getitem__(self, i: int) -> Row:  # type: ignore[override]  # (no slices asked)
        if i < 0:
            i += self._n
        k = bisect_right(self._starts, i) - 1
        return self._parts[k][i - self._starts[k]]


class Batch:
    """Columns of consecutive events of one source (see the module docstring).

    ``ts``, ``kind`` and ``group`` are computed at once; the other fields are read
    on demand for the rows that need them (:meth:`steps`, :meth:`names`,
    :meth:`blocking`).
    """

    __slots__ = (
        "_job",
        "_jobs",
        "_loads_plain",
        "_same_job",
        "_steps",
        "events",
        "fields",
        "group",
        "keys",
        "kind",
        "may_hold_work",
        "n",
        "ts",
        "writer",
        "writers",
    )

    def __init__(
        self,
        events: Sequence[Event | LeanEvent],
        runs: Sequence[tuple[int, int]] | None = None,
        columns: DecodedColumns | None = None,
    ) -> None:
        """``runs``: ``(begin, end)`` of the batch's runs of consecutive lines of one file,
        when known (each file is usually written by one process). ``columns``: the events'
        kind codes and steps, when the decoder worked them out (``Chunk.columns``), and
        their writer when they are all :class:`~badput.events.LeanEvent` s of one: its
        fields are then not read event by event.

        ``events`` may hold lean events: the engine reads their fields, and keeps values,
        never an event (its state is pickled: the class of a lean event cannot be)."""
        n = len(events)
        self.events = events
        self.n = n
        if columns is not None and columns.ts is not None:
            self.ts: F64 = columns.ts
        else:
            self.ts = np.fromiter(map(_ts, events), np.float64, n)
        #: The fields that may hold a value in some event (the others: none), when known.
        self.fields = None if columns is None else columns.fields
        self._steps: tuple[I64, BoolArray, BoolArray] | None = None
        #: False when the decoder knows no event here records step work (DecodedColumns)
        self.may_hold_work = columns is None or columns.work
        if columns is None:
            self.kind: I16 = np.fromiter(
                map(KIND_CODE.__getitem__, map(_kind, events)), np.int16, n
            )
        else:
            self.kind = columns.kinds
            # the decoder's steps of every step event (valid: each has one, within 64 bits)
            is_step = (self.kind == _STEP_START_CODE) | (self.kind == _STEP_END_CODE)
            self._steps = (columns.steps, np.ones(n, np.bool_), is_step)
        self._jobs: list[str] | None = None
        self._job: str | None = None  # every event's job, when the decoder said so
        self._same_job: dict[str, BoolArray | None] = {}
        self._loads_plain: bool | None = None
        #: Each event's writer, when the decoder gave them (:attr:`DecodedColumns.writers`)
        self.writers: tuple[I32, tuple[Writer, ...]] | None = None
        writer = None if columns is None else columns.writer
        #: Every event's one writer, when the decoder said so (:attr:`DecodedColumns.writer`)
        self.writer: Writer | None = writer if n else None
        if writer is not None and n:
            self._job = writer[0]
            self.keys: list[RawKey] = [(writer[1], writer[3], writer[4])]
            self.group: I32 = np.zeros(n, np.int32)
            return
        if columns is not None and columns.writers is not None and n:
            self.writers = columns.writers
            self._of_writers(*columns.writers)
            return
        attempts = list(map(_attempt, events))
        ranks = list(map(_rank, events))
        pids = list(map(_pid, events))
        if (
            n
            and attempts.count(attempts[0]) == n
            and ranks.count(ranks[0]) == n
            and pids.count(pids[0]) == n
        ):
            self.keys = [(attempts[0], ranks[0], pids[0])]
            self.group = np.zeros(n, np.int32)
            return
        index = _KeyIndex()
        group = _groups_by_run(attempts, ranks, pids, index, runs) if runs else None
        if group is None:
            group = np.fromiter(
                map(index.__getitem__, zip(attempts, ranks, pids, strict=True)), np.int32, n
            )
        self.group = group
        self.keys = list(index)

    def _of_writers(self, index: I32, writers: tuple[Writer, ...]) -> None:
        """:attr:`keys` and :attr:`group` of events whose writers the decoder gave (each
        event's ``index`` into ``writers``): numbered in order of first appearance, as a
        lookup of every event's would."""
        starts = np.flatnonzero(np.concatenate(([True], index[1:] != index[:-1])))
        present, first = np.unique(index[starts], return_index=True)
        keys = _KeyIndex()
        remap = np.zeros(len(writers), np.int32)
        jobs = set()
        for w in present[np.argsort(first)].tolist():
            job, attempt, _host, rank, pid = writers[w]
            remap[w] = keys[attempt, rank, pid]
            jobs.add(job)
        self.keys = list(keys)
        self.group = remap[index]
        if len(jobs) == 1:
            self._job = jobs.pop()
        else:  # (each event's job: rare, a log holding another job's lines)
            self._jobs = np.array([w[0] for w in writers], dtype=object)[index].tolist()

    def same_job(self, job: str) -> BoolArray | None:
        """Which events are of ``job``; ``None`` when all of them are (the usual case)."""
        if job in self._same_job:
            return self._same_job[job]
        mask: BoolArray | None = None
        if self._job is not None:  # one writer's events: all of its job
            if self._job != job:
                mask = np.zeros(self.n, np.bool_)
            self._same_job[job] = mask
            return mask
        if self._jobs is None:
            self._jobs = list(map(_job, self.events))
        jobs = self._jobs
        if jobs.count(job) != self.n:
            # `==` as Python compares (a job of another type is simply not this job)
            mask = np.fromiter(map(eq, jobs, repeat(job)), np.bool_, self.n)
        self._same_job[job] = mask
        return mask

    def rows(self, idx: npt.NDArray[np.intp]) -> list[Event | LeanEvent]:
        """The events at positions ``idx``."""
        get = self.events.__getitem__
        return list(map(get, idx.tolist()))

    def steps(self, idx: npt.NDArray[np.intp]) -> tuple[I64, BoolArray]:
        """``step`` of the events at ``idx`` as int64, and which of them are usable (an
        integer within 64 bits: events not read from a store are not validated).

        The step events' steps are read once per batch (the accounting and the per-rank
        view both ask); other positions are read when asked."""
        if self._steps is None:
            is_step = (self.kind == _STEP_START_CODE) | (self.kind == _STEP_END_CODE)
            at = np.flatnonzero(is_step)
            values = np.zeros(self.n, np.int64)
            ok = np.zeros(self.n, np.bool_)
            values[at], ok[at] = self._read_steps(at)
            self._steps = (values, ok, is_step)
        values, ok, is_step = self._steps
        if bool(is_step[idx].all()):
            return values[idx], ok[idx]
        return self._read_steps(idx)

    def _read_steps(self, idx: npt.NDArray[np.intp]) -> tuple[I64, BoolArray]:
        k = int(idx.shape[0])
        try:
            values = np.fromiter(
                map(_step, map(self.events.__getitem__, idx.tolist())), np.int64, k
            )
            return values, np.ones(k, np.bool_)
        except (OverflowError, TypeError, ValueError):
            raw: list[Any] = list(map(_step, self.rows(idx)))
            ok = np.fromiter(
                # a bool is an int here as on the fast path (only unvalidated events have one)
                (isinstance(v, int) and -(2**63) <= v < 2**63 for v in raw),
                np.bool_,
                len(raw),
            )
            safe = (v if good else 0 for v, good in zip(raw, ok.tolist(), strict=True))
            return np.fromiter(safe, np.int64, len(raw)), ok

    def loads_plain(self) -> bool:
        """Whether no data-loading mark of the batch sets ``blocking`` (the usual log: a
        data load per step, none marked). Looked at once per batch, for the accounting
        and the per-rank view (a data load per step is a third of a log's events)."""
        if self._loads_plain is None and self.fields is not None:
            self._loads_plain = "blocking" not in self.fields
        if self._loads_plain is None:
            # No event of the batch sets it (one pass over all of them, four times faster
            # than picking out the data-loading marks); else look at those marks only.
            plain = list(map(_blocking, self.events)).count(None) == self.n
            if not plain:
                at = np.flatnonzero((self.kind == _LOAD_START_CODE) | (self.kind == _LOAD_END_CODE))
                values = list(map(_blocking, map(self.events.__getitem__, at.tolist())))
                plain = values.count(None) == len(values)
            self._loads_plain = plain
        return self._loads_plain

    def names(self, idx: npt.NDArray[np.intp]) -> list[str | None]:
        return list(map(_name, map(self.events.__getitem__, idx.tolist())))

    def not_false(self, idx: npt.NDArray[np.intp], field: str) -> BoolArray:
        """Whether ``field`` of the events at ``idx`` is anything but ``False``."""
        values = map(attrgetter(field), map(self.events.__getitem__, idx.tolist()))
        return np.fromiter(map(is_not, values, repeat(False)), np.bool_, int(idx.shape[0]))
