"""``badput fleet`` (registered on :func:`badput.cli._commands.main`): parsing and printing;
the work is :mod:`badput.fleet`'s."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click

from badput.cli._commands import _fail, _import_engine, main
from badput.cli._cost import price_option


def _print_rows(columns: list[str], rows: list[tuple[Any, ...]], as_json: bool) -> None:
    if as_json:
        out = [dict(zip(columns, row, strict=True)) for row in rows]
        click.echo(json.dumps(out, default=str, ensure_ascii=False))
        return
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    from badput.report import inert  # noqa: PLC0415

    table = Table()
    for c in columns:
        table.add_column(Text(inert(c)))
    for row in rows:
        table.add_row(*(Text(inert("NULL" if v is None else v)) for v in row))
    Console().print(table)


def _query_tables_only(sql: str | None, tables: str, as_json: bool) -> None:
    """``--tables DIR --sql QUERY``: the query over Parquet tables written before."""
    from badput import fleet as fl  # noqa: PLC0415
    from badput.runtime.optional import MissingExtraError  # noqa: PLC0415

    if sql is None:
        _fail("fleet", "--tables needs --sql")
    try:
        columns, rows = fl.query_parquet_url(sql, tables)
    except (MissingExtraError, ValueError, OSError) as exc:
        _fail("fleet", str(exc))
    except Exception as exc:
        _fail("fleet", f"--sql: {exc}")
    _print_rows(columns, rows, as_json)


@main.command()
@click.argument("store", metavar="STORE", required=False)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray", "serial"]),
    default="local",
    show_default=True,
    help="local: a process pool; ray: Ray tasks (RAY_ADDRESS, else a local Ray); serial.",
)
@click.option("--workers", type=click.IntRange(min=1), help="Processes of --engine local.")
@click.option(
    "--split-mb",
    type=click.IntRange(min=0),
    default=256,
    show_default=True,
    help="Read a job of this many MiB or more as several tasks, merged (0: never).",
)
@click.option(
    "--cache", "cache_dir", metavar="DIR", help="Result cache (default ~/.cache/badput/fleet)."
)
@click.option("--no-cache", is_flag=True, help="Analyse every job; keep nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (or --sql's rows).")
@click.option("--html", "html_file", metavar="FILE", help="Write the fleet's HTML page.")
@click.option("--html-jobs", metavar="DIR", help="Write the listed jobs' report pages, linked.")
@click.option("--parquet", metavar="DIR", help="Write the tidy tables as Parquet (dir or URL).")
@click.option("--sql", metavar="QUERY", help="Run QUERY over the tables (DuckDB) and print it.")
@click.option("--tables", metavar="DIR", help="With --sql: query these Parquet tables, no STORE.")
@click.option("--worst", type=click.IntRange(min=0), default=10, show_default=True)
@price_option
def fleet(  # noqa: PLR0917
    store: str | None,
    engine: str,
    workers: int | None,
    split_mb: int,
    cache_dir: str | None,
    no_cache: bool,
    as_json: bool,
    html_file: str | None,
    html_jobs: str | None,
    parquet: str | None,
    sql: str | None,
    tables: str | None,
    worst: int,
    price: float | None = None,
) -> None:
    """Every job of STORE at once: the fleet's goodput (time-weighted), time lost by
    cause, the worst jobs, failures and MTBF per week, goodput per day. See docs/fleet.md.
    With --price-per-device-hour, each in money too (each job on its log's devices).

    Each job's result is cached by the names, sizes and times of the files it read: a
    second run over an unchanged store analyses nothing.
    """
    from badput import fleet as fl  # noqa: PLC0415
    from badput.runtime.optional import MissingExtraError  # noqa: PLC0415

    if tables is not None:
        _query_tables_only(sql, tables, as_json)
        return
    if store is None:
        _fail("fleet", "give a STORE (or --tables DIR with --sql)")
    _import_engine()
    cache = None
    if not no_cache:
        uri = os.path.abspath(store) if "://" not in store else store
        cache = fl.ResultCache(cache_dir or fl.default_cache_dir(), uri)
    started = time.perf_counter()
    try:
        run = fl.analyse_fleet(
            store,
            engine=engine,  # type: ignore[arg-type]
            workers=workers,
            cache=cache,
            split_bytes=split_mb * 1024 * 1024 if split_mb else None,
        )
    except (MissingExtraError, ValueError, OSError) as exc:
        _fail("fleet", str(exc))
    click.echo(
        f"fleet: {len(run.results)} jobs, {run.analysed} analysed, {run.cached} from the cache, "
        f"{time.perf_counter() - started:.2f} s",
        err=True,
    )
    summary = fl.fleet_summary(run.results, source=store, worst=worst, price=price)
    try:
        _outputs(
            fl,
            run,
            summary,
            parquet=parquet,
            html_file=html_file,
            html_jobs=html_jobs,
            workers=workers,
        )
        if sql is not None:
            columns, rows = fl.query_tables(sql, fl.fleet_tables(run.results, price))
            _print_rows(columns, rows, as_json)
            return
    except (MissingExtraError, OSError) as exc:
        _fail("fleet", str(exc))
    except Exception as exc:
        _fail("fleet", f"--sql: {exc}")
    if as_json:
        from badput.report import dumps_finite  # noqa: PLC0415

        click.echo(dumps_finite(summary))
        return
    if html_file is None and parquet is None:
        from rich.console import Console  # noqa: PLC0415

        fl.render_fleet(summary, Console())


def _outputs(
    fl: Any,
    run: Any,
    summary: dict[str, Any],
    *,
    parquet: str | None,
    html_file: str | None,
    html_jobs: str | None,
    workers: int | None,
) -> None:
    if parquet is not None:
        fl.write_parquet(fl.fleet_tables(run.results, summary["price_per_device_hour"]), parquet)
    if html_file is None:
        return
    links = None
    if html_jobs is not None:
        listed = {row["job"] for row in summary["worst_jobs"]}
        fl.write_job_pages(
            [s for s in run.sources if s[1] in listed], html_jobs, workers or os.cpu_count() or 1
        )
        links = os.path.relpath(html_jobs, os.path.dirname(os.path.abspath(html_file)))
        links = links.replace(os.sep, "/")
    with open(html_file, "w", encoding="utf-8") as f:
        f.write(fl.fleet_html(summary, job_links=links))
    print(f"wrote {html_file}", file=sys.stderr)
