"""`badput report --html` without a browser: the data the page carries, escaping, aggregation."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from _views_jobs import (
    HOSTILE_ATTEMPT,
    HOSTILE_EVAL,
    HOSTILE_HOST,
    HOSTILE_JOB,
    write_hostile_job,
    write_long_job,
    write_two_rank_job,
)
from badput.analysis import LiveJob
from badput.cli import main
from badput.engine import STEP_BUCKETS
from badput.report import html_report
from badput.report._html import (
    MAX_POINTS,
    MAX_SPANS_PER_LANE,
    _json_for_script,
)

SAFE_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "div", "span",
    "section", "p", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "footer", "script",
}  # fmt: skip


def parse_elements(page: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Every element a browser's parser would build (script contents are not markup)."""
    found: list[tuple[str, list[tuple[str, str | None]]]] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found.append((tag, attrs))

    Collect().feed(page)
    return found


def page_data(page: str) -> dict:  # type: ignore[type-arg]
    m = re.search(r'<script type="application/json" id="badput-data">(.*?)</script>', page, re.S)
    assert m is not None
    return json.loads(m.group(1))  # type: ignore[no-any-return]


def live(source: Path, job: str | None = None) -> LiveJob:
    lj = LiveJob(source, job)
    lj.update()
    return lj


def test_two_rank_job_has_a_lane_per_attempt_and_rank(tmp_path: Path) -> None:
    lj = live(write_two_rank_job(tmp_path))
    report = lj.report()
    page = html_report(lj.accountant.snapshot(report=report, drawing=True))
    data = page_data(page)
    labels = [lane["label"] for lane in data["lanes"]]
    assert labels == [
        "job",
        "attempt 0 rank 0",
        "attempt 0 rank 1",
        "attempt 1 rank 0",
        "attempt 1 rank 1",
    ]
    assert data["shown"] == [
        "productive",
        "recovery",
        "wasted",
        "accelerator_init",
        "checkpoint_restore",
        "custom:eval",
        "startup",
        "checkpoint_save",
        "untracked",  # rank 1's last 0.5 s after rank 0's end: the job ends at the last job_end
    ]
    names = [b["name"] for b in data["buckets"]]
    # rank 0, attempt 0: a slow first step (startup), 19 kept, 13 redone after the restore
    lane = data["spans"][0]["base"]
    drawn = "".join(names[b][0] for b in lane["b"])
    assert drawn == "s" + "p" * 19 + "w" * 13
    assert lane["s"][:3] == [1, 2, 3]
    top = data["spans"][0]["top"]
    assert [names[b] for b in top["b"]] == ["accelerator_init", "checkpoint_save", "custom:eval"]
    assert top["x1"][0] - top["x0"][0] == pytest.approx(5.0)
    # attempts table: restore point and wasted steps
    rows = re.findall(r"<tr>(.*?)</tr>", page.split('id="attempts"')[1], re.S)
    cells = [re.findall(r"<td>(.*?)</td>", r) for r in rows if "<td>" in r]
    assert [c[0] for c in cells] == ["0", "1"]
    assert cells[0][3] == "attempt_end:crashed (exit 137)"
    assert cells[1][4:8] == ["20", "21", "40", "0"]
    assert cells[0][7] == "13"
    # the headline
    assert f'id="goodput">{report.goodput * 100:.1f}%<' in page
    assert 'id="at-risk">0s<' in page


def test_cumulative_goodput_ends_at_the_report_goodput(tmp_path: Path) -> None:
    lj = live(write_two_rank_job(tmp_path))
    report = lj.report()
    series = lj.accountant.goodput_over_time(report, bins=80)
    assert len(series.t) == 80
    assert series.t[-1] == pytest.approx(report.end, abs=1e-3)
    assert series.cumulative[-1] == pytest.approx(report.goodput, abs=1e-4)
    assert series.observed[-1] == pytest.approx(report.observed_goodput, abs=1e-4)
    values = [v for v in series.rolling if v is not None]
    assert min(values) == 0.0  # the window inside the recovery gap
    assert max(values) == pytest.approx(1.0)  # a window of clean kept steps only


def test_every_log_string_is_escaped(tmp_path: Path) -> None:
    write_hostile_job(tmp_path)
    lj = live(tmp_path, HOSTILE_JOB)
    page = html_report(lj.snapshot(drawing=True))
    # exactly our three script elements, and no attribute smuggled in
    assert len(re.findall(r"<script", page, re.I)) == 3
    assert len(re.findall(r"</script", page, re.I)) == 3
    for raw in (HOSTILE_JOB, HOSTILE_EVAL, HOSTILE_HOST, HOSTILE_ATTEMPT):
        assert raw not in page
    elements = parse_elements(page)
    assert not [(tag, a) for tag, attrs in elements for a, _ in attrs if a.startswith("on")]
    assert {tag for tag, _ in elements} <= SAFE_TAGS
    assert "&lt;svg onload=&quot;window.pwned=&#x27;job&#x27;&quot;&gt;" in page
    # the JSON carries the names intact
    data = page_data(page)
    assert data["job"] == HOSTILE_JOB
    assert f"custom:{HOSTILE_EVAL}" in [b["name"] for b in data["buckets"]]
    assert any(HOSTILE_HOST in lane.get("full", "") for lane in data["lanes"])
    assert data["attempts"][1]["id"] == HOSTILE_ATTEMPT
    # the page allows only its own two scripts, by hash, and fetches nothing
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert csp is not None
    assert "default-src &#x27;none&#x27;" in csp.group(1)
    assert csp.group(1).count("sha256-") == 2
    assert (
        "http://" not in page.split("<script>")[0] and "https://" not in page.split("<script>")[0]
    )


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_embedded_json_never_closes_its_element(value: object) -> None:
    text = _json_for_script(value)
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == value


def test_a_long_job_is_binned_and_keeps_its_totals(tmp_path: Path) -> None:
    steps = 6000
    lj = live(write_long_job(tmp_path, steps))
    report = lj.report()
    timeline = lj.accountant.timeline(report)
    data = page_data(html_report(lj.accountant.snapshot(report=report, drawing=True)))
    (lane,) = data["spans"]
    assert lane["binned"] is True
    assert len(lane["base"]["x0"]) <= MAX_SPANS_PER_LANE
    # the bins hold every step once, and every step's own time and data loading
    assert sum(lane["base"]["n"]) == steps
    assert min(lane["base"]["s0"]) == 1 and max(lane["base"]["s1"]) == steps
    names = [b["name"] for b in data["buckets"]]
    shares = np.array(lane["base"]["sh"]).sum(axis=0)
    assert shares[names.index("data_loading")] == pytest.approx(steps * 0.01, rel=1e-3)
    own = float(timeline.steps.own.sum())
    step_share = sum(shares[names.index(b)] for b in STEP_BUCKETS)
    assert step_share == pytest.approx(own, rel=1e-3)
    # 6000 step times are more points than MAX_POINTS: median and max per bin
    assert data["stepTime"]["binned"] is True
    assert len(data["stepTime"]["t"]) <= MAX_POINTS
    assert max(data["stepTime"]["max"]) == pytest.approx(0.3)
    assert min(data["stepTime"]["y"]) == pytest.approx(0.1)


def test_cli_writes_the_page(tmp_path: Path) -> None:
    job_dir = write_two_rank_job(tmp_path)
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(job_dir), "--html", str(out)])
    assert result.exit_code == 0, result.output
    assert "Where the time went" in result.output  # the table is still printed
    page = out.read_text(encoding="utf-8")
    assert page_data(page)["job"] == "two-ranks"
    bad = CliRunner().invoke(main, ["report", str(job_dir), "--html", str(tmp_path / "no" / "x")])
    assert bad.exit_code != 0
    assert "cannot write" in bad.output


def test_stragglers_and_stalls_section_is_escaped_and_formatted() -> None:
    """Reports of multi-rank jobs carry stragglers and stalls: the page lists them."""
    from dataclasses import dataclass
    from types import SimpleNamespace

    from badput.report._html import _ranks_section

    @dataclass
    class Straggler:
        rank: int
        host: str
        section: str
        relative_score: float
        recent_seconds: float

    @dataclass
    class Stall:
        start: float
        seconds: float
        first_stopped: list[int]

    report = SimpleNamespace(
        stragglers=[Straggler(3, "<b onclick=x>h</b>", "step", 0.61234, 2.5)],
        stalls=[Stall(1_732_000_000.0, 125.0, [3, 5])],
    )
    html_text = _ranks_section(report)  # type: ignore[arg-type]
    assert "<b onclick" not in html_text and "&lt;b onclick=x&gt;h&lt;/b&gt;" in html_text
    assert "<td>0.612</td>" in html_text and "<td>2.5s</td>" in html_text
    assert "<td>2024-11-19T07:06:40Z</td>" in html_text and "<td>2m 05s</td>" in html_text
    assert "<td>3, 5</td>" in html_text
    assert _ranks_section(SimpleNamespace(stragglers=[], stalls=[])) == ""  # type: ignore[arg-type]


def test_a_hung_multi_rank_job_shows_rank_lanes_stragglers_and_the_stall() -> None:
    from badput.engine import Accountant
    from test_rank_exports import NOW
    from test_rank_exports import snapshot as ranks_snapshot
    from test_ranks import hung_job

    snap = ranks_snapshot()
    acc = Accountant("j")
    for i, events in enumerate(hung_job(stall=90.0)[:-1]):  # still hung: no attempt_end
        acc.ingest_events(events, source=f"r{i}")
    report = acc.report(now=NOW)
    assert len(report.stalls) == len(snap.report.stalls) == 1
    page = html_report(acc.snapshot(report=report, drawing=True))
    data = page_data(page)
    ranks = sorted({lane["label"] for lane in data["lanes"][1:]})
    assert len(ranks) == len({r.rank for r in report.ranks}) >= 3  # a lane per rank
    assert all(" rank " in label for label in ranks)
    assert "<h3>Stalls (1)</h3>" in page
    stall_row = page.split('id="stalls"')[1].split("</table>")[0]
    assert "<td>2</td>" in stall_row  # rank 2 stopped first
    # the hung last steps (no step_end) are drawn a typical step long, as the report counts
    # them; the 90 s after them are untracked, not one long slow step
    steps = acc.timeline(report).steps
    hung = ~steps.closed
    assert hung.sum() == len(ranks)
    assert (steps.end - steps.start)[hung] == pytest.approx(1.0)
    assert all(STEP_BUCKETS[b] == "productive" for b in steps.bucket[hung])


def test_control_characters_of_a_name_are_shown_as_escapes_and_no_span_is_1970(
    tmp_path: Path,
) -> None:
    job = "evil\x1b]0;title\x07\x1b[2J"
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps({"ts": 1.0e9, "kind": "job_start", "job": job}) + "\n")
    lj = live(path)
    page = html_report(
        lj.accountant.snapshot(report=lj.report(now=0.0), drawing=True)
    )  # before its only event: empty
    assert "\x1b" not in page and "\x07" not in page
    assert "<title>badput: evil\\x1b]0;title\\x07\\x1b[2J</title>" in page
    assert page_data(page)["job"] == job  # the data keeps the name as it is
    assert "1970" not in page.split("<script")[0]
    assert "no span: no events to account for" in page
