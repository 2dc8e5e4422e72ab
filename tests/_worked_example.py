"""The worked example of ACCOUNTING.md §7, as events (shared by several tests)."""

from __future__ import annotations

from badput.events import Event

JOB = "worked-example"
T0 = 1_732_000_000.0
MIN = 60.0

EXPECTED_MINUTES = {
    "productive": 100,
    "wasted": 40,
    "slowdown": 25,
    "recovery": 15,
    "checkpoint_restore": 10,
    "checkpoint_save": 10,
}


def t(minutes: float) -> float:
    return T0 + minutes * MIN


def ev(minutes: float, kind: str, attempt: str | None, **fields: object) -> Event:
    return Event(ts=t(minutes), kind=kind, job=JOB, attempt=attempt, **fields)  # type: ignore[arg-type]


def worked_example_events(with_ids: bool = True, step_ends: bool = True) -> list[Event]:
    """Attempt 1 crashes after step 70; attempt 2 restores 50 and finishes at 75."""
    a0 = "0" if with_ids else None
    a1 = "1" if with_ids else None
    out = [
        ev(0, "job_start", a0),
        ev(0, "checkpoint_restore_start", a0, step=25),
        ev(5, "checkpoint_restore_end", a0, step=25),
    ]
    m = 5.0
    for n in range(26, 51):
        out.append(ev(m, "step_start", a0, step=n))
        m += 2
        if step_ends:
            out.append(ev(m, "step_end", a0, step=n))
    out += [
        ev(55, "checkpoint_save_start", a0, step=50),
        ev(60, "checkpoint_save_end", a0, step=50),
    ]
    m = 60.0
    for n in range(51, 71):
        out.append(ev(m, "step_start", a0, step=n))
        m += 2
        if step_ends:
            out.append(ev(m, "step_end", a0, step=n))
    # attempt 1 crashes at 100 without a word: its last event (step 70's end) is at 100.
    if not step_ends:
        out.append(ev(100, "heartbeat", a0))
    out += [
        ev(115, "job_start", a1),
        ev(115, "checkpoint_restore_start", a1, step=50),
        ev(120, "checkpoint_restore_end", a1, step=50),
    ]
    m = 120.0
    for n in range(51, 76):
        out.append(ev(m, "step_start", a1, step=n))
        m += 3
        if step_ends:
            out.append(ev(m, "step_end", a1, step=n))
    out += [
        ev(195, "checkpoint_save_start", a1, step=75),
        ev(200, "checkpoint_save_end", a1, step=75),
        ev(200, "job_end", a1),
    ]
    return out
