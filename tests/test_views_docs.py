"""docs/views.md: its Python examples and commands run on the demo job."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from badput.cli import main
from badput.demo import DemoConfig, run_demo

VIEWS = Path(__file__).resolve().parent.parent / "docs" / "views.md"


@pytest.fixture
def demo_dir(tmp_path: Path) -> Path:
    run_demo(tmp_path / "badput-runs", "demo", DemoConfig.fast(), say=lambda _m: None)
    return tmp_path


def test_views_doc_examples_run(demo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pandas", reason="the doc's pandas example needs the dev extra")
    text = VIEWS.read_text(encoding="utf-8")
    monkeypatch.chdir(demo_dir)
    python = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(python) == 2
    for code in python:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/views.md", "exec"), {})
    assert (demo_dir / "demo.html").stat().st_size > 50_000
    assert "productive" in out.getvalue()  # the describe() table of step times by bucket
    commands = [
        line.split("#")[0].strip()
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
        for line in block.splitlines()
        if line.startswith("badput ") and "demo" not in line.split()[1:2]
    ]
    assert any(c.startswith("badput export trace") for c in commands)
    for command in commands:
        result = CliRunner().invoke(main, shlex.split(command)[1:])
        if "--fail-under" in command:  # the CI gate: 3 exactly when it says it is under
            under = "is under --fail-under" in result.output
            assert result.exit_code == (3 if under else 0), (command, result.output)
            continue
        assert result.exit_code == 0, (command, result.output)
    assert (demo_dir / "demo-trace.json").exists()
    assert sorted(os.listdir(demo_dir / "demo-csv"))[:2] == ["attempts.csv", "buckets.csv"]
