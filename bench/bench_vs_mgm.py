"""badput against ml-goodput-measurement 0.2.3 on the same job, measured in one run.

    .venv/bin/python bench/bench_vs_mgm.py [--steps N ...] [--cold-repeats K] [--windows W]
                                           [--window-seconds S] [--no-compat] [--venv DIR]

One command, from the project root, in the project's venv (``make test`` makes it). The
reference library runs in its own venv (``--venv``, default ``.reference-venv``, the one
``tools/reference_replay.py`` makes; created the same way when missing, from PyPI).

The job, for each ``--steps`` (default 10,000 and 100,000): the data-load-per-step mix of
issue 11. Every step is ``step_start``, ``data_loading_start`` (20 µs later: a second clock
read), ``data_loading_end`` (18-22 ms later), ``step_end`` (78-82 ms later), the next step
30 µs after that; an eval (``custom``) of 0.5 s every 100 steps, a checkpoint save of 2 s
every 1,000 steps, 3 crashes (each 437 steps past a checkpoint), 60 s down, then a restore
of 5 s. The times are the same floats on both sides, placed so that the job ended a minute
before the run (the library reads its log up to its wall clock).

- ml-goodput-measurement: the library's own ``GoodputRecorder`` makes the job's calls
  (``record_job_start_time``, ``record_step_start_time``, ``record_data_loading_*``,
  ``record_custom_badput_event_*``, ``record_job_end_time``; Orbax's save/restore entries as
  Orbax's logger writes them) into the replay tool's Cloud Logging stand-in, in the reference
  venv (this script re-run with ``--inner``). The stand-in here lists entries by bisection
  over their timestamps, and the time spent inside it is printed apart ("stand-in"): it is
  what Cloud Logging's server would do, without the network.
- badput: the equivalent events (step ends included), one JSONL file per attempt, the
  recorder's layout.

Measured, interleaved in the same minutes (the machine state is the same for both):

(a) cold whole-job goodput of the finished job: the library's
    ``GoodputCalculator.get_job_goodput(include_badput_breakdown=True)`` on a fresh
    calculator (fresh cache directory; its log already "in Cloud Logging") against a fresh
    badput process doing ``LiveJob(root, job).update()`` + ``report()`` (the time inside
    the process, and the process's whole wall time with interpreter start and imports).
    Unless ``--no-compat``, also the library's own entries imported into a badput store (one
    file, as ``badput import cloud-logging`` writes it), read by badput's report and by its
    drop-in ``GoodputCalculator`` (the compat layer: the library's definitions).
    Median of ``--cold-repeats`` (default 3).
(b) a rolling ``--window-seconds`` (default 60) window of the running job: the same job
    without its last seconds; then ``--windows`` times (default 20) one more second of the
    job arrives (the library: its entries become visible in the log; badput: its lines are
    appended to the running attempt's file) and each tool answers the window ending there:
    the library's ``get_job_goodput_interval(t - 60 s, t)`` (it reads just the new entries:
    its sequential-window cache), badput's ``LiveJob.update()`` + ``report(window=...)``.
    Median per window.

Printed: each time (wall and CPU), the ratio library / badput (badput's own events), and
the goodput each gives. On badput's own events badput's goodput is lower by design: a load
recorded inside a step is blocking (``data_loading`` badput, ``with rec.data_loading()``),
where the library takes every load after an attempt's first step as overlapped
(DATA_LOADING_ASYNC, not badput), and slow steps count as productive in the library's goodput
(badput's ``observed`` goodput). On the imported entries badput reads the loads the library's
way, so its observed goodput and the drop-in's goodput are the agreement check.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import importlib.metadata
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import reference_replay as replay  # stdlib only outside its inner run

JOB = "vsmgm"
RESTARTS = 3
UTC = dt.timezone.utc

# ------------------------------------------------------------------------ the job


def timeline(steps: int, epoch: float) -> Iterator[tuple[float, int, str, dict[str, Any]]]:
    """The job's events in time order: (ts, attempt, badput kind, fields).

    Deterministic (the same floats in both processes). ``epoch`` is the job's start.
    """
    rng = random.Random(11)
    crash_at = [steps * (i + 1) // (RESTARTS + 1) + 437 for i in range(RESTARTS)]
    t = epoch
    step = 0
    for attempt in range(RESTARTS + 1):
        yield t, attempt, "job_start", {}
        if attempt:
            restore = (step // 1000) * 1000
            t += 1e-5
            yield t, attempt, "checkpoint_restore_start", {"step": restore}
            t += 5.0
            yield t, attempt, "checkpoint_restore_end", {"step": restore}
            step = restore + 1
            t += 3e-5
        stop = crash_at[attempt] if attempt < RESTARTS else steps
        while step <= stop:
            yield t, attempt, "step_start", {"step": step}
            t += 2e-5
            yield t, attempt, "data_loading_start", {}
            t += 0.018 + 0.004 * rng.random()
            yield t, attempt, "data_loading_end", {}
            t += 0.078 + 0.004 * rng.random()
            yield t, attempt, "step_end", {"step": step}
            if step % 100 == 0 and step:
                t += 1e-5
                yield t, attempt, "custom_start", {"name": "eval"}
                t += 0.5
                yield t, attempt, "custom_end", {"name": "eval"}
            if step % 1000 == 0 and step:
                t += 1e-5
                yield t, attempt, "checkpoint_save_start", {"step": step}
                t += 2.0
                yield t, attempt, "checkpoint_save_end", {"step": step}
            t += 3e-5
            step += 1
        if attempt == RESTARTS:
            yield t, attempt, "job_end", {"status": "completed"}
        t += 60.0  # down before the next attempt


def job_times(steps: int) -> tuple[float, float]:
    """(duration of the job, start of its last attempt), relative to its start."""
    last_start = end = 0.0
    for ts, _, kind, _ in timeline(steps, 0.0):
        end = ts
        if kind == "job_start":
            last_start = ts
    return end, last_start


# ------------------------------------------------------------------- inner: the library


class _SortedLog:
    """The replay tool's Cloud Logging stand-in, listed by bisection.

    Entries are stamped with the time the driver sets in ``now`` (the call's time, as the
    replay's frozen clock does) and must arrive in time order; ``visible`` hides the
    entries not yet written (a running job). ``list_entries`` evaluates the library's
    filter (its ``timestamp`` and ``insertId`` bounds) and adds its own time to
    ``seconds``.
    """

    def __init__(self) -> None:
        self.entries: list[Any] = []
        self.keys: list[tuple[dt.datetime, str]] = []
        self.now = dt.datetime.fromtimestamp(0, UTC)
        self.visible: int | None = None
        self.seconds = 0.0

    def append(self, payload: dict[str, Any]) -> None:
        key = (self.now, f"{len(self.entries):09d}")
        if self.keys and key < self.keys[-1]:
            raise ValueError("entries must be appended in time order")
        self.entries.append(replay._Entry(dict(payload), key[0], key[1]))
        self.keys.append(key)

    def list_entries(self, filter_: str, order_by: Any = None, page_size: int = 0) -> list[Any]:
        t0 = time.perf_counter()
        lo, hi = 0, len(self.entries) if self.visible is None else self.visible
        after_id = replay._AFTER_ID.search(filter_)
        rest = replay._AFTER_ID.sub("", filter_) if after_id else filter_
        for op, value in replay._BOUND.findall(rest):
            bound = dt.datetime.fromisoformat(value)
            if op == "<=":
                hi = min(hi, bisect.bisect_right(self.keys, (bound, "~")))
            elif op == "<":
                hi = min(hi, bisect.bisect_left(self.keys, (bound, "")))
            elif op == ">":
                lo = max(lo, bisect.bisect_right(self.keys, (bound, "~")))
            elif op == ">=":
                lo = max(lo, bisect.bisect_left(self.keys, (bound, "")))
            else:
                raise ValueError(f"filter clause not understood: timestamp {op}")
        if after_id:
            bound = dt.datetime.fromisoformat(after_id.group(1))
            lo = max(lo, bisect.bisect_right(self.keys, (bound, after_id.group(3))))
        out = self.entries[lo:hi]
        self.seconds += time.perf_counter() - t0
        return out


def _record(rec: Any, log: _SortedLog, steps: int, epoch: float) -> None:
    """The job's calls, through the library's recorder (and Orbax's log entries)."""
    open_at: dict[str, float] = {}
    for ts, _, kind, f in timeline(steps, epoch):
        when = dt.datetime.fromtimestamp(ts, UTC)
        log.now = when
        if kind == "job_start":
            rec.record_job_start_time(start_time=when)
        elif kind == "step_start":
            rec.record_step_start_time(f["step"], start_time=when)
        elif kind == "data_loading_start":
            rec.record_data_loading_start_time(start_time=when)
        elif kind == "data_loading_end":
            rec.record_data_loading_end_time(end_time=when)
        elif kind == "custom_start":
            rec.record_custom_badput_event_start_time(when, custom_badput_event_type=f["name"])
        elif kind == "custom_end":
            rec.record_custom_badput_event_end_time(when, custom_badput_event_type=f["name"])
        elif kind == "job_end":
            rec.record_job_end_time(end_time=when)
        elif kind.endswith("_start"):  # a checkpoint: Orbax logs it when it ends
            open_at[kind.removesuffix("_start")] = ts
        elif kind.startswith("checkpoint_"):
            what = kind.removesuffix("_end")
            start = open_at.pop(what)
            s = replay.Scenario("bench", "")
            if what == "checkpoint_save":
                s.orbax_save(ts, f["step"], ts - start, posix_start=start)
            else:
                s.orbax_restore(ts, f["step"], ts - start, posix_start=start)
            log.append({"job_name": JOB, **s.calls[-1]["orbax"]})
        # step_end: the library has no such call


def _check_standin(log: _SortedLog, cloud_logger: Any) -> None:
    """The bisecting stand-in lists what the replay tool's stand-in lists, for the library's
    own filters (bounds on entries and between them, with and without an insertId cursor)."""
    part = log.entries[:3000]
    reference = replay._InMemoryLog()
    reference.entries = [replay._Entry(e.payload, e.timestamp, e.insert_id) for e in part]
    mine = _SortedLog()
    mine.entries, mine.keys = list(part), log.keys[: len(part)]
    stamps = [e.timestamp for e in part]
    some = [stamps[0], stamps[len(part) // 3], stamps[len(part) // 2], stamps[-1]]
    between = [a + (b - a) / 2 for a, b in itertools.pairwise(some)]
    cursors = [(e.timestamp, e.insert_id) for e in part[:: len(part) // 5]]
    filters = [cloud_logger._get_filter_msg(None, end, None) for end in some + between]
    filters += [cloud_logger._get_filter_msg(a, b, None) for a in some + between for b in some]
    filters += [cloud_logger._get_filter_msg(None, some[-1], c) for c in cursors]
    for filter_ in filters:
        got = [e.insert_id for e in mine.list_entries(filter_)]
        want = [e.insert_id for e in reference.list_entries(filter_)]
        if got != want:
            raise SystemExit(f"the bisecting stand-in disagrees with the replay's on {filter_}")


def _export(entry: Any) -> dict[str, Any]:
    """One entry the way ``gcloud logging read --format=json`` prints it."""
    return {
        "insertId": entry.insert_id,
        "jsonPayload": entry.payload,
        "logName": f"projects/replay-project/logs/{replay.LOGGER_NAME}",
        "severity": "INFO",
        "timestamp": entry.timestamp.isoformat().replace("+00:00", "Z"),
    }


def _inner(steps: int, epoch: float) -> int:
    """Serve the outer run's commands on stdin, one JSON answer a line on stdout."""
    from ml_goodput_measurement.src import goodput  # noqa: PLC0415 (the reference venv's)

    version = importlib.metadata.version(replay.REFERENCE_PACKAGE)
    log = _SortedLog()
    t0 = time.perf_counter()
    rec = goodput.GoodputRecorder(
        JOB, replay.LOGGER_NAME, True, cloud_logger=replay._cloud_logger(JOB, log)
    )
    _record(rec, log, steps, epoch)
    _check_standin(log, replay._cloud_logger(JOB, log))
    answer: dict[str, Any] = {
        "version": version,
        "entries": len(log.entries),
        "build_s": time.perf_counter() - t0,
    }
    roll: Any = None
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(answer), flush=True)  # the greeting, then one answer per command
        for line in sys.stdin:
            cmd = line.split()
            log.seconds = 0.0
            if cmd[0] == "cold":
                log.visible = None
                calc = goodput.GoodputCalculator(
                    JOB,
                    replay.LOGGER_NAME,
                    cloud_logger=replay._cloud_logger(JOB, log),
                    cache_dir=tempfile.mkdtemp(dir=tmp),
                )
                c0, w0 = time.process_time(), time.perf_counter()
                gp, breakdown, last = calc.get_job_goodput(include_badput_breakdown=True)
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                answer = {
                    "wall": wall,
                    "cpu": cpu,
                    "standin": log.seconds,
                    "goodput": gp,
                    "last_step": int(last),
                    "badput": replay._jsonable(breakdown),
                }
                del calc
            elif cmd[0] == "roll":  # roll T_END WINDOW
                t_end, window = float(cmd[1]), float(cmd[2])
                log.visible = bisect.bisect_right(
                    log.keys, (dt.datetime.fromtimestamp(t_end, UTC), "~")
                )
                if roll is None:
                    roll = goodput.GoodputCalculator(
                        JOB,
                        replay.LOGGER_NAME,
                        cloud_logger=replay._cloud_logger(JOB, log),
                        cache_dir=tempfile.mkdtemp(dir=tmp),
                    )
                hi = dt.datetime.fromtimestamp(t_end, UTC)
                c0, w0 = time.process_time(), time.perf_counter()
                gp, *_ = roll.get_job_goodput_interval(hi - dt.timedelta(seconds=window), hi)
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                answer = {"wall": wall, "cpu": cpu, "standin": log.seconds, "goodput": gp}
            elif cmd[0] == "dump":  # dump PATH: the log as a Cloud Logging export
                with open(cmd[1], "w") as fh:
                    json.dump([_export(e) for e in log.entries], fh)
                answer = {"dumped": len(log.entries)}
            else:
                break
            print(json.dumps(answer), flush=True)
    return 0


# ------------------------------------------------------------------- outer: badput

COLD_CHILD = r"""
import json, resource, sys, time
c0, w0 = time.process_time(), time.perf_counter()
from badput.analysis import LiveJob
live = LiveJob(sys.argv[1], sys.argv[2])
live.update()
r = live.report()
wall = time.perf_counter() - w0
kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # a parallel cold read's workers
print(json.dumps({
    "wall": wall, "cpu": time.process_time() - c0 + kids.ru_utime + kids.ru_stime,
    "goodput": 100 * r.goodput, "observed": 100 * r.observed_goodput,
    "data_loading": 100 * r.buckets["data_loading"] / r.total_seconds,
    "events": live.accountant.n_events, "last_step": r.steps.last,
}))
"""

COMPAT_CHILD = r"""
import json, sys, time
c0, w0 = time.process_time(), time.perf_counter()
from badput.compat.ml_goodput_measurement import goodput
calc = goodput.GoodputCalculator(sys.argv[2], "log", store=sys.argv[1])
gp, breakdown, last = calc.get_job_goodput(include_badput_breakdown=True)
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "goodput": gp, "last_step": int(last)}))
"""


def _child(code: str, root: Path) -> dict[str, Any]:
    w0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, str(root), JOB], capture_output=True, check=True, text=True
    )
    answer: dict[str, Any] = json.loads(out.stdout)
    answer["process_wall"] = time.perf_counter() - w0
    return answer


def _write_stores(steps: int, epoch: float, t_cut: float, root: Path) -> list[Any]:
    """The finished job under ``root/finished``, the running one (up to ``t_cut``) under
    ``root/running``; returns the running job's later events (the job_end left out)."""
    from badput.events import Event  # noqa: PLC0415 (not in the reference venv)
    from badput.formats.codec import encode_lines  # noqa: PLC0415 (not in the reference venv)

    tail: list[Any] = []
    buffers: dict[Path, list[Any]] = {}
    for ts, attempt, kind, fields in timeline(steps, epoch):
        event = Event(
            ts=ts, kind=kind, job=JOB, attempt=attempt, host="h", rank=0, pid=100 + attempt,
            **fields,
        )  # fmt: skip
        name = f"{JOB}/{attempt}/h-0-{100 + attempt}.jsonl"
        buffers.setdefault(root / "finished" / name, []).append(event)
        if ts <= t_cut:
            buffers.setdefault(root / "running" / name, []).append(event)
        elif kind != "job_end":
            tail.append(event)
    for path, events in buffers.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            for i in range(0, len(events), 100_000):
                fh.write(encode_lines(events[i : i + 100_000]))
    return tail


def _reference_python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    probe = f"import importlib.metadata as m; print(m.version({replay.REFERENCE_PACKAGE!r}))"
    if python.exists():
        found = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, check=False
        )
        if found.stdout.strip() == replay.REFERENCE_VERSION:
            return python
    return replay._ensure_venv(venv)


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:,.2f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def run_size(steps: int, args: argparse.Namespace, python: Path) -> None:
    from badput.analysis import LiveJob  # noqa: PLC0415 (not in the reference venv)
    from badput.formats.codec import encode_lines  # noqa: PLC0415 (not in the reference venv)

    duration, last_start = job_times(steps)
    epoch = float(int(time.time() - duration - 60.0))
    margin = args.windows + 2.0
    if duration - last_start < margin + args.window_seconds + 10:
        raise SystemExit(f"{steps} steps: the last attempt is too short for the windows")
    t_cut = float(int(epoch + duration - margin))
    print(f"\n== {steps:,} steps (data load per step, eval every 100, 3 restarts) ==", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-vs-mgm-") as tmp:
        root = Path(tmp)
        w0 = time.perf_counter()
        tail = _write_stores(steps, epoch, t_cut, root)
        size = sum(p.stat().st_size for p in (root / "finished").rglob("*.jsonl"))
        print(f"badput store written in {time.perf_counter() - w0:.1f} s ({size / 1e6:.0f} MB)")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BADPUT_STORE")}
        env["TZ"] = "UTC"
        inner = subprocess.Popen(
            [
                str(python),
                str(Path(__file__).resolve()),
                "--inner",
                "--steps",
                str(steps),
                "--epoch",
                repr(epoch),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert inner.stdin is not None and inner.stdout is not None

        def ask(command: str) -> dict[str, Any]:
            assert inner.stdin is not None and inner.stdout is not None
            if command:
                inner.stdin.write(command + "\n")
                inner.stdin.flush()
            line = inner.stdout.readline()
            if not line:
                raise SystemExit(f"the reference run stopped (exit {inner.wait()})")
            answer: dict[str, Any] = json.loads(line)
            return answer

        try:
            hello = ask("")
            print(
                f"ml-goodput-measurement {hello['version']}: {hello['entries']:,} log entries "
                f"made by its recorder in {hello['build_s']:.1f} s",
                flush=True,
            )
            # The same entries, imported the way `badput import cloud-logging` does.
            export = root / "export.json"
            ask(f"dump {export}")
            from badput.compat.ml_goodput_measurement import cloud_logging  # noqa: PLC0415 (not in the reference venv)

            cloud_logging.import_cloud_logging(export, root / "imported", JOB)
            export.unlink()
            # (a) cold whole-job goodput, interleaved
            rows: dict[str, list[dict[str, Any]]] = {"mgm": [], "ours": [], "imp": [], "drop": []}
            for _ in range(args.cold_repeats):
                rows["mgm"].append(ask("cold"))
                rows["ours"].append(_child(COLD_CHILD, root / "finished"))
                if args.compat:
                    rows["imp"].append(_child(COLD_CHILD, root / "imported"))
                    rows["drop"].append(_child(COMPAT_CHILD, root / "imported"))
            mgm, ours = rows["mgm"], rows["ours"]
            m_wall, o_wall = _median(mgm, "wall"), _median(ours, "wall")
            m_cpu, o_cpu = _median(mgm, "cpu"), _median(ours, "cpu")
            print(f"(a) cold whole-job goodput, median of {args.cold_repeats}:")
            print(
                f"  ml-goodput-measurement get_job_goodput: {_ms(m_wall)} wall, {_ms(m_cpu)} "
                f"CPU (of which the Cloud Logging stand-in {_ms(_median(mgm, 'standin'))}); "
                f"goodput {mgm[-1]['goodput']:.2f} %, last step {mgm[-1]['last_step']}"
            )
            o = ours[-1]
            print(
                f"  badput LiveJob.update()+report(), fresh process: {_ms(o_wall)} wall, "
                f"{_ms(o_cpu)} CPU, the whole process {_ms(_median(ours, 'process_wall'))} "
                f"({o['events']:,} events, one file per attempt); goodput {o['goodput']:.2f} %, "
                f"observed {o['observed']:.2f} %, data_loading {o['data_loading']:.2f} %, "
                f"last step {o['last_step']}"
            )
            for key, what in (
                ("imp", "badput LiveJob.update()+report() of the imported entries"),
                ("drop", "badput drop-in GoodputCalculator.get_job_goodput, imported entries"),
            ):
                if rows[key]:
                    r = rows[key][-1]
                    extra = f", observed {r['observed']:.2f} %" if "observed" in r else ""
                    print(
                        f"  {what}, fresh process: {_ms(_median(rows[key], 'wall'))} wall, "
                        f"{_ms(_median(rows[key], 'cpu'))} CPU; goodput {r['goodput']:.2f} %"
                        f"{extra}, last step {r['last_step']}"
                    )
            print(
                f"  ratio library / badput: {m_wall / o_wall:.1f}x wall, {m_cpu / o_cpu:.1f}x "
                f"CPU; runs: library {[round(r['wall'], 3) for r in mgm]} s, badput "
                f"{[round(r['wall'], 3) for r in ours]} s"
            )
            if rows["imp"]:
                i_wall, i_cpu = _median(rows["imp"], "wall"), _median(rows["imp"], "cpu")
                print(
                    f"  ratio library / badput on the imported entries: {m_wall / i_wall:.1f}x "
                    f"wall, {m_cpu / i_cpu:.1f}x CPU"
                )
            # (b) a rolling window of the running job
            path = max((root / "running" / JOB).iterdir(), key=lambda p: int(p.name))
            running = next(path.glob("*.jsonl"))
            live = LiveJob(root / "running", JOB)
            live.update()
            t_end = t_cut
            live.report(window=(t_end - args.window_seconds, t_end), now=t_end)
            ask(f"roll {t_end!r} {args.window_seconds!r}")  # the window's first, full read
            mgm_roll: list[dict[str, Any]] = []
            ours_roll: list[dict[str, float]] = []
            i = 0
            for _ in range(args.windows):
                t_end += 1.0
                batch = []
                while i < len(tail) and tail[i].ts <= t_end:
                    batch.append(tail[i])
                    i += 1
                with running.open("ab") as fh:
                    fh.write(encode_lines(batch))
                mgm_roll.append(ask(f"roll {t_end!r} {args.window_seconds!r}"))
                c0, w0 = time.process_time(), time.perf_counter()
                live.update()
                w1 = time.perf_counter()
                r = live.report(window=(t_end - args.window_seconds, t_end), now=t_end)
                w2, c2 = time.perf_counter(), time.process_time()
                ours_roll.append(
                    {"wall": w2 - w0, "cpu": c2 - c0, "report": w2 - w1, "goodput": r.goodput}
                )
            m_w, o_w = _median(mgm_roll, "wall"), _median(ours_roll, "wall")
            print(
                f"(b) rolling {args.window_seconds:g} s window of the running job, 1 s of the "
                f"job (~{len(tail) / max(1.0, t_end - t_cut) / 4:.0f} steps) arriving before "
                f"each, median of {args.windows}:"
            )
            print(
                f"  ml-goodput-measurement get_job_goodput_interval: {_ms(m_w)} wall, "
                f"{_ms(_median(mgm_roll, 'cpu'))} CPU (stand-in "
                f"{_ms(_median(mgm_roll, 'standin'))})"
            )
            print(
                f"  badput update()+report(window=...): {_ms(o_w)} wall, "
                f"{_ms(_median(ours_roll, 'cpu'))} CPU (report alone "
                f"{_ms(_median(ours_roll, 'report'))})"
            )
            print(f"  ratio library / badput: {m_w / o_w:.2f}x wall")
            print(
                f"  last window's goodput: library {mgm_roll[-1]['goodput']:.2f} %, badput "
                f"{100 * ours_roll[-1]['goodput']:.2f} %"
            )
        finally:
            if inner.stdin is not None:
                inner.stdin.close()
            inner.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--cold-repeats", type=int, default=3)
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--window-seconds", type=float, default=60.0)
    parser.add_argument("--no-compat", dest="compat", action="store_false")
    parser.add_argument("--venv", type=Path, default=replay.DEFAULT_VENV)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--epoch", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        return _inner(args.steps[0], args.epoch)
    python = _reference_python(args.venv)
    for steps in args.steps:
        run_size(steps, args, python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
