"""Cold report, windowed query and memory on the log shapes users write.

    python bench/bench_shapes.py [--only NAME ...] [--max-steps N]

Shapes (each written to a temporary store, then read by a fresh process):

- ``mix-<N>``: the benchmark mix of ``make_big_job.py`` (step start/end, an eval every 100
  steps, a checkpoint every 1,000, a heartbeat every 10 s, 3 crashes), N = 1e4, 1e5, 1e6
  steps; the growth exponent of cold time (log-log slope) is printed after them.
- ``dataload``: every step ``step_start``, ``data_loading_start``/``_end``, ``step_end``,
  all four at distinct timestamps (the loop of docs/events.md), 1e6 steps (``--max-steps``
  lowers it), 4 M events.
- ``with-launcher``: ``dataload`` and, in a file read before the trainer's, the three data
  loads of a launcher process recording as another rank (a small stream before the large
  one: the per-rank view once paired both in one pass, 405-432 MB).
- ``two-loaders``: ``dataload`` with its loads written by two loader processes of the
  rank, each to its own file (the rank's marks arrive one file's after the other's, out of
  time order: 467-473 MB before they were paired and read in time order a piece at a time).
- ``one-file`` / ``file-per-attempt``: the same 1e6-step, 4-attempt log in one file and in
  one file per attempt.
- ``8-ranks``: 8 ranks, each its own file, each recording every step with its data load,
  1e5 steps (a tenth of the others: 3.2 M events, as many as the one-rank shapes hold).
- ``10k-attempts``: 10,000 attempts of 20 steps (``bench_attempts.py``).

``--slice-bytes N ...`` reads with slices and blocks of N bytes instead of the library's
(``--slice-bytes 8388608 1048576``: the sizes of before and since 2026-11-26), each in turn.

``--trees SRC SRC ...`` measures several source trees (a worktree of an older commit and
this one: ``--trees ../wt-old/src src``) on the same generated logs, alternating.

``--command`` also times the whole ``badput report --json`` of each shape in a fresh process
(the advice the JSON carries, and the timeline it is measured on, included: what the read and
report above leave out; 2026-11-29 it took 12-14 s on the data-load shape, unseen).

``--parallel both`` reads each shape twice, by one process and shared with worker processes
(forced on; ``auto``, the default, starts workers only on idle cores); ``--parallel all`` three
times: ``off``, ``auto``, ``on`` (and says whether ``auto`` was slower than ``off``).

The host index (``host_speed.py``: a fixed workload, lower is faster) is printed before
and after the runs: compare figures measured at like indexes.

For each shape: CPU seconds (its own and its read workers') and wall seconds of the cold
read and report in a fresh process, with the allocator setting ``badput report`` makes for
its report (``badput.runtime.heap.large_blocks_mapped``; CPU time is the figure to compare on a
shared machine), the peak RSS of the largest process, and the median of 20 windowed
queries (a rolling hour ending at the job's end) on the state it read. With
``--repeat N`` each mode runs N times, the modes alternating, and the medians are shown
(with the median load average before the runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from badput.events import Event
from badput.formats.codec import encode_lines
from bench_attempts import write_job as write_attempts
from host_speed import host_index
from make_big_job import write_job as write_mix

CHILD = r"""
import json, resource, statistics, sys, time
try:  # numpy as `badput report` imports it: one BLAS thread (older code has no such step)
    from badput.runtime.blas import import_numpy_single_threaded
    import_numpy_single_threaded()
except ImportError:
    pass
from badput.analysis import LiveJob
import contextlib
try:  # the allocator setting `badput report` makes for its report (older code has none)
    from badput.runtime.heap import large_blocks_mapped
except ImportError:
    large_blocks_mapped = contextlib.nullcontext
root, job = sys.argv[1], sys.argv[2]
parallel = {"auto": None, "on": True, "off": False}[sys.argv[3]]
if len(sys.argv) > 4:  # --slice-bytes: the read's slices and blocks of that size
    import badput.analysis, badput.store._reading
    badput.analysis.READ_SLICE_BYTES = badput.store._reading.READ_BLOCK = int(sys.argv[4])
c0, w0 = time.process_time(), time.perf_counter()
live = LiveJob(root, job, parallel=parallel)
live.update()
with large_blocks_mapped():
    r = live.report()
wall = time.perf_counter() - w0
kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers of a parallel cold read
cpu = time.process_time() - c0 + kids.ru_utime + kids.ru_stime
samples = []
for _ in range(20):
    t = time.perf_counter()
    live.report(window=(r.end - 3600.0, r.end))
    samples.append(time.perf_counter() - t)
# ru_maxrss survives exec: it would report the bench process that wrote the log (the
# 8-rank log holds 800 MB of events). VmHWM is this process's own peak (Linux).
peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    with open("/proc/self/status") as status:
        peak_kb = next(int(x.split()[1]) for x in status if x.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass
peak_kb = max(peak_kb, kids.ru_maxrss)
print(json.dumps({
    "cpu": cpu, "wall": wall, "rss_mb": peak_kb / 1024,
    "window_ms": statistics.median(samples) * 1000, "goodput": r.goodput,
    "events": live.accountant.n_events,
}))
"""


def write_steps(
    root: Path,
    job: str,
    steps: int,
    *,
    attempts: int = 1,
    ranks: int = 1,
    per_attempt: bool,
    launcher: bool = False,
    loaders: int = 0,
) -> None:
    """Steps with a blocking load inside each (distinct timestamps); crashes lose 37 steps.
    ``launcher``: a file read first (``0/a-launcher.jsonl``) holds three data loads of a
    launcher process recording as rank 99 of the first attempt. ``loaders``: the loads are
    written by that many loader processes of the rank, each to its own file (``-l<k>``;
    by turns), not by the trainer."""
    t = 1_732_000_000.0
    step = 0
    crash = [steps * (a + 1) // attempts for a in range(attempts)]
    files: dict[Path, list[Event]] = {}
    for a in range(attempts):
        step = max(0, step - 37)
        start_t = t
        for rank in range(ranks):
            name = f"{a}/h-{rank}-{a}.jsonl" if per_attempt else "all/h-0-0.jsonl"
            out = files.setdefault(root / job / name, [])
            tt, s = start_t, step

            def e(
                kind: str, ts: float, out: list[Event] = out, a: int = a, r: int = rank, **f: object
            ) -> None:
                out.append(Event(ts=ts, kind=kind, job=job, attempt=a, rank=r, **f))  # type: ignore[arg-type]

            loader_files = [
                files.setdefault(root / job / name.replace(".jsonl", f"-l{k}.jsonl"), [])
                for k in range(loaders)
            ]

            e("job_start", tt)
            while s < crash[a]:
                s += 1
                e("step_start", tt, step=s)
                if loaders:
                    into = loader_files[s % loaders]
                    e("data_loading_start", tt + 0.001, out=into)
                    e("data_loading_end", tt + 0.021, out=into)
                else:
                    e("data_loading_start", tt + 0.001)
                    e("data_loading_end", tt + 0.021)
                e("step_end", tt + 0.1, step=s)
                tt += 0.1 + 0.0001 * rank
            if a == attempts - 1:
                e("job_end", tt + 1.0)
            if rank == ranks - 1:
                t, step = tt + 30.0, s
    if launcher:
        files[root / job / "0" / "a-launcher.jsonl"] = [
            Event(ts=1_732_000_001.0 + i + dt, kind=kind, job=job, attempt=0, rank=99)
            for i in range(3)
            for kind, dt in (("data_loading_start", 0.0), ("data_loading_end", 0.5))
        ]
    for path, evs in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as fh:
            for i in range(0, len(evs), 200_000):
                fh.write(encode_lines(evs[i : i + 200_000]))


def measure(
    root: Path, job: str, parallel: str, slice_bytes: int | None = None, src: str | None = None
) -> dict[str, float]:
    """One cold read and report in a fresh process; ``src``: the ``src`` directory of the
    source tree to measure (``--trees``), else the badput this interpreter imports."""
    size = [] if slice_bytes is None else [str(slice_bytes)]
    env = None if src is None else {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), job, parallel, *size],
        capture_output=True,
        check=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def measure_command(root: Path, job: str, src: str | None = None) -> dict[str, float]:
    """The whole ``badput report --json`` of the job in a fresh process, as a user runs it
    (the advice and its timeline included; ``BADPUT_STATE_CACHE=off``): wall seconds and
    the peak RSS of the command and its workers (``wait4``)."""
    env = {**os.environ, "BADPUT_STATE_CACHE": "off"}
    if src is not None:
        env["PYTHONPATH"] = src
    argv = [sys.executable, "-m", "badput.cli", "report", "--json", "--job", job, str(root)]
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the command, its output to /dev/null
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.execve(sys.executable, argv, env)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"badput report failed on {root}: exit status {status}")
    return {"wall": wall, "rss_mb": usage.ru_maxrss / 1024}


def _tree_name(src: str) -> str:
    """A source tree's label: its checkout's short commit, else its directory's name."""
    checkout = Path(src).resolve().parent
    try:
        return subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            check=True,
            text=True,
        ).stdout.strip() + ("*" if _dirty(checkout) else "")
    except (OSError, subprocess.CalledProcessError):
        return checkout.name


def _dirty(checkout: Path) -> bool:
    out = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--", "src"],
        check=False,
        capture_output=True,
        text=True,
    )
    return bool(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each mode (alternating); medians shown"
    )
    parser.add_argument(
        "--parallel",
        choices=("auto", "on", "off", "both", "all"),
        default="auto",
        help="shared cold read: auto (workers on idle cores only), on, off, both (off, on) "
        "or all (off, auto, on)",
    )
    parser.add_argument(
        "--slice-bytes",
        type=int,
        nargs="+",
        help="read in slices and blocks of these sizes instead of the library's "
        "(READ_SLICE_BYTES, READ_BLOCK), each measured in turn",
    )
    parser.add_argument(
        "--trees",
        nargs="+",
        metavar="SRC",
        help="measure these source trees' badput (each a checkout's src directory, e.g. a "
        "worktree of an older commit) on the same generated logs, alternating; compile "
        "each first (python -m compileall SRC) or the one without bytecode parses its modules",
    )
    parser.add_argument(
        "--command",
        action="store_true",
        help="also time the whole badput report --json of each shape (its advice included)",
    )
    args = parser.parse_args()
    if any(n < 4096 for n in args.slice_bytes or ()):
        parser.error("--slice-bytes: each size at least 4096 bytes")
    shapes: list[tuple[str, object]] = []
    for n in (10_000, 100_000, 1_000_000):
        if n <= args.max_steps:
            shapes.append(
                (f"mix-{n}", lambda root, n=n: write_mix(root, n, finished=False) and "big")
            )
    big = min(args.max_steps, 1_000_000)  # the size for every shape
    shapes += [
        ("dataload", lambda root: write_steps(root, "d", big, per_attempt=True) or "d"),
        (
            "with-launcher",
            lambda root: write_steps(root, "l", big, per_attempt=True, launcher=True) or "l",
        ),
        (
            "two-loaders",
            lambda root: write_steps(root, "t", big, per_attempt=True, loaders=2) or "t",
        ),
        (
            "one-file",
            lambda root: write_steps(root, "o", big, attempts=4, per_attempt=False) or "o",
        ),
        (
            "file-per-attempt",
            lambda root: write_steps(root, "p", big, attempts=4, per_attempt=True) or "p",
        ),
        (
            "8-ranks",
            lambda root: write_steps(root, "r", big // 10, ranks=8, per_attempt=True) or "r",
        ),
        ("10k-attempts", lambda root: write_attempts(root, 10_000, id_less=False) and "many"),
    ]
    # how fast the shared machine is at the moment (bench/host_speed.py), before and after
    print(f"host index before: {host_index(3):.2f} s", flush=True)
    mix: list[tuple[int, float]] = []
    for name, make in shapes:
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            job = make(root)  # type: ignore[operator]
            modes = {"both": ("off", "on"), "all": ("off", "auto", "on")}.get(
                args.parallel, (args.parallel,)
            )
            sizes: list[int | None] = args.slice_bytes or [None]
            trees: list[str | None] = args.trees or [None]
            variants = {
                (mode if size is None else f"{mode}, {size // 1024} KiB")
                + ("" if tree is None else f", {_tree_name(tree)}"): (mode, size, tree)
                for tree in trees
                for size in sizes
                for mode in modes
            }
            samples: dict[str, list[dict[str, float]]] = {label: [] for label in variants}
            for _ in range(args.repeat):  # modes alternate, so a busier minute hits them all
                for label, (mode, size, tree) in variants.items():
                    load = os.getloadavg()[0]
                    got = measure(root, job, mode, size, tree)
                    samples[label].append({**got, "load": load})
            runs: dict[str, dict[str, float]] = {}
            for label in variants:
                m = runs[label] = {
                    k: statistics.median(r[k] for r in samples[label]) for k in samples[label][0]
                }
                print(
                    f"{name:>18} ({label:>4}): {m['events']:>10,.0f} events  cpu {m['cpu']:6.2f} s"
                    f"  wall {m['wall']:6.2f} s  peak {m['rss_mb']:6.0f} MB  1 h window "
                    f"{m['window_ms']:6.2f} ms  load {m['load']:.1f}",
                    flush=True,
                )
            for tree in trees if args.command else []:
                whole = [measure_command(root, job, tree) for _ in range(args.repeat)]
                wall = statistics.median(w["wall"] for w in whole)
                peak = statistics.median(w["rss_mb"] for w in whole)
                label = "" if tree is None else f" ({_tree_name(tree)})"
                print(
                    f"{name:>18} badput report --json{label}: wall {wall:6.2f} s  "
                    f"peak {peak:6.0f} MB",
                    flush=True,
                )
            if "auto" in runs and "off" in runs:
                auto, off = runs["auto"], runs["off"]
                print(
                    f"{name:>18} auto - off: wall {auto['wall'] - off['wall']:+.2f} s, "
                    f"cpu {auto['cpu'] - off['cpu']:+.2f} s",
                    flush=True,
                )
        if name.startswith("mix-"):
            mix.append((int(name[4:]), m["cpu"]))
    if len(mix) >= 2:
        (n0, c0), (n1, c1) = mix[0], mix[-1]
        print(
            f"growth exponent of cold CPU time, {n0:,} -> {n1:,} steps: "
            f"{math.log(c1 / c0) / math.log(n1 / n0):.2f}"
        )
    print(f"host index after: {host_index(3):.2f} s")


if __name__ == "__main__":
    sys.exit(main())
