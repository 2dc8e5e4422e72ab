"""The fleet's answers, from its jobs' results (pure; no I/O): time-weighted goodput, the
time lost by cause, the worst jobs, failures and MTBF per ISO week, goodput per UTC day;
with a price per device-hour, the money of each (docs/advice.md#cost).

Money is made here, from each result's seconds and devices (``devices``: the log's model
event, else its ranks), never kept in a result: a cached result is keyed by the job's
files only and prices at whatever price this run is given.

Every sum is :func:`math.fsum` (exactly rounded, so independent of the order the jobs
came in) and every list has a total order, so one fleet gives one JSON text."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from badput.fleet._job import JobResult

__all__ = ["WORST_JOBS", "fleet_summary", "job_money"]

#: Jobs listed as the worst by default.
WORST_JOBS: Final = 10
_PRODUCTIVE: Final = "productive"
_WEEK: Final = 7 * 86_400.0


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _week_start(ts: float) -> float:
    """The Monday 00:00 UTC on or before ``ts``."""
    d = datetime.fromtimestamp(ts, timezone.utc)
    monday = datetime(d.year, d.month, d.day, tzinfo=timezone.utc) - timedelta(days=d.weekday())
    return monday.timestamp()


def _week_name(start: float) -> str:
    iso = datetime.fromtimestamp(start, timezone.utc).isocalendar()
    return f"{iso.year}-W{iso.week:02d}"


def job_money(result: JobResult, seconds: float, price: float | None) -> float | None:
    """What ``seconds`` of ``result``'s job cost on its devices at ``price`` per
    device-hour (``seconds / 3600 x devices x price``); None without a price or when the
    log names no device (no model event, no rank)."""
    devices = result.get("devices")
    if price is None or not isinstance(devices, int) or devices <= 0:
        return None
    return seconds / 3600.0 * devices * price


def _sum(values: list[float | None], price: float | None) -> float | None:
    """The fleet's money: the priced jobs' sum (None without a price)."""
    return None if price is None else math.fsum(v for v in values if v is not None)


def _lost_by_cause(
    results: list[JobResult], total: float, price: float | None
) -> list[dict[str, Any]]:
    seconds: dict[str, list[float]] = defaultdict(list)
    money: dict[str, list[float | None]] = defaultdict(list)
    for r in results:
        for bucket, s in r["buckets"].items():
            if bucket != _PRODUCTIVE and s > 0:
                seconds[bucket].append(s)
                money[bucket].append(job_money(r, s, price))
    rows: list[dict[str, Any]] = [
        {
            "bucket": b,
            "seconds": math.fsum(v),
            "share": _share(math.fsum(v), total),
            "jobs": len(v),
            "cost": _sum(money[b], price),
        }
        for b, v in seconds.items()
    ]
    rows.sort(key=lambda row: (-row["seconds"], row["bucket"]))
    return rows


def _worst_jobs(results: list[JobResult], n: int, price: float | None) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        lost = {b: s for b, s in r["buckets"].items() if b != _PRODUCTIVE and s > 0}
        badput = math.fsum(lost.values())
        top = min(lost.items(), key=lambda kv: (-kv[1], kv[0]))[0] if lost else None
        rows.append(
            {
                "job": r["job"],
                "badput_seconds": badput,
                "total_seconds": r["total_seconds"],
                "goodput": _share(r["goodput_seconds"], r["total_seconds"]),
                "attempts": len(r["attempts"]),
                "failures": sum(a["failed"] for a in r["attempts"]),
                "top_cause": top,
                "devices": r.get("devices"),
                "cost": job_money(r, r["total_seconds"], price),
                "badput_cost": job_money(r, badput, price),
            }
        )
    rows.sort(key=lambda row: (-row["badput_seconds"], row["job"]))
    return rows[:n]


def _weeks(results: list[JobResult]) -> list[dict[str, Any]]:
    """Per ISO week (Monday to Sunday, timezone.utc): the failed attempts that ended in it, the
    attempts' running time in it (each attempt's time cut at the week's edges), and the
    mean time between failures: that time over those failures."""
    running: dict[float, list[float]] = defaultdict(list)
    failures: dict[float, int] = defaultdict(int)
    for r in results:
        for a in r["attempts"]:
            lo, hi = a["start"], a["end"]
            week = _week_start(lo)
            while True:
                running[week].append(max(0.0, min(hi, week + _WEEK) - max(lo, week)))
                week += _WEEK
                if week >= hi:
                    break
            if a["failed"]:
                failures[_week_start(hi)] += 1
    out = []
    for week in sorted(set(running) | set(failures)):
        seconds = math.fsum(running.get(week, ()))
        n = failures.get(week, 0)
        out.append(
            {
                "week": _week_name(week),
                "start": datetime.fromtimestamp(week, timezone.utc).strftime("%Y-%m-%d"),
                "failures": n,
                "running_seconds": seconds,
                "mtbf_seconds": seconds / n if n else None,
            }
        )
    return out


def _days(results: list[JobResult]) -> list[dict[str, Any]]:
    seconds: dict[str, list[float]] = defaultdict(list)
    good: dict[str, list[float]] = defaultdict(list)
    jobs: dict[str, int] = defaultdict(int)
    for r in results:
        for d in r["days"]:
            seconds[d["day"]].append(d["seconds"])
            good[d["day"]].append(d["goodput_seconds"])
            jobs[d["day"]] += 1
    out = []
    for day in sorted(seconds):
        total, productive = math.fsum(seconds[day]), math.fsum(good[day])
        out.append(
            {
                "day": day,
                "jobs": jobs[day],
                "seconds": total,
                "goodput_seconds": productive,
                "goodput": _share(productive, total),
            }
        )
    return out


def fleet_summary(
    results: list[JobResult],
    *,
    source: str,
    worst: int = WORST_JOBS,
    price: float | None = None,
) -> dict[str, Any]:
    """The fleet's JSON object (``badput fleet --json``; docs/fleet.md lists its keys).
    ``price``: per device-hour, each job's, cause's and the fleet's money (else None)."""
    total = math.fsum(r["total_seconds"] for r in results)
    productive = math.fsum(r["goodput_seconds"] for r in results)
    attempts = [a for r in results for a in r["attempts"]]
    cost = [job_money(r, r["total_seconds"], price) for r in results]
    lost = [job_money(r, r["total_seconds"] - r["goodput_seconds"], price) for r in results]
    return {
        "source": source,
        "jobs": len(results),
        "attempts": len(attempts),
        "failures": sum(a["failed"] for a in attempts),
        "total_seconds": total,
        "goodput_seconds": productive,
        "badput_seconds": total - productive,
        "goodput": _share(productive, total),
        "price_per_device_hour": price,
        "cost": _sum(cost, price),
        "badput_cost": _sum(lost, price),
        "unpriced_jobs": None if price is None else sum(c is None for c in cost),
        "lost_by_cause": _lost_by_cause(results, total, price),
        "worst_jobs": _worst_jobs(results, worst, price),
        "weeks": _weeks(results),
        "days": _days(results),
        "errors": [
            {"job": r["job"], "error": r["error"]} for r in results if r["error"] is not None
        ],
    }
