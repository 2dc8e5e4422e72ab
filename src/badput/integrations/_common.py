"""What every integration shares: its recorder, the job's lifecycle, after-the-fact spans.

Frameworks call hooks *at* moments (a batch begins, a checkpoint was saved), rarely
around the work. An integration therefore keeps a **mark**, the time of the last
moment it recorded, and records a span that ended now as ``[mark, now]`` with
explicit timestamps (the data loading between two steps, an evaluation whose start
no hook announces). Marks only move forward, so a stream's events stay in time order.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any, TypeVar

from badput.integrations._work import TimedBatches
from badput.recorder import Recorder
from badput.runtime.env import under_launcher
from badput.store import EventStore

__all__ = ["RecorderSession", "timed_batches"]

T = TypeVar("T")

logger = logging.getLogger("badput")


class RecorderSession:
    """One integration's recorder (built lazily, with the rank the framework knows),
    the job's lifecycle, and the mark of :mod:`badput.integrations._common`.

    ``recorder``: an existing recorder to write through (the integration then records
    no ``job_start``/``job_end`` unless ``lifecycle=True`` is given); else one is
    built from ``job``, ``store`` and ``recorder_kwargs`` (``job``: ``$BADPUT_JOB``
    when not given). ``lifecycle`` (default: on for a recorder of its own) records
    ``job_start`` when training starts and ``job_end`` when it completes; under
    ``badput run`` the launcher records the job's end itself.
    """

    def __init__(
        self,
        job: str | None,
        store: EventStore | str | os.PathLike[str] | None,
        recorder: Recorder | None,
        lifecycle: bool | None,
        recorder_kwargs: dict[str, Any],
    ) -> None:
        self._job = job
        self._store = store
        self._rec = recorder
        self._kwargs = recorder_kwargs
        self.lifecycle = (recorder is None) if lifecycle is None else lifecycle
        self.mark: float | None = None
        self._started = False

    def recorder(self, rank: int | None = None) -> Recorder:
        """The recorder, built on first use with ``rank`` unless the caller gave one."""
        if self._rec is None:
            kwargs = dict(self._kwargs)
            if rank is not None:
                kwargs.setdefault("rank", rank)
            self._rec = Recorder(self._job, self._store, **kwargs)
            # At once: the job_start (dated at the process start when launched) and the
            # process_init come before any span the integration records after the fact.
            self.job_start()
        return self._rec

    @property
    def rec(self) -> Recorder:
        return self.recorder()

    def touch(self, ts: float | None = None) -> float:
        """Move the mark to ``ts`` (default now), never backwards; return it."""
        now = time.time() if ts is None else ts
        if self.mark is None or now > self.mark:
            self.mark = now
        return self.mark

    def job_start(self) -> None:
        """Record the job's (attempt's) start once, if this session owns the lifecycle."""
        if self.lifecycle and not self._started:
            self._started = True
            self.rec.record_job_start()
        self.touch()

    def job_end(self, status: str = "completed") -> None:
        """Record the job's end if this session owns the lifecycle, and flush."""
        if self.lifecycle and not under_launcher():
            self.rec.record_job_end(status)
        self.rec.flush(timeout=5.0)

    def crashed(self, exc: BaseException | None = None) -> None:
        """The framework saw an exception: flush what is recorded. No end event: the
        attempt ends at its last event, or at the ``attempt_end`` a launcher writes
        (an end written here would come before the other ranks' last events)."""
        self.rec.flush(timeout=5.0)

    def span_since_mark(
        self, start: str, end: str, fields: dict[str, Any] | None = None, min_seconds: float = 0.0
    ) -> float:
        """Record ``start``/``end`` events of a span from the mark to now; return now."""
        now = time.time()
        mark = self.mark
        if mark is not None and now - mark > min_seconds:
            f = fields or {}
            self.rec.record(start, ts=mark, **f)
            self.rec.record(end, ts=now, **f)
        return self.touch(now)


def timed_batches(
    batches: Iterable[T], rec: Recorder, *, blocking: bool = True, replicas: int = 1
) -> TimedBatches[T]:
    """Yield from ``batches``, recording each fetch (``next``) as ``data_loading``.

    ``blocking=False`` for a loader whose fetches overlap the step (a background
    prefetcher): they are then reported as overlapped time, outside the partition.
    ``with it.step(n):`` (on the returned iterator) records step ``n`` with the work of
    its batch (samples: the batch's leading dimension; tokens: its ``input_ids``' size;
    each times ``replicas``, the data-parallel replicas fetching batches of their own).
    """
    return TimedBatches(batches, rec, blocking=blocking, replicas=replicas)
