"""The columnar archive (docs/archive.md) against the JSON lines it covers.

    python bench/bench_archive.py [--steps N] [--dir DIR] [--src SRC ...] [--rounds R]

One job of N steps (default 1e6) with a data load in every step, in one file (the
``dataload`` shape of ``bench_shapes.py``: 4 events a step). Each figure is measured in a
fresh process: wall and CPU seconds and peak RSS of

- ``report (JSONL)``: the cold read and report of the JSON lines (``LiveJob``, as
  ``badput report`` reads);
- ``msgspec parse``: only decoding the JSON lines (the codec's block decode; one core);
- ``duckdb read_json``: DuckDB reading the JSON lines and grouping them by kind (its threads);
- ``compact``: ``badput compact`` of the job (the read of the JSON lines included);
- ``report (archive)``: the same read and report, from the archive;

and the sizes of the JSON lines and of the archive, with the host index
(``host_speed.py``) before and after. The reports must all agree.

``--dir``: keep the job there (made once, then reused: a job of 10 M steps takes minutes
to write). ``--src``: the ``src`` directory of a checkout to run the reports with (one
``--src`` per checkout: the reports of each are measured in turns, ``--rounds`` times, so
that a before and an after are measured in the same minutes); the others use this one's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from badput.events import Event
from badput.formats.codec import encode_lines
from host_speed import host_index

JOB = "dataload"

PEAK = r"""
def _peak_mb():
    import resource
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        with open("/proc/self/status") as status:
            kb = next(int(x.split()[1]) for x in status if x.startswith("VmHWM:"))
    except (OSError, StopIteration):
        pass
    return max(kb, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
"""

REPORT = (
    PEAK
    + r"""
import json, sys, time
from badput.runtime.blas import import_numpy_single_threaded
import_numpy_single_threaded()
c0, w0 = time.process_time(), time.perf_counter()
from badput.analysis import LiveJob
from badput.report import to_json
from badput.runtime.heap import large_blocks_mapped
live = LiveJob(sys.argv[1])
live.update()
with large_blocks_mapped():
    text = to_json(live.snapshot(final=True))
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "rss_mb": _peak_mb(), "store": type(live.store).__name__,
                  "events": live.accountant.n_events, "json": text}))
"""
)

COMPACT = (
    PEAK
    + r"""
import json, sys, time
c0, w0 = time.process_time(), time.perf_counter()
from badput.store import compact, open_source
done = compact(*open_source(sys.argv[1]))
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "rss_mb": _peak_mb(), "rows": done.rows, "archive_bytes": done.archive_bytes,
                  "jsonl_bytes": done.covered_bytes}))
"""
)

PARSE = (
    PEAK
    + r"""
import json, sys, time
c0, w0 = time.process_time(), time.perf_counter()
from badput.formats.codec import decode_block
n = 0
with open(sys.argv[1], "rb") as f:
    rest = b""
    while block := f.read(8 << 20):
        data = rest + block
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        n += len(decode_block(data[:cut]) or ())
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "rss_mb": _peak_mb(), "events": n}))
"""
)

DUCKDB = (
    PEAK
    + r"""
import json, sys, time
c0, w0 = time.process_time(), time.perf_counter()
import duckdb
duckdb.sql("SET enable_progress_bar = false")  # (else drawn on stdout when slow)
rows = duckdb.sql(
    f"SELECT kind, count(*) FROM read_json('{sys.argv[1]}', format='newline_delimited') "
    "GROUP BY kind"
).fetchall()
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "rss_mb": _peak_mb(), "events": sum(n for _, n in rows)}))
"""
)


def write_job(root: Path, steps: int) -> None:
    """The job ``write_steps(root, JOB, steps, per_attempt=False)`` writes, line for line,
    written a block of steps at a time (that one holds every event: 10 M steps do not fit)."""
    path = root / JOB / "all" / "h-0-0.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    tt = 1_732_000_000.0
    with path.open("wb") as fh:
        block = [Event(ts=tt, kind="job_start", job=JOB, attempt=0, rank=0)]
        for s in range(1, steps + 1):
            block += [
                Event(ts=tt, kind="step_start", job=JOB, attempt=0, rank=0, step=s),
                Event(ts=tt + 0.001, kind="data_loading_start", job=JOB, attempt=0, rank=0),
                Event(ts=tt + 0.021, kind="data_loading_end", job=JOB, attempt=0, rank=0),
                Event(ts=tt + 0.1, kind="step_end", job=JOB, attempt=0, rank=0, step=s),
            ]
            tt += 0.1 + 0.0001 * 0
            if len(block) >= 200_000:
                fh.write(encode_lines(block))
                block = []
        block.append(Event(ts=tt + 1.0, kind="job_end", job=JOB, attempt=0, rank=0))
        fh.write(encode_lines(block))


def child(code: str, *args: str, src: str | None = None) -> dict[str, object]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, check=True, text=True, env=env
    )
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def row(name: str, r: dict[str, object]) -> None:
    print(f"{name:<34} {r['wall']:>8.2f} {r['cpu']:>8.2f} {r['rss_mb']:>9.0f}", flush=True)


@contextlib.contextmanager
def job_root(keep: str | None) -> Iterator[Path]:
    if keep is not None:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield Path(keep)
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--dir", help="keep the job here (reused when there)")
    parser.add_argument("--src", action="append", help="a checkout's src (repeatable)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    srcs: list[str | None] = list(args.src or [None])
    print(f"host index {host_index():.2f} s", flush=True)
    with job_root(args.dir) as root:
        job_dir = root / JOB
        log = job_dir / "all" / "h-0-0.jsonl"
        if not log.exists():
            write_job(root, args.steps)
        archive = job_dir / "badput-archive.parquet"
        archive.unlink(missing_ok=True)
        print(f"{args.steps:,} steps, {log.stat().st_size / 1e6:,.0f} MB of JSON lines")
        print(f"{'':<34} {'wall s':>8} {'CPU s':>8} {'peak MB':>9}")
        jsonl = child(REPORT, str(job_dir), src=srcs[-1])
        row("report (JSONL)", jsonl)
        row("msgspec parse", child(PARSE, str(log)))
        row("duckdb read_json", child(DUCKDB, str(log)))
        done = child(COMPACT, str(job_dir), src=srcs[-1])
        row("compact", done)
        same = True
        for _ in range(args.rounds):
            for src in srcs:
                archived = child(REPORT, str(job_dir), src=src)
                row(f"report (archive) {src or ''}"[:34], archived)
                assert archived["store"] == "ArchivedStore", archived["store"]
                same = same and archived["json"] == jsonl["json"]
        size = int(str(done["archive_bytes"])) / int(str(done["jsonl_bytes"]))
        print(
            f"archive {int(str(done['archive_bytes'])) / 1e6:,.1f} MB = {size:.1%} of the "
            f"JSON lines; reports identical: {same}; events {archived['events']:,}"
        )
        print(f"host index {host_index():.2f} s", flush=True)
        if not same:
            sys.exit("the report of the archive differs from the report of the JSON lines")


if __name__ == "__main__":
    main()
