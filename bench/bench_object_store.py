"""Recording to an object store: the record cost, and how far the bucket lags behind.

    python bench/bench_object_store.py [--seconds 30] [--rate 100000] [--ship-interval 10]

Starts moto's S3 server on 127.0.0.1 and records ``--rate`` events a second (batches of
1,000, paced) into ``s3://bench/runs`` for ``--seconds``. Prints the median cost of one
``record_step_start`` (goal: at most 1 µs, unchanged from a directory store), and the
shipping lag: for each byte recorded, the time until a listing of the bucket shows it
shipped (goal: at most ``ship_interval`` + 2 s), as the median and the maximum.
"""

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import badput
from badput.store import ObjectStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _s3 import MotoServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=100_000)
    parser.add_argument("--ship-interval", type=float, default=10.0)
    args = parser.parse_args()
    server = MotoServer().start()
    os.environ.update(
        AWS_ENDPOINT_URL=server.url,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        XDG_CACHE_HOME=tempfile.mkdtemp(),
    )
    try:
        server.make_bucket("bench")
        store = ObjectStore("s3://bench/runs", ship_interval=args.ship_interval)
        rec = badput.Recorder("lag", store, heartbeat_interval=0)
        recorded: list[tuple[int, float]] = []  # (bytes recorded, when)
        shipped: list[tuple[int, float]] = []  # (bytes the bucket holds, when seen)
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                total = sum(size for p in store.parts("lag").values() for _, _, size in p)
                shipped.append((total, time.monotonic()))
                time.sleep(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        batch = 1000
        costs = []
        step = 0
        start = time.monotonic()
        while time.monotonic() - start < args.seconds:
            t0 = time.perf_counter()
            for _ in range(batch):
                rec.record_step_start(step)
                step += 1
            costs.append((time.perf_counter() - t0) / batch * 1e9)
            seg = rec._seg
            if seg is not None:
                recorded.append((seg.recorded_bytes(), time.monotonic()))
            next_at = start + step / args.rate
            time.sleep(max(next_at - time.monotonic(), 0))
        rate = step / (time.monotonic() - start)
        rec.close()
        time.sleep(args.ship_interval + 3)
        stop.set()
        watcher.join()
        seen_bytes = [b for b, _ in shipped]
        lags = []
        for nbytes, when in recorded:
            k = bisect.bisect_left(seen_bytes, nbytes)
            if k < len(shipped):
                lags.append(shipped[k][1] - when)
        print(f"recorded {step:,} events ({rate:,.0f}/s asked {args.rate:,}/s)")
        print(f"record_step_start: median {statistics.median(costs):.0f} ns a call")
        print(
            f"shipping lag (ship_interval {args.ship_interval:g} s): median "
            f"{statistics.median(lags):.1f} s, max {max(lags):.1f} s; "
            f"not shipped at the end: {len(recorded) - len(lags)} samples"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
