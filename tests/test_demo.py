"""The demo: a real (small) training job with a crash, under the launcher, then analyzed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from badput.analysis import analyze
from badput.cli import main
from badput.demo import DemoConfig, demo_command, run_demo
from badput.demo.train import (
    Adam,
    TrainConfig,
    init_params,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)

#: Buckets the demo must fill (the acceptance of `badput demo`).
REQUIRED = (
    "productive",
    "wasted",
    "recovery",
    "checkpoint_save",
    "checkpoint_restore",
    "data_loading",
    "training_prep",
    "custom:eval",
)


@pytest.mark.slow
def test_fast_demo_has_two_attempts_and_every_bucket(tmp_path: Path) -> None:
    messages: list[str] = []
    root = tmp_path / "runs"
    report = run_demo(root, config=DemoConfig.fast(60), say=messages.append)

    assert report.job == "demo"
    assert report.end_reason == "job_end"
    assert [str(a.id) for a in report.attempts] == ["0", "1"]
    first, second = report.attempts
    assert first.exit_code == 1
    assert first.end_reason.startswith("attempt_end")
    assert second.end_reason == "job_end"
    assert second.restore_step is not None
    assert first.last_step is not None
    assert second.restore_step < first.last_step  # the crash lost steps
    assert second.first_step == second.restore_step + 1
    assert report.steps.last == 60
    assert report.steps.kept == 60
    assert report.steps.wasted == first.last_step - second.restore_step
    for bucket in REQUIRED:
        assert report.bucket(bucket) > 0.0, (bucket, report.buckets)
    assert report.bucket("recovery") >= 0.5  # the restart delay
    assert sum(report.buckets.values()) == pytest.approx(report.total_seconds)
    assert report.ideal_step_time is not None  # clean steps exist: the loader prefetches
    assert any("attempt 0: failed with exit code 1" in m for m in messages)

    # The same log, read again from disk, gives the same report.
    assert analyze(root, "demo").buckets == report.buckets


@pytest.mark.slow
def test_demo_command_replaces_the_previous_run(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    stale = root / "demo" / "old" / "x.jsonl"
    stale.parent.mkdir(parents=True)
    stale.write_text('{"ts": 1.0, "kind": "job_start", "job": "demo", "attempt": "old"}\n')
    result = CliRunner().invoke(
        main, ["demo", "--store", str(root), "--fast", "--steps", "40", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "removing the previous demo run" in result.stderr
    data = json.loads(result.stdout)
    assert [str(a["id"]) for a in data["attempts"]] == ["0", "1"]
    for bucket in REQUIRED:
        assert data["buckets"].get(bucket, 0.0) > 0.0, bucket
    assert not stale.exists()


def test_demo_command_line() -> None:
    config = DemoConfig.fast(80)
    cmd = demo_command(config, "/tmp/ck")
    assert cmd[1:5] == ["-m", "badput.demo.train", "--ckpt-dir", "/tmp/ck"]
    assert cmd[cmd.index("--steps") + 1] == "80"
    assert "--restart-delay" not in cmd
    assert DemoConfig().train_args() == ["--steps", "600"]


@pytest.mark.parametrize("steps", [40, 60, 100, 500, 1000])
def test_crash_lands_between_checkpoints(steps: int) -> None:
    cfg = TrainConfig(steps=steps, ckpt_every=max(5, steps // 4) if steps < 500 else 50)
    crash = cfg.crash_step()
    assert cfg.ckpt_every < crash < steps
    assert crash % cfg.ckpt_every != 0  # steps after the last checkpoint are lost


def test_checkpoint_round_trip_is_atomic_and_pruned(tmp_path: Path) -> None:
    cfg = TrainConfig(features=8, hidden=16, classes=3)
    params = init_params(cfg)
    opt = Adam(params, 1e-3)
    opt.t = 7
    for step in (10, 20, 30):
        save_checkpoint(str(tmp_path), step, params, opt, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000020.npz", "ckpt-000030.npz"]
    found = latest_checkpoint(str(tmp_path))
    assert found is not None
    assert found[0] == 30
    fresh = init_params(TrainConfig(features=8, hidden=16, classes=3, seed=1))
    opt2 = Adam(fresh, 1e-3)
    assert load_checkpoint(found[1], fresh, opt2) == 30
    assert opt2.t == 7
    for k, v in params.items():
        np.testing.assert_array_equal(fresh[k], v)
    assert latest_checkpoint(str(tmp_path / "none")) is None


def test_demo_needs_a_directory_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="directory store"):
        run_demo("memory://demo")
    result = CliRunner().invoke(main, ["demo", "--store", "s3://bucket/x", "--fast"])
    assert result.exit_code == 2
    assert "badput demo: error: the demo needs a directory store" in result.stderr
    assert "Traceback" not in result.output
