"""The terminal view: a rich table of the partition, attempts, steps and diagnostics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from badput.report._format import format_duration, format_percent, format_ts
from badput.report._ranks import render_ranks

if TYPE_CHECKING:
    from badput.engine import Diagnostic, Report

__all__ = ["bucket_description", "ordered_buckets", "render_table"]

PRODUCTIVE = "productive"
BAR_WIDTH = 20
WIDE = 110  # console columns from which bucket descriptions are shown
_EIGHTHS = " ▏▎▍▌▋▊▉"

_DESCRIPTIONS = {
    "productive": "kept steps at the ideal step time (goodput)",
    "slowdown": "kept steps beyond the ideal step time",
    "startup": "first steps beyond typical (compilation, warm-up)",
    "wasted": "progress lost: steps redone after a restore",
    "recovery": "down between attempts",
    "queued": "scheduled, not yet started",
    "untracked": "inside an attempt, covered by no event",
    "accelerator_init": "device and runtime initialisation",
    "training_prep": "building model, optimizer, data pipeline",
    "checkpoint_save": "blocking part of checkpoint saves",
    "checkpoint_restore": "loading checkpoints",
    "data_loading": "blocking batch loads",
    "compile": "explicit compilation",
    "elastic_reinit": "re-initialising after an elastic change",
}

_END_REASONS = {
    "job_end": "job_end",
    "last_event": "last event: the log ended without job_end (crashed or still running)",
    "now": "now: the job is still running (live query)",
}


def bucket_description(name: str) -> str:
    """A short phrase saying what bucket ``name`` holds."""
    if name in _DESCRIPTIONS:
        return _DESCRIPTIONS[name]
    base, _, sub = name.partition(":")
    if base == "custom":
        return f"custom event {sub!r}"
    if base == "elastic_wait":
        return f"waiting for capacity ({sub})"
    return ""


def ordered_buckets(buckets: dict[str, float]) -> list[tuple[str, float]]:
    """Non-zero buckets: productive first, then badput by size (largest first), then name."""
    productive = [(PRODUCTIVE, buckets[PRODUCTIVE])] if buckets.get(PRODUCTIVE, 0.0) > 0 else []
    rest = sorted(
        ((k, v) for k, v in buckets.items() if k != PRODUCTIVE and v > 0.0),
        key=lambda kv: (-kv[1], kv[0]),
    )
    return productive + rest


def _bar(fraction: float, width: int = BAR_WIDTH) -> str:
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    bar = "█" * full + (_EIGHTHS[part] if part else "")
    return bar.ljust(width)


def _ideal_line(report: Report) -> str:
    if report.ideal_step_time is None:
        return "no estimate: fewer than 5 clean steps"
    source = {
        "configured": "configured",
        "estimated": "estimated (best sustained)",
    }.get(report.ideal_step_time_source or "", report.ideal_step_time_source or "unknown source")
    return f"{format_duration(report.ideal_step_time)} ({source})"


def _step(n: int | None) -> str:
    return "-" if n is None else str(n)


def _header(report: Report) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("job", Text(report.job, style="bold cyan"))
    span = f"{format_ts(report.start)} → {format_ts(report.end)}"
    grid.add_row("span", f"{span}  ({format_duration(report.end - report.start)})")
    reason = _END_REASONS.get(report.end_reason, report.end_reason)
    if report.end_reason == "job_end" and report.attempts and report.attempts[-1].status:
        reason = f"job_end (status: {report.attempts[-1].status})"
    grid.add_row("ended by", Text(reason, style="yellow" if report.end_reason != "job_end" else ""))
    if report.window is not None:
        a, b = report.window
        grid.add_row(
            "window",
            f"{format_ts(a)} → {format_ts(b)}  ({format_duration(report.total_seconds)} "
            "of the job inside it: the percentages below are of this)",
        )
    grid.add_row("goodput", Text(format_percent(report.goodput), style="bold green"))
    grid.add_row(
        "observed goodput",
        f"{format_percent(report.observed_goodput)}  (productive + slowdown)",
    )
    return grid


def _bucket_table(report: Report, wide: bool) -> Table:
    table = Table(title="Where the time went", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("bucket", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("% of total", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    if wide:
        table.add_column("what it is", style="dim")
    total = report.total_seconds
    for name, seconds in ordered_buckets(report.buckets):
        fraction = seconds / total if total > 0 else 0.0
        style = "green" if name == PRODUCTIVE else "red"
        cells: list[str | Text] = [
            Text(name, style="bold green" if name == PRODUCTIVE else ""),
            format_duration(seconds),
            format_percent(fraction),
            Text(_bar(fraction), style=style),
        ]
        if wide:
            cells.append(bucket_description(name))
        table.add_row(*cells)
    table.add_section()
    table.add_row("total", format_duration(total), format_percent(1.0 if total > 0 else 0.0))
    return table


def _attempts_table(report: Report) -> Table:
    table = Table(title="Attempts", box=box.SIMPLE_HEAD, title_justify="left")
    for col, justify in (
        ("id", "left"),
        ("start (UTC)", "left"),
        ("duration", "right"),
        ("ended by", "left"),
        ("restored", "right"),
        ("first", "right"),
        ("last", "right"),
    ):
        wraps = col == "ended by"
        table.add_column(
            col,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=not wraps,
            overflow="fold" if wraps else "ellipsis",
        )
    for a in report.attempts:
        reason = a.end_reason
        if a.exit_code is not None:
            reason = f"{reason} (exit {a.exit_code})"
        table.add_row(
            str(a.id),
            format_ts(a.start, millis=False),
            format_duration(a.end - a.start),
            reason,
            _step(a.restore_step),
            _step(a.first_step),
            _step(a.last_step),
        )
    return table


def _details(report: Report) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    overlapped = {k: v for k, v in report.overlapped.items() if v > 0}
    if overlapped:
        text = ", ".join(f"{k} {format_duration(v)}" for k, v in sorted(overlapped.items()))
        grid.add_row("overlapped", f"{text}  (non-blocking, outside the partition)")
    grid.add_row(
        "at risk",
        f"{format_duration(report.at_risk_seconds)}  (steps after the newest checkpoint)",
    )
    s = report.steps
    grid.add_row("steps", f"kept {s.kept}, wasted {s.wasted}, last {_step(s.last)}")
    grid.add_row("ideal step time", _ideal_line(report))
    return grid


def _diagnostic(d: Diagnostic) -> str:
    where = ""
    if d.file:
        where = f"{d.file}:{d.line}: " if d.line is not None else f"{d.file}: "
    return f"{where}[{d.code}] {d.message}"


def render_table(report: Report, console: Any = None, *, ranks: bool = False) -> None:
    """Print ``report`` to ``console`` (a ``rich.console.Console``; default: stdout).

    Stalls and stragglers are always shown when there are any; ``ranks`` adds
    the per-rank table (outliers first).
    """
    con: Console = console if console is not None else Console()
    con.print(_header(report))
    con.print()
    if report.total_seconds > 0 and report.buckets:
        con.print(_bucket_table(report, wide=con.width >= WIDE))
    else:
        con.print("[yellow]no time to account for (the log holds no span)[/yellow]")
    if report.attempts:
        con.print(_attempts_table(report))
    con.print(_details(report))
    render_ranks(report, con, full=ranks)
    if report.diagnostics:
        con.print()
        con.print(Text(f"Diagnostics ({len(report.diagnostics)})", style="bold yellow"))
        for d in report.diagnostics:
            con.print(Text(f"  {_diagnostic(d)}"), soft_wrap=True)
