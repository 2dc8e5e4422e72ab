"""``bench/bench_archive.py``'s job writer makes the job it claims (issue 38's ranks x steps):
every rank's steps and loads, in one file or one per rank, read back as such, from the JSON
lines and from the archive alike. (The bench's figures are measured by the bench, not here.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from badput.analysis import LiveJob
from badput.events import Event
from badput.formats.codec import decode_block, encode_lines

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_archive import JOB, job_files, write_job
from bench_shapes import write_steps

RANKS, STEPS = 3, 50


def _lines(paths: list[Path]) -> list[bytes]:
    return [line for path in paths for line in path.read_bytes().splitlines(keepends=True)]


def test_one_rank_is_the_dataload_job_of_before(tmp_path: Path) -> None:
    write_job(tmp_path / "new", STEPS)
    write_steps(tmp_path / "old", JOB, STEPS, per_attempt=False)
    (new,) = job_files(tmp_path / "new", 1, "one-file")
    assert new.read_bytes() == (tmp_path / "old" / JOB / "all" / "h-0-0.jsonl").read_bytes()
    # rank 0 of many ranks writes those very lines, in both layouts
    for layout in ("one-file", "per-rank"):
        write_job(tmp_path / layout, STEPS, RANKS, layout)
        lines = _lines(job_files(tmp_path / layout, RANKS, layout))
        assert [x for x in lines if b'"rank":0,' in x or x.endswith(b'"rank":0}\n')] == (
            new.read_bytes().splitlines(keepends=True)
        )


def test_both_layouts_hold_the_same_lines_the_shared_file_in_time_order(tmp_path: Path) -> None:
    files = {}
    for layout in ("one-file", "per-rank"):
        write_job(tmp_path / layout, STEPS, RANKS, layout)
        files[layout] = job_files(tmp_path / layout, RANKS, layout)
        assert sorted((tmp_path / layout).rglob("*.jsonl")) == sorted(files[layout])
    shared = _lines(files["one-file"])
    assert sorted(shared) == sorted(_lines(files["per-rank"]))
    assert len(shared) == RANKS * (4 * STEPS + 2)
    events = decode_block(b"".join(shared)) or []
    assert all(isinstance(e, Event) for e in events), events
    assert encode_lines(events) == b"".join(shared)  # type: ignore[arg-type]  # the codec's
    times = [e.ts for e in events]
    assert times == sorted(times)
    # the ranks' step k lines side by side, and each rank's own lines in its order
    assert {e.rank for e in events[4 * RANKS : 8 * RANKS]} == set(range(RANKS))
    for r, path in enumerate(files["per-rank"]):
        assert [x for x in shared if b'"rank":%d' % r in x] == _lines([path])


@pytest.mark.parametrize("layout", ["one-file", "per-rank"])
def test_the_report_counts_every_rank_and_the_archive_agrees(tmp_path: Path, layout: str) -> None:
    pytest.importorskip("pyarrow")
    from badput.report import to_json
    from badput.store import compact, open_source

    write_job(tmp_path, STEPS, RANKS, layout)
    live = LiveJob(tmp_path / JOB, parallel=False)
    live.update()
    assert live.accountant.n_events == RANKS * (4 * STEPS + 2)
    report = live.report(final=True)
    assert report.steps.kept == STEPS
    views = [(v.rank, v.steps, v.first_step, v.last_step) for v in report.ranks]
    assert views == [(r, STEPS, 1, STEPS) for r in range(RANKS)]
    # realistic, not identical ranks: each its own loads and step times
    assert len({round(v.data_loading_seconds, 6) for v in report.ranks}) == RANKS
    jsonl = to_json(live.snapshot(final=True))

    compact(*open_source(str(tmp_path / JOB)))
    archived = LiveJob(tmp_path / JOB, parallel=False)
    archived.update()
    assert type(archived.store).__name__ == "ArchivedStore"
    assert archived.accountant.n_events == RANKS * (4 * STEPS + 2)
    assert to_json(archived.snapshot(final=True)) == jsonl
