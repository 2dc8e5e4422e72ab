"""JAX's own compilations are ``compile``: tracing a function, lowering it and compiling it
with XLA, as timed by JAX itself (its ``jax.monitoring`` events).

Installed (once per process) by importing ``badput.integrations.jax``, or
``badput.integrations.keras`` on the JAX backend. JAX reports each phase of a compilation
(``/jax/core/compile/jaxpr_trace_duration``, ``jaxpr_to_mlir_module_duration``,
``backend_compile_duration``) when it ends, with its start and end (its duration, on an
older JAX that has no time-span listener). Each is written as a ``compile`` interval to the
live recorders, or kept for the process's first recorder when none is live yet (a model's
initialisers compiled while it is built, before the recorder exists).

The intervals come after the fact, so they follow the rule of nested intervals: the first
step's tracing is ``compile``, taken out of the step (its ``startup`` is what remains), and
the compilations that Keras runs at an epoch's end (its metrics' results) are ``compile``
rather than time no hook surrounds. The listener never raises.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from badput.recorder import LIVE_RECORDERS, record_interval
from badput.runtime import lifecycle as _lifecycle

__all__ = ["COMPILE_EVENTS", "install_compile_listener"]

#: The phases of a compilation that JAX times, each recorded as ``compile``.
COMPILE_EVENTS = frozenset(
    {
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    }
)

_installed = False
_lock = threading.Lock()


def install_compile_listener(jax: Any) -> bool:
    """Listen to ``jax.monitoring``'s compile events (once per process); False when this
    JAX has no listener to register."""
    global _installed  # one listener per process
    monitoring = getattr(jax, "monitoring", None)
    with _lock:
        if _installed:
            return True
        spans = getattr(monitoring, "register_event_time_span_listener", None)
        durations = getattr(monitoring, "register_event_duration_secs_listener", None)
        if spans is not None:
            spans(_on_time_span)
        elif durations is not None:
            durations(_on_duration)
        else:
            return False
        _installed = True
        return True


def _on_time_span(event: str, start: float, end: float, **kwargs: Any) -> None:
    if event in COMPILE_EVENTS:
        record_compile(start, end)


def _on_duration(event: str, duration: float, **kwargs: Any) -> None:
    if event in COMPILE_EVENTS:
        end = time.time()
        record_compile(end - duration, end)


def record_compile(start: float, end: float) -> None:
    """A ``compile`` interval from ``start`` to ``end`` in every live recorder, or kept for
    the first recorder built when none is live. Never raises."""
    try:
        if not end > start:
            return
        recorders = [r for r in _lifecycle.live(LIVE_RECORDERS) if not r.closed]
        if not recorders:
            record_interval(LIVE_RECORDERS, "compile", start, end)
        for rec in recorders:
            rec.record_compile_start(ts=start)
            rec.record_compile_end(ts=end)
    except Exception:
        return
