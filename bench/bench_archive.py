"""The columnar archive (docs/archive.md) against the JSON lines it covers.

    python bench/bench_archive.py [--steps N]

One job of N steps (default 1e6) with a data load in every step, in one file (the
``dataload`` shape of ``bench_shapes.py``: 4 events a step). Each figure is measured in a
fresh process: wall and CPU seconds and peak RSS of

- ``report (JSONL)``: the cold read and report of the JSON lines (``LiveJob``, as
  ``badput report`` reads);
- ``compact``: ``badput compact`` of the job (the read of the JSON lines included);
- ``report (archive)``: the same read and report, from the archive;
- ``msgspec parse``: only decoding the JSON lines (the codec's block decode; one core);
- ``duckdb read_json``: DuckDB reading the JSON lines and grouping them by kind (its threads).

and the sizes of the JSON lines and of the archive. The reports of both reads must agree.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_shapes import write_steps
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
rows = duckdb.sql(
    f"SELECT kind, count(*) FROM read_json('{sys.argv[1]}', format='newline_delimited') "
    "GROUP BY kind"
).fetchall()
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "rss_mb": _peak_mb(), "events": sum(n for _, n in rows)}))
"""
)


def child(code: str, *args: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, check=True, text=True
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def row(name: str, r: dict[str, object]) -> None:
    print(f"{name:<20} {r['wall']:>8.2f} {r['cpu']:>8.2f} {r['rss_mb']:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_steps(root, JOB, args.steps, per_attempt=False)
        job_dir = root / JOB
        log = job_dir / "all" / "h-0-0.jsonl"
        print(f"{args.steps:,} steps, {log.stat().st_size / 1e6:,.0f} MB of JSON lines")
        print(f"host index before: {host_index(3):.2f} s (bench/host_speed.py; lower is faster)")
        print(f"{'':<20} {'wall s':>8} {'CPU s':>8} {'peak MB':>9}")
        jsonl = child(REPORT, str(job_dir))
        row("report (JSONL)", jsonl)
        row("msgspec parse", child(PARSE, str(log)))
        row("duckdb read_json", child(DUCKDB, str(log)))
        done = child(COMPACT, str(job_dir))
        row("compact", done)
        archived = child(REPORT, str(job_dir))
        row("report (archive)", archived)
        assert archived["store"] == "ArchivedStore", archived["store"]
        same = archived["json"] == jsonl["json"]
        size = int(str(done["archive_bytes"])) / int(str(done["jsonl_bytes"]))
        print(
            f"archive {int(str(done['archive_bytes'])) / 1e6:,.1f} MB = {size:.1%} of the "
            f"JSON lines; reports identical: {same}; events {archived['events']:,}"
        )
        print(f"host index after: {host_index(3):.2f} s")
        if not same:
            sys.exit("the report of the archive differs from the report of the JSON lines")


if __name__ == "__main__":
    main()
