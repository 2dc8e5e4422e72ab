"""The report views: human durations, the rich table, the JSON object (§8)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine import AttemptSummary, Diagnostic, Report, StepCounts
from badput.report import format_duration, format_percent, format_ts, render_table, to_json
from badput.report._json import _finite, dumps_finite

MIN = 60.0
T0 = 1_732_000_000.0  # 2024-11-19T07:06:40Z


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (-0.0, "0s"),
        (0.0004, "<1ms"),
        (0.001, "1ms"),
        (0.35, "350ms"),
        (0.9994, "999ms"),
        (0.9996, "1.0s"),
        (1.0, "1.0s"),
        (45.2, "45.2s"),
        (59.94, "59.9s"),
        (59.96, "1m 00s"),
        (60.0, "1m 00s"),
        (185.0, "3m 05s"),
        (185.4, "3m 05s"),
        (3599.4, "59m 59s"),
        (3599.6, "1h 00m"),
        (3600.0, "1h 00m"),
        (3 * 3600 + 12 * 60, "3h 12m"),
        (3 * 3600 + 12 * 60 + 29, "3h 12m"),
        (86399.0, "1d 0h"),
        (2 * 86400 + 4 * 3600, "2d 4h"),
        (40 * 86400, "40d 0h"),
        (-45.2, "-45.2s"),
        (-(3 * 3600 + 12 * 60), "-3h 12m"),
        (math.nan, "n/a"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_percent_and_ts() -> None:
    assert format_percent(0.8123) == "81.2%"
    assert format_percent(0.125, digits=2) == "12.50%"
    assert format_percent(math.nan) == "n/a"
    assert format_ts(T0) == "2024-11-19T07:06:40.000Z"
    assert format_ts(T0 + 0.25, millis=False) == "2024-11-19T07:06:40Z"
    assert format_ts(math.nan) == "n/a"


def worked_example_report(**overrides: object) -> Report:
    """ACCOUNTING.md §7 as the engine reports it (built by hand)."""
    fields: dict[str, object] = {
        "job": "worked-example",
        "start": T0,
        "end": T0 + 200 * MIN,
        "end_reason": "job_end",
        "total_seconds": 200 * MIN,
        "goodput": 0.5,
        "observed_goodput": 0.625,
        "buckets": {
            "wasted": 40 * MIN,
            "slowdown": 25 * MIN,
            "recovery": 15 * MIN,
            "productive": 100 * MIN,
            "checkpoint_restore": 10 * MIN,
            "checkpoint_save": 10 * MIN,
        },
        "overlapped": {"data_loading": 42.0},
        "at_risk_seconds": 0.0,
        "ideal_step_time": 120.0,
        "ideal_step_time_source": "configured",
        "attempts": [
            AttemptSummary(
                id="0",
                start=T0,
                end=T0 + 100 * MIN,
                end_reason="attempt_end:failed",
                restore_step=25,
                first_step=26,
                last_step=70,
                status="failed",
                exit_code=1,
            ),
            AttemptSummary(
                id="1",
                start=T0 + 115 * MIN,
                end=T0 + 200 * MIN,
                end_reason="job_end",
                restore_step=50,
                first_step=51,
                last_step=75,
                status="completed",
            ),
        ],
        "steps": StepCounts(kept=50, wasted=20, last=75),
        "diagnostics": [],
    }
    fields.update(overrides)
    return Report(**fields)  # type: ignore[arg-type]


def rendered(report: Report, width: int = 120) -> str:
    from rich.console import Console

    console = Console(record=True, width=width, color_system=None)
    render_table(report, console=console)
    return console.export_text()


def row(text: str, name: str) -> str:
    """The table line of bucket ``name``."""
    for line in text.splitlines():
        if re.match(rf"\s*{re.escape(name)}\s", line):
            return line
    raise AssertionError(f"no row {name!r} in:\n{text}")


def test_table_shows_header_buckets_and_percentages() -> None:
    text = rendered(worked_example_report())
    assert "worked-example" in text
    assert "2024-11-19T07:06:40.000Z → 2024-11-19T10:26:40.000Z" in text
    assert "(3h 20m)" in text
    assert "job_end (status: completed)" in text
    assert re.search(r"goodput\s+50\.0%", text)
    assert re.search(r"observed goodput\s+62\.5%", text)
    expected = {
        "productive": ("1h 40m", "50.0%"),
        "wasted": ("40m 00s", "20.0%"),
        "slowdown": ("25m 00s", "12.5%"),
        "recovery": ("15m 00s", "7.5%"),
        "checkpoint_restore": ("10m 00s", "5.0%"),
        "checkpoint_save": ("10m 00s", "5.0%"),
        "total": ("3h 20m", "100.0%"),
    }
    for name, (duration, pct) in expected.items():
        line = row(text, name)
        assert duration in line, line
        assert pct in line, line
    # Bars proportional to the share (20 cells = 100%).
    assert row(text, "productive").count("█") == 10
    assert row(text, "wasted").count("█") == 4


def test_buckets_ordered_productive_first_then_by_size() -> None:
    text = rendered(worked_example_report())
    order = [
        "productive",
        "wasted",
        "slowdown",
        "recovery",
        "checkpoint_restore",
        "checkpoint_save",
        "total",
    ]
    positions = [text.index(row(text, name)) for name in order]
    assert positions == sorted(positions)


def test_zero_buckets_are_left_out() -> None:
    report = worked_example_report(
        buckets={"productive": 100 * MIN, "wasted": 100 * MIN, "startup": 0.0, "queued": 0.0}
    )
    text = rendered(report)
    assert "startup" not in text
    assert "queued" not in text


def test_bucket_descriptions_on_wide_consoles_only() -> None:
    wide = rendered(worked_example_report(), width=140)
    narrow = rendered(worked_example_report(), width=80)
    assert "down between attempts" in wide
    assert "down between attempts" not in narrow
    assert "15m 00s" in narrow


def test_attempts_steps_ideal_overlapped_at_risk() -> None:
    text = rendered(worked_example_report(at_risk_seconds=330.0))
    lines = text.splitlines()
    a0 = next(line for line in lines if line.strip().startswith("0 "))
    assert "2024-11-19T07:06:40Z" in a0
    assert "1h 40m" in a0
    assert "attempt_end:failed (exit 1)" in a0
    assert re.search(r"25\s+26\s+70", a0)
    a1 = next(line for line in lines if line.strip().startswith("1 "))
    assert "1h 25m" in a1
    assert "job_end" in a1
    assert re.search(r"50\s+51\s+75", a1)
    assert "kept 50, wasted 20, last 75" in text
    assert "2m 00s (configured)" in text
    assert "data_loading 42.0s" in text
    assert "non-blocking" in text
    assert re.search(r"at risk\s+5m 30s", text)


def many_attempts_report(n: int) -> Report:
    attempts = [
        AttemptSummary(
            id=str(i),
            start=T0 + i * MIN,
            end=T0 + i * MIN + 30.0,
            end_reason="attempt_end:failed" if i < n - 1 else "job_end",
            restore_step=None,
            first_step=10 * i + 1,
            last_step=10 * i + 10,
            status="failed" if i < n - 1 else "completed",
        )
        for i in range(n)
    ]
    return worked_example_report(attempts=attempts, end=T0 + n * MIN)


def attempt_ids(text: str) -> list[str]:
    """The id column of the attempts table (its rows start with an id or the gap)."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("Attempts"))
    out: list[str] = []
    for line in lines[top + 4 :]:
        if not line.strip():
            break
        out.append(line.split()[0])
    return out


def test_many_attempts_list_the_first_and_the_last_around_a_gap() -> None:
    text = rendered(many_attempts_report(25))
    ids = attempt_ids(text)
    assert ids == [*map(str, range(10)), "…", *map(str, range(15, 25))]
    gap = next(line for line in text.splitlines() if line.strip().startswith("…"))
    assert "5 more" in gap
    assert "5 of 25 attempts not listed (--attempts all lists them" in text


@pytest.mark.parametrize(("limit", "head", "tail"), [(1, 1, 0), (4, 2, 2), (5, 3, 2)])
def test_attempt_rows_limit(limit: int, head: int, tail: int) -> None:
    from rich.console import Console

    console = Console(record=True, width=120, color_system=None)
    render_table(many_attempts_report(9), console=console, attempts=limit)
    ids = attempt_ids(console.export_text())
    assert ids == [*map(str, range(head)), "…", *map(str, range(9 - tail, 9))]


def test_every_attempt_when_asked_or_when_few() -> None:
    from rich.console import Console

    console = Console(record=True, width=120, color_system=None)
    render_table(many_attempts_report(25), console=console, attempts=None)
    assert attempt_ids(console.export_text()) == list(map(str, range(25)))
    assert attempt_ids(rendered(many_attempts_report(20))) == list(map(str, range(20)))
    assert "not listed" not in rendered(many_attempts_report(20))


def test_ideal_step_time_sources() -> None:
    est = rendered(worked_example_report(ideal_step_time=0.031, ideal_step_time_source="estimated"))
    assert "31ms (estimated (best sustained))" in est
    none = rendered(worked_example_report(ideal_step_time=None, ideal_step_time_source=None))
    assert "no estimate: fewer than 5 clean steps" in none


def test_crashed_log_says_so_and_lists_diagnostics() -> None:
    report = worked_example_report(
        end_reason="last_event",
        diagnostics=[
            Diagnostic("unpaired_end", "checkpoint_save_end without a start", "0/h-0-1.jsonl", 12),
            Diagnostic("no_job_end", "the log ends without job_end"),
            Diagnostic("bad_line", "not JSON", "x.jsonl"),
        ],
    )
    text = rendered(report)
    assert "without job_end" in text
    assert "crashed or still running" in text
    assert "0/h-0-1.jsonl:12: [unpaired_end] checkpoint_save_end without a start" in text
    assert "[no_job_end] the log ends without job_end" in text
    assert "x.jsonl: [bad_line] not JSON" in text
    assert "Diagnostics (3)" in text


def test_live_and_windowed_reports() -> None:
    live = rendered(worked_example_report(end_reason="now"))
    assert "still running" in live
    windowed = rendered(
        worked_example_report(
            window=(T0 + 50 * MIN, T0 + 150 * MIN),
            total_seconds=100 * MIN,
            buckets={"productive": 60 * MIN, "wasted": 40 * MIN},
        )
    )
    assert "2024-11-19T07:56:40.000Z → 2024-11-19T09:36:40.000Z" in windowed
    assert re.search(r"productive\s+1h 00m\s+60\.0%", windowed)


def test_empty_report_renders() -> None:
    text = rendered(
        worked_example_report(
            total_seconds=0.0,
            end=T0,
            buckets={},
            goodput=0.0,
            observed_goodput=0.0,
            attempts=[],
            steps=StepCounts(0, 0, None),
        )
    )
    assert "no time to account for" in text
    assert "kept 0, wasted 0, last -" in text


def test_to_json_is_the_report_dict() -> None:
    report = worked_example_report()
    data = json.loads(to_json(report))
    assert data == json.loads(json.dumps(report.to_dict()))
    assert data["goodput"] == 0.5
    assert data["buckets"]["productive"] == 6000.0
    assert data["attempts"][0]["exit_code"] == 1
    assert data["steps"] == {"kept": 50, "wasted": 20, "last": 75}
    assert data["ideal_step_time_source"] == "configured"
    assert data["window"] is None
    compact = to_json(report, indent=None)
    assert "\n" not in compact
    assert json.loads(compact) == data


def test_to_json_never_writes_nan() -> None:
    report = worked_example_report(goodput=math.nan, overlapped={"data_loading": math.inf})
    data = json.loads(to_json(report))
    assert data["goodput"] is None
    assert data["overlapped"]["data_loading"] is None


def test_report_views_do_not_load_rich_until_a_table_is_rendered() -> None:
    code = "import sys, badput.report; assert 'rich' not in sys.modules, 'rich imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
    code = "import sys, badput; assert 'badput.report' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- The JSON text: the standard library's, written faster --------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)  # control characters, non-ASCII, quotes and brackets included
)
_keys = st.text(max_size=6) | st.integers(-5, 5) | st.booleans() | st.none() | st.floats(-2, 2)
_json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_keys, inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(value=_json_values, indent=st.sampled_from([None, 0, 1, 2, 4]))
def test_json_text_is_the_standard_librarys_with_nonfinite_as_null(
    value: object, indent: int | None
) -> None:
    """Fails if the C-encoded flat containers are joined or indented differently from
    ``json.dumps(indent=...)``, or a NaN or infinity escapes as ``NaN``/``Infinity``."""
    expected = json.dumps(_finite(value), indent=indent, allow_nan=False)
    assert dumps_finite(value, indent=indent) == expected
    json.loads(expected)  # and it is JSON


def test_json_text_of_a_report_of_many_attempts_equals_the_standard_librarys() -> None:
    report = many_attempts_report(300)
    text = to_json(report)
    assert text == json.dumps(report.to_dict(), indent=2, allow_nan=False)
    assert json.loads(text)["attempts"][299]["id"] == "299"


def test_json_text_rejects_what_the_standard_library_rejects() -> None:
    with pytest.raises(TypeError):
        dumps_finite({"a": {object(): 1, "b": [1]}})
    with pytest.raises(TypeError):
        dumps_finite({"a": [object()]})


def test_report_dict_is_the_dataclass_fields_in_order() -> None:
    """``to_dict`` copies attempts without ``asdict``; the mapping must not change."""
    from dataclasses import asdict

    for report in (worked_example_report(), many_attempts_report(30)):
        expected = asdict(report)
        expected["buckets"] = dict(report.buckets)
        got = report.to_dict()
        assert got == expected
        assert list(got) == list(expected)
        assert [list(a) for a in got["attempts"]] == [list(a) for a in expected["attempts"]]
        got["attempts"][0]["id"] = "changed"  # a copy: the report is not changed
        assert report.attempts[0].id != "changed"
