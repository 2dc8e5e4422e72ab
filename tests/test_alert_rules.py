"""The shipped Prometheus alert rules (deploy/prometheus/badput-alerts.yml) and the Grafana
dashboard's panels, checked by the real ``promtool`` on series scraped from the real
exporter over 127.0.0.1, one scrape a minute of five jobs a Monitor follows as they grow:
healthy, slow to start (low goodput), in a crash loop, hung (heartbeats, no progress) and
gone silent (down)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from badput.events import Event
from badput.monitor import Monitor
from badput.monitor.prometheus import PrometheusExporter
from badput.testing import MemoryStore, Timeline, events_to_store

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "badput-alerts.yml"
DASHBOARD = ROOT / "docs" / "grafana-badput.json"
T0 = 1_700_000_000.0
MINUTES = 130  # one scrape a minute
SAMPLE = re.compile(r"^(badput_[a-z_]+)(\{[^}]*\})? (\S+)$")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None and shutil.which("apt-get"):  # as the Makefile's `browser` target does
        subprocess.run(
            "apt-get install -y -qq --no-install-recommends prometheus",
            shell=True,
            capture_output=True,
            check=False,
            timeout=600,
        )
        found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (Debian: apt-get install prometheus)"
        if shutil.which("apt-get"):  # installable here (make browser does): missing is a failure
            pytest.fail(message)
        pytest.skip(message)
    return found


def _heartbeats(tl: Timeline, until: float) -> None:
    t = tl.now
    while t + 10.0 < until:
        t += 10.0
        who = {k: v for k, v in tl.identity.items() if v is not None}
        tl.events.append(Event(ts=t, kind="heartbeat", job=tl.job, **who))


def jobs() -> dict[str, list[Event]]:
    """Two hours of five jobs (steps of 10 s)."""
    end = T0 + MINUTES * 60.0
    out: dict[str, list[Event]] = {}
    healthy = Timeline("healthy", start=T0)
    healthy.emit("job_start")
    healthy.steps(int((end - T0) / 10.0) - 1, 10.0)
    out["healthy"] = healthy.events
    slow = Timeline("slow", start=T0)
    slow.emit("job_start")
    step = 0
    while slow.now + 25.0 < end:  # a blocking 15 s load before each 10 s step: 40 % goodput
        slow.span("data_loading", 15.0)
        slow.span("step", 10.0, step=step)
        step += 1
    out["slow"] = slow.events
    loop = Timeline("loop", start=T0)
    for attempt in range(12):  # a crash every 10 minutes, restarted at once
        loop.identity["attempt"] = attempt
        loop.emit("job_start", dt=0.0 if attempt == 0 else 5.0)
        loop.steps(59, 10.0, first=0)
        loop.emit("attempt_end", status="failed", exit_code=1)
    out["loop"] = loop.events
    out["hung"] = []
    for rank, steps in ((0, 180), (1, 179)):  # 30 minutes, then rank 1 hangs, rank 0 waits
        hung = Timeline("hung", start=T0, rank=rank, host=f"h{rank}")
        hung.emit("job_start")
        hung.steps(steps, 10.0)
        _heartbeats(hung, end)  # the processes live: heartbeats only
        out["hung"] += hung.events
    out["hung"].sort(key=lambda e: e.ts)
    down = Timeline("down", start=T0)
    down.emit("job_start")
    down.steps(180, 10.0)  # 30 minutes, then nothing at all
    out["down"] = down.events
    return out


def scrape_over_time(
    all_events: dict[str, list[Event]] | None = None, price: float | None = None
) -> dict[str, list[float | None]]:
    """Series text → its value at each minute (None: absent), from real scrapes of
    ``all_events`` (default: :func:`jobs`); ``price``: per device-hour, on 4 devices."""
    store = MemoryStore()
    clock = [T0]
    exporter = PrometheusExporter(port=0)
    all_events = jobs() if all_events is None else all_events
    monitors = {
        name: Monitor(
            name,
            store,
            exporters=[exporter],
            clock=lambda: clock[0],
            interval=60,
            rolling_windows=(600,),  # the dashboard's window panels (--window 600)
        )
        for name in all_events
    }
    for mon in monitors.values():
        mon.live_job.accountant.price_per_device_hour = price
        mon.live_job.accountant.devices = None if price is None else 4
    done = dict.fromkeys(all_events, 0)
    series: dict[str, list[float | None]] = {}
    try:
        for minute in range(MINUTES):
            clock[0] = T0 + 60.0 * minute
            for name, events in all_events.items():
                new = [e for e in events[done[name] :] if e.ts <= clock[0]]
                if new:
                    events_to_store(store, new, name)
                    done[name] += len(new)
                monitors[name].run_once()
            assert exporter.url is not None and exporter.url.startswith("http://127.0.0.1:")
            with urllib.request.urlopen(exporter.url, timeout=5) as resp:
                text = resp.read().decode()
            for line in text.splitlines():
                m = SAMPLE.match(line)
                if m is None or m.group(1) in ("badput_up",):
                    continue
                key = m.group(1) + (m.group(2) or "")
                series.setdefault(key, [None] * MINUTES)[minute] = float(m.group(3))
    finally:
        for mon in monitors.values():
            mon.stop(final_flush=False, timeout=1.0)
        exporter.close()
    return series


@pytest.fixture(scope="module")
def scraped() -> dict[str, list[float | None]]:
    return scrape_over_time()


def input_series(series: dict[str, list[float | None]]) -> list[dict[str, str]]:
    """promtool's ``input_series`` (one value a minute, ``_`` where absent)."""
    out = []
    for key, values in sorted(series.items()):
        text = " ".join("_" if v is None else repr(v) for v in values)
        out.append({"series": key, "values": text})
    return out


def run_promtool(tmp_path: Path, tests: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False, width=10**9), encoding="utf-8")
    return subprocess.run(
        [promtool(), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def alert(name: str, job: str, severity: str, summary: str, **more: str) -> dict[str, Any]:
    return {
        "exp_labels": {"severity": severity, "job": job, **more},
        "exp_annotations": {"summary": summary, **more_annotations(name)},
    }


def more_annotations(name: str) -> dict[str, str]:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"][0]["rules"]
    (rule,) = [r for r in rules if r["alert"] == name]
    return {k: v for k, v in rule["annotations"].items() if k != "summary"}


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 4 rules found" in done.stdout


def test_each_alert_fires_on_the_jobs_it_is_for(
    scraped: dict[str, list[float | None]], tmp_path: Path
) -> None:
    # what the scrapes say, before promtool does: the shapes the alerts rely on
    assert scraped['badput_disruptions_total{job="loop"}'][-1] == 11.0  # 12 attempts
    assert scraped['badput_stalled{job="hung"}'][-1] == 1.0
    assert scraped['badput_job_state{job="down",state="down"}'][-1] == 1.0
    assert scraped['badput_job_state{job="healthy",state="running"}'][-1] == 1.0
    assert scraped['badput_goodput_ratio{job="slow"}'][-1] < 0.5  # type: ignore[operator]
    assert scraped['badput_goodput_ratio{job="healthy"}'][-1] > 0.95  # type: ignore[operator]
    at = f"{MINUTES - 1}m"
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(scraped),
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": "BadputGoodputLow",
                        # every job but the healthy one lost most of its time: the slow
                        # start, the hang, the silence, the crash loop's wasted steps
                        "exp_alerts": [
                            alert("BadputGoodputLow", job, "warning", f"{job}: goodput under 50 %")
                            for job in ("down", "hung", "loop", "slow")
                        ],
                    },
                    {
                        "eval_time": at,
                        "alertname": "BadputStalled",
                        "exp_alerts": [
                            alert(
                                "BadputStalled",
                                "hung",
                                "critical",
                                "hung: no rank makes progress (hung)",
                            )
                        ],
                    },
                    {
                        "eval_time": at,
                        "alertname": "BadputJobDown",
                        "exp_alerts": [
                            alert(
                                "BadputJobDown",
                                "down",
                                "critical",
                                "down: the job writes nothing (down)",
                                state="down",
                            )
                        ],
                    },
                    {
                        "eval_time": at,
                        "alertname": "BadputRestartLoop",
                        "exp_alerts": [
                            alert(
                                "BadputRestartLoop",
                                "loop",
                                "critical",
                                "loop: 3 restarts or more in the last hour",
                            )
                        ],
                    },
                    # half an hour in: nothing has been wrong long enough yet
                    *(
                        {"eval_time": "20m", "alertname": name, "exp_alerts": []}
                        for name in ("BadputGoodputLow", "BadputStalled", "BadputJobDown")
                    ),
                ],
            }
        ],
    }
    done = run_promtool(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def panel_exprs() -> list[tuple[str, str, bool]]:
    """(panel title, its PromQL with the variables set, whether it says "none" itself)."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = []
    for panel in dashboard["panels"]:
        says_none = bool(panel.get("fieldConfig", {}).get("defaults", {}).get("noValue"))
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$job", "healthy").replace("$window", "600s")
            out.append((panel["title"], expr, says_none))
    return out


def test_every_grafana_panel_shows_data_or_says_none_on_a_healthy_job(
    scraped: dict[str, list[float | None]], tmp_path: Path
) -> None:
    """Each panel's query, evaluated by promtool on the healthy job's real series, returns
    a series; the panels whose query rightly returns none on a healthy job (who stopped
    first in a stall, the stragglers) say so with their own "none" text."""
    exprs = panel_exprs()
    assert len(exprs) >= 20
    silent = {title for title, _e, says_none in exprs if says_none}
    assert silent, "the panels empty on a healthy job must say none"
    cases = []
    for _title, expr, says_none in exprs:
        want = [] if says_none else [{"labels": "{}", "value": 1}]
        cases.append({"expr": f"count({expr}) > bool 0", "eval_time": "100m", "exp_samples": want})
    healthy = {k: v for k, v in scraped.items() if 'job="healthy"' in k}
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": input_series(healthy), "promql_expr_test": cases}
        ],
    }
    done = run_promtool(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr
    # and the "none" panels do show series when there is something to show: the hung job
    hung = {k: v for k, v in scraped.items() if 'job="hung"' in k}
    stall_panels = [
        {
            "expr": f"count({e.replace('healthy', 'hung')}) > bool 0",
            "eval_time": "100m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        }
        for t, e, says_none in exprs
        if says_none and "stall" in e
    ]
    assert stall_panels
    tests["tests"] = [
        {"interval": "1m", "input_series": input_series(hung), "promql_expr_test": stall_panels}
    ]
    done = run_promtool(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_cost_panels_show_a_priced_jobs_money(tmp_path: Path) -> None:
    """The cost panels, evaluated by promtool on a priced job's real series (the healthy
    job above has no price: they say none there). 30 minutes of init, then 10 s steps, on
    4 devices at 3.00 (0.20 a minute): at minute 100, init cost 6.00 and the steps 14.00;
    badput is 30 % of 288.00 a day (86.40), and 0.00 a day at the last 10 minutes' rate."""
    priced = Timeline("priced", start=T0)
    priced.emit("job_start")
    priced.span("accelerator_init", 1800.0)
    priced.steps(int((MINUTES * 60.0 - 1800.0) / 10.0) - 1, 10.0)
    series = scrape_over_time({"priced": priced.events}, price=3.0)
    exprs = {title: e.replace("healthy", "priced") for title, e, _ in panel_exprs()}
    per_day = [e for t, e, _ in panel_exprs() if t == "Badput cost per day"]
    assert len(per_day) == 2
    so_far, window = (e.replace("healthy", "priced") for e in per_day)
    by_bucket = exprs["Cost so far by bucket"]
    want = [
        (so_far, 86.4),
        (window, 0.0),
        (by_bucket.replace("}", ', bucket="accelerator_init"}'), 6.0),
        (by_bucket.replace("}", ', bucket="productive"}'), 14.0),
    ]
    cases = [  # promtool compares exactly: the money to within 1e-9
        {
            "expr": f"abs(sum({expr}) - {value!r}) < bool 1e-9",
            "eval_time": "100m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        }
        for expr, value in want
    ]
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": input_series(series), "promql_expr_test": cases}
        ],
    }
    done = run_promtool(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr
