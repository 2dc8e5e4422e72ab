"""``badput fleet``: the local engine against one process, a second run over an unchanged
store, and ``--sql`` over the fleet's tables, side by side in one run.

Goals (issue 34), at the full size (``--jobs 10000 --steps 10000``): local on 2 cores
>= 1.8 times one process; the second run ≤ 5 % of the first; ``--sql`` ≤ 1 s.

A job of ``--steps`` steps (over its attempts, on average; each of its ranks records
every step) is about 2.4 MB of JSON lines a rank. ``--templates K`` writes K jobs and
makes the others as copies of them with their own job name (written byte for byte, a
disk's speed: the full size is ~30 GB with ``--ranks 1,1,1,2``, an hour to write line by
line); each copy is read and analysed like any job.

``--store s3``: the same fleet uploaded as parts to moto's S3 server on 127.0.0.1 (its own
process; ``badput[s3]`` and ``moto[server]``), then a first and a second run over
``s3://...`` with a cache: their times, their ratio and the requests each made (moto's
log), and the fleet's JSON checked equal to the local store's, byte for byte.

    PYTHONPATH=src:tests python bench/bench_fleet.py --jobs 200 --steps 200
    PYTHONPATH=src:tests python bench/bench_fleet.py --jobs 300 --steps 300 --store s3
    PYTHONPATH=src:tests python bench/bench_fleet.py --jobs 10000 --steps 10000 \
        --templates 200 --ranks 1,1,1,2 --dir /var/tmp/fleet
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).parent))

from _fleet_jobs import MEAN_STEPS, write_fleet, write_job
from badput.fleet import (
    FleetRun,
    ResultCache,
    analyse_fleet,
    fleet_summary,
    fleet_tables,
    query_tables,
)
from host_speed import host_index


def _cached_runs(source: str, cache_dir: Path) -> tuple[float, float, FleetRun]:
    """A first and a second run over ``source`` with a fresh cache: their times, and the
    second run (its fleet's JSON checked the same as the first's)."""
    cache = ResultCache(cache_dir, source)
    t = time.perf_counter()
    run = analyse_fleet(source, cache=cache)
    first = time.perf_counter() - t
    text = json.dumps(fleet_summary(run.results, source="s"))
    t = time.perf_counter()
    run = analyse_fleet(source, cache=cache)
    second = time.perf_counter() - t
    assert run.analysed == 0, run.analysed
    assert json.dumps(fleet_summary(run.results, source="s")) == text
    return first, second, run


def write_copies(root: Path, jobs: int, templates: int, **job_args: Any) -> int:
    """``jobs`` jobs: ``templates`` written by :func:`write_job`, the others copies of
    them (job ``i`` of template ``i % templates``) with their own name in the directory
    and in every line. Returns the bytes written."""
    made = 0
    for t in range(min(templates, jobs)):
        write_job(root, t, **job_args)
    for t in range(min(templates, jobs)):
        name = f"job-{t:05d}"
        files = [
            (p.relative_to(root / name), p.read_bytes()) for p in (root / name).rglob("*.jsonl")
        ]
        made += sum(len(data) for _, data in files) * len(range(t, jobs, templates))
        was = f'"job":"{name}"'.encode()
        for i in range(t + templates, jobs, templates):
            copy = f"job-{i:05d}"
            now = f'"job":"{copy}"'.encode()
            for rel, data in files:
                path = root / copy / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data.replace(was, now))
    return made


def _local(root: Path, tmp: Path) -> str:
    timings = {}
    texts = {}
    t = time.perf_counter()
    run = analyse_fleet(root, engine="serial")
    timings["serial"] = time.perf_counter() - t
    texts["serial"] = json.dumps(fleet_summary(run.results, source="s"))
    print(f"one process: {timings['serial']:.2f} s; now the local engine", flush=True)
    # The local engine's run is the first of two with a cache: what it costs to keep the
    # results is counted in its time.
    first, second, run = _cached_runs(str(root), tmp / "cache")
    timings["local"] = first
    texts["local"] = json.dumps(fleet_summary(run.results, source="s"))
    assert texts["serial"] == texts["local"]
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
    print(f"local: cached run {second:.3f} s = {second / first:.1%} of the first ({first:.2f} s)")
    print(f"--sql {sql * 1000:.0f} ms")
    return texts["serial"]


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (a pool's workers)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _blocks(root: Path, blocks: int, tmp: Path) -> None:
    """The fleet cut into ``blocks`` stores (job ``i`` in store ``i % blocks``), each read
    by one process and by the local engine (with a cache, then again: the cached run)
    back to back, in turns (which goes first alternates): the host's speed drifts by tens
    of percent over the minutes a full-size run takes, and a ratio of two runs ten minutes
    apart measures the drift as much as the engine."""
    stores = [root.parent / f"block-{b}" for b in range(blocks)]
    for store in stores:
        store.mkdir()
    for i, job in enumerate(sorted(p.name for p in root.iterdir())):
        (root / job).rename(stores[i % blocks] / job)
    sums = Counter[str]()
    for b, store in enumerate(stores):
        order = ("serial", "local") if b % 2 == 0 else ("local", "serial")
        texts = {}
        for engine in order:
            t, c = time.perf_counter(), _cpu()
            if engine == "serial":
                run = analyse_fleet(store, engine="serial")
            else:
                cache = ResultCache(tmp / f"cache-{b}", str(store))
                run = analyse_fleet(store, cache=cache)
            sums[engine] += time.perf_counter() - t
            sums[engine + " cpu"] += _cpu() - c
            texts[engine] = json.dumps(fleet_summary(run.results, source="s"))
            if engine == "local":
                t = time.perf_counter()
                again = analyse_fleet(store, cache=cache)
                sums["second"] += time.perf_counter() - t
                assert again.analysed == 0
        assert texts["serial"] == texts["local"]
        print(
            f"block {b}: one process {sums['serial']:.1f} s so far, local {sums['local']:.1f} s "
            f"({sums['serial'] / sums['local']:.2f}x; CPU {sums['serial cpu']:.1f} / "
            f"{sums['local cpu']:.1f} s), host index {host_index(3):.2f} s",
            flush=True,
        )
    print(
        f"one process {sums['serial']:.2f} s, local {sums['local']:.2f} s: "
        f"{sums['serial'] / sums['local']:.2f}x (local's CPU, workers included, "
        f"{sums['local cpu'] / sums['local']:.2f} cores busy)"
    )
    print(f"local: cached runs {sums['second']:.3f} s = {sums['second'] / sums['local']:.1%}")


def _s3(root: Path, tmp: Path, local_text: str) -> None:
    from _s3 import MotoServer, s3_env, upload_store  # noqa: PLC0415 (moto, obstore)

    server = MotoServer(log=tmp / "moto.log").start()
    try:
        server.make_bucket("fleet")
        with s3_env(server.url, str(tmp / "xdg")):
            uri = "s3://fleet/runs"
            t = time.perf_counter()
            parts = upload_store(root, uri, part_bytes=1 << 20)
            print(f"uploaded {parts} parts in {time.perf_counter() - t:.1f} s")
            asked = [len(server.requests())]
            cache = ResultCache(tmp / "s3-cache", uri)
            runs = []
            for _ in range(2):
                t = time.perf_counter()
                run = analyse_fleet(uri, cache=cache)
                runs.append((time.perf_counter() - t, run))
                asked.append(len(server.requests()))
            text = json.dumps(fleet_summary(runs[0][1].results, source="s"))
            assert text == local_text, "the fleet over s3 is not the local store's"
            assert runs[1][1].analysed == 0
            assert json.dumps(fleet_summary(runs[1][1].results, source="s")) == text
            requests = server.requests()
    finally:
        server.stop()
    (first, _), (second, _) = runs
    for name, (lo, hi) in (("first", asked[0:2]), ("second", asked[1:3])):
        kinds = Counter(
            "list" if r.is_listing else "get" if r.is_object_read else r.method
            for r in requests[lo:hi]
        )
        said = ", ".join(f"{n} {k}" for k, n in kinds.items())
        print(f"s3: {name} run: {hi - lo} requests ({said})")
    print(f"s3: cached run {second:.3f} s = {second / first:.1%} of the first ({first:.2f} s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=10_000, help="about this many steps a job")
    ap.add_argument("--templates", type=int, default=0, help="write K jobs, copy the rest")
    ap.add_argument(
        "--ranks", default="1,1,2,4", help="a job's ranks are drawn from these (default 1,1,2,4)"
    )
    ap.add_argument("--dir", type=Path, default=None, help="write the fleet under this directory")
    ap.add_argument(
        "--blocks",
        type=int,
        default=0,
        help="cut the fleet into this many stores, one process and local in turns on each",
    )
    ap.add_argument(
        "--store", choices=("local", "s3"), default="local", help="s3: also over moto's S3"
    )
    args = ap.parse_args()
    ranks = tuple(int(r) for r in args.ranks.split(","))
    print(f"{args.jobs} jobs, ~{args.steps} steps, ranks from {ranks}, {os.cpu_count()} cores")
    job_args = {"steps_scale": max(1, round(args.steps / MEAN_STEPS)), "ranks_from": ranks}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp) / "store"
        t = time.perf_counter()
        if args.templates:
            made = write_copies(root, args.jobs, args.templates, **job_args)
        else:
            write_fleet(root, args.jobs, **job_args)
            made = sum(p.stat().st_size for p in root.rglob("*.jsonl"))
        print(
            f"generated {args.jobs} jobs, {made / 1e9:.2f} GB, in {time.perf_counter() - t:.1f} s",
            flush=True,
        )
        print(f"host index {host_index(3):.2f} s", flush=True)
        if args.blocks:
            _blocks(root, args.blocks, Path(tmp))
            return
        text = _local(root, Path(tmp))
        print(f"host index {host_index(3):.2f} s", flush=True)
        if args.store == "s3":
            _s3(root, Path(tmp), text)


if __name__ == "__main__":
    main()
