"""Views of a :class:`~badput.engine.Report`: a terminal table, JSON, human durations.

Views render what the engine computed; they compute no accounting. rich is
imported only when a table is rendered, and ``import badput`` never imports this
package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from badput.report._format import MAX_ATTEMPT_ROWS, format_duration, format_percent, format_ts
from badput.report._json import to_json

if TYPE_CHECKING:
    from badput.engine import Accountant, Report

__all__ = [
    "MAX_ATTEMPT_ROWS",
    "format_duration",
    "format_percent",
    "format_ts",
    "html_report",
    "render_table",
    "to_json",
]


def render_table(
    report: Report,
    console: Any = None,
    *,
    ranks: bool = False,
    attempts: int | None = MAX_ATTEMPT_ROWS,
) -> None:
    """Print ``report`` as a rich table to ``console`` (default: a new stdout console).

    ``console`` is a ``rich.console.Console``; pass one created with
    ``record=True`` to capture the text. ``ranks``: add the per-rank table
    (stalls and stragglers are shown whenever there are any). ``attempts``: most
    attempts listed, the first and the last half of them, with a row saying how many
    are left out between (``None``: every attempt).
    """
    from badput.report._table import render_table as _render  # noqa: PLC0415 (rich is lazy)

    _render(report, console, ranks=ranks, attempts=attempts)


def html_report(accountant: Accountant, report: Report | None = None) -> str:
    """The self-contained HTML page of the job ``accountant`` ingested (``badput report
    --html``); ``report`` defaults to the whole job. See :mod:`badput.report._html`."""
    from badput.report._html import html_report as _html  # noqa: PLC0415 (numpy is lazy)

    return _html(accountant, report)
