"""docs/grafana-badput.json: every metric and label its queries use is one the real
Prometheus exporter emits (scraped over 127.0.0.1)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from badput.monitor.prometheus import PrometheusExporter
from test_export_prometheus import WINDOW, parse, snapshot_at
from test_rank_exports import snapshot as ranks_snapshot

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
