"""Timed sections (``with rec.section("forward"):``), aggregated in the process.

A section runs once per step on every rank, so writing two events per run would
multiply the log. Instead each section name has one reusable timer; entering it
reads ``perf_counter`` and leaving it appends the duration to a list (one atomic
append under the GIL, no lock). The recorder's writer thread calls
:meth:`SectionTimers.summaries` every ``interval`` seconds and writes one
``section_summary`` event per section that ran (or is still open): count, total
seconds, quantiles, the time of the last completion and, while one run is still
open, when it began (docs/events.md). Nothing acknowledged is lost: the writer
takes only the samples present when it looks (``del samples[:n]``), later ones
wait for the next period.

This module imports only the standard library: the recorder must stay light.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, Final

__all__ = ["SectionTimer", "SectionTimers", "summarize"]

#: Default seconds between two summaries of the same section.
DEFAULT_SECTION_INTERVAL: Final = 5.0

_perf = time.perf_counter


class SectionTimer:
    """The context manager of one section name (reused by every ``with``).

    Re-entrant: nested or concurrent runs of the same name each push their own
    start; a run that raises is timed all the same (its time was spent).
    """

    __slots__ = ("_starts", "last_end", "name", "samples")

    def __init__(self, name: str) -> None:
        self.name = name
        self.samples: list[float] = []  # durations, seconds
        self._starts: list[float] = []  # perf_counter of the runs still open
        self.last_end = 0.0  # perf_counter of the last completion (0.0: none yet)

    def __enter__(self) -> None:
        self._starts.append(_perf())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Pop first, then read the clock: another thread of the same name may push a
        # start between the two, and a clock read before the pop could then be older
        # than the start it is paired with (a negative duration).
        try:
            start = self._starts.pop()
        except IndexError:  # a stray exit (nothing open)
            return
        end = _perf()
        self.samples.append(end - start)
        self.last_end = end

    def open_since(self) -> float | None:
        """``perf_counter`` time at which the oldest open run began (``None``: none open)."""
        starts = self._starts
        try:
            return starts[0] if starts else None
        except IndexError:  # emptied by the training thread meanwhile
            return None


def _quantile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile by linear interpolation (numpy's default), on a sorted list."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples: list[float]) -> dict[str, Any]:
    """``count``, ``seconds`` (total) and ``quantiles`` (min, p50, p90, max) of ``samples``."""
    values = sorted(samples)
    quantiles = {}
    if values:
        quantiles = {
            "min": values[0],
            "p50": _quantile(values, 0.5),
            "p90": _quantile(values, 0.9),
            "max": values[-1],
        }
    return {"count": len(values), "seconds": float(sum(values)), "quantiles": quantiles}


class SectionTimers:
    """Every section timer of one recorder (one process)."""

    __slots__ = ("_offset", "interval", "timers")

    def __init__(self, interval: float = DEFAULT_SECTION_INTERVAL) -> None:
        self.interval = interval
        self.timers: dict[str, SectionTimer] = {}
        # wall clock = perf_counter + offset (perf_counter is what the hot path reads)
        self._offset = time.time() - _perf()

    def timer(self, name: str) -> SectionTimer:
        timer = self.timers.get(name)
        if timer is None:
            # setdefault: two threads creating the same name share one timer
            timer = self.timers.setdefault(name, SectionTimer(name))
        return timer

    def summaries(self) -> list[tuple[float, dict[str, Any]]]:
        """One ``(ts, fields)`` per section that ran since the last call or is open now.

        Takes exactly the samples present now; samples appended meanwhile are kept
        for the next call.
        """
        now = time.time()
        out: list[tuple[float, dict[str, Any]]] = []
        for name, timer in list(self.timers.items()):
            samples = timer.samples
            n = len(samples)
            taken = samples[:n]
            del samples[:n]
            open_since = timer.open_since()
            if not taken and open_since is None:
                continue
            fields = summarize(taken)
            fields["name"] = name
            if timer.last_end:
                fields["last"] = timer.last_end + self._offset
            if open_since is not None:
                fields["open_since"] = open_since + self._offset
            out.append((now, fields))
        return out
