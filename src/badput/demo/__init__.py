"""``badput demo``: run a real (small) training job under the launcher and report on it.

The job (:mod:`badput.demo.train`) trains a numpy MLP with checkpoints, evals
and one injected crash; :func:`run_demo` runs it with :func:`badput.launcher._run.run_job`
(restarts allowed, so the crash costs wasted steps and recovery time) and
returns the job's :class:`~badput.engine.Report`.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from badput.launcher import run_job

if TYPE_CHECKING:
    from badput.engine import Report

__all__ = ["DemoConfig", "DemoError", "demo_command", "run_demo"]

DEFAULT_JOB = "demo"
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class DemoError(RuntimeError):
    """The demo job did not finish (its final exit code is in ``exit_code``)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class DemoConfig:
    """Size and schedule of the demo job.

    The defaults take 20-40 s on a two-core machine; :meth:`fast` is a few
    seconds (for tests). ``None`` fields use :class:`badput.demo.train.TrainConfig`'s
    defaults.
    """

    steps: int = 600
    batch: int | None = None
    features: int | None = None
    hidden: int | None = None
    ckpt_every: int | None = None
    eval_every: int | None = None
    eval_size: int | None = None
    crash_at: int | None = None
    print_every: int | None = None
    warmup_matmuls: int | None = None
    restart_delay: float = 2.0
    max_restarts: int = 2

    @classmethod
    def fast(cls, steps: int = 60) -> DemoConfig:
        """A few-seconds variant: small model, checkpoints and evals scaled to ``steps``."""
        ckpt = max(5, steps // 4)
        return cls(
            steps=steps,
            batch=64,
            features=64,
            hidden=128,
            ckpt_every=ckpt,
            eval_every=max(4, steps // 5),
            eval_size=1024,
            print_every=max(1, steps // 4),
            warmup_matmuls=5,
            restart_delay=0.5,
        )

    def train_args(self) -> list[str]:
        """The command-line options of :mod:`badput.demo.train` that this config sets."""
        args: list[str] = []
        for f in fields(self):
            if f.name in ("restart_delay", "max_restarts"):
                continue
            value = getattr(self, f.name)
            if value is not None:
                args += [f"--{f.name.replace('_', '-')}", str(value)]
        return args


def demo_command(config: DemoConfig, ckpt_dir: str | os.PathLike[str]) -> list[str]:
    """The training command the launcher runs (this interpreter, ``-m badput.demo.train``)."""
    return [
        sys.executable,
        "-m",
        "badput.demo.train",
        "--ckpt-dir",
        os.fspath(ckpt_dir),
        *config.train_args(),
    ]


def _directory(store: str | os.PathLike[str]) -> Path:
    """The directory of a plain path or ``file://`` URI; other stores cannot hold the demo."""
    text = os.fspath(store)
    if "://" not in text:
        return Path(text)
    parts = urlsplit(text)
    if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
        raise ValueError(f"the demo needs a directory store (a path or file:// URI), got {text!r}")
    return Path(unquote(parts.path))


def run_demo(
    store: str | os.PathLike[str] = "./badput-runs",
    job: str = DEFAULT_JOB,
    config: DemoConfig | None = None,
    *,
    say: Callable[[str], None] = print,
) -> Report:
    """Run the demo job into the directory store ``store``; return its report.

    An earlier run of ``job`` in that store is removed first (``say`` tells so).
    Checkpoints go to a temporary directory, removed afterwards. Raises
    :class:`DemoError` when the job does not complete.
    """
    from badput.analysis import analyze  # noqa: PLC0415 (the engine pulls numpy)
    from badput.store import safe_job_dir  # noqa: PLC0415

    config = config or DemoConfig()
    root = _directory(store)
    job_dir = root / safe_job_dir(job)
    if job_dir.exists():
        say(f"removing the previous demo run: {job_dir}")
        shutil.rmtree(job_dir)
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")  # progress lines as they happen
    # One BLAS thread: a multi-threaded matmul waits for its slowest thread, so on
    # a small shared machine steps would swing by 5x whenever a core is busy.
    for var in BLAS_THREAD_VARS:
        env.setdefault(var, "1")
    with tempfile.TemporaryDirectory(prefix="badput-demo-ckpt-") as ckpt_dir:
        command = demo_command(config, ckpt_dir)
        rc = run_job(
            command,
            job=job,
            store=os.fspath(root),
            max_restarts=config.max_restarts,
            restart_delay=config.restart_delay,
            env=env,
            on_event=lambda msg: say(f"badput run: {msg}"),
        )
    if rc != 0:
        raise DemoError(f"the demo job did not complete (exit code {rc})", rc)
    return analyze(root, job)
