"""A cold read shared among processes gives the same state as one process reading it all."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

from badput import analysis
from badput._codec import encode_line
from badput.engine._ingest import Ingestor
from badput.engine._intervals import IntervalMark
from badput.events import Event

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from make_big_job import JOB, write_job


def same(a: analysis.Report, b: analysis.Report) -> None:
    assert a.buckets == b.buckets
    assert a.overlapped == b.overlapped
    assert (a.steps, a.ideal_step_time, a.at_risk_seconds) == (
        b.steps,
        b.ideal_step_time,
        b.at_risk_seconds,
    )
    assert a.attempts == b.attempts
    assert [(d.code, d.file, d.line) for d in a.diagnostics] == [
        (d.code, d.file, d.line) for d in b.diagnostics
    ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork-based workers: Linux only")
def test_parallel_cold_read_equals_sequential_and_live_updates_continue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_job(tmp_path, 20_000, restarts=3, finished=False)
    # a malformed line in the second file: its diagnostic must keep its file and line
    second = sorted((tmp_path / JOB).rglob("*.jsonl"))[1]
    with second.open("ab") as fh:
        fh.write(b'{"ts": "not a number"}\n')
    monkeypatch.setattr(analysis, "PARALLEL_MIN_BYTES", 0)
    plan = analysis._parallel_plan(analysis.JsonlStore(tmp_path), JOB, 2)
    assert plan is not None
    # four files of about the same size: two per worker, in file order
    assert [len(group) for group in plan[0]] == [2, 2]

    sequential = analysis.LiveJob(tmp_path, JOB, parallel=False)
    parallel = analysis.LiveJob(tmp_path, JOB, parallel=True)
    n_seq, n_par = sequential.update(), parallel.update()
    assert n_seq == n_par > 40_000
    same(sequential.report(), parallel.report())
    assert any(
        d.code == "malformed_line" and d.file == str(second) for d in parallel.report().diagnostics
    )

    # Both keep following the job: new steps in the running attempt's file.
    last = sorted((tmp_path / JOB / "3").glob("*.jsonl"))[0]
    ts = (parallel.accountant.last_event_ts or 0.0) + 0.1
    with last.open("ab") as fh:
        for i in range(5):
            fh.write(
                encode_line(
                    Event(ts=ts + i, kind="step_start", job=JOB, attempt=3, rank=0, step=30_000 + i)
                )
            )
    assert sequential.update() == parallel.update() == 5
    same(sequential.report(), parallel.report())


def test_plan_balances_files_whose_sizes_are_nearly_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three files just under a quarter of the bytes and a last one just over: 2 + 2, not 3 + 1."""
    monkeypatch.setattr(analysis, "PARALLEL_MIN_BYTES", 0)
    for attempt, size in enumerate((996, 998, 998, 1025)):
        path = tmp_path / JOB / str(attempt) / "h-0-1.jsonl"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x" * (size - 1) + b"\n")
    plan = analysis._parallel_plan(analysis.JsonlStore(tmp_path), JOB, 2)
    assert plan is not None
    groups, sizes = plan
    assert groups == [["0/h-0-1.jsonl", "1/h-0-1.jsonl"], ["2/h-0-1.jsonl", "3/h-0-1.jsonl"]]
    assert sizes["3/h-0-1.jsonl"] == 1025


def test_worker_state_crosses_a_pickle_and_merges_with_its_codes_mapped() -> None:
    """What a parallel read's worker sends: mark columns (bucket and source as codes into
    its own tables), which the parent maps into its tables when it merges."""
    events = [
        Event(ts=5.0, kind="data_loading_start", job=JOB, attempt=2, rank=3, blocking=False),
        Event(ts=4.5, kind="custom_end", job=JOB, attempt=2, rank=3, name="eval"),
        Event(ts=6.25, kind="checkpoint_save_start", job=JOB, attempt=2, rank=3, step=4),
    ]
    worker = Ingestor(JOB, first_seq=1 << 40)
    worker.ingest(events, "2/h-3-2.jsonl", 7)
    back = pickle.loads(pickle.dumps(worker))
    parent = Ingestor(JOB)
    parent.bucket_code("compile")  # the parent's table already differs from the worker's
    parent.absorb(back)
    marks = parent.streams[("2", 3)].marks.columns()
    got = marks.objects(parent.bucket_names, parent.source_names)
    assert got == [
        IntervalMark(4.5, (1 << 40) + 2, "custom:eval", False, True, "2/h-3-2.jsonl", 8),
        IntervalMark(5.0, (1 << 40) + 1, "data_loading", True, False, "2/h-3-2.jsonl", 7),
        IntervalMark(6.25, (1 << 40) + 3, "checkpoint_save", True, True, "2/h-3-2.jsonl", 9),
    ]
    assert parent.streams[("2", 3)].marks.unsorted
