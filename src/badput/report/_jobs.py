"""``badput jobs`` (every job of a store, one line each) and ``badput compare`` (two side by side).

Pure views of reports the caller computed; text from the log goes through
:func:`~badput.report._table.log_text` (control characters escaped, never markup).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from badput.engine import (
    GroupedBuckets,
    JobState,
    Report,
    Snapshot,
    group_buckets,
    job_state,
    silence_threshold,
)
from badput.report._format import (
    format_duration,
    format_money,
    format_percent,
    format_ts,
    inert,
)
from badput.report._json import report_of
from badput.report._table import grouped_note, log_text, ordered_buckets

__all__ = [
    "SORT_KEYS",
    "JobRow",
    "compare_dict",
    "job_row",
    "render_compare",
    "render_jobs",
    "sort_rows",
]

SortKey = Literal[
    "job", "status", "start", "span", "goodput", "observed", "attempts", "last-event", "mfu", "mpg"
]
SORT_KEYS: tuple[str, ...] = (
    "job",
    "status",
    "start",
    "span",
    "goodput",
    "observed",
    "attempts",
    "last-event",
    "mfu",
    "mpg",
)
#: Why a job without program goodput has no MFU (docs/program-goodput.md).
NO_WORK = "the log records no step work and no model"


def program_figures(report: Report) -> tuple[float | None, float | None, str | None]:
    """``(MFU of the kept steps, MPG, why MFU is absent or None)`` of ``report``."""
    p = report.program
    if p is None:
        return None, None, NO_WORK
    why = None if p.mfu_productive is not None else p.reason("mfu_productive")
    return p.mfu_productive, p.mpg, why


@dataclass(frozen=True)
class JobRow:
    """One job of a store, as ``badput jobs`` lists it."""

    job: str
    status: str
    start: float | None
    span_seconds: float
    goodput: float
    observed_goodput: float
    attempts: int
    last_event: float | None
    error: str | None = None
    mfu: float | None = None  # of the kept steps (program goodput)
    mpg: float | None = None
    mfu_absent: str | None = NO_WORK  # why there is no MFU (None: there is)
    # In money, with a price per device-hour (report.cost); else None.
    cost: float | None = None
    badput_cost: float | None = None
    badput_cost_per_day: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "status": self.status,
            "start": self.start,
            "span_seconds": self.span_seconds,
            "goodput": self.goodput,
            "observed_goodput": self.observed_goodput,
            "attempts": self.attempts,
            "last_event": self.last_event,
            "error": self.error,
            "mfu": self.mfu,
            "mpg": self.mpg,
            "mfu_absent": self.mfu_absent,
            "cost": self.cost,
            "badput_cost": self.badput_cost,
            "badput_cost_per_day": self.badput_cost_per_day,
        }


def job_status(
    report: Report, last_event: float | None, now: float, stall_after: float | None = None
) -> str:
    """The job's state (:func:`badput.engine.job_state`, the one ``badput watch`` and the
    monitor show) with ``stall_after`` as the silence that makes it ``down`` (default:
    :func:`badput.engine.silence_threshold` of the report's ideal step time): the status of
    its ``job_end`` once every rank ended it (``completed``, ``failed``...; ``finished``
    without one), else ``running``, ``hung``, ``restarting``, ``down`` (silent since:
    crashed or killed), or ``empty``."""
    if stall_after is None:
        stall_after = silence_threshold(report.ideal_step_time)
    return status_of(job_state(report, last_event, now, stall_after))


def status_of(state: JobState) -> str:
    """What ``badput jobs`` shows of a job's ``state``: the status of its ``job_end`` once it
    finished, else the state."""
    if state.ended:
        return state.status or "finished"
    return state.state


def job_row(name: str, snapshot: Snapshot, now: float, state: JobState | None = None) -> JobRow:
    """The row of job ``name`` that ``badput jobs`` lists, from its ``snapshot``; its status
    from its ``state`` at ``now`` (default: ``snapshot.state(now)``, with the silence
    threshold ``badput watch`` uses: the recorded hang timeout, else max(60 s, 3 x the
    typical step)). Whether a running job is hung takes a report as of ``now`` (its
    stall going on): the caller passes that snapshot's state."""
    report, last_event = snapshot.report, snapshot.last_event_time
    mfu, mpg, why = program_figures(report)
    c = report.cost
    return JobRow(
        job=name,
        status=status_of(snapshot.state(now) if state is None else state),
        start=report.start if report.attempts else None,
        span_seconds=report.total_seconds,
        goodput=report.goodput,
        observed_goodput=report.observed_goodput,
        attempts=len(report.attempts),
        last_event=last_event,
        mfu=mfu,
        mpg=mpg,
        mfu_absent=why,
        cost=c.total if c is not None else None,
        badput_cost=c.badput if c is not None else None,
        badput_cost_per_day=c.badput_per_day if c is not None else None,
    )


def sort_rows(rows: list[JobRow], key: str, reverse: bool = False) -> list[JobRow]:
    """Rows sorted by ``key`` (one of :data:`SORT_KEYS`); unknown values last."""
    if key not in SORT_KEYS:
        raise ValueError(f"cannot sort by {key!r}; choose one of {', '.join(SORT_KEYS)}")

    def value(r: JobRow) -> tuple[int, Any]:
        v: Any = {
            "job": r.job,
            "status": r.status,
            "start": r.start,
            "span": r.span_seconds,
            "goodput": r.goodput,
            "observed": r.observed_goodput,
            "attempts": r.attempts,
            "last-event": r.last_event,
            "mfu": r.mfu,
            "mpg": r.mpg,
        }[key]
        return (1, 0) if v is None else (0, v)

    known = [r for r in rows if value(r)[0] == 0]
    unknown = [r for r in rows if value(r)[0] == 1]
    return sorted(known, key=value, reverse=reverse) + unknown


def _ts(ts: float | None, short: bool = False) -> str:
    if ts is None or not math.isfinite(ts):
        return "-"
    full = format_ts(ts, millis=False)  # 2024-11-19T07:06:40Z
    return f"{full[5:10]} {full[11:19]}" if short else full


def _percent(value: float | None) -> str:
    return "-" if value is None else format_percent(value)


def short_reason(reason: str) -> str:
    """A reason without its advice: ``"no FLOPs per token; no device peak"`` (what is
    missing; ``--json`` and ``badput report`` say what to do)."""
    return "; ".join(part.split(":")[0] for part in reason.split("; "))


def render_jobs(rows: list[JobRow], console: Console) -> None:
    """The job list as a table (narrow consoles drop the start column; MFU and MPG
    columns when a job records step work or a model, with why where one has none, on
    consoles wide enough for them)."""
    wide = console.width >= 110
    # Padding collapsed: eight columns of figures and times fit 80 columns, uncut.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    longest = max([len(inert(r.job)) for r in rows] + [3])
    table.add_column("job", overflow="fold", min_width=min(longest, 16 if wide else 12))
    statuses = max([len(inert(r.status)) for r in rows] + [6])
    table.add_column("status", overflow="fold", min_width=min(statuses, 10))  # from the log
    if wide:
        table.add_column("start (UTC)", no_wrap=True)
    recorded = any(r.mfu_absent != NO_WORK for r in rows)
    program = recorded and wide
    priced = any(r.cost is not None for r in rows)
    # With a price, a narrow console drops observed goodput for the cost columns.
    observed = wide or not priced
    figures = [
        [
            format_duration(r.span_seconds),
            format_percent(r.goodput),
            *([format_percent(r.observed_goodput)] if observed else []),
            *((_percent(r.mfu), _percent(r.mpg)) if program else ()),
            str(r.attempts),
            *([_money(r.cost), _money(r.badput_cost_per_day)] if priced else []),
            _ts(r.last_event, short=not wide),
        ]
        for r in rows
    ]
    # figures and times are never cut: the job and its status (log text) fold instead
    last = "last event (UTC)" if wide else "last (UTC)"
    names = ("span", "goodput", *(("observed",) if observed else ()))
    names += (*(("MFU", "MPG") if program else ()), "attempts")
    names += ("cost", "badput/day") if priced else ()
    for i, col in enumerate((*names, last)):
        widest = max([len(col), *(len(f[i]) for f in figures)])
        left = i == len(names)
        table.add_column(col, justify="left" if left else "right", no_wrap=True, min_width=widest)
    for r, cells_of in zip(rows, figures, strict=True):
        style = {
            "running": "green",
            "restarting": "yellow",
            "down": "yellow",
            "hung": "red",
            "error": "red",
        }.get(r.status, "")
        cells: list[str | Text] = [log_text(r.job), log_text(r.status, style)]
        if wide:
            cells.append(_ts(r.start))
        cells += cells_of
        table.add_row(*cells)
    console.print(table)
    for r in rows:
        if r.error:
            console.print(log_text(f"{r.job}: {r.error}", "red"))
        elif program and r.mfu_absent is not None:
            why = short_reason(r.mfu_absent)
            console.print(log_text(f"{r.job}: no MFU: {why}", "dim"), soft_wrap=True)
    if recorded and not wide:
        console.print(Text("MFU and MPG: a console of 110 columns, or --json", style="dim"))


def _money(amount: float | None) -> str:
    return "-" if amount is None else format_money(amount)


def _signed(seconds: float) -> str:
    return format_duration(seconds) if seconds < 0 else "+" + format_duration(seconds)


def _pp(a: float, b: float) -> str:
    return f"{(b - a) * 100:+.1f} pp"


def compare_dict(view_a: Snapshot | Report, view_b: Snapshot | Report) -> dict[str, Any]:
    """Both reports' headline figures and buckets, and B minus A."""
    a, b = report_of(view_a), report_of(view_b)

    def head(r: Report) -> dict[str, Any]:
        return {
            "job": r.job,
            "total_seconds": r.total_seconds,
            "goodput": r.goodput,
            "observed_goodput": r.observed_goodput,
            "at_risk_seconds": r.at_risk_seconds,
            "attempts": len(r.attempts),
            "steps_kept": r.steps.kept,
            "steps_wasted": r.steps.wasted,
            "ideal_step_time": r.ideal_step_time,
            **dict(zip(("mfu", "mpg", "mfu_absent"), program_figures(r), strict=True)),
            "cost": r.cost.total if r.cost is not None else None,
            "badput_cost": r.cost.badput if r.cost is not None else None,
            "badput_cost_per_day": r.cost.badput_per_day if r.cost is not None else None,
        }

    names = sorted(set(a.buckets) | set(b.buckets))
    buckets = {}
    for n in names:
        sa, sb = a.bucket(n), b.bucket(n)
        fa = sa / a.total_seconds if a.total_seconds > 0 else 0.0
        fb = sb / b.total_seconds if b.total_seconds > 0 else 0.0
        buckets[n] = {
            "a_seconds": sa,
            "b_seconds": sb,
            "a_fraction": fa,
            "b_fraction": fb,
            "fraction_difference": fb - fa,
            "a_cost": a.cost.money(sa) if a.cost is not None else None,
            "b_cost": b.cost.money(sb) if b.cost is not None else None,
        }
    return {
        "a": head(a),
        "b": head(b),
        "goodput_difference": b.goodput - a.goodput,
        "observed_goodput_difference": b.observed_goodput - a.observed_goodput,
        "mfu_difference": _difference(program_figures(a)[0], program_figures(b)[0]),
        "mpg_difference": _difference(program_figures(a)[1], program_figures(b)[1]),
        "buckets": buckets,
    }


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _program_rows(head: Table, a: Report, b: Report) -> list[str]:
    """MFU and MPG rows of the comparison, when either job records work; the notes on
    why one is absent."""
    pa, pb = program_figures(a), program_figures(b)
    if pa[2] == NO_WORK and pb[2] == NO_WORK:
        return []
    pairs = (("MFU", pa[0], pb[0]), ("MPG", pa[1], pb[1]))
    for name, va, vb in pairs:
        diff = "" if va is None or vb is None else _pp(va, vb)
        head.add_row(name, _percent(va), _percent(vb), diff)
    sides = (("A", pa[2]), ("B", pb[2]))
    return [f"{side}: no MFU: {short_reason(why)}" for side, why in sides if why is not None]


def render_compare(view_a: Snapshot | Report, view_b: Snapshot | Report, console: Console) -> None:
    """Two reports side by side: headline, then every bucket as time and share, B - A (the
    named buckets beyond the largest of each job grouped, as the table groups them)."""
    a, b = report_of(view_a), report_of(view_b)
    head = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="Compared", title_justify="left")
    head.add_column("")
    head.add_column("A", overflow="fold")
    head.add_column("B", overflow="fold")
    head.add_column("B - A", justify="right", no_wrap=True)
    head.add_row("job", log_text(a.job), log_text(b.job), "")
    head.add_row(
        "goodput", format_percent(a.goodput), format_percent(b.goodput), _pp(a.goodput, b.goodput)
    )
    head.add_row(
        "observed",
        format_percent(a.observed_goodput),
        format_percent(b.observed_goodput),
        _pp(a.observed_goodput, b.observed_goodput),
    )
    head.add_row(
        "total",
        format_duration(a.total_seconds),
        format_duration(b.total_seconds),
        _signed(b.total_seconds - a.total_seconds),
    )
    head.add_row(
        "at risk",
        format_duration(a.at_risk_seconds),
        format_duration(b.at_risk_seconds),
        _signed(b.at_risk_seconds - a.at_risk_seconds),
    )
    head.add_row(
        "attempts",
        str(len(a.attempts)),
        str(len(b.attempts)),
        f"{len(b.attempts) - len(a.attempts):+d}",
    )
    head.add_row(
        "steps kept",
        str(a.steps.kept),
        str(b.steps.kept),
        f"{b.steps.kept - a.steps.kept:+d}",
    )
    notes = _program_rows(head, a, b)
    if a.cost is not None or b.cost is not None:
        _cost_rows(head, a, b)
    console.print(head)
    for line in notes:
        console.print(log_text(line, "dim"), soft_wrap=True)
    ga, gb = _grouped_pair(a, b)
    order = [n for n, _ in ordered_buckets({**gb.buckets, **ga.buckets})]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="Buckets", title_justify="left")
    table.add_column("bucket", overflow="fold")
    for col in ("A time", "A %", "B time", "B %", "B - A"):
        table.add_column(col, justify="right", no_wrap=True)
    for n in order:
        sa, sb = ga.buckets.get(n, 0.0), gb.buckets.get(n, 0.0)
        fa = sa / a.total_seconds if a.total_seconds > 0 else 0.0
        fb = sb / b.total_seconds if b.total_seconds > 0 else 0.0
        diff = fb - fa
        style = "green" if (diff > 0) == (n == "productive") and abs(diff) >= 0.0005 else "red"
        table.add_row(
            log_text(n),
            format_duration(sa),
            format_percent(fa),
            format_duration(sb),
            format_percent(fb),
            Text(_pp(fa, fb), style=style if abs(diff) >= 0.0005 else "dim"),
        )
    console.print(table)
    for side, g, r in (("A", ga, a), ("B", gb, b)):
        note = grouped_note(g, r.total_seconds)
        if note is not None:
            console.print(log_text(f"{side}: {note}", "dim"), soft_wrap=True)


def _cost_rows(head: Table, a: Report, b: Report) -> None:
    """The compared jobs' cost, badput cost and badput per day (``-``: no price)."""
    rows = (("cost", "total"), ("badput cost", "badput"), ("badput/day", "badput_per_day"))
    for label, name in rows:
        va = getattr(a.cost, name) if a.cost is not None else None
        vb = getattr(b.cost, name) if b.cost is not None else None
        diff = f"{vb - va:+,.2f}" if va is not None and vb is not None else ""
        head.add_row(label, _money(va), _money(vb), diff)


def _grouped_pair(a: Report, b: Report) -> tuple[GroupedBuckets, GroupedBuckets]:
    """Both reports' buckets grouped alike: the named buckets either shows one by one are
    shown for both (up to 2 x MAX_NAMED_BUCKETS rows); the rest in each one's groups."""
    keep = dict.fromkeys(group_buckets(a.buckets).named + group_buckets(b.buckets).named)
    return (
        group_buckets(a.buckets, len(keep), keep=keep),
        group_buckets(b.buckets, len(keep), keep=keep),
    )
