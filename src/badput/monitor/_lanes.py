"""The :class:`~badput.monitor.Monitor`'s exporters, each on a lane of its own.

A lane is one exporter's own daemon thread: an exporter that hangs holds only its lane,
and delays no other exporter. :class:`ExporterLanes` hands a snapshot to every lane at
once and waits for them until a deadline, keeps each exporter's failures and back-off
(1, 2, 4... cycles), and closes the exporters this monitor is the last user of.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final

from badput.monitor._base import Exporter, Snapshot

__all__ = ["MAX_BACKOFF_CYCLES", "MAX_BACKOFF_SECONDS", "ExporterLanes"]

logger = logging.getLogger("badput")

#: Longest back-off of a failing exporter, in cycles.
MAX_BACKOFF_CYCLES: Final = 32
#: ... and in seconds (``interval`` x cycles; at least one cycle is always skipped).
MAX_BACKOFF_SECONDS: Final = 300.0


class _Lane:
    """One exporter's own daemon thread: an exporter that hangs holds only its lane.

    One task at a time: :meth:`run` refuses a new task while the last one runs, or
    (``after_busy``) queues it to run next.
    """

    __slots__ = ("_done", "_lock", "_name", "_next", "_next_done", "_ready", "_task", "_thread")

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._task: Callable[[], None] | None = None
        self._done = threading.Event()
        self._done.set()
        self._next: Callable[[], None] | None = None
        self._next_done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        return not self._done.is_set()

    def run(self, task: Callable[[], None], *, after_busy: bool = False) -> threading.Event | None:
        """Start ``task`` on the lane; the event is set when it is over. ``None``: busy."""
        with self._lock:
            if not self._done.is_set():
                if not after_busy:
                    return None
                self._next, self._next_done = task, threading.Event()
                return self._next_done
            done = self._done = threading.Event()
            self._task = task
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name=f"badput-export-{self._name}", daemon=True
                )
                self._thread.start()
            self._ready.set()
        return done

    def _loop(self) -> None:
        while True:
            self._ready.wait()
            self._ready.clear()
            while True:
                with self._lock:
                    task, self._task, done = self._task, None, self._done
                if task is None:
                    break
                try:
                    task()  # tasks catch and record their own errors
                finally:
                    with self._lock:
                        if self._next is not None:  # queued while busy: it runs next
                            self._task, self._next = self._next, None
                            self._done = self._next_done
                    done.set()
                if task is _QUIT:
                    return


def _quit() -> None:
    return None


_QUIT: Final = _quit

# How many monitors use each exporter: the last one to stop closes it. Keyed by id, with the
# exporter held, so that no new object takes its id while it is counted: a monitor dropped
# without stop() leaves its count behind, and a new exporter at the freed address was then
# counted as shared with it and never closed.
_exporter_users: dict[int, tuple[Exporter, int]] = {}
_users_lock = threading.Lock()


class _ExporterState:
    """One exporter, its lane and its failure book-keeping."""

    __slots__ = ("exporter", "failures", "lane", "name", "skip", "streak", "warned")

    def __init__(self, name: str, exporter: Exporter) -> None:
        self.name = name
        self.exporter = exporter
        self.lane = _Lane(name)
        self.failures = 0  # failures so far (errors and deadlines missed)
        self.streak = 0  # consecutive failures
        self.skip = 0  # cycles still to skip
        self.warned = False


def _exporter_name(exporter: Exporter, taken: set[str]) -> str:
    base = str(getattr(exporter, "name", "") or type(exporter).__name__)
    name, k = base, 2
    while name in taken:
        name, k = f"{base}#{k}", k + 1
    taken.add(name)
    return name


class ExporterLanes:
    """A monitor's exporters, each on its own lane, with their failures and back-off.

    Args:
        exporters: the monitor's exporters (counted as used by it until :meth:`close`).
        interval: the monitor's interval (the back-off is at most about
            :data:`MAX_BACKOFF_SECONDS`).
        timeout: how long each export and close is waited for, in seconds.
    """

    def __init__(self, exporters: Iterable[Exporter], interval: float, timeout: float) -> None:
        taken: set[str] = set()
        self._states = [_ExporterState(_exporter_name(e, taken), e) for e in exporters]
        self._timeout = timeout
        self._max_skip = max(1, min(MAX_BACKOFF_CYCLES, int(MAX_BACKOFF_SECONDS // interval)))
        #: A shutdown gave up on a hung exporter (it finishes in the background).
        self.left_behind = False
        #: When stop() stops waiting (monotonic): exports and closes give up by then.
        self.stop_deadline: float | None = None
        with _users_lock:
            for st in self._states:
                key = id(st.exporter)
                users = _exporter_users.get(key, (st.exporter, 0))[1]
                _exporter_users[key] = (st.exporter, users + 1)

    @property
    def failures(self) -> dict[str, int]:
        """Failures so far, per exporter name (every exporter listed, 0 when none)."""
        return {st.name: st.failures for st in self._states}

    def after_fork(self) -> None:
        """In a forked child: fresh lanes (the parent's lane threads do not exist here)."""
        self.left_behind = False
        self.stop_deadline = None
        for st in self._states:
            st.lane = _Lane(st.name)

    def _deadline(self) -> float:
        """When the exports of this cycle stop being waited for (monotonic)."""
        deadline = time.monotonic() + self._timeout
        stop = self.stop_deadline
        return deadline if stop is None else min(deadline, stop)

    def export(self, snapshot: Snapshot, *, final: bool) -> None:
        """Hand ``snapshot`` to every exporter on its own lane, all at once; wait for
        them until the deadline. A slow exporter delays no other one."""
        running: list[tuple[_ExporterState, threading.Event, list[BaseException]]] = []
        for st in self._states:
            if st.skip > 0 and not final:  # the final cycle tries every exporter
                st.skip -= 1
                continue
            errors: list[BaseException] = []

            def export(st: _ExporterState = st, errors: list[BaseException] = errors) -> None:
                try:
                    st.exporter.export(snapshot)
                except BaseException as exc:
                    errors.append(exc)

            done = st.lane.run(export)
            if done is None:  # still in an export that missed its deadline
                self.left_behind = final
                logger.debug("badput: exporter %r is still busy; skipped", st.name)
                continue
            running.append((st, done, errors))
        deadline = self._deadline()
        for st, done, errors in running:
            if not done.wait(max(deadline - time.monotonic(), 0.0)):
                self.left_behind = final
                self._failed(st, TimeoutError(f"no answer within {self._timeout:g}s (hung?)"))
            elif errors:
                self._failed(st, errors[0])
            else:
                if st.streak:
                    logger.debug(
                        "badput: exporter %r works again after %d failures", st.name, st.streak
                    )
                st.streak = 0
                st.skip = 0

    def close(self) -> None:
        """Close each exporter this monitor is the last user of, each on its lane, in
        parallel, bounded by the exporter deadline (and stop()'s timeout)."""
        waits: list[tuple[_ExporterState, threading.Event]] = []
        for st in self._states:
            with _users_lock:
                key = id(st.exporter)
                left = _exporter_users.get(key, (st.exporter, 1))[1] - 1
                if left > 0:
                    _exporter_users[key] = (st.exporter, left)
                else:
                    _exporter_users.pop(key, None)
            if left > 0:  # another monitor still exports to it
                continue

            def close(st: _ExporterState = st) -> None:
                try:
                    st.exporter.close()
                except Exception as exc:
                    logger.warning("badput: closing exporter %r failed: %r", st.name, exc)

            done = st.lane.run(close, after_busy=True)  # after a hung export returns
            assert done is not None
            waits.append((st, done))
        deadline = self._deadline()
        for st, done in waits:
            if not done.wait(max(deadline - time.monotonic(), 0.0)):
                self.left_behind = True
                logger.warning(
                    "badput: exporter %r did not finish within %gs; it is closed in the "
                    "background when it returns",
                    st.name,
                    self._timeout,
                )
            else:
                st.lane.run(_QUIT)

    def _failed(self, st: _ExporterState, exc: BaseException) -> None:
        st.failures += 1
        st.streak += 1
        st.skip = min(2 ** (st.streak - 1), self._max_skip)
        if not st.warned:
            st.warned = True
            logger.warning(
                "badput: exporter %r failed: %s: %s; backing off (skipping it for "
                "1, 2, 4... cycles while it fails; further failures are logged at "
                "debug level). The training run is not affected.",
                st.name,
                type(exc).__name__,
                exc,
            )
        else:
            logger.debug(
                "badput: exporter %r failed again (%d in a row): %r; skipping %d cycles",
                st.name,
                st.streak,
                exc,
                st.skip,
            )
