"""A store that hangs: memory stays bounded, every event is counted, the process exits.

    python bench/fault_hung_store.py [--events 2000000]

The store's stream is a FIFO that nobody reads (opening it for writing blocks, as a
frozen disk or a dead network mount would). The script records ``--events``
``step_start`` events as fast as it can, then closes the recorder, and prints: the
growth of the process's resident memory (peak), the events written / dropped, the
longest record call, and how long ``close()`` took. Figures in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from badput.recorder import MAX_BUFFERED_BYTES, Recorder
from badput.store import EventWriter, WriterKey
from badput.store._jsonl import JsonlWriter


class FifoStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.fifo = root / "stream.jsonl"
        os.mkfifo(self.fifo)

    @property
    def uri(self) -> str:
        return str(self.root)

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        return JsonlWriter(self.fifo)  # blocks: no reader

    def jobs(self) -> list[str]:
        return []

    def read(self, job: str, cursor: Any = None, *, max_bytes: int | None = None) -> Any:
        raise NotImplementedError


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="badput-hung-") as tmp:
        store = FifoStore(Path(tmp))
        rec = Recorder("hung", store, heartbeat_interval=0, flush_interval=0.05)  # type: ignore[arg-type]
        rec.record_step_start(0)
        time.sleep(0.2)  # the writer thread is now stuck opening the FIFO
        base = rss_mb()
        worst = 0.0
        record = rec.record_step_start
        t_start = time.perf_counter()
        for i in range(1, args.events):
            t0 = time.perf_counter()
            record(i)
            dt = time.perf_counter() - t0
            worst = max(worst, dt)
        elapsed = time.perf_counter() - t_start
        t0 = time.monotonic()
        rec.close(timeout=1.0)
        closed = time.monotonic() - t0
        print(f"events recorded:        {args.events:,} in {elapsed:.1f} s")
        print(f"buffer bound:           {MAX_BUFFERED_BYTES >> 20} MiB")
        print(f"peak RSS growth:        {rss_mb() - base:.1f} MiB")
        print(f"written / dropped:      {rec.recorded_events:,} / {rec.dropped_events:,}")
        print(f"longest record call:    {worst * 1e6:.0f} µs")
        print(f"close(timeout=1.0):     {closed:.2f} s")
        fd = os.open(store.fifo, os.O_RDONLY | os.O_NONBLOCK)  # let the stuck open return
        time.sleep(0.1)
        os.close(fd)


if __name__ == "__main__":
    main()
