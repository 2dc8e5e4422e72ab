"""Program goodput in every view (issue 35): MFU over time in the engine, the HTML page,
the CSV files, ``badput jobs``/``compare``, and the exporters; each against numbers
computed by hand from docs/program-goodput.md's worked example (an 8B model, 8 H100s:
600 s queued, steps 1-50 over 600-1,100 s, a 100 s save, steps 51-100 over 1,200-1,700 s,
MFU of a step 40.445 %, of the whole job 1,000 / 1,700 of it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from _program_job import JOB, MFU, STEP, llama_log
from badput.engine import Accountant, GoodputSeries, Snapshot, mfu_over_time
from badput.events import Event
from badput.report import html_report
from test_program_goodput import random_logs

BINS = 120
WIDTH = 1700 / BINS * 10  # the rolling window: 10 of goodput over time's 120 windows


def llama_snapshot(**acc: Any) -> Snapshot:
    a = Accountant(JOB, ideal_step_time=STEP)
    for name, value in acc.items():
        setattr(a, name, value)
    a.ingest_events(llama_log())
    return a.snapshot(drawing=True)


def stepping_in(a: float, b: float) -> float:
    """Seconds of [a, b] inside the worked example's steps (600-1,100 s, 1,200-1,700 s)."""
    return sum(max(0.0, min(b, hi) - max(a, lo)) for lo, hi in ((600, 1100), (1200, 1700)))


def test_mfu_over_time_by_hand() -> None:
    snap = llama_snapshot()
    m, g, p = snap.mfu_over_time, snap.goodput_over_time, snap.report.program
    assert m is not None and g is not None and p is not None
    assert m.t == g.t and len(m.t) == BINS and m.rolling_seconds == pytest.approx(WIDTH)
    # the window ending at 850 s holds only steps: the MFU of a step
    assert m.t[59] == 850.0 and m.rolling[59] == pytest.approx(MFU, abs=1e-6)
    # ending at 1,133.3 s: steps 991.7-1,100 s of the 141.7 s window, then the save
    assert m.t[79] == pytest.approx(1133.333, abs=1e-3)
    assert m.rolling[79] == pytest.approx(
        MFU * 13 / 17, abs=1e-6
    )  # (1,100 - 991.7) / 141.7: 30.93 %
    assert m.cumulative[79] == pytest.approx(MFU * 15 / 34, abs=1e-6)  # 500 / 1,133.3 s: 17.84 %
    # queued: nothing done yet; at the end: the whole job's MFU (= MPG)
    assert m.cumulative[:42] == [0.0] * 42 and m.rolling[:42] == [0.0] * 42
    assert (
        m.cumulative[-1] == pytest.approx(p.mfu_job, abs=1e-6) == pytest.approx(0.237913, abs=1e-6)
    )
    for i in range(BINS):
        t = 1700 * (i + 1) / BINS  # (m.t: rounded to the millisecond)
        a = max(0.0, t - WIDTH)
        assert m.rolling[i] == pytest.approx(MFU * stepping_in(a, t) / (t - a), abs=1e-6)
        assert m.cumulative[i] == pytest.approx(MFU * stepping_in(0, t) / t, abs=1e-6)


def test_no_mfu_over_time_without_a_peak() -> None:
    events = [e for e in llama_log() if e.kind != "model"]
    a = Accountant(JOB, ideal_step_time=STEP)
    a.ingest_events(events)
    snap = a.snapshot(drawing=True)
    assert snap.report.program is not None and snap.mfu_over_time is None
    assert "no FLOPs per token" in snap.report.program.absent["program_goodput"]


def test_a_step_is_spread_over_its_span() -> None:
    # one step of 100 tokens over 10-20 s, one of 50 at the instant 30 s; 1 FLOP a token,
    # capacity 10 FLOP/s: [0, 15] did 50 FLOPs (MFU 50 / 150), [15, 30] 50 + 50 (100 / 150)
    series = GoodputSeries([15.0, 30.0], [None, None], [None, None], [None, None], 15.0)
    work = tuple(map(np.asarray, ([10.0, 30.0], [20.0, 30.0], [100.0, 50.0])))
    m = mfu_over_time(series, (0.0, 30.0), work, 1.0, 10.0)  # type: ignore[arg-type]
    assert m.rolling == [pytest.approx(50 / 150), pytest.approx(100 / 150)]
    assert m.cumulative == [pytest.approx(50 / 150), pytest.approx(150 / 300)]


@settings(max_examples=60, deadline=None)
@given(random_logs())
def test_mfu_over_time_ends_at_the_whole_jobs_mfu(log: tuple[list[Event], float]) -> None:
    events, peak = log
    a = Accountant(JOB)
    a.peak_flops = peak
    a.ingest_events(events)
    snap = a.snapshot(drawing=True)
    p, m = snap.report.program, snap.mfu_over_time
    assert p is not None
    if p.mfu_job is None or snap.report.total_seconds <= 0:
        assert m is None
        return
    assert m is not None and m.cumulative[-1] == pytest.approx(p.mfu_job, abs=2e-6)
    assert all(v is None or v >= 0 for v in m.cumulative + m.rolling)


_MFU_PIXELS_JS = """
const canvas = document.querySelector('#mfu-chart canvas');
const img = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
let n = 0;
for (let i = 0; i < img.length; i += 4) {
  if (img[i] === 0x8e && img[i + 1] === 0x44 && img[i + 2] === 0xad) n++;
}
return n;
"""


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_html_draws_mfu_over_time_beside_goodput(tmp_path: Path) -> None:
    from _browser import browser, console_errors
    from test_views_browser import open_page, screenshot

    snap = llama_snapshot()
    page = tmp_path / "llama.html"
    page.write_text(html_report(snap), encoding="utf-8")
    no_peak = tmp_path / "no-peak.html"
    events = [e for e in llama_log() if e.kind != "model"]
    a = Accountant(JOB, ideal_step_time=STEP)
    a.ingest_events(events)
    no_peak.write_text(html_report(a.snapshot(drawing=True)), encoding="utf-8")
    with browser() as driver:
        view = open_page(driver, page)
        assert console_errors(driver) == []
        assert view["charts"] == ["buckets", "timeline", "goodput", "mfu", "steptime"]
        data = driver.execute_script("return window.badputMfu.data")
        assert data[0][59] == 850.0
        assert data[1][59] == pytest.approx(100 * MFU * 250 / 850, abs=1e-4)  # 600-850 s of steps
        assert data[2][59] == pytest.approx(100 * MFU, abs=1e-4)  # rolling: only steps
        assert data[1][-1] == pytest.approx(100 * 0.237913, abs=1e-4)  # MPG, the job's MFU
        assert driver.execute_script(_MFU_PIXELS_JS) > 200  # the cumulative line is drawn
        cards = driver.execute_script(
            "return [document.getElementById('MFU').textContent,"
            " document.getElementById('MPG').textContent]"
        )
        assert cards == ["40.4%", "23.8%"]
        screenshot(driver, tmp_path, "program-mfu")
        # zooming the timeline zooms the MFU chart with the others
        driver.execute_script("window.badputTimeline.setScale('x', {min: 700, max: 900})")
        scale = driver.execute_script(
            "return [window.badputMfu.scales.x.min, window.badputMfu.scales.x.max]"
        )
        assert scale == [pytest.approx(700), pytest.approx(900)]
        view = open_page(driver, no_peak)
        assert "mfu" not in view["charts"]
        text = driver.execute_script("return document.getElementById('mfu-chart').textContent")
        assert text.startswith("No MFU: no FLOPs per token")


# -- CSV, jobs, compare and the options of every view ---------------------------------


def write_store(root: Path) -> Path:
    """A store of three jobs: the worked example, it without its model event, and one
    that records no work."""
    from _views_jobs import write_two_rank_job
    from badput.formats.codec import encode_lines

    for job, model in ((JOB, True), ("no-model", False)):
        events = [e for e in llama_log(job) if model or e.kind != "model"]
        path = root / job / "0" / "h-0-0.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_lines(events))
    write_two_rank_job(root, job="no-work")
    return root


def read_csv(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_csv_program_tables(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from badput.cli import main

    store = write_store(tmp_path / "store")
    out = tmp_path / "csv"
    run = CliRunner().invoke(main, ["export", "csv", str(store), str(out), "--job", JOB])
    assert run.exit_code == 0, run.output
    rows = {r["figure"]: r for r in read_csv(out / "program.csv")}
    assert float(rows["flops_per_token"]["value"]) == 61_066_469_376
    assert int(rows["kept_tokens"]["value"]) == 52_428_800 and rows["devices"]["value"] == "8"
    assert float(rows["tokens_per_second"]["value"]) == pytest.approx(52_428_800 / 1700)
    assert float(rows["mfu_productive"]["value"]) == pytest.approx(MFU)
    assert float(rows["scheduling_goodput"]["value"]) == pytest.approx(1100 / 1700)
    assert float(rows["mpg"]["value"]) == pytest.approx(MFU * 1000 / 1700)
    assert rows["mpg"]["unit"] == "ratio" and rows["mpg"]["absent"] == ""
    [attempt] = read_csv(out / "program_attempts.csv")
    assert (attempt["tokens"], attempt["samples"]) == ("52428800", "6400")
    seconds = float(attempt["seconds"])
    assert float(attempt["tokens_per_second"]) == pytest.approx(52_428_800 / seconds)
    # without the model event: the figures that need it blank, with the reason
    out2 = tmp_path / "csv2"
    args = ["export", "csv", str(store), str(out2), "--job", "no-model"]
    assert CliRunner().invoke(main, args).exit_code == 0
    rows = {r["figure"]: r for r in read_csv(out2 / "program.csv")}
    assert rows["mpg"]["value"] == "" and rows["mpg"]["absent"].startswith("no FLOPs per token")
    assert float(rows["runtime_goodput"]["value"]) == pytest.approx(1000 / 1100)
    # a given peak and a FLOPs count: what the log lacks of it cannot be given
    args = [*args, "--peak-flops", "1e15", "--devices", "2"]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert {r["figure"]: r for r in read_csv(out2 / "program.csv")}["devices"]["value"] == "2"
    # a job that records no work writes no program tables
    out3 = tmp_path / "csv3"
    args = ["export", "csv", str(store), str(out3), "--job", "no-work"]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert not (out3 / "program.csv").exists()


def test_jobs_and_compare_show_mfu_and_mpg(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from badput.cli import main

    store = write_store(tmp_path / "store")
    run = CliRunner().invoke(main, ["jobs", str(store), "--json", "--sort", "mfu", "--reverse"])
    assert run.exit_code == 0, run.output
    rows = json.loads(run.output)
    assert [r["job"] for r in rows] == [JOB, "no-model", "no-work"]  # no MFU: last
    by = {r["job"]: r for r in rows}
    assert by[JOB]["mfu"] == pytest.approx(MFU)
    assert by[JOB]["mpg"] == pytest.approx(MFU * 1000 / 1700)
    assert by[JOB]["mfu_absent"] is None
    assert by["no-model"]["mfu"] is None and by["no-model"]["mpg"] is None
    assert by["no-model"]["mfu_absent"].startswith("no FLOPs per token")
    assert by["no-work"]["mfu_absent"] == "the log records no step work and no model"
    given = CliRunner().invoke(
        main, ["jobs", str(store), "--json", "--peak-flops", "2e15", "--devices", "4"]
    )
    mfu = {r["job"]: r["mfu"] for r in json.loads(given.output)}
    assert mfu[JOB] == pytest.approx(3.2016417096204288e15 / 8e15)  # 40.0 % of 4 x 2 PFLOP/s
    table = CliRunner().invoke(main, ["jobs", str(store)], env={"COLUMNS": "120"}).output
    head = next(line for line in table.splitlines() if "goodput" in line).split()
    assert head[head.index("observed") + 1 : head.index("observed") + 3] == ["MFU", "MPG"]
    line = next(line for line in table.splitlines() if line.split()[:1] == [JOB])
    assert "40.4%" in line and "23.8%" in line
    assert (
        "no-model: no MFU: no FLOPs per token; peak FLOP/s unknown, MFU omitted; number of" in table
    )
    narrow = CliRunner().invoke(main, ["jobs", str(store)], env={"COLUMNS": "80"}).output
    assert max(len(line.rstrip()) for line in narrow.splitlines()) <= 80
    assert "…" not in narrow and "MFU and MPG: a console of 110 columns, or --json" in narrow
    # compare: the worked example against itself without its model event
    run = CliRunner().invoke(main, ["compare", "--store", str(store), JOB, "no-model", "--json"])
    doc = json.loads(run.stdout)
    assert doc["a"]["mfu"] == pytest.approx(MFU) and doc["b"]["mfu"] is None
    assert doc["b"]["mfu_absent"].startswith("no FLOPs per token")
    assert doc["mfu_difference"] is None and doc["mpg_difference"] is None
    text = (
        CliRunner()
        .invoke(main, ["compare", "--store", str(store), JOB, JOB], env={"COLUMNS": "120"})
        .output
    )
    mfu_row = next(line for line in text.splitlines() if line.split()[:1] == ["MFU"])
    assert mfu_row.split() == ["MFU", "40.4%", "40.4%", "+0.0", "pp"]
    mpg_row = next(line for line in text.splitlines() if line.split()[:1] == ["MPG"])
    assert mpg_row.split()[1:3] == ["23.8%", "23.8%"]


VIEWS = (
    ["report", "{log}"],
    ["watch", "{log}"],
    ["jobs", "{store}"],
    ["compare", "{log}", "{log}"],
    ["export", "csv", "{log}", "{out}"],
    ["export", "trace", "{log}", "{out}/t.json"],
    ["monitor", "{log}", "--once"],
)


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: " ".join(v[:2]).replace(" {log}", ""))
def test_every_view_takes_peak_flops_and_devices(tmp_path: Path, view: list[str]) -> None:
    from click.testing import CliRunner

    from _program_job import write_llama
    from badput.cli import main

    log = write_llama(tmp_path / "logs")
    paths = {"log": str(log), "store": str(tmp_path / "logs"), "out": str(tmp_path / "out")}
    args = [a.format(**paths) for a in view]
    assert (
        "--peak-flops"
        in CliRunner().invoke(main, [*args[: 2 if view[0] == "export" else 1], "--help"]).output
    )
    for bad in ("nan", "inf", "0", "-1", "x"):
        run = CliRunner().invoke(main, [*args, "--peak-flops", bad])
        assert run.exit_code == 2 and "--peak-flops" in run.output, (bad, run.output)
    run = CliRunner().invoke(main, [*args, "--devices", "0"])
    assert run.exit_code == 2 and "--devices" in run.output


def test_the_docs_examples_are_these_outputs(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from _program_job import write_llama
    from badput.cli import main

    page = (Path(__file__).parent.parent / "docs" / "program-goodput.md").read_text()
    log = write_llama(tmp_path / "logs")
    assert (
        CliRunner().invoke(main, ["export", "csv", str(log), str(tmp_path / "csv")]).exit_code == 0
    )
    for name in ("program.csv", "program_attempts.csv"):
        for line in (tmp_path / "csv" / name).read_text().splitlines():
            assert "samples" in line.split(",")[0] or line in page, line
    m = llama_snapshot().mfu_over_time
    assert m is not None
    text = " ".join(page.split())
    assert (
        f"{100 * m.rolling[79]:.1f} % in the window of {m.rolling_seconds:.1f} s that ends at "
        f"{m.t[79]:,.1f} s" in text
    )  # 30.9 % in the window of 141.7 s that ends at 1,133.3 s
    run = CliRunner().invoke(main, ["monitor", str(log), "--once"])
    assert run.output.split(": ", 1)[1] in page  # the status line
