"""Every reader on ``s3://``: ``badput run`` records a real training script to moto's S3
server on 127.0.0.1 (one server for the module), and ``report``, ``jobs``, ``watch``,
``compare``, ``export``, ``Monitor``, ``LiveJob`` and the ml-goodput-measurement drop-in
read it back: the same numbers and bytes as the same job read from its local files (the
store's local event files on this machine, of which the parts are byte-for-byte copies)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto.server")

import badput
from _s3 import MotoServer, s3_env
from badput.analysis import LiveJob
from badput.monitor import Monitor
from badput.report import to_json
from badput.store import ObjectStore, open_source, safe_job_dir

BADPUT = str(Path(sys.executable).with_name("badput"))
SRC = str(Path(badput.__file__).resolve().parent.parent)
S3 = "s3://readers/runs"
TRAIN = "train"
ODD = "team/<b>x</b>"  # a name from a log: sanitised as a directory, escaped when shown

_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import badput
    attempt = int(os.environ["BADPUT_ATTEMPT"])
    with badput.Recorder(heartbeat_interval=0) as rec:
        first = 0
        if attempt:
            rec.record_checkpoint_restore_start(19)
            time.sleep(0.03)
            rec.record_checkpoint_restore_end(19)
            first = 20
        for step in range(first, first + 30):
            rec.record_step_start(step)
            time.sleep(0.004)
            rec.record_step_end(step)
            if step == 19:
                rec.record_checkpoint_save_start(19)
                time.sleep(0.02)
                rec.record_checkpoint_save_end(19)
    sys.exit(3 if attempt == 0 else 0)  # attempt 0 crashes after step 29
    """
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """moto's server, one bucket, and the environment set the AWS way for the module."""
    server = MotoServer().start()
    try:
        server.make_bucket("readers")
        with s3_env(server.url, str(tmp_path_factory.mktemp("cache"))):
            yield {**os.environ, "PYTHONPATH": SRC}
    finally:
        server.stop()


def cli(env: dict[str, str], *args: str, rc: int = 0) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run([BADPUT, *args], capture_output=True, env=env, check=False)
    assert done.returncode == rc, done.stderr.decode(errors="replace")
    return done


@pytest.fixture(scope="module")
def local(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two jobs recorded by ``badput run`` to S3; the store's local files (a directory
    store of the same layout) returned."""
    script = tmp_path_factory.mktemp("script") / "train.py"
    script.write_text(_SCRIPT)
    out = cli(env, "run", "--store", S3, "--job", TRAIN, "--max-restarts", "1", "--backoff", "0",
              "--", sys.executable, str(script))  # fmt: skip
    assert b"attempt 0: failed with exit code 3" in out.stderr
    cli(env, "run", "--store", S3, "--job", ODD, "--", sys.executable, str(script), rc=3)
    return ObjectStore(S3).local.root


def _remote(store: ObjectStore, job: str) -> dict[str, bytes]:
    return {
        stream: b"".join(store._get(key) for _, key, _ in parts)
        for stream, parts in store.parts(job).items()
    }


def test_run_ships_every_byte_of_every_attempt(local: Path) -> None:
    store = ObjectStore(S3)
    assert store.jobs() == sorted([TRAIN, ODD])  # the names the events give, not the dirs
    for job in (TRAIN, ODD):
        job_dir = local / safe_job_dir(job)
        files = {str(p.relative_to(job_dir)): p.read_bytes() for p in job_dir.glob("*/*.jsonl")}
        assert files and _remote(store, job) == files
    assert {p.parent.name for p in (local / TRAIN).glob("*/*.jsonl")} == {"0", "1"}


@pytest.mark.parametrize("fmt", [[], ["--json"]], ids=["table", "json"])
def test_report_equals_the_local_files(env: dict[str, str], local: Path, fmt: list[str]) -> None:
    for job in (TRAIN, ODD):
        want = cli(env, "report", str(local), "--job", job, *fmt).stdout
        assert cli(env, "report", S3, "--job", job, *fmt).stdout == want
        # the job's directory as a path, as a local job directory is given
        where = f"{S3}/{safe_job_dir(job)}"
        assert cli(env, "report", where, *fmt).stdout == want
        assert cli(env, "report", f"{where}/0", *fmt).stdout == want  # an attempt's: the job


def test_jobs_equals_the_local_files(env: dict[str, str], local: Path) -> None:
    for fmt in ([], ["--json"]):
        out = cli(env, "jobs", S3, *fmt).stdout
        assert out == cli(env, "jobs", str(local), *fmt).stdout
    assert ODD.encode() in out and b"team_" not in out


def test_compare_equals_the_local_files(env: dict[str, str], local: Path) -> None:
    for fmt in ([], ["--json"]):
        out = cli(env, "compare", "--store", S3, TRAIN, ODD, *fmt).stdout
        assert out == cli(env, "compare", "--store", str(local), TRAIN, ODD, *fmt).stdout
        a, b = (f"{S3}/{safe_job_dir(j)}" for j in (TRAIN, ODD))
        la, lb = (str(local / safe_job_dir(j)) for j in (TRAIN, ODD))
        assert cli(env, "compare", a, b, *fmt).stdout == cli(env, "compare", la, lb, *fmt).stdout


def test_export_csv_and_trace_equal_the_local_files(
    env: dict[str, str], local: Path, tmp_path: Path
) -> None:
    for name, source in (("s3", S3), ("local", str(local))):
        cli(env, "export", "csv", source, str(tmp_path / name), "--job", TRAIN)
        cli(env, "export", "trace", source, str(tmp_path / f"{name}.json"), "--job", TRAIN)
    files = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert "buckets.csv" in files and "attempts.csv" in files
    assert sorted(p.name for p in (tmp_path / "s3").iterdir()) == files
    for f in files:
        assert (tmp_path / "s3" / f).read_bytes() == (tmp_path / "local" / f).read_bytes()
    assert (tmp_path / "s3.json").read_bytes() == (tmp_path / "local.json").read_bytes()
    assert (tmp_path / "local.json").stat().st_size > 1000


def test_fleet_equals_the_local_files_and_caches(
    env: dict[str, str], local: Path, tmp_path: Path
) -> None:
    cache = str(tmp_path / "cache")
    first = cli(env, "fleet", S3, "--json", "--cache", cache, "--engine", "serial")
    here = cli(env, "fleet", str(local), "--json", "--no-cache", "--engine", "serial").stdout
    assert first.stdout.replace(S3.encode(), str(local).encode()) == here
    assert b"2 jobs, 2 analysed, 0 from the cache" in first.stderr
    again = cli(env, "fleet", S3, "--json", "--cache", cache, "--engine", "serial")
    assert again.stdout == first.stdout
    assert b"2 jobs, 0 analysed, 2 from the cache" in again.stderr  # the parts did not change


def _lines(out: bytes) -> list[str]:
    """``watch``'s lines without the refresh time that starts each status line."""
    return [ln.split(" ", 1)[1] if ln[:4].isdigit() else ln for ln in out.decode().splitlines()]


def test_watch_of_an_ended_job_prints_once_and_exits(env: dict[str, str], local: Path) -> None:
    out = cli(env, "watch", S3, "--job", TRAIN).stdout
    lines = _lines(out)
    assert lines == _lines(cli(env, "watch", str(local), "--job", TRAIN).stdout)
    assert len(lines) == 2 and lines[1].startswith(f"badput watch: {TRAIN} ended: ")


def test_watch_follows_a_live_job_until_its_end(env: dict[str, str], local: Path) -> None:
    proc = subprocess.Popen(
        [BADPUT, "watch", S3, "--job", "live", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None  # it has begun, and waits for the job's first part
        first = proc.stdout.readline()
        assert first.endswith(b"live: no events yet\n"), first
        store = ObjectStore(S3, ship_interval=0.2)
        rec = badput.Recorder("live", store, heartbeat_interval=0, attempt=0)
        rec.record_job_start()
        for step in range(40):
            rec.record_step_start(step)
            time.sleep(0.05)
            rec.record_step_end(step)
        rec.record_job_end("completed")
        rec.close()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    lines = (first + out).decode().splitlines()
    steps = {ln.split(", step ")[1].split(",")[0] for ln in lines if ", step " in ln}
    assert len(steps) >= 3  # it saw the job advance, part by part
    assert lines[-1].startswith("badput watch: live ended: finished (completed), goodput ")


def test_monitor_in_process_equals_the_local_files(env: dict[str, str], local: Path) -> None:
    clock = lambda: 2e9  # noqa: E731 (one time for both)
    s3 = Monitor(TRAIN, S3, clock=clock).run_once()
    here = Monitor(TRAIN, str(local), clock=clock).run_once()
    assert to_json(s3) == to_json(here)
    assert s3.report.total_seconds > 0 and len(s3.report.attempts) == 2


class _Counting(ObjectStore):
    """An object store that counts its listing and fetching requests."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri, ship_interval=0.2)
        self.fetched: list[str] = []
        self.listings = 0

    def _get(self, key: str) -> bytes:
        self.fetched.append(key)
        return super()._get(key)

    def _list(self, prefix: str) -> list[tuple[str, int]]:
        self.listings += 1
        return super()._list(prefix)


def test_livejob_fetches_only_new_parts(env: dict[str, str]) -> None:
    writer = ObjectStore(S3, ship_interval=3600)  # parts shipped when the test says
    reader = _Counting(S3)
    rec = badput.Recorder("inc", writer, heartbeat_interval=0, attempt=0)
    rec.record_job_start(ts=1000.0)
    live = LiveJob(reader, "inc")
    for round_ in range(4):
        for i in range(50 * round_, 50 * round_ + 50):
            rec.record_step_start(i, ts=1001.0 + i)
            rec.record_step_end(i, ts=1001.5 + i)
        rec.flush()
        writer.ship_pending("inc")
        before, listed = len(reader.fetched), reader.listings
        assert live.update() > 0
        new = reader.fetched[before:]
        assert len(new) == 1  # this round's one part: none fetched before is fetched again
        assert reader.listings - listed == 1  # one listing of the job per update
    assert len(set(reader.fetched)) == len(reader.fetched) == 4
    rec.record_job_end(ts=1300.0)
    rec.close()
    live.update()
    whole = LiveJob(writer.local.job_dir("inc").parent, "inc")
    whole.update()
    assert to_json(live.report()) == to_json(whole.report())
    assert live.report().total_seconds == pytest.approx(300.0)


def test_compat_calculator_equals_the_local_files(env: dict[str, str]) -> None:
    import datetime as dt

    from badput.compat.ml_goodput_measurement import goodput

    t0 = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)

    def at(s: float) -> dt.datetime:
        return t0 + dt.timedelta(seconds=s)

    writer = ObjectStore(S3, ship_interval=0.2)
    rec = goodput.GoodputRecorder("mgm", "log", True, store=writer)
    rec.record_job_start_time(at(0))
    rec.record_tpu_init_start_time(at(0))
    rec.record_tpu_init_end_time(at(4))
    for step in range(20):
        rec.record_step_start_time(step, at(5 + 2 * step))
    rec.record_job_end_time(at(50))
    rec.close()
    writer.ship_pending("mgm")
    clock = lambda: t0.timestamp() + 60  # noqa: E731
    calcs: list[Any] = [
        goodput.GoodputCalculator("mgm", "log", store=store, clock=clock)
        for store in (S3, str(writer.local.root))
    ]
    whole = [c.get_job_goodput(include_badput_breakdown=True) for c in calcs]
    assert whole[0] == whole[1]
    assert whole[0][0] == pytest.approx(45 / 50 * 100)  # steps from 5 s to the end at 50 s
    window = [c.get_job_goodput_interval(at(10), at(30)) for c in calcs]
    assert window[0] == window[1]


def test_open_source_of_object_paths(env: dict[str, str], local: Path) -> None:
    """A job's directory names the job its events name; a wrong --job is refused."""
    store, job = open_source(f"{S3}/{safe_job_dir(ODD)}")
    assert job == ODD and isinstance(store, ObjectStore) and store.uri == S3
    assert open_source(S3, safe_job_dir(ODD))[1] == ODD  # --job by its directory's name
    assert open_source(S3, ODD)[1] == ODD
    with pytest.raises(ValueError, match="is the directory of job"):
        open_source(f"{S3}/{TRAIN}", ODD)
    with pytest.raises(ValueError, match="no job 'nope'"):
        open_source(S3, "nope")
