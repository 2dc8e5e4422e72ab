"""How fast this machine is right now: a fixed workload like a cold report's, timed.

    python bench/host_speed.py [--rounds 5]

The development machine is shared: the same code at the same commit read and reported a
million steps with a data load each in 2.70 s one day and 4.2-4.5 s two days later. A
figure in docs/performance.md is only comparable with another measured at a like host
speed, so the benchmarks print this index beside their figures (``bench_shapes.py`` does
before and after its runs).

The workload owes nothing to badput's code, so that it stays the same while the code
changes: decode 600,000 JSON lines into structs with msgspec in 1 MiB blocks and take
their times as a column (the read), sort and difference 4 M floats and partition them in
64 blocks with numpy (the report), and a Python loop of 8 M iterations (the glue). Prints
the median of ``--rounds`` runs, in seconds: the *host index* (lower is faster). On
2026-11-26 in the afternoon it was 0.50-0.55 s, while the code of 2026-11-24 (`11eab62`)
took 4.2-4.5 s to read and report the one-attempt data-load log it read in 2.70 s then.
"""

from __future__ import annotations

import argparse
import statistics
import time

import msgspec
import numpy as np


class _Line(msgspec.Struct, gc=False):
    ts: float
    kind: str
    job: str
    attempt: int
    rank: int
    step: int | None = None


def _lines(n: int) -> bytes:
    kinds = ("step_start", "data_loading_start", "data_loading_end", "step_end")
    return b"".join(
        b'{"ts":%r,"kind":"%s","job":"j","attempt":0,"rank":0,"step":%d}\n'
        % (1.7e9 + i * 0.0251, kinds[i % 4].encode(), i // 4)
        for i in range(n)
    )


def workload(data: bytes, values: np.ndarray) -> float:
    """One run of the fixed workload; its wall seconds."""
    t0 = time.perf_counter()
    decoder = msgspec.json.Decoder(_Line)
    start = 0
    while start < len(data):  # 1 MiB blocks, cut at line ends
        end = data.rfind(b"\n", start, start + (1 << 20)) + 1 or len(data)
        events = decoder.decode_lines(data[start:end])
        np.fromiter((e.ts for e in events), np.float64, len(events))
        start = end
    ordered = np.sort(values, kind="stable")
    float(np.diff(ordered).max())
    for block in np.array_split(values, 64):
        np.partition(block, block.shape[0] // 2)
    total = 0
    for i in range(8_000_000):
        total += i & 7
    return time.perf_counter() - t0


def host_index(rounds: int = 5) -> float:
    """The median of ``rounds`` runs of :func:`workload`, in seconds."""
    data = _lines(600_000)
    rng = np.random.default_rng(7)
    values = np.cumsum(rng.random(4_000_000))
    rng.shuffle(values[: len(values) // 8])  # mostly in order, as a log's times are
    return statistics.median(workload(data, values) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"host index: {host_index(args.rounds):.2f} s (median of {args.rounds})")


if __name__ == "__main__":
    main()
