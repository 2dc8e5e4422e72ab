"""ACCOUNTING.md §7 through the public surfaces: the Recorder API and a hand-written file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import badput
from _worked_example import EXPECTED_MINUTES, JOB, MIN, T0, t
from badput.testing import MemoryStore


def record_worked_example(store: badput.store.EventStore) -> None:  # type: ignore[name-defined]
    first = badput.Recorder(JOB, store=store, attempt="0", heartbeat_interval=0)
    first.record_job_start(ts=t(0))
    with_restore(first, 25, 0, 5)
    m = 5.0
    for n in range(26, 51):
        first.record_step_start(n, ts=t(m))
        m += 2
        first.record_step_end(n, ts=t(m))
    first.record_checkpoint_save_start(50, ts=t(55))
    first.record_checkpoint_save_end(50, ts=t(60))
    m = 60.0
    for n in range(51, 71):
        first.record_step_start(n, ts=t(m))
        m += 2
        first.record_step_end(n, ts=t(m))
    first.close()  # crashed: no attempt_end, no job_end

    second = badput.Recorder(JOB, store=store, attempt="1", heartbeat_interval=0)
    second.record_job_start(ts=t(115))
    with_restore(second, 50, 115, 120)
    m = 120.0
    for n in range(51, 76):
        second.record_step_start(n, ts=t(m))
        m += 3
        second.record_step_end(n, ts=t(m))
    second.record_checkpoint_save_start(75, ts=t(195))
    second.record_checkpoint_save_end(75, ts=t(200))
    second.record_job_end(ts=t(200))
    second.close()


def with_restore(rec: badput.Recorder, step: int, a: float, b: float) -> None:
    rec.record_checkpoint_restore_start(step, ts=t(a))
    rec.record_checkpoint_restore_end(step, ts=t(b))


def check(report: badput.Report) -> None:
    assert {k: round(v / MIN, 9) for k, v in report.buckets.items()} == EXPECTED_MINUTES
    assert report.total_seconds == pytest.approx(200 * MIN)
    assert report.goodput == pytest.approx(0.5)
    assert report.observed_goodput == pytest.approx(0.625)
    assert [a.id for a in report.attempts] == [0, 1]


@pytest.mark.parametrize("ideal", [120.0, None])
def test_through_the_recorder_api(ideal: float | None) -> None:
    store = MemoryStore()
    record_worked_example(store)
    check(badput.analyze(store, JOB, ideal_step_time=ideal))


def test_through_the_recorder_into_jsonl_files(tmp_path: Path) -> None:
    store = badput.open_store(str(tmp_path / "runs"))
    record_worked_example(store)
    files = sorted((tmp_path / "runs" / JOB).rglob("*.jsonl"))
    assert len(files) == 2  # one per writer process (attempt)
    check(badput.analyze(tmp_path / "runs", JOB))
    check(badput.analyze(tmp_path / "runs" / JOB))


HAND_WRITTEN = """\
{"ts": 0, "kind": "job_start", "job": "hand", "attempt": 0}
{"ts": 0, "kind": "checkpoint_restore_start", "job": "hand", "attempt": 0, "step": 25}
{"ts": 5, "kind": "checkpoint_restore_end", "job": "hand", "attempt": 0, "step": 25}
"""


def test_through_a_hand_written_jsonl_file(tmp_path: Path) -> None:
    """The log typed by hand, in minutes turned to seconds, only step_start events."""
    lines = [json.loads(x) for x in HAND_WRITTEN.splitlines()]
    m = 5
    for n in range(26, 71):
        lines.append({"ts": m, "kind": "step_start", "job": "hand", "attempt": 0, "step": n})
        m += 2
        if n == 50:
            lines.append(
                {"ts": 55, "kind": "checkpoint_save_start", "job": "hand", "attempt": 0, "step": 50}
            )
            lines.append(
                {"ts": 60, "kind": "checkpoint_save_end", "job": "hand", "attempt": 0, "step": 50}
            )
            m = 60
    lines.append({"ts": 100, "kind": "heartbeat", "job": "hand", "attempt": 0})
    lines.append({"ts": 115, "kind": "job_start", "job": "hand", "attempt": 1})
    lines.append(
        {"ts": 115, "kind": "checkpoint_restore_start", "job": "hand", "attempt": 1, "step": 50}
    )
    lines.append(
        {"ts": 120, "kind": "checkpoint_restore_end", "job": "hand", "attempt": 1, "step": 50}
    )
    m = 120
    for n in range(51, 76):
        lines.append({"ts": m, "kind": "step_start", "job": "hand", "attempt": 1, "step": n})
        m += 3
    lines.append(
        {"ts": 195, "kind": "checkpoint_save_start", "job": "hand", "attempt": 1, "step": 75}
    )
    lines.append(
        {"ts": 200, "kind": "checkpoint_save_end", "job": "hand", "attempt": 1, "step": 75}
    )
    lines.append({"ts": 200, "kind": "job_end", "job": "hand", "attempt": 1})
    path = tmp_path / "example.jsonl"
    # minutes → seconds, written with the standard library only
    path.write_text("".join(json.dumps({**x, "ts": T0 + x["ts"] * MIN}) + "\n" for x in lines))
    report = badput.analyze(path, ideal_step_time=120.0)
    check(report)
    assert report.job == "hand"
    assert report.diagnostics == []
