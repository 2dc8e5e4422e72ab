"""``badput advise`` and ``badput whatif`` (registered on :func:`badput.cli._commands.main`):
parsing and printing; the work is :mod:`badput.advice`'s."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from badput.cli._commands import _fail, main
from badput.cli._types import FiniteRange

if TYPE_CHECKING:
    from badput.advice import JobFacts
    from badput.engine import Report


def _read(command: str, path: str, job: str | None, ideal: float | None) -> tuple[Report, JobFacts]:
    from badput.advice import read_job  # noqa: PLC0415 (the engine pulls numpy)

    try:
        return read_job(path, job, ideal_step_time=ideal)
    except (ValueError, OSError) as exc:
        _fail(command, str(exc))


_job = click.option("--job", help="Job to read (needed when PATH is a store with several jobs).")
_json = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
_ideal = click.option(
    "--ideal-step-time",
    type=FiniteRange(min=0.0, min_open=True),
    metavar="SECONDS",
    help="Configured ideal step time (default: estimated).",
)
_price = click.option(
    "--price-per-device-hour",
    type=FiniteRange(min=0.0),
    metavar="PRICE",
    help="Turn the time each change gives back into money.",
)


@main.command()
@click.argument("paths", metavar="PATH...", nargs=-1, required=True)
@_job
@_json
@_ideal
@_price
@click.option(
    "--devices",
    type=click.IntRange(min=1),
    help="Devices the job ran on (default: the log's model event, else its ranks).",
)
@click.option(
    "--fleet",
    is_flag=True,
    help="PATH is a store: pool the failure rate over its jobs (each keeps its own costs).",
)
def advise(
    *,
    paths: tuple[str, ...],
    job: str | None,
    as_json: bool,
    ideal_step_time: float | None,
    price_per_device_hour: float | None,
    devices: int | None,
    fleet: bool = False,
) -> None:
    """What to change in the job at PATH, and what each change would buy.

    The measured failure rate (with its 95 % interval), checkpoint, restore and restart
    costs, the recommended checkpoint interval (Young / Daly) beside the current one,
    and the other levers. With several PATHs (jobs), or --fleet and a store, the failure
    rate is pooled over the jobs. See docs/advice.md.
    """
    from badput.advice import advise_of, devices_of, render_advice  # noqa: PLC0415

    if fleet or len(paths) > 1:
        _advise_pooled(
            paths, job, fleet, as_json, (ideal_step_time, devices, price_per_device_hour)
        )
        return
    path = paths[0]
    report, facts = _read("advise", path, job, ideal_step_time)
    try:
        advice = advise_of(
            report,
            facts,
            devices=devices if devices is not None else devices_of(report),
            price_per_device_hour=price_per_device_hour,
        )
    except ValueError as exc:
        _fail("advise", str(exc))
    if as_json:
        click.echo(json.dumps({"job": advice.job, "advice": advice.to_dict()}, allow_nan=False))
    else:
        click.echo(render_advice(advice))


def _advise_pooled(
    paths: tuple[str, ...],
    job: str | None,
    fleet: bool,
    as_json: bool,
    settings: tuple[float | None, int | None, float | None],
) -> None:
    """``badput advise --fleet STORE [--job J]`` or ``badput advise JOB JOB...``: the
    failure rate pooled over the jobs (each one's advice with its own costs; with --job,
    that job's alone)."""
    from badput.advice import advise_pooled, render_advice  # noqa: PLC0415
    from badput.report import dumps_finite  # noqa: PLC0415
    from badput.store import job_sources  # noqa: PLC0415 (as badput fleet lists a store)

    if fleet and len(paths) != 1:
        _fail("advise", f"--fleet takes one PATH (a store), got {len(paths)}")
    if job is not None and not fleet:
        _fail("advise", "--job goes with one PATH (several PATHs are each a job)")
    ideal, devices, price = settings
    try:
        jobs: list[tuple[Any, str | None]] = [(p, None) for p in paths]
        if fleet:
            jobs = list(job_sources(paths[0]))
        rate, advice = advise_pooled(
            jobs, ideal_step_time=ideal, devices=devices, price_per_device_hour=price
        )
    except (ValueError, OSError) as exc:
        _fail("advise", str(exc))
    if job is not None:  # --fleet --job: that job's advice, the rate pooled over the store's
        advice = [a for a in advice if a.job == job]
        if not advice:
            _fail("advise", f"no job {job!r} in {paths[0]}")
    if as_json:
        pooled = {**asdict(rate), "mtbf_hours": rate.mtbf_hours, "jobs": advice[0].pooled_jobs}
        out = {"pooled": pooled, "jobs": [{"job": a.job, "advice": a.to_dict()} for a in advice]}
        click.echo(dumps_finite(out, indent=None))
        return
    click.echo("\n\n".join(render_advice(a) for a in advice))


@main.command()
@click.argument("path", metavar="PATH")
@_job
@_json
@_ideal
@click.option(
    "--checkpoint-every",
    type=click.IntRange(min=1),
    metavar="STEPS",
    help="Save after every step that is a multiple of STEPS (default: as the log saved).",
)
@click.option(
    "--save-cost",
    type=FiniteRange(min=0.0),
    metavar="SECONDS",
    help="Seconds a save blocks (with --async-save: the part that still blocks).",
)
@click.option(
    "--restart-cost",
    type=FiniteRange(min=0.0),
    metavar="SECONDS",
    help="Seconds from a failure to the next attempt's start (default: as in the log).",
)
@click.option("--async-save", is_flag=True, help="Saves run in the background.")
def whatif(
    *,
    path: str,
    job: str | None,
    as_json: bool,
    ideal_step_time: float | None,
    checkpoint_every: int | None,
    save_cost: float | None,
    restart_cost: float | None,
    async_save: bool,
) -> None:
    """Replay the job at PATH under other checkpoint and restart settings.

    The same failures at the same wall-clock times; progress lost back to the newest
    checkpoint under the new interval; restarts with the new cost. The buckets are
    printed beside the real run's. With no option, the job's own report.
    """
    from badput.advice import ReplaySettings, render_whatif, whatif_of  # noqa: PLC0415

    report, facts = _read("whatif", path, job, ideal_step_time)
    settings = ReplaySettings(checkpoint_every, save_cost, restart_cost, async_save)
    try:
        result = whatif_of(report, facts, settings)
    except ValueError as exc:
        _fail("whatif", str(exc))
    if as_json:
        click.echo(json.dumps(result.to_dict(), allow_nan=False))
    else:
        click.echo(render_whatif(result))
