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

from badput.engine import SILENCE_MIN_SECONDS, SILENCE_STEP_FACTOR, group_buckets
from badput.report._format import (
    format_duration,
    format_money,
    format_percent,
    format_ts,
    goodput_health,
    inert,
)
from badput.report._program import program_line
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
    from badput.engine import JobState, Stall
    from badput.monitor import Snapshot

__all__ = [
    "STALL_MIN_SECONDS",
    "STALL_STEP_FACTOR",
    "WATCH_WINDOW",
    "cost_line",
    "ended_line",
    "is_stalled",
    "render_watch",
    "run_watch",
    "stall_threshold",
    "status_line",
    "step_rate",
    "window_label",
]

#: A job silent for longer than this is shown down (the monitor's rule, Snapshot.state) ...
STALL_MIN_SECONDS: Final = SILENCE_MIN_SECONDS
#: ... or for longer than this many typical step times, if that is longer.
STALL_STEP_FACTOR: Final = SILENCE_STEP_FACTOR
#: The rolling window shown beside the cumulative goodput (seconds).
WATCH_WINDOW: Final = 600.0
#: The colour of each goodput health (report._format.goodput_health).
HEALTH_STYLE: Final = {"good": "green", "warn": "yellow", "bad": "red"}


def stall_threshold(snapshot: Snapshot) -> float:
    """Seconds of silence after which a job is shown down (``Snapshot.silence_threshold``:
    the hang timeout ``badput run`` recorded, else ``max(60 s, 3 x typical step time)``)."""
    return snapshot.silence_threshold


def is_stalled(snapshot: Snapshot, now: float | None = None) -> bool:
    """The job is down: not ended, and its newest event (heartbeats included) is older
    than :func:`stall_threshold` (``Snapshot.state``)."""
    return snapshot.state(now).state == "down"


def _goodput_style(fraction: float, bold: bool = False) -> str:
    style = HEALTH_STYLE[goodput_health(fraction)]
    return f"bold {style}" if bold else style


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


def _state_words(state: JobState, snapshot: Snapshot, now: float) -> str:
    """The state as the status line and the view's state row say it (no colour)."""
    if state.state == "finished":
        return f"finished ({inert(state.status)})" if state.status else "finished"
    if state.state == "restarting":
        ended = (
            "" if state.since is None else f" {format_duration(max(0.0, now - state.since))} ago"
        )
        status = inert(state.status) if state.status else "attempt_end"
        return f"restarting (attempt ended{ended}: {status}; waiting for the next start)"
    if state.state == "down":
        age = _age(snapshot, now) or 0.0
        limit = format_duration(snapshot.silence_threshold)
        who = f"; no job_end from {_ranks_list(state.open_ranks)}" if state.open_ranks else ""
        return f"DOWN: no event for {format_duration(age)} (> {limit}), not even a heartbeat{who}"
    if state.open_ranks:
        return f"ending (waiting for the job_end of {_ranks_list(state.open_ranks)})"
    if state.state == "hung" and state.restart_due:  # killed hung: no stall goes on
        ended = (
            "" if state.since is None else f" {format_duration(max(0.0, now - state.since))} ago"
        )
        return f"hung ({inert(state.why)}; attempt ended{ended})"
    return state.state  # running, hung (the stall's own part says how long), empty


def _ranks_list(ranks: tuple[int, ...]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    more = f" (+{len(ranks) - 8} more)" if len(ranks) > 8 else ""
    return ("rank " if len(ranks) == 1 else "ranks ") + shown + more


def _moving(state: JobState) -> bool:
    """Steps may come: a rate and a slowdown alarm mean something (not finished, down or
    restarting: no '0.00 steps/s' on a job that has ended, no alarm on one that is down)."""
    return state.state in ("running", "hung") and not state.restart_due


def status_line(
    snapshot: Snapshot, previous: Snapshot | None = None, now: float | None = None
) -> str:
    """One line: time, goodput, observed, windows, last step (and rate), state, last event age."""
    now = snapshot.time if now is None else now
    rep = snapshot.report
    head = f"{format_ts(snapshot.time, millis=False)} {inert(snapshot.job)}"
    age = _age(snapshot, now)
    if age is None:
        return f"{head}: no events yet"
    state = snapshot.state(now)
    parts = [
        f"goodput {format_percent(rep.goodput)} (observed {format_percent(rep.observed_goodput)})"
    ]
    for w, wrep in sorted(snapshot.windows.items()):
        parts.append(f"last {window_label(w)} {format_percent(wrep.goodput)}")
    step = "-" if snapshot.last_step is None else str(snapshot.last_step)
    rate = step_rate(snapshot, previous) if _moving(state) else None
    parts.append(f"step {step}" + (f" ({rate:.2f}/s)" if rate is not None else ""))
    if state.state != "hung" or state.restart_due:  # a stall says STALLED in its own part
        parts.append(_state_words(state, snapshot, now))
    if not state.ended and state.state != "down":
        parts.append(f"last event {format_duration(age)} ago")
    st = snapshot.step_time
    if _moving(state) and st is not None and st.slowdown_alarm:
        parts.append("SLOWDOWN")
    parts.extend(_rank_parts(snapshot, state, now))
    program = program_line(rep)
    if program is not None and rep.program is not None and rep.program.mfu_productive is not None:
        parts.append(program)
    cost = cost_line(snapshot)
    if cost is not None:
        parts.append(f"cost {cost}")
    return f"{head}: " + ", ".join(parts)


def cost_line(snapshot: Snapshot) -> str | None:
    """``40.00 so far (4 devices at 3.00 per device-hour); badput 20.00, 144.00/day (last
    10m: 288.00/day)``: the job's money so far and what its badput costs a day, at its
    share so far and at each rolling window's (what it loses a day now); None unpriced
    (docs/advice.md#cost)."""
    c = snapshot.report.cost
    if c is None:
        return None
    plural = "s" if c.devices != 1 else ""
    windows = [
        f"last {window_label(w)}: {format_money(wc.badput_per_day)}/day"
        for w, wrep in sorted(snapshot.windows.items())
        if (wc := wrep.cost) is not None and wrep.total_seconds > 0
    ]
    return (
        f"{format_money(c.total)} so far ({c.devices} device{plural} ({c.devices_source}) at "
        f"{format_money(c.price_per_device_hour)} per device-hour); badput "
        f"{format_money(c.badput)}, {format_money(c.badput_per_day)}/day"
        + (f" ({', '.join(windows)})" if windows else "")
    )


def _rank_parts(snapshot: Snapshot, state: JobState, now: float) -> list[str]:
    """The status line's per-rank parts: an ongoing stall (by progress) and stragglers."""
    parts = []
    stall = _stall_shown(snapshot, state)
    if stall is not None:
        parts.append(stall_headline(stall, now))
    if snapshot.report.stragglers:
        parts.append(f"stragglers: {straggler_summary(snapshot.report.stragglers)}")
    return parts


def _stall_shown(snapshot: Snapshot, state: JobState) -> Stall | None:
    """The ongoing stall, while the job is hung or down (who stopped first still says
    something of a job that went silent); none once it ended or is restarting."""
    if state.state not in ("hung", "down"):
        return None
    return ongoing_stall(snapshot.report)


def _ranks_rows(snapshot: Snapshot, state: JobState) -> list[Table]:
    """The per-rank grid when it has something to say (an empty grid still takes a line)."""
    grid = _ranks_grid(snapshot, state)
    return [grid] if grid.row_count else []


def _ranks_grid(snapshot: Snapshot, state: JobState) -> Table:
    """Rows of the watch view for the per-rank analysis: who stopped first in a stall (the
    state line says STALLED, :func:`_state`), stragglers, how many ranks."""
    grid = _grid()
    rep = snapshot.report
    stall = _stall_shown(snapshot, state)
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


#: The colour of each state's row (the goodput has its own, by its health).
STATE_STYLE: Final = {
    "finished": "bold",
    "restarting": "bold yellow",
    "down": "bold red",
    "hung": "bold red",
    "running": "",
    "empty": "yellow",
}


def _state(snapshot: Snapshot, state: JobState, now: float) -> Text:
    if _age(snapshot, now) is None:
        return Text("waiting for the first event", style="yellow")
    stall = _stall_shown(snapshot, state)
    if state.state == "hung" and stall is not None:  # who stopped first: its own row
        return Text(stall_headline(stall, now, who=False), style=STATE_STYLE["hung"])
    return log_text(_state_words(state, snapshot, now), STATE_STYLE[state.state])


def _summary(snapshot: Snapshot, state: JobState, now: float) -> Table:
    rep = snapshot.report
    grid = _grid()
    grid.add_row("job", log_text(snapshot.job, "bold cyan"))
    grid.add_row("state", _state(snapshot, state, now))
    age = _age(snapshot, now)
    if age is not None:
        style = "bold red" if state.state == "down" else ""
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
    goodput = Text(format_percent(rep.goodput), style=_goodput_style(rep.goodput, bold=True))
    goodput.append(f"   observed {format_percent(rep.observed_goodput)}", style="")
    goodput.append("  (productive + slowdown)", style="dim")
    grid.add_row("goodput", goodput)
    for w, wrep in sorted(snapshot.windows.items()):
        line = Text(format_percent(wrep.goodput), style=_goodput_style(wrep.goodput))
        line.append(f"   observed {format_percent(wrep.observed_goodput)}")
        grid.add_row(f"last {window_label(w)}", line)
    grid.add_row(
        "at risk",
        f"{format_duration(rep.at_risk_seconds)}  (progress since the newest checkpoint)",
    )
    program = program_line(rep)
    if program is not None:
        grid.add_row("program", program)
    cost = cost_line(snapshot)
    if cost is not None:
        grid.add_row("cost", cost)
    return grid


def _steps(snapshot: Snapshot, previous: Snapshot | None, state: JobState) -> Table:
    rep = snapshot.report
    grid = _grid()
    last = "-" if snapshot.last_step is None else str(snapshot.last_step)
    rate = step_rate(snapshot, previous)
    if not _moving(state):  # no rate of a job that ended, is down or restarting
        rate_text: str = state.state
    elif rate is not None:
        rate_text = f"{rate:.2f} steps/s"
    else:
        rate_text = "rate n/a"
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
    if not _moving(state):
        return grid  # no slowdown alarm while down, restarting, or after the end
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
    state = snapshot.state(now)  # once: every row shows this state
    top: list[RenderableType] = [
        _summary(snapshot, state, now),
        Text(""),
        _steps(snapshot, previous, state),
        *_ranks_rows(snapshot, state),
        _attempts(snapshot),
    ]
    refreshed = f"refreshed {format_ts(snapshot.time, millis=False)}"
    footer = " · the job has ended" if state.ended else " · Ctrl-C to quit"
    return _WatchView(top, snapshot, Text(refreshed + footer, style="dim"))


def ended_line(snapshot: Snapshot, now: float | None = None) -> str:
    """The last line ``badput watch`` prints before it exits on a job that has ended."""
    now = snapshot.time if now is None else now
    state = snapshot.state(now)
    return (
        f"badput watch: {inert(snapshot.job)} ended: {_state_words(state, snapshot, now)}, "
        f"goodput {format_percent(snapshot.report.goodput)}"
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
    program: tuple[float | None, int | None] = (None, None),
    price: float | None = None,
) -> JobState | None:
    """Follow the job at ``source`` and redraw :func:`render_watch` every ``interval`` s.

    ``stall_after``: the floor of the stall threshold, seconds (docs/ranks.md).
    ``program``: each device's peak FLOP/s and the device count, for MFU (each None: the
    log's; docs/program-goodput.md). ``price``: per device-hour, the job's cost so far and
    its badput a day (:func:`cost_line`; docs/advice.md#cost).

    Returns once the job has ended (``Snapshot.state``: its ``job_end``, from every rank
    that took part), after a last frame and :func:`ended_line`; on Ctrl-C
    (``KeyboardInterrupt`` is swallowed) or after ``max_cycles``. Returns the last state
    seen (``None`` before any snapshot). ``source``/``job``: as for
    :class:`~badput.monitor.Monitor` (raises ``ValueError`` when they name no job).
    """
    from rich.live import Live  # noqa: PLC0415

    from badput.engine import RankOptions  # noqa: PLC0415
    from badput.monitor import Monitor  # noqa: PLC0415 (the engine pulls numpy)

    con = console if console is not None else Console()
    options = RankOptions() if stall_after is None else RankOptions(stall_floor=stall_after)
    monitor = Monitor(
        job, source, interval=interval, rolling_windows=(window,), rank_options=options
    )
    monitor.live_job.accountant.peak_flops, monitor.live_job.accountant.devices = program
    monitor.live_job.accountant.price_per_device_hour = price
    loop = _WatchLoop(monitor, con, interval, max_cycles)
    try:
        if con.is_terminal:
            with Live(console=con, auto_refresh=False, screen=False) as live:
                loop.run(lambda view: live.update(view, refresh=True))
        else:
            loop.run(None)
        if loop.ended is not None:
            con.print(Text(ended_line(loop.ended, now=time.time())), soft_wrap=True)
    except KeyboardInterrupt:
        pass
    finally:
        monitor.stop(final_flush=False, timeout=1.0)
    return loop.state


class _WatchLoop:
    """The refreshes of ``run_watch``: a frame (or a status line, when ``draw`` is None)
    every ``interval`` s, until the job has ended or ``max_cycles`` have run."""

    def __init__(self, monitor: Any, con: Console, interval: float, max_cycles: int | None):
        self.monitor = monitor
        self.con = con
        self.interval = interval
        self.max_cycles = max_cycles
        self.previous: Snapshot | None = None
        self.state: JobState | None = None
        self.ended: Snapshot | None = None

    def run(self, draw: Any) -> None:
        cycles = 0
        while self.max_cycles is None or cycles < self.max_cycles:
            t0 = time.monotonic()
            if draw is not None:
                view, self.previous = _frame(self.monitor, self.previous)
                draw(view)
            else:
                self._line()
            cycles += 1
            if self.previous is not None:
                self.state = self.previous.state(time.time())
                if self.state.ended:
                    self.ended = self.previous
                    return
            if self.max_cycles is None or cycles < self.max_cycles:
                time.sleep(max(0.0, self.interval - (time.monotonic() - t0)))

    def _line(self) -> None:
        try:
            snap = self.monitor.run_once()
        except Exception as exc:
            self.con.print(log_text(f"badput watch: reading the job failed: {exc!r}"))
            return
        self.con.print(Text(status_line(snap, self.previous, now=time.time())), soft_wrap=True)
        self.con.file.flush()
        self.previous = snap


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
