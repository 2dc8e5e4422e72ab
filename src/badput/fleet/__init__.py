"""The fleet: every job of a store at once (``badput fleet``, docs/fleet.md).

- :func:`analyse_fleet`: each job's analysis (a pure function of its files, cached by
  what it read) on a process pool, Ray tasks, or this process; a large job read in parts;
- :func:`fleet_summary`: time-weighted goodput, time lost by cause, worst jobs, failures
  and MTBF per week, goodput per day;
- :func:`fleet_tables`, :func:`write_parquet`, :func:`query_tables`: the tidy tables
  (``badput[fleet]``: pyarrow, DuckDB);
- :func:`render_fleet`, :func:`fleet_html`: the terminal table and the HTML page.
"""

from badput.fleet._cache import ResultCache, default_cache_dir
from badput.fleet._engine import ENGINES, SPLIT_BYTES, FleetRun, analyse_fleet, run_batch, run_task
from badput.fleet._job import (
    JobResult,
    analyse_job,
    failed_attempts,
    job_fingerprint,
    job_result,
)
from badput.fleet._pages import write_job_pages
from badput.fleet._render import fleet_html, job_page_name, render_fleet
from badput.fleet._summary import WORST_JOBS, fleet_summary
from badput.fleet._tables import (
    TABLES,
    fleet_tables,
    query_parquet_url,
    query_tables,
    read_tables,
    write_parquet,
)

__all__ = [
    "ENGINES",
    "SPLIT_BYTES",
    "TABLES",
    "WORST_JOBS",
    "FleetRun",
    "JobResult",
    "ResultCache",
    "analyse_fleet",
    "analyse_job",
    "default_cache_dir",
    "failed_attempts",
    "fleet_html",
    "fleet_summary",
    "fleet_tables",
    "job_fingerprint",
    "job_page_name",
    "job_result",
    "query_parquet_url",
    "query_tables",
    "read_tables",
    "render_fleet",
    "run_batch",
    "run_task",
    "write_job_pages",
    "write_parquet",
]
