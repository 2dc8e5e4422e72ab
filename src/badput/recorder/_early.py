"""Intervals that happen before the process has a recorder, and the span of torchrun's own
start: both handed to the process's first recorder.

A hook (``torch.distributed.init_process_group`` wrapped by an integration) may time its
call before the training code builds its :class:`Recorder`; the interval is kept here and
recorded by the first recorder built in the process (or at once by the live ones).
"""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from typing import Any

from badput.runtime import env as _env
from badput.runtime import lifecycle as _lifecycle

__all__ = [
    "early_marks",
    "record_interval",
    "record_start",
    "take_early",
    "torchrun_start_span",
]

# (base, start, end) of intervals timed while no recorder was live; at most a few.
_early: list[tuple[str, float, float]] = []
_MAX_EARLY = 64
_lock = threading.Lock()


def record_start(group: str, base: str) -> list[Any]:
    """``record_<base>_start`` now in every live recorder of ``group``; the recorders
    (empty: none is live, time the call and :func:`record_interval` it). Never raises."""
    try:
        recorders = [r for r in _lifecycle.live(group) if not r.closed]
        for rec in recorders:
            getattr(rec, f"record_{base}_start")()
    except Exception:
        return []
    return recorders


def record_end(recorders: list[Any], base: str) -> None:
    """``record_<base>_end`` now in ``recorders`` (those :func:`record_start` returned)."""
    for rec in recorders:
        with suppress(Exception):
            getattr(rec, f"record_{base}_end")()


def record_interval(group: str, base: str, start: float, end: float) -> None:
    """Keep interval ``base`` (``distributed_init``, ``model_build``...) from ``start`` to
    ``end``, timed while no recorder of ``group`` was live, for the next recorder built in
    this process. Never raises."""
    with _lock:
        if len(_early) < _MAX_EARLY:
            _early.append((base, start, end))


def early_marks(intervals: list[tuple[str, float, float]]) -> list[tuple[float, str]]:
    """``(ts, kind)`` of each interval's start and end, in time order (a start before an
    end at the same time: the order their pairs were kept in)."""
    marks = [(start, f"{base}_start") for base, start, _ in intervals]
    marks += [(end, f"{base}_end") for base, _, end in intervals]
    return sorted(marks, key=lambda m: (m[0], not m[1].endswith("_start")))


def take_early() -> list[tuple[str, float, float]]:
    """The intervals kept for the first recorder (and forgets them)."""
    with _lock:
        out = list(_early)
        _early.clear()
    return out


def torchrun_start_span(process_start: float) -> tuple[float, float] | None:
    """``(start, end)`` of torchrun's own start in a worker of its first worker group under
    ``badput run``: from the elastic agent's start (this process's parent: its imports, the
    rendezvous of the agents, spawning the workers) to this process's start. ``None``
    elsewhere (not torchrun, a restarted group, no launcher to date the attempt)."""
    if not os.environ.get("TORCHELASTIC_RUN_ID") or not _env.under_launcher():
        return None
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return None  # the group's restart: the time since the last group is recovery
    agent = _env.process_start_time(os.getppid())
    attempt = _env.launcher_attempt_start()
    if agent is None or attempt is None:
        return None
    start = max(agent, attempt)
    return (start, process_start) if start < process_start else None
