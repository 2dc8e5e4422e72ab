"""docs/grafana-badput.json: every metric and label its queries use is one the real
Prometheus exporter emits (scraped over 127.0.0.1)."""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from badput.monitor.prometheus import PrometheusExporter
from test_export_prometheus import WINDOW, parse, snapshot_at
from test_rank_exports import snapshot as ranks_snapshot

if TYPE_CHECKING:
    from badput.monitor import Snapshot

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-badput.json"
METRIC = re.compile(r"\bbadput_[a-z_]+\b")
SELECTOR = re.compile(r"(badput_[a-z_]+)\{([^}]*)\}")
BY_LABELS = re.compile(r"\b(?:ignoring|on|by|without)\s*\(([^)]*)\)")


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and template variables."""
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            out.append(var["query"]["query"])
    return out


def test_dashboard_queries_use_only_emitted_metrics_and_labels() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = queries(dashboard)
    used = {m for e in exprs for m in METRIC.findall(e)}
    assert len(used) >= 19  # goodput, buckets, windows, at risk, step time, stalls, stragglers
    exporter = PrometheusExporter(port=0)  # 127.0.0.1, a free port
    try:
        snap = snapshot_at(180)
        assert snap.step_time is not None and snap.step_time.gcm_deviation is not None
        exporter.export(snap)
        # a multi-rank job with a stall and a straggler: the per-rank series exist
        ranks = ranks_snapshot()
        assert ranks.report.stalls and ranks.report.stragglers
        exporter.export(ranks)
        exporter.export(priced_snapshot())  # a job with a price: the cost series exist
        assert exporter.url is not None and exporter.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(exporter.url, timeout=5) as resp:
            _types, samples = parse(resp.read().decode())
    finally:
        exporter.close()
    emitted: dict[str, set[str]] = {}
    for name, labels in samples:
        emitted.setdefault(name, set()).update(k for k, _ in labels)
    missing = sorted(used - set(emitted))
    assert not missing, f"the dashboard queries metrics the exporter does not emit: {missing}"
    # label names in selectors, by(), ignoring(), label_values() exist on those metrics
    for e in exprs:
        for name, body in SELECTOR.findall(e):
            for label in re.findall(r"([a-zA-Z_]+)\s*=~?", body):
                assert label in emitted[name], (e, label)
        for group in BY_LABELS.findall(e):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert any(label in labels for labels in emitted.values()), (e, label)
        lv = re.match(r"label_values\((badput_[a-z_]+)(?:\{[^}]*\})?,\s*([a-z_]+)\)", e)
        if e.startswith("label_values"):
            assert lv is not None, e
            assert lv.group(2) in emitted[lv.group(1)], e
    assert f"{int(WINDOW)}s" in {dict(k[1]).get("window") for k in samples}


def test_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "job", "window"}
    for p in dashboard["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"][
            "w"
        ] <= 24
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs))
        for t in p["targets"]:
            # brackets balance; every $variable is one the dashboard defines
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            assert t["expr"].count("{") == t["expr"].count("}"), t["expr"]
            assert set(re.findall(r"\$([a-z_]+)", t["expr"])) <= variables, t["expr"]


@pytest.mark.parametrize(
    "needle",
    ["badput_window_goodput_ratio", "badput_at_risk_seconds", "badput_stalled", "badput_straggler"],
)
def test_dashboard_covers_the_issue_panels(needle: str) -> None:
    assert needle in DASHBOARD.read_text(encoding="utf-8")


def priced_snapshot() -> Snapshot:
    """test_cost.py's worked example at 3.00 per device-hour on 4 devices, as job "priced"."""
    from test_cost import _snapshot

    return dataclasses.replace(_snapshot(), job="priced")


def select(expr: str, samples: dict[Any, float]) -> dict[tuple[tuple[str, str], ...], float]:
    """What a panel's instant selector ``metric{label=~"re", ...}`` returns from scraped
    ``samples``, with every variable at Grafana's "All" (``.*``): labels -> value."""
    every = expr.replace("$job", ".*").replace("$window", ".*")
    m = re.fullmatch(r"(badput_[a-z_]+)\{([^}]*)\}", every)
    assert m is not None, expr
    matchers = re.findall(r'([a-z_]+)\s*(=~|=)\s*"([^"]*)"', m.group(2))
    out = {}
    for (name, labels), value in samples.items():
        have = dict(labels)
        if name == m.group(1) and all(
            re.fullmatch(v, have.get(k, "")) if op == "=~" else have.get(k) == v
            for k, op, v in matchers
        ):
            out[labels] = value
    return out


def test_cost_panels_show_the_money_or_say_none() -> None:
    """The cost panels (badput $/day, cost by bucket) on a priced job: the hand-computed
    money (the worked example: 144.00 a day of badput, wasted 8.00); on a job without a
    price their queries return nothing and the panels say "none"."""
    from test_cost import EXPECTED_MONEY

    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    per_day, by_bucket = (
        next(p for p in dashboard["panels"] if p["title"] == title)
        for title in ("Badput cost per day", "Cost so far by bucket")
    )
    priced = priced_snapshot()
    for exported, priced_job in ((snapshot_at(200), False), (priced, True)):
        exporter = PrometheusExporter(port=0)
        try:
            exporter.export(exported)
            assert exporter.url is not None
            with urllib.request.urlopen(exporter.url, timeout=5) as resp:
                _types, samples = parse(resp.read().decode())
        finally:
            exporter.close()
        so_far, window = (select(t["expr"], samples) for t in per_day["targets"])
        buckets = select(by_bucket["targets"][0]["expr"], samples)
        if not priced_job:
            assert so_far == window == buckets == {}
            for panel in (per_day, by_bucket):
                assert panel["fieldConfig"]["defaults"]["noValue"].startswith("none")
            continue
        assert list(so_far.values()) == pytest.approx([144.0])
        w = priced.windows[WINDOW]
        assert window == {
            (("job", "priced"), ("window", f"{int(WINDOW)}s")): pytest.approx(
                288.0 * (1.0 - w.goodput)
            )
        }
        assert {dict(k)["bucket"]: v for k, v in buckets.items()} == pytest.approx(EXPECTED_MONEY)
