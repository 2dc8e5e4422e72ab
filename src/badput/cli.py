"""The ``badput`` command. Thin: parsing and printing; the work is in the library.

- ``badput report PATH``: the partition of a job's time (:func:`badput.analysis.analyze`).
- ``badput run -- COMMAND...``: run a command as a recorded job (:func:`badput._launcher.run_job`).
- ``badput demo``: a real small training job with a crash, then its report
  (:func:`badput.demo.run_demo`).
"""

from __future__ import annotations

import math
import sys
import time
from datetime import datetime, timezone
from typing import Any, NoReturn

import click

from badput import __version__
from badput._env import DEFAULT_STORE

__all__ = ["main", "parse_timestamp"]

#: Exit status for a usage problem: a bad path, job or option (as click uses).
USAGE_ERROR = 2


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch from ``1732000000.5``, an ISO 8601 time, or ``now``.

    ISO times without a zone are taken as UTC; ``Z`` is accepted.
    """
    raw = text.strip()
    if raw.lower() == "now":
        return time.time()
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"not a finite time: {text!r}")
        return value
    iso = raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw
    try:
        dt = datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use seconds since the epoch, ISO 8601, or 'now')"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _to_time(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Click callback: turn ``TIME`` option values (one or a tuple) into epoch seconds."""
    if value is None:
        return None
    try:
        if isinstance(value, tuple):
            return tuple(parse_timestamp(v) for v in value)
        return parse_timestamp(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _fail(command: str, message: str) -> NoReturn:
    """One line on stderr, exit status 2: a user mistake, not a traceback."""
    click.echo(f"badput {command}: error: {message}", err=True)
    sys.exit(USAGE_ERROR)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="badput")
def main() -> None:
    """Where does your training time go? Goodput and badput of ML training jobs."""


@main.command()
@click.argument("path")
@click.option("--job", help="Job to report on (needed when PATH is a store with several jobs).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@click.option(
    "--now",
    metavar="TIME",
    callback=_to_time,
    help="Evaluate a live job as of this time (epoch seconds, ISO 8601, or 'now').",
)
@click.option(
    "--ideal-step-time",
    type=click.FloatRange(min=0.0, min_open=True),
    metavar="SECONDS",
    help="Configured ideal step time (default: estimated from the best sustained steps).",
)
@click.option(
    "--window",
    type=(str, str),
    default=None,
    metavar="A B",
    callback=_to_time,
    help="Restrict the partition to the interval [A, B].",
)
def report(
    *,
    path: str,
    job: str | None,
    as_json: bool,
    now: float | None,
    ideal_step_time: float | None,
    window: tuple[float, float] | None,
) -> None:
    """Report the goodput and badput of the job logged at PATH.

    PATH is a store root (with --job when it holds several jobs), a job
    directory, or a single .jsonl event file.
    """
    from badput.analysis import analyze  # noqa: PLC0415 (the engine pulls numpy)

    if window is not None and not window[0] < window[1]:
        _fail("report", f"--window: the start must be before the end, got {window[0]} {window[1]}")
    progress = _ReadProgress(enabled=sys.stderr.isatty())
    try:
        result = analyze(
            path,
            job,
            now=now,
            ideal_step_time=ideal_step_time,
            window=window,
            on_progress=progress,
        )
    except (ValueError, OSError) as exc:
        progress.done()
        _fail("report", str(exc))
    progress.done()
    from badput.report import render_table, to_json  # noqa: PLC0415 (rich is lazy)

    if as_json:
        click.echo(to_json(result))
    else:
        render_table(result)


class _ReadProgress:
    """A one-line "read N lines" counter on stderr while a large log is read (TTY only)."""

    def __init__(self, *, enabled: bool, after: float = 1.0) -> None:
        self._enabled = enabled
        self._start = time.monotonic()
        self._after = after  # stay silent for short reads
        self._shown = False

    def __call__(self, lines: int) -> None:
        if self._enabled and time.monotonic() - self._start >= self._after:
            click.echo(f"\rbadput: read {lines:,} lines ...", err=True, nl=False)
            self._shown = True

    def done(self) -> None:
        if self._shown:
            click.echo("\r\033[K", err=True, nl=False)
            self._shown = False


@main.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--job", help="Job name (default: $BADPUT_JOB, else <program>-<UTC time>).")
@click.option(
    "--store", help=f"Store URI or directory (default: $BADPUT_STORE or {DEFAULT_STORE})."
)
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Restart a failed command up to N times.",
)
@click.option(
    "--restart-delay",
    type=click.FloatRange(min=0.0),
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Wait before each restart.",
)
@click.option(
    "--kill-timeout",
    type=click.FloatRange(min=0.0),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="After forwarding SIGINT/SIGTERM, wait this long before SIGKILL.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    *,
    job: str | None,
    store: str | None,
    max_restarts: int,
    restart_delay: float,
    kill_timeout: float,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND as a recorded job, restarting it when it fails.

    Records job_start before each start of the command, attempt_end when it
    fails, job_end when the job is over; the command sees BADPUT_JOB,
    BADPUT_STORE and BADPUT_ATTEMPT. SIGINT/SIGTERM are forwarded to it and end
    the job (cancelled / preempted). Exits with the command's exit status.

        badput run --job llama --max-restarts 3 -- python train.py --lr 3e-4
    """
    from badput._launcher import run_job  # noqa: PLC0415

    try:
        rc = run_job(
            list(command),
            job,
            store,
            max_restarts,
            restart_delay,
            kill_timeout=kill_timeout,
            on_event=lambda msg: click.echo(f"badput run: {msg}", err=True),
        )
    except (ValueError, TypeError) as exc:
        _fail("run", str(exc))
    sys.exit(rc)


@main.command()
@click.option(
    "--store",
    default=DEFAULT_STORE,
    show_default=True,
    help="Directory of the store the demo job writes to (its previous 'demo' job is removed).",
)
@click.option("--job", default="demo", show_default=True, help="Job name of the demo run.")
@click.option("--steps", type=click.IntRange(min=10), default=None, help="Training steps.")
@click.option("--fast", is_flag=True, help="A small model: a few seconds instead of ~25.")
@click.option(
    "--restart-delay",
    type=click.FloatRange(min=0.0),
    default=None,
    metavar="SECONDS",
    help="Recovery time between the crash and the restart (default 2, with --fast 0.5).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def demo(
    *,
    store: str,
    job: str,
    steps: int | None,
    fast: bool,
    restart_delay: float | None,
    as_json: bool,
) -> None:
    """Train a small numpy MLP that crashes once, then show where its time went.

    A real job: BLAS warm-up, model and data set-up, steps with data loading,
    checkpoints, evals, a crash on the first attempt, a restart that restores
    the last checkpoint and redoes the lost steps.
    """
    from badput.demo import DemoConfig, DemoError, run_demo  # noqa: PLC0415
    from badput.report import render_table, to_json  # noqa: PLC0415

    config = DemoConfig.fast(steps or 60) if fast else DemoConfig()
    if steps is not None:
        config.steps = steps
    if restart_delay is not None:
        config.restart_delay = restart_delay
    say = (lambda msg: click.echo(msg, err=True)) if as_json else click.echo
    say(f"badput demo: training job {job!r} into {store} (one crash is injected)")
    try:
        result = run_demo(store, job, config, say=say)
    except DemoError as exc:
        click.echo(f"badput demo: error: {exc}", err=True)
        sys.exit(exc.exit_code or 1)
    except (ValueError, OSError) as exc:
        _fail("demo", str(exc))
    if as_json:
        click.echo(to_json(result))
        return
    click.echo()
    render_table(result)
    click.echo()
    click.echo(f"Report it again with: badput report {store} --job {job}")


if __name__ == "__main__":  # pragma: no cover
    main()
