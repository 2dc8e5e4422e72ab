"""Cold ``badput report --json`` on a 1,000,000-step job, and an incremental query.

    python bench/bench_report.py [--steps N] [--keep DIR]

The job (made by ``make_big_job.py``): 4 attempts (3 restarts), step_start and
step_end for every step, an eval every 100 steps, a checkpoint every 1,000 steps,
still running (no job_end yet). Prints wall time and peak memory of the cold
report (a fresh process, as a user runs it), then the cost of a live query after
one new step event is appended to the running attempt's file (``LiveJob``).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from badput.analysis import LiveJob
from badput.events import Event
from badput.formats.codec import encode_line
from make_big_job import JOB, write_job


def cold_report(root: Path) -> tuple[float, float, dict[str, object]]:
    badput_cli = Path(sys.executable).with_name("badput")
    cmd = [str(badput_cli), "report", str(root), "--job", JOB, "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, check=True)
    wall = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, peak_kb / 1024, json.loads(out.stdout)


def incremental(root: Path, repeats: int = 20) -> tuple[float, float]:
    live = LiveJob(root, JOB)
    live.update()
    live.report()
    path = next((root / JOB / "3").glob("*.jsonl"))
    ts = live.accountant.last_event_ts or 0.0
    step = int(live.report().steps.last or 0)
    samples = []
    with path.open("ab") as fh:
        for _ in range(repeats):
            ts += 0.1
            step += 1
            fh.write(
                encode_line(Event(ts=ts, kind="step_start", job=JOB, attempt=3, rank=0, step=step))
            )
            fh.flush()
            t0 = time.perf_counter()
            assert live.update() == 1
            live.report(now=ts)
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples), max(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="write the job here and keep it")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="badput-bench-"))
    try:
        if not (root / JOB).exists():
            n = write_job(root, args.steps, finished=False)
            print(
                f"job: {n:,} events, "
                f"{sum(f.stat().st_size for f in (root / JOB).rglob('*.jsonl')) / 1e6:.0f} MB"
            )
        wall, peak_mb, rep = cold_report(root)
        print(
            f"cold `badput report --json`: {wall:.2f} s wall, {peak_mb:.0f} MB peak RSS "
            f"(goodput {float(rep['goodput']):.4f}, {len(rep['attempts'])} attempts)"
        )  # type: ignore[arg-type]
        med, worst = incremental(root)
        print(
            f"incremental query after one new event: {med * 1000:.1f} ms median, "
            f"{worst * 1000:.1f} ms max"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
