"""The documentation's examples run and give the numbers the documentation states."""

from __future__ import annotations

import contextlib
import io
import re
import textwrap
from pathlib import Path

import pytest

import badput

DOCS = Path(__file__).resolve().parent.parent / "docs"


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)


def block_after(text: str, heading: str, lang: str = "") -> str:
    return next(body for la, body in blocks(text[text.index(heading) :]) if la == lang)


def test_accounting_python_example_prints_its_documented_output() -> None:
    text = (DOCS / "accounting.md").read_text()
    code = next(body for lang, body in blocks(text) if lang == "python")
    expected = block_after(text[text.index(code) + len(code) :], "Output:")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/accounting.md", "exec"), {})
    assert out.getvalue().strip() == expected.strip()


def test_accounting_hand_written_jsonl_gives_the_worked_example(tmp_path: Path) -> None:
    text = (DOCS / "accounting.md").read_text()
    path = tmp_path / "example.jsonl"
    path.write_text(block_after(text, "### Run it: a hand-written JSONL file"))
    r = badput.analyze(path, ideal_step_time=120.0)
    assert {k: round(v / 60, 6) for k, v in r.buckets.items()} == {
        "productive": 100,
        "wasted": 40,
        "slowdown": 25,
        "recovery": 15,
        "checkpoint_restore": 10,
        "checkpoint_save": 10,
    }
    assert (r.steps.kept, r.steps.wasted, r.steps.last) == (50, 20, 75)
    assert r.diagnostics == []


def test_events_example_file_gives_the_documented_table(tmp_path: Path) -> None:
    text = (DOCS / "events.md").read_text()
    jsonl = next(body for lang, body in blocks(text) if lang == "" and '"kind":"job_start"' in body)
    path = tmp_path / "llama-8b.jsonl"
    path.write_text(jsonl)
    r = badput.analyze(path)
    table = re.findall(r"^\| ([a-z_:]+) \| ([0-9.]+) \|", text, flags=re.M)
    assert len(table) == 10
    for bucket, seconds in table:
        assert r.bucket(bucket) == pytest.approx(float(seconds), abs=0.051), bucket
    assert r.total_seconds == pytest.approx(90.0)
    assert r.overlapped == {"data_loading": pytest.approx(0.8)}
    assert round(r.goodput * 100, 1) == 9.3
    assert not [d for d in r.diagnostics if d.code != "no_job_end"]


def test_compat_example_prints_its_documented_output() -> None:
    """docs/compat.md: the drop-in recorder and calculator, end to end."""
    text = (DOCS / "compat.md").read_text()
    section = text[text.index("### Recording and querying, end to end") :]
    code = next(body for lang, body in blocks(section) if lang == "python")
    expected = block_after(section, "Output:")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/compat.md", "exec"), {"__name__": "docs_compat"})
    assert out.getvalue().strip() == expected.strip()


def test_ranks_worked_example_prints_its_documented_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/ranks.md: the straggler and the stall of the worked example."""
    text = (DOCS / "ranks.md").read_text()
    section = text[text.index("## Worked example") :]
    code = next(body for lang, body in blocks(section) if lang == "python")
    expected = block_after(section, "Output:")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/ranks.md", "exec"), {"__name__": "docs_ranks"})
    assert out.getvalue().strip() == expected.strip()
    stall = badput.analyze(tmp_path / "ranks-example", "llama").stalls[0]
    assert sum(stall.buckets.values()) == pytest.approx(stall.seconds)


def test_performance_list_job_example_runs_on_the_demo_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/performance.md's example of a job listed once and handed to its reader."""
    from badput.demo import DemoConfig, run_demo

    run_demo(tmp_path / "badput-runs", "demo", DemoConfig.fast(), say=lambda _m: None)
    monkeypatch.chdir(tmp_path)
    text = (DOCS / "performance.md").read_text(encoding="utf-8")
    code = next(
        body
        for lang, body in blocks(text[text.index("## The job listed beside the imports") :])
        if lang == "python"
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(textwrap.dedent(code), "docs/performance.md", "exec"), {})
    found = re.fullmatch(r"(\d+) files; (\d+) lines read\ngoodput ([\d.]+)%\n", out.getvalue())
    assert found is not None, out.getvalue()
    files, lines, goodput = found.groups()
    assert int(files) >= 2
    assert int(lines) > 100
    assert 0 < float(goodput) < 100
