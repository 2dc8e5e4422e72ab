"""The job's own timeline replayed under other checkpoint and restart settings.

The replay runs in event time over the attempts of the log (:class:`JobFacts`): each
attempt starts after the previous one's end plus the restart cost, runs its preamble as
recorded, then steps at its own measured step time from the newest checkpoint, saving
after every step of the schedule; the failures strike at the same wall-clock times as in
the log (a failure that strikes while the job is down is absorbed), and the progress since
the newest checkpoint that was complete by then is lost. A job that finished runs until it
reaches the same last step; one that did not runs until the log's end.

The replay is run twice, with the schedule of the log and with the new one, and each
bucket of the real report is scaled by the ratio of the two replays' time of its kind
(:data:`KIND_BUCKETS`). So what the replay cannot see (time inside steps, untracked time)
stays as measured, errors of the model common to both runs cancel, and with the log's own
settings every figure is the report's, exactly.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from badput.advice._measure import JobFacts
from badput.advice._stats import quantile
from badput.engine import Report

__all__ = ["KIND_BUCKETS", "ReplaySettings", "WhatIf", "replay_seconds", "whatif_of"]

#: The replay's kinds of time and the report buckets each one scales. Buckets named
#: nowhere (custom intervals, data loading, untracked...) go with ``kept``: they happen
#: inside or between kept steps.
KIND_BUCKETS: dict[str, tuple[str, ...]] = {
    "queued": ("queued",),
    "recovery": ("recovery",),
    "preamble": (
        "accelerator_init", "training_prep", "checkpoint_restore", "process_init", "compile",
        "elastic_reinit", "startup",
    ),
    "save": ("checkpoint_save",),
    "wasted": ("wasted",),
    "kept": ("productive", "slowdown"),
    "tail": (),
}  # fmt: skip
#: Where a kind's time goes when the log's replay had none of it (nothing to scale).
_FIRST_BUCKET = {
    "queued": "queued",
    "recovery": "recovery",
    "preamble": "checkpoint_restore",
    "save": "checkpoint_save",
    "wasted": "wasted",
    "kept": "productive",
    "tail": "untracked",
}


@dataclass(frozen=True)
class ReplaySettings:
    """What changes: ``None`` keeps the log's own setting.

    - ``checkpoint_every``: save after every step that is a multiple of it (default: the
      steps the log saved after).
    - ``save_cost``: seconds a save blocks (default: the log's own save of that step, else
      the median save). With ``async_save``: the part that still blocks (default 0).
    - ``restart_cost``: seconds from a failure to the next attempt's start (default: each
      restart's own down time).
    - ``async_save``: saves run in the background; a checkpoint is safe once the save's
      full (recorded or median) time has passed.
    """

    checkpoint_every: int | None = None
    save_cost: float | None = None
    restart_cost: float | None = None
    async_save: bool = False

    def unchanged(self) -> bool:
        return self == ReplaySettings()


class _Schedule:
    """The steps saved after and what each save costs."""

    def __init__(self, facts: JobFacts, settings: ReplaySettings) -> None:
        self._every = settings.checkpoint_every
        self._recorded: dict[int, list[float]] = {}
        self._cut: dict[int, float] = {}  # a step whose every save was cut: the longest cut
        for a in facts.attempts:
            for s in a.saves:
                costs = self._recorded.setdefault(s.step, [])
                if s.complete:
                    costs.append(s.seconds)
                else:
                    self._cut[s.step] = max(self._cut.get(s.step, 0.0), s.seconds)
        self._steps = sorted(self._recorded)
        self._median = quantile(list(facts.save_seconds), 0.5) if facts.save_seconds else None
        self._settings = settings
        self._used: dict[int, int] = {}

    def next_after(self, step: int) -> int | None:
        if self._every is not None:
            return (step // self._every + 1) * self._every
        i = bisect.bisect_right(self._steps, step)
        return self._steps[i] if i < len(self._steps) else None

    def _full(self, step: int) -> float:
        costs = self._recorded.get(step)
        if costs:
            n = self._used.get(step, 0)
            self._used[step] = n + 1
            return costs[min(n, len(costs) - 1)]
        if self._median is not None:
            return self._median
        if self._settings.save_cost is not None:
            return self._settings.save_cost
        if step in self._cut:
            return self._cut[step]
        raise ValueError("the log has no checkpoint save to take its cost from: give a save cost")

    def costs(self, step: int) -> tuple[float, float]:
        """(seconds the save blocks, seconds until its checkpoint is safe)."""
        full = self._full(step)
        s = self._settings
        if s.async_save:
            blocking = s.save_cost if s.save_cost is not None else 0.0
            return blocking, max(blocking, full)
        blocking = s.save_cost if s.save_cost is not None else full
        return blocking, blocking


@dataclass
class _Run:
    """The replay's state as it goes: time of each kind, progress, safe checkpoints."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KIND_BUCKETS, 0.0))
    safe: int = 0
    commits: list[tuple[float, int]] = field(default_factory=list)
    done: bool = False
    failures: int = 0

    def restore_point(self, at: float) -> int:
        best = self.safe
        for t, step in self.commits:
            if t <= at and step > best:
                best = step
        return best


def _steps(
    run: _Run, sched: _Schedule, t: float, stop: float | None, *, w: float, target: int | None
) -> tuple[float, int, float]:
    """Run steps from ``run.safe`` at ``w`` seconds each, saving on schedule, until ``stop``
    or ``target``. Returns (time, step reached, time of the step in flight at ``stop``)."""
    p = run.safe
    if w <= 0.0 and target is None:
        # steps of no time (a log whose steps all share a timestamp): no time to replay them
        # in, and a schedule of saves without end would never move the clock (this loop hung)
        return t if stop is None else max(t, stop), p, 0.0
    while True:
        if target is not None and p >= target:
            run.done = True
            return t, p, 0.0
        nxt = sched.next_after(p)
        goal = nxt if target is None or (nxt is not None and nxt <= target) else target
        dt = math.inf if goal is None else (goal - p) * w
        if stop is not None and t + dt > stop:
            done = int((stop - t) // w) if w > 0 else 0
            if goal is not None:
                done = min(done, goal - p)
            return stop, p + done, max(0.0, stop - t - done * w)
        if goal is None:  # no save, no target, no stop: nothing more to replay
            return t, p, 0.0
        t, p = t + dt, goal
        if nxt != p:
            continue
        blocking, until_safe = sched.costs(p)
        if stop is not None and t + blocking > stop:
            run.seconds["save"] += stop - t
            return stop, p, 0.0
        run.seconds["save"] += blocking
        run.commits.append((t + until_safe, p))
        t += blocking


class _Plan(NamedTuple):
    """One attempt of the replay: the down time before it, its preamble and step time, and
    when it fails (None: it runs until the job is done). (A tuple: 10,000 attempts make
    one each a replay.)"""

    gap: float
    preamble: float
    step_seconds: float
    fails_at: float | None
    interrupted: bool
    dying: float = 0.0  # after its failure, until its recorded end (no progress)


def _plans(facts: JobFacts, settings: ReplaySettings) -> Iterator[_Plan]:
    """The log's attempts, then (a finished job replayed past the log's end) failures at
    the measured mean rate: one every MTBF, each with the mean restart of the log."""
    atts = facts.attempts
    failures = facts.failures
    mtbf = facts.running_seconds / failures if failures else math.inf
    w_job = facts.step_seconds or 0.0
    gaps = [0.0, *(facts.gap_after(k) for k in range(len(atts) - 1))]
    for k, a in enumerate(atts):
        gap = gaps[k]
        if k > 0 and settings.restart_cost is not None:
            gap = settings.restart_cost
        last = k == len(atts) - 1
        stop: float | None = a.end
        dying = 0.0
        if last and facts.finished:
            stop = facts.end + mtbf if math.isfinite(mtbf) else None
        elif a.interrupted and a.steps_run:  # progress stopped at its last step's end
            dying = min(a.tail, a.end - a.start)
            stop = a.end - dying
        interrupted = a.interrupted or stop != a.end
        yield _Plan(gap, a.preamble, a.step_seconds or w_job, stop, interrupted, dying)
    if not (facts.finished and math.isfinite(mtbf)):
        return
    restarts = [(facts.gap_after(i - 1), a.preamble) for i, a in enumerate(atts) if i > 0]
    gap = math.fsum(g for g, _ in restarts) / len(restarts) if restarts else 0.0
    if settings.restart_cost is not None:
        gap = settings.restart_cost
    pre = math.fsum(p for _, p in restarts) / len(restarts) if restarts else 0.0
    w = (atts[-1].step_seconds or w_job) if atts else w_job
    at = facts.end + mtbf
    while True:
        at += mtbf
        yield _Plan(gap, pre, w, at, True)


#: Failures the replay adds past the log's own (at the measured rate) before it gives up on
#: reaching the log's last step: when failures come faster than a step and its save, the
#: job under those settings never finishes (a replay without this bound never returned).
MAX_EXTRA_FAILURES = 10_000


def replay_seconds(facts: JobFacts, settings: ReplaySettings) -> tuple[dict[str, float], int]:
    """Seconds of each kind of :data:`KIND_BUCKETS` in the replay, and the failures it met."""
    sched = _Schedule(facts, settings)
    atts = facts.attempts
    run = _Run(safe=atts[0].restore_step if atts else 0)
    if not atts:
        return run.seconds, 0
    run.seconds["queued"] = max(0.0, atts[0].start - facts.start)
    target = facts.target_step if facts.finished else None
    up = end = atts[0].start
    for k, plan in enumerate(_plans(facts, settings)):
        if k >= len(atts) + MAX_EXTRA_FAILURES:
            break  # failures past the log come faster than progress: it would never finish
        if k > 0 and end >= up:  # else the previous failure was absorbed: still coming up
            run.seconds["recovery"] += plan.gap
            up = end + plan.gap
        stop = plan.fails_at
        if stop is not None and up >= stop and plan.interrupted:
            end = stop  # failed while down: the next attempt is this one's restart
            continue
        pre = plan.preamble if stop is None else min(plan.preamble, max(0.0, stop - up))
        run.seconds["preamble"] += pre
        w = plan.step_seconds
        t, first = up + pre, run.safe
        if stop is None or t < stop:
            t, p, partial = _steps(run, sched, t, stop, w=w, target=target)
        else:
            p, partial = first, 0.0
        if run.done or not plan.interrupted:
            run.seconds["kept"] += (p - first) * w + partial
            run.seconds["tail"] += atts[-1].tail if run.done else 0.0
            break
        restore = run.restore_point(t)
        run.seconds["kept"] += (restore - first) * w
        run.seconds["wasted"] += (p - restore) * w + partial
        run.safe, run.commits = restore, [c for c in run.commits if c[0] > t]
        run.seconds["tail"] += plan.dying
        end = t + plan.dying
        run.failures += 1
        if target is None and k >= len(atts) - 1:
            break
    return run.seconds, run.failures


@dataclass(frozen=True)
class WhatIf:
    """The real report's buckets beside the replay's prediction under ``settings``."""

    job: str
    settings: ReplaySettings
    real_buckets: dict[str, float]
    buckets: dict[str, float]
    real_total_seconds: float
    total_seconds: float
    real_goodput: float
    goodput: float
    real_observed_goodput: float
    observed_goodput: float
    failures: int
    replay_log: dict[str, float]
    replay_new: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["settings"] = asdict(self.settings)
        return out


def _scaled(report: Report, log: dict[str, float], new: dict[str, float]) -> dict[str, float]:
    named = {b: kind for kind, buckets in KIND_BUCKETS.items() for b in buckets}
    out: dict[str, float] = {}
    for bucket, seconds in report.buckets.items():
        kind = named.get(bucket, "kept")
        out[bucket] = seconds * (new[kind] / log[kind]) if log[kind] > 0 else seconds
    for kind, seconds in log.items():
        if seconds <= 0 < new[kind]:
            bucket = _FIRST_BUCKET[kind]
            out[bucket] = out.get(bucket, 0.0) + new[kind]
    return out


def whatif_of(
    report: Report,
    facts: JobFacts,
    settings: ReplaySettings,
    *,
    log: dict[str, float] | None = None,
) -> WhatIf:
    """Replay ``facts`` (measured from ``report``) under ``settings``: see the module.
    ``log``: the replay of the log's own settings (``replay_seconds(facts,
    ReplaySettings())[0]``), when the caller has it (the advice replays two settings
    against one: 10,000 attempts replay in about 0.2 s)."""
    if log is None:
        log, _ = replay_seconds(facts, ReplaySettings())
    new, failures = replay_seconds(facts, settings)
    real = dict(report.buckets)
    buckets = _scaled(report, log, new)
    total = report.total_seconds + (math.fsum(buckets.values()) - math.fsum(real.values()))
    productive = real.get("productive", 0.0)
    observed = productive + real.get("slowdown", 0.0)
    new_productive = buckets.get("productive", 0.0)
    new_observed = new_productive + buckets.get("slowdown", 0.0)
    if total <= 0:
        goodput = observed_goodput = 0.0
    else:  # ratios of 1.0 exactly when nothing changed: the report's own figures
        keep = report.total_seconds / total
        goodput = (
            report.goodput * (new_productive / productive) * keep
            if productive
            else (new_productive / total)
        )
        observed_goodput = (
            report.observed_goodput * (new_observed / observed) * keep
            if observed
            else new_observed / total
        )
    return WhatIf(
        job=report.job,
        settings=settings,
        real_buckets=real,
        buckets=buckets,
        real_total_seconds=report.total_seconds,
        total_seconds=total,
        real_goodput=report.goodput,
        goodput=goodput,
        real_observed_goodput=report.observed_goodput,
        observed_goodput=observed_goodput,
        failures=failures,
        replay_log=log,
        replay_new=new,
    )
