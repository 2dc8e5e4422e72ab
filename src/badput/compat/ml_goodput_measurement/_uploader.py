"""The compat monitor's uploader threads, with the Monitor's guarantees.

An :class:`Uploader` runs a :class:`Session`'s cycles on badput's periodic worker; each
stage of a cycle (its query, each destination) is behind a :class:`Guard`: a failure is
logged once and a failing destination backed off for 1, 2, 4... cycles
(:mod:`~badput.compat.ml_goodput_measurement.monitoring` has the whole story).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Protocol

from badput.monitor import MAX_BACKOFF_CYCLES, MAX_BACKOFF_SECONDS
from badput.runtime.worker import PeriodicWorker

__all__ = ["Guard", "Session", "Uploader", "join_or_abandon"]

# The monitor's logger: its messages keep the name they have always had.
logger = logging.getLogger("badput.compat.ml_goodput_measurement.monitoring")


class Guard:
    """One stage of an uploader (its query, or one destination): the first failure is a
    warning, later ones are debug; a destination is skipped for 1, 2, 4... cycles while it
    fails (``backoff``), except in the final flush."""

    def __init__(self, what: str, job: str, interval: float, *, backoff: bool) -> None:
        self.what = what
        self.job = job
        self.max_skip = (
            max(1, min(MAX_BACKOFF_CYCLES, int(MAX_BACKOFF_SECONDS // interval))) if backoff else 0
        )
        self.failures = 0
        self.streak = 0
        self.skip = 0
        self.warned = False

    def run(self, fn: Callable[[], None], *, final: bool) -> bool:
        """Run ``fn`` unless backing off; ``True`` when it ran and succeeded."""
        return self.due(final) and self.call(fn)

    def due(self, final: bool) -> bool:
        """``False`` while backing off (this cycle is then counted as skipped)."""
        if self.skip > 0 and not final:
            self.skip -= 1
            return False
        return True

    def call(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` now; ``True`` when it succeeded."""
        try:
            fn()
        except Exception as exc:
            self.failed(exc)
            return False
        if self.streak:
            logger.debug("badput: %s works again after %d failures", self.what, self.streak)
        self.streak = 0
        self.skip = 0
        return True

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        self.streak += 1
        self.skip = min(2 ** (self.streak - 1), self.max_skip)
        if not self.warned:
            self.warned = True
            logger.warning(
                "badput: %s failed for job %r: %s: %s%s. The training run is not affected; "
                "further failures are logged at debug level.",
                self.what,
                self.job,
                type(exc).__name__,
                exc,
                "; backing off while it fails" if self.max_skip else "; skipping this cycle",
            )
        else:
            logger.debug("badput: %s failed again (%d in a row): %r", self.what, self.streak, exc)


class Session(Protocol):
    """One run of an uploader: its cycles and its resources (a TensorBoard writer)."""

    def cycle(self, final: bool) -> None: ...

    def close(self) -> None: ...


class Uploader:
    """One of the monitor's uploaders: badput's periodic worker running a session's cycles
    every ``interval`` seconds (the first one ``interval`` after the start, as in the
    library), then a final cycle when stopped with a final flush."""

    def __init__(
        self, name: str, job: str, interval: float, new_session: Callable[[], Session]
    ) -> None:
        self.name = name
        self.job = job
        self.interval = interval
        self.new_session = new_session
        self.cycles = 0  # cycles run (final flushes included)
        self._lock = threading.Lock()
        self._worker: PeriodicWorker | None = None

    @property
    def running(self) -> bool:
        worker = self._worker
        return worker is not None and worker.running

    def start(self) -> bool:
        """Start the thread; ``False`` when it is already running."""
        with self._lock:
            if self.running:
                return False
            sessions: list[Session] = []  # opened on the worker's thread

            def tick() -> None:
                if sessions:
                    self._cycle(sessions[0], final=False)

            def finish(final: bool) -> None:
                try:
                    if final and sessions:
                        self._cycle(sessions[0], final=True)
                finally:
                    for session in sessions:
                        with suppress(Exception):
                            session.close()

            worker = PeriodicWorker(
                f"badput-goodput-{self.name}",
                self.interval,
                tick,
                finish=finish,
                tick_at_start=False,
                setup=lambda: sessions.append(self.new_session()),
            )
            worker.start()
            self._worker = worker
        return True

    def signal(self, final_flush: bool) -> PeriodicWorker | None:
        """Ask the thread to stop (after a final cycle if ``final_flush``); its worker, or
        ``None`` when it was not started."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.signal(final_flush)
        return worker

    def _cycle(self, session: Session, *, final: bool) -> None:
        session.cycle(final)
        self.cycles += 1

    def one_off(self) -> None:
        """The final query and upload of an uploader that never ran (in the caller's
        helper thread)."""
        session: Session | None = None
        try:
            session = self.new_session()
            self._cycle(session, final=True)
        except Exception as exc:
            logger.warning("badput: final %s upload of job %r failed: %r", self.name, self.job, exc)
        finally:
            if session is not None:
                with suppress(Exception):
                    session.close()


def join_or_abandon(thread: threading.Thread, timeout: float | None, what: str) -> bool:
    thread.join(timeout)
    if thread.is_alive():
        logger.warning(
            "%s did not complete within %s seconds and will be abandoned to avoid blocking"
            " workload shutdown. The job may be missing its final goodput metrics upload.",
            what,
            timeout,
        )
        return False
    return True
