"""Synthetic jobs with exponential failures, written by the real Recorder in event time.

A job runs ``total_steps`` steps of ``step_time`` seconds, saves a checkpoint after every
``every``-th step (``save_cost`` seconds, blocking), and fails at the times of a Poisson
process of mean ``mtbf`` (wall clock, from a fixed seed: the same failure times whatever
the interval, so that runs at several intervals differ only by the interval). A failure
ends the attempt (``attempt_end`` failed); the next attempt starts ``restart`` seconds
later and restores the newest checkpoint in ``restore`` seconds. A failure that strikes
while the job is down changes nothing. No wall time passes: every event has its ``ts``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from badput.recorder import Recorder
from badput.store import EventStore, MemoryStore

START = 1_750_000_000.0


@dataclass(frozen=True)
class SimJob:
    step_time: float
    save_cost: float
    mtbf: float
    restart: float
    restore: float
    total_steps: int
    seed: int


def _failures(mtbf: float, seed: int) -> Iterator[float]:
    rng = random.Random(seed)
    t = START
    while True:
        t += rng.expovariate(1.0 / mtbf)
        yield t


class _FailedError(Exception):
    pass


def simulate(
    job: SimJob, every: int, name: str = "sim", store: EventStore | None = None
) -> EventStore:
    """The job saved every ``every`` steps, as a store of its log."""
    store = store if store is not None else MemoryStore()
    failures = _failures(job.mtbf, job.seed)
    fail_at = next(failures)
    t, attempt, safe = START, 0, 0
    while True:
        rec = Recorder(
            name, store, attempt=attempt, rank=0, host="sim", heartbeat_interval=0, enabled=True
        )

        def until(end: float, fail_at: float = fail_at) -> float:
            if end > fail_at:
                raise _FailedError
            return end

        rec.record_job_start(ts=t)
        try:
            if safe > 0:
                rec.record_checkpoint_restore_start(safe, ts=t)
                t = until(t + job.restore)
                rec.record_checkpoint_restore_end(safe, ts=t)
            step = safe
            while step < job.total_steps:
                step += 1
                rec.record_step_start(step, ts=t)
                t = until(t + job.step_time)
                if step % every == 0:
                    rec.record_checkpoint_save_start(step, ts=t)
                    t = until(t + job.save_cost)
                    rec.record_checkpoint_save_end(step, ts=t)
                    safe = step
            rec.record_job_end("completed", ts=t)
            rec.close()
            return store
        except _FailedError:
            rec.record_attempt_end("failed", 1, ts=fail_at)
            rec.close()
            t = fail_at + job.restart
            while fail_at <= t:  # failures while the job is down change nothing
                fail_at = next(failures)
            attempt += 1
