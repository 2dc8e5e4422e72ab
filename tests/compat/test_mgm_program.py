"""Program goodput through the ml-goodput-measurement drop-in (issue 35). The library has
no tokens, FLOPs or MFU: its payloads stay as they are, and badput's extensions
(``tokens=``/``samples=`` on ``record_step_start_time``, ``record_model``,
``GoodputCalculator.get_program_goodput``) carry them (docs/compat.md)."""

from __future__ import annotations

import datetime as dt

import pytest

from badput.compat.ml_goodput_measurement import goodput
from badput.store import MemoryStore

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 3, 1, tzinfo=UTC)
H100 = 989.5e12


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def recorded(store: MemoryStore, job: str, **model: object) -> goodput.GoodputRecorder:
    """A job of 10 steps of 10 s, each of 524,288 tokens (64 sequences of 8,192), after
    a 20 s start; the model recorded through the drop-in's extension."""
    rec = goodput.GoodputRecorder(job, "log", True, store=store)
    rec.record_job_start_time(at(0))
    if model:
        rec.record_model(**model)
    for step in range(10):
        rec.record_step_start_time(step, at(20 + 10 * step), tokens=524_288, samples=64)
    rec.record_step_start_time(10, at(120))  # the library's way to end step 9: the next start
    rec.record_job_end_time(at(120))
    rec.flush()
    return rec


def test_tokens_and_mfu_of_a_job_recorded_through_the_drop_in() -> None:
    store = MemoryStore()
    rec = recorded(store, "llama", params=8_030_261_248, layers=32, hidden=4096, seq_len=8192,
                   devices=8, device="NVIDIA H100 80GB HBM3")  # fmt: skip
    calc = goodput.GoodputCalculator("llama", "log", store=store, clock=lambda: 0.0)
    p = calc.get_program_goodput()
    assert p is not None
    assert (p.tokens, p.samples, p.kept_tokens) == (5_242_880, 640, 5_242_880)
    # 6 x 8,030,261,248 + 12 x 32 x 4,096 x 8,192 = 61,066,469,376 FLOPs per token
    assert p.flops_per_token == 61_066_469_376
    assert (p.peak_flops, p.peak_source, p.devices) == (H100, "table:NVIDIA H100 SXM", 8)
    # a step: 524,288 x 61,066,469,376 FLOPs in 10 s on 8 x 989.5 TFLOP/s
    mfu = 524_288 * 61_066_469_376 / 10 / (8 * H100)
    assert p.mfu_productive == pytest.approx(mfu, rel=1e-12)
    # the whole job: 100 s of steps in 120 s
    assert p.mfu_job == pytest.approx(mfu * 100 / 120, rel=1e-12)
    # the library's own figures are unchanged by the extension
    gp, _, last = calc.get_job_goodput()
    assert (gp, last) == (pytest.approx(100 / 120 * 100), 10)
    # a peak given to the query wins over the table, for that query only
    given = calc.get_program_goodput(peak=2 * H100)
    assert given is not None and given.peak_source == "given"
    assert given.mfu_productive == pytest.approx(mfu / 2, rel=1e-12)
    again = calc.get_program_goodput()
    assert again is not None and again.peak_source == "table:NVIDIA H100 SXM"
    rec.close()


def test_the_library_accelerator_name_finds_its_peak_and_an_unknown_one_says_so() -> None:
    # GCPOptions.acc_type names (the library's machine-type mapping) as the device
    store = MemoryStore()
    recorded(store, "tpu", params=1_000_000, devices=4, device="TPU-v5e").close()
    p = goodput.GoodputCalculator("tpu", "log", store=store).get_program_goodput()
    assert p is not None and (p.peak_flops, p.peak_source) == (197e12, "table:TPU v5e")
    recorded(store, "v3", params=1_000_000, devices=4, device="TPU-v3").close()
    p = goodput.GoodputCalculator("v3", "log", store=store).get_program_goodput()
    assert p is not None and p.mfu_productive is None and p.peak_flops is None
    assert "MFU omitted: device 'TPU-v3' is not in the table" in p.absent["peak_flops"]


class ListLogger:
    def __init__(self) -> None:
        self.entries: list[dict[str, object]] = []

    def write_cloud_logging_entry(self, entry: dict[str, object]) -> None:
        self.entries.append(entry)


def test_a_job_without_work_has_no_program_and_the_library_payloads_are_unchanged() -> None:
    store = MemoryStore()
    log = ListLogger()
    rec = goodput.GoodputRecorder("plain", "log", True, log, store=store)
    rec.record_job_start_time(at(0))
    rec.record_step_start_time(0, at(1), tokens=7, samples=1)
    rec.record_step_start_time(1, at(2))
    # the payload the library's own logger receives: the library's, no work fields
    assert log.entries[1] == {"job_name": "plain", "step_count": 0, "step_start_time": 1772323201.0}
    rec.record_job_end_time(at(3))
    rec.flush()
    calc = goodput.GoodputCalculator("plain", "log", store=store)
    p = calc.get_program_goodput()
    assert p is not None and (p.tokens, p.samples) == (7, 1)
    assert p.flops_per_token is None and "no FLOPs per token" in p.absent["program_goodput"]
    rec.close()
    plain = goodput.GoodputRecorder("plainer", "log", True, store=store)
    plain.record_job_start_time(at(0))
    plain.record_step_start_time(0, at(1))
    plain.record_job_end_time(at(2))
    plain.close()
    assert goodput.GoodputCalculator("plainer", "log", store=store).get_program_goodput() is None
    with pytest.raises(ValueError, match="Total job time is zero"):
        goodput.GoodputCalculator("none", "log", store=store).get_program_goodput()
    rec.close()


def test_extensions_never_raise_into_the_loop() -> None:
    rec = goodput.GoodputRecorder("bad", "log", True, store=MemoryStore())
    rec.record_job_start_time(at(0))
    rec.record_step_start_time(0, at(1), tokens=-5)  # invalid: dropped, one warning
    rec.record_model(params="many")
    rec.record_model(nonsense=1)
    disabled = goodput.GoodputRecorder("off", "log", False)
    disabled.record_model(params=1)
    disabled.record_step_start_time(0, tokens=1)
    rec.close()
