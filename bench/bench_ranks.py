"""What the per-rank analysis costs on a 1,024-rank job, next to the report without it.

    python bench/bench_ranks.py [--ranks 1024] [--steps 200] [--repeats 3]

The job: ``--ranks`` files (one per rank, 8 ranks a host), each with ``--steps``
steps (``step_start``/``step_end``), a blocking data load per step, a
``section_summary`` of a timed ``forward`` section every 10 steps, a heartbeat
every 10 s, ``job_start``/``job_end``; one rank is a straggler, and at 90 % of
the steps the job hangs for 5 minutes: one rank stops before starting that step,
the others wait after starting it (so the report has a straggler and a stall).

Measured in this process, best of ``--repeats``, each from a cold read:

- *partition only*: read + ingest with the rank tracker switched off, then
  ``report(ranks=False)``: what the report cost before the per-rank view (it
  follows one rank but reads every rank's file);
- *with the per-rank analysis*: read + ingest feeding the rank tracker too, then
  ``report()`` (per-rank view, stragglers, stalls and each stall's partition);
- the query alone, both ways, on the ingested state.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from badput.analysis import LiveJob
from badput.events import Event
from badput.formats.codec import encode_lines

JOB = "ranks"
STEP_S = 0.25


def write_job(root: Path, ranks: int, steps: int) -> int:
    """One file per rank under ``root/ranks/0``; returns the number of events."""
    out = root / JOB / "0"
    out.mkdir(parents=True)
    t0 = 1_732_000_000.0
    n = 0
    for r in range(ranks):
        host = f"node{r // 8:04d}"
        forward = 0.08 if r == 17 else 0.02
        pause = int(steps * 0.9)
        stuck = r == 901 % ranks

        def ev(kind: str, ts: float, r: int = r, host: str = host, **f: object) -> Event:
            return Event(ts=ts, kind=kind, job=JOB, attempt=0, host=host, rank=r, pid=r, **f)  # type: ignore[arg-type]

        buf = [ev("job_start", t0)]
        t = t0 + 1.0
        for s in range(steps):
            if s == pause and stuck:
                t += 300.0  # it never started this step until the hang resolved
            buf.append(ev("step_start", t, step=s))
            if s == pause and not stuck:
                t += 300.0  # the others started it and waited
            buf.append(ev("data_loading_start", t))
            buf.append(ev("data_loading_end", t + 0.01))
            buf.append(ev("step_end", t + STEP_S, step=s))
            t += STEP_S
            if s % 10 == 9:
                q = {"min": forward, "p50": forward, "p90": forward, "max": forward}
                buf.append(
                    ev(
                        "section_summary",
                        t,
                        name="forward",
                        count=10,
                        seconds=10 * forward,
                        quantiles=q,
                        last=t - 0.1,
                    )
                )
            if s % 40 == 39:
                buf.append(ev("heartbeat", t))
        buf.append(ev("job_end", t0 + 1.0 + steps * STEP_S + 420.0, status="completed"))
        (out / f"{host}-{r}-{r}.jsonl").write_bytes(encode_lines(buf))
        n += len(buf)
    return n


def cold(root: Path, *, ranks: bool) -> tuple[float, float, float, object]:
    """(read + ingest seconds, first query seconds, second query seconds, report)."""
    t0 = time.perf_counter()
    live = LiveJob(root, JOB, parallel=False)
    if not ranks:
        live.accountant._ranks.ingest_batch = lambda *a, **k: None  # type: ignore[method-assign]
    live.update()
    t1 = time.perf_counter()
    report = live.accountant.report(ranks=ranks)
    t2 = time.perf_counter()
    live.accountant.report(ranks=ranks)
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        n = write_job(root, args.ranks, args.steps)
        size = sum(p.stat().st_size for p in (root / JOB).rglob("*.jsonl"))
        print(f"job: {args.ranks} ranks x {args.steps} steps, {n:,} events, {size / 1e6:.0f} MB")
        rows = {}
        for label, with_ranks in (("partition only", False), ("with per-rank", True)):
            runs = [cold(root, ranks=with_ranks) for _ in range(args.repeats)]
            best = min(runs, key=lambda r: r[0] + r[1])
            rows[label] = best
            ingest, first, again, _ = best
            print(
                f"{label:>15}: read+ingest {ingest:.2f} s, first query {first:.3f} s, "
                f"total {ingest + first:.2f} s; a later query {again * 1000:.0f} ms"
            )
        base = sum(rows["partition only"][:2])
        full = sum(rows["with per-rank"][:2])
        report = rows["with per-rank"][3]
        print(f"ratio (with per-rank / partition only): {full / base:.2f}x")
        print(
            f"found: {len(report.ranks)} ranks, stragglers "  # type: ignore[attr-defined]
            f"{[(s.rank, s.section) for s in report.stragglers]}, "  # type: ignore[attr-defined]
            f"stalls {[(s.first_stopped, round(s.seconds)) for s in report.stalls]}"  # type: ignore[attr-defined]
        )


if __name__ == "__main__":
    main()
