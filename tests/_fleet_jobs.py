"""A fleet of generated jobs, written as the recorder lays them out
(``<root>/<job>/<attempt>/<host>-<rank>-<pid>.jsonl``), line by line for speed: mixed
sizes, ranks, crashes and restarts, jobs still running, one unreadable line."""

from __future__ import annotations

import json
import random
from pathlib import Path

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC (a Thursday)
SPREAD_DAYS = 20


def _line(ts: float, kind: str, job: str, attempt: int, rank: int, **extra: object) -> str:
    fields = {
        "ts": round(ts, 6),
        "kind": kind,
        "job": job,
        "attempt": attempt,
        "host": f"h{rank}",
        "rank": rank,
        **extra,
    }
    return json.dumps(fields, separators=(",", ":")) + "\n"


#: A job's ranks are drawn from these.
RANKS: tuple[int, ...] = (1, 1, 2, 4)
#: A job's steps (over its attempts) for ``steps_scale`` 1, on average.
MEAN_STEPS = 104


def write_job(
    root: Path, i: int, *, steps_scale: int = 1, ranks_from: tuple[int, ...] = RANKS
) -> dict[str, int]:
    """Job ``job-<i>`` (deterministic in ``i``), about ``MEAN_STEPS * steps_scale`` steps
    long on average; returns its ranks, attempts, crashes."""
    rng = random.Random(i)
    job = f"job-{i:05d}"
    ranks = rng.choice(ranks_from)
    crashes = rng.choice((0, 0, 0, 1, 1, 2))
    running = rng.random() < 0.05  # still running: no end
    step_time = rng.choice((0.5, 1.0, 2.0))
    every = 10
    t = T0 + rng.uniform(0, SPREAD_DAYS * 86_400.0)
    step = 0
    last_saved: int | None = None
    for attempt in range(crashes + 1):
        lines: dict[int, list[str]] = {r: [] for r in range(ranks)}
        n = rng.randint(5, 120) * steps_scale
        last = attempt == crashes
        start = t
        for r in range(ranks):
            out, now, s = lines[r], start, step
            if attempt == 0:
                out.append(_line(now, "job_start", job, attempt, r))
            out.append(_line(now, "attempt_start", job, attempt, r))
            out.append(_line(now, "accelerator_init_start", job, attempt, r))
            now += 8.0 + ranks
            out.append(_line(now, "accelerator_init_end", job, attempt, r))
            if last_saved is not None:
                out.append(_line(now, "checkpoint_restore_start", job, attempt, r, step=last_saved))
                now += 3.0
                out.append(_line(now, "checkpoint_restore_end", job, attempt, r, step=last_saved))
                s = last_saved + 1
            for _ in range(n):
                out.append(_line(now, "step_start", job, attempt, r, step=s))
                now += step_time + 0.01 * r
                out.append(_line(now, "step_end", job, attempt, r, step=s))
                if s % every == every - 1:
                    out.append(_line(now, "checkpoint_save_start", job, attempt, r, step=s))
                    now += 1.5
                    out.append(_line(now, "checkpoint_save_end", job, attempt, r, step=s))
                s += 1
            if not last:
                now += 30.0  # hung before it died
                out.append(_line(now, "attempt_end", job, attempt, r, status="failed", exit_code=1))
            elif not running:
                out.append(
                    _line(now, "attempt_end", job, attempt, r, status="completed", exit_code=0)
                )
                out.append(_line(now, "job_end", job, attempt, r, status="completed"))
            end = now
        step = s
        saved = [x for x in range(step) if x % every == every - 1]
        last_saved = saved[-1] if saved else None
        for r, out in lines.items():
            path = root / job / str(attempt) / f"h{r}-{r}-{1000 + attempt}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            if i % 97 == 5 and r == 0 and attempt == 0:
                out.insert(3, "{not json\n")  # a malformed line: a diagnostic, not a crash
            path.write_text("".join(out), encoding="utf-8")
        t = end + 20.0  # restart gap
    return {"ranks": ranks, "attempts": crashes + 1, "crashes": crashes}


def write_fleet(
    root: Path, n: int, *, steps_scale: int = 1, ranks_from: tuple[int, ...] = RANKS
) -> list[dict[str, int]]:
    root.mkdir(parents=True, exist_ok=True)
    return [write_job(root, i, steps_scale=steps_scale, ranks_from=ranks_from) for i in range(n)]
