"""Write a large synthetic job log the way the recorder lays it out (for benchmarks).

1,000,000 steps in 4 attempts (3 restarts, each losing the steps since the last
checkpoint), ``step_start``/``step_end`` per step, an eval every 100 steps, a
checkpoint every 1,000 steps, heartbeats every 10 s.

``--mix dataload`` (``data_loading=True``): every step also holds a blocking data load,
``data_loading_start`` 20 µs after its ``step_start`` (a second clock read) and
``data_loading_end`` 20 ms later, and the next step starts 30 µs after the ``step_end``
(distinct timestamps, as a real loop records them): the log users of ``with
rec.data_loading()`` write (issue 11).

``--mix loaders`` (``loaders=2``): the same, but the loads are written by two data-loader
processes of the rank, by turns, each to its own file (``bench-0-<pid>-l<k>.jsonl``).

    python bench/make_big_job.py OUT_DIR [--steps N] [--mix benchmark|dataload|loaders]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from badput.events import Event
from badput.formats.codec import encode_lines

JOB = "big"
STEP_S = 0.1  # seconds per step
LOAD_AFTER_S = 2e-5  # a data load starts this long after its step (--mix dataload)
LOAD_S = 0.02
STEP_GAP_S = 3e-5  # from a step's end to the next step's start (--mix dataload)
EVAL_S = 0.5
SAVE_S = 2.0
RESTORE_S = 5.0


def loader_pid(attempt: int, k: int) -> int:
    """The process id of loader ``k`` of ``attempt`` (``--mix loaders``)."""
    return 2000 + 10 * attempt + k


def write_job(
    root: Path,
    steps: int,
    restarts: int = 3,
    *,
    finished: bool = True,
    data_loading: bool = False,
    loaders: int = 0,
) -> int:
    """Write the job under ``root/big``; return the number of events.

    ``finished=False`` leaves out the final ``job_end``: a job still running.
    ``data_loading=True``: a blocking data load inside every step (``--mix dataload``);
    ``loaders``: written by that many loader processes of the rank, each to its own file,
    by turns (``--mix loaders``: 2).
    """
    job_dir = root / JOB
    crash_at = [steps * (i + 1) // (restarts + 1) + 437 for i in range(restarts)]
    t = 1_732_000_000.0
    n_events = 0
    step = 0
    for attempt in range(restarts + 1):
        out = job_dir / str(attempt)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"bench-0-{1000 + attempt}.jsonl"
        buf: list[Event] = []
        loader_bufs: list[list[Event]] = [[] for _ in range(loaders)]

        def emit(
            kind: str,
            ts: float,
            *,
            buf: list[Event] = buf,
            attempt: int = attempt,
            pid: int | None = None,
            **f: object,
        ) -> None:
            buf.append(
                Event(
                    ts=ts,
                    kind=kind,
                    job=JOB,
                    attempt=attempt,
                    host="bench",
                    rank=0,
                    pid=1000 + attempt if pid is None else pid,
                    **f,
                )
            )  # type: ignore[arg-type]

        with path.open("wb") as fh:
            emit("job_start", t)
            if attempt:
                restore = (step // 1000) * 1000
                emit("checkpoint_restore_start", t, step=restore)
                t += RESTORE_S
                emit("checkpoint_restore_end", t, step=restore)
                step = restore + 1
            last_hb = t
            stop = crash_at[attempt] if attempt < restarts else steps
            while step <= stop:
                emit("step_start", t, step=step)
                if data_loading and loaders:
                    k = step % loaders
                    into, pid = loader_bufs[k], loader_pid(attempt, k)
                    emit("data_loading_start", t + LOAD_AFTER_S, buf=into, pid=pid)
                    emit("data_loading_end", t + LOAD_AFTER_S + LOAD_S, buf=into, pid=pid)
                elif data_loading:
                    emit("data_loading_start", t + LOAD_AFTER_S)
                    emit("data_loading_end", t + LOAD_AFTER_S + LOAD_S)
                t += STEP_S
                emit("step_end", t, step=step)
                if data_loading:
                    t += STEP_GAP_S
                if step % 100 == 0:
                    emit("custom_start", t, name="eval")
                    t += EVAL_S
                    emit("custom_end", t, name="eval")
                if step % 1000 == 0:
                    emit("checkpoint_save_start", t, step=step)
                    t += SAVE_S
                    emit("checkpoint_save_end", t, step=step)
                if t - last_hb >= 10.0:
                    emit("heartbeat", t)
                    last_hb = t
                step += 1
                if len(buf) >= 100_000:
                    fh.write(encode_lines(buf))
                    n_events += len(buf)
                    buf.clear()
            if attempt == restarts and finished:
                emit("job_end", t, status="completed")
            fh.write(encode_lines(buf))
            n_events += len(buf)
            buf.clear()
        for k, loads in enumerate(loader_bufs):
            loads_path = path.with_name(f"{path.stem}-l{k}.jsonl")
            with loads_path.open("wb") as fh:
                for i in range(0, len(loads), 200_000):
                    fh.write(encode_lines(loads[i : i + 200_000]))
            n_events += len(loads)
        t += 60.0  # recovery before the next attempt
    return n_events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--running", action="store_true", help="no final job_end")
    parser.add_argument("--mix", choices=("benchmark", "dataload", "loaders"), default="benchmark")
    args = parser.parse_args()
    t0 = time.perf_counter()
    n = write_job(
        args.out,
        args.steps,
        finished=not args.running,
        data_loading=args.mix != "benchmark",
        loaders=2 if args.mix == "loaders" else 0,
    )
    size = sum(f.stat().st_size for f in (args.out / JOB).rglob("*.jsonl"))
    print(
        f"wrote {n:,} events ({size / 1e6:.0f} MB) to {args.out / JOB} "
        f"in {time.perf_counter() - t0:.1f}s"
    )


if __name__ == "__main__":
    main()
