"""A small job for the exporter tests: queue, init, prep, compile, an eval, a save, a
preemption, a restore and slow steps, as events (shared by the OTel and GCM tests)."""

from __future__ import annotations

from typing import Any

from badput.events import Event

JOB = "train-1"
T0 = 1_700_000_000.0


def _ev(t: float, kind: str, attempt: str | None, **fields: Any) -> Event:
    return Event(ts=T0 + t, kind=kind, job=JOB, attempt=attempt, **fields)


def job_events() -> tuple[list[Event], float]:
    """Queued, init, prep, compile, an eval, a save, a preemption, a restore, slow steps."""
    e = [
        _ev(0, "job_scheduled", None),
        _ev(10, "job_start", "0"),
        _ev(10, "accelerator_init_start", "0"),
        _ev(20, "accelerator_init_end", "0"),
        _ev(20, "training_prep_start", "0"),
        _ev(25, "training_prep_end", "0"),
        _ev(25, "compile_start", "0"),
        _ev(31, "compile_end", "0"),
    ]
    t = 31.0
    for n in range(1, 21):
        e.append(_ev(t, "step_start", "0", step=n))
        if n == 5:
            e.append(_ev(t + 0.5, "data_loading_start", "0", blocking=False))
            e.append(_ev(t + 1.5, "data_loading_end", "0", blocking=False))
        t += 4.0 if n == 1 else 2.0
        e.append(_ev(t, "step_end", "0", step=n))
        if n == 10:
            e.append(_ev(t, "custom_start", "0", name="eval"))
            e.append(_ev(t + 4, "custom_end", "0", name="eval"))
            t += 4
            e.append(_ev(t, "checkpoint_save_start", "0", step=10))
            e.append(_ev(t + 3, "checkpoint_save_end", "0", step=10))
            t += 3
    e.append(_ev(t, "attempt_end", "0", status="preempted"))
    t += 20
    e.append(_ev(t, "job_start", "1"))
    e.append(_ev(t, "checkpoint_restore_start", "1", step=10))
    e.append(_ev(t + 5, "checkpoint_restore_end", "1", step=10))
    t += 5
    for n in range(11, 31):
        e.append(_ev(t, "step_start", "1", step=n))
        t += 5.0 if n == 11 else (3.0 if n in (25, 26) else 2.0)
        e.append(_ev(t, "step_end", "1", step=n))
    return e, t
