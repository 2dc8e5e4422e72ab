"""Terminal views of the per-rank analysis: ranks (outliers first), stragglers, stalls.

They render what the engine computed (``Report.ranks``, ``.stragglers``,
``.stalls``; docs/ranks.md) and compute nothing of their own beyond ordering and
a summary of the ranks that are not shown one by one.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from badput.events import MAX_TS, MIN_TS
from badput.report._format import format_duration, format_ts, inert

if TYPE_CHECKING:
    from badput.engine import RankView, Report, Stall, Straggler

__all__ = [
    "MAX_RANK_ROWS",
    "ongoing_stall",
    "render_ranks",
    "stall_headline",
    "stall_lines",
    "stall_who",
    "straggler_lines",
    "straggler_summary",
    "summarize_ranks",
]

#: Ranks listed one by one at most; the rest are summarised in one line.
MAX_RANK_ROWS = 16
#: Stragglers and stalls listed at most.
MAX_LIST = 10


def _score(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ranks_text(ranks: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(r) for r in ranks[:limit])
    more = len(ranks) - limit
    return shown + (f" (+{more} more)" if more > 0 else "")


def straggler_lines(stragglers: list[Straggler], limit: int = MAX_LIST) -> list[str]:
    """One line per straggler (worst first): rank, host, section, scores, times."""
    out = []
    for s in stragglers[:limit]:
        host = f" ({inert(s.host)})" if s.host else ""
        out.append(
            f"rank {s.rank}{host}: {inert(s.section)} {format_duration(s.recent_seconds)} vs "
            f"{format_duration(s.reference_seconds)}, relative {_score(s.relative_score)}, "
            f"individual {_score(s.individual_score)}"
        )
    if len(stragglers) > limit:
        out.append(f"... and {len(stragglers) - limit} more (JSON: stragglers)")
    return out


def stall_lines(stalls: list[Stall], limit: int = MAX_LIST) -> list[str]:
    """One line per stall: start, duration, last step, who stopped first, where the time went."""
    out = []
    for st in stalls[:limit]:
        state = "STALLED (ongoing)" if st.ongoing else "stall"
        step = "-" if st.last_step is None else str(st.last_step)
        who = (
            f"ranks that stopped first: {_ranks_text(st.first_stopped)} ({st.why})"
            if st.first_stopped
            else st.why
        )
        line = (
            f"{state} in attempt {inert(st.attempt)} from {format_ts(st.start, millis=False)} for "
            f"{format_duration(st.seconds)} (no progress beyond {format_duration(st.threshold)}),"
            f" last step {step}; {who}"
        )
        if st.open_sections:
            opened = ", ".join(
                f"rank {r} in {inert(n)!r}" for r, n in list(st.open_sections.items())[:4]
            )
            line += f"; open sections: {opened}"
        if st.inside:
            line += f"; inside recorded {', '.join(inert(b) for b in st.inside)}"
        if st.buckets:
            parts = sorted(st.buckets.items(), key=lambda kv: (-kv[1], kv[0]))
            counted = ", ".join(f"{inert(k)} {format_duration(v)}" for k, v in parts)
            line += f"; counted as {counted} (a hang, not ordinary slowdown)"
        out.append(line)
    if len(stalls) > limit:
        out.append(f"... and {len(stalls) - limit} more (JSON: stalls)")
    return out


def _order(ranks: list[RankView]) -> list[RankView]:
    """Outliers first (most reasons first), then by rank."""
    return sorted(ranks, key=lambda v: (not v.outlier, -len(v.outlier), v.rank))


def summarize_ranks(ranks: list[RankView]) -> str:
    """One line on many ranks: how many, typical step and data-loading spread."""
    if not ranks:
        return "no ranks"
    typical = [v.typical_step_time for v in ranks if v.typical_step_time is not None]
    loads = [v.data_loading_seconds for v in ranks]
    hosts = {v.host for v in ranks if v.host}
    text = f"{len(ranks)} ranks on {len(hosts)} hosts"
    if typical:
        text += (
            f"; typical step median {format_duration(statistics.median(typical))} "
            f"(range {format_duration(min(typical))}..{format_duration(max(typical))})"
        )
    text += (
        f"; data loading median {format_duration(statistics.median(loads))} "
        f"(max {format_duration(max(loads))})"
    )
    return text


def _clock(ts: float) -> str:
    """``HH:MM:SS`` (UTC) of ``ts``: the table's last-event column (the date is in the header)."""
    if not math.isfinite(ts) or not MIN_TS <= ts <= MAX_TS:
        return "-"
    return time.strftime("%H:%M:%S", time.gmtime(ts))


def _rank_table(rows: list[RankView]) -> Table:
    """One row per rank. Numbers are never cut (their columns are as wide as their widest
    value); the host folds over lines and the reasons wrap, so the table fits 80 columns."""
    cells = [
        (
            str(v.rank),
            inert(v.host or "-"),  # log text: escaped, and drawn as Text (never markup)
            str(v.steps),
            "-" if v.last_step is None else str(v.last_step),
            "-" if v.typical_step_time is None else format_duration(v.typical_step_time),
            format_duration(v.data_loading_seconds),
            _clock(v.last_event),
        )
        for v in rows
    ]
    table = Table(
        title="Ranks (outliers first)", box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False
    )
    # "cycle": the median time from one step_start to the next, whatever the step does in it
    # (its batch's loading included: "load" is the rank's data loading in all); it was headed
    # "step", which it is not when the loading sits between a step_end and the next start.
    for i, col in enumerate(("rank", "host", "steps", "last", "cycle", "load", "last event")):
        widest = max([len(col), *(len(c[i]) for c in cells)])
        if col == "host":
            table.add_column(col, overflow="fold", min_width=min(widest, 8), max_width=widest)
        else:
            table.add_column(col, no_wrap=True, justify="right", min_width=widest)
    table.add_column("why listed", overflow="fold", min_width=10)
    for v, c in zip(rows, cells, strict=True):
        table.add_row(
            *(Text(cell) for cell in c),
            Text("; ".join(v.outlier), style="bold red" if v.outlier else ""),
        )
    return table


def render_ranks(report: Report, console: Console, *, full: bool) -> None:
    """Stragglers and stalls (always, when there are any); the per-rank table when ``full``."""
    if report.stalls:
        console.print(Text(f"Stalls ({len(report.stalls)})", style="bold red"))
        for line in stall_lines(report.stalls):
            console.print(Text(f"  {line}"), soft_wrap=True)
    if report.stragglers:
        console.print(Text(f"Stragglers ({len(report.stragglers)})", style="bold yellow"))
        for line in straggler_lines(report.stragglers):
            console.print(Text(f"  {line}"), soft_wrap=True)
    if not full:
        return
    if not report.ranks:
        console.print("no per-rank data (no rank recorded steps, intervals or sections)")
        return
    ordered = _order(report.ranks)
    outliers = [v for v in ordered if v.outlier]
    shown = ordered if len(ordered) <= MAX_RANK_ROWS else outliers[:MAX_RANK_ROWS]
    console.print(_rank_table(shown))
    console.print(
        Text("  cycle: median step_start to step_start (loading included); load: in all"),
        style="dim",
    )
    listed = {v.rank for v in shown}
    rest = [v for v in ordered if v.rank not in listed]
    if rest:
        console.print(Text(f"  other ranks: {summarize_ranks(rest)}"), soft_wrap=True)
    console.print(Text(f"  all: {summarize_ranks(report.ranks)}", style="dim"), soft_wrap=True)


def ongoing_stall(report: Report) -> Stall | None:
    """The stall still going on at the report's ``now`` (a live report), if any."""
    for stall in reversed(report.stalls):
        if stall.ongoing:
            return stall
    return None


def stall_headline(stall: Stall, now: float, *, who: bool = True) -> str:
    """``STALLED: no progress for 2m 05s (> 1m 00s), last step 41; stopped first: rank 2
    (in 'forward')``; ``who=False`` leaves out the ranks (see :func:`stall_who`)."""
    step = "-" if stall.last_step is None else str(stall.last_step)
    text = (
        f"STALLED: no progress for {format_duration(max(0.0, now - stall.start))} "
        f"(> {format_duration(stall.threshold)}), last step {step}"
    )
    return f"{text}; {stall_who(stall)}" if who else text


def stall_who(stall: Stall) -> str:
    """``stopped first: rank 2 (in 'forward')``, or why no rank is named."""
    if not stall.first_stopped:
        return stall.why
    label = "rank" if len(stall.first_stopped) == 1 else "ranks"
    text = f"stopped first: {label} {_ranks_text(stall.first_stopped)}"
    first = str(stall.first_stopped[0])
    if first in stall.open_sections:
        text += f" (in {inert(stall.open_sections[first])!r})"
    return text


def straggler_summary(stragglers: list[Straggler], limit: int = 3) -> str:
    """``rank 1 forward 0.31, rank 7 data_loading 0.62`` (worst first)."""
    parts = []
    for s in stragglers[:limit]:
        score = min(s.relative_score or 1.0, s.individual_score or 1.0)
        parts.append(f"rank {s.rank} {inert(s.section)} {score:.2f}")
    more = len(stragglers) - limit
    return ", ".join(parts) + (f" (+{more} more)" if more > 0 else "")
