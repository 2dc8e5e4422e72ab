"""Cost of one ``record_step_start`` call on the hot path (median over many batches).

    python bench/bench_record.py [--calls N]

Prints the median per-call cost of an enabled recorder writing to a JSONL store
(the background thread runs as in production): in back-to-back batches of
``--calls`` calls (a burst: the thread that makes the file's next pages writable
competes with the loop), and in batches of 1,000 calls 10 ms apart (records
between training steps); and the cost of a disabled recorder.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import badput


def per_call_ns(
    rec: badput.Recorder, calls: int, batches: int, pause: float = 0.0, *, clock: str = "wall"
) -> float:
    """Median ns per call over ``batches`` of ``calls``: of wall time (``clock="wall"``), or
    of the calling thread's CPU time (``"thread"``: what the call costs the training thread,
    the same on a busy host, where wall time also counts the time others had the core)."""
    record = rec.record_step_start
    now = time.perf_counter_ns if clock == "wall" else time.thread_time_ns
    samples = []
    step = 0
    for _ in range(batches):
        t0 = now()
        for _ in range(calls):
            record(step)
            step += 1
        samples.append((now() - t0) / calls)
        if pause:
            time.sleep(pause)  # a training step between bursts of records
    return statistics.median(samples)


def section_ns(rec: badput.Recorder, calls: int, batches: int) -> float:
    """One ``with rec.section("forward"): pass``: the timer's enter and exit."""
    section = rec.section
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            with section("forward"):
                pass
        samples.append((time.perf_counter_ns() - t0) / calls)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=10_000, help="calls per timed batch")
    parser.add_argument("--batches", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        rec = badput.Recorder("bench", store=root, attempt="0", heartbeat_interval=0)
        per_call_ns(rec, 1_000, 2)  # warm up: writer thread started, file open
        enabled = per_call_ns(rec, args.calls, args.batches)
        on_thread = per_call_ns(rec, args.calls, args.batches, clock="thread")
        section_ns(rec, 1_000, 2)
        sections = section_ns(rec, args.calls, args.batches)
        paced = per_call_ns(rec, 1_000, args.batches, pause=0.01)
        rec.close()
        off = badput.Recorder("bench", store=root, enabled=False)
        disabled = per_call_ns(off, args.calls, args.batches)
        print(f"record_step_start, enabled (JSONL store): {enabled / 1000:.2f} µs median per call")
        print(
            f"  the same, CPU time of the calling thread: {on_thread / 1000:.2f} µs median per call"
        )
        print(f"  the same, 1,000 calls every 10 ms:       {paced / 1000:.2f} µs median per call")
        print(
            f"record_step_start, disabled recorder:      {disabled / 1000:.3f} µs median per call"
        )
        print(
            f"with rec.section('forward'): pass, enabled: {sections / 1000:.2f} µs median "
            "(the with statement included)"
        )
        print(f"events written: {rec.recorded_events:,}, dropped: {rec.dropped_events}")


if __name__ == "__main__":
    main()
