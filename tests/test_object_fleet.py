"""``badput fleet`` over an object store, counted request by request (moto's server on
127.0.0.1 logs each one): the first run reads every job; a second run over the unchanged
bucket makes listing requests only (its jobs' names and fingerprints from the one listing
and the fleet's cache) and prints the same JSON byte for byte; a job appended to is read
again, alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("obstore")
pytest.importorskip("moto.server")

from hypothesis import given, settings
from hypothesis import strategies as st

import badput
from _fleet_jobs import write_fleet, write_job
from _s3 import MotoServer, Request, s3_env, upload_store
from badput.store import FirstPart, JobNames, ObjectStore, safe_job_dir
from badput.store._names import named_by_itself

BADPUT = str(Path(sys.executable).with_name("badput"))
SRC = str(Path(badput.__file__).resolve().parent.parent)
BUCKET = "fleet"
S3 = f"s3://{BUCKET}/runs"
JOBS = 60
ODD = "team/<b>odd</b>"  # a job whose directory (team_<b>odd<_b>) is not its name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    moto = MotoServer(log=tmp_path_factory.mktemp("moto") / "requests.log").start()
    try:
        moto.make_bucket(BUCKET)
        with s3_env(moto.url, str(tmp_path_factory.mktemp("xdg"))):
            yield moto
    finally:
        moto.stop()


def _odd_job(root: Path, tmp: Path) -> None:
    """Job ``ODD``: a generated job's lines naming ``ODD``, in ``ODD``'s directory."""
    write_job(tmp, 7)
    for path in (tmp / "job-00007").glob("*/*.jsonl"):
        out = root / safe_job_dir(ODD) / path.parent.name / path.name
        out.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text(encoding="utf-8").replace('"job-00007"', json.dumps(ODD))
        out.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def uploaded(server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """``JOBS`` generated jobs and ``ODD`` uploaded as parts (several for a long file):
    their directory store, and the parts."""
    root = tmp_path_factory.mktemp("store")
    write_fleet(root, JOBS)
    _odd_job(root, tmp_path_factory.mktemp("odd"))
    parts = upload_store(root, S3, part_bytes=16 << 10)
    assert parts > 2 * (JOBS + 1)
    return root, parts


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run([BADPUT, *args], capture_output=True, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done


def _counted(
    server: MotoServer, *args: str
) -> tuple[subprocess.CompletedProcess[bytes], list[Request]]:
    """``badput ARGS`` and the requests it made of the server."""
    before = len(server.requests())
    done = cli(*args)
    return done, server.requests()[before:]


def _directories(requests: list[Request]) -> set[str]:
    """The job directories of the objects ``requests`` read."""
    return {r.key.split("/")[1] for r in requests if r.is_object_read}


def _running_job(root: Path) -> Path:
    """The last stream of a generated job still running (no end: more steps can follow)."""
    for job_dir in sorted(root.glob("job-*")):
        files = sorted(job_dir.glob("*/*.jsonl"), key=lambda p: (int(p.parent.name), p.name))
        if not any(b'"job_end"' in p.read_bytes() for p in files):
            return files[-1]
    raise AssertionError("no running job in the generated fleet")


def test_second_fleet_run_lists_only_and_an_appended_job_is_read_again(
    server: MotoServer, uploaded: tuple[Path, int], tmp_path: Path
) -> None:
    local, parts = uploaded
    cache = str(tmp_path / "cache")
    args = ("fleet", S3, "--json", "--worst", "100", "--cache", cache, "--workers", "2")
    directories = {p.name for p in local.iterdir()}
    assert len(directories) == JOBS + 1

    first, asked = _counted(server, *args)
    assert b"61 jobs, 61 analysed, 0 from the cache" in first.stderr
    assert _directories(asked) == directories  # every job read (its parts)
    reads = Counter(r.key for r in asked if r.is_object_read)
    # each part once; ODD's first part twice (its first bytes name the job: its directory
    # is not its name); a directory without "_" or "~" can hold no other name: not read
    assert sorted(Counter(reads.values()).items()) == [(1, parts - 1), (2, 1)]
    assert safe_job_dir(ODD) in max(reads, key=reads.__getitem__)
    assert ODD.encode() in first.stdout and b"team_" not in first.stdout

    again, asked = _counted(server, *args)
    assert again.stdout == first.stdout
    assert b"61 jobs, 0 analysed, 61 from the cache" in again.stderr
    assert asked and all(r.is_listing and r.status == 200 for r in asked), asked
    assert len(asked) == -(-parts // 1000)  # the bucket's listing, its pages of 1,000
    assert all(r.query["prefix"] == ["runs/"] for r in asked)

    # one job records more: a new part of its last stream, later steps
    stream = _running_job(local)
    job = stream.parent.parent.name
    last = stream.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1].decode()
    ts = float(last.split('"ts":', 1)[1].split(",", 1)[0])
    attempt, rank = int(stream.parent.name), int(stream.name.split("-")[1])
    more = "".join(
        f'{{"ts":{ts + 1 + i},"kind":"step_{kind}","job":"{job}","attempt":{attempt},'
        f'"host":"h{rank}","rank":{rank},"step":{10_000 + i}}}\n'
        for i in range(5)
        for kind in ("start", "end")
    )
    store = ObjectStore(S3)
    number = len(store.parts(job)[f"{attempt}/{stream.name}"]) + 1
    store._put(job, f"{attempt}/{stream.name}.part-{number:08d}", more.encode())

    third, asked = _counted(server, *args)
    assert b"61 jobs, 1 analysed, 60 from the cache" in third.stderr
    reads = Counter(r.key for r in asked if r.is_object_read)
    # its parts, each once, not its name: its first part is the same object
    assert set(reads.values()) == {1} and len(reads) == sum(map(len, store.parts(job).values()))
    assert _directories(asked) == {job}
    fresh = cli("fleet", S3, "--json", "--worst", "100", "--no-cache", "--engine", "serial").stdout
    assert third.stdout == fresh != first.stdout


def _events(job: str, n: int) -> bytes:
    return "".join(
        f'{{"ts":{1000 + i},"kind":"step_start","job":"{job}","attempt":0,"rank":0,"step":{i}}}\n'
        for i in range(n)
    ).encode()


def test_a_rewritten_first_part_is_named_again(server: MotoServer, tmp_path: Path) -> None:
    uri = f"s3://{BUCKET}/names"
    names = JobNames(tmp_path / "names.json")
    ObjectStore(uri)._put("team_a", "0/h-0-1.jsonl.part-00000001", _events("team/a", 3))
    ObjectStore(uri)._put("b", "0/h-0-1.jsonl.part-00000001", _events("b", 2))

    def heads() -> int:
        return sum(1 for r in server.requests() if r.key.startswith("names/") and r.is_object_read)

    before = heads()
    store = ObjectStore(uri, names=names)
    assert store.jobs() == ["b", "team/a"]
    assert heads() == before + 1  # "b" can hold no other name: not read
    fingerprint = store.fingerprint("team/a")
    assert fingerprint == ObjectStore(uri).fingerprint("team/a")  # its listing, or its own
    assert ObjectStore(uri, names=JobNames(names.path)).jobs() == ["b", "team/a"]
    assert heads() == before + 1  # the file held the name
    # the same directory's first part rewritten: another object (etag), read again
    ObjectStore(uri)._put("team_a", "0/h-0-1.jsonl.part-00000001", _events("team_a", 3))
    store = ObjectStore(uri, names=JobNames(names.path))
    assert store.jobs() == ["b", "team_a"]
    assert heads() == before + 2
    assert store.fingerprint("team_a") != fingerprint


_NAMES = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates too


@settings(max_examples=60, deadline=None)
@given(held=st.dictionaries(_NAMES, st.tuples(_NAMES, st.integers(0, 2**40), _NAMES, _NAMES)))
def test_job_names_round_trip_any_name(held: dict[str, tuple[str, int, str, str]]) -> None:
    """Whatever the logs name a job (and the store its keys and etags), the file gives back
    what was put, and a changed part (key, size or etag) is never answered from it."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        names = JobNames(Path(tmp) / "n.json")
        for d, (key, size, etag, job) in held.items():
            names.put(d, FirstPart(key, size, etag), job)
        names.save()
        again = JobNames(names.path)
        for d, (key, size, etag, job) in held.items():
            assert again.get(d, FirstPart(key, size, etag)) == job
            assert again.get(d, FirstPart(key, size + 1, etag)) is None
            assert again.get(d, FirstPart(key, size, etag + "x")) is None


def _ended_job(root: Path) -> str:
    """A generated job that has ended (its last stream holds a ``job_end``)."""
    for job_dir in sorted(root.glob("job-*")):
        if any(b'"job_end"' in p.read_bytes() for p in job_dir.glob("*/*.jsonl")):
            return job_dir.name
    raise AssertionError("no ended job in the generated fleet")


def test_one_off_readers_list_once_and_fetch_each_part_once(
    server: MotoServer, uploaded: tuple[Path, int], tmp_path: Path
) -> None:
    """``jobs``, ``report`` (of a job's URI, and of the store with ``--job``) and ``watch``:
    one listing request (a page of 1,000 objects), then each part of what they read once;
    a directory that is not its job's name (ODD's) is named by its first part's first
    bytes once on this machine, then by what the readers remember of it (keyed by that
    part's key, size and etag)."""
    local, _ = uploaded
    listing = ObjectStore(S3).listing()  # (the bucket as it is now: a test may have added)
    parts = [k for k, _, _ in listing if ".part-" in k]
    pages = -(-len(listing) // 1000)
    env = {**os.environ, "PYTHONPATH": SRC, "XDG_CACHE_HOME": str(tmp_path / "xdg")}

    def counted(*args: str) -> Counter[str]:
        before = len(server.requests())
        done = subprocess.run([BADPUT, *args], capture_output=True, env=env, check=False)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        asked = server.requests()[before:]
        assert all(r.is_listing or r.is_object_read for r in asked), asked
        assert sum(r.is_listing for r in asked) == (pages if args[0] == "jobs" else 1), asked
        return Counter(r.key for r in asked if r.is_object_read)

    odd_first = min(k for k in parts if k.startswith(f"runs/{safe_job_dir(ODD)}/"))
    reads = counted("jobs", S3, "--json")  # every job is read, for its state
    assert reads == {**dict.fromkeys(parts, 1), odd_first: 2}  # ODD's name: its first bytes
    assert counted("jobs", S3, "--json") == dict.fromkeys(parts, 1)  # its name remembered
    ended = _ended_job(local)
    own = {k: 1 for k in parts if k.startswith(f"runs/{ended}/")}
    assert counted("report", f"{S3}/{ended}", "--json") == own
    assert counted("report", S3, "--job", ended) == own
    assert counted("watch", f"{S3}/{ended}") == own
    odd = {k: 1 for k in parts if k.startswith(f"runs/{safe_job_dir(ODD)}/")}
    assert counted("report", f"{S3}/{safe_job_dir(ODD)}") == odd
    env["XDG_CACHE_HOME"] = str(tmp_path / "another")  # a machine that has not named it
    assert counted("report", f"{S3}/{safe_job_dir(ODD)}") == {**odd, odd_first: 2}
    assert counted("report", S3, "--job", ODD) == odd  # its real name: no need to read it


@settings(max_examples=300, deadline=None)
@given(job=st.one_of(_NAMES, st.text(min_size=200, max_size=400), st.sampled_from([".", ".."])))
def test_a_directory_named_by_itself_holds_only_that_job(job: str) -> None:
    """What lets the readers name such a directory without reading it: no other name is
    kept in a directory without ``_`` or ``~``."""
    directory = safe_job_dir(job)
    if named_by_itself(directory):
        assert directory == job
    else:
        assert "_" in directory or "~" in directory
