"""``badput report --html``: one self-contained, offline HTML file of a job.

The page embeds uPlot (MIT, vendored in ``_assets/`` with its licence) and a small
script of ours; it fetches nothing (a Content-Security-Policy forbids it, and
allows only the two scripts it carries, by hash). Every string from the log is
data: the static parts are escaped with :func:`html.escape`, and the charts read
one JSON document (``<script type="application/json">``, with ``<``, ``>`` and
``&`` written as ``\\u003c`` ... so nothing in it can close the element) and
draw text with ``textContent`` and the canvas only.

What no screen can show is aggregated: a lane with more than
:data:`MAX_SPANS_PER_LANE` spans is drawn as at most that many time bins, each
coloured by the bucket that holds most of its time and telling its shares on
hover; the step-time chart keeps at most :data:`MAX_POINTS` points (median and
maximum per bin). A million-step job gives a file of a few hundred KB. So are names: at
most :data:`~badput.engine.MAX_NAMED_BUCKETS` named buckets have a table row, a legend
entry and a column of the time bins; the others are one bucket per family
(:func:`~badput.engine.group_buckets`, as every view): a job of 20,000 custom names gives
a 0.3 MB page, not 120 MB.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import html
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from badput import __version__
from badput.engine import (
    STEP_BUCKETS,
    GoodputSeries,
    GroupedBuckets,
    IntervalSpan,
    MfuSeries,
    Report,
    Snapshot,
    Timeline,
    group_buckets,
)
from badput.report._csv import wasted_steps
from badput.report._format import (
    format_duration,
    format_money,
    format_percent,
    format_ts,
    goodput_health,
    inert,
)
from badput.report._html_advice import advice_section
from badput.report._table import bucket_description, grouped_note, ordered_buckets

if TYPE_CHECKING:
    from badput.engine import AttemptSummary

__all__ = [
    "MAX_POINTS",
    "MAX_SPANS_PER_LANE",
    "bucket_color",
    "html_report",
    "render_html",
]

F64 = npt.NDArray[np.float64]

#: Spans drawn per lane before a lane is drawn as time bins instead.
MAX_SPANS_PER_LANE = 3000
#: Points of the step-time chart before steps are binned (median and max per bin).
MAX_POINTS = 4000

_COLORS = {
    "productive": "#2e9e44",
    "slowdown": "#a6c83a",
    "startup": "#f2c12e",
    "wasted": "#d64541",
    "recovery": "#7f7f7f",
    "queued": "#b7b7b7",
    "untracked": "#e4dccf",
    "accelerator_init": "#8c6d31",
    "training_prep": "#bd9e39",
    "checkpoint_save": "#3b6fd8",
    "checkpoint_restore": "#8e5bd6",
    "data_loading": "#2bb0b0",
    "compile": "#e6842a",
    "elastic_reinit": "#c75d9c",
    "distributed_init": "#6b6ecf",
    "model_build": "#e7ba52",
    "teardown": "#a5a5a5",
    "hung": "#7b2d26",
    "attempt": "#cfd8e3",
    "custom:(other)": "#9aa0ac",  # the named buckets not shown one by one (group_buckets)
    "elastic_wait:(other)": "#b0a090",
}
_EXTRA = ("#17becf", "#9467bd", "#e377c2", "#bcbd22", "#8c564b", "#ff9896", "#98df8a", "#c49c94")


def bucket_color(name: str) -> str:
    """The colour of bucket ``name`` (custom and elastic buckets: a stable pick by name)."""
    if name in _COLORS:
        return _COLORS[name]
    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).digest()
    return _EXTRA[digest[0] % len(_EXTRA)]


def _r(x: float) -> float:
    return round(x, 6)


def _lane_spans(
    timeline: Timeline,
    sel: npt.NDArray[np.int64],
    ivs: list[IntervalSpan],
    *,
    names: list[str],
    index: dict[str, int],
    t0: float,
) -> dict[str, Any]:
    """One lane's rectangles (its steps ``sel``, its blocking intervals ``ivs``): every
    step and interval, or time bins of them."""
    steps = timeline.steps
    step_b = np.array([index[STEP_BUCKETS[b]] for b in range(len(STEP_BUCKETS))], np.int64)
    if sel.shape[0] + len(ivs) <= MAX_SPANS_PER_LANE:
        base = {
            "x0": [_r(float(x) - t0) for x in steps.start[sel]],
            "x1": [_r(float(x) - t0) for x in steps.end[sel]],
            "b": [int(b) for b in step_b[steps.bucket[sel]]],
            "s": [int(s) for s in steps.step[sel]],
            "d": [_r(float(x)) for x in steps.own[sel]],
            "open": [int(i) for i in np.flatnonzero(~steps.closed[sel])],
        }
        top = {
            "x0": [_r(iv.start - t0) for iv in ivs],
            "x1": [_r(iv.end - t0) for iv in ivs],
            "b": [index[iv.bucket] for iv in ivs],
        }
        return {"base": base, "top": top, "binned": False}
    # Too many to draw one by one: bins of time, each with its seconds per bucket.
    starts = [iv.start for iv in ivs] + ([float(steps.start[sel].min())] if sel.shape[0] else [])
    ends = [iv.end for iv in ivs] + ([float(steps.end[sel].max())] if sel.shape[0] else [])
    lo, hi = min(starts), max(ends)
    nbins = MAX_SPANS_PER_LANE // 2
    width = max((hi - lo) / nbins, 1e-9)
    long_ivs = [iv for iv in ivs if iv.end - iv.start >= width]
    short = [iv for iv in ivs if iv.end - iv.start < width]
    k = len(names)
    seconds = np.zeros((nbins, k))
    first_ts = np.full(nbins, math.inf)
    last_ts = np.full(nbins, -math.inf)
    smin = np.full(nbins, np.iinfo(np.int64).max)
    smax = np.full(nbins, np.iinfo(np.int64).min)
    count = np.zeros(nbins, np.int64)
    if sel.shape[0]:
        st, en = steps.start[sel], steps.end[sel]
        bi = np.clip(((st - lo) / width).astype(np.int64), 0, nbins - 1)
        np.add.at(seconds, (bi, step_b[steps.bucket[sel]]), steps.own[sel])
        np.minimum.at(first_ts, bi, st)
        np.maximum.at(last_ts, bi, en)
        np.minimum.at(smin, bi, steps.step[sel])
        np.maximum.at(smax, bi, steps.step[sel])
        np.add.at(count, bi, 1)
    if short:
        st = np.array([iv.start for iv in short])
        en = np.array([iv.end for iv in short])
        bi = np.clip(((st - lo) / width).astype(np.int64), 0, nbins - 1)
        np.add.at(seconds, (bi, np.array([index[iv.bucket] for iv in short])), en - st)
        np.minimum.at(first_ts, bi, st)
        np.maximum.at(last_ts, bi, en)
    used = np.flatnonzero(np.isfinite(first_ts))
    base = {
        "x0": [_r(float(first_ts[i]) - t0) for i in used],
        "x1": [_r(float(last_ts[i]) - t0) for i in used],
        "b": [int(np.argmax(seconds[i])) for i in used],
        "n": [int(count[i]) for i in used],
        "s0": [int(smin[i]) if count[i] else -1 for i in used],
        "s1": [int(smax[i]) if count[i] else -1 for i in used],
        "sh": [[round(float(v), 4) for v in seconds[i]] for i in used],
    }
    top = {
        "x0": [_r(iv.start - t0) for iv in long_ivs],
        "x1": [_r(iv.end - t0) for iv in long_ivs],
        "b": [index[iv.bucket] for iv in long_ivs],
    }
    return {"base": base, "top": top, "binned": True, "binSeconds": width}


def _step_series(timeline: Timeline, t0: float) -> dict[str, Any]:
    """Step time (own time) against the time each step ended (seconds after ``t0``): every
    step, or the median and maximum of time bins; a gap (null) between attempts."""
    steps = timeline.steps
    lane_attempt = np.array([ln.attempt_index for ln in timeline.lanes] or [0], np.int64)
    order = np.argsort(steps.end, kind="stable")
    t, d = steps.end[order] - t0, steps.own[order]
    att = lane_attempt[steps.lane[order]] if len(steps) else np.zeros(0, np.int64)
    ok = d > 0
    t, d, att = t[ok], d[ok], att[ok]
    binned = t.shape[0] > MAX_POINTS
    if binned:
        nb = MAX_POINTS // 2
        edges = np.linspace(float(t[0]), float(t[-1]), nb + 1)
        bi = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, nb - 1)
        key = bi * (int(att.max()) + 1) + att  # a bin never mixes attempts
        cut = np.flatnonzero(np.diff(key)) + 1
        groups = np.split(np.arange(t.shape[0]), cut)
        pts = [
            (float(t[g].mean()), float(np.median(d[g])), float(d[g].max()), int(att[g[0]]))
            for g in groups
        ]
    else:
        pts = [(float(a), float(b), float(b), int(c)) for a, b, c in zip(t, d, att, strict=True)]
    out_t: list[float] = []
    out_y: list[float | None] = []
    out_max: list[float | None] = []
    for i, (x, y, m, a) in enumerate(pts):
        if i and a != pts[i - 1][3]:  # no line across the time between attempts
            out_t.append(_r((pts[i - 1][0] + x) / 2))
            out_y.append(None)
            out_max.append(None)
        out_t.append(_r(x))
        out_y.append(_r(y))
        out_max.append(_r(m))
    series: dict[str, Any] = {"t": out_t, "y": out_y, "binned": binned}
    if binned:
        series["max"] = out_max
    return series


def _json_for_script(value: Any) -> str:
    """JSON that cannot end the ``<script>`` element holding it (nor open a comment)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for raw, esc in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, esc)
    return text


def _asset(name: str) -> str:
    return (resources.files("badput.report") / "_assets" / name).read_text(encoding="utf-8")


def _sha256(script: str) -> str:
    return (
        "'sha256-"
        + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
        + "'"
    )


def _e(text: object) -> str:
    """``text`` as inert HTML: markup escaped, and control characters (ESC, BEL...) shown
    as escapes (``\\x1b``), as the terminal views show them."""
    return html.escape(inert(text, limit=_WHOLE), quote=True)


_WHOLE: Final = 1 << 40  # a page shows log strings whole (its tables scroll)


def _cell(key: str, value: object) -> str:
    """A record's field as text: times as UTC, seconds as durations, scores as 3 digits."""
    if isinstance(value, float):
        if value > 1e8:  # a Unix time
            return format_ts(value, millis=False)
        if key.endswith("seconds") or key == "threshold":
            return format_duration(value)
        return f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {_cell(str(k), v)}" for k, v in value.items())
    return "-" if value is None else str(value)


def _records_table(table_id: str, records: list[Any]) -> str:
    """Dataclass records (the report's stragglers, stalls) as an escaped HTML table."""
    rows = [
        dataclasses.asdict(r)
        for r in records
        if dataclasses.is_dataclass(r) and not isinstance(r, type)
    ]
    if not rows:
        return ""
    keys = list(rows[0])
    head = "".join(f"<th>{_e(k)}</th>" for k in keys)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{_e(_cell(k, r.get(k)))}</td>" for k in keys) + "</tr>" for r in rows
    )
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'


def _ranks_section(report: Report) -> str:
    """Stragglers and stalls, when the report has them (multi-rank jobs)."""
    stragglers = list(getattr(report, "stragglers", []) or [])
    stalls = list(getattr(report, "stalls", []) or [])
    if not stragglers and not stalls:
        return ""
    parts = ["<section>", "<h2>Ranks: stragglers and stalls</h2>"]
    if stragglers:
        parts += [
            f"<h3>Stragglers ({len(stragglers)})</h3>",
            _records_table("stragglers", stragglers),
        ]
    if stalls:
        parts += [f"<h3>Stalls ({len(stalls)})</h3>", _records_table("stalls", stalls)]
    parts.append("</section>")
    return "\n".join(parts)


def _card(key: str, value: str, note: str, cls: str = "") -> str:
    slug = key.replace(" ", "-")
    return (
        f'<div class="card {cls}"><div class="k">{_e(key)}</div>'
        f'<div class="v" id="{slug}">{_e(value)}</div><div class="dim">{_e(note)}</div></div>'
    )


def _attempt_rows(report: Report, wasted: list[int]) -> str:
    def step(x: int | None) -> str:
        return "-" if x is None else str(x)

    rows = []
    a: AttemptSummary
    for i, a in enumerate(report.attempts):
        ended = a.end_reason + (f" (exit {a.exit_code})" if a.exit_code is not None else "")
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{_e(c)}</td>"
                for c in (
                    a.id,
                    format_ts(a.start, millis=False),
                    format_duration(a.end - a.start),
                    ended,
                    step(a.restore_step),
                    step(a.first_step),
                    step(a.last_step),
                    wasted[i],
                )
            )
            + "</tr>"
        )
    return "\n".join(rows)


def _pictured(grouped: GroupedBuckets, report: Report, timeline: Timeline) -> GroupedBuckets:
    """The grouping of every bucket the timeline draws: the report's (``grouped``), and the
    named buckets it does not hold (overlapped intervals, intervals outside a window) in the
    places it leaves, largest drawn time first; the others in their family's group."""
    extra: dict[str, float] = {}
    for iv in timeline.intervals:
        if iv.bucket not in report.buckets:
            extra[iv.bucket] = extra.get(iv.bucket, 0.0) + (iv.end - iv.start)
    if not extra:
        return grouped
    return group_buckets({**extra, **report.buckets}, keep=grouped.named)


def _label(name: str, grouped: GroupedBuckets, pictured: GroupedBuckets) -> str:
    """The name the page writes for bucket ``name``: a group says how many names it holds
    (as the bucket table counts them, when the report has that group)."""
    return grouped.label(name) if name in grouped.groups else pictured.label(name)


@dataclass
class _Columns:
    """The buckets the page draws, in order, and the column each is drawn in: one legend
    entry, table row and time-bin column per bucket shown (the named buckets beyond
    MAX_NAMED_BUCKETS grouped: a custom name per step made 120 MB pages)."""

    grouped: GroupedBuckets
    pictured: GroupedBuckets
    shown: list[str]
    names: list[str]
    index: dict[str, int]


def _columns(report: Report, timeline: Timeline) -> _Columns:
    grouped = group_buckets(report.buckets)
    shown = [name for name, _ in ordered_buckets(grouped.buckets)]
    pictured = _pictured(grouped, report, timeline)
    names = list(shown)
    # buckets drawn but empty in the report (a step colour, an interval outside a window)
    drawn = {pictured.bucket_of(b) for b in timeline.intervals.buckets()}
    extra = sorted((set(STEP_BUCKETS) | drawn) - set(names))
    names += [*extra, "attempt"]
    return _Columns(grouped, pictured, shown, names, {n: i for i, n in enumerate(names)})


def _job_lane(report: Report, cols: _Columns) -> dict[str, list[Any]]:
    """The job's lane: queued time, each attempt and the recovery after it (a bucket
    drawn here and not in the report gets a column of its own)."""
    t0, names, index = report.start, cols.names, cols.index
    job_lane: dict[str, list[Any]] = {"x0": [], "x1": [], "b": [], "a": []}
    if report.attempts:
        if report.buckets.get("queued", 0.0) > 0:
            job_lane["x0"].append(0.0)
            job_lane["x1"].append(_r(report.attempts[0].start - t0))
            job_lane["b"].append(index.setdefault("queued", len(names)))
            job_lane["a"].append(-1)
        for i, a in enumerate(report.attempts):
            job_lane["x0"].append(_r(a.start - t0))
            job_lane["x1"].append(_r(a.end - t0))
            job_lane["b"].append(index["attempt"])
            job_lane["a"].append(i)
            nxt = report.attempts[i + 1].start if i + 1 < len(report.attempts) else report.end
            if nxt > a.end:
                job_lane["x0"].append(_r(a.end - t0))
                job_lane["x1"].append(_r(nxt - t0))
                job_lane["b"].append(index.setdefault("recovery", len(names)))
                job_lane["a"].append(-1)
    if len(index) > len(names):
        cols.names = sorted(index, key=index.__getitem__)
    return job_lane


def _lanes(
    report: Report, timeline: Timeline, cols: _Columns
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every attempt's (or rank's) lane and its spans."""
    t0 = report.start
    # every bucket an interval or a step is drawn in -> its column (a grouped name: its group's)
    drawn_at = dict(cols.index)
    for b in timeline.intervals.buckets():
        drawn_at[b] = cols.index[cols.pictured.bucket_of(b)]
    multi_rank = any(ln.rank is not None for ln in timeline.lanes)
    lanes: list[dict[str, Any]] = [{"label": "job", "kind": "job"}]
    spans = []
    # steps are sorted by lane: each lane's are one slice
    bounds = np.searchsorted(timeline.steps.lane, np.arange(len(timeline.lanes) + 1))
    blocking: dict[int, list[IntervalSpan]] = {}
    for iv in timeline.intervals:
        if iv.blocking:
            blocking.setdefault(iv.lane, []).append(iv)
    for li, ln in enumerate(timeline.lanes):
        label = f"attempt {ln.attempt}"
        if multi_rank:
            label += f" rank {ln.rank}"
        full = label + (f" on {ln.host}" if ln.host else "")
        att = report.attempts[ln.attempt_index]
        lanes.append(
            {
                "label": label,
                "full": full,
                "kind": "rank" if multi_rank else "attempt",
                "attempt": ln.attempt_index,
                "a0": _r(att.start - t0),
                "a1": _r(att.end - t0),
            }
        )
        sel = np.arange(int(bounds[li]), int(bounds[li + 1]), dtype=np.int64)
        spans.append(
            _lane_spans(
                timeline, sel, blocking.get(li, []), names=cols.names, index=drawn_at, t0=t0
            )
        )
    return lanes, spans


def _mfu_data(report: Report, mfu: MfuSeries | None) -> dict[str, Any] | None:
    """MFU over time for the page's chart; None when the log records no work (no section)."""
    p = report.program
    if p is None:
        return None
    if mfu is None:
        return {"absent": "No MFU: " + p.absent.get("program_goodput", "not computed")}
    return {
        "t": mfu.t,
        "cumulative": mfu.cumulative,
        "rolling": mfu.rolling,
        "rollingLabel": f"MFU, rolling ({format_duration(mfu.rolling_seconds)})",
    }


def _chart_data(
    report: Report, timeline: Timeline, goodput: GoodputSeries, mfu: MfuSeries | None = None
) -> dict[str, Any]:
    """The one JSON document the page's script draws from."""
    cols = _columns(report, timeline)
    job_lane = _job_lane(report, cols)
    lanes, spans = _lanes(report, timeline, cols)
    attempts_json: list[dict[str, Any]] = [
        {
            "id": str(a.id),
            "start": a.start,
            "end": a.end,
            "ended": a.end_reason + (f" (exit {a.exit_code})" if a.exit_code is not None else ""),
            "restore": a.restore_step,
        }
        for a in report.attempts
    ]
    grouped, pictured = cols.grouped, cols.pictured
    return {
        "job": report.job,
        "t0": report.start,
        "t1": report.end,
        "buckets": [
            {
                "name": _label(n, grouped, pictured),
                "seconds": _r(grouped.buckets.get(n, 0.0)),
                "color": bucket_color(n),
            }
            for n in cols.names
        ],
        "shown": [_label(n, grouped, pictured) for n in cols.shown],
        "total": report.total_seconds,
        "lanes": lanes,
        "jobLane": job_lane,
        "spans": spans,
        "attempts": attempts_json,
        "goodput": {
            "t": goodput.t,
            "cumulative": goodput.cumulative,
            "observed": goodput.observed,
            "rolling": goodput.rolling,
            "rollingLabel": f"rolling ({format_duration(goodput.rolling_seconds)})",
        },
        "mfu": _mfu_data(report, mfu),
        "stepTime": _step_series(timeline, report.start),
        "ideal": report.ideal_step_time,
        "stepBuckets": list(STEP_BUCKETS),
    }


def _span_text(report: Report) -> str:
    reason: str = report.end_reason
    if reason == "job_end" and report.attempts and report.attempts[-1].status:
        reason = f"job_end (status: {report.attempts[-1].status})"
    if not report.attempts:
        return "no span: no events to account for"  # (not one dated 1970)
    return (
        f"{_e(format_ts(report.start))} → {_e(format_ts(report.end))} "
        f"({_e(format_duration(report.total_seconds))}), ended by {_e(reason)}"
    )


def _headline(report: Report) -> str:
    """The cards at the top of the page."""
    total = report.total_seconds
    ideal = "none (fewer than 5 clean steps)"
    if report.ideal_step_time is not None:
        ideal = f"{format_duration(report.ideal_step_time)} ({report.ideal_step_time_source})"
    health = goodput_health(report.goodput)  # 0.5 % is never drawn healthy green
    return f"""\
{_card("goodput", format_percent(report.goodput), "productive / total", health)}
{_card("observed goodput", format_percent(report.observed_goodput), "productive + slowdown")}
{_card("total", format_duration(total), "job span" if report.window is None else "window")}
{_card("at risk", format_duration(report.at_risk_seconds), "steps after the newest checkpoint")}
{_card("steps", f"{report.steps.kept} kept", f"{report.steps.wasted} wasted · ideal {ideal}")}
{_program_cards(report)}"""


def _program_cards(report: Report) -> str:
    """MFU and MPG cards, when the log records work (docs/program-goodput.md)."""
    p = report.program
    if p is None:
        return ""
    why = p.absent.get("program_goodput", "not computed")
    mfu = "-" if p.mfu_productive is None else format_percent(p.mfu_productive)
    mpg = "-" if p.mpg is None else format_percent(p.mpg)
    return (
        _card("MFU", mfu, "kept steps" if p.mfu_productive is not None else why)
        + "\n"
        + _card("MPG", mpg, "SG x RG x PG" if p.mpg is not None else why)
    )


def _mfu_section(report: Report) -> str:
    """The MFU-over-time chart's place (drawn by the script), when the log records work."""
    if report.program is None:
        return ""
    return """
<h3>Model FLOPs utilisation over time</h3>
<div id="mfu-chart" class="chart"></div>"""


def _bucket_rows(report: Report) -> tuple[str, str, str]:
    """The bucket table's head cells, its rows, and the note on grouped names (or "")."""
    grouped = group_buckets(report.buckets)
    total = report.total_seconds
    cost = report.cost  # a column of its own with a price (engine/_cost.py)
    rows = "\n".join(
        f'<tr><td><span class="sw" style="background:{bucket_color(n)}"></span>'
        f"{_e(grouped.label(n))}</td>"
        f"<td class=num>{_e(format_duration(v))}</td>"
        f"<td class=num>{_e(format_percent(v / total if total > 0 else 0.0))}</td>"
        + (f"<td class=num>{_e(format_money(cost.money(v)))}</td>" if cost is not None else "")
        + f"<td class=dim>{_e(bucket_description(n, grouped))}</td></tr>"
        for n, v in ordered_buckets(grouped.buckets)
    )
    note = grouped_note(grouped, total)
    cost_th = "<th>cost</th>" if cost is not None else ""
    head = f"<th>bucket</th><th>time</th><th>%</th>{cost_th}<th>what it is</th>"
    return head, rows, f'<p class="dim" id="grouped-note">{_e(note)}</p>' if note else ""


def _scripts() -> tuple[str, str, str]:
    """The page's two scripts, and the Content-Security-Policy that allows them alone."""
    app = _asset("report.js")
    uplot = _asset("uPlot.iife.min.js")
    csp = (
        "default-src 'none'; "
        f"script-src {_sha256(uplot)} {_sha256(app)}; "
        "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    )
    return app, uplot, csp


def render_html(snapshot: Snapshot, advice_html: str = "") -> str:
    """The page of ``snapshot`` (made with ``drawing=True``) and its Advice section: pure."""
    report = snapshot.report
    timeline = snapshot.drawn("the HTML page")
    goodput = snapshot.over_time("the HTML page")
    data = _chart_data(report, timeline, goodput, snapshot.mfu_over_time)
    app, uplot, csp = _scripts()
    wasted = wasted_steps(timeline, len(report.attempts))
    bucket_head, bucket_rows, grouped_p = _bucket_rows(report)
    diags = "\n".join(f"<li>{_e(str(d))}</li>" for d in report.diagnostics) or "<li>none</li>"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="badput {_e(__version__)}">
<title>badput: {_e(report.job)}</title>
<style>{_asset("uPlot.min.css")}</style>
<style>{_asset("report.css")}</style>
</head>
<body>
<header>
<h1>badput report: <span id="job">{_e(report.job)}</span></h1>
<div class="span">{_span_text(report)}</div>
</header>
<section class="headline">
{_headline(report)}
</section>
<section>
<h2>Where the time went</h2>
<div class="row"><div id="buckets-chart" class="chart"></div>
<table id="buckets">
<thead><tr>{bucket_head}</tr></thead>
<tbody>
{bucket_rows}
</tbody></table></div>
{grouped_p}
</section>
{advice_html}
<section>
<h2>Timeline</h2>
<p class="dim">Drag to zoom, double-click to zoom out; hover a span to see what it is.
Time inside an attempt that no span covers is untracked.</p>
<div id="legend" class="legend"></div>
<div id="timeline" class="chart"></div>
<p class="dim" id="binned-note"></p>
</section>
<section>
<h2>Goodput over time</h2>
<div id="goodput-chart" class="chart"></div>{_mfu_section(report)}
</section>
<section>
<h2>Step time against the ideal step time</h2>
<div id="steptime-chart" class="chart"></div>
</section>
<section>
<h2>Attempts</h2>
<table id="attempts"><thead><tr><th>id</th><th>start (UTC)</th><th>duration</th><th>ended by</th>
<th>restored from</th><th>first step</th><th>last step</th><th>wasted steps</th></tr></thead>
<tbody>
{_attempt_rows(report, wasted)}
</tbody></table>
</section>
{_ranks_section(report)}
<section>
<h2>Diagnostics ({len(report.diagnostics)})</h2>
<ul id="diagnostics">
{diags}
</ul>
</section>
<footer class="dim">Made by badput {_e(__version__)}.
Charts: uPlot 1.6.32, © Leon Sorokin, MIT licence.</footer>
<div id="tooltip" class="tooltip" hidden></div>
<script type="application/json" id="badput-data">{_json_for_script(data)}</script>
<script>{uplot}</script>
<script>{app}</script>
</body>
</html>
"""


def html_report(
    snapshot: Snapshot, advice: Mapping[str, Any] | None = None, advice_absent: str | None = None
) -> str:
    """The HTML page of ``snapshot`` (made with ``drawing=True``): what the engine computed
    (no I/O but reading the assets); ``advice``: the Advice section's data (``badput advise
    --json``'s ``"advice"``, computed by the caller), or why there is none."""
    return render_html(snapshot, advice_section(advice, advice_absent))
