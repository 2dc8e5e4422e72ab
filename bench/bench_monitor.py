"""CPU cost of a Monitor watching a 1,000,000-step job that is still running.

    python bench/bench_monitor.py [--steps N] [--seconds S] [--exporters none|prometheus|all]
                                  [--mix benchmark|dataload] [--keep DIR]

The job (``make_big_job.py``, no ``job_end``): 4 attempts, 2,000,000+ events. A
:class:`~badput.monitor.Monitor` with a 1 s interval, rolling windows of 60 s and
3600 s and step-time deviation on first catches up with the log (reported apart),
then a writer thread appends 100 steps/s (``step_start``/``step_end`` pairs, a
heartbeat every 10 job-seconds, written in batches every 50 ms as a recorder does)
to the running attempt's file. The job's steps are 0.1 s long, so the monitor's
clock runs 10x faster than the wall clock (100 steps/s of wall time = 0.1 s steps
of job time), keeping the job's timeline, the ideal step time and the windows
realistic.

``--mix dataload``: the backlog and the arriving steps both carry a blocking data load
inside every step (``data_loading_start`` 20 µs after the ``step_start``, ``data_loading_end``
20 ms later, the next step 30 µs after the ``step_end``: ``make_big_job.py --mix dataload``),
the log ``with rec.data_loading()`` writes: 4 events a step instead of 2 (issue 11).

``--mix loaders``: the same loads, written by two data-loader processes of the rank, by
turns, each to its own file (``make_big_job.py --mix loaders``); while the job runs, the
first loader's file is written every 0.5 s and the second's every 1.15 s, as two
processes' recorders flush on their own clocks. The monitor's reads then find one
loader's marks late at most cycles (before the marks of the other it already took).

The figure is the monitor's CPU time over ``--seconds`` (default 30) of wall time,
as a percentage of one core: the CPU time of its cycles (:attr:`Monitor.cpu_seconds`:
its thread's, and the per-rank analysis thread's a cycle starts), cross-checked with the
process CPU time minus the writer thread's own ``thread_time``. Target: < 2 % (issue 11).

``--keep DIR`` writes the job once and reuses it (give the same ``--mix``); each run
appends its ~3,300 steps to it (the job keeps running, as a real one would).
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from badput.events import Event
from badput.formats.codec import encode_lines
from badput.monitor import Monitor, Snapshot
from make_big_job import JOB, LOAD_AFTER_S, LOAD_S, STEP_GAP_S, STEP_S, loader_pid, write_job

SPEED = 10.0  # job seconds per wall second: 100 steps/s of 0.1 s steps
STEPS_PER_S = 100
LOADER_FLUSH_S = (0.5, 1.15)  # wall seconds between two writes of each loader's file


def last_event(path: Path) -> tuple[dict[str, Any], int]:
    """The last complete line of ``path``, decoded, and the last step in the file's tail."""
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - 65536))
        lines = fh.read().rstrip(b"\n").split(b"\n")[1:]
    events = [json.loads(line) for line in lines]
    steps = [e["step"] for e in events if e["kind"] in ("step_start", "step_end")]
    return dict(events[-1]), max(steps)


def children_cpu() -> float:
    """CPU seconds of the finished child processes (a parallel cold read's workers)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


class VirtualClock:
    """The job's clock: frozen at the last event until started, then SPEED x wall time."""

    def __init__(self, t: float) -> None:
        self.base = t
        self.real0: float | None = None

    def start(self) -> None:
        self.real0 = time.monotonic()

    def __call__(self) -> float:
        if self.real0 is None:
            return self.base
        return self.base + (time.monotonic() - self.real0) * SPEED


class Writer(threading.Thread):
    """Appends the running attempt's next steps as job time passes."""

    def __init__(
        self,
        path: Path,
        clock: VirtualClock,
        step: int,
        attempt: int,
        *,
        data_loading: bool,
        loader_paths: list[Path] | None = None,
    ) -> None:
        super().__init__(name="bench-writer", daemon=True)
        self.path = path
        self.data_loading = data_loading
        self.loader_paths = loader_paths or []
        self.gap = STEP_GAP_S if data_loading else 0.0
        self.clock = clock
        self.step = step
        self.attempt = attempt
        self.ts = clock.base
        self.next_beat = clock.base + 10.0
        self.stop = threading.Event()
        self.steps_written = 0
        self.cpu = 0.0

    def event(self, kind: str, ts: float, pid: int | None = None, **fields: Any) -> Event:
        return Event(
            ts=ts,
            kind=kind,
            job=JOB,
            attempt=self.attempt,
            host="bench",
            rank=0,
            pid=1000 + self.attempt if pid is None else pid,
            **fields,
        )

    def run(self) -> None:
        t0 = time.thread_time()
        loaders = [p.open("ab", buffering=0) for p in self.loader_paths]
        pending: list[list[Event]] = [[] for _ in loaders]
        flushed = [time.monotonic()] * len(loaders)
        with self.path.open("ab", buffering=0) as fh:
            while not self.stop.wait(0.05):
                now = self.clock()
                batch = []
                while self.ts + self.gap + STEP_S <= now:
                    self.ts += self.gap
                    batch.append(self.event("step_start", self.ts, step=self.step))
                    if self.data_loading:
                        load = self.ts + LOAD_AFTER_S
                        into, pid = batch, None
                        if loaders:
                            k = self.step % len(loaders)
                            into, pid = pending[k], loader_pid(self.attempt, k)
                        into.append(self.event("data_loading_start", load, pid))
                        into.append(self.event("data_loading_end", load + LOAD_S, pid))
                    self.ts += STEP_S
                    batch.append(self.event("step_end", self.ts, step=self.step))
                    self.step += 1
                    self.steps_written += 1
                    if self.ts >= self.next_beat:
                        batch.append(self.event("heartbeat", self.ts))
                        self.next_beat += 10.0
                if batch:
                    fh.write(encode_lines(batch))
                for k, out in enumerate(loaders):
                    if pending[k] and time.monotonic() - flushed[k] >= LOADER_FLUSH_S[k]:
                        out.write(encode_lines(pending[k]))
                        pending[k].clear()
                        flushed[k] = time.monotonic()
        for out in loaders:
            out.close()
        self.cpu = time.thread_time() - t0


class Timing:
    """A do-nothing exporter that records when each cycle's snapshot arrives."""

    name = "timing"

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []

    def export(self, snapshot: Snapshot) -> None:
        self.snapshots.append(snapshot)

    def close(self) -> None:
        pass


def exporters(kind: str, tmp: Path) -> list[Any]:
    out: list[Any] = []
    if kind in ("prometheus", "all"):
        from badput.monitor.prometheus import PrometheusExporter  # noqa: PLC0415 (an extra)

        out.append(PrometheusExporter(port=0))
    if kind == "all":
        from badput.monitor.tensorboard import TensorBoardExporter  # noqa: PLC0415 (an extra)

        out.append(TensorBoardExporter(tmp / "tb"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--exporters", choices=("none", "prometheus", "all"), default="none")
    parser.add_argument("--mix", choices=("benchmark", "dataload", "loaders"), default="benchmark")
    parser.add_argument("--keep", type=Path, help="write the job here and keep it (reused)")
    args = parser.parse_args()
    data_loading = args.mix != "benchmark"
    loaders = 2 if args.mix == "loaders" else 0
    root = args.keep or Path(tempfile.mkdtemp(prefix="badput-bench-"))
    try:
        if not (root / JOB).exists():
            t0 = time.perf_counter()
            n = write_job(
                root, args.steps, finished=False, data_loading=data_loading, loaders=loaders
            )
            print(f"job: {n:,} events written in {time.perf_counter() - t0:.1f} s")
        running = max((root / JOB).iterdir(), key=lambda p: int(p.name))
        path = next(p for p in running.glob("*.jsonl") if "-l" not in p.stem)
        loader_paths = [path.with_name(f"{path.stem}-l{k}.jsonl") for k in range(loaders)]
        last, last_step = last_event(path)
        clock = VirtualClock(float(last["ts"]))
        timing = Timing()
        mon = Monitor(
            JOB,
            root,
            [*exporters(args.exporters, root), timing],
            interval=1.0,
            rolling_windows=(60.0, 3600.0),
            include_step_deviation=True,
            clock=clock,
        )
        t0, p0, k0 = time.perf_counter(), time.process_time(), children_cpu()
        mon.start()
        while mon.cycles < 1 or mon.cpu_seconds == 0.0:  # a cycle adds its CPU as it ends
            time.sleep(0.01)
        catch_up_cpu = mon.cpu_seconds
        print(
            f"catch-up (first cycle: read and account {args.steps:,} steps): "
            f"{time.perf_counter() - t0:.2f} s wall, {catch_up_cpu:.2f} s CPU in its cycle; "
            f"{time.process_time() - p0:.2f} s of the process's CPU and "
            f"{children_cpu() - k0:.2f} s of its read workers'"
        )
        # Steady state: the job runs on; the monitor follows it once a second.
        writer = Writer(
            path,
            clock,
            last_step + 1,
            int(last["attempt"]),
            data_loading=data_loading,
            loader_paths=loader_paths,
        )
        clock.start()
        writer.start()
        time.sleep(3.0)  # warm-up: the first windows and sealing after new data
        cpu0, proc0, wall0, cycles0 = (
            mon.cpu_seconds,
            time.process_time(),
            time.perf_counter(),
            mon.cycles,
        )
        n0 = len(timing.snapshots)
        time.sleep(args.seconds)
        cpu1, proc1, wall1, cycles1 = (
            mon.cpu_seconds,
            time.process_time(),
            time.perf_counter(),
            mon.cycles,
        )
        writer.stop.set()
        writer.join()
        mon.stop(timeout=10.0)
        wall = wall1 - wall0
        cycles = cycles1 - cycles0
        monitor_cpu = cpu1 - cpu0
        # the writer's CPU over the same span, prorated (it ran 3 s longer)
        writer_share = writer.cpu * wall / (wall + 3.0)
        snaps = timing.snapshots[n0:]
        gaps = [b.time - a.time for a, b in itertools.pairwise(snaps)]
        last_snap = timing.snapshots[-1]
        print(
            f"steady state over {wall:.1f} s: {cycles} cycles, {writer.steps_written:,} steps "
            f"appended ({writer.steps_written / (wall + 3.0):.0f}/s)"
        )
        print(
            f"monitor CPU: {monitor_cpu:.3f} s = {100 * monitor_cpu / wall:.2f} % of one core "
            f"({1000 * monitor_cpu / max(cycles, 1):.1f} ms per cycle; target < 2 %)"
        )
        print(
            f"cross-check, process CPU minus the writer's: "
            f"{100 * ((proc1 - proc0) - writer_share) / wall:.2f} % of one core"
        )
        if gaps:
            print(
                f"cycle spacing (job time; 10 s = 1 s of wall time): median "
                f"{statistics.median(gaps):.2f} s, max {max(gaps):.2f} s"
            )
        print(
            f"last snapshot: step {last_snap.last_step}, goodput {last_snap.report.goodput:.4f}, "
            f"60 s window goodput {last_snap.windows[60.0].goodput:.4f}, "
            f"ideal {last_snap.report.ideal_step_time}"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
