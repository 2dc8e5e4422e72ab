"""Report time against the number of attempts (issue 9: it grew as attempts squared).

    python bench/bench_attempts.py [--attempts 2500 10000] [--id-less] [--serial]
    python bench/bench_attempts.py --attempts 10000 --command [--rounds 7]

Each attempt: job_start, a checkpoint restore, 20 steps (start and end), a checkpoint
save, then a crash (an ``attempt_end``); the last attempt ends with ``job_end``. One
file per attempt (``<attempt>/host-0-pid.jsonl``), as the recorder writes them; with
``--id-less`` one file of events without attempt ids (an imported log). Prints the
time of the read and of the report (what ``analyze()`` does), their sum, and of a second
report on the same state. The read is shared with a worker process when a core is idle,
as ``analyze()`` and ``badput report`` read (``--serial``: one process reads).

``--command``: the whole ``badput report STORE --job many --json`` as a user runs it, in a
new process each round (start-up, imports, the job listed by a helper process, the read,
the report, the JSON written), timed from outside. Prints each round's wall time, their
median, the largest peak memory, and the host index before and after (``host_speed.py``:
the machine is shared, and its speed moves by a third from hour to hour).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from badput.analysis import LiveJob
from badput.events import Event
from badput.formats.codec import encode_lines

JOB = "many"
STEPS_PER_ATTEMPT = 20


def write_job(root: Path, attempts: int, *, id_less: bool) -> int:
    t = 1_732_000_000.0
    step = 0
    n = 0
    single: list[Event] = []
    for a in range(attempts):
        evs: list[Event] = []
        ident: dict[str, object] = {} if id_less else {"attempt": a}

        def emit(
            kind: str,
            ts: float,
            evs: list[Event] = evs,
            ident: dict[str, object] = ident,
            **f: object,
        ) -> None:
            evs.append(Event(ts=ts, kind=kind, job=JOB, host="h", rank=0, **ident, **f))  # type: ignore[arg-type]

        emit("job_start", t)
        restore = step - step % 10
        emit("checkpoint_restore_start", t, step=restore)
        t += 2.0
        emit("checkpoint_restore_end", t, step=restore)
        step = restore
        for _ in range(STEPS_PER_ATTEMPT):
            step += 1
            emit("step_start", t, step=step)
            t += 1.0
            emit("step_end", t, step=step)
            if step % 10 == 0:
                emit("checkpoint_save_start", t, step=step)
                t += 0.5
                emit("checkpoint_save_end", t, step=step)
        t += 3.0
        if a == attempts - 1:
            emit("job_end", t, status="completed")
        else:
            emit("attempt_end", t, status="failed", exit_code=1)
            t += 30.0
        n += len(evs)
        if id_less:
            single.extend(evs)
        else:
            path = root / JOB / str(a) / "h-0-1.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode_lines(evs))
    if id_less:
        path = root / JOB / "import" / "h-0-1.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_lines(single))
    return n


#: Runs the command from a fresh small process: a child's peak memory counts the memory of
#: the process that started it (its pages before ``exec``), and this one holds the job.
_LAUNCHER = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def command_rounds(root: Path, rounds: int) -> tuple[list[float], int]:
    """Wall times of ``rounds`` runs of ``badput report ROOT --job many --json``, each in a
    new process (its output dropped), and the largest peak memory among them, in KB."""
    badput = Path(sys.executable).with_name("badput")
    argv = [str(badput), "report", str(root), "--job", JOB, "--json"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times: list[float] = []
    peak = 0
    for _ in range(rounds):
        out = subprocess.run(
            [sys.executable, "-c", _LAUNCHER, *argv],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        times.append(float(out[0]))
        peak = max(peak, int(out[1]))
    return times, peak


def time_command(root: Path, attempts: int, n: int, rounds: int) -> None:
    """``--command``: the whole command's rounds, with the host index around them."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from host_speed import host_index  # noqa: PLC0415 (only this mode needs it)

    before = host_index(3)
    command_rounds(root, 1)  # the files in the page cache, the .pyc written
    times, peak = command_rounds(root, rounds)
    after = host_index(3)
    print(
        f"{attempts:>7,} attempts ({n:,} events): badput report --json "
        f"{' '.join(f'{t:.2f}' for t in times)} s, median {statistics.median(times):.2f} s, "
        f"peak {peak // 1024} MB (host index {before:.2f} s before, {after:.2f} s after)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--attempts", type=int, nargs="+", default=[2_500, 10_000])
    parser.add_argument("--id-less", action="store_true")
    parser.add_argument("--serial", action="store_true", help="read in one process")
    parser.add_argument("--command", action="store_true", help="time `badput report --json`")
    parser.add_argument("--rounds", type=int, default=7, help="runs of the command")
    args = parser.parse_args()
    for attempts in args.attempts:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            n = write_job(root, attempts, id_less=args.id_less)
            if args.command:
                time_command(root, attempts, n, args.rounds)
                continue
            t0 = time.perf_counter()
            live = LiveJob(root, JOB, parallel=False if args.serial else None)
            live.update()
            t1 = time.perf_counter()
            r = live.report()
            t2 = time.perf_counter()
            live.report()
            t3 = time.perf_counter()
            assert len(r.attempts) == attempts, len(r.attempts)
            print(
                f"{attempts:>7,} attempts ({n:,} events{', id-less' if args.id_less else ''}): "
                f"read {t1 - t0:.2f} s{' (serial)' if args.serial else ''}, report "
                f"{t2 - t1:.2f} s, both {t2 - t0:.2f} s, again {t3 - t2:.2f} s, "
                f"goodput {r.goodput:.4f}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
