"""One-shot entry points: read a job, measure it, advise or replay."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from badput.advice._advise import Advice, FailureRate, advise_of, pooled_rate
from badput.advice._measure import JobFacts, measure
from badput.advice._replay import ReplaySettings, WhatIf, whatif_of
from badput.analysis import LiveJob
from badput.engine import Report, Snapshot, Timeline
from badput.store import EventStore

Source = str | os.PathLike[str] | EventStore

__all__ = ["advise", "advise_pooled", "read_job", "report_advice", "whatif"]


def read_job(
    source: Source, job: str | None = None, *, ideal_step_time: float | None = None
) -> tuple[Report, JobFacts]:
    """The cumulative report of the job at ``source`` and its measured :class:`JobFacts`."""
    live = LiveJob(source, job, ideal_step_time=ideal_step_time)
    live.update()
    report = live.report(final=True)
    return report, measure(report, live.accountant.timeline(report))


def devices_of(report: Report) -> int | None:
    """The devices of the log's model event, else the ranks the log names (one device
    each), else None."""
    if report.program is not None and report.program.devices:
        return report.program.devices
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


def advise_pooled(
    jobs: Sequence[tuple[Source, str | None]],
    *,
    ideal_step_time: float | None = None,
    devices: int | None = None,
    price_per_device_hour: float | None = None,
) -> tuple[FailureRate, list[Advice]]:
    """Each job's :class:`Advice` with the failure rate pooled over them all (their
    failures over their running hours together, :func:`pooled_rate`); each job keeps its
    own checkpoint, restore and restart costs. ``jobs``: (source, job) pairs, as
    :func:`badput.store.job_sources` lists a store's (``badput advise --fleet``)."""
    read = [read_job(src, job, ideal_step_time=ideal_step_time) for src, job in jobs]
    rate = pooled_rate([facts for _, facts in read])
    names = [facts.job for _, facts in read]
    return rate, [
        advise_of(
            report,
            facts,
            devices=devices if devices is not None else devices_of(report),
            price_per_device_hour=price_per_device_hour,
            pooled=(rate, names),
        )
        for report, facts in read
    ]


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


def report_advice(
    snapshot: Snapshot,
    timeline: Timeline | None = None,
    *,
    devices: int | None = None,
    price_per_device_hour: float | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """What ``badput report`` shows as its advice: ``(advice, None)`` with the object of
    ``badput advise --json``'s ``"advice"``, or ``(None, why)`` when there is none (a
    window's report: the advice is of the whole job). ``timeline``: the report's
    (default: the snapshot's); devices default to the report's cost's, else its ranks."""
    report = snapshot.report
    if report.window is not None:
        return None, "a window's report: advice is of the whole job (report without --window)"
    if not report.attempts:
        return None, "the log has no attempt to advise on"
    drawn = timeline if timeline is not None else snapshot.drawn("the advice")
    if devices is None:
        devices = report.cost.devices if report.cost is not None else devices_of(report)
    try:
        advice = advise_of(
            report,
            measure(report, drawn),
            devices=devices,
            price_per_device_hour=price_per_device_hour,
        )
    except ValueError as exc:
        return None, str(exc)
    return advice.to_dict(), None
