"""One periodic worker: the daemon thread of the recorder, the Monitor and the compat
GoodputMonitor's uploaders.

A :class:`PeriodicWorker` runs ``tick()`` every ``interval`` seconds on its own daemon
thread (a drift-free schedule: a tick that overruns skips the missed slots), or at
once after :meth:`~PeriodicWorker.wake`. :meth:`~PeriodicWorker.signal` asks it to
stop; the thread then runs ``finish(final)`` once and ends. The owner decides how
long to wait for it (:meth:`~PeriodicWorker.join`): shutdown is always bounded by the
caller, never by the worker. An exception of ``tick`` or ``finish`` is logged once on
the ``badput`` logger and never propagates (the thread carries on ticking).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["PeriodicWorker"]

logger = logging.getLogger("badput")


class PeriodicWorker:
    """A daemon thread running ``tick`` every ``interval`` seconds, ``finish`` at the end.

    Args:
        name: the thread's name.
        interval: seconds between ticks (an attribute: the owner may change it).
        tick: the periodic work.
        finish: called once on the thread when it stops, with the ``final`` flag of
            :meth:`signal` (a final flush, closing files...).
        tick_at_start: the first tick runs at once (else ``interval`` after start).
        setup: called first on the thread (e.g. opening a session).
    """

    def __init__(
        self,
        name: str,
        interval: float,
        tick: Callable[[], object],
        *,
        finish: Callable[[bool], None] | None = None,
        tick_at_start: bool = True,
        setup: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.interval = interval
        self._tick = tick
        self._finish = finish
        self._tick_at_start = tick_at_start
        self._setup = setup
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._final = False
        self._thread: threading.Thread | None = None
        self._warned = False

    @property
    def running(self) -> bool:
        """True while the thread runs and was not asked to stop."""
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopping

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def start(self) -> bool:
        """Start the thread; False when it already runs, was stopped, or cannot start."""
        with self._lock:
            if self._thread is not None or self._stopping:
                return False
            thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            thread.start()  # may raise RuntimeError (interpreter shutdown): the caller's
            self._thread = thread
        return True

    def wake(self) -> None:
        """Run the next tick now (the schedule of the following ones is unchanged)."""
        self._wake.set()

    def signal(self, final: bool) -> threading.Thread | None:
        """Ask the thread to stop after ``finish(final)``; the thread, or ``None`` if it
        never started. Idempotent (the first ``final`` counts)."""
        with self._lock:
            if not self._stopping:
                self._stopping = True
                self._final = final
            thread = self._thread
        self._wake.set()
        return thread

    def join(self, timeout: float | None) -> bool:
        """Wait at most ``timeout`` seconds for the thread to end; True if it did (or never
        ran). Never waits for itself."""
        thread = self._thread
        if thread is None:
            return True
        if thread is threading.current_thread():
            return False
        thread.join(timeout)
        return not thread.is_alive()

    def _guard(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:  # never into the job; the thread carries on
            if not self._warned:
                self._warned = True
                logger.warning("badput: %s: unexpected error: %r", self.name, exc)
            else:
                logger.debug("badput: %s: unexpected error again: %r", self.name, exc)

    def _loop(self) -> None:
        try:
            if self._setup is not None:
                self._guard(self._setup)
            next_at = time.monotonic() + (0.0 if self._tick_at_start else self.interval)
            while not self._stopping:
                self._wake.wait(max(next_at - time.monotonic(), 0.0))
                self._wake.clear()
                if self._stopping:
                    break
                self._guard(self._tick)
                now = time.monotonic()
                if now >= next_at:
                    next_at += self.interval
                    if next_at < now:  # a tick overran: skip the missed slots
                        next_at = now + self.interval - (now - next_at) % self.interval
        finally:
            if self._finish is not None:
                final = self._final
                self._guard(lambda: self._finish(final))  # type: ignore[misc]
