"""The HTML page's Advice section: the object of ``badput advise --json``'s ``"advice"``,
computed by the caller (the advice room is above this one: docs/architecture.md) and
handed in as plain data; every string escaped."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from badput.report._format import format_duration, format_money, format_percent, inert

__all__ = ["advice_section"]

_WHOLE = 1 << 40


def _e(text: object) -> str:
    return html.escape(inert(text, limit=_WHOLE), quote=True)


def _pct(value: object) -> str:
    return format_percent(value) if isinstance(value, (int, float)) else "n/a"


def _interval_row(name: str, iv: Mapping[str, Any] | None) -> str:
    if not iv:
        return f'<tr id="advice-{name}"><td>{name}</td><td colspan=4>n/a</td></tr>'
    steps, seconds = iv.get("steps"), iv.get("seconds")
    minutes = f"{seconds / 60.0:,.1f} min" if isinstance(seconds, (int, float)) else "n/a"
    return (
        f'<tr id="advice-{name}"><td>{name}</td>'
        f"<td class=num>{_e(f'{steps:,}' if isinstance(steps, int) else steps)}</td>"
        f"<td class=num>{_e(minutes)}</td>"
        f"<td class=num>{_e(_pct(iv.get('expected_goodput')))}</td>"
        f"<td class=num>{_e(_pct(iv.get('replayed_goodput')))}</td></tr>"
    )


def _rate(a: Mapping[str, Any]) -> str:
    r = a.get("failure_rate") or {}
    k, hours = r.get("failures", 0), r.get("running_hours") or 0.0
    conf = r.get("confidence") or 0.95
    return (
        f"{k} failure{'s' if k != 1 else ''} in {hours:,.2f} h of running time: "
        f"{r.get('per_hour', 0.0):.3g} per hour ({conf:.0%} interval "
        f"{r.get('per_hour_low', 0.0):.3g}-{r.get('per_hour_high', 0.0):.3g} per hour)"
    )


def _lever_rows(a: Mapping[str, Any]) -> str:
    levers = a.get("levers") or []
    if not levers:
        return "<tr><td colspan=5>none measured</td></tr>"
    rows = []
    for lv in levers:
        cost = lv.get("cost")
        rows.append(
            f"<tr><td>{_e(lv.get('name'))}</td>"
            f"<td class=num>{_e(format_duration(lv.get('gain_seconds') or 0.0))}</td>"
            f"<td class=num>{_e(_pct(lv.get('gain_share')))}</td>"
            f"<td class=num>{_e('-' if cost is None else format_money(cost))}</td>"
            f"<td class=dim>{_e(lv.get('detail'))}</td></tr>"
        )
    return "\n".join(rows)


def advice_section(advice: Mapping[str, Any] | None, absent: str | None = None) -> str:
    """The section of ``advice`` (``Advice.to_dict()``); with none, one line saying why
    (``absent``); the empty string when neither is given (a page made without advice)."""
    if advice is None:
        if absent is None:
            return ""
        return (
            f'<section id="advice">\n<h2>Advice</h2>\n'
            f'<p id="advice-absent">No advice: {_e(absent)}</p>\n</section>'
        )
    formula = {"daly": "Daly 2006", "young": "Young: √(2δM)"}.get(advice.get("formula") or "")
    why = advice.get("interval_reason")
    notes = "\n".join(f"<li>{_e(n)}</li>" for n in advice.get("notes") or [])
    return f"""<section id="advice">
<h2>Advice</h2>
<p id="advice-rate">{_e(_rate(advice))}</p>
<h3>Checkpoint interval{f" ({_e(formula)})" if formula else ""}</h3>
{f'<p id="advice-interval-reason">No recommended interval: {_e(why)}</p>' if why else ""}
<table id="advice-intervals"><thead><tr><th></th><th>steps</th><th>of steps</th>
<th>expected goodput</th><th>replayed goodput</th></tr></thead><tbody>
{_interval_row("current", advice.get("current"))}
{_interval_row("recommended", advice.get("recommended"))}
</tbody></table>
<h3>Levers</h3>
<table id="advice-levers"><thead><tr><th>change</th><th>gives back</th><th>%</th><th>cost</th>
<th>how it is measured</th></tr></thead><tbody>
{_lever_rows(advice)}
</tbody></table>
<ul id="advice-notes" class="dim">
{notes}
</ul>
</section>"""
