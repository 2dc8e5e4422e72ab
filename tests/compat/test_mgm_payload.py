"""ml-goodput-measurement payloads <-> badput events, and the compat recorder's behaviour."""

from __future__ import annotations

import datetime as dt
import logging

import numpy as np
import pytest

from badput.compat.ml_goodput_measurement import goodput
from badput.events import Event, Kind
from badput.formats import mgm as pl
from badput.store import MemoryStore
from badput.testing import read_all

T0 = 1_767_225_600.0
J = "job"


def kinds(events: list[Event]) -> list[tuple[str, float]]:
    return [(e.kind, e.ts) for e in events]


def test_decoder_maps_the_library_payloads() -> None:
    d = pl.PayloadDecoder()
    out = []
    for payload in [
        {"job_name": J, "job_start_time": T0},
        {"job_name": J, "tpu_init_start_time": T0 + 1},
        {"job_name": J, "tpu_init_end_time": T0 + 2},
        {"job_name": J, "training_prep_start_time": T0 + 2},
        {"job_name": J, "training_prep_end_time": T0 + 3},
        {"job_name": J, "data_loading_start_time": T0 + 3},
        {"job_name": J, "data_loading_end_time": T0 + 4},
        {"job_name": J, "step_count": 0, "step_start_time": T0 + 4},
        {"job_name": J, "data_loading_start_time": T0 + 5},
        {"job_name": J, "data_loading_end_time": T0 + 5.5},
        {
            "job_name": J,
            "custom_badput_event_type": "eval",
            "custom_badput_event_start_time": T0 + 6,
        },
        {"job_name": J, "custom_badput_event_type": "eval", "custom_badput_event_end_time": T0 + 7},
        {"job_name": J, "job_end_time": T0 + 9},
    ]:
        out += d.decode(payload)
    assert [e.kind for e in out] == [
        Kind.JOB_START,
        Kind.ACCELERATOR_INIT_START,
        Kind.ACCELERATOR_INIT_END,
        Kind.TRAINING_PREP_START,
        Kind.TRAINING_PREP_END,
        Kind.DATA_LOADING_START,
        Kind.DATA_LOADING_END,
        Kind.STEP_START,
        Kind.DATA_LOADING_START,
        Kind.DATA_LOADING_END,
        Kind.CUSTOM_START,
        Kind.CUSTOM_END,
        Kind.JOB_END,
    ]
    assert all(e.job == J and e.attempt is None for e in out)
    # Before the first step a load blocks (SYNC); once the loop runs it overlaps (ASYNC).
    assert [e.blocking for e in out if e.kind.startswith("data_loading")] == [
        None,
        None,
        False,
        False,
    ]
    assert out[7].step == 0 and out[10].name == "eval"


def test_decoder_restart_makes_the_first_load_blocking_again_and_numbers_attempts() -> None:
    d = pl.PayloadDecoder("j", attempt="a")
    d.decode({"job_start_time": T0})
    d.decode({"step_count": 0, "step_start_time": T0 + 1})
    (late,) = d.decode({"data_loading_start_time": T0 + 2})
    assert late.blocking is False and late.attempt == "a"
    (restart,) = d.decode({"job_start_time": T0 + 10})
    (first,) = d.decode({"data_loading_start_time": T0 + 11})
    assert restart.attempt == first.attempt == "a.1"
    assert first.blocking is None


def test_decoder_orbax_entries_become_checkpoint_intervals() -> None:
    d = pl.PayloadDecoder()
    save = d.decode(
        {
            "job_name": J,
            "step": 20,
            "event_type": "save",
            "directory": "gs://b/ckpt",
            "checkpoint_manager_blocking_start_time": T0 + 50,
            "checkpoint_manager_blocking_duration_secs": 1.5,
        }
    )
    assert kinds(save) == [
        (Kind.CHECKPOINT_SAVE_START, T0 + 50),
        (Kind.CHECKPOINT_SAVE_END, T0 + 51.5),
    ]
    assert {e.step for e in save} == {20}
    # Without its start time, a restore ends when it was logged.
    restore = d.decode(
        {
            "job_name": J,
            "step": "50",
            "event_type": "restore",
            "checkpoint_manager_duration_secs": "4",
        },
        timestamp=T0 + 100,
    )
    assert kinds(restore) == [
        (Kind.CHECKPOINT_RESTORE_START, T0 + 96),
        (Kind.CHECKPOINT_RESTORE_END, T0 + 100),
    ]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"job_name": J, "step_count": 1, "step_start_time": "soon"}, "step_start_time"),
        ({"job_name": J, "step_count": 1.5, "step_start_time": T0}, "step_count"),
        ({"step_count": 1, "step_start_time": T0}, "job_name"),
        (
            {"job_name": J, "event_type": "save", "step": 1},
            "checkpoint_manager_blocking_duration_secs",
        ),
        ({"badput_event": {"kind": "step_start", "job": J, "ts": T0}}, "step"),
    ],
)
def test_decoder_names_the_bad_key(payload: dict[str, object], message: str) -> None:
    with pytest.raises(pl.PayloadError, match=message):
        pl.PayloadDecoder().decode(payload)


def test_encoder_writes_the_library_keys_first_and_round_trips() -> None:
    enc, dec = pl.PayloadEncoder(), pl.PayloadDecoder()
    events = [
        Event(ts=T0, kind=Kind.JOB_START, job=J, attempt=3, host="h", rank=0, pid=7),
        Event(ts=T0 + 1, kind=Kind.STEP_START, job=J, attempt=3, step=5),
        Event(ts=T0 + 2, kind=Kind.CHECKPOINT_SAVE_START, job=J, attempt=3, step=5),
        Event(ts=T0 + 3.5, kind=Kind.CHECKPOINT_SAVE_END, job=J, attempt=3, step=5),
        Event(ts=T0 + 4, kind=Kind.HEARTBEAT, job=J, attempt=3),
    ]
    payloads = [enc.encode(e) for e in events]
    assert list(payloads[1])[:3] == ["job_name", "step_count", "step_start_time"]
    assert payloads[1]["step_start_time"] == T0 + 1
    assert "event_type" not in payloads[2]  # Orbax logs an operation when it is done
    assert payloads[3]["event_type"] == "save"
    assert payloads[3]["checkpoint_manager_blocking_duration_secs"] == 1.5
    assert set(payloads[4]) == {"job_name", pl.BADPUT_KEY}
    back = [e for p in payloads for e in dec.decode(p)]
    assert back == events


def _at(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(T0 + t, dt.timezone.utc)


def test_recorder_opens_an_attempt_per_job_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "4")
    store = MemoryStore()
    rec = goodput.GoodputRecorder(J, "log", logging_enabled=True, store=store)
    rec.record_job_start_time(_at(0))
    rec.record_step_start_time(0, _at(1))
    rec.record_job_start_time(_at(10))
    rec.record_step_start_time(np.int64(0), _at(11))  # MaxText loops over np.arange
    rec.record_checkpoint_progress(0, _at(12))
    rec.close()
    events, errors = read_all(store, J)
    assert errors == []
    assert [(e.kind, e.attempt) for e in sorted(events, key=lambda e: e.ts)] == [
        (Kind.JOB_START, 4),
        (Kind.STEP_START, 4),
        (Kind.JOB_START, "4.1"),
        (Kind.STEP_START, "4.1"),
        (Kind.CHECKPOINT_COMMITTED, "4.1"),
    ]
    assert not any(e.kind == Kind.HEARTBEAT for e in events)


def test_recorder_never_raises_and_disabled_writes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    rec = goodput.GoodputRecorder(J, "log", logging_enabled=True, store=store)
    with caplog.at_level(logging.WARNING):
        rec.record_step_start_time("not a step")  # type: ignore[arg-type]
        rec.record_payload({"event_type": "save", "step": 1})  # no duration
    assert "not recorded" in caplog.text
    rec.close()
    off = goodput.GoodputRecorder(J, "log", store=MemoryStore())
    off.record_job_start_time()
    off.record_step_start_time(1)
    off.flush()
    assert off.store is None
