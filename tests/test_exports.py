"""`badput export trace|csv`, `Report.to_pandas()`, `badput jobs` and `badput compare`."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from _views_jobs import T0, write_long_job, write_two_rank_job
from badput.analysis import LiveJob
from badput.cli import main
from badput.store._jsonl import safe_job_dir
from badput.testing import Timeline, events_to_jsonl

# ------------------------------------------------------------------ trace

_PHASES_X_FIELDS = {"name": str, "cat": str, "pid": int, "tid": int}
_META_NAMES = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def check_trace_rules(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The Trace Event format's rules for the JSON Object Format with complete ("X") and
    metadata ("M") events; returns the X events. Raises AssertionError on a violation."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit") in (None, "ms", "ns")
    slices = []
    named_threads = set()
    named_processes = set()
    for ev in doc["traceEvents"]:
        assert ev["ph"] in ("X", "M"), ev
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int), ev
        if ev["ph"] == "M":
            assert ev["name"] in _META_NAMES, ev
            arg = "name" if ev["name"].endswith("_name") else "sort_index"
            assert set(ev["args"]) == {arg}, ev
            if ev["name"] == "thread_name":
                named_threads.add((ev["pid"], ev["tid"]))
            if ev["name"] == "process_name":
                named_processes.add(ev["pid"])
            continue
        for field, kind in _PHASES_X_FIELDS.items():
            assert isinstance(ev[field], kind), (field, ev)
        for field in ("ts", "dur"):
            assert isinstance(ev[field], (int, float)) and math.isfinite(ev[field]), ev
        assert ev["ts"] >= 0 and ev["dur"] >= 0, ev
        assert isinstance(ev.get("args", {}), dict)
        slices.append(ev)
    # every thread and process with slices is named
    assert {(e["pid"], e["tid"]) for e in slices} <= named_threads
    assert {e["pid"] for e in slices} <= named_processes
    # complete events on one thread nest: each is inside the enclosing one or after it
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in slices:
        by_thread[(e["pid"], e["tid"])].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        for e in evs:
            # (0.5 us of slack: float microseconds since 1970 carry ~0.25 us of rounding)
            while stack and e["ts"] >= stack[-1] - 0.5:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1] + 0.5, ("partial overlap", e)
            stack.append(end)
    return slices


def test_trace_follows_the_format_and_holds_every_span(tmp_path: Path) -> None:
    job_dir = write_two_rank_job(tmp_path / "store")
    out = tmp_path / "trace.json"
    result = CliRunner().invoke(main, ["export", "trace", str(job_dir), str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    slices = check_trace_rules(doc)
    lj = LiveJob(job_dir)
    lj.update()
    report = lj.report()
    steps = [e for e in slices if e["name"].startswith("step ")]
    assert len(steps) == 2 * (33 + 20)  # two ranks: 33 steps before the crash, 20 after
    assert {e["cat"] for e in steps} == {"productive", "startup", "wasted"}
    first = min(steps, key=lambda e: e["ts"])
    assert first["ts"] == pytest.approx((T0 + 5.0) * 1e6) and first["dur"] == pytest.approx(4e6)
    assert first["args"]["bucket"] == "startup"
    attempts = [e for e in slices if e["cat"] == "attempt"]
    assert [e["name"] for e in attempts] == ["attempt 0", "attempt 1"]
    assert attempts[0]["args"]["exit_code"] == 137
    assert attempts[1]["args"]["restore_step"] == 20
    (recovery,) = [e for e in slices if e["name"] == "recovery"]
    assert recovery["dur"] == pytest.approx(report.bucket("recovery") * 1e6)
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert sorted(names.values()) == [
        "attempts",
        "rank 0 intervals",
        "rank 0 steps",
        "rank 1 intervals",
        "rank 1 steps",
    ]
    processes = [
        e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    ]
    assert processes == ["job two-ranks", "host node-a"]
    saves = [e for e in slices if e["name"] == "checkpoint_save"]
    assert len(saves) == 2 and all(e["dur"] == pytest.approx(2e6) for e in saves)


def test_trace_file_holds_the_events_of_trace_events(tmp_path: Path) -> None:
    """write_trace encodes steps column-wise: the same events as trace_events()."""
    from badput.report._trace import trace_events, write_trace

    lj = LiveJob(write_two_rank_job(tmp_path / "store"))
    lj.update()
    snapshot = lj.snapshot(drawing=True)
    out = io.StringIO()
    n = write_trace(snapshot, out)
    written = json.loads(out.getvalue())["traceEvents"]
    events = list(trace_events(snapshot))
    assert n == len(written) == len(events)
    assert written == events


def test_trace_puts_overlapping_nonblocking_intervals_on_their_own_threads(
    tmp_path: Path,
) -> None:
    tl = Timeline("async", start=T0)
    tl.emit("job_start")
    tl.emit("data_loading_start", blocking=False)  # background prefetch
    tl.steps(2, 1.0, first=1)
    tl.emit("data_loading_start", blocking=False)  # a second one, overlapping the first
    tl.steps(1, 1.0)
    tl.emit("data_loading_end", blocking=False)
    tl.emit("data_loading_end", dt=0.5, blocking=False)
    tl.emit("job_end", status="completed")
    path = events_to_jsonl(tmp_path / "async" / "0" / "h-0-1.jsonl", tl.events)
    out = tmp_path / "t.json"
    result = CliRunner().invoke(main, ["export", "trace", str(path.parent.parent), str(out)])
    assert result.exit_code == 0, result.output
    slices = check_trace_rules(json.loads(out.read_text()))
    loads = [e for e in slices if e["name"] == "data_loading"]
    assert len(loads) == 2
    assert all(e["args"]["blocking"] is False for e in loads)
    assert len({e["tid"] for e in loads}) == 2  # they overlap: one thread each


def test_trace_rules_catch_partial_overlap() -> None:
    doc = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t"}},
            {"ph": "X", "name": "a", "cat": "c", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
            {"ph": "X", "name": "b", "cat": "c", "ts": 5, "dur": 10, "pid": 1, "tid": 1},
        ]
    }
    with pytest.raises(AssertionError, match="partial overlap"):
        check_trace_rules(doc)


# ------------------------------------------------------------------ csv and pandas


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_csv_export(tmp_path: Path) -> None:
    job_dir = write_two_rank_job(tmp_path / "store", eval_name="=HYPERLINK(1)")
    out = tmp_path / "csv"
    result = CliRunner().invoke(main, ["export", "csv", str(job_dir), str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "attempts.csv",
        "buckets.csv",
        "steps_attempt_0.csv",
        "steps_attempt_1.csv",
    ]
    buckets = {r["bucket"]: r for r in read_csv(out / "buckets.csv")}
    assert float(buckets["productive"]["seconds"]) == pytest.approx(40.0)
    assert sum(float(r["fraction"]) for r in buckets.values()) == pytest.approx(1.0)
    # a formula from the log stays text
    assert "'custom:=HYPERLINK(1)" not in buckets  # the bucket starts with "custom:"
    assert "custom:=HYPERLINK(1)" in buckets
    attempts = read_csv(out / "attempts.csv")
    assert [a["restore_step"] for a in attempts] == ["", "20"]
    assert [a["wasted_steps"] for a in attempts] == ["13", "0"]
    assert attempts[0]["exit_code"] == "137"
    steps0 = read_csv(out / "steps_attempt_0.csv")
    assert len(steps0) == 2 * 33
    assert {r["rank"] for r in steps0} == {"0", "1"}
    assert [r["bucket"] for r in steps0 if r["rank"] == "0"][:2] == ["startup", "productive"]
    assert len(read_csv(out / "steps_attempt_1.csv")) == 2 * 20


def test_csv_cells_from_the_log_cannot_be_formulas(tmp_path: Path) -> None:
    job_dir = write_two_rank_job(tmp_path / "store", attempts=("=1+1", "@SUM(A1)"))
    out = tmp_path / "csv"
    assert CliRunner().invoke(main, ["export", "csv", str(job_dir), str(out)]).exit_code == 0
    ids = [a["id"] for a in read_csv(out / "attempts.csv")]
    assert ids == ["'=1+1", "'@SUM(A1)"]


def test_to_pandas(tmp_path: Path) -> None:
    pytest.importorskip("pandas", reason="pandas is part of the dev extra")
    lj = LiveJob(write_two_rank_job(tmp_path / "store"))
    lj.update()
    report = lj.report()
    frames = report.to_pandas()
    b = frames["buckets"].set_index("bucket")
    assert b.loc["productive", "seconds"] == pytest.approx(40.0)
    assert b["fraction"].sum() == pytest.approx(1.0)
    assert list(frames["attempts"]["restore_step"].fillna(-1)) == [-1, 20]
    tl = lj.accountant.timeline(report).to_pandas()
    steps = tl["steps"]
    assert len(steps) == 2 * 53
    assert steps.groupby("attempt_index").size().to_dict() == {0: 66, 1: 40}
    assert (steps[steps["bucket"] == "wasted"]["step"] > 20).all()
    assert set(tl["intervals"]["bucket"]) == {
        "accelerator_init",
        "checkpoint_save",
        "custom:eval",
        "checkpoint_restore",
    }


def test_to_pandas_without_pandas_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from badput.engine import Report, StepCounts
    from badput.runtime.optional import MissingExtraError

    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    report = Report("j", 0.0, 1.0, "job_end", 1.0, 1.0, 1.0, {"productive": 1.0}, {}, 0.0,
                    None, None, [], StepCounts(0, 0, None))  # fmt: skip
    with pytest.raises(MissingExtraError, match=r"badput\[pandas\]"):
        report.to_pandas()


# ------------------------------------------------------------------ jobs and compare


def make_store(root: Path) -> Path:
    write_two_rank_job(root, job="two-ranks")
    write_long_job(root, 200)
    tl = Timeline("crashed", start=T0 + 500)
    tl.emit("job_start")
    tl.steps(10, 2.0, first=1)
    events_to_jsonl(root / "crashed" / "0" / "h-0-1.jsonl", tl.events)
    return root


def test_jobs_lists_every_job_sorted(tmp_path: Path) -> None:
    store = make_store(tmp_path / "store")
    result = CliRunner().invoke(main, ["jobs", str(store), "--json", "--sort", "goodput"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["job"] for r in rows] == ["two-ranks", "long", "crashed"]
    by = {r["job"]: r for r in rows}
    assert by["two-ranks"]["status"] == "completed"
    assert by["two-ranks"]["attempts"] == 2
    # Rank 1 runs 0.5 s behind rank 0 and the job ends at its job_end, the last (issue 33):
    # 40 s productive of 96.5 s (the first job_end, rank 0's, gave 96 s).
    assert by["two-ranks"]["goodput"] == pytest.approx(40.0 / 96.5, abs=1e-4)
    assert by["crashed"]["status"] == "down"  # no job_end, silent for years (was "stopped")
    assert by["crashed"]["last_event"] == pytest.approx(T0 + 520)
    assert by["long"]["span_seconds"] == pytest.approx(200 * 0.11 + 4 * 0.2, abs=1e-4)
    reverse = CliRunner().invoke(main, ["jobs", str(store), "--json", "--sort", "job", "--reverse"])
    assert [r["job"] for r in json.loads(reverse.output)] == ["two-ranks", "long", "crashed"]
    table = CliRunner().invoke(main, ["jobs", str(store)], env={"COLUMNS": "80"})
    assert table.exit_code == 0
    lines = table.output.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert any(line.split()[:2] == ["crashed", "down"] for line in lines)
    assert "…" not in table.output


def test_compare_two_jobs(tmp_path: Path) -> None:
    store = make_store(tmp_path / "store")
    result = CliRunner().invoke(
        main, ["compare", "--store", str(store), "two-ranks", "long", "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["a"]["job"] == "two-ranks" and doc["b"]["job"] == "long"
    assert doc["goodput_difference"] == pytest.approx(doc["b"]["goodput"] - doc["a"]["goodput"])
    assert doc["buckets"]["recovery"]["b_seconds"] == 0.0
    assert doc["buckets"]["recovery"]["a_seconds"] == pytest.approx(20.0)
    assert doc["buckets"]["data_loading"]["fraction_difference"] > 0
    text = CliRunner().invoke(
        main, ["compare", str(store / "two-ranks"), str(store / "long")], env={"COLUMNS": "100"}
    )
    assert text.exit_code == 0, text.output
    recovery = next(line for line in text.output.splitlines() if line.startswith(" recovery"))
    assert recovery.split()[-2:] == ["-20.7", "pp"]  # 20 s of 96.5 s (the last job_end)


def test_jobs_and_compare_print_log_names_inert(tmp_path: Path) -> None:
    evil = "evil\x1b[2J\x1b]0;owned\x07[bold]x[/bold]"
    root = tmp_path / "store"
    tl = Timeline(evil, start=T0)
    tl.emit("job_start")
    tl.steps(6, 1.0, first=1)
    tl.emit("job_end", status="completed\x1b[31m")
    events_to_jsonl(root / safe_job_dir(evil) / "0" / "h-0-1.jsonl", tl.events)
    write_long_job(root, 20)
    out = CliRunner().invoke(main, ["jobs", str(root)], env={"COLUMNS": "200"}).output
    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b[2J\\x1b]0;owned\\x07[bold]x[/bold]" in out
    assert "completed\\x1b[31m" in out
    out = (
        CliRunner()
        .invoke(main, ["compare", "--store", str(root), evil, "long"], env={"COLUMNS": "200"})
        .output
    )
    assert "\x1b" not in out
    assert "[bold]x[/bold]" in out


def test_export_and_compare_say_the_logs_diagnostics_on_stderr(tmp_path: Path) -> None:
    # A job with a malformed line and a line of control characters: the files written and
    # the comparison show no diagnostics, so the command says them on stderr, inert.
    root = tmp_path / "store"
    write_long_job(root, 20)
    (stream,) = (root / "long").rglob("*.jsonl")
    with stream.open("a") as f:
        f.write('{"not json\x1b[2J\n')
        f.write("\x1b]0;owned\x07\n")
    runner = CliRunner()
    for args in (
        ["export", "csv", str(root / "long"), str(tmp_path / "csv")],
        ["export", "trace", str(root / "long"), str(tmp_path / "trace.json")],
        ["compare", str(root / "long"), str(root / "long")],
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        err = result.stderr
        head = f"badput {' '.join(args[:2]) if args[0] == 'export' else 'compare'}: 2 diagnostics"
        assert head in err, err
        assert err.count("[malformed_line]") == (4 if args[0] == "compare" else 2), err
        assert "\x1b" not in err and "\x07" not in err
        assert str(stream) in err  # where: the file and its line


def test_export_of_a_clean_log_says_nothing_on_stderr(tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_long_job(root, 20)
    result = CliRunner().invoke(main, ["export", "csv", str(root / "long"), str(tmp_path / "c")])
    assert result.exit_code == 0
    assert "diagnostic" not in result.output
