"""One-shot entry points: read a job, measure it, advise or replay."""

from __future__ import annotations

import os

from badput.advice._advise import Advice, advise_of
from badput.advice._measure import JobFacts, measure
from badput.advice._replay import ReplaySettings, WhatIf, whatif_of
from badput.analysis import LiveJob
from badput.engine import Report
from badput.store import EventStore

Source = str | os.PathLike[str] | EventStore

__all__ = ["advise", "read_job", "whatif"]


def read_job(
    source: Source, job: str | None = None, *, ideal_step_time: float | None = None
) -> tuple[Report, JobFacts]:
    """The cumulative report of the job at ``source`` and its measured :class:`JobFacts`."""
    live = LiveJob(source, job, ideal_step_time=ideal_step_time)
    live.update()
    report = live.report(final=True)
    return report, measure(report, live.accountant.timeline(report))


def devices_of(report: Report) -> int | None:
    """Ranks the log names (one device each), or None when it names none."""
    ranks = {r.rank for r in report.ranks}
    return len(ranks) or None


def advise(
    source: Source,
    job: str | None = None,
    *,
    ideal_step_time: float | None = None,
    devices: int | None = None,
    price_per_device_hour: float | None = None,
) -> Advice:
    """What to change in the job at ``source`` (see docs/advice.md)."""
    report, facts = read_job(source, job, ideal_step_time=ideal_step_time)
    return advise_of(
        report,
        facts,
        devices=devices if devices is not None else devices_of(report),
        price_per_device_hour=price_per_device_hour,
    )


def whatif(
    source: Source,
    job: str | None = None,
    settings: ReplaySettings | None = None,
    *,
    ideal_step_time: float | None = None,
) -> WhatIf:
    """The job at ``source`` replayed under ``settings`` (default: its own)."""
    report, facts = read_job(source, job, ideal_step_time=ideal_step_time)
    return whatif_of(report, facts, settings or ReplaySettings())
