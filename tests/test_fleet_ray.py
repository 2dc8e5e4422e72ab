"""``badput fleet --engine ray`` on a real Ray cluster on 127.0.0.1 (a head and two worker
nodes, ``ray.cluster_utils.Cluster``): 1,000 generated jobs give the JSON text of
``--engine local``, also when a worker process is killed (SIGKILL) mid-run."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from _fleet_jobs import write_fleet, write_job
from badput.fleet import analyse_fleet, fleet_summary
from badput.report import dumps_finite

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

N_JOBS = 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_processes(temp_dir: str) -> set[Any]:
    """The processes of the cluster this test started: those naming its temp dir, and
    theirs (ended by pid, never by name: other Ray users on the machine are left alone)."""
    found: set[Any] = set()
    for p in psutil.process_iter(["cmdline"]):
        if any(temp_dir in a for a in (p.info["cmdline"] or ())):
            found.add(p)
            with contextlib.suppress(psutil.Error):
                found.update(p.children(recursive=True))
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A head and two worker nodes on 127.0.0.1 (``ray start``), one CPU each."""
    temp_dir = f"/tmp/ray-fleet-{os.getpid()}"  # Ray's socket paths must stay short
    port = _free_port()
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent / "src"),
                                       os.environ.get("PYTHONPATH", "")]),
    }  # fmt: skip
    ray_cli = str(Path(sys.executable).parent / "ray")
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1"]
    try:
        subprocess.run(
            [ray_cli, "start", "--head", f"--port={port}", "--include-dashboard=false",
             f"--temp-dir={temp_dir}", *common],
            check=True, env=env, capture_output=True, timeout=180,
        )  # fmt: skip
        for _ in range(2):
            subprocess.run(
                [ray_cli, "start", f"--address=127.0.0.1:{port}", *common],
                check=True, env=env, capture_output=True, timeout=180,
            )  # fmt: skip
        os.environ["PYTHONPATH"] = env["PYTHONPATH"]
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False)
        assert ray.cluster_resources()["CPU"] == 3.0  # head + two workers
        yield port
    finally:
        ray.shutdown()
        for p in _cluster_processes(temp_dir):
            with contextlib.suppress(psutil.Error):
                p.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _json(root: Path, engine: str) -> str:
    run = analyse_fleet(root, engine=engine)  # type: ignore[arg-type]
    assert run.analysed == N_JOBS
    return dumps_finite(fleet_summary(run.results, source=str(root)))


def test_ray_gives_the_local_json(cluster: Any, tmp_path: Path) -> None:
    root = tmp_path / "store"
    made = write_fleet(root, N_JOBS)
    assert {m["ranks"] for m in made} == {1, 2, 4}
    local = _json(root, "local")
    assert _json(root, "ray") == local
    assert f'"jobs": {N_JOBS}' in local

    # a worker process running a batch is killed: Ray runs the batch again elsewhere
    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for p in psutil.process_iter(["pid", "cmdline"]):
                cmd = " ".join(p.info["cmdline"] or ())
                if cmd.startswith("ray::run_task"):
                    time.sleep(0.3)  # mid-batch
                    os.kill(p.info["pid"], signal.SIGKILL)
                    killed.append(p.info["pid"])
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one)
    killer.start()
    again = _json(root, "ray")
    killer.join()
    assert killed, "no Ray worker was seen running a batch"
    assert again == local

    # a job too large for one task: its slices read by Ray workers, merged by the driver
    big = tmp_path / "big"
    write_fleet(big, 3)
    write_job(big, 3, steps_scale=100)
    split = analyse_fleet(big, engine="ray", split_bytes=2 * 1024 * 1024)
    assert split.results == analyse_fleet(big, engine="serial", split_bytes=None).results
