"""Many ranks, for real: a torch.distributed (gloo, 4 CPU processes) DDP job under ``badput run``.

- One rank sleeps extra in its timed ``forward`` section: the report, the monitor
  (snapshots as the job runs) and its Prometheus endpoint name that rank and no
  other, within a bounded number of steps; with no slow rank, no straggler.
- Rank 2 stops in its forward section while the others wait in the all-reduce:
  ``badput watch``'s view shows STALLED naming rank 2 within the timeout;
  ``badput run --hang-timeout`` kills and restarts the attempt, and the report
  shows the two attempts and the stall.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from badput.analysis import analyze
from badput.engine import RankOptions
from badput.monitor import Monitor, Snapshot
from badput.monitor.prometheus import PrometheusExporter
from badput.report._watch import render_watch

pytestmark = pytest.mark.slow

JOB_SCRIPT = Path(__file__).with_name("_dist_job.py")
BADPUT = Path(sys.executable).with_name("badput")
#: The slow rank must be named within this many steps of the job (summaries every 0.5 s).
MAX_STEPS_TO_DETECT = 25


def _run(store: Path, job: str, *args: str) -> subprocess.Popen[bytes]:
    cmd = [str(BADPUT), "run", "--store", str(store), "--job", job, *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _watch_while(
    proc: subprocess.Popen[bytes], monitor: Monitor, on: Any, timeout: float = 240.0
) -> bytes:
    """Run monitor cycles every 0.5 s until ``proc`` exits; return its output."""
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        on(monitor.run_once())
        time.sleep(0.5)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    reader.join()
    return b"".join(out)


def test_slow_rank_is_named_by_report_monitor_and_prometheus(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    store.mkdir()
    proc = _run(
        store, "slow", "--", sys.executable, str(JOB_SCRIPT), "--steps", "40",
        "--slow-rank", "1", "--slow", "0.09",
    )  # fmt: skip
    prom = PrometheusExporter(port=0)
    monitor = Monitor("slow", store, [prom], interval=0.5)
    seen: list[tuple[int | None, set[int]]] = []

    def on(snap: Snapshot) -> None:
        seen.append((snap.last_step, {s.rank for s in snap.report.stragglers}))

    try:
        output = _watch_while(proc, monitor, on)
        assert proc.returncode == 0, output.decode(errors="replace")
        on(monitor.run_once())
        scrape = urllib.request.urlopen(prom.url, timeout=5).read().decode()
    finally:
        monitor.stop(final_flush=False)
    # The monitor named rank 1 within a bounded number of steps, and never another rank.
    named = [step for step, ranks in seen if ranks]
    assert named, seen
    assert all(ranks <= {1} for _, ranks in seen), seen
    assert named[0] is not None and named[0] <= MAX_STEPS_TO_DETECT, seen
    # ... and its Prometheus endpoint: a per-rank gauge for rank 1 only.
    flagged = re.findall(r'badput_straggler\{[^}]*rank="(\d+)"[^}]*section="(\w+)"', scrape)
    assert flagged == [("1", "forward")], scrape
    assert re.search(r'badput_stragglers\{job="slow"\} 1\.0', scrape)
    # The report: rank 1 in forward, ~4x slower than the others (0.12 s vs 0.03 s).
    report = analyze(store, "slow")
    assert [(s.rank, s.section) for s in report.stragglers] == [(1, "forward")]
    slow = report.stragglers[0]
    assert slow.relative_score is not None and 0.15 < slow.relative_score < 0.4
    assert slow.individual_score is not None and slow.individual_score > 0.75  # slow all along
    assert slow.host == "host0"
    assert [v.rank for v in report.ranks] == [0, 1, 2, 3]
    assert all(v.steps == 40 and v.last_step == 39 for v in report.ranks)
    assert report.ranks[1].outlier == ["straggler in forward"]
    # Wall-clock step time is the same everywhere (the others wait in the all-reduce).
    typical = [v.typical_step_time for v in report.ranks]
    assert all(t is not None for t in typical)
    assert max(typical) - min(typical) < 0.02  # type: ignore[type-var, operator]
    assert report.stalls == []
    out = subprocess.run(
        [str(BADPUT), "report", str(store), "--job", "slow", "--ranks"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "100", "PATH": ""},
    ).stdout
    assert "Stragglers (1)" in out
    assert re.search(r"rank 1 \(host0\): forward \d+ms vs \d+ms, relative 0\.\d\d", out)


def test_no_slow_rank_no_straggler(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    proc = _run(store, "even", "--", sys.executable, str(JOB_SCRIPT), "--steps", "30")
    output, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, output.decode(errors="replace")
    report = analyze(store, "even")
    assert report.stragglers == []
    assert report.stalls == []
    assert len(report.ranks) == 4
    for view in report.ranks:
        forward = view.sections["forward"]
        assert forward.count == 30
        assert forward.relative_score is not None and forward.relative_score > 0.75
    assert all(not v.outlier for v in report.ranks), [v.outlier for v in report.ranks]


def test_hang_is_shown_killed_restarted_and_reported(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    store.mkdir()
    hang_timeout = 8.0
    proc = _run(
        store, "hang", "--hang-timeout", str(hang_timeout), "--max-restarts", "1", "--",
        sys.executable, str(JOB_SCRIPT), "--steps", "30", "--hang-rank", "2", "--hang-step", "12",
    )  # fmt: skip
    options = RankOptions(stall_floor=2.0)
    monitor = Monitor("hang", store, interval=0.5, rank_options=options)
    views: list[tuple[float, float, str]] = []  # (when seen, stall start, watch text)

    def on(snap: Snapshot) -> None:
        stalled = [s for s in snap.report.stalls if s.ongoing]
        if stalled and not views:
            console = Console(record=True, width=120)
            console.print(render_watch(snap, now=snap.time))
            views.append((snap.time, stalled[0].start, console.export_text()))

    try:
        output = _watch_while(proc, monitor, on)
    finally:
        monitor.stop(final_flush=False)
    text = output.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "attempt 0: no progress for" in text and "killing its process group" in text
    assert "attempt 0: hung: killed" in text
    # The watch view showed the stall, naming rank 2 (in its forward section), before
    # the hang timeout killed the attempt.
    assert views, "the watch never showed a stall"
    seen_at, stall_start, view = views[0]
    assert "STALLED: no progress for" in view
    assert "stopped first: rank 2 (in 'forward')" in view
    assert seen_at - stall_start < hang_timeout
    # The report: two attempts, the first ended as hung; the stall, and who stopped first.
    report = analyze(store, "hang", rank_options=options)
    assert len(report.attempts) == 2
    assert report.attempts[0].status == "hung"
    assert report.attempts[0].end_reason.startswith("attempt_end")
    assert report.attempts[1].last_step == 29 and report.end_reason == "job_end"
    assert len(report.stalls) == 1
    stall = report.stalls[0]
    assert stall.attempt == "0" and not stall.ongoing
    assert stall.first_stopped == [2]
    assert stall.open_sections == {"2": "forward"}
    assert stall.last_step == 12
    assert hang_timeout - 1 < stall.seconds < hang_timeout + 15
    assert stall.end == pytest.approx(report.attempts[0].end)
    # Its time is in the partition as ACCOUNTING.md says, and the report says it was a hang.
    assert sum(stall.buckets.values()) == pytest.approx(stall.seconds, abs=1e-6)
    out = subprocess.run(
        [str(BADPUT), "report", str(store), "--job", "hang", "--stall-after", "2"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "200", "PATH": ""},
    ).stdout
    assert "Stalls (1)" in out
    assert "ranks that stopped first: 2" in out and "a hang, not ordinary slowdown" in out
