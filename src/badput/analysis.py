"""The I/O edge of the engine: read a store into an :class:`Accountant`.

``analyze`` answers one question about a finished (or crashed) log; ``LiveJob``
follows a job that is still being written, reading only what is new each time.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from badput.engine import Accountant, Report
from badput.store import EventStore, open_source
from badput.store._base import Cursor

__all__ = ["LiveJob", "analyze"]

Source = str | os.PathLike[str] | EventStore

#: Bytes read (and decoded) per store read while catching up on a log.
READ_SLICE_BYTES = 32 * 1024 * 1024


def _resolve(source: Source, job: str | None) -> tuple[EventStore, str]:
    if isinstance(source, (str, os.PathLike)):
        return open_source(os.fspath(source), job)
    if job is not None:
        return source, job
    jobs = source.jobs()
    if len(jobs) != 1:
        names = ", ".join(jobs) if jobs else "none"
        raise ValueError(f"store {source.uri} holds {len(jobs)} jobs ({names}); name one with job=")
    return source, jobs[0]


class LiveJob:
    """Follow one job of a store: each :meth:`update` ingests only the new lines.

    >>> from badput.store import MemoryStore
    >>> live = LiveJob(MemoryStore(), "nothing-yet")
    >>> live.update()
    0
    """

    def __init__(
        self,
        source: Source,
        job: str | None = None,
        *,
        ideal_step_time: float | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.store, self.job = _resolve(source, job)
        self.accountant = Accountant(self.job, ideal_step_time=ideal_step_time)
        self._cursor: Cursor | None = None
        self._on_progress = on_progress

    def update(self) -> int:
        """Read and ingest what was appended since the last call; return how many lines.

        Reads in slices of :data:`READ_SLICE_BYTES` so that only one slice of decoded
        events is alive at a time, whatever the size of the log.
        """
        n = 0
        while True:
            result = self.store.read(self.job, self._cursor, max_bytes=READ_SLICE_BYTES)
            progressed = result.cursor.offsets != (self._cursor.offsets if self._cursor else {})
            self._cursor = result.cursor
            self.accountant.ingest(result.chunks)
            n += result.n_items
            if result.chunks and self._on_progress is not None:
                self._on_progress(n)
            if not progressed:
                return n

    def report(
        self,
        *,
        now: float | None = None,
        window: tuple[float, float] | None = None,
        ideal_step_time: float | None = None,
    ) -> Report:
        """The partition of what was read so far (see :meth:`Accountant.report`)."""
        return self.accountant.report(now=now, window=window, ideal_step_time=ideal_step_time)


def analyze(
    source: Source,
    job: str | None = None,
    *,
    now: float | None = None,
    window: tuple[float, float] | None = None,
    ideal_step_time: float | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Report:
    """Read a whole log and return its :class:`Report`.

    ``source`` is a store root (``job`` needed when it holds several jobs), a
    job directory, a single ``.jsonl`` file, or an :class:`EventStore`.
    """
    live = LiveJob(source, job, ideal_step_time=ideal_step_time, on_progress=on_progress)
    live.update()
    return live.report(now=now, window=window)
