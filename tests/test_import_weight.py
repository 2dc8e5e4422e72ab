"""`import badput` stays light: no numpy, rich, click or other optional package."""

from __future__ import annotations

import subprocess
import sys

HEAVY = (
    "numpy",
    "rich",
    "click",
    "tensorboardX",
    "prometheus_client",
    "opentelemetry",
    "google",
    "torch",
    "jax",
)


def loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    names = set()
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_import_badput_loads_no_heavy_package() -> None:
    loaded = loaded_after("import badput")
    assert "badput" in loaded  # the probe works
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_recorder_records_without_numpy() -> None:
    code = (
        "import sys, badput\n"
        "from badput.testing import MemoryStore\n"
        "rec = badput.Recorder('j', store=MemoryStore(), heartbeat_interval=0)\n"
        "with rec.step(1):\n    pass\n"
        "rec.flush(); rec.close()\n"
        "assert rec.recorded_events == 2, rec.recorded_events\n"
        "assert 'numpy' not in sys.modules and 'rich' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
