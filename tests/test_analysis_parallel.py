"""A cold read shared among processes gives the same state as one process reading it all.

The read is cut where the serial reads stop (``read_stops``); this process reads slices
from the front, workers from the back. The block and slice sizes are lowered here so
that a log of a few hundred kilobytes has dozens of slices.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from badput import analysis
from badput.engine import Accountant, clock_continues
from badput.engine._ingest import Ingestor
from badput.engine._intervals import IntervalMark
from badput.events import Chunk, Event
from badput.formats.codec import decode_line, encode_line
from badput.report import to_json
from badput.runtime import shared_work
from badput.store import (
    Cursor,
    EventStore,
    JsonlStore,
    ReadResult,
    SingleFileStore,
    Unread,
    list_job,
)
from badput.store import _reading as store_reading

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_attempts import write_job as write_attempts
from bench_shapes import write_steps
from make_big_job import JOB, write_job

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="fork-based workers: Linux only"
)

SLICE = 20_000  # bytes a read takes (READ_SLICE_BYTES, lowered)


@pytest.fixture
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_reading, "READ_BLOCK", 4096)
    monkeypatch.setattr(store_reading, "_FIRST_BLOCK", 1024)
    monkeypatch.setattr(analysis, "READ_SLICE_BYTES", SLICE)
    monkeypatch.setattr(analysis, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(analysis, "PARALLEL_MIN_BYTES_PER_ATTEMPT", 0)


def workers(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(analysis, "_workers", lambda: n)


class SlowFront(JsonlStore):
    """Each read of the parent process waits a little, so the workers take slices too."""

    parent = os.getpid()

    def read(
        self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        if os.getpid() == self.parent:
            time.sleep(0.01)
        return super().read(job, cursor, max_bytes=max_bytes)


def same(a: analysis.Report, b: analysis.Report) -> None:
    assert a.buckets == b.buckets
    assert a.overlapped == b.overlapped
    assert (a.steps, a.ideal_step_time, a.at_risk_seconds) == (
        b.steps,
        b.ideal_step_time,
        b.at_risk_seconds,
    )
    assert a.attempts == b.attempts
    assert [(d.code, d.message, d.file, d.line) for d in a.diagnostics] == [
        (d.code, d.message, d.file, d.line) for d in b.diagnostics
    ]
    assert to_json(a) == to_json(b)  # everything else: per-rank view, timeline...


def cold(source: EventStore | Path, job: str | None, *, parallel: bool | None) -> analysis.LiveJob:
    live = analysis.LiveJob(source, job, parallel=parallel)
    live.n_read = live.update()  # type: ignore[attr-defined]
    return live


def shared_read(source: EventStore | Path, job: str | None) -> tuple[analysis.LiveJob, int, int]:
    """A parallel cold read: the job, the lines the shared part read, and how many slices
    the workers read and sent back."""
    live = analysis.LiveJob(source, job, parallel=True)
    received: list[int] = []
    wait = shared_work.wait_for

    def counting(out: object, got: dict[int, analysis._SliceRead], *args: object) -> None:
        wait(out, got, *args)  # type: ignore[arg-type]
        received[:] = [i for r in got.values() if r.ok for i in range(r.number, r.through + 1)]

    shared_work.wait_for = counting  # type: ignore[assignment]
    try:
        shared = live._cold_parallel()
    finally:
        shared_work.wait_for = wait  # type: ignore[assignment]
    assert shared is not None
    n, unread = shared
    if unread is None:  # some slices were left to the serial read: what update() does
        live.update()
    else:
        live._left(unread)
    return live, n, len(received)


def one_file_log(root: Path) -> tuple[Path, list[bytes]]:
    """3 attempts of 1,500 steps in one file (about 500 KB, 24 slices): a malformed line
    and a clock step back in its second half, and a torn last line."""
    write_steps(root, "o", 1_500, attempts=3, per_attempt=False)
    path = next(root.rglob("*.jsonl"))
    lines = path.read_bytes().split(b"\n")[:-1]
    k = len(lines) * 2 // 3
    lines.insert(k, b'{"ts": "not a number"}')
    back = lines[k + 7]
    assert b'"ts":1732' in back
    lines[k + 7] = back.replace(b'"ts":1732', b'"ts":1731', 1)  # 31.7 years back
    torn = lines.pop()
    path.write_bytes(b"\n".join(lines) + b"\n" + torn[:20])
    return path, [torn[20:] + b"\n"]


@linux_only
@pytest.mark.usefixtures("small_slices")
@pytest.mark.parametrize("n_workers", [2, 3, 4])
def test_one_file_is_split_and_gives_the_serial_report_diagnostics_and_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_workers: int
) -> None:
    path, rest_of_torn_line = one_file_log(tmp_path)
    workers(monkeypatch, n_workers)
    serial = cold(tmp_path, "o", parallel=False)
    parallel, n_shared, by_workers = shared_read(SlowFront(tmp_path), "o")
    assert by_workers >= 2  # the file was read by several processes
    assert n_shared == serial.n_read  # type: ignore[attr-defined]  # all of it, merged
    assert parallel._cursor == serial._cursor
    final = serial.report(final=True)
    same(final, parallel.report(final=True))
    where = {d.code: (d.file, d.line) for d in final.diagnostics}
    n_lines = path.read_bytes().count(b"\n")
    assert where["malformed_line"] == (str(path), n_lines * 2 // 3 + 1)
    assert where["clock_backwards"] == (str(path), n_lines * 2 // 3 + 8)
    assert where["torn_line"] == (str(path), n_lines + 1)

    # The torn line is completed and the job goes on: both continue from the same place.
    ts = (serial.accountant.last_event_ts or 0.0) + 1.0
    more = [encode_line(Event(ts=ts + i, kind="heartbeat", job="o", attempt=2)) for i in range(3)]
    with path.open("ab") as fh:
        fh.write(b"".join(rest_of_torn_line + more))
    assert serial.update() == parallel.update() == 4
    assert parallel._cursor == serial._cursor
    same(serial.report(final=True), parallel.report(final=True))


@linux_only
@pytest.mark.usefixtures("small_slices")
def test_the_memory_of_merged_parts_is_handed_back_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_file_log(tmp_path)
    workers(monkeypatch, 2)
    calls: list[int] = []
    monkeypatch.setattr(analysis, "give_back", lambda: calls.append(1))
    _live, _n, by_workers = shared_read(SlowFront(tmp_path), "o")
    assert by_workers >= 1
    assert calls == [1]  # after the merge, not per part
    cold(tmp_path, "o", parallel=False)
    assert calls == [1]  # a serial read merges nothing


@linux_only
@pytest.mark.usefixtures("small_slices")
def test_a_single_jsonl_source_is_split_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = one_file_log(tmp_path)
    workers(monkeypatch, 2)
    plan = analysis._parallel_plan(SingleFileStore(path, "o"), "o")
    assert plan is not None
    assert len(plan) > 10
    serial = cold(path, None, parallel=False)
    parallel = cold(path, None, parallel=True)
    assert parallel._cursor == serial._cursor
    same(serial.report(final=True), parallel.report(final=True))


@linux_only
@pytest.mark.usefixtures("small_slices")
def test_several_files_split_across_and_within_files_and_live_updates_continue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_job(tmp_path, 2_000, restarts=3, finished=False)
    second = sorted((tmp_path / JOB).rglob("*.jsonl"))[1]
    with second.open("ab") as fh:
        fh.write(b'{"ts": "not a number"}\n')
    workers(monkeypatch, 3)
    sequential = cold(tmp_path, JOB, parallel=False)
    parallel, _, by_workers = shared_read(SlowFront(tmp_path), JOB)
    assert by_workers >= 1
    assert sequential.accountant.n_events == parallel.accountant.n_events > 4_000
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


@linux_only
@pytest.mark.usefixtures("small_slices")
@pytest.mark.parametrize("run", [1, 32])
def test_a_clock_step_back_right_at_a_cut_is_read_serially_from_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: int
) -> None:
    """A worker whose result starts there cannot know the file's newest time before it:
    its slices and the ones after them are left to the serial read, which flags the line.
    Inside a worker's run of slices (``run`` 32: the worker takes every slice not taken
    yet at once), the run's own read flags it, as the serial read does, and nothing is
    read again."""
    monkeypatch.setattr(analysis, "_RUN_MOST", run)  # (the forked workers see these)
    monkeypatch.setattr(analysis, "_RUN_SHARE", 1)
    write_steps(tmp_path, "o", 1_500, attempts=1, per_attempt=False)
    path = next(tmp_path.rglob("*.jsonl"))
    store = JsonlStore(tmp_path)
    plan = analysis._parallel_plan(store, "o")
    assert plan is not None
    cut = plan[len(plan) - 3]  # a slice the workers take (they start from the back)
    data = bytearray(path.read_bytes())
    at = data.index(b'"ts":1732', cut.offset)
    assert at < cut.offset + 10
    data[at + 8] = ord("1")  # same length: the slices stay where they were
    path.write_bytes(bytes(data))
    workers(monkeypatch, 2)
    serial = cold(tmp_path, "o", parallel=False)
    parallel, n_shared, by_workers = shared_read(SlowFront(tmp_path), "o")
    assert by_workers >= 3
    if run == 1:
        assert n_shared < serial.n_read  # type: ignore[attr-defined]  # the rest: serially
    else:
        assert n_shared == serial.n_read  # type: ignore[attr-defined]
    assert parallel._cursor == serial._cursor
    same(serial.report(final=True), parallel.report(final=True))
    before = store.count_lines("o", "all/h-0-0.jsonl", cut.offset)  # the plan leaves it
    for read in (serial, parallel):
        flagged = [d for d in read.report().diagnostics if d.code == "clock_backwards"]
        assert [(d.file, d.line) for d in flagged] == [(str(path), before + 1)]


@given(
    n=st.integers(0, 300),
    share=st.integers(1, 16),
    most=st.integers(1, 40),
    turns=st.lists(st.booleans(), max_size=400),
)
def test_claims_from_both_ends_take_every_slice_once_in_runs_that_shorten(
    n: int, share: int, most: int, turns: list[bool]
) -> None:
    """The parent takes slices one at a time from the front, a worker runs of them from the
    back (``turns``: who claims next, then the worker alone): every slice is taken once;
    a run is consecutive, just before the one before it, at most ``most`` long and at most
    a ``share``-th of the slices left (one at least)."""
    claims = multiprocessing.get_context("fork").Array("q", [0, n])
    front: list[int] = []
    runs: list[range] = []
    for parent in [*turns, *[False] * (n + 1)]:
        if parent:
            i = shared_work.claim(claims, front=True)
            if i is not None:
                front.append(i)
            continue
        left = claims[1] - claims[0]
        run = shared_work.claim_run(claims, share=share, most=most)
        if run is None:
            assert left <= 0
            continue
        assert run.stop == (runs[-1].start if runs else n)
        assert 1 <= len(run) <= max(1, min(most, left // share))
        runs.append(run)
    assert front == list(range(len(front)))
    assert sorted(front + [i for run in runs for i in run]) == list(range(n))


def test_merged_parts_keep_each_files_newest_time_as_one_read_does() -> None:
    """What a worker's part is checked against for a clock step back at its start: the
    newest time of its file read before it, whichever part held that time."""
    first, second = Accountant("o"), Accountant("o")

    def steps(*times: float) -> list[Event]:
        return [Event(ts=t, kind="step_start", job="o", step=k) for k, t in enumerate(times)]

    first.ingest([Chunk("a.jsonl", 1, steps(1.0, 9.0)), Chunk("b.jsonl", 1, steps(2.0))])
    second.ingest([Chunk("a.jsonl", 3, steps(8.5)), Chunk("c.jsonl", 1, steps(3.0))])
    assert first.newest_in("a.jsonl") == 9.0
    assert first.newest_in("c.jsonl") is None
    first.merge(second)
    assert [first.newest_in(f) for f in ("a.jsonl", "b.jsonl", "c.jsonl")] == [9.0, 2.0, 3.0]


@pytest.mark.usefixtures("small_slices")
def test_a_worker_whose_slice_no_longer_ends_where_planned_says_so(tmp_path: Path) -> None:
    path, _ = one_file_log(tmp_path)
    store = JsonlStore(tmp_path)
    plan = analysis._parallel_plan(store, "o")
    assert plan is not None
    s = plan[3]
    good = analysis._read_slice(store, "o", s)
    assert good.ok
    assert good.n > 0
    assert s.end is not None
    # its lines counted from the slice's start; the parent, knowing those before, moves them
    assert good.relative
    between = store_reading._count_newlines(path, s.end, start=s.offset)
    assert good.offsets["all/h-0-0.jsonl"] == (s.end, between)
    before = store_reading._count_newlines(path, s.offset)
    torn = Unread("torn_line", s.first_source, between + 1, 12)  # as a last slice's might be
    elsewhere = Unread("torn_line", "other.jsonl", 3, 12)
    good = good._replace(unread=[torn, elsewhere])
    placed = analysis._placed(good, s, {"all/h-0-0.jsonl": (s.offset, before)})
    assert placed is not None
    assert placed.offsets["all/h-0-0.jsonl"] == (s.end, before + between)
    assert placed.unread == [dataclasses.replace(torn, line=before + between + 1), elsewhere]
    assert not placed.relative
    # read so far up to another place than the slice's start: not placed (read serially)
    assert analysis._placed(good, s, {"all/h-0-0.jsonl": (s.offset - 1, before)}) is None
    data = path.read_bytes()  # the file is rewritten with one line longer before the cut
    cut = data.index(b"\n", s.offset) + 1
    path.write_bytes(data[:cut] + b"\n" + data[cut:])
    assert not analysis._read_slice(store, "o", s).ok


def _die(*args: object) -> analysis._SliceRead:
    os._exit(9)  # a worker killed mid-read (out of memory, say)


def _fail(*args: object) -> analysis._SliceRead:
    raise OSError("disk gone")


@linux_only
@pytest.mark.usefixtures("small_slices")
@pytest.mark.parametrize("how", [_die, _fail])
def test_workers_that_die_or_fail_leave_their_slices_to_the_serial_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: object
) -> None:
    one_file_log(tmp_path)
    workers(monkeypatch, 3)
    serial = cold(tmp_path, "o", parallel=False)
    monkeypatch.setattr(analysis, "_read_slice", how)  # in the workers only: the parent reads
    started = time.monotonic()
    parallel, n_shared, by_workers = shared_read(SlowFront(tmp_path), "o")
    assert time.monotonic() - started < 30.0
    assert by_workers == 0
    assert n_shared < serial.n_read  # type: ignore[attr-defined]  # the rest: serially
    assert parallel._cursor == serial._cursor
    same(serial.report(final=True), parallel.report(final=True))


class FailingFront(SlowFront):
    """The parent's first read fails (a disk error, an interrupt): the workers are started
    before it, so they are certainly running when it fails. (Failing a later read made the
    test depend on how many slices the workers took first: on a quiet machine the parent
    could finish its share in fewer reads, and nothing failed.) Each worker's read waits,
    so the workers cannot take every slice while the parent is still starting them (a
    large parent forks slowly) and the parent's read always comes."""

    def read(
        self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        if os.getpid() == self.parent:
            raise OSError("disk gone")
        time.sleep(0.5)
        return super().read(job, cursor, max_bytes=max_bytes)


@linux_only
@pytest.mark.usefixtures("small_slices")
def test_a_failing_parent_stops_its_workers_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_file_log(tmp_path)
    workers(monkeypatch, 3)
    started = time.monotonic()
    with pytest.raises(OSError, match="disk gone"):
        cold(FailingFront(tmp_path), "o", parallel=True)
    assert time.monotonic() - started < 4.0  # not the 5 s a join waits before killing
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize(
    ("head", "newest_before", "continues"),
    [
        ([10.0, 11.0], 10.0, True),  # reaches the newest time at once
        ([9.9995, 10.5], 10.0, True),  # within the tolerance, then past it
        ([9.0, 10.5], 10.0, False),  # a step back of 1 s at the cut
        ([9.9995, 9.9996], 10.0, False),  # never reaches it: undecided
        ([], 10.0, False),
        ([1.0], -float("inf"), True),
    ],
)
def test_clock_continues(head: list[float], newest_before: float, continues: bool) -> None:
    assert clock_continues(head, newest_before) is continues


@pytest.mark.parametrize(("load", "helpers"), [(0.0, 1), (0.4, 1), (0.6, 0), (1.9, 0)])
def test_without_a_runnable_count_workers_start_on_cores_idle_over_a_minute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, load: float, helpers: int
) -> None:
    workers(monkeypatch, 2)
    monkeypatch.setattr(shared_work, "_LOADAVG", str(tmp_path / "no-such-file"))
    monkeypatch.setattr(shared_work.os, "getloadavg", lambda: (load, load, load))
    assert shared_work.runnable_others() is None
    assert shared_work.idle_helpers(analysis._workers()) == helpers


@pytest.mark.parametrize(
    ("runnable", "cores", "helpers"),
    [
        (["1/80"], 2, 1),  # only this process: the other core is idle
        (["2/80"], 2, 0),  # another task runs: no idle core of two
        (["2/80", "1/80", "1/80", "1/80", "1/80"], 2, 1),  # one that passed (a shell)
        (["2/80", "2/80", "1/80", "2/80", "1/80"], 2, 0),  # one that is there most of the time
        (["1/80"], 4, 3),
        (["3/80"], 4, 1),
        (["9/80"], 4, 0),
    ],
)
def test_workers_start_only_on_cores_idle_now(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, runnable: list[str], cores: int, helpers: int
) -> None:
    """The load average of the last minute is not looked at (it counts this command's own
    earlier runs: a report of 4 s leaves 0.5-0.8 for a minute). This process's own
    running threads (one here: the test's) are not counted."""
    workers(monkeypatch, cores)
    looks = iter(runnable * 5)
    path = tmp_path / "loadavg"

    def next_look(_seconds: float) -> None:  # the looks, 2 ms apart
        path.write_text(f"0.90 0.80 0.70 {next(looks)} 4321\n")

    next_look(0.0)
    monkeypatch.setattr(shared_work, "_LOADAVG", str(path))
    monkeypatch.setattr(shared_work, "own_running", lambda: 1)
    monkeypatch.setattr(shared_work.time, "sleep", next_look)
    monkeypatch.setattr(shared_work.os, "getloadavg", lambda: (1.9, 1.9, 1.9))  # not used
    assert shared_work.idle_helpers(analysis._workers()) == helpers


def test_own_running_threads_are_not_taken_for_other_tasks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """numpy's BLAS pool spins a moment after the import: two of ours running, two
    runnable in all: no other task."""
    path = tmp_path / "loadavg"
    path.write_text("0.90 0.80 0.70 2/80 4321\n")
    monkeypatch.setattr(shared_work, "_LOADAVG", str(path))
    monkeypatch.setattr(shared_work, "own_running", lambda: 2)
    assert shared_work.runnable_others() == 0


def test_own_running_counts_a_native_thread_of_ours_that_runs() -> None:
    """A thread hashing without the GIL is running as this one reads: both are counted
    (the BLAS pool numpy starts is such a thread). Fails if only Python's view of the
    threads, or only this thread, is counted."""
    import hashlib
    import threading

    data = b"x" * (8 << 20)
    stop = threading.Event()
    started = threading.Event()

    def hash_until_stopped() -> None:
        started.set()
        while not stop.is_set():
            hashlib.sha256(data).digest()  # the GIL is released while it hashes

    worker = threading.Thread(target=hash_until_stopped, daemon=True)
    worker.start()
    try:
        started.wait(5.0)
        seen = max(shared_work.own_running() for _ in range(50))
    finally:
        stop.set()
        worker.join(5.0)
    assert seen >= 2
    assert shared_work.own_running() >= 1  # this thread, reading


def test_a_garbled_runnable_count_falls_back_to_the_load_average(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    workers(monkeypatch, 2)
    path = tmp_path / "loadavg"
    path.write_text("0.90 0.80\n")
    monkeypatch.setattr(shared_work, "_LOADAVG", str(path))
    monkeypatch.setattr(shared_work.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert shared_work.runnable_others() is None
    assert shared_work.idle_helpers(analysis._workers()) == 1


def test_a_small_log_is_never_shared(tmp_path: Path) -> None:
    """Below PARALLEL_MIN_BYTES (32 MiB) forking costs more than it saves."""
    write_steps(tmp_path, "o", 100, per_attempt=False)
    assert analysis._parallel_plan(JsonlStore(tmp_path), "o") is None


@pytest.mark.usefixtures("small_slices")
def test_many_small_attempts_are_not_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a worker sends back grows with the attempts it read: a job of attempts smaller
    than PARALLEL_MIN_BYTES_PER_ATTEMPT is read by one process, however large."""
    write_attempts(tmp_path, 40, id_less=False)  # 40 attempts of about 5 KB
    write_steps(tmp_path, "o", 2_000, attempts=2, per_attempt=True)  # 2 of about 200 KB
    monkeypatch.setattr(analysis, "PARALLEL_MIN_BYTES_PER_ATTEMPT", 100_000)
    store = JsonlStore(tmp_path)
    assert analysis._parallel_plan(store, "many") is None
    assert analysis._parallel_plan(store, "o") is not None


@linux_only
@pytest.mark.usefixtures("small_slices")
def test_small_files_planned_by_size_torn_or_not_give_the_serial_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan takes a small file as read whole from its size. A file whose writer died
    mid-line (or left a mapped file's NUL tail) is not: the slices from there are read
    serially, and the result is the serial read's."""
    write_attempts(tmp_path, 120, id_less=False)
    store = JsonlStore(tmp_path)
    names = store.streams("many")
    for k, tail in ((30, b'{"ts": 17'), (70, b"\0" * 300)):
        path = tmp_path / "many" / names[k]
        path.write_bytes(path.read_bytes() + tail)
    workers(monkeypatch, 2)
    planned = analysis._parallel_plan(store, "many")
    assert planned is not None
    assert len(planned) > 20
    serial = cold(tmp_path, "many", parallel=False)
    parallel, _n, _sent = shared_read(SlowFront(tmp_path), "many")
    assert parallel._cursor == serial._cursor
    assert parallel._unread == serial._unread
    same(serial.report(final=True), parallel.report(final=True))
    intact = JsonlStore(tmp_path / "intact")
    write_attempts(tmp_path / "intact", 120, id_less=False)
    files = intact.files("many")
    assert intact.read_stops("many", SLICE, files, by_size=True) == intact.read_stops(
        "many", SLICE, files
    )


LINE = st.one_of(
    st.binary(min_size=1, max_size=60).map(lambda b: b.replace(b"\n", b"x")),
    st.just(b""),  # a blank line
    st.just(b"y" * 5_000),  # longer than a block
)


@settings(max_examples=100, deadline=None)
@given(
    files=st.lists(
        st.tuples(st.lists(LINE, max_size=40), st.binary(max_size=30), st.integers(0, 2_000)),
        min_size=1,
        max_size=3,
    ),
    block=st.integers(16, 300),
    first=st.integers(4, 64),
    slice_bytes=st.integers(1, 3_000),
    probe=st.integers(1, 80) | st.just(64 * 1024),
)
# A file of a byte order mark alone: the serial read consumes those 3 bytes (found by
# hypothesis; the stops counted nothing read in that file, and cut the next one elsewhere).
@example(
    files=[([], b"\xef\xbb\xbf", 0), ([b"\x00"], b"", 0)],
    block=16,
    first=4,
    slice_bytes=1,
    probe=64 * 1024,
)
def test_read_stops_are_where_the_serial_reads_stop(  # noqa: PLR0917
    tmp_path_factory: pytest.TempPathFactory,
    files: list[tuple[list[bytes], bytes, int]],
    block: int,
    first: int,
    slice_bytes: int,
    probe: int,
) -> None:
    """Whatever the lines, blank or longer than a block, a torn last line or a run of NULs
    at the end: the stops found from newlines alone are the cursors of the serial reads,
    and the lines counted up to each are the cursor's. ``probe``: how far past a block's
    end the serial reads look for the end of its last line (they read on to it)."""
    root = tmp_path_factory.mktemp("stops")
    for k, (lines, tail, nuls) in enumerate(files):
        path = root / "j" / f"{k}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(
            b"".join(line + b"\n" for line in lines) + tail.replace(b"\n", b"") + b"\0" * nuls
        )
    store = JsonlStore(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_reading, "READ_BLOCK", block)
        mp.setattr(store_reading, "_FIRST_BLOCK", first)
        mp.setattr(store_reading, "_PROBE", probe)
        paths = [p for _, p in store.files("j")]
        found = store_reading._stops(paths, slice_bytes)
        with_lines = store.read_stops("j", slice_bytes)
        cursor: Cursor | None = None
        serial = []
        while True:
            result = store.read("j", cursor, max_bytes=slice_bytes)
            if cursor is not None and result.cursor.offsets == cursor.offsets:
                break
            cursor = result.cursor
            serial.append(cursor)
    # each read that used up its budget stops where read_stops says; the others read to
    # the end (the last one that finds something, if it did not use up its budget)
    assert len(found) in {len(serial), len(serial) - 1}
    assert len(with_lines) == len(found)
    for (i, offset), (name, at, lines), c in zip(found, with_lines, serial, strict=False):
        assert (name, at) == (store.files("j")[i][0], offset)
        assert c.offsets[name] == (offset, lines)
        assert all(c.offsets.get(n, (0, 0)) == (0, 0) for n, _ in store.files("j")[i + 1 :])
    # files their writers closed (each ends with its last line): their sizes say as much
    closed = all(not tail and not nuls for _lines, tail, nuls in files)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_reading, "READ_BLOCK", block)
        mp.setattr(store_reading, "_FIRST_BLOCK", first)
        mp.setattr(store_reading, "_PROBE", probe)
        by_size = store_reading._stops(paths, slice_bytes, by_size=True)
    if closed:
        assert by_size == found


EVENT_KINDS = ["step_start", "step_end", "data_loading_start", "data_loading_end", "heartbeat"]


@linux_only
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.integers(50, 400),
    jumps=st.lists(st.tuples(st.floats(0, 1), st.floats(-50.0, 50.0)), max_size=4),
    bad=st.lists(st.floats(0, 1), max_size=3),
    slice_bytes=st.integers(2_000, 20_000),
    n_workers=st.integers(2, 3),
)
def test_any_cut_of_a_random_log_gives_the_serial_report(  # noqa: PLR0917
    tmp_path_factory: pytest.TempPathFactory,
    steps: int,
    jumps: list[tuple[float, float]],
    bad: list[float],
    slice_bytes: int,
    n_workers: int,
) -> None:
    """A one-file log with clock jumps (forward or back, anywhere: at a cut or not),
    malformed lines and another job's events: the shared read equals the serial one."""
    root = tmp_path_factory.mktemp("random")
    write_steps(root, "r", steps, attempts=2, per_attempt=False)
    path = next(root.rglob("*.jsonl"))
    lines = path.read_bytes().split(b"\n")[:-1]
    for where, by in jumps:
        k = int(where * (len(lines) - 1))
        ev = decode_line(lines[k])
        lines[k] = encode_line(
            Event(ts=ev.ts + by, kind=ev.kind, job=ev.job, attempt=ev.attempt, step=ev.step)
        )[:-1]
    for where in bad:
        lines.insert(int(where * len(lines)), b'{"ts": 1, "kind": 7}')
    lines.insert(len(lines) // 2, encode_line(Event(ts=1.0, kind="heartbeat", job="other"))[:-1])
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_reading, "READ_BLOCK", 1024)
        mp.setattr(store_reading, "_FIRST_BLOCK", 256)
        mp.setattr(analysis, "READ_SLICE_BYTES", slice_bytes)
        mp.setattr(analysis, "PARALLEL_MIN_BYTES", 0)
        mp.setattr(analysis, "PARALLEL_MIN_BYTES_PER_ATTEMPT", 0)
        mp.setattr(analysis, "_workers", lambda: n_workers)
        serial = cold(root, "r", parallel=False)
        parallel = cold(SlowFront(root), "r", parallel=True)
    assert parallel._cursor == serial._cursor
    same(serial.report(final=True), parallel.report(final=True))


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
    parent.buckets.code("compile")  # the parent's table already differs from the worker's
    parent.absorb(back)
    marks = parent.streams[("2", 3)].marks.columns()
    got = marks.objects(parent.buckets.names, parent.sources.names)
    assert got == [
        IntervalMark(4.5, (1 << 40) + 2, "custom:eval", False, True, "2/h-3-2.jsonl", 8),
        IntervalMark(5.0, (1 << 40) + 1, "data_loading", True, False, "2/h-3-2.jsonl", 7),
        IntervalMark(6.25, (1 << 40) + 3, "checkpoint_save", True, True, "2/h-3-2.jsonl", 9),
    ]
    assert parent.streams[("2", 3)].marks.unsorted


def test_an_unknown_kind_in_two_parts_of_a_shared_read_is_reported_once() -> None:
    """A serial read reports an unknown kind where it first appears, once; merging the
    state of a later part that met it too must not report it again."""

    def part(first_seq: int, first_line: int) -> Ingestor:
        ing = Ingestor(JOB, first_seq=first_seq)
        events = [Event(ts=1.0 + first_line, kind="future_kind", job=JOB, attempt=0)] * 2
        ing.ingest(events, "0/h.jsonl", first_line)
        return ing

    merged = part(0, 1)
    merged.absorb(part(1 << 40, 101))
    [(_code, shown, _count)] = merged.diagnostics.listed()
    assert [(source, line) for _message, source, line in shown] == [("0/h.jsonl", 1)]
    assert merged.diagnostics.counts["unknown_kind"] == 1
    assert merged.unknown_kinds == {"future_kind": 4}


class CountingListings(SlowFront):
    """Counts the listings of the job (in this process)."""

    listings = 0

    def streams(self, job: str) -> list[str]:
        if os.getpid() == self.parent:
            CountingListings.listings += 1
        return super().streams(job)


@linux_only
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    attempts=st.integers(2, 25),
    torn=st.lists(st.integers(0, 24), max_size=3),
    bad=st.lists(st.tuples(st.integers(0, 24), st.floats(0, 1)), max_size=3),
    slice_bytes=st.integers(500, 8_000),
    mode=st.sampled_from([None, True]),
)
def test_a_job_of_many_files_gives_the_serial_report_whoever_reads_it(  # noqa: PLR0917
    tmp_path_factory: pytest.TempPathFactory,
    attempts: int,
    torn: list[int],
    bad: list[tuple[int, float]],
    slice_bytes: int,
    mode: bool | None,
) -> None:
    """One small file per attempt, some with a malformed line or a torn last line: read
    shared (forced, or ``auto`` with a core free) or not shared (``auto`` below the size
    that pays), the job is listed once, and the report, its diagnostics (file:line, torn
    lines included), the cursor and what was left unread are the serial read's."""
    root = tmp_path_factory.mktemp("many")
    write_attempts(root, attempts, id_less=False)
    paths = sorted((root / "many").rglob("*.jsonl"))
    for k, where in bad:
        path = paths[k % len(paths)]
        lines = path.read_bytes().split(b"\n")[:-1]
        lines.insert(int(where * len(lines)), b'{"ts": 1, "kind": 7}')
        path.write_bytes(b"\n".join(lines) + b"\n")
    for k in torn:
        with paths[k % len(paths)].open("ab") as fh:
            fh.write(b'{"ts": 1732000000.5, "kind": "heart')
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_reading, "READ_BLOCK", 1024)
        mp.setattr(store_reading, "_FIRST_BLOCK", 256)
        mp.setattr(analysis, "READ_SLICE_BYTES", slice_bytes)
        mp.setattr(analysis, "_workers", lambda: 2)
        mp.setattr(shared_work, "idle_helpers", lambda cores: 1)
        serial = cold(root, "many", parallel=False)
        mp.setattr(analysis, "PARALLEL_MIN_BYTES", 0)
        for per_attempt in (0, 1 << 20):  # shared, and too small a share of each attempt
            mp.setattr(analysis, "PARALLEL_MIN_BYTES_PER_ATTEMPT", per_attempt)
            CountingListings.listings = 0
            other = cold(CountingListings(root), "many", parallel=mode)
            assert CountingListings.listings == 1
            assert other._cursor == serial._cursor
            assert other._unread == serial._unread
            same(serial.report(final=True), other.report(final=True))
            # Listed ahead (what `badput report` has a helper do): not listed again, the same
            listed_again: list[str] = []
            real = JsonlStore.streams

            def counted(
                store: JsonlStore, job: str, listed: list[str] = listed_again, real: Any = real
            ) -> list[str]:
                listed.append(job)
                return list(real(store, job))

            for ahead_mode in (mode, False):
                listing = list_job(root, "many")
                mp.setattr(JsonlStore, "streams", counted)
                ahead = analysis.LiveJob(root, "many", parallel=ahead_mode, listing=listing)
                ahead.update()
                mp.setattr(JsonlStore, "streams", real)
                assert listed_again == []
                assert ahead._cursor == serial._cursor
                assert ahead._unread == serial._unread
                same(serial.report(final=True), ahead.report(final=True))
    if torn:
        assert any(d.code == "torn_line" for d in serial.report(final=True).diagnostics)


@linux_only
@pytest.mark.usefixtures("small_slices")
def test_planning_a_job_of_more_files_than_may_be_open_at_once(tmp_path: Path) -> None:
    """The stops of a job of thousands of attempt files are found one file at a time: the
    planning once held every file open and failed with "Too many open files"."""
    import resource

    write_attempts(tmp_path, 120, id_less=False)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 20, hard))
    try:
        plan = analysis._parallel_plan(JsonlStore(tmp_path), "many")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert plan is not None
    assert len(plan) > 20
    assert plan[-1].last == 119


def _no_counting(*args: object, **kwargs: object) -> int:
    raise AssertionError("a parallel read counts no lines")


@linux_only
@pytest.mark.usefixtures("small_slices")
@pytest.mark.parametrize("per_attempt", [False, True], ids=["one-file", "file-per-attempt"])
def test_a_worker_counts_no_lines_and_the_parent_numbers_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_attempt: bool
) -> None:
    """Slices start inside files whose lines before them nobody counts: a worker numbers
    its lines from its slice's start and the parent moves them when it merges. Every
    file:line is the serial read's: malformed lines, interval marks, the cursor, a torn
    last line."""
    write_steps(tmp_path, "o", 1_200, attempts=2, per_attempt=per_attempt)
    for path in sorted((tmp_path / "o").rglob("*.jsonl")):
        lines = path.read_bytes().split(b"\n")[:-1]
        for k in range(len(lines) - 50, 0, -len(lines) // 7):
            lines.insert(k, b'{"ts": 1, "kind": 7}')
        torn = lines.pop()
        path.write_bytes(b"\n".join(lines) + b"\n" + torn[:15])
    workers(monkeypatch, 2)
    monkeypatch.setattr(JsonlStore, "count_lines", _no_counting)
    serial = cold(tmp_path, "o", parallel=False)
    parallel, _n, sent = shared_read(SlowFront(tmp_path), "o")
    assert sent >= 3  # the workers read slices, inside files
    assert parallel._cursor == serial._cursor
    assert parallel._unread == serial._unread
    same(serial.report(final=True), parallel.report(final=True))
    flagged = [d for d in serial.report(final=True).diagnostics if d.code == "malformed_line"]
    assert len(flagged) >= 7
    for key, stream in serial.accountant._ing.streams.items():
        theirs = parallel.accountant._ing.streams[key].marks
        assert list(theirs.line) == list(stream.marks.line)
        assert min(stream.marks.line) > 0


def test_a_single_file_store_counts_lines_of_its_one_stream(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":2}\n{"c":3}\n')
    store = SingleFileStore(path)
    assert store.count_lines(store.job, "log.jsonl", 16) == 2
    assert store.count_lines(store.job, "log.jsonl", 24, start=8) == 2
    with pytest.raises(ValueError, match=r"log\.jsonl"):
        store.count_lines(store.job, "other.jsonl", 8)
