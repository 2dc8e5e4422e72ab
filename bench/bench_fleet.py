"""``badput fleet``: the local engine against one process, a second run over an unchanged
store, and ``--sql`` over the fleet's tables, side by side in one run.

Goals (issue 34), at the full size (``--jobs 10000 --steps 10000``): local on 2 cores
>= 1.8 times one process; the second run ≤ 5 % of the first; ``--sql`` ≤ 1 s.

    PYTHONPATH=src:tests python bench/bench_fleet.py --jobs 200 --steps 200
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from _fleet_jobs import write_fleet
from badput.fleet import (
    ResultCache,
    analyse_fleet,
    fleet_summary,
    fleet_tables,
    query_tables,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=10_000, help="about this many steps a job")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        t = time.perf_counter()
        write_fleet(root, args.jobs, steps_scale=max(1, args.steps // 60))
        print(f"generated {args.jobs} jobs in {time.perf_counter() - t:.1f} s")
        timings = {}
        texts = {}
        for engine in ("serial", "local"):
            t = time.perf_counter()
            run = analyse_fleet(root, engine=engine)  # type: ignore[arg-type]
            timings[engine] = time.perf_counter() - t
            texts[engine] = json.dumps(fleet_summary(run.results, source="s"))
        assert texts["serial"] == texts["local"]
        cache = ResultCache(Path(tmp) / "cache", str(root))
        t = time.perf_counter()
        analyse_fleet(root, cache=cache)
        first = time.perf_counter() - t
        t = time.perf_counter()
        run = analyse_fleet(root, cache=cache)
        second = time.perf_counter() - t
        assert run.analysed == 0
        tables = fleet_tables(run.results)
        t = time.perf_counter()
        query_tables(
            "SELECT bucket, sum(seconds) FROM buckets JOIN jobs USING (job) "
            "WHERE failures > 0 GROUP BY 1 ORDER BY 2 DESC",
            tables,
        )
        sql = time.perf_counter() - t
    speedup = timings["serial"] / timings["local"]
    print(f"one process {timings['serial']:.2f} s, local {timings['local']:.2f} s: {speedup:.2f}x")
    print(f"cached run {second:.3f} s = {second / first:.1%} of the first ({first:.2f} s)")
    print(f"--sql {sql * 1000:.0f} ms")


if __name__ == "__main__":
    main()
