"""What the advice and the replay need from a job, measured from its report and timeline.

Everything here is read from the engine's public results (a :class:`~badput.engine.Report`
and its :class:`~badput.engine.Timeline`): the attempts, which of them ended by a failure,
each attempt's preamble (from its start to its first step: initialisation, preparation,
restore), its steps and their time, and the blocking checkpoint saves of its leader (the
lowest rank with steps, the rank the partition follows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from badput.engine import AttemptSummary, Report, StepSpans, Timeline

__all__ = ["NOT_FAILURES", "AttemptFacts", "JobFacts", "SaveFacts", "measure"]

#: Attempt statuses that are not failures: the job ended as asked, or a person stopped it.
NOT_FAILURES = frozenset({"completed", "cancelled", "success", "succeeded"})


@dataclass(frozen=True)
class SaveFacts:
    """One blocking checkpoint save of an attempt's leader: after step ``step``."""

    step: int
    start: float
    seconds: float
    complete: bool = True  # False: cut by the attempt's failure (its time says nothing)


@dataclass(frozen=True)
class AttemptFacts:
    """One attempt as the replay sees it.

    - ``preamble``: from the attempt's start to its first step (the whole attempt when it
      ran no step).
    - ``restore_step``: the progress it resumed from (the report's restore point).
    - ``steps_run`` and ``work_seconds``: the steps it ran to their end and the time from
      its first step to the end of the last of them, saves left out (what happens between
      steps is part of their cost); ``step_seconds`` is their ratio.
    - ``tail``: from its last step's end to its end, saves left out: a finished attempt's
      teardown, or the time a failed one made no progress before it ended (a hang until
      it was killed, a crash's teardown).
    - ``interrupted``: it ended by a failure, a hang or a preemption (not by the job's end).
    """

    index: int
    start: float
    end: float
    status: str | None
    interrupted: bool
    preamble: float
    restore_step: int
    first_step: int | None
    last_step: int | None
    steps_run: int
    work_seconds: float
    saves: tuple[SaveFacts, ...] = ()
    tail: float = 0.0  # from the last step's end to the attempt's end, saves left out

    @property
    def step_seconds(self) -> float | None:
        return self.work_seconds / self.steps_run if self.steps_run > 0 else None

    @property
    def running_seconds(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class JobFacts:
    """The job's measured figures (see :func:`measure`)."""

    job: str
    start: float
    end: float
    finished: bool  # the last attempt ended the job as asked: the replay runs to its step
    attempts: tuple[AttemptFacts, ...]
    target_step: int | None
    step_seconds: float | None  # the job's wall time per step, saves left out
    save_seconds: tuple[float, ...] = field(default=())
    interval_steps: int | None = None  # the median step distance between saves

    @property
    def failures(self) -> int:
        return sum(a.interrupted for a in self.attempts)

    @property
    def running_seconds(self) -> float:
        return math.fsum(a.running_seconds for a in self.attempts)

    def gap_after(self, index: int) -> float:
        """Down time between attempt ``index`` and the next (0 after the last)."""
        if index + 1 >= len(self.attempts):
            return 0.0
        return max(0.0, self.attempts[index + 1].start - self.attempts[index].end)


def _interrupted(a: AttemptSummary, last: bool) -> bool:
    if not last:
        return a.status not in NOT_FAILURES if a.status else True
    if a.end_reason == "job_end":
        return a.status is not None and a.status not in NOT_FAILURES
    if a.end_reason.startswith("attempt_end"):
        return a.status not in NOT_FAILURES
    return False  # still running (now) or its log just stops (last_event): nothing says


def _leader_lanes(timeline: Timeline) -> dict[int, int]:
    """Attempt index -> the lane of its lowest rank with steps (else its lowest rank)."""
    with_steps = set(np.unique(timeline.steps.lane).tolist()) if len(timeline.steps) else set()
    best: dict[int, tuple[bool, int, int]] = {}
    for i, lane in enumerate(timeline.lanes):
        key = (i not in with_steps, -1 if lane.rank is None else lane.rank, i)
        if lane.attempt_index not in best or key < best[lane.attempt_index]:
            best[lane.attempt_index] = key
    return {a: key[2] for a, key in best.items()}


class _ByLane:
    """Where each lane's step spans are in the timeline's columns (sorted by lane): an
    attempt's are a slice, not a pass over every row (10,000 attempts of 20 steps: 3.7 s
    of masks before)."""

    def __init__(self, timeline: Timeline) -> None:
        self.steps = np.searchsorted(
            timeline.steps.lane, np.arange(len(timeline.lanes) + 1)
        ).tolist()


class _Steps(NamedTuple):
    """What an attempt's leader's step spans say: its first step's start, its last step's
    end, the end of its last ended step, its first and last step, and the steps it ran to
    their end (a record counts the gap in numbers since the one before)."""

    first: float
    stop: float
    ended: float
    first_step: int
    last_step: int
    steps_run: int


def _steps_of(
    s: StepSpans, at: _ByLane, lanes: list[int | None], restores: list[int]
) -> list[_Steps | None]:
    """Each attempt's :class:`_Steps` (None: its leader ran no step), every attempt's in
    one pass over the leaders' rows (10,000 attempts of 20 steps: not 20 numpy calls an
    attempt)."""
    lo = np.array([at.steps[ln] if ln is not None else 0 for ln in lanes], np.int64)
    hi = np.array([at.steps[ln + 1] if ln is not None else 0 for ln in lanes], np.int64)
    count = hi - lo
    has = np.flatnonzero(count > 0)
    out: list[_Steps | None] = [None] * len(lanes)
    if not has.shape[0]:
        return out
    lo, hi, count = lo[has], hi[has], count[has]
    heads = np.cumsum(count) - count  # each attempt's first row among the leaders' rows
    rows = np.repeat(lo - heads, count) + np.arange(int(count.sum()))
    step = s.step[rows].astype(np.int64, copy=False)
    before = np.empty_like(step)
    before[1:] = step[:-1]
    before[heads] = np.array(restores, np.int64)[has]
    counts = np.maximum(step - before, 1)  # a record followed by another ended there
    closed_last = s.closed[hi - 1]
    run = np.add.reduceat(counts, heads) - np.where(closed_last, 0, counts[heads + count - 1])
    first = s.start[lo]
    stop = s.end[hi - 1]
    # the wall time per step is up to the last one that ended (np.where reads end[hi - 2]
    # of an attempt of one step too, in range: not used)
    ended = np.where(closed_last, stop, np.where(count > 1, s.end[hi - 2], first))
    for k, values in zip(
        has.tolist(),
        zip(
            first.tolist(),
            stop.tolist(),
            ended.tolist(),
            step[heads].tolist(),
            step[heads + count - 1].tolist(),
            run.tolist(),
            strict=True,
        ),
        strict=True,
    ):
        out[k] = _Steps(*values)
    return out


def _saves_of(
    attempts: Sequence[AttemptSummary],
    timeline: Timeline,
    at: _ByLane,
    lanes: list[int | None],
) -> list[list[SaveFacts]]:
    """The blocking checkpoint saves of each attempt's leader, each after the step that
    started last before it (none: the attempt's restore point)."""
    out: list[list[SaveFacts]] = [[] for _ in attempts]
    ivs = timeline.intervals  # (columns: a job with a data load a step has millions)
    code = ivs.code_of("checkpoint_save")
    if code is None:
        return out
    picked = np.flatnonzero((ivs.code == code) & ivs.blocking)
    if not picked.shape[0]:
        return out
    bounds = np.searchsorted(ivs.lane[picked], np.arange(len(timeline.lanes) + 1)).tolist()
    s = timeline.steps
    for i, (a, lane) in enumerate(zip(attempts, lanes, strict=True)):
        if lane is None or bounds[lane] == bounds[lane + 1]:
            continue
        mine = picked[bounds[lane] : bounds[lane + 1]]
        lo, hi = at.steps[lane], at.steps[lane + 1]
        starts = ivs.start[mine]
        before = (np.searchsorted(s.start[lo:hi], starts, side="right") - 1).tolist()
        steps = s.step[lo:hi]
        for b, iv_start, iv_end in zip(
            before, starts.tolist(), ivs.end[mine].tolist(), strict=True
        ):
            step = int(steps[b]) if b >= 0 else a.restore_step or 0
            cut = iv_end >= a.end and a.end_reason != "job_end"
            out[i].append(SaveFacts(step, iv_start, iv_end - iv_start, not cut))
    return out


def _attempt(  # noqa: PLR0917 (an attempt, and what its leader's rows say)
    index: int,
    a: AttemptSummary,
    last: bool,
    restore: int,
    steps: _Steps | None,
    saves: list[SaveFacts],
) -> AttemptFacts:
    if steps is None:
        return AttemptFacts(
            index, a.start, a.end, a.status, _interrupted(a, last),
            a.end - a.start, restore, None, None, 0, 0.0, tuple(saves),
        )  # fmt: skip
    first, stop, ended = steps.first, steps.stop, steps.ended
    after = math.fsum(v.seconds for v in saves if v.start >= stop)
    # The wall time per step is from the first step to the last one that ended, saves
    # left out: what happens between steps (evaluations, loads) is part of a step's cost.
    between = math.fsum(v.seconds for v in saves if first <= v.start < ended)
    return AttemptFacts(
        index, a.start, a.end, a.status, _interrupted(a, last), first - a.start, restore,
        steps.first_step, steps.last_step, steps.steps_run,
        max(0.0, ended - first - between), tuple(saves), max(0.0, a.end - stop - after),
    )  # fmt: skip


def _restore(a: AttemptSummary) -> int:
    """The progress an attempt resumed from: its restore point, else the step before its
    first."""
    if a.restore_step is not None:
        return a.restore_step
    return (a.first_step - 1) if a.first_step is not None else 0


def measure(report: Report, timeline: Timeline) -> JobFacts:
    """The :class:`JobFacts` of a cumulative ``report`` and its ``timeline``."""
    leaders = _leader_lanes(timeline)
    n = len(report.attempts)
    at = _ByLane(timeline)
    lanes = [leaders.get(i) for i in range(n)]
    restores = [_restore(a) for a in report.attempts]
    steps = _steps_of(timeline.steps, at, lanes, restores)
    saves_of = _saves_of(report.attempts, timeline, at, lanes)
    attempts = tuple(
        _attempt(i, a, i == n - 1, restores[i], steps[i], saves_of[i])
        for i, a in enumerate(report.attempts)
    )
    work = math.fsum(a.work_seconds for a in attempts)
    run = sum(a.steps_run for a in attempts)
    saves = [v for a in attempts for v in a.saves]
    gaps = [
        b.step - a.step
        for att in attempts
        for a, b in zip(att.saves, att.saves[1:], strict=False)
        if b.step > a.step
    ]
    last = report.attempts[-1] if report.attempts else None
    finished = (
        last is not None and last.end_reason == "job_end" and last.status in (None, *NOT_FAILURES)
    )
    return JobFacts(
        job=report.job,
        start=report.start,
        end=report.end,
        finished=finished,
        attempts=attempts,
        target_step=report.steps.last,
        step_seconds=work / run if run > 0 else None,
        save_seconds=tuple(v.seconds for v in saves if v.complete),
        interval_steps=int(np.median(gaps)) if gaps else None,
    )
