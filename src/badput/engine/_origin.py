"""Where a batch's events come from (their source and line), and what is checked per source.

A batch may hold many files: :class:`Run` says which of its events are which lines of
which source, :class:`Origin` finds an event's source and line from them. Per source,
ingest reports lines whose clock steps back (:func:`check_clock`) and events of another
job (:func:`report_foreign`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from badput.engine._batch import Batch
from badput.engine._ingest_state import MAX_DIAGNOSTICS_PER_CODE, DiagnosticLog
from badput.engine._stream import NameTable

__all__ = [
    "CLOCK_BACKWARDS_TOLERANCE",
    "Origin",
    "Run",
    "check_clock",
    "clock_continues",
    "report_foreign",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

# A file whose clock steps back by more than this between consecutive lines is reported.
CLOCK_BACKWARDS_TOLERANCE = 1e-3


def clock_continues(head: Sequence[float], newest_before: float) -> bool:
    """Whether a range of a file read on its own flags the same clock steps back as a read
    of the whole file (a shared cold read's slices, ``badput.analysis``).

    A whole read compares each line's time with the newest time of its file so far
    (``clock_backwards``); a reader that starts mid-file knows only its own lines
    (``head``: the times of its first events). They agree once one of them reaches
    ``newest_before`` (the newest time of the file's earlier ranges), provided none before
    it is more than :data:`CLOCK_BACKWARDS_TOLERANCE` below it; otherwise (a clock step back
    at the cut, or not decided within ``head``) the range must be read with the rest."""
    for ts in head:
        if ts >= newest_before:
            return True
        if ts < newest_before - CLOCK_BACKWARDS_TOLERANCE:
            return False
    return False


class Run(NamedTuple):
    """Events ``begin:end`` of a batch are consecutive lines of ``source``, the first of
    them line ``first_line`` (``None``: events that did not come from a file)."""

    source: str | None
    first_line: int | None
    begin: int
    end: int


class Origin:
    """Where each event of a batch comes from: its source and line (from its runs)."""

    def __init__(self, runs: Sequence[Run], sources: NameTable) -> None:
        self.runs = runs
        self.begins = np.array([r.begin for r in runs], np.int64)
        self._sources = sources
        self._per_run: tuple[I64, npt.NDArray[np.bool_], npt.NDArray[np.int32]] | None = None
        self._begins: list[int] | None = None  # for lookups of one event (a list is faster)

    def run_of(self, i: int) -> Run:
        if self._begins is None:
            self._begins = [r.begin for r in self.runs]
        return self.runs[bisect.bisect_right(self._begins, i) - 1]

    def where(self, i: int) -> tuple[str | None, int | None]:
        """The source and line of the batch's event ``i``."""
        run = self.run_of(i) if len(self.runs) > 1 else self.runs[0]
        return run.source, None if run.first_line is None else run.first_line + i - run.begin

    def where_many(self, positions: npt.NDArray[np.intp]) -> list[tuple[str | None, int | None]]:
        """:meth:`where` of each of ``positions``."""
        if not positions.shape[0]:
            return []
        which = np.searchsorted(self.begins, positions, "right") - 1
        runs = self.runs
        return [
            (run.source, None if run.first_line is None else run.first_line + p - run.begin)
            for run, p in zip([runs[w] for w in which.tolist()], positions.tolist(), strict=True)
        ]

    def first_of_each_run(self, positions: npt.NDArray[np.intp]) -> list[int]:
        """The first of ``positions`` (sorted) in each run that has one."""
        which = np.searchsorted(self.begins, positions, "right") - 1
        heads = np.flatnonzero(np.concatenate(([True], which[1:] != which[:-1])))
        return [int(p) for p in positions[heads].tolist()] if positions.shape[0] else []

    def spans(self, positions: npt.NDArray[np.intp]) -> list[tuple[str | None, int, int]]:
        """For each run: its source and the slice of ``positions`` (sorted) inside it."""
        if len(self.runs) == 1:
            return [(self.runs[0].source, 0, int(positions.shape[0]))]
        cuts = [*np.searchsorted(positions, self.begins).tolist(), int(positions.shape[0])]
        return [
            (run.source, cuts[k], cuts[k + 1])
            for k, run in enumerate(self.runs)
            if cuts[k + 1] > cuts[k]
        ]

    def lines_and_sources(
        self, positions: npt.NDArray[np.intp]
    ) -> tuple[I64, npt.NDArray[np.int32]]:
        """Line (-1: unknown) and source code (-1: none) of the events at ``positions``."""
        if len(self.runs) == 1:
            which = np.zeros(positions.shape[0], np.intp)
        else:
            which = np.searchsorted(self.begins, positions, "right") - 1
        if self._per_run is None:  # once per batch: a batch may hold thousands of runs
            self._per_run = (
                np.array(
                    [-1 if r.first_line is None else r.first_line - r.begin for r in self.runs],
                    np.int64,
                ),
                np.array([r.first_line is not None for r in self.runs], np.bool_),
                np.array(
                    [-1 if r.source is None else self._sources.code(r.source) for r in self.runs],
                    np.int32,
                ),
            )
        firsts, known, codes = self._per_run
        line = np.where(known[which], positions + firsts[which], -1)
        return line.astype(np.int64), codes[which]


def report_foreign(
    batch: Batch,
    foreign: npt.NDArray[np.intp],
    origin: Origin,
    job: str,
    diagnostics: DiagnosticLog,
) -> None:
    """Events of another job: one diagnostic for the first of each file (its first by
    line, however its lines were cut into batches), all counted."""
    for run_first in origin.first_of_each_run(foreign):
        ev = batch.events[run_first]
        source, line = origin.where(run_first)
        diagnostics.add_first(
            "foreign_job",
            source or "",
            f"event of job {ev.job!r} in the log of job {job!r}; skipped",
            source,
            line,
        )
    diagnostics.counts["foreign_job"] = diagnostics.counts.get("foreign_job", 0) + int(
        foreign.shape[0]
    )


def check_clock(
    ts: F64,
    pos: npt.NDArray[np.intp],
    origin: Origin,
    source_last_ts: dict[str, float],
    diagnostics: DiagnosticLog,
) -> None:
    """Report lines whose time steps back (beyond the tolerance) from the newest before
    in the same source (``source_last_ts``: the newest time of each source so far, kept up
    to date).

    A batch of many files (a job of 10,000 attempts) is first checked as a whole: when
    every source's lines go forward in time from its newest before, nothing steps back,
    and each source's newest is its last line. Only otherwise is each source looked at
    on its own."""
    spans = origin.spans(pos)
    keys = [source or "" for source, _a, _b in spans]
    if len(spans) > 1 and len(set(keys)) == len(keys):
        firsts = np.array([a for _s, a, _b in spans], np.intp)
        lasts = np.array([b - 1 for _s, _a, b in spans], np.intp)
        get = source_last_ts.get
        prevs = np.array([get(key, -math.inf) for key in keys])
        steps = np.diff(ts) >= 0.0
        steps[firsts[1:] - 1] = True  # from one source's last line to the next's first
        if bool(steps.all()) and bool((ts[firsts] >= prevs).all()):
            source_last_ts.update(zip(keys, ts[lasts].tolist(), strict=True))
            return
    for (_source, a, b), key in zip(spans, keys, strict=True):
        part = ts[a:b]
        prev = source_last_ts.get(key, -math.inf)
        newest = np.maximum.accumulate(part)
        before = np.empty_like(part)
        before[0] = prev
        np.maximum(newest[:-1], prev, out=before[1:])
        back = np.flatnonzero(part < before - CLOCK_BACKWARDS_TOLERANCE)
        for i in back[:MAX_DIAGNOSTICS_PER_CODE].tolist():
            diagnostics.add(
                "clock_backwards",
                f"timestamp {part[i]:.3f} is {before[i] - part[i]:.3f}s earlier than the "
                "previous line",
                *origin.where(int(pos[a + i])),
            )
        extra = int(back.shape[0]) - MAX_DIAGNOSTICS_PER_CODE
        if extra > 0:
            diagnostics.counts["clock_backwards"] += extra
        source_last_ts[key] = max(prev, float(newest[-1]))
