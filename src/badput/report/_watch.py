"""``badput watch``: a live terminal view of a running job (rich Live).

The view is a pure function of monitor snapshots, :func:`render_watch`; the loop
(:func:`run_watch`) only polls a :class:`~badput.monitor.Monitor` and redraws.
On a terminal it redraws in place; otherwise (output piped to a file) it prints
one :func:`status_line` per refresh.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from badput.engine import group_buckets
from badput.report._format import format_duration, format_percent, format_ts, inert
from badput.report._ranks import ongoing_stall, stall_headline, stall_who, straggler_summary
from badput.report._table import (
    BAR_WIDTH,
    MAX_BUCKET_ROWS,
    PRODUCTIVE,
    WIDE,
    _bar,
    bucket_description,
    fold_buckets,
    log_text,
    ordered_buckets,
)

if TYPE_CHECKING:
    from badput.monitor import Snapshot

__all__ = [
    "STALL_MIN_SECONDS",
    "STALL_STEP_FACTOR",
    "WATCH_WINDOW",
    "is_stalled",
    "render_watch",
    "run_watch",
    "stall_threshold",
    "status_line",
    "step_rate",
    "window_label",
]

#: A running job silent for longer than this is shown as stalled ...
STALL_MIN_SECONDS: Final = 60.0
#: ... or for longer than this many typical step times, if that is longer.
STALL_STEP_FACTOR: Final = 3.0
#: The rolling window shown beside the cumulative goodput (seconds).
WATCH_WINDOW: Final = 600.0


def stall_threshold(snapshot: Snapshot) -> float:
    """Seconds of silence after which a running job looks stalled.

    ``max(60 s, 3 x typical step time)``; the typical step time is the median of
    the recent steps, else the ideal step time.
    """
    typical = None
    if snapshot.step_time is not None:
        typical = snapshot.step_time.recent_median
    if typical is None:
        typical = snapshot.report.ideal_step_time
    return max(STALL_MIN_SECONDS, STALL_STEP_FACTOR * typical if typical else 0.0)


def _finished(snapshot: Snapshot) -> bool:
    return snapshot.report.end_reason == "job_end"


def is_stalled(snapshot: Snapshot, now: float | None = None) -> bool:
    """A job not finished whose newest event is older than :func:`stall_threshold`."""
    if snapshot.last_event_time is None or _finished(snapshot):
        return False
    now = snapshot.time if now is None else now
    return now - snapshot.last_event_time > stall_threshold(snapshot)


def step_rate(snapshot: Snapshot, previous: Snapshot | None) -> float | None:
    """Steps per second between ``previous`` and ``snapshot`` (``None`` when unknown).

    ``None`` too when the step went back (a restore from a checkpoint).
    """
    if previous is None:
        return None
    dt = snapshot.time - previous.time
    a, b = previous.last_step, snapshot.last_step
    if a is None or b is None or dt <= 0 or b < a:
        return None
    return (b - a) / dt


def window_label(seconds: float) -> str:
    """``600`` → ``10m``, ``3600`` → ``1h``, ``90`` → ``90s``."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def _age(snapshot: Snapshot, now: float) -> float | None:
    if snapshot.last_event_time is None:
        return None
    return max(0.0, now - snapshot.last_event_time)


def status_line(
    snapshot: Snapshot, previous: Snapshot | None = None, now: float | None = None
) -> str:
    """One line: time, goodput, observed, windows, last step (and rate), last event age."""
    now = snapshot.time if now is None else now
    rep = snapshot.report
    head = f"{format_ts(snapshot.time, millis=False)} {inert(snapshot.job)}"
    age = _age(snapshot, now)
    if age is None:
        return f"{head}: no events yet"
    parts = [
        f"goodput {format_percent(rep.goodput)} (observed {format_percent(rep.observed_goodput)})"
    ]
    for w, wrep in sorted(snapshot.windows.items()):
        parts.append(f"last {window_label(w)} {format_percent(wrep.goodput)}")
    step = "-" if snapshot.last_step is None else str(snapshot.last_step)
    rate = step_rate(snapshot, previous)
    parts.append(f"step {step}" + (f" ({rate:.2f}/s)" if rate is not None else ""))
    if _finished(snapshot):
        parts.append("finished")
    else:
        # a stall of progress says STALLED in its own part (_rank_parts): not twice
        silent = is_stalled(snapshot, now) and ongoing_stall(rep) is None
        parts.append(f"last event {format_duration(age)} ago{' STALLED?' if silent else ''}")
    if snapshot.step_time is not None and snapshot.step_time.slowdown_alarm:
        parts.append("SLOWDOWN")
    parts.extend(_rank_parts(snapshot, now))
    return f"{head}: " + ", ".join(parts)


def _rank_parts(snapshot: Snapshot, now: float) -> list[str]:
    """The status line's per-rank parts: an ongoing stall (by progress) and stragglers."""
    parts = []
    stall = None if _finished(snapshot) else ongoing_stall(snapshot.report)
    if stall is not None:
        parts.append(stall_headline(stall, now))
    if snapshot.report.stragglers:
        parts.append(f"stragglers: {straggler_summary(snapshot.report.stragglers)}")
    return parts


def _ranks_rows(snapshot: Snapshot, now: float) -> list[Table]:
    """The per-rank grid when it has something to say (an empty grid still takes a line)."""
    grid = _ranks_grid(snapshot, now)
    return [grid] if grid.row_count else []


def _ranks_grid(snapshot: Snapshot, now: float) -> Table:
    """Rows of the watch view for the per-rank analysis: who stopped first in a stall (the
    state line says STALLED, :func:`_state`), stragglers, how many ranks."""
    grid = _grid()
    rep = snapshot.report
    stall = None if _finished(snapshot) else ongoing_stall(rep)
    if stall is not None and stall.first_stopped:
        grid.add_row("stalled", Text(stall_who(stall), style="bold red"))
    if rep.stragglers:
        grid.add_row(
            "stragglers",
            Text(straggler_summary(rep.stragglers), style="bold yellow"),
        )
    if len(rep.ranks) > 1:
        hosts = {v.host for v in rep.ranks if v.host}
        grid.add_row("ranks", f"{len(rep.ranks)} on {len(hosts)} hosts (badput report --ranks)")
    return grid


def _grid() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    return grid


def _state(snapshot: Snapshot, now: float) -> Text:
    rep = snapshot.report
    age = _age(snapshot, now)
    if age is None:
        return Text("waiting for the first event", style="yellow")
    if _finished(snapshot):
        status = rep.attempts[-1].status if rep.attempts else None
        return log_text(f"finished ({status})" if status else "finished", "green")
    stall = ongoing_stall(rep)
    if stall is not None:  # who stopped first: a row of its own (_ranks_grid)
        return Text(stall_headline(stall, now, who=False), style="bold red")
    if is_stalled(snapshot, now):
        limit = format_duration(stall_threshold(snapshot))
        return Text(f"STALLED? no event for {format_duration(age)} (> {limit})", style="bold red")
    return Text("running", style="green")


def _summary(snapshot: Snapshot, previous: Snapshot | None, now: float) -> Table:
    rep = snapshot.report
    grid = _grid()
    grid.add_row("job", log_text(snapshot.job, "bold cyan"))
    grid.add_row("state", _state(snapshot, now))
    age = _age(snapshot, now)
    if age is not None:
        style = "bold red" if is_stalled(snapshot, now) else ""
        grid.add_row(
            "last event",
            Text(f"{format_duration(age)} ago  ({format_ts(now - age)})", style=style),
        )
    grid.add_row(
        "elapsed",
        f"{format_duration(rep.total_seconds)}  (since {format_ts(rep.start, millis=False)})"
        if rep.total_seconds > 0
        else "-",
    )
    goodput = Text(format_percent(rep.goodput), style="bold green")
    goodput.append(f"   observed {format_percent(rep.observed_goodput)}", style="")
    goodput.append("  (productive + slowdown)", style="dim")
    grid.add_row("goodput", goodput)
    for w, wrep in sorted(snapshot.windows.items()):
        line = Text(format_percent(wrep.goodput), style="green")
        line.append(f"   observed {format_percent(wrep.observed_goodput)}")
        grid.add_row(f"last {window_label(w)}", line)
    grid.add_row(
        "at risk",
        f"{format_duration(rep.at_risk_seconds)}  (progress since the newest checkpoint)",
    )
    return grid


def _steps(snapshot: Snapshot, previous: Snapshot | None) -> Table:
    rep = snapshot.report
    grid = _grid()
    last = "-" if snapshot.last_step is None else str(snapshot.last_step)
    rate = step_rate(snapshot, previous)
    rate_text = f"{rate:.2f} steps/s" if rate is not None else "rate n/a"
    grid.add_row(
        "step", f"{last}   {rate_text}   (kept {rep.steps.kept}, wasted {rep.steps.wasted})"
    )
    ideal = "-"
    if rep.ideal_step_time is not None:
        ideal = f"{format_duration(rep.ideal_step_time)} ({rep.ideal_step_time_source})"
    st = snapshot.step_time
    if st is None:
        grid.add_row("ideal step", ideal)
        return grid
    recent = "-" if st.recent_median is None else format_duration(st.recent_median)
    last_t = "-" if st.last_step_time is None else format_duration(st.last_step_time)
    grid.add_row("step time", f"last {last_t}   recent median {recent}   ideal {ideal}")
    if st.deviation_p50 is not None and st.deviation_p90 is not None:
        text = f"p50 {format_duration(st.deviation_p50)}   p90 {format_duration(st.deviation_p90)}"
        if st.deviation_max is not None:
            text += f"   max {format_duration(st.deviation_max)}"
        grid.add_row("deviation", f"{text}   (over {st.steps} steps)")
    if st.slowdown_alarm and st.recent_median is not None and st.ideal_step_time:
        ratio = st.recent_median / st.ideal_step_time
        grid.add_row(
            "slowdown",
            Text(
                f"ALARM: recent steps {ratio:.2f}x the ideal (threshold {st.slowdown_factor:g}x)",
                style="bold red",
            ),
        )
    elif st.ideal_step_time is not None and st.steps:
        grid.add_row("slowdown", Text(f"ok (threshold {st.slowdown_factor:g}x)", style="green"))
    return grid


#: Screens with fewer rows than this get the compact layout (no blank lines, fewer buckets).
TALL = 36


class _WatchView:
    """The watch view laid out for the screen it is drawn on: the bucket table only from
    WIDE columns on has descriptions, and on a short screen (an 80x24 terminal) the
    buckets that do not fit are folded into one row rather than cut off by the screen."""

    def __init__(self, top: list[RenderableType], snapshot: Snapshot, footer: Text) -> None:
        self.top = top
        self.snapshot = snapshot
        self.footer = footer

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = options.height or options.size.height
        compact = height < TALL
        top = [p for p in self.top if not (compact and isinstance(p, Text) and not p.plain)]
        lines = console.render_lines(Group(*top), options.update(height=None), pad=False)
        for line in lines:
            yield from line
            yield Segment.line()
        # the table's title, header and rule, and the footer line
        room = height - len(lines) - 4 - (0 if compact else 2)
        yield _buckets(
            self.snapshot,
            wide=options.max_width >= WIDE,
            max_rows=max(2, min(MAX_BUCKET_ROWS, room)),
            edges=not compact,
        )
        yield self.footer


def _buckets(
    snapshot: Snapshot, wide: bool = True, max_rows: int = MAX_BUCKET_ROWS, edges: bool = True
) -> Table | Text:
    rep = snapshot.report
    total = rep.total_seconds
    if total <= 0 or not rep.buckets:
        return Text("no time to account for yet", style="yellow")
    rows: list[tuple[str, str, str, float, str]] = []
    grouped = group_buckets(rep.buckets)
    shown, n_folded, folded = fold_buckets(ordered_buckets(grouped.buckets), max_rows)
    for name, seconds in shown:
        fraction = seconds / total
        label = inert(grouped.label(name))
        rows.append((label, format_duration(seconds), format_percent(fraction), fraction, name))
    table = Table(
        box=box.SIMPLE_HEAD, title="Where the time went", title_justify="left", show_edge=edges
    )
    widest = max(len("bucket"), *(len(r[0]) for r in rows))
    # a long custom bucket name folds onto more lines; figures never do
    table.add_column("bucket", overflow="fold", min_width=min(widest, 24))
    for i, col in ((1, "time"), (2, "%")):
        widest = max(len(col), *(len(str(r[i])) for r in rows))
        table.add_column(col, justify="right", no_wrap=True, min_width=widest)
    table.add_column("", no_wrap=True, min_width=BAR_WIDTH)
    if wide:
        table.add_column("what it is", style="dim", no_wrap=True, overflow="ellipsis")
    for label, duration, percent, fraction, name in rows:
        productive = name == PRODUCTIVE
        cells: list[str | Text] = [
            Text(label, style="bold green" if productive else ""),  # inert above
            duration,
            percent,
            Text(_bar(fraction), style="green" if productive else "red"),
        ]
        if wide:
            cells.append(log_text(bucket_description(name, grouped)))
        table.add_row(*cells)
    if n_folded:
        cells = [
            Text(f"({n_folded:,} more)", style="italic"),
            format_duration(folded),
            format_percent(folded / total),
            Text(_bar(folded / total), style="red"),
        ]
        if wide:
            cells.append(f"the {n_folded:,} smallest buckets, folded")
        table.add_row(*cells)
    return table


def _attempts(snapshot: Snapshot) -> Table:
    rep = snapshot.report
    grid = _grid()
    n = len(rep.attempts)
    if not n:
        grid.add_row("attempts", "-")
        return grid
    cur = rep.attempts[-1]
    restarts = f"{snapshot.disruptions} restart" + ("" if snapshot.disruptions == 1 else "s")
    grid.add_row(
        "attempts",
        log_text(
            f"{n} ({restarts})   current: {cur.id}, up {format_duration(cur.end - cur.start)}"
            + (f", restored step {cur.restore_step}" if cur.restore_step is not None else "")
        ),
    )
    if rep.diagnostics:
        grid.add_row(
            "diagnostics",
            Text(f"{len(rep.diagnostics)} (see: badput report)", style="yellow"),
        )
    return grid


def render_watch(
    snapshot: Snapshot, previous: Snapshot | None = None, now: float | None = None
) -> RenderableType:
    """The watch view of ``snapshot``: a rich renderable (no I/O, no clock).

    ``previous`` (the snapshot of the previous refresh) gives the step rate;
    ``now`` (default: the snapshot's time) gives the age of the last event.
    """
    now = snapshot.time if now is None else now
    top: list[RenderableType] = [
        _summary(snapshot, previous, now),
        Text(""),
        _steps(snapshot, previous),
        *_ranks_rows(snapshot, now),
        _attempts(snapshot),
    ]
    return _WatchView(
        top,
        snapshot,
        Text(f"refreshed {format_ts(snapshot.time, millis=False)} · Ctrl-C to quit", style="dim"),
    )


def run_watch(
    source: Any,
    job: str | None = None,
    *,
    interval: float = 2.0,
    console: Console | None = None,
    max_cycles: int | None = None,
    window: float = WATCH_WINDOW,
    stall_after: float | None = None,
) -> None:
    """Follow the job at ``source`` and redraw :func:`render_watch` every ``interval`` s.

    ``stall_after``: the floor of the stall threshold, seconds (docs/ranks.md).

    Returns on Ctrl-C (``KeyboardInterrupt`` is swallowed) or after ``max_cycles``.
    ``source``/``job``: as for :class:`~badput.monitor.Monitor` (raises
    ``ValueError`` when they name no job).
    """
    from rich.live import Live  # noqa: PLC0415

    from badput.engine import RankOptions  # noqa: PLC0415
    from badput.monitor import Monitor  # noqa: PLC0415 (the engine pulls numpy)

    con = console if console is not None else Console()
    options = RankOptions() if stall_after is None else RankOptions(stall_floor=stall_after)
    monitor = Monitor(
        job, source, interval=interval, rolling_windows=(window,), rank_options=options
    )
    previous: Snapshot | None = None
    cycles = 0
    try:
        if con.is_terminal:
            with Live(console=con, auto_refresh=False, screen=False) as live:
                while max_cycles is None or cycles < max_cycles:
                    t0 = time.monotonic()
                    view, previous = _frame(monitor, previous)
                    live.update(view, refresh=True)
                    cycles += 1
                    if max_cycles is None or cycles < max_cycles:
                        time.sleep(max(0.0, interval - (time.monotonic() - t0)))
        else:
            while max_cycles is None or cycles < max_cycles:
                t0 = time.monotonic()
                try:
                    snap = monitor.run_once()
                except Exception as exc:
                    con.print(log_text(f"badput watch: reading the job failed: {exc!r}"))
                else:
                    con.print(Text(status_line(snap, previous, now=time.time())), soft_wrap=True)
                    con.file.flush()
                    previous = snap
                cycles += 1
                if max_cycles is None or cycles < max_cycles:
                    time.sleep(max(0.0, interval - (time.monotonic() - t0)))
    except KeyboardInterrupt:
        pass
    finally:
        monitor.stop(final_flush=False, timeout=1.0)


def _frame(monitor: Any, previous: Snapshot | None) -> tuple[RenderableType, Snapshot | None]:
    """One refresh: a new snapshot rendered, or the last one with the error that stopped it."""
    try:
        snap = monitor.run_once()
    except Exception as exc:
        error = log_text(f"reading the job failed: {exc!r} (retrying)", "bold red")
        if previous is None:
            return error, None
        return Group(render_watch(previous, None, now=time.time()), error), previous
    return render_watch(snap, previous, now=time.time()), snap
