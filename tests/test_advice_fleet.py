"""``badput advise --fleet STORE`` and ``badput advise JOB JOB...`` (docs/advice.md): the
failure rate pooled over several jobs (their failures over their running hours together,
with the exact Poisson interval), while each job keeps its own checkpoint cost.

Three generated jobs, steps of 10 s and a blocking save every 30 steps:

- ``a``: attempts of 1, 2 and 1 h, the first two failed; saves of 30 s;
- ``b``: attempts of 3 and 1 h, the first failed; saves of 90 s;
- ``c``: one attempt of 2 h; saves of 60 s.

Pooled: 3 failures in 10 h of running time, 0.3 an hour, MTBF 12,000 s; the 95 % interval
is chi2(0.025, 6) / 20 to chi2(0.975, 8) / 20 = 1.237344 / 20 to 17.534546 / 20 an hour.
Young's interval √(2 δ M) with that M: a 848.5 s (85 steps), b 1,469.7 s (147), c 1,200 s
(120); each δ/M is under 1 %, so Young's form is the one used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from badput.cli import main
from badput.events import Event
from badput.store import JsonlStore
from badput.testing import Timeline, events_to_store

START = 1_700_000_000.0
#: name → (attempt hours, save seconds, which attempts failed)
JOBS: dict[str, tuple[list[float], float, list[bool]]] = {
    "a": ([1, 2, 1], 30.0, [True, True]),
    "b": ([3, 1], 90.0, [True]),
    "c": ([2], 60.0, []),
}


def job_events(name: str, hours: list[float], save: float, failed: list[bool]) -> list[Event]:
    """Attempts of ``hours`` each (5 minutes down between them), ended as ``failed`` says."""
    tl = Timeline(name, start=START)
    step = 1
    for i, h in enumerate(hours):
        tl.identity["attempt"] = str(i)
        tl.emit("job_start")
        end = tl.now + h * 3600.0
        n = 0
        while tl.now + 10.0 + save <= end:
            tl.span("step", 10.0, step=step)
            step, n = step + 1, n + 1
            if n % 30 == 0:
                tl.span("checkpoint_save", save, step=step - 1)
        tl.now = end
        if i < len(hours) - 1:
            tl.emit("attempt_end", status="failed" if failed[i] else "completed")
            tl.now += 300.0
        else:
            tl.emit("job_end", status="completed")
    return tl.events


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet") / "store"
    jsonl = JsonlStore(root)
    for name, (hours, save, failed) in JOBS.items():
        events_to_store(jsonl, job_events(name, hours, save, failed), job=name)
    return root


def _json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["advise", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_fleet_pools_the_failure_rate_and_keeps_each_jobs_costs(store: Path) -> None:
    doc = _json(str(store), "--fleet")
    pooled = doc["pooled"]
    assert pooled["failures"] == 3 and pooled["running_hours"] == pytest.approx(10.0)
    assert pooled["per_hour"] == pytest.approx(0.3)
    assert pooled["per_hour_low"] == pytest.approx(1.237344 / 20, rel=1e-5)
    assert pooled["per_hour_high"] == pytest.approx(17.534546 / 20, rel=1e-5)
    assert pooled["mtbf_hours"] == pytest.approx(10.0 / 3)
    assert sorted(pooled["jobs"]) == ["a", "b", "c"]
    advice = {j["job"]: j["advice"] for j in doc["jobs"]}
    expected = {"a": (30.0, 85), "b": (90.0, 147), "c": (60.0, 120)}
    for name, (save, steps) in expected.items():
        a = advice[name]
        assert a["failure_rate"]["failures"] == 3  # the pooled rate, not the job's own
        assert a["checkpoint_cost"]["median"] == pytest.approx(save)  # the job's own cost
        assert a["young_seconds"] == pytest.approx((2 * save * 12_000.0) ** 0.5, rel=1e-9)
        assert (a["formula"], a["recommended"]["steps"]) == ("young", steps)
        assert a["current"]["steps"] == 30
        assert a["pooled_jobs"] == pooled["jobs"]
        assert any("pooled over 3 jobs" in n for n in a["notes"])
    # job a alone: 2 failures in 4 h, M = 7,200 s: √(2 x 30 x 7200) = 657.3 s, 66 steps
    alone = _json(str(store / "a"))["advice"]
    assert alone["failure_rate"]["per_hour"] == pytest.approx(0.5)
    assert alone["recommended"]["steps"] == 66 and alone["pooled_jobs"] == []


def test_several_jobs_pool_as_the_fleet_does(store: Path) -> None:
    fleet = _json(str(store), "--fleet")
    listed = _json(*(str(store / name) for name in JOBS))
    assert listed["pooled"] == fleet["pooled"]
    assert {j["job"]: j["advice"] for j in listed["jobs"]} == {
        j["job"]: j["advice"] for j in fleet["jobs"]
    }
    # --fleet --job: one job's advice, the rate still pooled over the store
    one = _json(str(store), "--fleet", "--job", "b")
    assert [j["job"] for j in one["jobs"]] == ["b"] and one["pooled"] == fleet["pooled"]
    text = CliRunner().invoke(main, ["advise", str(store), "--fleet"]).output
    assert text.count("Advice for job") == 3 and "pooled over 3 jobs" in text


def test_fleet_usage_errors(store: Path) -> None:
    run = CliRunner().invoke
    bad = run(main, ["advise", str(store / "a"), str(store / "b"), "--fleet"])
    assert bad.exit_code == 2 and "--fleet takes one PATH" in bad.output
    bad = run(main, ["advise", str(store / "a"), str(store / "b"), "--job", "a"])
    assert bad.exit_code == 2 and "--job goes with one PATH" in bad.output
    bad = run(main, ["advise", str(store), "--fleet", "--job", "zz"])
    assert bad.exit_code == 2 and "no job 'zz'" in bad.output
