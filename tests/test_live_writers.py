"""A live job whose rank is written by several processes, each its own file, written at
different moments: the trainer's file at once, its two data loaders' later (what a monitor
reads while they run). Every look gives the cold report of what was written, and the late
marks are taken from an earlier pairing and gap point, not by unsealing rows."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest

from _spy import spy
from badput.analysis import LiveJob
from badput.engine import _rank_derive, _rank_settle, _sealing, _steps
from badput.report import to_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from make_big_job import JOB, write_job

NOW = 1_732_000_000.0 + 1e7  # every report is asked as of a time after the job's events


def _report(root: Path, live: LiveJob | None = None) -> dict[str, object]:
    job = live if live is not None else LiveJob(root, JOB, parallel=False)
    job.update()
    out = json.loads(to_json(job.report(now=NOW)))
    out.pop("diagnostics")  # (what a read noticed on the way: torn tails at its moments)
    return out


def test_a_live_rank_whose_loaders_are_read_late_reports_as_a_cold_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_steps, "SEAL_MIN_TAIL", 64)  # the running attempt sealed as it runs
    src, dst = tmp_path / "src", tmp_path / "live"
    write_job(src, 3_000, restarts=1, finished=False, data_loading=True, loaders=2)
    files = sorted((src / JOB).rglob("*.jsonl"))
    lines = {f: f.read_bytes().splitlines(keepends=True) for f in files}
    times = {f: [json.loads(x)["ts"] for x in lines[f]] for f in files}
    # job seconds between two writes of each file: the trainer's, then each loader's
    every = {
        f: 11.5 if f.stem.endswith("-l1") else 5.0 if f.stem.endswith("-l0") else 0.5 for f in files
    }
    for f in files:
        (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
        (dst / f.relative_to(src)).write_bytes(b"")
    live = LiveJob(dst, JOB, parallel=False)
    watched = contextlib.ExitStack()
    rewinds = watched.enter_context(spy(_rank_settle, "_rewind"))
    from_points = watched.enter_context(spy(_rank_derive, "_derive_from_point"))
    stale = watched.enter_context(spy(_sealing, "_stale"))
    pos = dict.fromkeys(files, 0)
    written = dict.fromkeys(files, -1e18)
    t = min(min(v) for v in times.values())
    looks = 0
    while any(pos[f] < len(lines[f]) for f in files):
        t += 10.0  # a look every 10 job seconds (100 steps)
        for f in files:
            if t - written[f] < every[f]:
                continue
            written[f] = t
            end = pos[f]
            while end < len(lines[f]) and times[f][end] <= t:
                end += 1
            with (dst / f.relative_to(src)).open("ab") as fh:
                fh.write(b"".join(lines[f][pos[f] : end]))
            pos[f] = end
        looks += 1
        got = _report(dst, live)
        if looks % 4 == 0:
            assert got == _report(dst), f"look {looks}"
    assert _report(dst, live) == _report(dst)
    watched.close()
    # the second loader was late at about every other look: taken from earlier states
    assert sum(rewinds) > looks // 4
    assert sum(from_points) > looks // 4
    # rows unsealed once only: when the running attempt's second loader first wrote (a
    # writer not seen yet cannot hold sealing back); at every look after it otherwise
    assert sum(stale) <= 1
