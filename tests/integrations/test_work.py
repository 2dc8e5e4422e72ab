"""What the integrations count of a step's work and the model (issue 35): batch sizes,
tokens, the device kind and count, and that none of it raises into a training loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import badput
from badput.integrations._work import StepWork, batch_samples, batch_tokens, torch_devices

torch = pytest.importorskip("torch")
os.environ.setdefault("KERAS_BACKEND", "jax")  # the extra installs no TensorFlow
JOB = "work"


def lines(store: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for f in sorted((store / JOB).rglob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]


@pytest.mark.parametrize(
    ("batch", "samples", "tokens"),
    [
        (torch.zeros(4, 7), 4, None),
        ((torch.zeros(3, 2), torch.zeros(3)), 3, None),  # (inputs, labels)
        ({"input_ids": torch.zeros(5, 9, dtype=torch.long), "labels": torch.zeros(1)}, 5, 45),
        ({"x": np.zeros((6, 2)), "y": np.zeros(6)}, 6, None),  # the first array of a mapping
        (({"input_ids": np.zeros((2, 3), "int32")}, np.ones((2, 1))), 2, 6),  # Keras' shape
        ([[torch.zeros(8, 1)]], 8, None),
        (torch.tensor(3.0), None, None),  # a scalar has no leading dimension
        ("text", None, None),
        (None, None, None),
        ({}, None, None),
    ],
)
def test_batch_counts(batch: Any, samples: int | None, tokens: int | None) -> None:
    assert (batch_samples(batch), batch_tokens(batch)) == (samples, tokens)


class Hostile:
    """A batch whose every attribute raises."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(name)


def test_a_batch_that_raises_is_not_counted_and_raises_nothing() -> None:
    assert (batch_samples(Hostile()), batch_tokens({"input_ids": Hostile()})) == (None, None)
    assert batch_samples({"input_ids": Hostile()}) is None


sizes = st.lists(st.tuples(st.integers(0, 64), st.integers(0, 512)), max_size=6)


@settings(max_examples=200, deadline=None)
@given(before=sizes, inside=sizes, replicas=st.integers(-2, 16))
def test_step_work_is_the_last_batch_before_the_step_and_those_inside_it(
    before: list[tuple[int, int]], inside: list[tuple[int, int]], replicas: int
) -> None:
    # batches seen before the step begins replace one another (skipped past on resume);
    # those seen inside it add up (micro-batches); the counts taken are the job's
    work = StepWork(replicas)
    for n, seq in before:
        work.add_batch({"input_ids": np.zeros((n, seq))})
    work.begin()
    for n, seq in inside:
        work.add_batch({"input_ids": np.zeros((n, seq))})
    counted = before[-1:] + inside
    r = max(replicas, 1)
    expected = (
        (sum(n for n, _ in counted) * r, sum(n * s for n, s in counted) * r)
        if counted
        else (None, None)
    )
    assert work.take() == expected
    assert work.take() == (None, None)  # taken once


def test_loader_steps_carry_the_work_of_their_batches(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader

    from badput.integrations.torch import TimedDataLoader

    rec = badput.Recorder(JOB, tmp_path, heartbeat_interval=0)
    data = [{"input_ids": torch.zeros(4 + i % 3, dtype=torch.long)} for i in range(9)]
    # variable lengths: batches of 1 sample, then a step that fails
    loader = TimedDataLoader(DataLoader(data, batch_size=1), rec, replicas=3)
    rec.record_job_start()
    batches = iter(loader)
    next(batches)  # skipped past (a resume): not the next step's work
    for step in (1, 2):
        batch = next(batches)
        with loader.step(step):
            assert batch["input_ids"].shape[0] == 1
    with pytest.raises(ValueError), loader.step(3):
        next(batches)
        raise ValueError("the step failed")
    rec.record_job_end()
    rec.close()
    ends = [(e["step"], e.get("samples"), e.get("tokens")) for e in lines(tmp_path)
            if e["kind"] == "step_end"]  # fmt: skip
    # batch 1 has 5 tokens, batch 2 has 6, each times 3 replicas; the failed step did none
    assert ends == [(1, 3, 15), (2, 3, 18), (3, None, None)]


def test_torch_cpu_is_recorded_as_cpu_and_mfu_says_the_peak_is_unknown(tmp_path: Path) -> None:
    from badput.integrations.torch import device, record_model

    assert device() == ("cpu", 1)  # this machine: no CUDA
    model = torch.nn.Sequential(torch.nn.Linear(10, 4), torch.nn.Linear(4, 1))
    rep = _run(tmp_path, lambda rec: record_model(rec, model))
    p = rep.program
    assert p is not None and p.flops_per_token == 6 * (44 + 5)
    assert p.peak_flops is None and p.mfu_job is None and p.program_goodput is None
    why = "peak FLOP/s unknown, MFU omitted: device 'cpu' is not in the table of peaks"
    assert p.absent["peak_flops"].startswith(why)
    # the report says so where MFU would be (the real command, a wide terminal)
    out = subprocess.run(
        [sys.executable, "-m", "badput.cli", "report", str(tmp_path), "--job", JOB],
        capture_output=True, text=True, check=True, env={**os.environ, "COLUMNS": "400"},
    ).stdout  # fmt: skip
    (row,) = [line for line in out.splitlines() if "MFU: kept steps" in line]
    assert why in row


def test_a_cuda_device_name_finds_its_peak_in_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch.cuda as on an 8-GPU H100 host (the data sheet's name as torch reports it)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    from badput.integrations.torch import record_model

    assert torch_devices(torch) == ("NVIDIA H100 80GB HBM3", 8)
    model = torch.nn.Linear(1000, 1000)  # 1,001,000 parameters
    rep = _run(tmp_path, lambda rec: record_model(rec, model), tokens=4096)
    p = rep.program
    assert p is not None
    assert (p.peak_flops, p.peak_source, p.devices) == (989.5e12, "table:NVIDIA H100 SXM", 8)
    # 10 steps of 4,096 tokens x 6 x 1,001,000 FLOPs over their time on 8 x 989.5 TFLOP/s
    flops = 10 * 4096 * 6 * 1_001_000
    stepping = rep.bucket("productive") + rep.bucket("slowdown")
    assert p.mfu_productive == pytest.approx(flops / (stepping * 8 * 989.5e12), rel=1e-9)


def test_an_unknown_cuda_device_is_never_guessed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    from badput.integrations.torch import record_model

    rep = _run(tmp_path, lambda rec: record_model(rec, torch.nn.Linear(2, 2)), tokens=10)
    p = rep.program
    assert p is not None and p.peak_flops is None and p.mfu_productive is None
    assert "device 'Tesla T4' is not in the table" in p.absent["peak_flops"]


def test_cuda_that_raises_is_recorded_as_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> bool:
        raise RuntimeError("no driver")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    assert torch_devices(torch) == ("cpu", 1)


def test_jax_cpu_device_is_its_own_device_kind(tmp_path: Path) -> None:
    jax = pytest.importorskip("jax")
    from badput.integrations.jax import device, param_count, record_model

    assert device() == (jax.devices()[0].device_kind, jax.device_count()) == ("cpu", 1)
    params = {"emb": jax.numpy.zeros((16, 8)), "layers": [jax.numpy.zeros(3)] * 2}
    assert param_count(params) == 16 * 8 + 6
    rep = _run(tmp_path, lambda rec: record_model(rec, params))
    (model,) = [e for e in lines(tmp_path) if e["kind"] == "model"]
    assert (model["params"], model["device"], model["devices"]) == (134, "cpu", 1)
    assert rep.program is not None and rep.program.mfu_job is None
    assert "device 'cpu' is not in the table" in rep.program.absent["peak_flops"]


def _run(tmp_path: Path, record: Any, tokens: int = 8) -> Any:
    rec = badput.Recorder(JOB, tmp_path, heartbeat_interval=0)
    rec.record_job_start()
    record(rec)
    for step in range(1, 11):
        with rec.step(step, tokens=tokens, samples=1):
            time.sleep(0.001)
    rec.record_job_end()
    rec.close()
    return badput.analyze(tmp_path, JOB)


def test_hf_tokens_are_the_trainers_own_count_when_it_keeps_one(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from badput.integrations.transformers import BadputCallback

    cb = BadputCallback(JOB, tmp_path, heartbeat_interval=0)
    args = SimpleNamespace(process_index=0, world_size=2, include_num_input_tokens_seen="all")
    state = SimpleNamespace(global_step=0, num_input_tokens_seen=1000)  # a resumed count
    model = torch.nn.Linear(3, 3)
    cb.on_init_end(args, state, None)
    cb.on_train_begin(args, state, None, model=model)
    for seen in (1040, 1100):
        cb._work.add(2, 16)  # what get_batch_samples saw on this process
        cb.on_step_begin(args, state, None)
        state.global_step += 1
        state.num_input_tokens_seen = seen  # gathered over the processes by the Trainer
        cb.on_step_end(args, state, None)
    args.include_num_input_tokens_seen = "no"  # off: the batches' count, times 2 processes
    cb._work.add(2, 16)
    cb.on_step_begin(args, state, None)
    state.global_step += 1
    cb.on_step_end(args, state, None)
    cb.on_train_end(args, state, None)
    events = lines(tmp_path)
    ends = [(e["step"], e.get("samples"), e.get("tokens")) for e in events
            if e["kind"] == "step_end"]  # fmt: skip
    assert ends == [(1, 4, 40), (2, 4, 60), (3, 4, 32)]
    (m,) = [e for e in events if e["kind"] == "model"]
    assert (m["params"], m["device"], m["devices"]) == (12, "cpu", 1)


def test_keras_counts_what_the_train_function_takes_and_never_raises() -> None:
    pytest.importorskip("keras")
    from badput.integrations.keras import _counted

    work = StepWork()
    seen: list[Any] = []
    function = _counted(lambda state, it: seen.append(next(it)), work, "jax")
    work.begin()
    function("state", iter([{"input_ids": np.zeros((3, 4))}]))
    assert work.take() == (3, 12) and len(seen) == 1
    work.begin()
    function("state", iter([Hostile()]))  # a batch it cannot count: counted as nothing
    assert work.take() == (None, None)
    with pytest.raises(StopIteration):  # the framework's own end of data passes through
        function("state", iter([]))


def test_counting_costs_microseconds_a_batch() -> None:
    work = StepWork(2)
    batch = {"input_ids": torch.zeros(8, 512, dtype=torch.long), "labels": torch.zeros(8)}
    n = 20_000
    t0 = time.perf_counter()
    for _ in range(n):
        work.add_batch(batch)
    per_batch = (time.perf_counter() - t0) / n
    # well below a millisecond step's measurement noise (a few microseconds here)
    assert per_batch < 50e-6, per_batch
