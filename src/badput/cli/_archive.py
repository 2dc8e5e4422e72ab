"""``badput compact`` (registered on :func:`badput.cli._commands.main`): parsing and
printing; the work is :func:`badput.store.compact`'s."""

from __future__ import annotations

import json

import click

from badput.cli._commands import _fail, main


@main.command(short_help="Write a job's events as a columnar archive (Parquet).")
@click.argument("job", metavar="JOB")
@click.option(
    "--store", metavar="S", help="The store holding JOB (then JOB is a job's name, not a path)."
)
@click.option(
    "--replace",
    is_flag=True,
    help="Remove the event files the archive covers whole, once it is written and read back.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was done as one JSON object.")
def compact(job: str, store: str | None, replace: bool, as_json: bool) -> None:
    """Write JOB's events, and the lines that are not events, as one Parquet file beside its
    JSON lines (docs/archive.md). Every reader (report, watch, jobs, compare, export) then
    reads the archive and whatever was appended to the JSON lines after it."""
    from badput.runtime.optional import MissingExtraError  # noqa: PLC0415
    from badput.store import compact as compact_job  # noqa: PLC0415
    from badput.store import open_source, open_store  # noqa: PLC0415

    try:
        source, name = open_source(open_store(store), job) if store else open_source(job)
        done = compact_job(source, name, replace=replace)
    except (ValueError, MissingExtraError) as exc:
        _fail("compact", str(exc))
    except OSError as exc:
        _fail("compact", f"could not write the archive: {exc}")
    if as_json:
        out = {
            "archive": str(done.path),
            "rows": done.rows,
            "malformed": done.errors,
            "archive_bytes": done.archive_bytes,
            "jsonl_bytes": done.covered_bytes,
            "removed": list(done.removed),
            "kept": list(done.kept),
        }
        click.echo(json.dumps(out, ensure_ascii=False))
        return
    ratio = done.archive_bytes / done.covered_bytes if done.covered_bytes else 0.0
    click.echo(
        f"{done.path}: {done.rows:,} lines ({done.errors:,} malformed), "
        f"{done.archive_bytes:,} bytes for {done.covered_bytes:,} of JSON lines ({ratio:.1%})"
    )
    if replace:
        click.echo(f"removed {len(done.removed):,} files; kept {len(done.kept):,}")
        for path in done.kept:
            click.echo(f"  kept (not covered whole): {path}")
