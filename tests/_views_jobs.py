"""Jobs the view tests draw: two attempts on two ranks, a long job, one full of hostile names."""

from __future__ import annotations

from pathlib import Path

from badput.store._jsonl import safe_job_dir
from badput.testing import Timeline, events_to_jsonl

T0 = 1_732_000_000.0

#: Log strings that would run script if any view pasted them into HTML unescaped.
# (no "/" or "\\": a store keeps a job in a directory named after it)
HOSTILE_JOB = "<svg onload=\"window.pwned='job'\"><script>window.pwned='job2';"
HOSTILE_EVAL = '" onmouseover="window.pwned=\'eval\'" x="'
HOSTILE_HOST = "<img src=x onerror=\"window.pwned='host'\">"
HOSTILE_ATTEMPT = "</script><script>window.pwned='attempt'</script>"


def _rank(job: str, rank: int, *, eval_name: str, host: str, attempts: tuple[str, str]) -> Timeline:
    """One rank of a job: init, 30 steps, a save at 20, a crash; a restore from 20, 20 steps."""
    tl = Timeline(job, start=T0, attempt=attempts[0], host=host, rank=rank)
    tl.emit("job_start")
    tl.span("accelerator_init", 5.0)
    tl.steps(1, 4.0, first=1)  # a slow first step: startup
    tl.steps(19, 1.0)
    tl.span("checkpoint_save", 2.0, step=20)
    tl.steps(10, 1.0 + 0.05 * rank)
    tl.span("custom", 3.0, name=eval_name)
    tl.steps(3, 3.0)  # slow steps: slowdown
    tl.emit("attempt_end", status="crashed", exit_code=137)
    tl.identity["attempt"] = attempts[1]
    tl.emit("job_start", dt=20.0)
    tl.span("checkpoint_restore", 4.0, step=20)
    tl.steps(20, 1.0, first=21)
    tl.emit("job_end", status="completed")
    return tl


def write_two_rank_job(
    root: Path,
    *,
    job: str = "two-ranks",
    eval_name: str = "eval",
    host: str = "node-a",
    attempts: tuple[str, str] = ("0", "1"),
) -> Path:
    """A store at ``root`` with the job: two ranks, each in its own file; returns the job dir."""
    job_dir = root / safe_job_dir(job)
    for rank in (0, 1):
        tl = _rank(job, rank, eval_name=eval_name, host=host, attempts=attempts)
        events_to_jsonl(job_dir / "0" / f"host-{rank}-1.jsonl", tl.events)
    return job_dir


def write_hostile_job(root: Path) -> Path:
    """The two-rank job with a script in every name the log carries."""
    return write_two_rank_job(
        root,
        job=HOSTILE_JOB,
        eval_name=HOSTILE_EVAL,
        host=HOSTILE_HOST,
        attempts=("0", HOSTILE_ATTEMPT),
    )


def write_long_job(root: Path, steps: int) -> Path:
    """One rank, ``steps`` steps of 0.1 s with a data load before each and a save every 1000."""
    tl = Timeline("long", start=T0)
    tl.emit("job_start")
    for i in range(steps):
        tl.span("data_loading", 0.01)
        tl.steps(1, 0.1 if i % 50 else 0.3, first=i + 1)
        if (i + 1) % 1000 == 0:
            tl.span("checkpoint_save", 1.0, step=i + 1)
    tl.emit("job_end", status="completed")
    job_dir = root / "long"
    events_to_jsonl(job_dir / "0" / "h-0-1.jsonl", tl.events)
    return job_dir


def many_names_seconds(i: int) -> float:
    """The length of the ``i``-th custom interval of :func:`write_many_names_job`: all
    different (no tie decides which names are the largest)."""
    return 0.01 + i * 1e-6


def write_many_names_job(root: Path, names: int = 20_000) -> Path:
    """One rank, ``names`` steps of 0.1 s, each followed by a custom interval of a name
    used once (``eval-0``, ``eval-1`` ...; issue 32: a name per step)."""
    tl = Timeline("many-names", start=T0)
    tl.emit("job_start")
    for i in range(names):
        tl.steps(1, 0.1, first=i + 1)
        tl.span("custom", many_names_seconds(i), name=f"eval-{i}")
    tl.emit("job_end", status="completed")
    job_dir = root / "many-names"
    events_to_jsonl(job_dir / "0" / "h-0-1.jsonl", tl.events)
    return job_dir
