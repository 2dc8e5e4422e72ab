"""Every example of docs/integrations.md runs under ``badput run`` and gives a clean report."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from _harness import assert_clean, badput_run, report

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"

pytestmark = pytest.mark.slow


def examples() -> dict[str, str]:
    """The python block of each framework's section, by section title."""
    text = DOC.read_text()
    out: dict[str, str] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title = section.splitlines()[0]
        code = re.findall(r"```python\n(.*?)```", section, flags=re.S)
        if code:
            out[title] = code[0]
    return out


# steps each example runs (Keras: 2 epochs of 8 batches)
STEPS = {
    "Plain PyTorch": 8,
    "PyTorch Lightning": 8,
    "Hugging Face Transformers": 8,
    "Keras 3": 16,
    "JAX and Orbax": 8,
}


# samples each example trains on, as its data says (Keras: 64 rows, 2 epochs)
SAMPLES = {
    "Plain PyTorch": 64,
    "PyTorch Lightning": 64,
    "Hugging Face Transformers": 64,
    "Keras 3": 128,
    "JAX and Orbax": 16,
}
# the parameters of each example's model, counted by hand
PARAMS = {
    "Plain PyTorch": 9,
    "PyTorch Lightning": 9,
    "Hugging Face Transformers": 9,
    "Keras 3": 9,
    "JAX and Orbax": 8,
}


def test_every_framework_has_an_example() -> None:
    assert sorted(examples()) == sorted(STEPS)


@pytest.mark.parametrize("title", sorted(STEPS))
def test_example_runs_and_reports(tmp_path: Path, title: str) -> None:
    path = tmp_path / "train.py"
    path.write_text(examples()[title])
    badput_run(tmp_path, "example", [sys.executable, str(path)], max_restarts=0)
    rep = report(tmp_path, "example")
    assert_clean(rep)
    assert (rep.steps.kept, rep.steps.wasted, rep.steps.last) == (STEPS[title], 0, STEPS[title])
    assert rep.bucket("process_init") > 0
    # the step work and the model each integration records by itself
    p = rep.program
    assert p is not None and (p.samples, p.kept_samples) == (SAMPLES[title], SAMPLES[title])
    assert p.flops_per_token == 6 * PARAMS[title]
    assert "device 'cpu' is not in the table" in p.absent["peak_flops"]
    if title == "Plain PyTorch":  # the example names its preparation and its teardown
        for bucket in ("model_build", "training_prep", "teardown"):
            assert rep.bucket(bucket) > 0, bucket
