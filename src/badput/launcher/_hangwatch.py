"""Hang detection for ``badput run --hang-timeout``: progress, not heartbeats, decides.

:class:`HangWatch` follows the store while one attempt runs (reading only what is
new) and says when no rank has made progress (a step, a recorded interval, a
completed section) for longer than the timeout: a fixed number of seconds, or
``auto``, ``max(stall_factor x typical step time, stall_floor)`` (docs/ranks.md).
Before the attempt's first progress nothing is judged: start-up (loading,
compilation) has no step time to compare with.

A hang is declared when the processes are **alive but not progressing**: no
progress for longer than the timeout while some rank still writes (heartbeats,
section summaries) after its last progress + half the timeout. Processes that
went silent (a clean shutdown after the last step: recorders closed, the
interpreter exiting) are given three times the timeout before they are judged
hung, so a job that finished training is not killed during its teardown, and a
process that hangs holding the GIL (no heartbeats) is still caught.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from badput.analysis import LiveJob
    from badput.store import EventStore

__all__ = ["AUTO", "HangWatch", "parse_hang_timeout"]

#: ``--hang-timeout auto``: the timeout follows the typical step time.
AUTO: Final = "auto"
#: Silent processes (no event at all) get this many timeouts before they count as hung.
SILENT_FACTOR: Final = 3.0
#: Seconds between two looks at the store.
POLL_SECONDS: Final = 1.0


def parse_hang_timeout(text: str) -> float | str:
    """``"auto"`` or a positive number of seconds; ``ValueError`` otherwise."""
    raw = text.strip().lower()
    if raw == AUTO:
        return AUTO
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"expected seconds or 'auto', got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise ValueError(f"the hang timeout must be a positive number of seconds, got {text!r}")
    return value


class HangWatch:
    """Watches one attempt of ``job`` in ``store`` for a hang.

    ``timeout``: seconds, or :data:`AUTO`. ``stall_factor`` and ``stall_floor``
    make the automatic timeout (defaults: :class:`~badput.engine.RankOptions`).
    """

    def __init__(
        self,
        store: str | EventStore,
        job: str,
        attempt: str,
        timeout: float | str,
        *,
        stall_factor: float | None = None,
        stall_floor: float | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        from badput.engine import RankOptions  # noqa: PLC0415 (the engine pulls numpy)

        defaults = RankOptions()
        self.store = store
        self.job = job
        self.attempt = attempt
        self.timeout = timeout
        self.stall_factor = defaults.stall_factor if stall_factor is None else stall_factor
        self.stall_floor = defaults.stall_floor if stall_floor is None else stall_floor
        self.poll_seconds = poll_seconds
        self._live: LiveJob | None = None
        self._next_poll = 0.0

    def limit(self, typical: float | None) -> float:
        """The timeout in seconds, given the typical step time (for ``auto``)."""
        if isinstance(self.timeout, (int, float)):
            return float(self.timeout)
        return max(self.stall_factor * typical if typical else 0.0, self.stall_floor)

    def check(self, now: float | None = None) -> str | None:
        """Why the attempt is hung (a sentence), or ``None``. Reads the store at most
        every ``poll_seconds``; errors reading it are not a hang."""
        mono = time.monotonic()
        if mono < self._next_poll:
            return None
        self._next_poll = mono + self.poll_seconds
        try:
            live = self._open()
            live.update()
            last, seen, typical = live.accountant.progress(self.attempt)
        except (OSError, ValueError):
            return None
        if last is None:
            return None
        now = time.time() if now is None else now
        limit = self.limit(typical)
        idle = now - last
        alive = seen is not None and seen > last + limit / 2
        if idle <= limit or (not alive and idle <= SILENT_FACTOR * limit):
            return None
        silent = "" if alive else ", and no event either"
        return f"no progress for {idle:.1f}s (hang timeout {limit:.1f}s{silent})"

    def _open(self) -> LiveJob:
        if self._live is None:
            from badput.analysis import LiveJob  # noqa: PLC0415
            from badput.store import open_store  # noqa: PLC0415

            self._live = LiveJob(open_store(self.store), self.job, parallel=False)
        return self._live
