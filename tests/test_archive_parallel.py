"""A large job is compacted by two processes (a forked worker compacts the reads after the
middle one): the archive is the serial compaction's, row for row and column for column, with
the same metadata; a worker that fails leaves the parent to read on, with the same outcome."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from badput.runtime import shared_work
from badput.store import _archive, compact, open_source

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(autouse=True)
def _forks_whatever_ran_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forking is these tests' subject: a thread an earlier test left alive in this process
    (a framework's, in a run of the whole suite by one process) does not keep the worker
    from starting. That another thread alive does is tested below, on its own."""
    monkeypatch.setattr(shared_work, "fork_safe", lambda: True)


def _write_job(job_dir: Path, seed: int) -> None:
    """Three writers' files of a few MB (malformed and blank lines, fields schema v1 lacks,
    a torn last line) and a small one."""
    rnd = random.Random(seed)
    for rank, lines in ((0, 30_000), (1, 25_000), (2, 40)):
        out = []
        for i in range(lines):
            kind = ("step_start", "data_loading_start", "data_loading_end", "step_end")[i % 4]
            event: dict[str, Any] = {"ts": 1.7e9 + i / 8, "kind": kind, "job": "p", "rank": rank}
            if kind.startswith("step"):
                event["step"] = i // 4
            if rnd.random() < 0.001:
                event["newer"] = {"x": [rnd.random()]}
            line = json.dumps(event)
            if rnd.random() < 0.0005:
                line = rnd.choice(["", "{not json", '{"ts": 1, "kind": "step_end", "job": "p"}'])
            out.append(line)
        data = "\n".join(out) + "\n" + ('{"ts": 1.8e9, "kind": "step_' if rank == 1 else "")
        path = job_dir / "0" / f"h-{rank}-1.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data)


def _archive_of(job_dir: Path) -> tuple[Any, bytes]:
    done = compact(*open_source(job_dir))
    table = pq.read_table(done.path)
    meta = pq.read_metadata(done.path).metadata[b"badput.archive"]
    groups = [pq.ParquetFile(done.path).metadata.row_group(i).num_rows for i in range(3)]
    done.path.unlink()
    return table, meta + json.dumps(groups).encode()


def _same(a: Any, b: Any) -> None:
    assert a.column_names == b.column_names
    for name in a.column_names:
        x, y = a.column(name), b.column(name)
        if pa.types.is_dictionary(x.type):
            x, y = x.cast(pa.string()), y.cast(pa.string())
        assert x.equals(y), name


@pytest.mark.parametrize("worker_fails", [False, True])
def test_a_parallel_compaction_is_the_serial_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_fails: bool
) -> None:
    monkeypatch.setattr(shared_work, "idle_helpers", lambda cores: 1)  # (whatever the load)
    monkeypatch.setattr(_archive, "_SLICE_BYTES", 1 << 20)
    monkeypatch.setattr(_archive, "_PARALLEL_BYTES", 2 << 20)
    job_dir = tmp_path / "p"
    _write_job(job_dir, seed=7)
    started: list[Any] = []
    start = _archive._start_worker
    monkeypatch.setattr(_archive, "_start_worker", lambda *a: started.append(a) or start(*a))
    if worker_fails:  # (the forked worker runs this module's function as it is now)
        monkeypatch.setattr(_archive, "_Took", None)
    parallel, parallel_meta = _archive_of(job_dir)
    assert len(started) == 1
    monkeypatch.setattr(_archive, "_halfway", lambda files, job: None)
    serial, serial_meta = _archive_of(job_dir)
    assert len(started) == 1
    assert parallel.num_rows == serial.num_rows > 55_000  # (blank lines: counted, no row)
    _same(parallel, serial)
    assert parallel_meta == serial_meta
    assert json.loads(serial_meta.split(b"}[")[0] + b"}")["unread"][0]["code"] == "torn_line"
    assert not list(job_dir.glob("*.tmp"))  # the worker's part is gone


def test_no_worker_while_another_thread_is_alive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork copies the locks other threads hold: with one alive, one process compacts."""
    monkeypatch.undo()  # (the real fork_safe)
    monkeypatch.setattr(shared_work, "idle_helpers", lambda cores: 1)
    monkeypatch.setattr(_archive, "_SLICE_BYTES", 1 << 20)
    monkeypatch.setattr(_archive, "_PARALLEL_BYTES", 2 << 20)
    _write_job(tmp_path / "p", seed=3)
    stop = threading.Event()
    alive = threading.Thread(target=stop.wait, daemon=True)
    alive.start()
    try:
        assert _archive._halfway(*open_source(tmp_path / "p")) is None
    finally:
        stop.set()
        alive.join()


def test_no_worker_without_an_idle_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker on a busy core only adds work: the job is compacted by one process."""
    monkeypatch.setattr(shared_work, "idle_helpers", lambda cores: 0)
    monkeypatch.setattr(_archive, "_SLICE_BYTES", 1 << 20)
    monkeypatch.setattr(_archive, "_PARALLEL_BYTES", 2 << 20)
    _write_job(tmp_path / "p", seed=3)
    assert _archive._halfway(*open_source(tmp_path / "p")) is None
    monkeypatch.setattr(shared_work, "idle_helpers", lambda cores: 1)
    assert _archive._halfway(*open_source(tmp_path / "p")) is not None
