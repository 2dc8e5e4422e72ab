"""``badput fleet --price-per-device-hour`` (docs/advice.md#cost): each job's money on the
devices its log names (the model event's, else one per rank), the fleet's and each
cause's, in the JSON, the terminal table, the HTML page (in a real Chromium) and the
Parquet tables, and the same money from results the cache kept without any price.

Two jobs, at 3.00 per device-hour:

- ``eight``: one rank, a model event of 8 devices (24.00 an hour): 10 minutes of init and
  20 of 1 s steps: 12.00, 4.00 of it badput (the init);
- ``pair``: two ranks, no model event (2 devices, 6.00 an hour): 20 minutes of init, 40 of
  steps: 6.00, 2.00 of it badput.

The fleet: 18.00, 6.00 of it badput, all of it accelerator init.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from badput.cli import main
from badput.fleet import fleet_summary
from badput.testing import Timeline, events_to_jsonl

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
PRICE = ["--price-per-device-hour", "3"]


def _job(root: Path, job: str, rank: int, init: float, *, steps: int, devices: int | None) -> None:
    tl = Timeline(job, start=T0, rank=rank)
    tl.emit("job_start")
    if devices is not None:
        tl.emit("model", devices=devices)
    tl.span("accelerator_init", init)
    tl.steps(steps, 1.0)
    tl.emit("job_end", status="completed")
    events_to_jsonl(root / job / "0" / f"h{rank}-{rank}-1.jsonl", tl.events)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    _job(root, "eight", 0, 600.0, steps=1200, devices=8)
    for rank in (0, 1):
        _job(root, "pair", rank, 1200.0, steps=2400, devices=None)
    return root


def fleet(*args: str) -> str:
    result = CliRunner().invoke(main, ["fleet", *args, "--engine", "serial"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_fleet_json_in_money(store: Path, tmp_path: Path) -> None:
    summary = json.loads(fleet(str(store), "--no-cache", "--json", *PRICE))
    assert summary["price_per_device_hour"] == 3.0
    assert (summary["cost"], summary["badput_cost"]) == pytest.approx((18.0, 6.0))
    assert summary["unpriced_jobs"] == 0
    (init,) = summary["lost_by_cause"]
    assert (init["bucket"], init["cost"]) == ("accelerator_init", pytest.approx(6.0))
    jobs = {r["job"]: r for r in summary["worst_jobs"]}
    assert (jobs["eight"]["devices"], jobs["pair"]["devices"]) == (8, 2)
    assert (jobs["eight"]["cost"], jobs["eight"]["badput_cost"]) == pytest.approx((12.0, 4.0))
    assert (jobs["pair"]["cost"], jobs["pair"]["badput_cost"]) == pytest.approx((6.0, 2.0))
    plain = json.loads(fleet(str(store), "--no-cache", "--json"))
    assert (plain["cost"], plain["badput_cost"], plain["price_per_device_hour"]) == (None,) * 3
    assert plain["lost_by_cause"][0]["cost"] is None and plain["worst_jobs"][0]["cost"] is None
    # every figure but the money is the same with a price or without
    money = {"price_per_device_hour", "cost", "badput_cost", "unpriced_jobs"}
    rest = money | {"lost_by_cause", "worst_jobs"}
    assert {k: v for k, v in summary.items() if k not in rest} == {
        k: v for k, v in plain.items() if k not in rest
    }


def test_cached_results_price_at_any_price(store: Path, tmp_path: Path) -> None:
    """Results are cached without money (keyed by the job's files only); the money is the
    summary's: a run at another price reads every job from the cache and prices it right."""
    cache = tmp_path / "cache"
    first = CliRunner().invoke(main, ["fleet", str(store), "--cache", str(cache), "--json"])
    assert first.exit_code == 0 and "2 analysed, 0 from the cache" in first.stderr
    priced = CliRunner().invoke(
        main, ["fleet", str(store), "--cache", str(cache), "--json", "--price-per-device-hour", "6"]
    )
    assert priced.exit_code == 0 and "0 analysed, 2 from the cache" in priced.stderr
    summary = json.loads(priced.stdout)
    assert (summary["cost"], summary["badput_cost"]) == pytest.approx((36.0, 12.0))  # twice 3.00's
    kept = [json.loads(p.read_text()) for p in cache.rglob("*.json")]
    assert len(kept) == 2 and all("cost" not in k["result"] for k in kept)
    assert sorted(k["result"]["devices"] for k in kept) == [2, 8]


def test_a_job_without_devices_is_left_out_of_the_money() -> None:
    results: list[dict[str, Any]] = [
        {"job": "x", "error": None, "total_seconds": 3600.0, "goodput_seconds": 1800.0,
         "buckets": {"productive": 1800.0, "wasted": 1800.0}, "attempts": [], "days": [],
         "devices": 4},
        {"job": "old", "error": None, "total_seconds": 3600.0, "goodput_seconds": 0.0,
         "buckets": {"wasted": 3600.0}, "attempts": [], "days": []},
    ]  # fmt: skip
    s = fleet_summary(results, source="s", price=2.5)
    assert (s["cost"], s["badput_cost"], s["unpriced_jobs"]) == (10.0, 5.0, 1)
    assert s["lost_by_cause"][0] == {
        "bucket": "wasted", "seconds": 5400.0, "share": 0.75, "jobs": 2, "cost": 5.0
    }  # fmt: skip


def test_fleet_terminal_table_in_money(store: Path) -> None:
    text = fleet(str(store), "--no-cache", *PRICE)
    assert "cost 18.00 at 3.00 per device-hour (badput 6.00)" in text
    lines = text.splitlines()
    (cause,) = [line for line in lines if line.startswith("│ accelerator_init")]
    assert cause.split("│")[-2].strip() == "6.00"
    (eight,) = [line for line in lines if line.startswith("│ eight")]
    assert [c.strip() for c in eight.split("│")[-3:-1]] == ["12.00", "4.00"]
    assert "per device-hour" not in fleet(str(store), "--no-cache")


def test_fleet_parquet_cost_columns(store: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from badput.fleet import read_tables

    out = tmp_path / "tables"
    fleet(str(store), "--no-cache", "--parquet", str(out), *PRICE)
    tables = {name: t.to_pylist() for name, t in read_tables(out).items()}
    jobs = {r["job"]: r for r in tables["jobs"]}
    assert (jobs["eight"]["devices"], jobs["eight"]["cost"], jobs["eight"]["badput_cost"]) == (
        8, pytest.approx(12.0), pytest.approx(4.0)
    )  # fmt: skip
    buckets = {(r["job"], r["bucket"]): r["cost"] for r in tables["buckets"]}
    assert buckets == pytest.approx(
        {("eight", "productive"): 8.0, ("eight", "accelerator_init"): 4.0,
         ("pair", "productive"): 4.0, ("pair", "accelerator_init"): 2.0}
    )  # fmt: skip
    assert {r["job"]: r["cost"] for r in tables["attempts"]} == pytest.approx(
        {"eight": 12.0, "pair": 6.0}
    )
    assert sum(r["cost"] for r in tables["days"]) == pytest.approx(18.0)
    plain = tmp_path / "plain"
    fleet(str(store), "--no-cache", "--parquet", str(plain))
    assert {r["cost"] for r in read_tables(plain)["buckets"].to_pylist()} == {None}
    sql = fleet(str(store), "--no-cache", "--json", *PRICE, "--sql",
                "SELECT sum(cost) AS c FROM buckets WHERE bucket <> 'productive'")  # fmt: skip
    assert json.loads(sql) == [{"c": pytest.approx(6.0)}]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_fleet_page_in_money_in_a_browser(store: Path, tmp_path: Path) -> None:
    from _browser import browser, console_errors
    from test_fleet_browser import _table, _text

    page = tmp_path / "fleet.html"
    fleet(str(store), "--no-cache", "--html", str(page), *PRICE)
    with browser() as driver:
        driver.get(page.as_uri())
        assert console_errors(driver) == []
        assert _text(driver, "#cost") == "cost 18.00 at 3.00 per device-hour (badput 6.00)"
        heads = driver.execute_script(
            "return [...document.querySelectorAll('#worst th')].map(c => c.textContent)"
        )
        assert heads[-2:] == ["cost", "badput cost"]
        worst = {row[0]: row[-2:] for row in _table(driver, "worst")}
        assert worst == {"eight": ["12.00", "4.00"], "pair": ["6.00", "2.00"]}
        lost = ["accelerator_init", "30m 00s", "33.3%", "2", "6.00"]
        assert _table(driver, "lost")[0][:5] == lost


def test_docs_fleet_example(store: Path) -> None:
    """docs/advice.md#in-each-view: the fleet lines it shows are this store's."""
    from test_docs import DOCS, block_after

    documented = block_after((DOCS / "advice.md").read_text(), "badput fleet ./badput-runs --price")
    lines = fleet(str(store), "--no-cache", *PRICE).splitlines()
    for line in documented.strip().splitlines():
        assert line == "..." or line in lines, line
