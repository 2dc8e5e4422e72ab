"""The fleet in a terminal (rich, 80 columns) and as one self-contained HTML page.

Job names, buckets and statuses come from logs: in the terminal they are ``Text`` (never
markup) after :func:`~badput.report.inert`; in the page they are escaped, and the page has
no script at all (its Content-Security-Policy allows none), so no string of a log can run."""

from __future__ import annotations

import hashlib
import html
from typing import Any, Final

from badput import __version__
from badput.report import format_duration, format_money, format_percent, inert

__all__ = ["cost_headline", "fleet_html", "job_page_name", "render_fleet"]

_CSP: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)
_WHOLE: Final = 1 << 40


def job_page_name(job: str) -> str:
    """The file name of ``job``'s report page beside the fleet page: a digest of the name,
    never the name itself (log text names no file)."""
    return "job-" + hashlib.sha256(job.encode("utf-8", "surrogatepass")).hexdigest()[:20] + ".html"


def _hours(seconds: float) -> str:
    return format_duration(seconds)


def _money(amount: float | None) -> str:
    return "-" if amount is None else format_money(amount)


def cost_headline(summary: dict[str, Any]) -> str | None:
    """``cost 40.00 at 3.00 per device-hour (badput 20.00)``, and the jobs left out for
    want of a device count; None without a price."""
    price = summary.get("price_per_device_hour")
    if price is None:
        return None
    unpriced = summary["unpriced_jobs"]
    plural = "s" if unpriced != 1 else ""
    left = f"; {unpriced} job{plural} without devices left out" if unpriced else ""
    return (
        f"cost {_money(summary['cost'])} at {format_money(price)} per device-hour "
        f"(badput {_money(summary['badput_cost'])}){left}"
    )


def render_fleet(summary: dict[str, Any], console: Any) -> None:
    """The fleet's tables on ``console`` (a ``rich.console.Console``)."""
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    def t(value: object) -> Text:
        return Text(inert(value))

    console.print(
        Text(
            f"fleet: {summary['jobs']} jobs, {summary['attempts']} attempts, "
            f"{summary['failures']} failures; goodput {format_percent(summary['goodput'])} of "
            f"{_hours(summary['total_seconds'])} (lost {_hours(summary['badput_seconds'])})"
        )
    )
    money = cost_headline(summary)
    priced = money is not None
    if money is not None:
        console.print(Text(money))
    lost = Table(title="Time lost by cause", title_justify="left")
    for name in ("cause", "time", "% of all", "jobs", *(["cost"] if priced else [])):
        lost.add_column(name, justify="left" if name == "cause" else "right")
    for row in summary["lost_by_cause"]:
        lost.add_row(
            t(row["bucket"]), _hours(row["seconds"]), format_percent(row["share"]),
            str(row["jobs"]), *([_money(row["cost"])] if priced else []),
        )  # fmt: skip
    console.print(lost)
    worst = Table(title="Worst jobs by badput", title_justify="left")
    money_heads = ("cost", "lost") if priced else ()
    for name in ("job", "badput", "goodput", "fails", "top cause", *money_heads):
        worst.add_column(name, justify="left" if name in ("job", "top cause") else "right")
    for row in summary["worst_jobs"]:
        worst.add_row(
            t(row["job"]),
            _hours(row["badput_seconds"]),
            format_percent(row["goodput"]),
            str(row["failures"]),
            t(row["top_cause"] or "-"),
            *([_money(row["cost"]), _money(row["badput_cost"])] if priced else []),
        )
    console.print(worst)
    weeks = Table(title="Failures per week", title_justify="left")
    for name in ("week", "from", "failures", "run time", "MTBF"):
        weeks.add_column(name, justify="left" if name in ("week", "from") else "right")
    for row in summary["weeks"]:
        mtbf = row["mtbf_seconds"]
        weeks.add_row(
            row["week"],
            row["start"],
            str(row["failures"]),
            _hours(row["running_seconds"]),
            "-" if mtbf is None else format_duration(mtbf),
        )
    console.print(weeks)
    days = Table(title="Goodput per day (UTC)", title_justify="left")
    for name in ("day", "jobs", "time", "goodput", ""):
        days.add_column(name, justify="left" if name in ("day", "") else "right")
    for row in summary["days"]:
        bar = "█" * round(row["goodput"] * 20)
        days.add_row(
            row["day"],
            str(row["jobs"]),
            _hours(row["seconds"]),
            format_percent(row["goodput"]),
            bar,
        )
    console.print(days)
    for err in summary["errors"]:
        console.print(Text(f"error: {inert(err['job'])}: {inert(err['error'])}"))


def _e(text: object) -> str:
    return html.escape(inert(text, limit=_WHOLE), quote=True)


def _table(table_id: str, heads: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    body = "\n".join("<tr>" + "".join(rows_cells) + "</tr>" for rows_cells in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'


def _num(text: str) -> str:
    return f"<td class=num>{_e(text)}</td>"


def _bar(fraction: float) -> str:
    width = max(0.0, min(1.0, fraction)) * 100
    return f'<td><div class="bar"><span style="width:{width:.1f}%"></span></div></td>'


def _job_cell(job: str, links: str | None, store: str) -> str:
    if links is None:
        return f'<td title="badput report {_e(store)} --job {_e(job)} --html">{_e(job)}</td>'
    href = html.escape(f"{links.rstrip('/')}/{job_page_name(job)}", quote=True)
    return f'<td><a href="{href}">{_e(job)}</a></td>'


_STYLE: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 24px}th,td{padding:3px 10px;text-align:left}
th{border-bottom:1px solid #888}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even){background:#f4f4f4}.headline{font-size:20px}.dim{color:#666}
.bar{width:160px;height:10px;background:#eee}.bar span{display:block;height:10px;background:#3a7}
.bar.lost span{background:#c54}
"""


def _rows(
    summary: dict[str, Any], job_links: str | None
) -> tuple[list[list[str]], list[list[str]], list[list[str]], list[list[str]]]:
    """The cells of the page's four tables."""
    store = summary["source"]
    priced = summary.get("price_per_device_hour") is not None
    lost = [
        [
            "<td>" + _e(r["bucket"]) + "</td>",
            _num(_hours(r["seconds"])),
            _num(format_percent(r["share"])),
            _num(str(r["jobs"])),
            *([_num(_money(r["cost"]))] if priced else []),
            _bar(r["share"] / summary["lost_by_cause"][0]["share"]).replace('"bar"', '"bar lost"')
            if summary["lost_by_cause"][0]["share"] > 0
            else "<td></td>",
        ]
        for r in summary["lost_by_cause"]
    ]
    worst = [
        [
            _job_cell(r["job"], job_links, store),
            _num(_hours(r["badput_seconds"])),
            _num(format_percent(r["goodput"])),
            _num(str(r["attempts"])),
            _num(str(r["failures"])),
            "<td>" + _e(r["top_cause"] or "-") + "</td>",
            *([_num(_money(r["cost"])), _num(_money(r["badput_cost"]))] if priced else []),
        ]
        for r in summary["worst_jobs"]
    ]
    weeks = [
        [
            "<td>" + _e(r["week"]) + "</td>",
            "<td>" + _e(r["start"]) + "</td>",
            _num(str(r["failures"])),
            _num(_hours(r["running_seconds"])),
            _num("-" if r["mtbf_seconds"] is None else format_duration(r["mtbf_seconds"])),
        ]
        for r in summary["weeks"]
    ]
    days = [
        [
            "<td>" + _e(r["day"]) + "</td>",
            _num(str(r["jobs"])),
            _num(_hours(r["seconds"])),
            _num(format_percent(r["goodput"])),
            _bar(r["goodput"]),
        ]
        for r in summary["days"]
    ]
    return lost, worst, weeks, days


def fleet_html(summary: dict[str, Any], *, job_links: str | None = None) -> str:
    """The fleet's page: the same figures as ``--json``. ``job_links``: the directory
    (relative to the page) holding each job's report page, named by :func:`job_page_name`
    (``badput fleet --html-jobs``); None: each job names the command that draws it."""
    store = summary["source"]
    lost, worst, weeks, days = _rows(summary, job_links)
    errors = (
        "".join(f"<li>{_e(r['job'])}: {_e(r['error'])}</li>" for r in summary["errors"])
        or "<li>none</li>"
    )
    how = (
        "Each job links to its report page."
        if job_links is not None
        else "Each job's report: <code>badput report STORE --job JOB --html FILE</code> "
        "(hover a job for its command), or run <code>badput fleet --html-jobs DIR</code>."
    )
    goodput = format_percent(summary["goodput"])
    headline = cost_headline(summary)
    money = "" if headline is None else f'<p class="headline" id="cost">{_e(headline)}</p>'
    cost = ["cost", "badput cost"] if headline is not None else []
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="badput {_e(__version__)}">
<title>badput fleet: {_e(store)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>badput fleet: <span id="store">{_e(store)}</span></h1>
<p class="headline" id="headline">goodput <b id="goodput">{_e(goodput)}</b>
of {_e(_hours(summary["total_seconds"]))} over <span id="jobs">{summary["jobs"]}</span> jobs
({summary["attempts"]} attempts, {summary["failures"]} failures);
lost {_e(_hours(summary["badput_seconds"]))}</p>
{money}
<h2>Time lost by cause</h2>
{_table("lost", ["cause", "time", "% of all time", "jobs", *cost[:1], ""], lost)}
<h2>Worst jobs by badput</h2>
<p class="dim">{how}</p>
{_table("worst", ["job", "badput", "goodput", "attempts", "failures", "top cause", *cost], worst)}
<h2>Failures and MTBF per week</h2>
{_table("weeks", ["ISO week", "from", "failures", "run time", "MTBF"], weeks)}
<h2>Goodput per day (UTC)</h2>
{_table("days", ["day", "jobs", "time", "goodput", ""], days)}
<h2>Jobs that could not be read</h2>
<ul id="errors">{errors}</ul>
</body>
</html>
"""
