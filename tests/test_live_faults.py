"""Right while it runs: live reads of files other processes are writing, an event file cut
short under a recording process, the resident memory of a long recording, and what a killed
writer leaves in its spool.

Each test drives the real thing: recording processes started with ``subprocess``, readers
in this process, truncations with ``os.truncate`` as ``> file`` and logrotate's
``copytruncate`` do them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from badput.analysis import LiveJob, analyze
from badput.recorder import _stream as stream_module
from badput.report import to_json
from badput.store import SPOOL_DIR, JsonlStore, ship_orphaned
from badput.testing import read_all

JOB = "live-faults"
NOW = 4_000_000_000.0  # every report is asked as of one time after the job's events

# A rank recording in bursts of 20 steps until a stop file appears (at most ``seconds``): steps
# with a custom span of a long (200-byte) or short name in each, then a clean close.
_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from badput.recorder import Recorder

    root, job, stop = sys.argv[1], sys.argv[2], sys.argv[6]
    rank, name_bytes, seconds = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    rec = Recorder(job, root, attempt=0, rank=rank, host="h", heartbeat_interval=0)
    rec.record_job_start()
    name = "n" * name_bytes
    step = 0
    print("go", flush=True)
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end and not os.path.exists(stop):
        for _ in range(20):
            with rec.step(step):
                with rec.custom(name):
                    pass
            step += 1
        time.sleep(0.004)  # (a reader on a loaded machine keeps up: many looks at the tail)
    rec.record_job_end("completed")
    rec.close()
    print(step, rec.dropped_events, flush=True)
    """
)


def _start_writers(
    root: Path, ranks: int, name_bytes: int, seconds: float, stop: Path | None = None
) -> list[subprocess.Popen[str]]:
    stop = stop or root.parent / "stop"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER,
                str(root),
                JOB,
                str(rank),
                str(name_bytes),
                str(seconds),
                str(stop),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(ranks)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == "go\n"
    return procs


def _json(report: object) -> dict[str, object]:
    out = json.loads(to_json(report))  # type: ignore[arg-type]
    out.pop("diagnostics")  # torn tails seen at one moment: not a number of the partition
    return out


def _snapshot(root: Path, live: LiveJob, into: Path) -> Path:
    """The job's files as far as ``live`` has read them (its cursor), copied to ``into``."""
    assert live._cursor is not None
    job_dir = root / JOB
    for stream, (offset, _lines) in live._cursor.offsets.items():
        dst = into / JOB / stream
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(job_dir / stream, "rb") as f:
            dst.write_bytes(f.read(offset))
    return into


@pytest.mark.parametrize(("ranks", "name_bytes"), [(1, 200), (4, 200), (4, 8)])
def test_live_reads_of_running_writers_equal_a_fresh_analysis_at_every_update(
    tmp_path: Path, ranks: int, name_bytes: int
) -> None:
    root, stop = tmp_path / "store", tmp_path / "stop"
    procs = _start_writers(root, ranks, name_bytes, seconds=60.0, stop=stop)
    live = LiveJob(root, JOB, parallel=False)
    updates = compared = 0
    try:
        # 1,000 looks while the ranks write (however loaded the machine), then they stop.
        while any(p.poll() is None for p in procs):
            live.update()
            updates += 1
            if updates == 1000:
                stop.touch()
            if updates % 25 == 0:
                report = live.report(now=NOW)
                codes = [d.code for d in report.diagnostics]
                assert "malformed_line" not in codes, (updates, report.diagnostics)
            if updates % 250 == 0:  # the live numbers are those of a fresh look at what it read
                snap = _snapshot(root, live, tmp_path / f"snap{updates}")
                assert _json(report) == _json(analyze(snap, JOB, now=NOW, parallel=False))
                shutil.rmtree(snap)
                compared += 1
    finally:
        outs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    steps = [int(o.split()[0]) for o in outs]
    assert [int(o.split()[1]) for o in outs] == [0] * ranks
    live.update()
    final = live.report(now=NOW, final=True)
    assert [d for d in final.diagnostics if d.code == "malformed_line"] == []
    assert _json(final) == _json(analyze(root, JOB, now=NOW, parallel=False))
    evs, errors = read_all(JsonlStore(root), JOB)
    assert errors == []
    assert sum(e.kind == "step_end" for e in evs) == sum(steps)
    assert updates >= 1000 and compared >= 4, updates
    assert not (root / JOB / SPOOL_DIR).exists()  # every segment shipped and deleted


# A process recording as fast as it can, for ``seconds``, then a clean close; what it
# recorded, dropped and lost is printed, with its peak and final resident memory.
_RECORDING = textwrap.dedent(
    """
    import sys, time
    from badput.recorder import Recorder

    root, seconds = sys.argv[1], float(sys.argv[2])
    rec = Recorder("cut", root, attempt=0, rank=0, host="h", heartbeat_interval=0)
    print("go", flush=True)
    t_end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < t_end:
        for _ in range(1000):
            rec.record_step_start(i)
            i += 1
    rec.close()
    print(i, rec.recorded_events, rec.dropped_events, rec.lost_events, flush=True)
    """
)


@pytest.mark.parametrize("how", ["truncate", "copytruncate"])
def test_an_event_file_cut_short_while_recording_never_kills_the_process(
    tmp_path: Path, how: str
) -> None:
    root = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", _RECORDING, str(root), "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "go\n"
    store = JsonlStore(root)
    copies = tmp_path / "rotated"
    copies.mkdir()
    for k in range(10):  # ten cuts over the run, each while it writes at full speed
        time.sleep(0.2)
        (stream,) = store.streams("cut")
        path = root / "cut" / stream
        if how == "copytruncate":  # what logrotate does: copy, then cut the original to 0
            shutil.copyfile(path, copies / f"{k}.jsonl")
        os.truncate(path, 0)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err  # alive (before: SIGBUS, -7, nothing on stderr)
    calls, recorded, dropped, lost = map(int, out.split())
    assert calls == recorded and dropped == 0
    evs, errors = read_all(store, "cut")
    assert errors == []
    kept = len(evs)
    assert 0 < lost < calls and kept + lost == calls  # every event in the file or counted
    steps = [e.step for e in evs]
    assert steps == list(range(calls - kept, calls))  # what is kept: the last ones, in order
    assert err.count("cut short from outside") == 1  # one warning
    if how == "copytruncate":  # the copies hold what was cut, but what was shipped meanwhile
        copied = sum(len(p.read_bytes().splitlines()) for p in copies.iterdir())
        assert 0 < copied <= lost


_LONG_RECORDING = textwrap.dedent(
    """
    import sys
    from badput.recorder import Recorder

    def resident():
        fields = {}
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssFile"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields["VmRSS"], fields["RssFile"]

    root, n = sys.argv[1], int(sys.argv[2])
    rec = Recorder("long", root, attempt=0, rank=0, host="h", heartbeat_interval=0)
    samples = []
    for i in range(n):
        rec.record_step_start(i)
        if i % 500_000 == 0:
            samples.append(resident())
    samples.append(resident())
    rec.close()
    print(rec.recorded_events, rec.dropped_events, samples)
    """
)


def test_resident_memory_of_ten_million_events_stays_bounded(tmp_path: Path) -> None:
    n = 10_000_000
    out = subprocess.run(
        [sys.executable, "-c", _LONG_RECORDING, str(tmp_path), str(n)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    recorded, dropped, samples_text = out.split(" ", 2)
    assert int(recorded) == n and int(dropped) == 0
    samples = eval(samples_text)  # a list of (VmRSS, RssFile) tuples printed by the child
    rss = [s[0] for s in samples]
    rss_file = [s[1] for s in samples]
    mib = 1 << 20
    # The bound: the mapped part is at most the spool's segments not yet shipped, the current
    # one and the next one made ahead (17 x 4 MiB = 68 MiB), whatever the number of events;
    # measured on a loaded 2-core machine: +15 MiB at most, 2-8 MiB typically. Before: the
    # whole event file stayed mapped, +1.2 GB for these 10 M events.
    bound = (stream_module.MAX_SEGMENTS + 1) * stream_module.SEGMENT_BYTES
    assert max(rss_file) - rss_file[0] <= bound, [f / mib for f in rss_file]
    assert max(rss) - rss[0] <= bound + 16 * mib, [r / mib for r in rss]
    (stream,) = JsonlStore(tmp_path).streams("long")
    assert (tmp_path / "long" / stream).read_bytes().count(b"\n") == n


# ---------------------------------------------------------- what a killed writer leaves

_KILLED = textwrap.dedent(
    """
    import sys
    from badput.recorder import Recorder

    rec = Recorder("killed", sys.argv[1], attempt=0, rank=0, host="h", heartbeat_interval=0,
                   flush_interval=60)
    for i in range(int(sys.argv[2])):
        rec.record_step_start(i)
    print("recorded", flush=True)
    sys.stdin.read()  # until killed
    """
)


def _record_and_kill(root: Path, n: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(root), str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "recorded\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_killed_writers_spool_is_shipped_once_by_whoever_comes_next(tmp_path: Path) -> None:
    # 300,000 lines: several segments, the last ones not shipped when the kill comes
    n = 300_000
    _record_and_kill(tmp_path, n)
    job_dir = tmp_path / "killed"
    # Segments made ahead and never used (all NUL, ``.spool`` or still ``.making`` at the
    # kill) are removed and not counted as shipped.
    spooled = list((job_dir / SPOOL_DIR).iterdir())
    left = [p for p in spooled if p.read_bytes()[:4096].strip(b"\0")]
    assert left and all(p.suffix == ".spool" for p in left)
    (event_file,) = (job_dir / "0").iterdir()
    before = event_file.read_bytes().count(b"\n")
    first = ship_orphaned(job_dir)
    assert first.problems == [] and first.segments == len(left)
    assert event_file.read_bytes().count(b"\n") == n  # every line, each once
    assert ship_orphaned(job_dir) == (0, 0, [])  # nothing twice
    assert not (job_dir / SPOOL_DIR).exists()  # the unused ones went too
    evs, errors = read_all(JsonlStore(tmp_path), "killed")
    assert errors == [] and [e.step for e in evs] == list(range(n))
    assert before < n or first.shipped == 0


def test_readers_and_the_next_recorder_ship_what_a_killed_writer_left(tmp_path: Path) -> None:
    _record_and_kill(tmp_path, 50_000)
    # a reader: the report has every event without anyone else's help
    report = analyze(tmp_path, "killed", now=NOW, parallel=False)
    assert report.diagnostics == [] or all(d.code != "torn_line" for d in report.diagnostics)
    evs, _ = read_all(JsonlStore(tmp_path), "killed")
    assert len(evs) == 50_000
    # the next recorder of the job, without a reader in between
    other = tmp_path / "again"
    _record_and_kill(other, 50_000)
    assert (other / "killed" / SPOOL_DIR).exists()
    from badput.recorder import Recorder

    rec = Recorder("killed", other, attempt=1, rank=0, host="h", heartbeat_interval=0)
    rec.record_job_start()
    rec.flush()
    rec.close()
    files = sorted((other / "killed").rglob("*.jsonl"))
    counts = [f.read_bytes().count(b"\n") for f in files]
    assert counts == [50_000, 1]  # the killed attempt's file whole, the new one's job_start
    assert not (other / "killed" / SPOOL_DIR).exists()


def test_a_spool_header_naming_a_path_outside_the_job_is_never_followed(tmp_path: Path) -> None:
    _record_and_kill(tmp_path, 10)
    job_dir = tmp_path / "killed"
    (seg,) = (job_dir / SPOOL_DIR).iterdir()
    data = bytearray(seg.read_bytes())
    header = b'badput-spool 1\n{"target":"../../outside.jsonl","start":0}\n\x00'
    data[: len(header)] = header
    seg.write_bytes(bytes(data))
    result = ship_orphaned(job_dir)
    assert result.segments == 0 and len(result.problems) == 1
    assert "not an event file of the job" in result.problems[0][1]
    assert not (tmp_path.parent / "outside.jsonl").exists()
    assert seg.exists()  # left in place, for a person to look at


# ------------------------------------------------------------------- a full disk

_FILLING = textwrap.dedent(
    """
    import sys
    from badput.recorder import Recorder

    rec = Recorder("full", sys.argv[1], attempt=0, rank=0, host="h", heartbeat_interval=0)
    for i in range(int(sys.argv[2])):
        rec.record_step_start(i)
    rec.close()
    print(rec.recorded_events, rec.dropped_events)
    """
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB file system of its own (tmpfs), so that the disk really fills."""
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    # No skip: the full-disk promise is checked on a real full file system or fails (CI runs
    # as root in a sandbox that may mount tmpfs, as this machine does).
    assert done.returncode == 0, f"cannot mount a small tmpfs: {done.stderr.strip()}"
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_leaves_every_event_written_counted_or_spooled(small_disk: Path) -> None:
    n = 200_000  # about 19 MB of lines on a 6 MiB disk
    out = subprocess.run(
        [sys.executable, "-c", _FILLING, str(small_disk), str(n)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    recorded, dropped = map(int, out.stdout.split())
    assert dropped > 0 and recorded + dropped == n  # every call written (or spooled) or counted
    files = sorted((small_disk / "full").rglob("*.jsonl"))
    assert len(files) == 1 and files[0].stat().st_size > 0  # no empty .1/.2/.3.jsonl files
    assert out.stderr.count("badput:") <= 3
    # While the disk is full, what the spool holds is said, not taken for a lost event.
    full = analyze(small_disk, "full", now=NOW, parallel=False)
    codes = {d.code for d in full.diagnostics}
    assert "torn_line" not in codes and "unshipped_spool" in codes
    # Room again: the next read ships the spool, and every recorded event is there, once.
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    report = analyze(small_disk, "full", now=NOW, parallel=False)
    assert not {"torn_line", "unshipped_spool", "malformed_line"} & {
        d.code for d in report.diagnostics
    }
    evs, errors = read_all(JsonlStore(small_disk), "full")
    assert errors == [] and [e.step for e in evs] == list(range(recorded))
    assert not (small_disk / "full" / SPOOL_DIR).exists()


# ------------------------------------------------- a hand-written file, rotated while followed


def _append_steps(path: Path, steps: range) -> None:
    with open(path, "a") as f:
        for i in steps:
            for kind, ts in (("step_start", 100.0 + i), ("step_end", 100.5 + i)):
                line = {"job": "rot", "attempt": 0, "ts": ts, "kind": kind, "step": i}
                f.write(json.dumps(line) + "\n")


@pytest.mark.parametrize("how", ["copytruncate", "rename"])
def test_a_rotated_hand_written_file_is_read_again_and_said(tmp_path: Path, how: str) -> None:
    path = tmp_path / "rot" / "train.jsonl"
    path.parent.mkdir()
    path.write_text(
        json.dumps({"job": "rot", "attempt": 0, "ts": 99.0, "kind": "job_start"}) + "\n"
    )
    _append_steps(path, range(100))
    live = LiveJob(tmp_path, "rot", parallel=False)
    live.update()
    assert live.report(now=300.0).steps.kept == 100
    if how == "copytruncate":  # logrotate's copytruncate: copy away, cut the original to 0
        shutil.copyfile(path, tmp_path / "train.jsonl.1")
        os.truncate(path, 0)
    else:  # rotation by renaming: the writer opens a new file at the same path
        path.rename(path.with_name("train.jsonl.1"))
    _append_steps(path, range(100, 130))
    live.update()
    report = live.report(now=300.0)
    assert report.steps.kept == 130  # before: 100, the new lines never read
    (said,) = [d for d in report.diagnostics if d.code == "rotated_file"]
    assert said.file == str(path) and "read again from its start" in said.message
    assert "the 201 lines read before are kept" in said.message  # job_start, 100 x 2
    _append_steps(path, range(130, 140))  # followed on from there, said once
    live.update()
    again = live.report(now=300.0)
    assert again.steps.kept == 140
    assert [d.code for d in again.diagnostics].count("rotated_file") == 1


def test_the_monitor_of_running_writers_reports_what_a_fresh_analysis_does(
    tmp_path: Path,
) -> None:
    from badput.monitor import Monitor

    root = tmp_path / "store"
    root.mkdir()
    seen: list[object] = []
    procs = _start_writers(root, 4, 200, seconds=2.5)
    monitor = Monitor(JOB, root, interval=0.01, clock=lambda: NOW, on_snapshot=seen.append).start()
    try:
        for p in procs:
            p.communicate(timeout=60)
        last = monitor.run_once()  # once every rank has closed
    finally:
        monitor.stop(final_flush=False)
    assert all(p.returncode == 0 for p in procs)
    assert monitor.cycles >= 10
    for snap in seen:  # every cycle's report, while the ranks wrote
        codes = [d.code for d in snap.report.diagnostics]  # type: ignore[attr-defined]
        assert "malformed_line" not in codes, codes
    assert _json(last.report) == _json(analyze(root, JOB, now=NOW, parallel=False))


def test_a_spool_header_never_leads_through_a_symbolic_link_out_of_the_job(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    _record_and_kill(root, 10)
    job_dir = root / "killed"
    outside = tmp_path / "outside"
    outside.mkdir()
    (job_dir / "elsewhere").symlink_to(outside)
    (seg,) = (job_dir / SPOOL_DIR).iterdir()
    data = bytearray(seg.read_bytes())
    header = b'badput-spool 1\n{"target":"elsewhere/x.jsonl","start":0}\n\x00'
    data[: len(header)] = header
    seg.write_bytes(bytes(data))
    result = ship_orphaned(job_dir)
    assert result.segments == 0 and "not an event file of the job" in result.problems[0][1]
    assert list(outside.iterdir()) == []


def test_a_killed_writers_segments_are_shipped_in_their_place_not_their_number(
    tmp_path: Path,
) -> None:
    """The background thread makes the next segment ahead while the training thread may make
    one itself: numbers need not follow the lines' order. Recovery ships by the header's
    offset (before: by name, which lost 24,057 of 300,000 lines in one run of the suite)."""
    from badput.store import SpooledWriter

    w = SpooledWriter(tmp_path / "job", "0/h-0-1.jsonl", 4096)
    lines = [b'{"job":"job","attempt":0,"ts":%d.0,"kind":"heartbeat"}\n' % i for i in range(300)]
    it = iter(lines)

    def fill(n: int) -> None:
        for _ in range(n):
            w.current.mm.write(next(it))

    fill(30)
    w.ship()  # the first 30 lines reach the event file
    fill(20)
    w.prepare()  # the thread's segment made ahead: number 1
    ahead, w._spare = w._spare, None
    w.rotate(0)  # the training thread makes its own meanwhile: number 2, next in the file
    fill(50)
    w._spare = ahead
    w.rotate(0)  # then the one made ahead is used: number 1, after number 2's lines
    fill(60)
    w.forget()  # killed: the locks go, the segments stay
    names = sorted(p.name for p in (tmp_path / "job" / SPOOL_DIR).iterdir())
    assert [n.rsplit("-", 1)[1] for n in names] == [
        "00000000.spool",
        "00000001.spool",
        "00000002.spool",
    ]
    result = ship_orphaned(tmp_path / "job")
    assert result.problems == [] and result.segments == 3
    assert (tmp_path / "job" / "0" / "h-0-1.jsonl").read_bytes() == b"".join(lines[:160])
