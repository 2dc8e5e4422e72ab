"""Write a large synthetic job log the way the recorder lays it out (for benchmarks).

1,000,000 steps in 4 attempts (3 restarts, each losing the steps since the last
checkpoint), ``step_start``/``step_end`` per step, an eval every 100 steps, a
checkpoint every 1,000 steps, heartbeats every 10 s.

``--mix dataload`` (``data_loading=True``): every step also holds a blocking data load,
``data_loading_start`` 20 µs after its ``step_start`` (a second clock read) and
``data_loading_end`` 20 ms later, and the next step starts 30 µs after the ``step_end``
(distinct timestamps, as a real loop records them): the log users of ``with
rec.data_loading()`` write (issue 11).

    python bench/make_big_job.py OUT_DIR [--steps N] [--mix benchmark|dataload]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from badput._codec import encode_lines
from badput.events import Event

JOB = "big"
STEP_S = 0.1  # seconds per step
LOAD_AFTER_S = 2e-5  # a data load starts this long after its step (--mix dataload)
LOAD_S = 0.02
STEP_GAP_S = 3e-5  # from a step's end to the next step's start (--mix dataload)
EVAL_S = 0.5
SAVE_S = 2.0
RESTORE_S = 5.0


def write_job(
    root: Path,
    steps: int,
    restarts: int = 3,
    *,
    finished: bool = True,
    data_loading: bool = False,
) -> int:
    """Write the job under ``root/big``; return the number of events.

    ``finished=False`` leaves out the final ``job_end``: a job still running.
    ``data_loading=True``: a blocking data load inside every step (``--mix dataload``).
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

        def emit(
            kind: str, ts: float, *, buf: list[Event] = buf, attempt: int = attempt, **f: object
        ) -> None:
            buf.append(
                Event(
                    ts=ts,
                    kind=kind,
                    job=JOB,
                    attempt=attempt,
                    host="bench",
                    rank=0,
                    pid=1000 + attempt,
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
                if data_loading:
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
        t += 60.0  # recovery before the next attempt
    return n_events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--running", action="store_true", help="no final job_end")
    parser.add_argument("--mix", choices=("benchmark", "dataload"), default="benchmark")
    args = parser.parse_args()
    t0 = time.perf_counter()
    n = write_job(
        args.out, args.steps, finished=not args.running, data_loading=args.mix == "dataload"
    )
    size = sum(f.stat().st_size for f in (args.out / JOB).rglob("*.jsonl"))
    print(
        f"wrote {n:,} events ({size / 1e6:.0f} MB) to {args.out / JOB} "
        f"in {time.perf_counter() - t0:.1f}s"
    )


if __name__ == "__main__":
    main()
