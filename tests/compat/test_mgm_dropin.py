"""Drop-in check: code written for ml-goodput-measurement, the way MaxText and AXLearn use it,
runs on badput with one changed line (the import) and gives the expected numbers.

Everything below the import is written as those projects write it (see ../shared/seeds/):
a recorder created with ``logging_enabled`` on process 0, ``record_*`` calls around the
phases of ``train_loop``, data loading before each ``record_step_start_time``, custom badput
events for evaluation and SDC checks, a calculator query with the badput breakdown, an
interval query, and a ``GoodputMonitor`` writing to a TensorBoard directory. Where events
go is configured the badput way, by ``BADPUT_STORE``, not in the code. Training time is
simulated: the loop advances a fake clock instead of running a model, so every figure
is exact.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

# The one line that changes: `from ml_goodput_measurement import goodput, monitoring`.
from badput.compat.ml_goodput_measurement import goodput, goodput_utils, monitoring

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


class FakeClock:
    """Stands in for wall time inside the compat recorder (``time.time``)."""

    def __init__(self) -> None:
        self.now = T0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(goodput, "time", fake)
    monkeypatch.setenv("BADPUT_STORE", str(tmp_path / "store"))
    return fake


# ------------------------------------------------------------ MaxText-style code


def create_goodput_recorder(config: Any) -> goodput.GoodputRecorder | None:
    if config.enable_goodput_recording:
        logger_name = f"goodput_{config.run_name}"
        return goodput.GoodputRecorder(
            config.run_name, logger_name, logging_enabled=config.process_index == 0
        )
    return None


def record_goodput(recorder: Any, config: Any, record_func: Any, *args: Any) -> None:
    """Record data for Goodput and Badput computation (MaxText's helper)."""
    if recorder and config.enable_goodput_recording:
        record_func(*args)


def train_loop(config: Any, recorder: Any, clock: FakeClock) -> None:
    record_goodput(recorder, config, recorder.record_tpu_init_start_time)
    clock.sleep(5.0)  # jax.devices(), mesh
    record_goodput(recorder, config, recorder.record_tpu_init_end_time)
    record_goodput(recorder, config, recorder.record_training_preparation_start_time)
    clock.sleep(10.0)  # model, optimizer, checkpoint manager
    record_goodput(recorder, config, recorder.record_training_preparation_end_time)

    for step in range(config.steps):
        record_goodput(recorder, config, recorder.record_data_loading_start_time)
        clock.sleep(0.5)  # load_next_batch
        record_goodput(recorder, config, recorder.record_data_loading_end_time)
        record_goodput(recorder, config, recorder.record_step_start_time, step)
        clock.sleep(20.0 if step == 0 else 2.0)  # p_train_step (the first one compiles)

        if step % config.eval_interval == 0:
            recorder.record_custom_badput_event_start_time(custom_badput_event_type="eval_step")
            clock.sleep(4.0)
            recorder.record_custom_badput_event_end_time(custom_badput_event_type="eval_step")
        if step == config.sdc_check_step:
            recorder.record_custom_badput_event_start_time(custom_badput_event_type="sdc_check")
            clock.sleep(1.0)
            recorder.record_custom_badput_event_end_time(custom_badput_event_type="sdc_check")


def main(config: Any, clock: FakeClock) -> None:
    recorder = create_goodput_recorder(config)
    record_goodput(recorder, config, recorder.record_job_start_time if recorder else None)
    train_loop(config, recorder, clock)
    record_goodput(recorder, config, recorder.record_job_end_time if recorder else None)


CONFIG = SimpleNamespace(
    run_name="maxtext-dropin",
    enable_goodput_recording=True,
    process_index=0,
    steps=60,
    eval_interval=20,
    sdc_check_step=30,
)

# By hand: 5 s init + 10 s prep + 0.5 s first load + step 0 (20 s) + 59 steps x (0.5 s load
# + 2 s) + 3 evals x 4 s + 1 s SDC check = 196 s. Step 0 is 20.5 s (its 20 s plus the next
# load, which overlaps training) against a mean of 2.5 s for the others: 18 s startup.
# Productive: 2.5 + 58 x 2.5 + 2.0 (the last step, closed by the job end) = 149.5 s.
TOTAL = 196.0
EXPECTED = {
    goodput.BadputType.TPU_INITIALIZATION: 5.0 / TOTAL * 100,
    goodput.BadputType.TRAINING_PREP: 10.0 / TOTAL * 100,
    goodput.BadputType.DATA_LOADING_SYNC: 0.5 / TOTAL * 100,
    goodput.BadputType.DATA_LOADING_ASYNC: 59 * 0.5 / TOTAL * 100,
    goodput.BadputType.PROGRAM_STARTUP: 18.0 / TOTAL * 100,
    goodput.BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME: 0.0,
    goodput.BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME: 0.0,
    goodput.BadputType.WASTED_PROGRESS_FROM_DISRUPTION: 0.0,
    goodput.BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION: 0.0,
    goodput.BadputType.OTHER: 0.0,
}


def test_maxtext_style_job_gives_the_expected_breakdown(clock: FakeClock) -> None:
    main(CONFIG, clock)

    goodput_logger_name = f"goodput_{CONFIG.run_name}"
    goodput_calculator = goodput.GoodputCalculator(
        job_name=CONFIG.run_name, logger_name=goodput_logger_name
    )
    total_goodput, badput_breakdown, last_step = goodput_calculator.get_job_goodput(
        include_badput_breakdown=True
    )
    assert total_goodput == pytest.approx(149.5 / TOTAL * 100, abs=1e-9)
    assert last_step == 59
    for badput_type, expected in EXPECTED.items():
        assert badput_breakdown[badput_type] == pytest.approx(expected, abs=1e-9), badput_type
    custom = badput_breakdown[goodput.BadputType.CUSTOM_BADPUT_EVENTS]
    assert custom == {
        "EVAL_STEP": pytest.approx(12.0 / TOTAL * 100),
        "SDC_CHECK": pytest.approx(1.0 / TOTAL * 100),
    }
    # Goodput and the blocking badput add up to 100 % (ASYNC overlaps training).
    blocking = sum(
        v
        for k, v in badput_breakdown.items()
        if isinstance(v, float) and k.name != "DATA_LOADING_ASYNC"
    )
    assert total_goodput + blocking + sum(custom.values()) == pytest.approx(100.0)

    # Only goodput, as in the README.
    only_goodput, breakdown, _ = goodput_calculator.get_job_goodput()
    assert only_goodput == pytest.approx(total_goodput) and breakdown == {}

    # Interval query: steps 41..50 start at 15.5 + 24.5 + 40 x 2.5 + 2 x 4 (evals at 20, 40)
    # + 1 (SDC) = 149.0 s. The window is clipped to the events inside it, as the library does.
    start = datetime.datetime.fromtimestamp(T0 + 148.9, datetime.timezone.utc)
    end = datetime.datetime.fromtimestamp(T0 + 174.1, datetime.timezone.utc)
    interval_goodput, interval_badput, interval_step, total_time, disruptions = (
        goodput_calculator.get_job_goodput_interval(start, end)
    )
    assert disruptions == 0
    assert interval_badput[goodput.BadputType.OTHER] == pytest.approx(0.0, abs=1e-9)
    assert 0 < total_time <= 25.2
    assert interval_goodput == pytest.approx(100.0, abs=1e-9)
    assert interval_step >= 49

    # Step deviation: raw step times (start to next start, evals included) against the
    # library's ideal step time, the mean within median + 3 x MAD = 2.5 s (the 24.5 s first
    # step and the eval steps are outliers; step 59 has no successor).
    deviations = goodput_calculator.get_step_deviation()
    assert len(deviations) == 59
    assert deviations[0] == pytest.approx(22.0)
    assert deviations[20] == deviations[40] == pytest.approx(4.0)
    assert deviations[30] == pytest.approx(1.0)
    assert deviations[1] == pytest.approx(0.0)


def test_disabled_process_records_nothing(clock: FakeClock, tmp_path: Path) -> None:
    worker = SimpleNamespace(**{**vars(CONFIG), "process_index": 3})
    main(worker, clock)
    assert not (tmp_path / "store").exists()


def test_axlearn_style_monitor_writes_tensorboard(clock: FakeClock, tmp_path: Path) -> None:
    """AXLearn's measurement recorder: a monitor with a TensorBoard upload_dir, started and
    stopped around training; the final flush writes the job's goodput."""
    main(CONFIG, clock)
    upload_dir = tmp_path / "summaries"
    monitor = monitoring.GoodputMonitor(
        job_name=CONFIG.run_name,
        logger_name=f"goodput_logger_{CONFIG.run_name}",
        tensorboard_dir=str(upload_dir),
        upload_interval=30,
        monitoring_enabled=True,
        include_badput_breakdown=True,
        include_step_deviation=True,
        step_deviation_interval_seconds=30,
        gcp_options=goodput_utils.GCPOptions(
            enable_gcp_goodput_metrics=False,
            enable_gcp_step_deviation_metrics=False,
        ),
    )
    monitor.start_goodput_uploader()
    monitor.start_step_deviation_uploader()
    monitor.stop_goodput_uploader()
    monitor.stop_step_deviation_uploader()

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, float] = {}
    for run in [upload_dir, *[p for p in upload_dir.rglob("*") if p.is_dir()]]:
        acc = EventAccumulator(str(run))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars[tag] = acc.Scalars(tag)[-1].value
    goodput_tags = [t for t in scalars if t.lower().endswith("goodput")]
    assert goodput_tags, sorted(scalars)
    assert scalars[goodput_tags[0]] == pytest.approx(149.5 / TOTAL * 100, rel=1e-6)
