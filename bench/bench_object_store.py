"""Recording to an object store: the record cost beside a local store's, and how far the
bucket lags behind the recorder.

    python bench/bench_object_store.py [--rounds 3] [--seconds 30] [--rate 100000]
                                       [--ship-interval 10]

Starts moto's S3 server on 127.0.0.1 (its own process) and, in each of ``--rounds``
rounds, alternates:

- **record cost**, a directory store then ``s3://bench/cost-<round>`` (the same method as
  ``bench/bench_record.py``: the median cost of one ``record_step_start`` in 50 batches of
  10,000 calls back to back, and in batches of 1,000 calls 10 ms apart). Goal: at most 1 µs
  a call, and the s3 store's equal to the directory store's (the recording thread never
  touches the network);
- **shipping lag**: ``--rate`` events a second (batches of 1,000, paced) for ``--seconds``
  into ``s3://bench/lag-<round>``, while a reader LISTs the bucket every 0.1 s. An event's
  lag is the time from its ``record_*`` call's return to the first listing that shows a
  part holding it (the reader fetches each new part once to see its last step). Goal: at
  most ``ship_interval`` + 2 s (median and maximum printed).

The host index (``bench/host_speed.py``) is printed before each round: the machine is
shared, and figures are comparable only at a like index.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import badput
from badput.store import ObjectStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _s3 import MotoServer
from bench_record import per_call_ns
from host_speed import host_index


def record_cost(store: object) -> tuple[float, float, float]:
    """``(burst, burst_cpu, paced)``: median ns of one ``record_step_start`` into
    ``store``, back to back (wall time, and the calling thread's CPU time) and paced."""
    rec = badput.Recorder("cost", store, attempt="0", heartbeat_interval=0)  # type: ignore[arg-type]
    try:
        per_call_ns(rec, 1_000, 2)  # warm up: writer thread started, file open
        burst = per_call_ns(rec, 10_000, 50)
        burst_cpu = per_call_ns(rec, 10_000, 50, clock="thread")
        paced = per_call_ns(rec, 1_000, 50, pause=0.01)
    finally:
        rec.close()
    return burst, burst_cpu, paced


def _last_step(data: bytes) -> int:
    """The step of the last complete line of a part (every line is a ``step_start``)."""
    lines = data.rstrip(b"\n").rsplit(b"\n", 1)
    return int(json.loads(lines[-1])["step"])


@dataclass
class Paced:
    """``rate`` events a second recorded for ``seconds`` in batches of 1,000."""

    lags: list[float]  # every batch's last event's lag (empty for a local store)
    events: int
    reached: float  # events a second
    cost_ns: float  # median of the batches' wall ns per call
    cost_cpu_ns: float  # the same in the recording thread's CPU time


def paced_into(
    rec: badput.Recorder, seconds: float, rate: int
) -> tuple[list[tuple[int, float]], Paced]:
    """Record ``rate`` step marks a second into ``rec`` for ``seconds``: each batch's last
    step and when its last call returned, and the figures (no lags)."""
    batch = 1000
    recorded: list[tuple[int, float]] = []
    wall: list[float] = []
    cpu: list[float] = []
    record = rec.record_step_start
    step = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(batch):
            record(step)
            step += 1
        c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
        wall.append((t1 - t0) / batch)
        cpu.append((c1 - c0) / batch)
        recorded.append((step - 1, time.monotonic()))
        time.sleep(max(start + step / rate - time.monotonic(), 0))
    reached = step / (time.monotonic() - start)
    return recorded, Paced([], step, reached, statistics.median(wall), statistics.median(cpu))


def shipping_lag(uri: str, seconds: float, rate: int, ship_interval: float) -> Paced:
    """Record ``rate`` events a second into ``uri`` for ``seconds``: every event's lag (one
    sample per batch of 1,000, its last event's), the events recorded, the rate reached,
    the record cost while the shipper uploads."""
    store = ObjectStore(uri, ship_interval=ship_interval)
    reader = ObjectStore(uri)
    rec = badput.Recorder("lag", store, attempt="0", heartbeat_interval=0)
    seen: list[tuple[int, float]] = []  # (highest step shipped, when a listing showed it)
    stop = threading.Event()

    def watch() -> None:
        fetched: set[str] = set()
        top = -1
        while not stop.is_set():
            listed = reader.parts("lag")
            when = time.monotonic()
            for parts in listed.values():
                for _, key, _ in parts:
                    if key not in fetched:
                        fetched.add(key)
                        top = max(top, _last_step(reader._get(key)))
            seen.append((top, when))
            stop.wait(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    recorded, paced = paced_into(rec, seconds, rate)
    step = paced.events
    rec.close()  # waits up to 5 s for the last part
    deadline = time.monotonic() + ship_interval + 10
    while (not seen or seen[-1][0] < step - 1) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    watcher.join()
    tops = [top for top, _ in seen]
    lags = []
    for last, when in recorded:
        k = bisect.bisect_left(tops, last)
        lags.append(seen[k][1] - when if k < len(seen) else float("inf"))
    paced.lags = lags
    return paced


def paced_local(seconds: float, rate: int) -> Paced:
    """The same pacing into a directory store: the record cost to compare."""
    with tempfile.TemporaryDirectory() as root:
        rec = badput.Recorder("lag", root, attempt="0", heartbeat_interval=0)
        try:
            return paced_into(rec, seconds, rate)[1]
        finally:
            rec.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=100_000)
    parser.add_argument("--ship-interval", type=float, default=10.0)
    parser.add_argument(
        "--server-niceness",
        type=int,
        default=19,
        help="added to moto's nice value: a real store runs on other machines, not on the "
        "recording machine's cores (0: moto competes with the recorder for them)",
    )
    args = parser.parse_args()
    server = MotoServer(niceness=args.server_niceness).start()
    os.environ.update(
        AWS_ENDPOINT_URL=server.url,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        XDG_CACHE_HOME=tempfile.mkdtemp(),
    )
    goal = args.ship_interval + 2
    try:
        server.make_bucket("bench")
        for r in range(args.rounds):
            print(f"round {r + 1}: host index {host_index(3):.2f} s", flush=True)
            with tempfile.TemporaryDirectory() as root:
                local = record_cost(root)
            remote = record_cost(ObjectStore(f"s3://bench/cost-{r}"))
            for name, (burst, burst_cpu, paced) in (("directory", local), ("s3", remote)):
                print(
                    f"  record_step_start, {name:9} store: {burst / 1000:.2f} µs a call "
                    f"(10,000 back to back; {burst_cpu / 1000:.2f} µs of the thread's CPU), "
                    f"{paced / 1000:.2f} µs (1,000 every 10 ms)",
                    flush=True,
                )
            ship = shipping_lag(f"s3://bench/lag-{r}", args.seconds, args.rate, args.ship_interval)
            here = paced_local(args.seconds, args.rate)
            worst = max(ship.lags)
            print(
                f"  shipping lag, {ship.events:,} events at {ship.reached:,.0f}/s (ship_interval "
                f"{args.ship_interval:g} s): median {statistics.median(ship.lags):.2f} s, max "
                f"{worst:.2f} s: {'within' if worst <= goal else 'OVER'} the goal of "
                f"{goal:g} s",
                flush=True,
            )
            for name, run in (("s3, shipping", ship), ("directory", here)):
                print(
                    f"  record_step_start at {run.reached:,.0f}/s, {name:12}: "
                    f"{run.cost_ns / 1000:.2f} µs a call, "
                    f"{run.cost_cpu_ns / 1000:.2f} µs of the thread's CPU (medians of "
                    f"{run.events // 1000:,} batches of 1,000)",
                    flush=True,
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
