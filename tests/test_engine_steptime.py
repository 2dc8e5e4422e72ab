"""Step-time analytics: recent step times and their deviation from the ideal."""

from __future__ import annotations

import numpy as np
import pytest

from badput.engine import Accountant, _steps, step_time_stats
from badput.events import Event


def steps_log(durations: list[float]) -> list[Event]:
    out = [Event(ts=0.0, kind="job_start", job="s", attempt=0)]
    t = 0.0
    for n, d in enumerate(durations):
        out.append(Event(ts=t, kind="step_start", job="s", attempt=0, step=n))
        t += d
        out.append(Event(ts=t, kind="step_end", job="s", attempt=0, step=n))
    return out


@pytest.mark.parametrize("seal", [2, 10_000])
def test_recent_step_times_and_stats(monkeypatch: pytest.MonkeyPatch, seal: int) -> None:
    monkeypatch.setattr(_steps, "SEAL_MIN_TAIL", seal)
    # 1,500 steps at 1.0 s, then 100 straggler steps at 1.5 s; the first is 30 s (startup)
    durations = [30.0] + [1.0] * 1500 + [1.5] * 100
    acc = Accountant("s")
    acc.ingest_events(steps_log(durations))
    asked_first = acc.step_time_stats()  # computes its own report
    acc.report()
    stats = acc.step_time_stats()  # takes the rows of the report just made
    assert stats == asked_first
    assert stats.steps == 1100  # the last 1,100 (the startup step is never counted)
    assert stats.ideal_step_time == pytest.approx(1.0)
    assert stats.last_step_time == pytest.approx(1.5)
    assert stats.recent_median == pytest.approx(1.5)
    # GCM statistic: p90 of the last 100 (1.5) minus the median of the 1,000 before (1.0)
    assert stats.gcm_deviation == pytest.approx(0.5)
    assert stats.deviation_max == pytest.approx(0.5)
    assert stats.deviation_p50 == pytest.approx(0.0)
    assert stats.slowdown_alarm is True
    assert acc.step_time_stats(slowdown_factor=2.0).slowdown_alarm is False


def test_few_steps_use_the_mean_deviation() -> None:
    stats = step_time_stats(np.array([1.0, 1.2, 1.4]), 1.0)
    assert stats.gcm_deviation == pytest.approx(0.2)
    assert stats.deviation_p90 == pytest.approx(0.36)
    assert step_time_stats(np.zeros(0), None).steps == 0
    with pytest.raises(ValueError, match="slowdown_factor"):
        step_time_stats(np.array([1.0]), 1.0, slowdown_factor=0)
