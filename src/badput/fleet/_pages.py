"""Each job's own report page beside the fleet page (``badput fleet --html-jobs DIR``),
drawn by the job report's renderer (:func:`badput.report.html_report`), named by a digest
of the job's name (:func:`~badput.fleet._render.job_page_name`)."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from badput.fleet._engine import pool_context
from badput.fleet._render import job_page_name
from badput.store import EventStore

__all__ = ["write_job_pages"]


def _write_page(args: tuple[EventStore, str, str]) -> str:
    from badput.analysis import LiveJob  # noqa: PLC0415
    from badput.report import html_report  # noqa: PLC0415

    store, job, directory = args
    live = LiveJob(store, job, parallel=False)
    live.update()
    path = Path(directory) / job_page_name(job)
    path.write_text(html_report(live.snapshot(final=True, drawing=True)), encoding="utf-8")
    return str(path)


def write_job_pages(
    sources: list[tuple[EventStore, str]], directory: str | os.PathLike[str], workers: int = 1
) -> list[str]:
    """The report page of each job of ``sources`` written into ``directory`` (made if
    missing), on ``workers`` processes. Returns the paths written."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    todo = [(store, job, os.fspath(directory)) for store, job in sources]
    if workers <= 1 or len(todo) <= 1:
        return [_write_page(t) for t in todo]
    with ProcessPoolExecutor(workers, mp_context=pool_context(s for s, _ in sources)) as pool:
        return list(pool.map(_write_page, todo))
