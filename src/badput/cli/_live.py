"""The commands that run or follow a job: ``badput run``, ``badput demo``, ``badput monitor``
and ``badput watch`` (registered on :func:`badput.cli._commands.main`)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from badput.cli._commands import _fail, _seconds, main
from badput.cli._cost import price_option, priced
from badput.cli._types import FiniteRange, Program, program_options, set_program
from badput.runtime.env import DEFAULT_STORE

if TYPE_CHECKING:
    pass


def _run_status_line(message: str) -> None:
    """One ``badput run`` status line on stderr. A stderr that cannot take it (a closed
    pipe: ``| head`` exited, a ``tee`` died) loses the line, never the job: the launcher
    must go on restarting and record the job's end."""
    with contextlib.suppress(OSError):  # EPIPE (Python ignores SIGPIPE), EIO, ENOSPC
        click.echo(f"badput run: {message}", err=True)


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
    type=float,
    callback=_seconds,
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Wait before each restart.",
)
@click.option(
    "--kill-timeout",
    type=float,
    callback=_seconds,
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="After forwarding SIGINT/SIGTERM, wait this long before SIGKILL.",
)
@click.option(
    "--hang-timeout",
    metavar="SECONDS|auto",
    help="Kill and restart an attempt with no progress (steps, recorded intervals, "
    "sections) for this long; 'auto': max(10 x typical step time, 60 s).",
)
@click.option(
    "--backoff",
    type=float,
    callback=_seconds,
    default=0.25,
    show_default=True,
    metavar="SECONDS",
    help="First back-off of a crash loop; doubles with each failure in a row (0: off).",
)
@click.option(
    "--backoff-max",
    type=float,
    callback=_seconds,
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Cap of the back-off; an attempt that ran longer resets it.",
)
@click.option(
    "--compact",
    is_flag=True,
    help="When the job is over, write its columnar archive (as 'badput compact' does) and "
    "say where it is; a failure to write it is said and changes nothing else.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    *,
    job: str | None,
    store: str | None,
    max_restarts: int,
    restart_delay: float,
    kill_timeout: float,
    hang_timeout: str | None,
    backoff: float,
    backoff_max: float,
    compact: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND as a recorded job, restarting it when it fails.

    Records job_start before each start of the command, attempt_end when it
    fails, job_end when the job is over; the command sees BADPUT_JOB,
    BADPUT_STORE and BADPUT_ATTEMPT. SIGINT/SIGTERM are forwarded to it and end
    the job (cancelled / preempted). Exits with the command's exit status.
    The command dies with the launcher (even a SIGKILLed one), what it leaves
    running is killed when it exits, and a crash loop backs off exponentially.

        badput run --job llama --max-restarts 3 -- python train.py --lr 3e-4
    """
    from badput.launcher import parse_hang_timeout, run_job  # noqa: PLC0415

    timeout: float | str | None = None
    if hang_timeout is not None:
        try:
            timeout = parse_hang_timeout(hang_timeout)
        except ValueError as exc:
            _fail("run", f"--hang-timeout: {exc}")
    try:
        rc = run_job(
            list(command),
            job,
            store,
            max_restarts,
            restart_delay,
            kill_timeout=kill_timeout,
            on_event=_run_status_line,
            hang_timeout=timeout,
            backoff=backoff,
            backoff_max=backoff_max,
            compact=compact,
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
    type=FiniteRange(min=0.0),
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


def _parse_hostport(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1); ``[::1]:PORT`` for IPv6."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = "", text.strip()
    host = host.strip("[]") or "127.0.0.1"
    try:
        value = int(port)
    except ValueError:
        raise ValueError(f"expected HOST:PORT, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise ValueError(f"port out of range in {text!r}")
    return host, value


def _build_exporters(
    *,
    prometheus: str | None,
    pushgateway: str | None,
    tensorboard: str | None,
    otlp: str | None,
    gcp_project: str | None,
    gcp_location: str | None = None,
) -> list[Any]:
    """The exporters asked for on the command line (each module imported lazily)."""
    exporters: list[Any] = []
    if prometheus is not None or pushgateway is not None:
        from badput.monitor.prometheus import PrometheusExporter  # noqa: PLC0415

        # The scrape endpoint and the Pushgateway are two exporters, so that each has its
        # own thread and deadline: a hanging Pushgateway never leaves the scrape stale.
        if prometheus is not None:
            host, port = _parse_hostport(prometheus)
            exporters.append(PrometheusExporter(host=host, port=port))
        if pushgateway is not None:
            exporters.append(PrometheusExporter(port=None, pushgateway=pushgateway))
    if tensorboard is not None:
        from badput.monitor.tensorboard import TensorBoardExporter  # noqa: PLC0415

        exporters.append(TensorBoardExporter(tensorboard))
    if otlp is not None:
        from badput.monitor.otel import OpenTelemetryExporter, probe_collector  # noqa: PLC0415

        probe_collector(otlp)  # a collector that is not there: one line, not silence
        exporters.append(OpenTelemetryExporter(endpoint=otlp))
    if gcp_project is not None:
        from badput.monitor.gcm import CloudMonitoringExporter  # noqa: PLC0415

        exporters.append(CloudMonitoringExporter(project_id=gcp_project, location=gcp_location))
    return exporters


def _log_to_stderr(command: str) -> None:
    """Show the ``badput`` logger's warnings (failing exporters...) on stderr."""
    import logging  # noqa: PLC0415

    log = logging.getLogger("badput")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"badput {command}: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.WARNING)


@main.command()
@click.argument("path")
@click.option("--job", help="Job to monitor (needed when PATH is a store with several jobs).")
@click.option(
    "--interval",
    type=FiniteRange(min=0.0, min_open=True),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between cycles (export and status line).",
)
@click.option(
    "--window",
    "windows",
    type=FiniteRange(min=0.0, min_open=True),
    multiple=True,
    metavar="SECONDS",
    help="A rolling window to export as well (repeatable), e.g. --window 3600.",
)
@click.option(
    "--prometheus",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics at HOST:PORT (HOST defaults to 127.0.0.1).",
)
@click.option("--pushgateway", metavar="URL", help="Push to this Prometheus Pushgateway.")
@click.option("--tensorboard", metavar="DIR", help="Write TensorBoard scalars to DIR.")
@click.option("--otlp", metavar="URL", help="Push OpenTelemetry metrics to this OTLP/HTTP URL.")
@click.option("--gcp-project", metavar="ID", help="Write to Google Cloud Monitoring in ID.")
@click.option(
    "--gcp-location",
    metavar="ZONE",
    help="Zone or region of the workload for Cloud Monitoring (default: asked of the GCE "
    "metadata server, which only answers on Google Cloud).",
)
@click.option(
    "--ideal-step-time",
    type=FiniteRange(min=0.0, min_open=True),
    metavar="SECONDS",
    help="Configured ideal step time (default: estimated from the best sustained steps).",
)
@click.option(
    "--stall-after",
    type=FiniteRange(min=0.0),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="No progress for longer than max(10 x typical step time, SECONDS) is a stall.",
)
@click.option(
    "--straggler-threshold",
    type=FiniteRange(min=0.0, max=1.0),
    default=0.75,
    show_default=True,
    metavar="SCORE",
    help="A rank whose relative or individual section score is below this is a straggler.",
)
@click.option("--once", is_flag=True, help="Run one cycle, print its status line and exit.")
@program_options
@price_option
def monitor(
    *,
    path: str,
    job: str | None,
    interval: float,
    windows: tuple[float, ...],
    prometheus: str | None,
    pushgateway: str | None,
    tensorboard: str | None,
    otlp: str | None,
    gcp_project: str | None,
    gcp_location: str | None,
    ideal_step_time: float | None,
    stall_after: float,
    straggler_threshold: float,
    once: bool,
    program: Program,
    price: float | None = None,
) -> None:
    """Export the goodput of the job at PATH every --interval seconds, beside the job.

    Runs until Ctrl-C or SIGTERM (a last cycle is exported, then the exporters
    are closed) and prints one status line per cycle. PATH is a store root (with
    --job; the job may not have started yet), a job directory or a .jsonl file.

        badput monitor ./badput-runs --job llama --prometheus 127.0.0.1:9464 --tensorboard tb/
    """
    from badput.engine import RankOptions  # noqa: PLC0415
    from badput.monitor import Monitor  # noqa: PLC0415 (the engine pulls numpy)
    from badput.report import status_line  # noqa: PLC0415

    _log_to_stderr("monitor")
    exporters = _exporters_or_fail(
        prometheus=prometheus,
        pushgateway=pushgateway,
        tensorboard=tensorboard,
        otlp=otlp,
        gcp_project=gcp_project,
        gcp_location=gcp_location,
    )
    previous: list[Any] = [None]

    def show(snapshot: Any) -> None:
        click.echo(status_line(snapshot, previous[0], now=time.time()))
        previous[0] = snapshot

    try:
        mon = Monitor(
            job,
            path,
            exporters,
            interval=interval,
            rolling_windows=windows,
            ideal_step_time=ideal_step_time,
            on_snapshot=show,
            rank_options=RankOptions(
                straggler_threshold=straggler_threshold, stall_floor=stall_after
            ),
        )
    except (ValueError, OSError) as exc:
        for exporter in exporters:
            exporter.close()
        _fail("monitor", str(exc))
    set_program(mon.live_job.accountant, program)  # program goodput: the exporters' MFU
    priced(mon.live_job, price)  # the buckets in money (docs/advice.md#cost)
    if once:
        _run_once(mon)
        return
    names = ", ".join(type(e).__name__ for e in exporters) or "none"
    click.echo(
        f"badput monitor: job {mon.job!r}, every {interval:g}s, exporters: {names} "
        "(Ctrl-C to stop)",
        err=True,
    )
    _run_until_stopped(mon)


def _exporters_or_fail(**where: str | None) -> list[Any]:
    """The exporters ``where`` asks for (:func:`_build_exporters`); a usage error when one
    cannot start or its extra is not installed."""
    from badput.runtime.optional import MissingExtraError  # noqa: PLC0415

    try:
        return _build_exporters(**where)
    except MissingExtraError as exc:
        _fail("monitor", str(exc))
    except (ValueError, OSError) as exc:
        _fail("monitor", f"cannot start an exporter: {exc}")


def _run_once(mon: Any) -> None:
    """One cycle, its status line printed; a job that cannot be read is a usage error."""
    try:
        mon.run_once()
    except Exception as exc:
        mon.stop(final_flush=False)
        _fail("monitor", f"reading the job failed: {exc}")
    mon.stop(final_flush=False)


def _run_until_stopped(mon: Any) -> None:
    """Run ``mon`` until SIGINT or SIGTERM; then a last cycle, and the exporters closed."""
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    done = threading.Event()
    previous_handlers = {
        sig: signal.signal(sig, lambda *_: done.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        mon.start()
        while not done.wait(1.0):
            pass
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        if not mon.stop(final_flush=True, timeout=10.0):
            click.echo("badput monitor: exporters did not finish within 10s", err=True)


@main.command()
@click.argument("path")
@click.option("--job", help="Job to watch (needed when PATH is a store with several jobs).")
@click.option(
    "--interval",
    type=FiniteRange(min=0.1),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between refreshes.",
)
@click.option(
    "--stall-after",
    type=FiniteRange(min=0.0),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="No progress for longer than max(10 x typical step time, SECONDS) shows STALLED.",
)
@program_options
@price_option
def watch(
    *,
    path: str,
    job: str | None,
    interval: float,
    stall_after: float,
    program: Program,
    price: float | None = None,
) -> None:
    """Live view of the job at PATH: goodput, buckets, steps, stalls. Ctrl-C quits.

    Works on a job that is still being written. On a terminal the view redraws in
    place; when the output is not a terminal, one status line is printed per refresh.
    With --price-per-device-hour: the job's cost so far and its badput a day.
    """
    import signal  # noqa: PLC0415

    from badput.report import run_watch  # noqa: PLC0415

    if "://" not in path and not os.path.exists(path):
        # A job that has not started yet is waited for inside an existing store;
        # a path that does not exist at all is a typo, not a job to wait for.
        _fail("watch", f"{path}: no such file or directory")
    if job is not None:
        _say_if_not_there_yet(path, job)

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        run_watch(
            path, job, interval=interval, stall_after=stall_after, program=program, price=price
        )
    except ValueError as exc:
        _fail("watch", str(exc))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, old)


def _say_if_not_there_yet(path: str, job: str) -> None:
    """Say once, on stderr, that ``job`` is not at ``path`` yet (``watch`` waits for a job
    that has not started: a typo in its name would wait silently)."""
    from badput.report import inert  # noqa: PLC0415 (rich stays unloaded until a view)
    from badput.store import (  # noqa: PLC0415 (as above)
        JsonlStore,
        is_job_path,
        job_sources,
        safe_job_dir,
    )

    if "://" in path and not path.lower().startswith("file://"):
        return  # listing the jobs of a Cloud Logging log reads all of it: not for a note
    if is_job_path(path):
        return  # one job's path: a --job that is not its job is refused, not waited for
    try:
        sources = job_sources(path)
    except (ValueError, OSError):
        return
    jobs = [name for _, name in sources]
    dirs = {  # --job may name a job's directory (a renamed one too)
        store.job_dirs.get(name, safe_job_dir(name))
        for store, name in sources
        if isinstance(store, JsonlStore)
    }
    if jobs and job not in jobs and job not in dirs:
        listing = ", ".join(inert(name) for name in jobs[:20]) + (" ..." if len(jobs) > 20 else "")
        click.echo(
            f"badput watch: no job '{inert(job)}' in {inert(path)} yet (jobs: {listing}); "
            "waiting for it to start",
            err=True,
        )
