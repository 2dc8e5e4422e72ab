"""The columnar archive (docs/archive.md) against the JSON lines it covers.

    python bench/bench_archive.py [--steps N] [--ranks R] [--layout one-file|per-rank]
                                  [--dir DIR] [--src SRC ...] [--rounds R]

One job of N steps (default 1e6) with a data load in every step, in one file (the
``dataload`` shape of ``bench_shapes.py``: 4 events a step). ``--ranks R`` (issue 38's
64 ranks x 100,000 steps: 25.6 M events, 2.4 GB): R ranks each recording every one of the N
steps and its data load, their steps 0.1 s +- up to 0.8 ms and their loads 20-24 ms, by rank
(:func:`write_job`); ``--layout one-file`` (the default) writes them in one file, the ranks'
lines interleaved in time order, ``per-rank`` one file per rank. Each figure is measured in
a fresh process: wall and CPU seconds (its worker processes' included) and peak RSS of

- ``report (JSONL)``: the cold read and report of the JSON lines (``LiveJob``, as
  ``badput report`` reads);
- ``msgspec parse (every field)``: only decoding the JSON lines (the codec's block decode
  into :class:`~badput.events.Event`, validated; one core; every file of the job in turn);
- ``msgspec parse limit (3 fields)``: the least a parse of them can do: msgspec decoding each
  line's ``ts``, ``kind`` and ``step`` (what the engine needs of a step or a load; the other
  fields skipped) into a struct, a block at a time, one core: the issue's "parse limit";
- ``duckdb read_json``: DuckDB reading the JSON lines (all the job's files) and grouping
  them by kind (its threads);
- ``compact``: ``badput compact`` of the job (the read of the JSON lines included);
- ``report (archive)``: the same read and report, from the archive;
- ``report (archive), keeping``: the same with a state cache (docs/archive.md), which
  keeps the state the read built (written by a process of its own once the report is
  made: not in the figure, as ``badput report`` does not wait for it either);
- ``report (archive), kept``: the next report, which loads that state (no row of the
  archive read);

and the sizes of the JSON lines and of the archive, with the host index
(``host_speed.py``) before and after. The reports must all agree.

``--dir``: keep the job there (made once, then reused: a job of 10 M steps takes minutes
to write; a directory holding another ``--ranks`` or ``--layout``'s files is refused).
``--src``: the ``src`` directory of a checkout to run the reports with (one ``--src`` per
checkout: the reports of each, of the JSON lines and of the archive, are measured in turns,
``--rounds`` times, so that a before and an after are measured in the same minutes); the
compaction uses the last one's.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from operator import attrgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from badput.events import Event
from badput.formats.codec import encode_lines
from host_speed import host_index

JOB = "dataload"
_TS = attrgetter("ts")

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

def _cpu():  # this process's CPU seconds and its workers' (joined: a parallel read, compact)
    import resource, time
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime
"""

REPORT = (
    PEAK
    + r"""
import json, sys, time
from badput.runtime.blas import import_numpy_single_threaded
import_numpy_single_threaded()
c0, w0 = _cpu(), time.perf_counter()
from badput.analysis import LiveJob
from badput.report import to_json
from badput.runtime.heap import large_blocks_mapped
kept = {}
if len(sys.argv) > 2:  # a state cache: keep the archive's read there, or load it
    from badput.runtime.state_cache import StateCache
    kept = {"state_cache": StateCache(sys.argv[2])}
live = LiveJob(sys.argv[1], **kept)
live.update()
with large_blocks_mapped():
    text = to_json(live.snapshot(final=True))
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": _cpu() - c0,
                  "rss_mb": _peak_mb(), "store": type(live.store).__name__,
                  "events": live.accountant.n_events, "json": text}))
"""
)

COMPACT = (
    PEAK
    + r"""
import json, sys, time
c0, w0 = _cpu(), time.perf_counter()
from badput.store import compact, open_source
done = compact(*open_source(sys.argv[1]))
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": _cpu() - c0,
                  "rss_mb": _peak_mb(), "rows": done.rows, "archive_bytes": done.archive_bytes,
                  "jsonl_bytes": done.covered_bytes}))
"""
)

#: Decoding the job's files (``sys.argv[1:]``) a block of whole lines at a time, one core:
#: ``{setup}`` makes ``decode`` (a block's bytes -> its items).
_DECODE = r"""
import json, sys, time
c0, w0 = _cpu(), time.perf_counter()
{setup}
n = 0
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        rest = b""
        while block := f.read(8 << 20):
            data = rest + block
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            n += len(decode(data[:cut]) or ())
print(json.dumps({{"wall": time.perf_counter() - w0, "cpu": _cpu() - c0,
                  "rss_mb": _peak_mb(), "events": n}}))
"""

PARSE = PEAK + _DECODE.format(setup="from badput.formats.codec import decode_block as decode")

LEAN_PARSE = PEAK + _DECODE.format(
    setup="""import msgspec
class Lean(msgspec.Struct):  # what the engine needs of a step or a load (others ignored)
    ts: float
    kind: str
    step: int | None = None
decode = msgspec.json.Decoder(Lean).decode_lines"""
)

DUCKDB = (
    PEAK
    + r"""
import json, sys, time
c0, w0 = _cpu(), time.perf_counter()
import duckdb
duckdb.sql("SET enable_progress_bar = false")  # (else drawn on stdout when slow)
files = "[" + ", ".join(f"'{path}'" for path in sys.argv[1:]) + "]"  # every file of the job
rows = duckdb.sql(
    f"SELECT kind, count(*) FROM read_json({files}, format='newline_delimited') GROUP BY kind"
).fetchall()
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": _cpu() - c0,
                  "rss_mb": _peak_mb(), "events": sum(n for _, n in rows)}))
"""
)


#: A rank's step start lags the job's step boundary by up to this, times (1 + rank % 8) / 8
#: (rank 0: never): its steps last 0.1 s +- that, a different jitter for each rank.
SKEW_S = 0.0008
#: A rank's data load lasts 20 ms, and 0.5 ms more for each unit of rank % 8.
LOAD_S, LOAD_STEP_S = 0.021, 0.0005
LAYOUTS = ("one-file", "per-rank")
BLOCK = 200_000  # events encoded at a time


def job_files(root: Path, ranks: int, layout: str) -> list[Path]:
    """The files of the job: one for all ranks (``all/h-0-0.jsonl``), or one per rank as its
    recorder names it (``<attempt>/<host>-<rank>-<pid>.jsonl``: ``0/h-<rank>-0.jsonl``, the
    8-ranks shape of ``bench_shapes.py``)."""
    if layout == "one-file":
        return [root / JOB / "all" / "h-0-0.jsonl"]
    return [root / JOB / "0" / f"h-{r}-0.jsonl" for r in range(ranks)]


def _rank_units(rank: int, steps: int) -> Iterator[list[Event]]:
    """The events of one rank, cut into the job's time units: first ``job_start`` and step 1's
    start and data load, then for each step s > 1 the end of step s - 1, the start of s and
    its data load, last the end of the last step and ``job_end``. Every event of a unit is
    earlier than (or as early as) every event of the next, whatever the rank.

    The job's step boundaries are 0.1 s apart (all ranks meet there, as at a collective);
    rank r starts step s ``skew(r, s)`` after its boundary (pseudo-random, the rank's own
    seed) and ends it when it starts the next: its steps last 0.1 s +- up to 0.8 ms, no rank
    drifting from the others. Rank 0's lines are those of ``write_steps(root, JOB, steps,
    per_attempt=False)`` of ``bench_shapes.py`` (and of this bench's single rank before)."""
    width = 0.0 if rank == 0 else SKEW_S * (1 + rank % 8) / 8
    draw = random.Random(rank).random
    load = LOAD_S + LOAD_STEP_S * (rank % 8)
    tt = 1_732_000_000.0
    unit = [Event(ts=tt, kind="job_start", job=JOB, attempt=0, rank=rank)]
    start = tt + width * draw()
    for s in range(1, steps + 1):
        unit += [
            Event(ts=start, kind="step_start", job=JOB, attempt=0, rank=rank, step=s),
            Event(ts=start + 0.001, kind="data_loading_start", job=JOB, attempt=0, rank=rank),
            Event(ts=start + load, kind="data_loading_end", job=JOB, attempt=0, rank=rank),
        ]
        yield unit
        tt += 0.1
        start = tt + width * draw()
        unit = [Event(ts=start, kind="step_end", job=JOB, attempt=0, rank=rank, step=s)]
    unit.append(Event(ts=tt + 1.0, kind="job_end", job=JOB, attempt=0, rank=rank))
    yield unit


def write_job(root: Path, steps: int, ranks: int = 1, layout: str = "one-file") -> None:
    """``ranks`` ranks of ``steps`` steps each, a data load in every step, in one file (the
    ranks' lines interleaved in time order, as writers appending to one shared file leave
    them) or one file per rank (:func:`job_files`); written a block at a time (10 M steps do
    not fit in memory as events). Files already there are kept (``--dir``); each is
    written under another name and renamed once complete."""
    for path, rank_range in zip(
        job_files(root, ranks, layout),
        [range(ranks)] if layout == "one-file" else [range(r, r + 1) for r in range(ranks)],
        strict=True,
    ):
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        with part.open("wb") as fh:
            block: list[Event] = []
            for units in zip(*(_rank_units(r, steps) for r in rank_range), strict=True):
                if len(units) == 1:
                    block += units[0]
                else:  # stable: a rank's step end before its next start at the same time
                    block += sorted(itertools.chain(*units), key=_TS)
                if len(block) >= BLOCK:
                    fh.write(encode_lines(block))
                    block = []
            fh.write(encode_lines(block))
        part.rename(path)


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


def _kept(cache: Path, seconds: float = 600.0) -> Path:
    """The state file once its writer (a process of its own) has renamed it into place."""
    deadline = time.monotonic() + seconds
    while not (found := sorted(cache.glob("*.state"))):
        if time.monotonic() > deadline:
            sys.exit(f"no state kept in {cache} after {seconds:.0f} s")
        time.sleep(0.1)
    return found[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--dir", help="keep the job here (reused when there)")
    parser.add_argument("--src", action="append", help="a checkout's src (repeatable)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ranks", type=int, default=1, help="ranks, each of --steps steps")
    parser.add_argument(
        "--layout", choices=LAYOUTS, default="one-file", help="one file for all ranks, or one each"
    )
    args = parser.parse_args()
    if args.ranks < 1 or args.steps < 1:
        parser.error("--ranks and --steps: at least 1")
    srcs: list[str | None] = list(args.src or [None])
    print(f"host index {host_index():.2f} s", flush=True)
    with job_root(args.dir) as root:
        job_dir = root / JOB
        logs = job_files(root, args.ranks, args.layout)
        other = sorted(set(job_dir.rglob("*.jsonl")) - set(logs))
        if other:  # (another --ranks or --layout made there: its files would be read too)
            sys.exit(f"{job_dir} holds files of another job: {other[0]}, ...; use another --dir")
        write_job(root, args.steps, args.ranks, args.layout)  # (those not there yet)
        archive = job_dir / "badput-archive.parquet"
        archive.unlink(missing_ok=True)
        size = sum(log.stat().st_size for log in logs) / 1e6
        shape = f"{args.ranks:,} ranks x " if args.ranks > 1 else ""
        n_files = f"{len(logs):,} files" if len(logs) > 1 else "1 file"
        files = f" in {n_files} ({args.layout})" if args.ranks > 1 else ""
        print(f"{shape}{args.steps:,} steps, {size:,.0f} MB of JSON lines{files}")
        print(f"{'':<34} {'wall s':>8} {'CPU s':>8} {'peak MB':>9}")
        jsonls: list[dict[str, object]] = []
        for _ in range(args.rounds):  # (each tree in turn: a before and an after alike)
            for src in srcs:
                jsonls.append(child(REPORT, str(job_dir), src=src))
                row(f"report (JSONL) {src or ''}"[:34], jsonls[-1])
        jsonl = jsonls[-1]
        parsed = child(PARSE, *map(str, logs))
        row("msgspec parse (every field)", parsed)
        limit = child(LEAN_PARSE, *map(str, logs))
        row("msgspec parse limit (3 fields)", limit)
        scanned = child(DUCKDB, *map(str, logs))
        row("duckdb read_json", scanned)
        done = child(COMPACT, str(job_dir), src=srcs[-1])
        row("compact", done)
        same = all(r["json"] == jsonl["json"] for r in jsonls)
        for _ in range(args.rounds):
            for src in srcs:
                archived = child(REPORT, str(job_dir), src=src)
                row(f"report (archive) {src or ''}"[:34], archived)
                assert archived["store"] == "ArchivedStore", archived["store"]
                same = same and archived["json"] == jsonl["json"]
        with tempfile.TemporaryDirectory() as cache:  # (the tree measured last: srcs[-1])
            keeping = child(REPORT, str(job_dir), cache, src=srcs[-1])
            row("report (archive), keeping", keeping)
            state = _kept(Path(cache))
            kept = child(REPORT, str(job_dir), cache, src=srcs[-1])
            row("report (archive), kept", kept)
            print(f"state kept: {state.stat().st_size / 1e6:,.0f} MB", flush=True)
            same = same and keeping["json"] == jsonl["json"] and kept["json"] == jsonl["json"]
        size = int(str(done["archive_bytes"])) / int(str(done["jsonl_bytes"]))
        print(
            f"archive {int(str(done['archive_bytes'])) / 1e6:,.1f} MB = {size:.1%} of the "
            f"JSON lines; reports identical (every tree's, both ways): {same}; "
            f"events {archived['events']:,}"
        )
        wall = {
            "JSONL": float(jsonl["wall"]),
            "archive": float(archived["wall"]),
            "kept": float(kept["wall"]),
        }
        print(
            "wall against the parse limit and DuckDB's scan: "
            + "; ".join(
                f"{name} {w / float(limit['wall']):.2f}x and {w / float(scanned['wall']):.2f}x"
                for name, w in wall.items()
            )
        )
        print(f"host index {host_index():.2f} s", flush=True)
        if not same:
            sys.exit("the report of the archive differs from the report of the JSON lines")
        counts = {
            name: r["events"]
            for name, r in (("parse", parsed), ("parse limit", limit), ("duckdb", scanned))
        }
        if set(counts.values()) != {jsonl["events"]}:
            sys.exit(f"events read: {counts}, the report's {jsonl['events']}")


if __name__ == "__main__":
    main()
