"""Cold read, one process vs shared among processes, on the data-load log.

    python bench/bench_parallel.py [--steps N] [--repeat R] [--only NAME ...] [--keep DIR]

Shapes (``bench_shapes.write_steps``: every step ``step_start``, ``data_loading_start``/
``_end``, ``step_end`` at distinct times; 4 attempts, 37 steps lost at each crash):

- ``one-file``: the whole job in one file (a job written by one process, or a log imported
  from another tool): split into byte ranges, one per worker.
- ``file-per-attempt``: one file per attempt (the recorder's layout).
- ``mix``: the benchmark mix of ``make_big_job.py`` (a file per attempt, few interval marks).
- ``8-ranks``: 8 ranks each writing its own file, every step, a tenth of ``--steps``.

For each shape, a fresh process reads the log cold and reports (``LiveJob.update`` then
``report``), once with ``parallel=False`` and once with ``parallel=True`` (shared among
``analysis._workers()`` processes whatever the load; the default, ``None``, starts workers
only on cores idle over the last minute). Printed: wall and CPU seconds (its own and its
workers') of the read, then of the read and the report, the peak RSS of the largest
process, how many processes read and in how many slices, and the load average before.
 Runs alternate (serial, parallel, serial...) and the
median of ``--repeat`` runs is shown. CPU time is the figure to compare on a shared
machine; wall time is what parallel reading is for.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_shapes import write_steps
from make_big_job import write_job as write_mix

CHILD = r"""
import json, resource, sys, time
from badput import analysis
root, job, parallel = sys.argv[1], sys.argv[2], {"0": False, "1": True}[sys.argv[3]]
plans = []
plan = analysis._parallel_plan
analysis._parallel_plan = lambda *a: plans.append(p := plan(*a)) or p
c0, w0 = time.process_time(), time.perf_counter()
live = analysis.LiveJob(root, job, parallel=parallel)
live.update()
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
own_cpu = time.process_time() - c0
read_cpu = own_cpu + kids.ru_utime + kids.ru_stime
read_wall = time.perf_counter() - w0
r = live.report(final=True)
wall = time.perf_counter() - w0
cpu = time.process_time() - c0 + kids.ru_utime + kids.ru_stime
with open("/proc/self/status") as status:
    peak_kb = next(int(x.split()[1]) for x in status if x.startswith("VmHWM:"))
print(json.dumps({
    "cpu": cpu, "wall": wall, "read_cpu": read_cpu, "read_wall": read_wall, "own_cpu": own_cpu,
    "rss_mb": max(peak_kb, kids.ru_maxrss) / 1024,
    "events": live.accountant.n_events, "goodput": r.goodput,
    "processes": analysis._workers() if plans and plans[0] else 1,
    "slices": len(plans[0]) if plans and plans[0] else 1,
}))
"""


def measure(root: Path, job: str, parallel: bool) -> dict[str, float]:
    load = os.getloadavg()[0]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), job, "1" if parallel else "0"],
        capture_output=True,
        check=True,
        text=True,
    )
    return {**json.loads(out.stdout), "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--keep", type=Path, help="write the logs here (reused if present)")
    args = parser.parse_args()
    shapes: list[tuple[str, str, Callable[[Path], object]]] = [
        (
            "one-file",
            "o",
            lambda root: write_steps(root, "o", args.steps, attempts=4, per_attempt=False),
        ),
        (
            "file-per-attempt",
            "p",
            lambda root: write_steps(root, "p", args.steps, attempts=4, per_attempt=True),
        ),
        ("mix", "big", lambda root: write_mix(root, args.steps, finished=False)),
        (
            "8-ranks",
            "r",
            lambda root: write_steps(root, "r", args.steps // 10, ranks=8, per_attempt=True),
        ),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, job, write in shapes:
            if args.only and name not in args.only:
                continue
            root = (args.keep or Path(tmp)) / f"{name}-{args.steps}"
            if not (root / job).exists():
                write(root)
            runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
            for _ in range(args.repeat):
                for parallel in (False, True):
                    runs[parallel].append(measure(root, job, parallel))
            serial_goodput = runs[False][0]["goodput"]
            assert all(m["goodput"] == serial_goodput for ms in runs.values() for m in ms)
            size = sum(p.stat().st_size for p in (root / job).rglob("*.jsonl"))
            for parallel, ms in runs.items():
                med = {k: statistics.median(m[k] for m in ms) for k in ms[0]}
                print(
                    f"{name:>16} {size / 1e6:6.0f} MB {med['events']:>10,.0f} events "
                    f"{'parallel' if parallel else '  serial'} x{med['processes']:.0f} "
                    f"({med['slices']:.0f} slices): "
                    f"read: wall {med['read_wall']:6.2f} s cpu {med['read_cpu']:6.2f} s "
                    f"({med['own_cpu']:5.2f} s in the reading process); "
                    f"with the report: wall {med['wall']:6.2f} s cpu {med['cpu']:6.2f} s; "
                    f"peak {med['rss_mb']:5.0f} MB; load {med['load']:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    sys.exit(main())
