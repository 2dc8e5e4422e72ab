"""The terminal view: a rich table of the partition, attempts, steps and diagnostics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from badput.engine import MAX_NAMED_BUCKETS, GroupedBuckets, group_buckets
from badput.report._format import (
    MAX_ATTEMPT_ROWS,
    format_duration,
    format_money,
    format_percent,
    format_ts,
    inert,
)
from badput.report._program import program_table
from badput.report._ranks import render_ranks

if TYPE_CHECKING:
    from badput.engine import AttemptSummary, Diagnostic, Report

__all__ = [
    "bucket_description",
    "fold_buckets",
    "grouped_note",
    "log_text",
    "ordered_buckets",
    "render_table",
]

PRODUCTIVE = "productive"
BAR_WIDTH = 20
WIDE = 110  # console columns from which bucket descriptions are shown
#: Most bucket rows shown; the smallest of the rest are folded into one row.
MAX_BUCKET_ROWS = 24
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
    "process_init": "process start before the recorder (imports)",
    "distributed_init": "process groups, rendezvous, torchrun's start",
    "model_build": "building or loading the model",
    "teardown": "after the last step or a crash, until the end",
    "hung": "no progress until the attempt was killed or ended",
}

_END_REASONS = {
    "job_end": "job_end",
    "last_event": "last event: the log ended without job_end (crashed or still running)",
    "now": "now: the job is still running (live query)",
}


def log_text(value: object, style: str = "", limit: int | None = None) -> Text:
    """Text read from a log, for a rich view: control characters escaped, never markup.

    Every string that comes from a log (job, attempt ids, statuses, event names,
    file names, diagnostics) reaches the table and ``badput watch`` through here.
    """
    return Text(inert(value) if limit is None else inert(value, limit), style=style)


def fold_buckets(
    rows: list[tuple[str, float]], limit: int = MAX_BUCKET_ROWS
) -> tuple[list[tuple[str, float]], int, float]:
    """At most ``limit`` rows: the first ``limit - 1`` and the count and seconds of the rest.

    Returns ``(shown, n_folded, folded_seconds)``; ``n_folded`` is 0 when all fit.
    """
    if len(rows) <= limit:
        return rows, 0, 0.0
    shown, rest = rows[: limit - 1], rows[limit - 1 :]
    return shown, len(rest), sum(v for _, v in rest)


_FAMILY_WORDS = {"custom": ("custom event", "custom events"), "elastic_wait": ("wait", "waits")}


def bucket_description(name: str, grouped: GroupedBuckets | None = None) -> str:
    """A short phrase saying what bucket ``name`` holds (``grouped``: the grouping it was
    shown with, which says how many names a group holds)."""
    if name in _DESCRIPTIONS:
        return _DESCRIPTIONS[name]
    base, _, sub = name.partition(":")
    if grouped is not None and name in grouped.groups:
        count = grouped.groups[name][0]
        one, many = _FAMILY_WORDS.get(base, ("name", "names"))
        return f"{count:,} other {one if count == 1 else many}, added up (--json lists each)"
    if base == "custom":
        return f"custom event {sub!r}"
    if base == "elastic_wait":
        return f"waiting for capacity ({sub})"
    return ""


def grouped_note(grouped: GroupedBuckets, total: float) -> str | None:
    """What a view says under its buckets when names were grouped (``None``: none were):
    how many, into which bucket, with their total."""
    if not grouped.groups:
        return None
    parts = []
    for name, (count, seconds) in grouped.groups.items():
        share = format_percent(seconds / total) if total > 0 else "n/a"
        family = name.partition(":")[0]
        parts.append(
            f"{count:,} {family} name{'' if count == 1 else 's'} grouped into "
            f"{grouped.label(name)}: {format_duration(seconds)}, {share}"
        )
    return (
        f"{'; '.join(parts)}. The {MAX_NAMED_BUCKETS} largest named buckets are shown one by "
        "one; --json lists every name."
    )


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
    grid.add_row("job", log_text(report.job, "bold cyan"))
    if not report.attempts:  # no event to account for: no span (not one dated 1970)
        grid.add_row("span", Text("none: no events to account for", style="yellow"))
        return grid
    span = f"{format_ts(report.start)} → {format_ts(report.end)}"
    grid.add_row("span", f"{span}  ({format_duration(report.end - report.start)})")
    reason = _END_REASONS.get(report.end_reason, report.end_reason)
    if report.end_reason == "job_end" and report.attempts and report.attempts[-1].status:
        reason = f"job_end (status: {report.attempts[-1].status})"
    grid.add_row("ended by", log_text(reason, "yellow" if report.end_reason != "job_end" else ""))
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
    c = report.cost
    if c is not None:
        grid.add_row(
            "cost",
            f"{format_money(c.total)} ({c.devices} device{'s' if c.devices != 1 else ''} "
            f"({c.devices_source}) at "
            f"{format_money(c.price_per_device_hour)} per device-hour); badput "
            f"{format_money(c.badput)}, {format_money(c.badput_per_day)} per day",
        )
    return grid


def _bucket_table(report: Report, wide: bool, grouped: GroupedBuckets) -> Table:
    table = Table(title="Where the time went", box=box.SIMPLE_HEAD, title_justify="left")
    total = report.total_seconds
    rows, n_folded, folded = fold_buckets(ordered_buckets(grouped.buckets))
    # A long custom bucket name folds onto more lines; figures never do, and the bar keeps
    # its width (a name of 80 characters took the time and share columns away at 80).
    widest = max([len("bucket"), *(len(inert(grouped.label(name))) for name, _ in rows)])
    table.add_column("bucket", overflow="fold", min_width=min(widest, 24))
    durations = [format_duration(s) for _, s in rows] + [format_duration(total)]
    table.add_column(
        "time", justify="right", no_wrap=True, min_width=max(map(len, [*durations, "time"]))
    )
    table.add_column("% of total", justify="right", no_wrap=True, min_width=len("% of total"))
    cost = report.cost
    if cost is not None:
        table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True, min_width=BAR_WIDTH)
    if wide:
        table.add_column("what it is", style="dim")
    for name, seconds in rows:
        fraction = seconds / total if total > 0 else 0.0
        style = "green" if name == PRODUCTIVE else "red"
        cells: list[str | Text] = [
            log_text(grouped.label(name), "bold green" if name == PRODUCTIVE else ""),
            format_duration(seconds),
            format_percent(fraction),
            *([format_money(cost.money(seconds))] if cost is not None else []),
            Text(_bar(fraction), style=style),
        ]
        if wide:
            cells.append(log_text(bucket_description(name, grouped)))
        table.add_row(*cells)
    if n_folded:
        fraction = folded / total if total > 0 else 0.0
        cells = [
            Text(f"({n_folded:,} more)", style="italic"),
            format_duration(folded),
            format_percent(fraction),
            *([format_money(cost.money(folded))] if cost is not None else []),
            Text(_bar(fraction), style="red"),
        ]
        if wide:
            cells.append(f"the {n_folded:,} smallest buckets, folded (--json lists each)")
        table.add_row(*cells)
    table.add_section()
    table.add_row(
        "total",
        format_duration(total),
        format_percent(1.0 if total > 0 else 0.0),
        *([format_money(cost.total)] if cost is not None else []),
    )
    return table


def _attempt_starts(report: Report, narrow: bool) -> list[str]:
    """Each attempt's start: full UTC time when wide; narrow: the time of day (the header
    has the date), or month-day and time when the attempts span several days. Each time
    is formatted once (a job of 10,000 attempts)."""
    full = [format_ts(a.start, millis=False) for a in report.attempts]  # 2024-11-19T07:06:40Z
    if not narrow:
        return full
    days = {f[:10] for f in full}
    if len(days) == 1 and full[0][:10] == format_ts(report.start, millis=False)[:10]:
        return [f[11:19] for f in full]
    return [f"{f[5:10]} {f[11:19]}" for f in full]


def _ended_by(a: AttemptSummary, narrow: bool) -> str:
    reason = a.end_reason
    if narrow and reason.startswith("attempt_end:"):
        reason = reason[len("attempt_end:") :]  # the status says it: "crashed", "preempted"
    if a.exit_code is not None:
        reason = f"{reason} (exit {a.exit_code})"
    return reason


def _attempts_table(report: Report, narrow: bool = False, limit: int | None = None) -> Table:
    """One row per attempt, or with more than ``limit`` attempts the first and the last
    ``limit`` of them around a row that says how many are left out. Narrow consoles
    (< WIDE columns) get shorter start times and end reasons; numbers are never cut (their
    columns are as wide as their widest value)."""
    starts = _attempt_starts(report, narrow)
    shown = list(range(len(report.attempts)))
    left_out = 0
    if limit is not None and len(shown) > limit:
        head = (limit + 1) // 2
        left_out = len(shown) - limit
        shown = shown[:head] + shown[head + left_out :]
    rows = [
        (
            inert(a.id),  # log text: escaped, and drawn as Text (never markup)
            start,
            format_duration(a.end - a.start),
            inert(_ended_by(a, narrow)),
            _step(a.restore_step),
            _step(a.first_step),
            _step(a.last_step),
        )
        for a, start in ((report.attempts[i], starts[i]) for i in shown)
    ]
    if left_out:
        gap = ("…", "", "", f"{left_out:,} more", "", "", "")
        rows.insert((limit + 1) // 2 if limit is not None else 0, gap)
    table = Table(
        title="Attempts",
        box=box.SIMPLE_HEAD,
        title_justify="left",
        pad_edge=not narrow,
        padding=(0, 1),
    )
    start_title = "start" if narrow else "start (UTC)"
    duration_title = "ran" if narrow else "duration"
    headers = ("id", start_title, duration_title, "ended by", "restored", "first", "last")
    for i, col in enumerate(headers):
        widest = max([len(col) if col != "ended by" else 8, *(len(r[i]) for r in rows)])
        if col == "ended by":  # the one column that may wrap, at spaces
            table.add_column(col, min_width=min(widest, 8 if narrow else 22), overflow="fold")
        elif col == "id":
            # Folded over two lines when the screen is too narrow for it whole (a default
            # id, <UTC start>-<pid>, is 21 characters): the numbers' columns never give way.
            table.add_column(
                col, overflow="fold", min_width=min(widest, 8 if narrow else 12), max_width=widest
            )
        else:
            table.add_column(
                col,
                justify="left" if col == start_title else "right",
                no_wrap=True,
                min_width=widest,
            )
    for r in rows:
        table.add_row(*(Text(cell) for cell in r))
    return table


def _details(report: Report) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    overlapped = group_buckets({k: v for k, v in report.overlapped.items() if v > 0})
    if overlapped.buckets:
        text = ", ".join(
            f"{overlapped.label(k)} {format_duration(v)}"
            for k, v in sorted(overlapped.buckets.items())
        )
        grid.add_row("overlapped", log_text(f"{text}  (non-blocking, outside the partition)"))
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


_DIAGNOSTIC_CHARS = 1000


def no_time_reason(report: Report) -> str:
    """Why a report has no time to account for (a window that misses the job, an empty log)."""
    if report.window is not None:
        a, b = report.window
        if report.end > report.start:
            return (
                f"no time to account for: the window {format_ts(a)} → {format_ts(b)} and the "
                f"job's span {format_ts(report.start)} → {format_ts(report.end)} do not meet"
            )
        window = f"{format_ts(a)} → {format_ts(b)}"
        return f"no time to account for: the job has no span to meet the window {window}"
    return "no time to account for (the log holds no span)"


def render_table(
    report: Report,
    console: Any = None,
    *,
    ranks: bool = False,
    attempts: int | None = MAX_ATTEMPT_ROWS,
) -> None:
    """Print ``report`` to ``console`` (a ``rich.console.Console``; default: stdout).

    Stalls and stragglers are always shown when there are any; ``ranks`` adds
    the per-rank table (outliers first). ``attempts``: most attempts listed (the first
    and the last; ``None``: all of them).
    """
    con: Console = console if console is not None else Console()
    con.print(_header(report))
    con.print()
    if report.total_seconds > 0 and report.buckets:
        grouped = group_buckets(report.buckets)
        con.print(_bucket_table(report, wide=con.width >= WIDE, grouped=grouped))
        note = grouped_note(grouped, report.total_seconds)
        if note is not None:
            con.print(log_text(f"  {note}", "dim"), soft_wrap=True)
            con.print()
    else:
        con.print(Text(no_time_reason(report), style="yellow"))
    if report.attempts:
        con.print(_attempts_table(report, narrow=con.width < WIDE, limit=attempts))
        if attempts is not None and len(report.attempts) > attempts:
            con.print(
                Text(
                    f"  {len(report.attempts) - attempts:,} of {len(report.attempts):,} "
                    "attempts not listed (--attempts all lists them; --json has them all)",
                    style="dim",
                ),
                soft_wrap=True,
            )
    con.print(_details(report))
    program = program_table(report)
    if program is not None:
        con.print(program)
    render_ranks(report, con, full=ranks)
    if report.diagnostics:
        con.print()
        con.print(Text(f"Diagnostics ({len(report.diagnostics)})", style="bold yellow"))
        for d in report.diagnostics:
            con.print(log_text(f"  {_diagnostic(d)}", limit=_DIAGNOSTIC_CHARS), soft_wrap=True)
