"""The worked example of docs/program-goodput.md: an 8B model on 8 H100s (issue 35)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from badput.events import Event
from badput.formats.codec import encode_lines

JOB = "llama-8b"

# Llama-3-8B's shape: 8,030,261,248 parameters, 32 layers, hidden 4,096, at 8,192 tokens.
PARAMS, LAYERS, HIDDEN, SEQ = 8_030_261_248, 32, 4096, 8192
# 6 x 8,030,261,248 = 48,181,567,488 (weights, forward and backward)
# 12 x 32 x 4,096 x 8,192 = 12,884,901,888 (attention)
FLOPS_PER_TOKEN = 61_066_469_376
BATCH = 64  # sequences a step, the whole job's
TOKENS = BATCH * SEQ  # 524,288 tokens a step
STEP = 10.0  # seconds a step
H100 = 989.5e12  # bf16 dense, per GPU (data sheet: 1,979 TFLOPS with sparsity)
# per step: 524,288 x 61,066,469,376 = 32,016,417,096,204,288 FLOPs; per second 3.2016e15;
# 8 H100s can do 7.916e15 FLOP/s: MFU = 3.2016417096204288e15 / 7.916e15 = 0.40445195927...
MFU = 0.4044519592749405


def ev(ts: float, kind: str, **fields: Any) -> Event:
    return Event(ts=ts, kind=kind, job=JOB, attempt=0, rank=0, **fields)


def llama_log(job: str = JOB) -> list[Event]:
    """Queued 600 s; 100 steps of 10 s with a 100 s checkpoint save after step 50 (of
    ``job``)."""
    events = [ev(0.0, "job_scheduled"), ev(600.0, "job_start")]
    events.append(
        ev(600.0, "model", params=PARAMS, layers=LAYERS, hidden=HIDDEN, seq_len=SEQ, devices=8,
           device="NVIDIA H100 80GB HBM3")
    )  # fmt: skip
    t = 600.0
    for step in range(1, 101):
        events.append(ev(t, "step_start", step=step, tokens=TOKENS, samples=BATCH))
        t += STEP
        events.append(ev(t, "step_end", step=step))
        if step == 50:
            events += [ev(t, "checkpoint_save_start", step=50)]
            t += 100.0
            events += [ev(t, "checkpoint_save_end", step=50)]
    events.append(ev(t, "job_end"))
    return events if job == JOB else [msgspec.structs.replace(e, job=job) for e in events]


def write_llama(root: Path) -> Path:
    """The worked example's log as a JSONL file under ``root`` (its path)."""
    root.mkdir(parents=True, exist_ok=True)
    log = root / "llama.jsonl"
    log.write_bytes(encode_lines(llama_log()))
    return log
