"""Program goodput (issue 35): tokens, FLOPs, MFU and MPG = SG x RG x PG, checked against
hand computation (docs/program-goodput.md)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _program_job import (
    FLOPS_PER_TOKEN,
    H100,
    HIDDEN,
    JOB,
    LAYERS,
    MFU,
    PARAMS,
    SEQ,
    STEP,
    TOKENS,
    ev,
    llama_log,
)
from badput.engine import Accountant, dense_flops_per_token, table_peak
from badput.events import Event


def report_of(events: list[Event], **acc: Any) -> Any:
    a = Accountant(JOB, ideal_step_time=STEP)
    for name, value in acc.items():
        setattr(a, name, value)
    a.ingest_events(events)
    return a.report()


def test_dense_transformer_flops_of_an_8b_model() -> None:
    assert dense_flops_per_token(PARAMS, LAYERS, HIDDEN, SEQ) == FLOPS_PER_TOKEN
    assert table_peak("NVIDIA H100 80GB HBM3") == ("NVIDIA H100 SXM", H100)
    assert table_peak("NVIDIA H100 PCIe") == ("NVIDIA H100 PCIe", 756.5e12)
    assert table_peak("TPU v5 lite") == ("TPU v5e", 197e12)
    assert table_peak("Tesla T4") is None


def test_mfu_and_tokens_per_second_by_hand() -> None:
    report = report_of(llama_log())
    p = report.program
    assert report.total_seconds == 1700.0  # 600 queued + 1,000 of steps + 100 saving
    assert p.tokens == p.kept_tokens == 100 * TOKENS == 52_428_800
    assert p.samples == 6_400
    assert p.flops_per_token == FLOPS_PER_TOKEN and p.flops_source == "dense_transformer"
    assert p.devices == 8 and p.peak_flops == H100 and p.peak_source == "table:NVIDIA H100 SXM"
    assert p.tokens_per_second == pytest.approx(52_428_800 / 1700)  # 30,840.47 over the job
    assert p.productive_tokens_per_second == pytest.approx(52_428.8)  # over 1,000 s of steps
    assert p.productive_samples_per_second == pytest.approx(6.4)
    assert p.mfu_productive == pytest.approx(MFU, rel=1e-12)
    assert p.program_goodput == pytest.approx(MFU, rel=1e-12)  # no slowdown: the same
    assert p.scheduling_goodput == pytest.approx(1100 / 1700)  # held 1,100 of 1,700 s
    assert p.runtime_goodput == pytest.approx(1000 / 1100)  # productive 1,000 of 1,100
    assert report.goodput == pytest.approx(p.scheduling_goodput * p.runtime_goodput)
    assert p.mpg == pytest.approx(1000 / 1700 * MFU) == pytest.approx(0.23791291722)
    assert p.mfu_job == pytest.approx(p.mpg)
    assert [(a.tokens, a.seconds) for a in p.attempts] == [(52_428_800, 1100.0)]
    assert p.absent == {}


def test_given_peak_wins_and_an_unknown_device_is_not_guessed() -> None:
    log = [
        e if e.kind != "model" else ev(600.0, "model", params=PARAMS, devices=8, device="Tesla T4")
        for e in llama_log()
    ]
    p = report_of(log).program
    assert p.peak_flops is None and p.program_goodput is None and p.mpg is None
    assert "'Tesla T4' is not in the table" in p.absent["peak_flops"]
    assert p.flops_per_token == 6 * PARAMS  # no attention term without its sizes
    assert "attention_term" in p.absent
    p = report_of(log, peak_flops=2 * H100).program
    assert p.peak_source == "given"
    assert p.program_goodput == pytest.approx(6 * PARAMS * TOKENS / STEP / (16 * H100))


def test_without_flops_information_runtime_goodput_stays_and_says_why() -> None:
    log = [e for e in llama_log() if e.kind != "model"]
    report = report_of(log)
    p = report.program
    assert p.tokens == 52_428_800 and p.runtime_goodput == pytest.approx(1000 / 1100)
    assert p.program_goodput is None and p.mpg is None and p.mfu_job is None
    assert p.absent["program_goodput"].startswith("no FLOPs per token")
    assert "program goodput is absent" in p.absent["mpg"]
    assert report.to_dict()["program"]["absent"]["mpg"] == p.absent["mpg"]


def test_a_log_without_work_has_no_program_section() -> None:
    plain = [e for e in llama_log() if e.kind != "model"]
    plain = [Event(**{**{f: getattr(e, f) for f in e.__struct_fields__}, "tokens": None,
                      "samples": None}) for e in plain]  # fmt: skip
    assert report_of(plain).program is None
    assert report_of(plain).to_dict()["program"] is None


def test_wasted_steps_do_not_count_as_kept_tokens() -> None:
    """A crash after step 70 and a restore of checkpoint 50: 20 steps' tokens are wasted."""
    events = [ev(0.0, "job_start"), ev(0.0, "model", flops_per_token=1e9, devices=1,
                                       peak_flops=1e12)]  # fmt: skip
    t = 0.0
    for step in range(1, 71):
        events += [ev(t, "step_start", step=step, tokens=1000), ev(t + 1, "step_end", step=step)]
        t += 1
    events.append(Event(ts=t, kind="attempt_end", job=JOB, attempt=0, rank=0, status="failed"))
    t += 5
    events.append(Event(ts=t, kind="job_start", job=JOB, attempt=1, rank=0))
    events.append(Event(ts=t, kind="checkpoint_restore_end", job=JOB, attempt=1, rank=0, step=50))
    for step in range(51, 81):
        events += [
            Event(ts=t, kind="step_start", job=JOB, attempt=1, rank=0, step=step, tokens=1000),
            Event(ts=t + 1, kind="step_end", job=JOB, attempt=1, rank=0, step=step),
        ]
        t += 1
    events.append(Event(ts=t, kind="job_end", job=JOB, attempt=1, rank=0))
    report = report_of(events, peak_flops=None)
    p = report.program
    assert p.tokens == 100_000 and p.kept_tokens == 80_000  # steps 51..70 ran twice
    assert [a.tokens for a in p.attempts] == [70_000, 30_000]
    assert report.steps.kept == 80
    assert p.scheduling_goodput == pytest.approx(100 / 105)  # 5 s of recovery
    # 80,000 tokens x 1e9 FLOPs over 80 productive seconds on a 1e12 device: 100 %
    assert p.program_goodput == pytest.approx(1.0)
    assert p.mpg == pytest.approx(80 / 105)


@st.composite
def random_logs(draw: st.DrawFn) -> tuple[list[Event], float]:
    events: list[Event] = []
    t = 0.0
    if draw(st.booleans()):
        events.append(Event(ts=t, kind="job_scheduled", job=JOB))
        t += draw(st.floats(0, 100))
    step = 0
    for attempt in range(draw(st.integers(1, 3))):
        events.append(Event(ts=t, kind="job_start", job=JOB, attempt=attempt))
        if attempt == 0:
            events.append(Event(ts=t, kind="model", job=JOB, attempt=0, flops_per_token=1e6,
                                devices=draw(st.integers(1, 4))))  # fmt: skip
        if step and draw(st.booleans()):
            step = draw(st.integers(0, step))
            events.append(Event(ts=t, kind="checkpoint_restore_end", job=JOB, attempt=attempt,
                                step=step))  # fmt: skip
        for _ in range(draw(st.integers(0, 12))):
            step += 1
            d = draw(st.floats(0.1, 5))
            tokens = draw(st.integers(0, 1000))
            events.append(
                Event(ts=t, kind="step_start", job=JOB, attempt=attempt, step=step, tokens=tokens)
            )
            t += d
            events.append(Event(ts=t, kind="step_end", job=JOB, attempt=attempt, step=step))
            t += draw(st.sampled_from([0.0, 0.0, 1.0]))
        events.append(Event(ts=t, kind="attempt_end", job=JOB, attempt=attempt))
        t += draw(st.floats(0, 50))
    events.append(Event(ts=t, kind="job_end", job=JOB, attempt=attempt))
    return events, draw(st.sampled_from([1e6, 1e8, 1e10, 1e12]))


@settings(max_examples=150, deadline=None)
@given(random_logs())
def test_mpg_is_the_product_of_its_three_goodputs(log: tuple[list[Event], float]) -> None:
    events, peak = log
    a = Accountant(JOB)
    a.peak_flops = peak
    a.ingest_events(events)
    report = a.report()
    p = report.program
    assert p is not None
    factors = (p.scheduling_goodput, p.runtime_goodput, p.program_goodput, p.mpg)
    for value in factors:
        assert value is None or 0.0 <= value <= 1.0
    never_waited = not any(e.kind == "job_scheduled" for e in events)
    if never_waited and report.bucket("recovery") == 0 and report.total_seconds > 0:
        assert p.scheduling_goodput == 1.0
    if report.total_seconds == 0:  # nothing to divide: absent, and said so
        assert p.scheduling_goodput is None and p.absent["runtime_goodput"]
    if p.scheduling_goodput is not None and p.runtime_goodput is not None:
        assert p.scheduling_goodput * p.runtime_goodput == pytest.approx(report.goodput)
    if p.program_goodput is None:
        assert p.mpg is None and p.absent["program_goodput"] and p.absent["mpg"]
    else:
        assert p.mpg == pytest.approx(p.scheduling_goodput * p.runtime_goodput * p.program_goodput)
        assert p.mpg == pytest.approx(p.mfu_job)
        assert math.isclose(p.kept_tokens * 1e6 / (report.total_seconds * peak * p.devices),
                            p.mfu_job, rel_tol=1e-9)  # fmt: skip
    assert p.kept_tokens <= p.tokens


def test_cli_peak_flops_and_devices(tmp_path: Any) -> None:
    import json

    from click.testing import CliRunner

    from badput.cli import main
    from badput.formats.codec import encode_lines

    log = tmp_path / "llama.jsonl"
    log.write_bytes(encode_lines(llama_log()))
    args = ["report", str(log), "--ideal-step-time", "10", "--json"]
    out = json.loads(CliRunner().invoke(main, args).output)["program"]
    assert out["program_goodput"] == pytest.approx(MFU)
    given = CliRunner().invoke(main, [*args, "--peak-flops", "2e15", "--devices", "4"])
    out = json.loads(given.output)["program"]
    assert (out["peak_source"], out["peak_flops"], out["devices"]) == ("given", 2e15, 4)
    # 3.2016417096204288e15 FLOP/s of 4 x 2e15
    assert out["program_goodput"] == pytest.approx(3.2016417096204288e15 / 8e15)
    for bad in ("nan", "inf", "0", "-1", "x"):
        result = CliRunner().invoke(main, [*args, "--peak-flops", bad])
        assert result.exit_code == 2 and "--peak-flops" in result.output
    table = CliRunner().invoke(main, args[:-1]).output
    assert "MPG = SG x RG x PG" in table and "23.8%" in table and "40.4%" in table


def test_the_docs_worked_example_is_these_numbers() -> None:
    from pathlib import Path

    page = (Path(__file__).parent.parent / "docs" / "program-goodput.md").read_text()
    p = report_of(llama_log()).program
    assert f"{FLOPS_PER_TOKEN:,}" in page
    assert f"{p.productive_tokens_per_second:,.1f}" in page  # 52,428.8
    assert f"{p.tokens_per_second:,.1f}" in page  # 30,840.5
    for name in ("scheduling_goodput", "runtime_goodput", "program_goodput", "mpg"):
        assert f"{100 * getattr(p, name):.1f} %" in page, name
