"""One job's part of the fleet: a pure function of the job's files (:func:`analyse_job`),
and what those files were (:func:`job_fingerprint`), the key its cached result is kept by.

A job's result is plain JSON (numbers, strings, lists, dicts): the same object whether a
process of the local pool, a Ray worker on another machine or the cache produced it, so
the fleet built from it is the same byte for byte."""

from __future__ import annotations

import hashlib
import math
import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

from badput.store import EventStore

if TYPE_CHECKING:
    from badput.analysis import LiveJob
    from badput.engine import Report

__all__ = [
    "DAY",
    "RESULT_VERSION",
    "JobResult",
    "analyse_job",
    "failed_attempts",
    "job_fingerprint",
    "job_result",
]

#: One job's result (see :func:`analyse_job` for its keys).
JobResult = dict[str, Any]

DAY: Final = 86_400.0

#: Attempt statuses that are not failures: the job ended as asked, or a person stopped it
#: (the rule ``badput advise`` counts failures by).
_NOT_FAILURES: Final = frozenset({"completed", "cancelled", "success", "succeeded"})

#: Bumped whenever what :func:`analyse_job` returns changes: cached results of another
#: version are analysed again. (2: ``devices``, ``devices_source``.)
RESULT_VERSION: Final = 2


def _failed(status: str | None, end_reason: str, last: bool) -> bool:
    """Whether an attempt ended by a failure: a status that is not a success or a stop; an
    attempt that is not the last and has no status (the next one restarted it)."""
    if not last:
        return status not in _NOT_FAILURES if status else True
    if end_reason == "job_end" or end_reason.startswith("attempt_end"):
        return status is not None and status not in _NOT_FAILURES
    return False  # still running, or its log just stops: nothing says it failed


def failed_attempts(result: JobResult) -> list[dict[str, Any]]:
    """The attempts of ``result`` that ended by a failure."""
    return [a for a in result["attempts"] if a["failed"]]


def _day_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d")


def _days(start: float, end: float) -> list[tuple[str, float, float]]:
    """The UTC days ``[start, end]`` covers: (day, window start, window end)."""
    out = []
    day_start = math.floor(start / DAY) * DAY
    while day_start < end:
        out.append((_day_of(day_start), max(start, day_start), min(end, day_start + DAY)))
        day_start += DAY
    return out


def analyse_job(store: EventStore, job: str) -> JobResult:
    """The fleet's view of one job: its partition (seconds per bucket), attempts (with
    which of them failed) and its time per UTC day with the goodput of that day (each a
    windowed report of the engine: the same partition, cut at midnight).

    A job that cannot be read gives a result with ``error`` set and no time."""
    from badput.analysis import LiveJob  # noqa: PLC0415 (the engine pulls numpy)

    try:
        live = LiveJob(store, job, parallel=False)
        live.update()
    except (ValueError, OSError) as exc:
        return _error_result(job, str(exc))
    return job_result(live)


def job_result(live: LiveJob) -> JobResult:
    """:func:`analyse_job`'s result of a job already read (a large job's parts are read by
    several workers and merged: :meth:`~badput.analysis.LiveJob.from_split`)."""
    job = live.job
    try:
        report = _priced_report(live)
        days = []
        if report.total_seconds > 0:
            for day, lo, hi in _days(report.start, report.end):
                if hi <= lo:
                    continue
                part = live.report(window=(lo, hi), final=True)
                days.append(
                    {
                        "day": day,
                        "seconds": part.total_seconds,
                        "goodput_seconds": part.bucket("productive"),
                    }
                )
    except (ValueError, OSError) as exc:
        return _error_result(job, str(exc))
    n = len(report.attempts)
    return {
        "job": job,
        "error": None,
        "start": report.start,
        "end": report.end,
        "end_reason": report.end_reason,
        "status": _status(report.attempts[-1].status if n else None, report.end_reason),
        "total_seconds": report.total_seconds,
        "goodput_seconds": report.bucket("productive"),
        "buckets": dict(sorted(report.buckets.items())),
        "attempts": [
            {
                "id": str(a.id),
                "start": a.start,
                "end": a.end,
                "status": a.status,
                "exit_code": a.exit_code,
                "end_reason": a.end_reason,
                "failed": _failed(a.status, a.end_reason, i == n - 1),
            }
            for i, a in enumerate(report.attempts)
        ],
        "days": days,
        "steps_kept": report.steps.kept,
        "steps_wasted": report.steps.wasted,
        "ranks": len(report.ranks),
        "diagnostics": len(report.diagnostics),
        # the devices its money is counted on (the engine's rule: the log's model event,
        # else one per rank); money itself is the summary's, at the price of that run
        "devices": report.cost.devices if report.cost is not None else None,
        "devices_source": report.cost.devices_source if report.cost is not None else None,
    }


def _priced_report(live: LiveJob) -> Report:
    """The job's final report at a price of 1 per device-hour: its ``cost`` names the
    devices (the engine's rule, ``engine/_cost.py``) without the result depending on any
    price, so a cached result prices at every price."""
    accountant = live.accountant
    before = accountant.price_per_device_hour
    accountant.price_per_device_hour = 1.0
    try:
        return live.report(final=True)
    finally:
        accountant.price_per_device_hour = before


def _status(last_status: str | None, end_reason: str) -> str:
    if last_status:
        return last_status
    return "ended" if end_reason == "job_end" else "unended"


def _error_result(job: str, message: str) -> JobResult:
    return {
        "job": job,
        "error": message,
        "start": None,
        "end": None,
        "end_reason": None,
        "status": "error",
        "total_seconds": 0.0,
        "goodput_seconds": 0.0,
        "buckets": {},
        "attempts": [],
        "days": [],
        "steps_kept": 0,
        "steps_wasted": 0,
        "ranks": 0,
        "diagnostics": 0,
        "devices": None,
        "devices_source": None,
    }


def job_fingerprint(store: EventStore, job: str) -> str | None:
    """What ``job``'s analysis reads, as a digest: each file's name, size and modification
    time (a store of files: :class:`~badput.store.JsonlStore`, ``SingleFileStore``), or what
    the store itself says of the job (a store with ``fingerprint(job)``, as an object
    store's part names and etags). None: nothing to key a cache by (the job is analysed
    every time)."""
    own = getattr(store, "fingerprint", None)
    if callable(own):
        value = own(job)
        return None if value is None else _digest([f"v{RESULT_VERSION}", job, str(value)])
    files = getattr(store, "files", None)
    if not callable(files):
        return None
    parts = [f"v{RESULT_VERSION}", job]
    for stream, path in files(job):
        try:
            st = os.stat(path)
        except OSError:
            parts.append(f"{stream}\0missing")
            continue
        parts.append(f"{stream}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}")
    return _digest(parts)


def _digest(parts: list[str]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()
