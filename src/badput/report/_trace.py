"""``badput export trace``: a job as Chrome Trace Event JSON (opens in Perfetto and chrome://tracing).

Layout (the JSON Object Format of the Trace Event format, complete ``"X"`` events
and ``"M"`` metadata events; timestamps are microseconds since the Unix epoch, so a
profiler trace of the same run lines up):

- process 0, ``job <name>``: thread ``attempts`` holds one slice per attempt (and
  the queued and recovery time between them);
- one process per host: on it, per rank, a thread ``rank R steps`` (a slice per
  step, named ``step N``, category its bucket), a thread ``rank R intervals`` (the
  blocking intervals as partitioned: innermost wins) and ``rank R overlapped`` (the
  non-blocking ones, which may overlap each other).

Slices on one thread never partly overlap (the format's nesting rule): steps of a
rank are disjoint, flattened intervals are disjoint, and non-blocking intervals
that would break nesting move to a further ``overlapped`` thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from badput.engine import STEP_BUCKETS, Report, Snapshot, Timeline

__all__ = ["trace_events", "write_trace"]

_US = 1_000_000.0
JOB_PID = 0
ATTEMPTS_TID = 0


def _us(ts: float) -> float:
    return round(ts * _US, 3)


def _meta(name: str, pid: int, tid: int, value: Any) -> dict[str, Any]:
    key = "name" if name.endswith("_name") else "sort_index"
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {key: value}}


def _slice(
    name: str, cat: str, span: tuple[float, float], where: tuple[int, int], args: dict[str, Any]
) -> dict[str, Any]:
    (start, end), (pid, tid) = span, where
    return {
        "ph": "X",
        "name": name,
        "cat": cat,
        "ts": _us(start),
        "dur": max(0.0, round(_us(end) - _us(start), 3)),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _job_events(report: Report) -> Iterator[dict[str, Any]]:
    yield _meta("process_name", JOB_PID, ATTEMPTS_TID, f"job {report.job}")
    yield _meta("process_sort_index", JOB_PID, ATTEMPTS_TID, 0)
    yield _meta("thread_name", JOB_PID, ATTEMPTS_TID, "attempts")
    attempts = report.attempts
    queued = report.bucket("queued")
    if attempts and queued > 0:
        first = attempts[0].start
        yield _slice("queued", "queued", (first - queued, first), (JOB_PID, ATTEMPTS_TID), {})
    for i, a in enumerate(attempts):
        args = {
            "attempt": str(a.id),
            "end_reason": a.end_reason,
            "status": a.status,
            "exit_code": a.exit_code,
            "restore_step": a.restore_step,
            "first_step": a.first_step,
            "last_step": a.last_step,
        }
        yield _slice(f"attempt {a.id}", "attempt", (a.start, a.end), (JOB_PID, ATTEMPTS_TID), args)
        nxt = attempts[i + 1].start if i + 1 < len(attempts) else report.end
        if nxt > a.end:
            yield _slice("recovery", "recovery", (a.end, nxt), (JOB_PID, ATTEMPTS_TID), {})


def _step_dicts(
    timeline: Timeline, lo: int, hi: int, where: tuple[int, int], attempt: str
) -> Iterator[dict[str, Any]]:
    steps = timeline.steps
    for k in range(lo, hi):
        bucket = STEP_BUCKETS[int(steps.bucket[k])]
        yield _slice(
            f"step {int(steps.step[k])}",
            bucket,
            (float(steps.start[k]), float(steps.end[k])),
            where,
            {
                "step": int(steps.step[k]),
                "bucket": bucket,
                "attempt": attempt,
                "own_seconds": round(float(steps.own[k]), 6),
                "ended": bool(steps.closed[k]),
            },
        )


def _step_lines(
    timeline: Timeline, lo: int, hi: int, where: tuple[int, int], attempt: str
) -> Iterator[str]:
    """The same events as :func:`_step_dicts`, encoded column-wise (steps are the bulk of
    a trace: a million of them). The same fields and numbers."""
    steps = timeline.steps
    head = '{"ph":"X","name":"step '
    where_json = f'"pid":{where[0]},"tid":{where[1]}'
    tail = f',"attempt":{json.dumps(attempt)},"own_seconds":'
    for s, b, start, end, own, c in zip(
        steps.step[lo:hi].tolist(),
        steps.bucket[lo:hi].tolist(),
        steps.start[lo:hi].tolist(),
        steps.end[lo:hi].tolist(),
        steps.own[lo:hi].tolist(),
        steps.closed[lo:hi].tolist(),
        strict=True,
    ):
        bucket = STEP_BUCKETS[b]
        t = _us(start)
        d = max(0.0, round(_us(end) - t, 3))
        ended = "true" if c else "false"
        yield (
            f'{head}{s}","cat":"{bucket}","ts":{t!r},"dur":{d!r},{where_json},'
            f'"args":{{"step":{s},"bucket":"{bucket}"{tail}{round(own, 6)!r},"ended":{ended}}}}}'
        )


def trace_events(snapshot: Snapshot) -> Iterator[dict[str, Any]]:
    """Every event of the trace of ``snapshot`` (made with ``drawing=True``), metadata
    first per process and thread."""
    timeline = snapshot.drawn("the trace")
    for item in _trace_items(snapshot.report, timeline, encoded=False):
        assert isinstance(item, dict)
        yield item


def _trace_items(
    report: Report, timeline: Timeline, *, encoded: bool
) -> Iterator[dict[str, Any] | str]:
    """The events; with ``encoded``, step events come as their JSON text already."""
    yield from _job_events(report)
    hosts: dict[str, int] = {}
    threads: set[tuple[int, int]] = set()

    def pid_of(host: str | None) -> int:
        name = host if host is not None else "(no host)"
        if name not in hosts:
            hosts[name] = len(hosts) + 1
        return hosts[name]

    def thread(pid: int, tid: int, name: str) -> Iterator[dict[str, Any]]:
        if (pid, tid) not in threads:
            threads.add((pid, tid))
            yield _meta("thread_name", pid, tid, name)
            yield _meta("thread_sort_index", pid, tid, tid)

    announced: set[int] = set()
    steps = timeline.steps
    bounds = np.searchsorted(steps.lane, np.arange(len(timeline.lanes) + 1))
    by_lane: dict[int, list[Any]] = {}
    for iv in timeline.intervals:
        by_lane.setdefault(iv.lane, []).append(iv)
    for li, lane in enumerate(timeline.lanes):
        pid = pid_of(lane.host)
        if pid not in announced:
            announced.add(pid)
            yield _meta("process_name", pid, 0, f"host {lane.host or '(no host)'}")
            yield _meta("process_sort_index", pid, 0, pid)
        rank = lane.rank or 0
        attempt = str(lane.attempt)
        tid_steps, tid_blocking = 3 * rank + 1, 3 * rank + 2
        lo, hi = int(bounds[li]), int(bounds[li + 1])
        if hi > lo:
            yield from thread(pid, tid_steps, f"rank {rank} steps")
        if encoded:
            yield from _step_lines(timeline, lo, hi, (pid, tid_steps), attempt)
        else:
            yield from _step_dicts(timeline, lo, hi, (pid, tid_steps), attempt)
        overlapped_ends: list[float] = []  # end of the last slice on each overlapped thread
        for iv in by_lane.get(li, []):
            args = {"bucket": iv.bucket, "attempt": attempt, "blocking": iv.blocking}
            if iv.blocking:
                yield from thread(pid, tid_blocking, f"rank {rank} intervals")
                yield _slice(iv.bucket, iv.bucket, (iv.start, iv.end), (pid, tid_blocking), args)
                continue
            # non-blocking intervals may overlap: the first overlapped thread that is free
            slot = next((j for j, e in enumerate(overlapped_ends) if e <= iv.start), None)
            if slot is None:
                slot = len(overlapped_ends)
                overlapped_ends.append(iv.end)
            overlapped_ends[slot] = iv.end
            tid = 1000 + 3 * rank + 1000 * slot
            yield from thread(pid, tid, f"rank {rank} overlapped" + (f" {slot}" if slot else ""))
            yield _slice(iv.bucket, iv.bucket, (iv.start, iv.end), (pid, tid), args)


def write_trace(snapshot: Snapshot, out: IO[str]) -> int:
    """Write the trace of ``snapshot`` (made with ``drawing=True``) as one JSON object to
    ``out``; return the number of events."""
    report = snapshot.report
    timeline = snapshot.drawn("the trace")
    out.write('{"displayTimeUnit":"ms","otherData":')
    out.write(json.dumps({"job": report.job, "generator": "badput"}))
    out.write(',"traceEvents":[\n')
    n = 0
    for event in _trace_items(report, timeline, encoded=True):
        if n:
            out.write(",\n")
        if isinstance(event, str):
            out.write(event)
        else:
            out.write(json.dumps(event, separators=(",", ":"), allow_nan=False))
        n += 1
    out.write("\n]}\n")
    return n
