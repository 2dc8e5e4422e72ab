"""The terminal views of :class:`Advice` and :class:`WhatIf`: plain text, log text inert."""

from __future__ import annotations

from badput.advice._advise import Advice, Interval
from badput.advice._replay import WhatIf
from badput.report import format_duration, format_percent, inert

__all__ = ["render_advice", "render_whatif"]


def _pct(value: float | None) -> str:
    return "n/a" if value is None else format_percent(value)


def _dur(value: float | None) -> str:
    return "n/a" if value is None else format_duration(value)


def _interval_line(name: str, iv: Interval | None) -> str:
    if iv is None:
        return f"  {name:<12} n/a"
    return (
        f"  {name:<12} every {iv.steps:,} steps ({format_duration(iv.seconds)} of steps)"
        f"   expected goodput {_pct(iv.expected_goodput)}, replayed {_pct(iv.replayed_goodput)}"
    )


def render_advice(a: Advice) -> str:
    """``badput advise``'s table."""
    r = a.failure_rate
    lines = [
        f"Advice for job {inert(a.job)}: goodput {format_percent(a.goodput)} of "
        f"{format_duration(a.total_seconds)}",
        "",
        "Measured",
        f"  failures      {r.failures} in {r.running_hours:.2f} h running: "
        f"{r.per_hour:.3g}/h ({r.confidence:.0%}: {r.per_hour_low:.3g}-{r.per_hour_high:.3g}/h),"
        f" MTBF {_dur(r.mtbf_hours * 3600.0)}"
        + (f" (pooled over {len(a.pooled_jobs)} jobs)" if a.pooled_jobs else ""),
    ]
    c = a.checkpoint_cost
    lines.append(
        "  save cost     n/a (no blocking save)"
        if c is None
        else f"  save cost     median {format_duration(c.median)} (p10 {format_duration(c.low)},"
        f" p90 {format_duration(c.high)}, {c.count} saves)"
    )
    lines += [
        f"  restart       {_dur(a.restart_seconds)} per restart (down "
        f"{_dur(a.recovery_per_failure)}, restore {_dur(a.restore_per_failure)} per failure)",
        f"  lost          {_dur(a.lost_per_failure)} of progress per failure; at risk now "
        f"{format_duration(a.at_risk_seconds)}",
        f"  step time     {_dur(a.step_seconds)} (wall time per step, saves left out)",
        "",
        "Checkpoint interval"
        + (f" ({'Daly 2006' if a.formula == 'daly' else 'Young: sqrt(2 delta M)'})"
           if a.formula else ""),
        _interval_line("current", a.current),
        _interval_line("recommended", a.recommended),
        "",
        "Levers (time each would give back, at most)",
    ]  # fmt: skip
    for lv in a.levers or []:
        money = f"  ${lv.cost:,.2f}" if lv.cost is not None else ""
        lines.append(
            f"  {lv.name:<28} {format_duration(lv.gain_seconds):>9} "
            f"{format_percent(lv.gain_share):>7}{money}  {lv.detail}"
        )
    if not a.levers:
        lines.append("  none measured")
    lines += [f"note: {n}" for n in a.notes]
    return "\n".join(lines)


def render_whatif(w: WhatIf) -> str:
    """``badput whatif``'s side-by-side table."""
    names = sorted(set(w.real_buckets) | set(w.buckets), key=lambda b: -w.real_buckets.get(b, 0))
    s = w.settings
    changed = ", ".join(f"{k}={v}" for k, v in vars(s).items() if v not in (None, False))
    lines = [
        f"What if job {inert(w.job)} ran with {changed or 'its own settings'}",
        f"  {'bucket':<28} {'real':>10} {'replayed':>10}",
    ]
    for b in names:
        lines.append(
            f"  {inert(b, limit=28):<28} {format_duration(w.real_buckets.get(b, 0.0)):>10} "
            f"{format_duration(w.buckets.get(b, 0.0)):>10}"
        )
    lines += [
        f"  {'total':<28} {format_duration(w.real_total_seconds):>10} "
        f"{format_duration(w.total_seconds):>10}",
        f"  {'goodput':<28} {format_percent(w.real_goodput):>10} {format_percent(w.goodput):>10}",
        f"  {'observed goodput':<28} {format_percent(w.real_observed_goodput):>10} "
        f"{format_percent(w.observed_goodput):>10}",
    ]
    return "\n".join(lines)
