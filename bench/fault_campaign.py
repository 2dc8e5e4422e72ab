"""Kill campaign: recording processes killed at random moments lose no acknowledged event.

    python bench/fault_campaign.py [--sigkill 200] [--sigterm 100] [--procs 8] [--threads 4]

Each round starts ``--procs`` processes; each runs ``--threads`` threads that record
``step_start`` events as fast as they can (and a ``checkpoint_committed`` every
1,000th) into one directory store. **Acknowledged** means: the record call returned.
Right after each call returns, the thread appends the step to the process's ack
ledger with ``os.write`` on an ``O_APPEND`` file, so the ledger is in the kernel
before the next record starts and survives the kill like the store does. After a
random delay (``--min-delay`` .. ``--max-delay`` seconds after the process is
recording), each process gets SIGKILL or SIGTERM. The round then reads the store
back with badput's reader and checks, per process, that every ledger entry is
there (a torn last ledger line, cut by the kill, is not an acknowledgement).

Prints the totals and writes them as JSON (``--json``). Figures in
``docs/reliability.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from badput.store import JsonlStore

CHILD = textwrap.dedent(
    """
    import os, sys, threading
    from badput.recorder import Recorder

    root, ledger, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rec = Recorder("campaign", root, attempt=0, heartbeat_interval=1)
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    ready = threading.Barrier(threads + 1)

    def work(k):
        ready.wait()
        i = 0
        while True:
            step = k * 1_000_000_000 + i
            if i % 1000 == 999:
                rec.record_checkpoint_committed(step)
            else:
                rec.record_step_start(step)
            os.write(fd, b"%d\\n" % step)  # acknowledged: the record call returned
            i += 1

    for k in range(threads):
        threading.Thread(target=work, args=(k,), daemon=True).start()
    ready.wait()
    print("go", flush=True)
    threading.Event().wait()
    """
)


def _acked(ledger: Path) -> set[int]:
    lines = ledger.read_bytes().split(b"\n")
    return {int(x) for x in lines[:-1]}


def run_round(
    work: Path, procs: int, threads: int, signals: list[int], delays: tuple[float, float]
) -> dict[str, int]:
    root = work / "store"
    started = []
    for p in range(procs):
        ledger = work / f"ledger{p}"
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), str(ledger), str(threads)],
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append((proc, ledger))
    for proc, _ in started:
        assert proc.stdout is not None
        if proc.stdout.readline() != "go\n":
            raise SystemExit("a recording process failed to start")
    order = list(zip(started, signals, strict=True))
    random.shuffle(order)
    for (proc, _), signum in order:
        time.sleep(random.uniform(*delays) / procs)
        proc.send_signal(signum)
    for proc, _ in started:
        proc.wait(timeout=60)
    store = JsonlStore(root)
    by_pid: dict[int | None, set[int]] = {}
    errors = 0
    for chunk in store.read("campaign").chunks:
        for item in chunk.items:
            if isinstance(item, Exception):
                errors += 1
            elif item.step is not None:
                by_pid.setdefault(item.pid, set()).add(item.step)
    acked_total = lost = unacked = 0
    for proc, ledger in started:
        acked = _acked(ledger)
        stored = by_pid.get(proc.pid, set())
        acked_total += len(acked)
        lost += len(acked - stored)
        unacked += len(stored - acked)
    shutil.rmtree(work)
    work.mkdir()
    return {"acked": acked_total, "lost": lost, "in_flight": unacked, "bad_lines": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sigkill", type=int, default=200)
    parser.add_argument("--sigterm", type=int, default=100)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--min-delay", type=float, default=0.05)
    parser.add_argument("--max-delay", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    random.seed(args.seed)
    kills = [signal.SIGKILL] * args.sigkill + [signal.SIGTERM] * args.sigterm
    random.shuffle(kills)
    totals = {"acked": 0, "lost": 0, "in_flight": 0, "bad_lines": 0}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="badput-campaign-") as tmp:
        work = Path(tmp) / "round"
        work.mkdir()
        rounds = 0
        while kills:
            batch, kills = kills[: args.procs], kills[args.procs :]
            result = run_round(
                work, len(batch), args.threads, batch, (args.min_delay, args.max_delay)
            )
            for key, value in result.items():
                totals[key] += value
            rounds += 1
            print(f"round {rounds}: {result}", flush=True)
    summary = {
        "sigkill": args.sigkill,
        "sigterm": args.sigterm,
        "procs_per_round": args.procs,
        "threads_per_proc": args.threads,
        "rounds": rounds,
        "seconds": round(time.monotonic() - t0, 1),
        "cpus": os.cpu_count(),
        **totals,
    }
    print(json.dumps(summary, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    if totals["lost"] or totals["bad_lines"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
