"""Views of a :class:`~badput.engine.Report`: a terminal table, JSON, HTML, the watch view,
a trace and CSV files, the job list and comparison, human durations.

Views render what the engine computed; they compute no accounting. rich is
imported only when a table is rendered, and ``import badput`` never imports this
package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from badput.report._format import (
    MAX_ATTEMPT_ROWS,
    format_duration,
    format_money,
    format_percent,
    format_ts,
    inert,
)
from badput.report._json import dumps_finite, report_of, to_json
from badput.runtime.lazy import lazy_attributes

if TYPE_CHECKING:
    from badput.engine import Report, Snapshot
    from badput.report._csv import write_csv
    from badput.report._jobs import (
        JobRow,
        compare_dict,
        job_row,
        render_compare,
        render_jobs,
        sort_rows,
    )
    from badput.report._table import no_time_reason
    from badput.report._trace import write_trace
    from badput.report._watch import render_watch, run_watch, status_line

__all__ = [
    "MAX_ATTEMPT_ROWS",
    "JobRow",
    "compare_dict",
    "dumps_finite",
    "format_duration",
    "format_money",
    "format_percent",
    "format_ts",
    "html_report",
    "inert",
    "job_row",
    "no_time_reason",
    "open_output",
    "render_compare",
    "render_jobs",
    "render_table",
    "render_watch",
    "report_of",
    "run_watch",
    "sort_rows",
    "status_line",
    "to_json",
    "write_csv",
    "write_trace",
]

# Names whose module pulls rich or numpy: loaded on first use, so that the CLI's start-up
# (and ``badput report --json``) imports neither until a view needs it.
_LAZY = {
    "no_time_reason": "badput.report._table",
    "open_output": "badput.report._output",
    "status_line": "badput.report._watch",
    "render_watch": "badput.report._watch",
    "run_watch": "badput.report._watch",
    "write_trace": "badput.report._trace",
    "write_csv": "badput.report._csv",
    "JobRow": "badput.report._jobs",
    "job_row": "badput.report._jobs",
    "sort_rows": "badput.report._jobs",
    "render_jobs": "badput.report._jobs",
    "compare_dict": "badput.report._jobs",
    "render_compare": "badput.report._jobs",
}

__getattr__ = lazy_attributes(__name__, _LAZY)


def render_table(
    view: Snapshot | Report,
    console: Any = None,
    *,
    ranks: bool = False,
    attempts: int | None = MAX_ATTEMPT_ROWS,
) -> None:
    """Print the report of ``view`` (a snapshot, or a report alone) as a rich table to
    ``console`` (default: a new stdout console).

    ``console`` is a ``rich.console.Console``; pass one created with
    ``record=True`` to capture the text. ``ranks``: add the per-rank table
    (stalls and stragglers are shown whenever there are any). ``attempts``: most
    attempts listed, the first and the last half of them, with a row saying how many
    are left out between (``None``: every attempt).
    """
    from badput.report._table import render_table as _render  # noqa: PLC0415 (rich is lazy)

    _render(report_of(view), console, ranks=ranks, attempts=attempts)


def html_report(
    snapshot: Snapshot, advice: Mapping[str, Any] | None = None, advice_absent: str | None = None
) -> str:
    """The self-contained HTML page of ``snapshot`` (``badput report --html``), made with
    its timeline: ``LiveJob.snapshot(drawing=True)`` or ``Accountant.snapshot(drawing=True)``.
    ``advice``: its Advice section (``badput.advice.report_advice``), or why there is none
    (``advice_absent``). See :mod:`badput.report._html`."""
    from badput.report._html import html_report as _html  # noqa: PLC0415 (numpy is lazy)

    return _html(snapshot, advice, advice_absent)
