"""The fleet's tidy tables (Arrow, written as Parquet) and SQL over them (DuckDB, in
process). Both are the ``badput[fleet]`` extra, imported here on first use.

Tables, one row per:

- ``jobs``: job (its result's scalars: span, seconds, goodput, attempts, failures);
- ``attempts``: job and attempt;
- ``buckets``: job and bucket (seconds, share of the job's time);
- ``days``: job and UTC day (seconds, goodput seconds).

Column names and types are fixed (docs/fleet.md), so Spark and BigQuery load the files as
they are. Every table has a ``cost`` column: the row's time on the job's devices at the price
per device-hour given (null without one, or when the log names no device); ``jobs`` also
has ``devices`` and ``badput_cost``."""

from __future__ import annotations

import os
from typing import Any, Final

from badput.fleet._job import JobResult
from badput.fleet._summary import job_money
from badput.runtime.optional import import_optional

__all__ = [
    "TABLES",
    "fleet_tables",
    "query_parquet_url",
    "query_tables",
    "read_tables",
    "write_parquet",
]

TABLES: Final = ("jobs", "attempts", "buckets", "days")


def _pa() -> Any:
    return import_optional("pyarrow", "fleet")


def _schemas(pa: Any) -> dict[str, Any]:
    f64, i64, s = pa.float64(), pa.int64(), pa.string()
    return {
        "jobs": pa.schema(
            [
                ("job", s),
                ("status", s),
                ("error", s),
                ("start", f64),
                ("end", f64),
                ("end_reason", s),
                ("total_seconds", f64),
                ("goodput_seconds", f64),
                ("badput_seconds", f64),
                ("goodput", f64),
                ("attempts", i64),
                ("failures", i64),
                ("steps_kept", i64),
                ("steps_wasted", i64),
                ("ranks", i64),
                ("diagnostics", i64),
                ("devices", i64),
                ("cost", f64),
                ("badput_cost", f64),
            ]
        ),
        "attempts": pa.schema(
            [
                ("job", s),
                ("attempt", s),
                ("attempt_index", i64),
                ("start", f64),
                ("end", f64),
                ("seconds", f64),
                ("status", s),
                ("exit_code", i64),
                ("end_reason", s),
                ("failed", pa.bool_()),
                ("cost", f64),
            ]
        ),
        "buckets": pa.schema(
            [("job", s), ("bucket", s), ("seconds", f64), ("share", f64), ("cost", f64)]
        ),
        "days": pa.schema(
            [
                ("job", s),
                ("day", pa.date32()),
                ("seconds", f64),
                ("goodput_seconds", f64),
                ("cost", f64),
            ]
        ),
    }


def _rows(results: list[JobResult], price: float | None) -> dict[str, list[dict[str, Any]]]:
    from datetime import date  # noqa: PLC0415

    out: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    for r in results:
        job, total = r["job"], r["total_seconds"]
        out["jobs"].append(
            {
                "job": job,
                "status": r["status"],
                "error": r["error"],
                "start": r["start"],
                "end": r["end"],
                "end_reason": r["end_reason"],
                "total_seconds": total,
                "goodput_seconds": r["goodput_seconds"],
                "badput_seconds": total - r["goodput_seconds"],
                "goodput": r["goodput_seconds"] / total if total > 0 else 0.0,
                "attempts": len(r["attempts"]),
                "failures": sum(a["failed"] for a in r["attempts"]),
                "steps_kept": r["steps_kept"],
                "steps_wasted": r["steps_wasted"],
                "ranks": r["ranks"],
                "diagnostics": r["diagnostics"],
                "devices": r.get("devices"),
                "cost": job_money(r, total, price),
                "badput_cost": job_money(r, total - r["goodput_seconds"], price),
            }
        )
        for i, a in enumerate(r["attempts"]):
            out["attempts"].append(
                {
                    "job": job,
                    "attempt": a["id"],
                    "attempt_index": i,
                    "start": a["start"],
                    "end": a["end"],
                    "seconds": a["end"] - a["start"],
                    "status": a["status"],
                    "exit_code": a["exit_code"],
                    "end_reason": a["end_reason"],
                    "failed": a["failed"],
                    "cost": job_money(r, a["end"] - a["start"], price),
                }
            )
        for bucket, seconds in r["buckets"].items():
            out["buckets"].append(
                {
                    "job": job,
                    "bucket": bucket,
                    "seconds": seconds,
                    "share": seconds / total if total > 0 else 0.0,
                    "cost": job_money(r, seconds, price),
                }
            )
        for d in r["days"]:
            out["days"].append(
                {
                    "job": job,
                    "day": date.fromisoformat(d["day"]),
                    "seconds": d["seconds"],
                    "goodput_seconds": d["goodput_seconds"],
                    "cost": job_money(r, d["seconds"], price),
                }
            )
    return out


def fleet_tables(results: list[JobResult], price: float | None = None) -> dict[str, Any]:
    """The four tidy tables of ``results`` as ``pyarrow.Table`` s, by name; ``price``: per
    device-hour, for their ``cost`` columns (null without it)."""
    pa = _pa()
    schemas = _schemas(pa)
    return {
        name: pa.Table.from_pylist(rows, schema=schemas[name])
        for name, rows in _rows(results, price).items()
    }


def _filesystem(where: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``where`` (a local directory, or a URL such as
    ``s3://bucket/prefix``) and the path on it."""
    fsspec = import_optional("fsspec", "fleet")
    fs, path = fsspec.core.url_to_fs(where)
    return fs, path


def write_parquet(tables: dict[str, Any], where: str | os.PathLike[str]) -> list[str]:
    """Each table as ``<where>/<name>.parquet`` (a directory, made if missing, or an fsspec
    URL: ``s3://bucket/prefix``, ``memory://fleet``...). Returns the paths written."""
    pq = import_optional("pyarrow.parquet", "fleet")
    fs, base = _filesystem(os.fspath(where))
    fs.makedirs(base, exist_ok=True)
    written = []
    for name, table in tables.items():
        path = f"{base.rstrip('/')}/{name}.parquet"
        with fs.open(path, "wb") as f:
            pq.write_table(table, f)
        written.append(path)
    return written


def read_tables(where: str | os.PathLike[str]) -> dict[str, Any]:
    """The tables :func:`write_parquet` wrote at ``where`` (those present), by name."""
    pq = import_optional("pyarrow.parquet", "fleet")
    fs, base = _filesystem(os.fspath(where))
    out = {}
    for name in TABLES:
        path = f"{base.rstrip('/')}/{name}.parquet"
        if fs.exists(path):
            with fs.open(path, "rb") as f:
                out[name] = pq.read_table(f)
    if not out:
        raise ValueError(f"{where}: no fleet tables ({', '.join(TABLES)}.parquet) there")
    return out


def query_tables(sql: str, tables: dict[str, Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """``sql`` run by DuckDB in this process over ``tables`` (each registered as a view of
    its name): the column names and the rows."""
    duckdb = import_optional("duckdb", "fleet")
    con = duckdb.connect(":memory:")
    try:
        for name, table in tables.items():
            con.register(name, table)
        cursor = con.execute(sql)
        columns = [d[0] for d in cursor.description or ()]
        return columns, cursor.fetchall()
    finally:
        con.close()


def query_parquet_url(sql: str, where: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """``sql`` over the Parquet tables at the fsspec URL ``where``, read by DuckDB itself
    through that filesystem (``duckdb.register_filesystem``: DuckDB's own httpfs extension
    is downloaded at run time, which these machines cannot). Each table is a view of its
    name over ``read_parquet('<where>/<name>.parquet')``."""
    duckdb = import_optional("duckdb", "fleet")
    fs, base = _filesystem(where)
    con = duckdb.connect(":memory:")
    try:
        con.register_filesystem(fs)
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        for name in TABLES:
            path = f"{base.rstrip('/')}/{name}.parquet"
            if fs.exists(path):
                url = f"{protocol}://{path.lstrip('/')}" if protocol != "file" else path
                quoted = url.replace("'", "''")
                con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{quoted}')")
        cursor = con.execute(sql)
        columns = [d[0] for d in cursor.description or ()]
        return columns, cursor.fetchall()
    finally:
        con.close()
