"""The fleet's answers, from its jobs' results (pure; no I/O): time-weighted goodput, the
time lost by cause, the worst jobs, failures and MTBF per ISO week, goodput per UTC day.

Every sum is :func:`math.fsum` (exactly rounded, so independent of the order the jobs
came in) and every list has a total order, so one fleet gives one JSON text."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from badput.fleet._job import JobResult

__all__ = ["WORST_JOBS", "fleet_summary"]

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


def _lost_by_cause(results: list[JobResult], total: float) -> list[dict[str, Any]]:
    seconds: dict[str, list[float]] = defaultdict(list)
    for r in results:
        for bucket, s in r["buckets"].items():
            if bucket != _PRODUCTIVE and s > 0:
                seconds[bucket].append(s)
    rows: list[dict[str, Any]] = [
        {
            "bucket": b,
            "seconds": math.fsum(v),
            "share": _share(math.fsum(v), total),
            "jobs": len(v),
        }
        for b, v in seconds.items()
    ]
    rows.sort(key=lambda row: (-row["seconds"], row["bucket"]))
    return rows


def _worst_jobs(results: list[JobResult], n: int) -> list[dict[str, Any]]:
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
    results: list[JobResult], *, source: str, worst: int = WORST_JOBS
) -> dict[str, Any]:
    """The fleet's JSON object (``badput fleet --json``; docs/fleet.md lists its keys)."""
    total = math.fsum(r["total_seconds"] for r in results)
    productive = math.fsum(r["goodput_seconds"] for r in results)
    attempts = [a for r in results for a in r["attempts"]]
    return {
        "source": source,
        "jobs": len(results),
        "attempts": len(attempts),
        "failures": sum(a["failed"] for a in attempts),
        "total_seconds": total,
        "goodput_seconds": productive,
        "badput_seconds": total - productive,
        "goodput": _share(productive, total),
        "lost_by_cause": _lost_by_cause(results, total),
        "worst_jobs": _worst_jobs(results, worst),
        "weeks": _weeks(results),
        "days": _days(results),
        "errors": [
            {"job": r["job"], "error": r["error"]} for r in results if r["error"] is not None
        ],
    }
