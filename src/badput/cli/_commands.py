"""The ``badput`` command. Thin: parsing and printing; the work is in the library.

- ``badput report PATH``: the partition of a job's time (:func:`badput.analysis.analyze`).
- ``badput report --resiliency --reference-step-time S FILE...``: the resiliency library's
  calculator (:func:`badput.compat.resiliency.resiliency_goodput`).
- ``badput import resiliency FILE...``: its logs into a store
  (:func:`badput.compat.resiliency.import_resiliency`).
- ``badput import cloud-logging FILE...``: ml-goodput-measurement's Cloud Logging exports
  into a store (:func:`badput.compat.ml_goodput_measurement.cloud_logging.import_cloud_logging`).
- ``badput run -- COMMAND...``: run a command as a recorded job
  (:func:`badput.launcher.run_job`).
- ``badput demo``: a real small training job with a crash, then its report
  (:func:`badput.demo.run_demo`).
- ``badput monitor PATH``: feed exporters beside a job (:class:`badput.monitor.Monitor`).
- ``badput watch PATH``: a live terminal view (:func:`badput.report.run_watch`).
- ``badput export trace PATH FILE``, ``badput export csv PATH DIR``: the job as Chrome
  Trace Event JSON (:func:`badput.report.write_trace`) or CSV files
  (:func:`badput.report.write_csv`).
- ``badput jobs STORE``, ``badput compare A B``: every job of a store; two jobs side by
  side (:func:`badput.report.render_compare`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import sys
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn

import click

from badput import __version__
from badput.cli._cost import price_option, priced
from badput.cli._types import FiniteRange, Program, program_options, set_program
from badput.runtime.env import DEFAULT_STORE

if TYPE_CHECKING:
    from badput.cli._list_ahead import ListingAhead

__all__ = ["main", "parse_timestamp"]

#: Exit status for a usage problem: a bad path, job or option (as click uses).
USAGE_ERROR = 2
#: ``badput report --fail-under G``: the job's goodput is under G (docs/views.md).
GOODPUT_UNDER = 3


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


def _attempt_rows(ctx: click.Context, param: click.Parameter, value: str) -> int | None:
    """Click callback of ``--attempts N|all``: a count of table rows, or None for all."""
    if value.strip().lower() == "all":
        return None
    try:
        rows = int(value)
    except ValueError:
        rows = -1
    if rows < 1:
        raise click.BadParameter(f"expected a positive number or 'all', got {value!r}", ctx, param)
    return rows


def _seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """Click callback of ``badput run``'s delays and timeouts: finite seconds, 0 or more.

    ``click.FloatRange`` lets ``inf`` and ``nan`` through: ``--restart-delay inf`` would
    sleep for ever after the first crash, ``nan`` fail only then. Both are usage errors
    naming the option, before the command starts."""
    if not math.isfinite(value):
        raise click.BadParameter(f"{value!r} is not a finite number of seconds", ctx, param)
    if value < 0:
        raise click.BadParameter(f"{value!r} is negative: expected 0 seconds or more", ctx, param)
    return value


class GoodputFraction(click.ParamType[float]):
    """A goodput threshold: a fraction (``0.8``) or a percentage (``80%``, ``80``): a
    number above 1 is read as a percentage. Refused at parse time: not a number, NaN,
    infinite, negative, or above 100 %."""

    name = "goodput"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        percent = text.endswith("%")
        try:
            number = float(text[:-1] if percent else text)
        except ValueError:
            self.fail(f"{value!r} is not a goodput (a fraction like 0.8, or 80%)", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        fraction = number / 100.0 if percent or number > 1.0 else number
        if not 0.0 <= fraction <= 1.0:
            self.fail(f"{value!r} is not between 0 and 100%", param, ctx)
        return fraction


def _fail(command: str, message: str) -> NoReturn:
    """One line on stderr, exit status 2: a user mistake, not a traceback.

    The message may quote paths and job names read from a store: shown inert.
    """
    from badput.report import inert  # noqa: PLC0415 (no rich: the report package's face)

    click.echo(f"badput {command}: error: {inert(message, limit=2000)}", err=True)
    sys.exit(USAGE_ERROR)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="badput")
def main() -> None:
    """Where does your training time go? Goodput and badput of ML training jobs."""


@main.command()
@click.argument("paths", nargs=-1, metavar="PATH")
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
    type=FiniteRange(min=0.0, min_open=True),
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
@click.option(
    "--ranks",
    "show_ranks",
    is_flag=True,
    help="Add the per-rank table (outliers first; many ranks are summarised).",
)
@click.option(
    "--attempts",
    "attempt_rows",
    callback=_attempt_rows,
    default="20",
    show_default=True,
    metavar="N|all",
    help="Most attempts the table lists (the first and the last); 'all' lists every one.",
)
@click.option(
    "--straggler-threshold",
    type=FiniteRange(min=0.0, max=1.0),
    default=0.75,
    show_default=True,
    metavar="SCORE",
    help="A rank whose relative or individual section score is below this is a straggler.",
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
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, writable=True),
    metavar="FILE",
    help="Also write a self-contained HTML page (timeline, charts, attempts) to FILE.",
)
@click.option(
    "--fail-under",
    type=GoodputFraction(),
    metavar="GOODPUT",
    help="Exit with status 3 (a line on stderr) when the goodput is under GOODPUT "
    "(0.8 or 80%): a CI gate. The report is printed first.",
)
@click.option(
    "--resiliency",
    is_flag=True,
    help="PATH... are resiliency.goodput_measure logs: print that tool's own goodput table.",
)
@click.option(
    "--reference-step-time",
    type=FiniteRange(min=0.0, min_open=True),
    metavar="SECONDS",
    help="With --resiliency: the reference (ideal) step time of that tool's calculator.",
)
@program_options
@click.option(
    "--price-per-device-hour",
    "price",
    type=FiniteRange(min=0.0),
    metavar="PRICE",
    help="Each bucket in money: devices x hours x PRICE (docs/advice.md#cost).",
)
def report(
    *,
    paths: tuple[str, ...],
    job: str | None,
    as_json: bool,
    now: float | None,
    ideal_step_time: float | None,
    window: tuple[float, float] | None,
    show_ranks: bool,
    attempt_rows: int | None,
    straggler_threshold: float,
    stall_after: float,
    resiliency: bool,
    reference_step_time: float | None,
    html_file: str | None = None,
    fail_under: float | None = None,
    program: Program = (None, None),
    price: float | None = None,
) -> None:
    """Report the goodput and badput of the job logged at PATH.

    PATH is a store root (with --job when it holds several jobs), a job
    directory, or a single .jsonl event file.

    With --resiliency --reference-step-time S, PATH... are one or more logs of
    the resiliency.goodput_measure library, and the report is that library's
    calculator (its table and goodput, the same figures). To see where the rest
    of the time went, import them (badput import resiliency) and report on the store.
    """
    if resiliency and (html_file is not None or fail_under is not None):
        _fail("report", "--html and --fail-under do not apply to --resiliency (import the logs)")
    if resiliency:
        _report_resiliency(
            paths,
            job=job,
            as_json=as_json,
            reference_step_time=reference_step_time,
            now=now,
            ideal_step_time=ideal_step_time,
            window=window,
        )
        return
    path = _one_path(paths, reference_step_time, window)
    snapshot = _read_and_report(
        path,
        job,
        now=now,
        window=window,
        ideal_step_time=ideal_step_time,
        straggler_threshold=straggler_threshold,
        stall_after=stall_after,
        drawing="page" if html_file is not None else "timeline" if as_json else "",
        program=program,
        price=price,
    )
    result = snapshot.report
    advice = _advice(snapshot, program[1], price) if as_json or html_file else (None, None)
    if html_file is not None:
        from badput.report import html_report, open_output  # noqa: PLC0415

        try:
            with open_output(html_file) as out:
                out.write(html_report(snapshot, *advice))
        except OSError as exc:
            _fail("report", f"cannot write {html_file}: {exc}")
        click.echo(f"badput report: wrote {html_file}", err=True)
    from badput.report import render_table, to_json  # noqa: PLC0415 (rich is lazy)

    if as_json:
        click.echo(to_json(snapshot, extra={"advice": advice[0], "advice_absent": advice[1]}))
        if window is not None and result.total_seconds == 0:
            from badput.report import no_time_reason  # noqa: PLC0415

            click.echo(f"badput report: warning: {no_time_reason(result)}", err=True)
    else:
        render_table(snapshot, ranks=show_ranks, attempts=attempt_rows)
    if fail_under is not None:
        _gate(result, fail_under)


def _advice(snapshot: Any, devices: int | None, price: float | None) -> tuple[Any, str | None]:
    """The report's advice (JSON and HTML): ``badput advise``'s, or why there is none."""
    from badput.advice import report_advice  # noqa: PLC0415

    return report_advice(snapshot, devices=devices, price_per_device_hour=price)


def _gate(result: Any, fail_under: float) -> None:
    """``--fail-under``: exit :data:`GOODPUT_UNDER` with one line on stderr when the goodput
    is under ``fail_under`` (NaN, an empty log, is under every threshold but 0)."""
    from badput.report import format_percent, inert  # noqa: PLC0415

    goodput = result.goodput
    if goodput >= fail_under or fail_under == 0.0:
        return
    click.echo(
        f"badput report: goodput {format_percent(goodput, 2)} of {inert(result.job)} is under "
        f"--fail-under {format_percent(fail_under, 2)}",
        err=True,
    )
    sys.exit(GOODPUT_UNDER)


def _one_path(
    paths: tuple[str, ...], reference_step_time: float | None, window: tuple[float, float] | None
) -> str:
    """The one PATH of a report that is not --resiliency's (usage errors otherwise)."""
    if reference_step_time is not None:
        _fail("report", "--reference-step-time goes with --resiliency (else: --ideal-step-time)")
    if len(paths) != 1:
        if not paths:
            raise click.UsageError("Missing argument 'PATH'.")
        _fail("report", f"expected one PATH, got {len(paths)} (several files: --resiliency)")
    if window is not None and not window[0] < window[1]:
        _fail("report", f"--window: the start must be before the end, got {window[0]} {window[1]}")
    return paths[0]


def _read_and_report(
    path: str,
    job: str | None,
    *,
    now: float | None,
    window: tuple[float, float] | None,
    ideal_step_time: float | None,
    straggler_threshold: float,
    stall_after: float,
    drawing: str = "",
    program: Program = (None, None),
    price: float | None = None,
) -> Any:
    """Read the job at ``path`` (a read-progress line on a terminal) and make its snapshot
    (``drawing``: ``"page"``, with what the HTML page draws; ``"timeline"``, with its
    timeline alone: the advice's); the state read and the snapshot are left for the
    process's exit to free (:func:`_leave_for_exit`)."""
    from badput.runtime.heap import large_blocks_mapped  # noqa: PLC0415

    # A directory's job is listed by a helper process while this one imports the engine.
    ahead = _list_ahead(path, job) if os.path.isdir(path) else None
    _import_engine()
    from badput.analysis import LiveJob  # noqa: PLC0415 (the engine pulls numpy)
    from badput.engine import RankOptions  # noqa: PLC0415
    from badput.runtime.state_cache import default_state_cache  # noqa: PLC0415

    options = RankOptions(straggler_threshold=straggler_threshold, stall_floor=stall_after)
    progress = _ReadProgress(enabled=sys.stderr.isatty())
    try:
        live = LiveJob(
            path,
            job,
            ideal_step_time=ideal_step_time,
            on_progress=progress,
            rank_options=options,
            listing=ahead.result() if ahead is not None else None,
            state_cache=default_state_cache(),  # a compacted job's read, kept
        )
        live.update()
        set_program(live.accountant, program)  # program goodput
        live.accountant.price_per_device_hour = price  # the buckets in money
        # This process is ours: the report's large columns are unmapped when freed (not
        # the read's nor an HTML page's many blocks of a megabyte or two: see _heap).
        with large_blocks_mapped():
            # final: the log as it is now is the report's (a torn last line is said at once)
            result = live.report(now=now, window=window, final=True)
    except (ValueError, OSError) as exc:
        progress.done()
        _fail("report", str(exc))
    progress.done()
    snapshot = live.accountant.snapshot(now=now, report=result, drawing=drawing == "page")
    if drawing == "timeline" and result.window is None:
        snapshot = dataclasses.replace(snapshot, timeline=live.accountant.timeline(result))
    _leave_for_exit(live, snapshot)
    return snapshot


def _report_resiliency(
    paths: tuple[str, ...],
    *,
    job: str | None,
    as_json: bool,
    reference_step_time: float | None,
    now: float | None,
    ideal_step_time: float | None,
    window: tuple[float, float] | None,
) -> None:
    """``badput report --resiliency``: the resiliency library's calculator."""
    if not paths:
        raise click.UsageError("Missing argument 'PATH...' (resiliency log files).")
    if reference_step_time is None:
        _fail("report", "--resiliency needs --reference-step-time SECONDS")
    if now is not None or window is not None or ideal_step_time is not None:
        _fail("report", "--now, --window and --ideal-step-time do not apply to --resiliency")
    from badput.compat import resiliency as rs  # noqa: PLC0415

    problems: list[rs.LogProblem] = []
    try:
        events = rs.read_resiliency_log(paths, problems=problems)
        _warn_problems("report", problems)
        if job is None and len(rs.jobs_in(events)) > 1:
            names = ", ".join(rs.jobs_in(events))
            _fail("report", f"the logs hold several jobs; choose one with --job: {names}")
        result = rs.resiliency_goodput(events, reference_step_time, job)
    except (ValueError, OSError) as exc:
        _fail("report", str(exc))
    if as_json:
        from badput.report import dumps_finite  # noqa: PLC0415

        click.echo(dumps_finite(result.to_dict()))
    else:
        rs.render_table(result)


def _warn_problems(command: str, problems: list[Any]) -> None:
    """Bad lines of an imported log, one line each on stderr (they were skipped)."""
    for p in problems[:20]:
        click.echo(f"badput {command}: warning: {p} (line skipped)", err=True)
    if len(problems) > 20:
        click.echo(f"badput {command}: warning: ... and {len(problems) - 20} more", err=True)


@main.group(name="import")
def import_() -> None:
    """Import event logs written by other tools into a badput store."""


@import_.command(name="resiliency", short_help="Import resiliency.goodput_measure logs.")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--store", help=f"Store URI or directory (default: $BADPUT_STORE or {DEFAULT_STORE})."
)
@click.option("--job", help="Job of the log to import (needed when the log holds several).")
def import_resiliency(*, files: tuple[str, ...], store: str | None, job: str | None) -> None:
    """Convert resiliency.goodput_measure logs (FILE...) into badput events.

    Each start (per-node duplicates merged) becomes an attempt; checkpoint loads
    and saves become checkpoint progress. Report on it with --ideal-step-time set
    to that tool's reference step time.
    """
    from badput.compat import resiliency as rs  # noqa: PLC0415
    from badput.store import open_store  # noqa: PLC0415

    problems: list[rs.LogProblem] = []
    try:
        target = open_store(store)
        name, n = rs.import_resiliency(files, target, job, problems=problems)
    except (ValueError, OSError) as exc:
        _warn_problems("import", problems)
        _fail("import", str(exc))
    _warn_problems("import", problems)
    where = store if store is not None else target.uri
    click.echo(f"badput import: wrote {n:,} events of job {name!r} into {target.uri}")
    click.echo(
        f"Report it with: badput report {shlex.quote(where)} --job {shlex.quote(name)} "
        "--ideal-step-time SECONDS  (SECONDS: the reference step time)"
    )


@import_.command(
    name="cloud-logging",
    short_help="Import ml-goodput-measurement logs exported from Cloud Logging.",
)
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--store", help=f"Store URI or directory (default: $BADPUT_STORE or {DEFAULT_STORE})."
)
@click.option("--job", help="Import only this job (default: every job of the export).")
def import_cloud_logging(*, files: tuple[str, ...], store: str | None, job: str | None) -> None:
    """Convert Cloud Logging exports (FILE...) of ml-goodput-measurement and Orbax into events.

    Export with: gcloud logging read 'logName="projects/P/logs/LOG"' --format=json > FILE.
    Entries are put in log order (timestamp, then insertId), whatever the order of the
    files; each job start becomes an attempt. A bad entry is skipped and reported.
    """
    from badput.compat.ml_goodput_measurement import cloud_logging as cl  # noqa: PLC0415
    from badput.store import open_store  # noqa: PLC0415

    try:
        target = open_store(store)
        summary = cl.import_cloud_logging(files, target, job)
    except (ValueError, OSError) as exc:
        _fail("import", str(exc))
    for problem in summary.problems[:20]:
        click.echo(f"badput import: warning: {problem} (entry skipped)", err=True)
    if len(summary.problems) > 20:
        click.echo(f"badput import: warning: ... and {len(summary.problems) - 20} more", err=True)
    n_files = f"{summary.files} file" + ("s" if summary.files != 1 else "")
    click.echo(f"badput import: read {summary.entries:,} entries from {n_files}")
    for name, n in sorted(summary.events.items()):
        click.echo(f"badput import: wrote {n:,} events of job {name!r} into {target.uri}")
    if summary.skipped:
        reasons = ", ".join(f"{n:,} {why}" for why, n in sorted(summary.skipped.items()))
        click.echo(f"badput import: skipped {sum(summary.skipped.values()):,} entries: {reasons}")
    where = shlex.quote(store if store is not None else target.uri)
    for name in sorted(summary.events):
        click.echo(f"Report it with: badput report {where} --job {shlex.quote(name)}")


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


def _read_job(
    command: str,
    path: str,
    job: str | None,
    program: Program = (None, None),
) -> Any:
    """A LiveJob that has read the whole log at ``path`` (exits with a usage error if bad);
    a directory's job listed by a helper process while the engine is imported, as
    ``report`` lists it."""
    ahead = _list_ahead(path, job) if os.path.isdir(path) else None
    _import_engine()
    from badput.analysis import LiveJob  # noqa: PLC0415 (the engine pulls numpy)
    from badput.runtime.state_cache import default_state_cache  # noqa: PLC0415

    try:
        listing = ahead.result() if ahead is not None else None
        live = LiveJob(path, job, listing=listing, state_cache=default_state_cache())
        live.update()
    except (ValueError, OSError) as exc:
        _fail(command, str(exc))
    set_program(live.accountant, program)  # program goodput: --peak-flops, --devices
    return live


#: Diagnostics a command that shows no report (export, compare) lists on stderr.
SHOWN_DIAGNOSTICS = 5


def _note_diagnostics(command: str, report: Any, what: str = "the log") -> None:
    """Say on stderr what the report's diagnostics are, for a command whose output does not
    show them (a file written, a comparison): a number off for a reason the log gives must
    not pass unseen. Log text is shown inert."""
    from badput.report import inert  # noqa: PLC0415

    found = report.diagnostics
    if not found:
        return
    click.echo(
        f"badput {command}: {len(found)} diagnostic{'s' if len(found) != 1 else ''} "
        f"in {inert(what)} (all of them: badput report):",
        err=True,
    )
    for d in found[:SHOWN_DIAGNOSTICS]:
        click.echo(f"  {inert(str(d))}", err=True)
    if len(found) > SHOWN_DIAGNOSTICS:
        click.echo(f"  ... and {len(found) - SHOWN_DIAGNOSTICS} more", err=True)


@main.group()
def export() -> None:
    """Write a job in other formats: a Perfetto trace, CSV files."""


@export.command(name="trace")
@click.argument("path")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--job", help="Job to export (needed when PATH is a store with several jobs).")
@program_options
def export_trace(*, path: str, file: str, job: str | None, program: Program) -> None:
    """Write the job at PATH to FILE as Chrome Trace Event JSON (Perfetto, chrome://tracing).

    Attempts, recorded intervals and steps become slices; hosts become processes and
    ranks their threads. Open FILE at ui.perfetto.dev (it stays on your machine).
    """
    from badput.report import open_output, write_trace  # noqa: PLC0415

    snapshot = _read_job("export trace", path, job, program).snapshot(drawing=True)
    _note_diagnostics("export trace", snapshot.report, path)
    try:
        with open_output(file) as out:
            n = write_trace(snapshot, out)
    except OSError as exc:
        _fail("export trace", f"cannot write {file}: {exc}")
    click.echo(f"badput export trace: wrote {n} events to {file}", err=True)


@export.command(name="csv")
@click.argument("path")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--job", help="Job to export (needed when PATH is a store with several jobs).")
@program_options
@price_option
def export_csv(
    *, path: str, directory: str, job: str | None, program: Program, price: float | None = None
) -> None:
    """Write the job at PATH as CSV files into DIR: buckets, attempts, steps per attempt
    (and program goodput's figures when the log records step work or a model). With
    --price-per-device-hour, buckets and attempts get a cost column."""
    from badput.report import write_csv  # noqa: PLC0415

    live = priced(_read_job("export csv", path, job, program), price)
    snapshot = live.snapshot(drawing=True)
    _note_diagnostics("export csv", snapshot.report, path)
    try:
        files = write_csv(snapshot, directory)
    except OSError as exc:
        _fail("export csv", f"cannot write into {directory}: {exc}")
    for f in files:
        click.echo(str(f))


def _list_ahead(path: str, job: str | None) -> ListingAhead | None:
    """A helper process listing the job ``path`` designates (:mod:`badput.cli._list_ahead`)."""
    from badput.cli._list_ahead import list_ahead  # noqa: PLC0415 (only the report reads)

    return list_ahead(path, job)


def _import_engine() -> None:
    """numpy for the engine, imported with one BLAS thread: this process is the command's
    (:mod:`badput.runtime.blas` says why); the commands that read a log call this first."""
    from badput.runtime.blas import import_numpy_single_threaded  # noqa: PLC0415

    import_numpy_single_threaded()


#: What a command built that the process may leave to the operating system to free (see
#: :func:`console_main`); None when ``main`` runs inside another program (tests, ``CliRunner``).
_left_for_exit: list[object] | None = None


def _leave_for_exit(*states: object) -> None:
    """Keep ``states`` (a job's whole state) alive until :func:`console_main` ends the
    process."""
    if _left_for_exit is not None:
        _left_for_exit.extend(states)


def console_main() -> None:
    """The ``badput`` command (console script): :func:`main`, then, when the command left its
    state to the exit (``badput report``), the process ends without freeing that state one
    object at a time. A report of 10,000 attempts holds about a million objects: freeing
    them took 0.45 s after everything was printed. Output is flushed first; the exit
    status is the command's."""
    global _left_for_exit
    _left_for_exit = []
    try:
        main()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    if not _left_for_exit:
        sys.exit(code)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): Python prints it, status 1
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): nothing more to say
            code = code or 1
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()
