"""``badput jobs`` and ``badput compare`` (registered on :func:`badput.cli._commands.main`):
views of several reports; the work is :mod:`badput.report`'s."""

from __future__ import annotations

import os
import time

import click

from badput.cli._commands import (
    _fail,
    _import_engine,
    _note_diagnostics,
    _read_job,
    main,
)
from badput.cli._cost import price_option, priced
from badput.cli._types import Program, program_options, set_program
from badput.runtime.env import BADPUT_STORE, DEFAULT_STORE


@main.command()
@click.argument("store", required=False, default=None)
@click.option(
    "--sort",
    "sort_key",
    type=click.Choice(
        [
            "job",
            "status",
            "start",
            "span",
            "goodput",
            "observed",
            "attempts",
            "last-event",
            "mfu",
            "mpg",
        ]
    ),
    default="start",
    show_default=True,
    help="Column to sort by.",
)
@click.option("--reverse", is_flag=True, help="Sort in descending order.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@program_options
@price_option
def jobs(
    *,
    store: str | None,
    sort_key: str,
    reverse: bool,
    as_json: bool,
    program: Program = (None, None),
    price: float | None = None,
) -> None:
    """List every job of STORE (default: $BADPUT_STORE or ./badput-runs).

    Per job: status (the state badput watch shows: the status of its job_end once it
    finished; running; hung: no rank made progress past the stall threshold, or its
    last attempt was killed hung; restarting; down: not even a heartbeat for longer than
    the recorded hang timeout, else max(60 s, 3 x the typical step)), span, goodput,
    observed goodput, attempts and the time of its last event.
    """
    _import_engine()
    from badput.analysis import LiveJob  # noqa: PLC0415
    from badput.report import JobRow, job_row, render_jobs, sort_rows  # noqa: PLC0415
    from badput.store import job_sources  # noqa: PLC0415

    root = store or os.environ.get(BADPUT_STORE) or DEFAULT_STORE
    sources = []
    # The default store not made yet has no jobs; a URI is always asked.
    if store is not None or "://" in root or os.path.exists(root):
        try:
            sources = job_sources(root)
        except (ValueError, OSError) as exc:
            _fail("jobs", str(exc))
    now = time.time()
    rows = []
    for opened, name in sources:
        try:
            live = priced(LiveJob(opened, name), price)
            live.update()
            set_program(live.accountant, program)
            snapshot = live.snapshot()
            state = snapshot.state(now)
            if state.state == "running":  # hung: a stall going on now, as watch says
                state = live.snapshot(now=now).state(now)
            rows.append(job_row(snapshot.report.job or name, snapshot, now, state))
        except (ValueError, OSError) as exc:
            rows.append(JobRow(name, "error", None, 0.0, 0.0, 0.0, 0, None, str(exc)))
    rows = sort_rows(rows, sort_key, reverse)
    if as_json:
        from badput.report import dumps_finite  # noqa: PLC0415

        click.echo(dumps_finite([r.to_dict() for r in rows]))
        return
    from rich.console import Console  # noqa: PLC0415

    if not rows:
        click.echo(f"no jobs in {root}")
        return
    render_jobs(rows, Console())


@main.command()
@click.argument("job_a", metavar="JOB_A")
@click.argument("job_b", metavar="JOB_B")
@click.option(
    "--store",
    help="JOB_A and JOB_B are job names in this store (else each is a job path: a job "
    "directory, a .jsonl file, or a store holding one job).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@program_options
@price_option
def compare(
    *,
    job_a: str,
    job_b: str,
    store: str | None,
    as_json: bool,
    program: Program = (None, None),
    price: float | None = None,
) -> None:
    """Two jobs side by side: goodput, totals and every bucket, with B minus A."""
    from badput.report import compare_dict, render_compare  # noqa: PLC0415

    if store is not None:
        a = priced(_read_job("compare", store, job_a, program), price).snapshot()
        b = priced(_read_job("compare", store, job_b, program), price).snapshot()
    else:
        a = priced(_read_job("compare", job_a, None, program), price).snapshot()
        b = priced(_read_job("compare", job_b, None, program), price).snapshot()
    _note_diagnostics("compare", a.report, f"JOB_A ({job_a})")
    _note_diagnostics("compare", b.report, f"JOB_B ({job_b})")
    if as_json:
        from badput.report import dumps_finite  # noqa: PLC0415

        click.echo(dumps_finite(compare_dict(a, b)))
        return
    from rich.console import Console  # noqa: PLC0415

    render_compare(a, b, Console())
