"""Running a framework script under the real ``badput run`` and reading back both sides.

Each training script writes its own measurements (``truth-<attempt>-<rank>.json``: the
seconds it spent fetching batches, saving and loading checkpoints, as timed by the
script around the framework's own calls) so that a test compares the report with
the run's own timings, not with numbers it assumed.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import badput
from badput.engine import Report

HERE = Path(__file__).parent
CRASH_AT = "BADPUT_TEST_CRASH_AT"  # step at which attempt 0 raises (inside the step)
TRUTH_DIR = "BADPUT_TEST_TRUTH_DIR"


def badput_run(
    tmp_path: Path,
    job: str,
    command: Sequence[str],
    *,
    max_restarts: int = 1,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    options: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``badput run --job JOB --store tmp/runs --max-restarts N -- COMMAND`` in a subprocess."""
    full_env = dict(os.environ)
    full_env.pop("BADPUT_PROCESS_INIT", None)  # the suite turns it off; launched runs record it
    full_env[TRUTH_DIR] = str(tmp_path / "truth")
    full_env.update(env or {})
    (tmp_path / "truth").mkdir(exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "badput.cli",
        "run",
        "--job",
        job,
        "--store",
        str(tmp_path / "runs"),
        "--max-restarts",
        str(max_restarts),
        *options,
        "--",
        *command,
    ]
    proc = subprocess.run(
        cmd,
        check=False,
        env=full_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(f"badput run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def report(tmp_path: Path, job: str) -> Report:
    return badput.analyze(tmp_path / "runs", job)


def truths(tmp_path: Path) -> list[dict[str, Any]]:
    """Every truth file the attempts wrote (one per attempt and rank)."""
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "truth").glob("*.json"))]


def truth_sum(tmp_path: Path, key: str, rank: int | None = 0) -> float:
    return sum(t.get(key, 0.0) for t in truths(tmp_path) if rank is None or t["rank"] == rank)


def script(name: str) -> list[str]:
    return [sys.executable, str(HERE / name)]


class Truth:
    """What a training script measured itself (written at exit, or at a crash)."""

    def __init__(self, rank: int = 0) -> None:
        self.values: dict[str, Any] = {"rank": rank}
        self.rank = rank

    def add(self, key: str, seconds: float) -> None:
        self.values[key] = self.values.get(key, 0.0) + seconds

    def count(self, step: int, samples: int, tokens: int | None = None) -> None:
        """The work of a step the script trained on, by the script's own count (written
        at once: a rank killed by its launcher never reaches its exit)."""
        self.values.setdefault("work", []).append([step, samples, tokens])
        self.write()

    def timed(self, key: str) -> _Timed:
        return _Timed(self, key)

    def write(self) -> None:
        out = Path(os.environ[TRUTH_DIR])
        attempt = os.environ.get("BADPUT_ATTEMPT", "x")
        inner = os.environ.get("TORCHELASTIC_RESTART_COUNT", "")
        name = f"{attempt}.{inner}-{self.rank}-{os.getpid()}.json"
        self.values["exit_at"] = time.time()  # the script's last moment it knows of
        (out / name).write_text(json.dumps(self.values))


class _Timed:
    def __init__(self, truth: Truth, key: str) -> None:
        self.truth = truth
        self.key = key

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.truth.add(self.key, time.perf_counter() - self.t0)


def time_jax_compiles(truth: Truth) -> None:
    """The script's own record of JAX's compilations: every phase JAX times (tracing,
    lowering, XLA), from the script's own ``jax.monitoring`` listener; at exit, the seconds
    of their union are the truth's ``compile`` (and their count, ``compile_spans``)."""
    import jax  # only the JAX scripts need it

    spans: list[tuple[float, float]] = []

    def listen(event: str, start: float, end: float, **kwargs: object) -> None:
        if event.startswith("/jax/core/compile/") and event.endswith("_duration"):
            spans.append((start, end))

    def union() -> None:
        covered, last = 0.0, float("-inf")
        for start, end in sorted(spans):
            covered += max(0.0, end - max(start, last))
            last = max(last, end)
        truth.values["compile"] = covered
        truth.values["compile_spans"] = len(spans)

    jax.monitoring.register_event_time_span_listener(listen)
    atexit.register(union)  # before truth.write, registered earlier (atexit runs LIFO)


def events(tmp_path: Path, job: str) -> list[dict[str, Any]]:
    """Every event of ``job``'s streams, as written."""
    return [
        json.loads(line)
        for f in sorted((tmp_path / "runs" / job).rglob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]


def work_counted(tmp_path: Path) -> list[tuple[dict[str, Any], int, int, int | None]]:
    """``(truth, step, samples, tokens)`` of every step each process counted itself."""
    return [(t, s, n, k) for t in truths(tmp_path) for s, n, k in t.get("work", [])]


def assert_work(
    rep: Report, tmp_path: Path, wasted: set[tuple[str | None, int]], *, tokens: bool = True
) -> None:
    """The report's samples (and tokens) are exactly what the processes counted, over every
    rank (each counts its own batches), and its kept ones are those less the ``wasted``
    steps ``(attempt as in the truth file, step)`` (ACCOUNTING.md §3)."""
    counted = work_counted(tmp_path)
    assert counted, "the run counted no work"
    p = rep.program
    assert p is not None
    samples = sum(n for _, _, n, _ in counted)
    kept = sum(n for t, s, n, _ in counted if (t.get("attempt"), s) not in wasted)
    assert (p.samples, p.kept_samples) == (samples, kept), (p.samples, p.kept_samples)
    if tokens:
        total = sum(k or 0 for _, _, _, k in counted)
        kept_tokens = sum(k or 0 for t, s, _, k in counted if (t.get("attempt"), s) not in wasted)
        assert total > 0
        assert (p.tokens, p.kept_tokens) == (total, kept_tokens), (p.tokens, p.kept_tokens)
    else:
        assert p.tokens == 0


def assert_work_by_step(tmp_path: Path, job: str) -> None:
    """Each step's ``step_end`` carries the samples and tokens of the batch the process
    counted for that step itself (one process per attempt): which step trained on which
    batch, not only their sums."""
    recorded = {
        (str(e["attempt"]), e["step"]): (e.get("samples"), e.get("tokens"))
        for e in events(tmp_path, job)
        if e["kind"] == "step_end"
    }
    counted = {(t.get("attempt"), s): (n, k) for t, s, n, k in work_counted(tmp_path)}
    assert counted and recorded == counted, sorted(set(recorded.items()) ^ set(counted.items()))


def assert_model(
    rep: Report, tmp_path: Path, job: str, params: int, *, devices: int, device: str = "cpu"
) -> None:
    """The ``model`` event(s) record the framework's parameter count and the device kind
    the framework tells (a CPU: not in the table of peaks, so MFU is omitted and says so)."""
    models = [e for e in events(tmp_path, job) if e["kind"] == "model"]
    assert models, "no model event"
    assert {(e["params"], e["device"], e["devices"]) for e in models} == {(params, device, devices)}
    p = rep.program
    assert p is not None
    assert p.flops_per_token == 6 * params and p.devices == devices
    assert p.peak_flops is None and p.mfu_productive is None and p.mfu_job is None
    assert f"device {device!r} is not in the table of peaks" in p.absent["peak_flops"]
    assert "MFU omitted" in p.absent["program_goodput"]


def crash_step() -> int | None:
    """The step at which this process must crash: only in the launcher's first attempt."""
    raw = os.environ.get(CRASH_AT)
    first = os.environ.get("BADPUT_ATTEMPT") == "0"
    return int(raw) if raw and first else None


def assert_bucket_agrees(rep: Report, tmp_path: Path, bucket: str, n: int) -> None:
    """:func:`assert_agrees` for ``bucket`` of ``rep`` against rank 0's own timing."""
    assert_agrees(bucket, rep.bucket(bucket), truth_sum(tmp_path, bucket), n)


def assert_agrees(name: str, reported: float, measured: float, n: int) -> None:
    """The report's ``reported`` seconds for ``name`` agree with the run's own ``measured``
    seconds over ``n`` timed operations: within 8 ms of framework bookkeeping per
    operation plus 5 %. The hooks sit just outside the call the script timed, and on a
    loaded 2-core machine the framework's loop between them took up to 4 ms per step.
    (Counting a 20 ms step as data loading, or missing a fetch, still fails.)"""
    assert measured > 0, f"the run measured no {name}"
    tolerance = 0.008 * n + 0.05 * measured
    assert abs(reported - measured) <= tolerance, (
        f"{name}: report {reported:.4f}s, run's own timing {measured:.4f}s "
        f"(tolerance {tolerance:.4f}s)"
    )


def assert_clean(rep: Report) -> None:
    """No diagnostic, and the job ended by the launcher's job_end with status completed."""
    assert [d.code for d in rep.diagnostics] == [], [d.message for d in rep.diagnostics]
    assert rep.end_reason == "job_end"
    assert rep.attempts[-1].status == "completed"


def assert_untracked_share(rep: Report, most: float) -> None:
    """At most ``most`` of the job's time is ``untracked`` (every second has a name)."""
    share = rep.bucket("untracked") / rep.total_seconds
    assert share <= most, (
        f"untracked {rep.bucket('untracked'):.2f}s of {rep.total_seconds:.2f}s "
        f"({share:.1%}); buckets: {dict(rep.buckets)}"
    )
