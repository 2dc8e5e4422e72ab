"""``badput advise`` and ``badput whatif`` (docs/advice.md): the statistics, the interval
formulas, a simulation of jobs with exponential failures, and the replay's identity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _advice_sim import SimJob, simulate
from badput.advice import (
    AttemptFacts,
    ReplaySettings,
    SaveFacts,
    advise_of,
    chi2_quantile,
    daly_interval,
    efficiency,
    measure,
    poisson_rate_interval,
    read_job,
    whatif_of,
    young_interval,
)
from badput.cli import main
from badput.engine import Accountant
from badput.events import Event
from badput.store import JsonlStore
from badput.testing import MemoryStore, events_to_store
from test_engine_properties import event_logs


def test_chi2_quantiles_and_the_exact_poisson_interval() -> None:
    # Reference values (scipy.stats.chi2.ppf); our implementation is the standard library's.
    assert chi2_quantile(0.975, 2) == pytest.approx(7.377758908227871, rel=1e-10)
    assert chi2_quantile(0.025, 20) == pytest.approx(9.590777392264867, rel=1e-10)
    assert chi2_quantile(0.999, 200) == pytest.approx(267.5405278227572, rel=1e-10)
    # No failure in 10 h: the rate is below 0.369/h (the "rule of 3.7", two-sided 95 %).
    low, high = poisson_rate_interval(0, 10.0)
    assert low == 0.0 and high == pytest.approx(0.36888794541139, rel=1e-9)
    # 2 failures in 10 h: 0.0242-0.722/h, a factor of 30 wide; 200 in 1000 h: 0.173-0.230/h.
    assert poisson_rate_interval(2, 10.0) == pytest.approx((0.02422, 0.72247), rel=1e-3)
    assert poisson_rate_interval(200, 1000.0) == pytest.approx((0.17327, 0.22967), rel=1e-3)


def test_young_and_daly_intervals() -> None:
    assert young_interval(60.0, 7200.0) == pytest.approx(929.516, rel=1e-5)
    # Daly: sqrt(2dM)(1 + sqrt(d/2M)/3 + d/18M) - d; close to Young's for d << M ...
    assert daly_interval(60.0, 7200.0) == pytest.approx(
        929.516 * (1 + 0.0645497 / 3 + 1 / 2160) - 60, rel=1e-5
    )
    # ... M itself once d >= 2M; and the efficiency is highest near the optimum.
    assert daly_interval(3.0, 1.0) == 1.0
    best = daly_interval(600.0, 3600.0)
    effs = [efficiency(best * f, 600.0, 3600.0, 300.0) for f in (0.5, 0.8, 1.0, 1.25, 2.0)]
    assert max(effs) == effs[2]
    assert efficiency(900.0, 100.0, math.inf, 0.0) == pytest.approx(0.9)


#: Several MTBFs, checkpoint costs and step times (seconds), fixed seeds.
SIM_JOBS = [
    SimJob(step_time=10.0, save_cost=60.0, mtbf=7200.0, restart=120.0, restore=30.0,
           total_steps=20_000, seed=1),
    SimJob(step_time=2.0, save_cost=30.0, mtbf=3600.0, restart=300.0, restore=60.0,
           total_steps=30_000, seed=7),
    SimJob(step_time=30.0, save_cost=600.0, mtbf=14_400.0, restart=600.0, restore=120.0,
           total_steps=6_000, seed=3),
]  # fmt: skip


def _goodput(job: SimJob, every: int) -> float:
    report, _ = read_job(simulate(job, every), "sim")
    return report.goodput


@pytest.mark.parametrize("job", SIM_JOBS, ids=["M2h", "M1h", "M4h-big-save"])
def test_advice_finds_the_simulated_best_and_whatif_predicts_other_intervals(job: SimJob) -> None:
    young_steps = young_interval(job.save_cost, job.mtbf) / job.step_time
    grid = sorted({max(1, round(young_steps * f)) for f in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)})
    base = grid[1]  # the run the advice reads: a job that saves too often
    report, facts = read_job(simulate(job, base), "sim")
    assert facts.failures >= 10
    advice = advise_of(report, facts)
    assert advice.recommended is not None
    rec = advice.recommended.steps
    simulated = {n: _goodput(job, n) for n in [*grid, rec]}
    best_n = max(grid, key=lambda n: simulated[n])
    assert abs(rec - best_n) <= 0.1 * best_n or simulated[rec] >= simulated[best_n] - 0.005
    errors = [
        abs(whatif_of(report, facts, ReplaySettings(checkpoint_every=n)).goodput - simulated[n])
        for n in grid
        if n != base
    ]
    assert sum(errors) / len(errors) < 0.01, errors
    # The run at the interval advise gives is not worse than the run it was advised from.
    assert simulated[rec] >= report.goodput - 0.005


def test_whatif_restart_cost_and_async_saves_on_a_simulated_job() -> None:
    job = SIM_JOBS[0]
    report, facts = read_job(simulate(job, 50), "sim")
    faster = whatif_of(report, facts, ReplaySettings(restart_cost=0.0))
    assert faster.buckets["recovery"] == 0.0
    # Every failure's down time (120 s) is given back, give or take the progress each
    # failure now catches since attempts start earlier (the failures are the same ones).
    assert faster.failures == facts.failures == 39
    given_back = report.total_seconds - faster.total_seconds
    assert given_back == pytest.approx(120.0 * 39, rel=0.03)
    background = whatif_of(report, facts, ReplaySettings(async_save=True))
    assert background.buckets["checkpoint_save"] == 0.0
    assert background.goodput > report.goodput


def _same_report(events: list[Event]) -> None:
    store = MemoryStore()
    events_to_store(store, events, job=events[0].job)
    report, facts = read_job(store, events[0].job)
    same = whatif_of(report, facts, ReplaySettings())
    assert same.buckets == dict(report.buckets)
    assert same.total_seconds == report.total_seconds
    assert same.goodput == report.goodput
    assert same.observed_goodput == report.observed_goodput


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(event_logs())
def test_whatif_with_the_logs_own_settings_is_the_report(events: list[Event]) -> None:
    _same_report(events)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.floats(0.5, 20.0), st.floats(0.5, 120.0), st.floats(200.0, 5000.0),
    st.floats(0.0, 300.0), st.integers(2, 40), st.integers(0, 2**16),
)  # fmt: skip
def test_whatif_at_the_jobs_own_interval_is_the_report(  # noqa: PLR0917 (hypothesis)
    step: float, save: float, mtbf: float, restart: float, every: int, seed: int
) -> None:
    job = SimJob(step, save, mtbf, restart, restart / 4, 400, seed)
    report, facts = read_job(simulate(job, every), "sim")
    same = whatif_of(report, facts, ReplaySettings(checkpoint_every=every))
    assert same.buckets == dict(report.buckets)
    assert same.goodput == report.goodput


def test_cli_advise_and_whatif(tmp_path: Path) -> None:
    simulate(SIM_JOBS[0], 50, store=JsonlStore(tmp_path))
    runner = CliRunner()
    out = runner.invoke(main, ["advise", str(tmp_path), "--json", "--price-per-device-hour", "2"])
    assert out.exit_code == 0, out.output
    advice = json.loads(out.output)["advice"]
    assert advice["failure_rate"]["failures"] == 39
    assert advice["checkpoint_cost"]["median"] == 60.0
    assert advice["current"]["steps"] == 50
    assert advice["recommended"]["steps"] == 85  # sqrt(2 x 60 s x MTBF 1h 40m) / 10 s
    assert advice["levers"][0]["name"] == "asynchronous saves"
    assert advice["levers"][0]["cost"] == pytest.approx(advice["levers"][0]["gain_seconds"] / 1800)
    table = runner.invoke(main, ["advise", str(tmp_path)])
    assert "every 85 steps" in table.output and "Young" in table.output
    out = runner.invoke(main, ["whatif", str(tmp_path), "--checkpoint-every", "90", "--json"])
    assert out.exit_code == 0, out.output
    replay = json.loads(out.output)
    assert replay["buckets"]["checkpoint_save"] == pytest.approx(13424.586, abs=0.01)
    assert replay["buckets"]["wasted"] == pytest.approx(18740.030, abs=0.01)
    bad = runner.invoke(main, ["whatif", str(tmp_path), "--checkpoint-every", "0"])
    assert bad.exit_code == 2


def test_docs_python_example_prints_its_documented_output() -> None:
    import contextlib
    import io
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "advice.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, flags=re.S)
    expected = re.search(r"Output:\n\n```\n(.*?)```", text, flags=re.S)
    assert code is not None and expected is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), "docs/advice.md", "exec"), {})
    assert out.getvalue().strip() == expected.group(1).strip()


def test_each_attempts_facts_from_its_leaders_steps_and_saves() -> None:
    """A failed attempt: steps 1, 2, 5 (a record counts the gap in numbers: 3), then 6 left
    open (a crash), a save of 3 s between them; the next restores step 2, saves before its
    first step (the save is after the restore point, not after a step of its own), and runs
    step 3. Figures worked by hand."""

    def ev(ts: float, kind: str, attempt: int, **kw: object) -> Event:
        return Event(ts=ts, kind=kind, job="m", attempt=attempt, rank=0, **kw)  # type: ignore[arg-type]

    events = [
        ev(0, "job_start", 0),
        ev(10, "step_start", 0, step=1), ev(12, "step_end", 0, step=1),
        ev(12, "step_start", 0, step=2), ev(14, "step_end", 0, step=2),
        ev(14, "checkpoint_save_start", 0, step=2), ev(17, "checkpoint_save_end", 0, step=2),
        ev(17, "step_start", 0, step=5), ev(19, "step_end", 0, step=5),
        ev(19, "step_start", 0, step=6),
        ev(25, "attempt_end", 0, status="failed"),
        ev(30, "job_start", 1),
        ev(31, "checkpoint_restore_start", 1, step=2), ev(32, "checkpoint_restore_end", 1, step=2),
        ev(33, "checkpoint_save_start", 1, step=2), ev(34, "checkpoint_save_end", 1, step=2),
        ev(35, "step_start", 1, step=3), ev(37, "step_end", 1, step=3),
        ev(40, "job_end", 1, status="completed"),
    ]  # fmt: skip
    acc = Accountant("m")
    acc.ingest_events(events)
    report = acc.report()
    first, second = measure(report, acc.timeline(report)).attempts

    # 5 steps run (1 + 1 + 3; step 6 never ended), from 10 s to step 5's end at 19 s, less
    # the save: 6 s; step 6 lasts a typical step (2 s) to 21 s: a tail of 4 s to the end
    def figures(a: AttemptFacts) -> tuple[object, ...]:
        return (a.preamble, a.restore_step, a.first_step, a.last_step, a.steps_run)

    assert figures(first) == (10, 0, 1, 6, 5)
    assert (first.work_seconds, first.tail, first.interrupted) == (6.0, 4.0, True)
    assert first.saves == (SaveFacts(2, 14.0, 3.0, True),)
    assert figures(second) == (5, 2, 3, 3, 1)
    assert (second.work_seconds, second.tail, second.interrupted) == (2.0, 3.0, False)
    assert second.saves == (SaveFacts(2, 33.0, 1.0, True),)
