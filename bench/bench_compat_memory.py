"""Memory a long-lived compat GoodputCalculator keeps for a large job.

    python bench/bench_compat_memory.py [--steps N] [--keep DIR]

The job (``make_big_job.py``): N steps in 4 attempts, ``step_start``/``step_end`` per
step, an eval every 100 steps, a checkpoint every 1,000, heartbeats every 10 s. One
``badput.compat.ml_goodput_measurement.goodput.GoodputCalculator`` (what the drop-in's
monitor holds for the job's lifetime) catches up with the log (``get_job_goodput``), then
answers an interval query over the last hour (what a rolling-window uploader asks).

Figures: the CPU time (``time.process_time``) of both queries, untraced; then, on a new
calculator, memory (``tracemalloc``, Python allocations; numpy's arrays are traced too):

- retained: what the calculator holds after both queries, with the objects it made;
- of which the view's series: what drops when the calculator's view of the job (the raw
  series interval queries read: event times, steps, ...) is released, the engine's
  accountant kept;
- peak during the catch-up.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from badput.compat.ml_goodput_measurement import goodput
from badput.store import open_store
from make_big_job import JOB, write_job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--keep", type=Path, help="write the job here once and reuse it")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-compat-"))
    try:
        if not (root / JOB).exists():
            n_events = write_job(root, args.steps)
        else:
            n_events = sum(f.read_bytes().count(b"\n") for f in (root / JOB).rglob("*.jsonl"))
        store = open_store(root)
        # Pass 1, untraced: CPU time of the catch-up and of a last-hour interval query.
        c0 = time.process_time()
        calc = goodput.GoodputCalculator(JOB, "log", store=store)
        gp, _, last = calc.get_job_goodput(include_badput_breakdown=True)
        c1 = time.process_time()
        end = calc._view.clip(0.0, float("inf"))
        assert end is not None
        hi = dt.datetime.fromtimestamp(end[1], dt.timezone.utc)
        igp, *_ = calc.get_job_goodput_interval(hi - dt.timedelta(hours=1), hi)
        c2 = time.process_time()
        del calc
        # Pass 2, traced: memory.
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        calc = goodput.GoodputCalculator(JOB, "log", store=store)
        calc.get_job_goodput(include_badput_breakdown=True)
        peak = tracemalloc.get_traced_memory()[1] - base
        calc.get_job_goodput_interval(hi - dt.timedelta(hours=1), hi)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - base
        accountant = calc._view.accountant
        calc._view = None  # type: ignore[assignment]
        gc.collect()
        series = retained - (tracemalloc.get_traced_memory()[0] - base)
        del accountant
        tracemalloc.stop()
        print(
            f"job: {args.steps:,} steps, {n_events:,} events; goodput {gp:.2f}%, last step {last}"
        )
        print(
            f"CPU: catch-up {c1 - c0:.2f} s, last-hour interval query {c2 - c1:.3f} s ({igp:.2f}%)"
        )
        print(f"retained {retained / 1e6:.1f} MB ({retained / n_events:.0f} B/event)")
        print(
            f"  of which the view's series {series / 1e6:.1f} MB ({series / n_events:.0f} B/event)"
        )
        print(f"peak during the catch-up {peak / 1e6:.1f} MB")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
