"""``badput export csv``: the report as CSV files for spreadsheets and notebooks.

``buckets.csv`` (bucket, seconds, fraction, description), ``attempts.csv`` (one row
per attempt, with its restore point and wasted steps) and one ``steps_attempt_<i>.csv``
per attempt (``i`` its index in the report, never its id: file names carry no log
text); when the log records step work or a model (program goodput,
docs/program-goodput.md), ``program.csv`` (figure, value, unit, absent: one row per
figure, the reason where one is absent) and ``program_attempts.csv`` (tokens and
samples per attempt, and their rate). A report with a price per device-hour
(``report.cost``, docs/advice.md#cost) adds a ``cost`` column to ``buckets.csv`` and
``attempts.csv``: each bucket's and each attempt's time on the job's devices at that
price (no such column without a price). A text cell from the log that a spreadsheet
would take for a formula (starting with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return) is written with a leading ``'``.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from badput.engine import STEP_BUCKETS, Report, Snapshot, Timeline
from badput.report._output import open_output
from badput.report._table import bucket_description, ordered_buckets

__all__ = ["write_csv"]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _text(value: object) -> str:
    """A log string as an inert spreadsheet cell."""
    s = "" if value is None else str(value)
    return "'" + s if s.startswith(_FORMULA_START) else s


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


def wasted_steps(timeline: Timeline, attempts: int) -> list[int]:
    """Steps drawn as wasted per attempt, counted on its lowest rank."""
    steps = timeline.steps
    wasted = steps.bucket == STEP_BUCKETS.index("wasted")
    out = [0] * attempts
    seen: set[int] = set()
    for lane_index, lane in enumerate(timeline.lanes):
        if lane.attempt_index in seen:
            continue
        seen.add(lane.attempt_index)
        out[lane.attempt_index] = int(np.count_nonzero(wasted & (steps.lane == lane_index)))
    return out


def write_csv(snapshot: Snapshot, directory: str | os.PathLike[str]) -> list[Path]:
    """Write the CSV files of ``snapshot`` (made with ``drawing=True``: the steps are
    its timeline's) into ``directory`` (created); return their paths."""
    report = snapshot.report
    timeline = snapshot.drawn("the CSV files")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    return [
        _write_buckets(report, root / "buckets.csv"),
        _write_attempts(report, timeline, root / "attempts.csv"),
        *_write_steps(report, timeline, root),
        *_write_program(report, root),
    ]


#: The rows of ``program.csv``: each figure of :class:`~badput.engine.ProgramGoodput`
#: and its unit; those of :data:`~badput.engine.PROGRAM_FIGURES` say why when absent.
_PROGRAM_ROWS = (
    ("tokens", "1"),
    ("kept_tokens", "1"),
    ("samples", "1"),
    ("kept_samples", "1"),
    ("tokens_per_second", "1/s"),
    ("productive_tokens_per_second", "1/s"),
    ("samples_per_second", "1/s"),
    ("productive_samples_per_second", "1/s"),
    ("flops_per_token", "FLOP"),
    ("devices", "1"),
    ("peak_flops", "FLOP/s"),
    ("mfu_productive", "ratio"),
    ("mfu_job", "ratio"),
    ("scheduling_goodput", "ratio"),
    ("runtime_goodput", "ratio"),
    ("program_goodput", "ratio"),
    ("mpg", "ratio"),
)


def _write_program(report: Report, root: Path) -> list[Path]:
    """``program.csv`` and ``program_attempts.csv``, when the report has a program."""
    p = report.program
    if p is None:
        return []
    table, attempts = root / "program.csv", root / "program_attempts.csv"
    with open_output(table, newline="") as f:
        w = csv.writer(f)
        w.writerow(["figure", "value", "unit", "absent"])
        for name, unit in _PROGRAM_ROWS:
            value = getattr(p, name)
            why = "" if value is not None else p.reason(name)
            w.writerow([name, "" if value is None else repr(value), unit, _text(why)])
    with open_output(attempts, newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "id", "tokens", "samples", "seconds", "tokens_per_second",
                    "samples_per_second"])  # fmt: skip
        for i, a in enumerate(p.attempts):
            w.writerow([i, _text(a.id), a.tokens, a.samples, repr(a.seconds),
                        _rate(a.tokens_per_second), _rate(a.samples_per_second)])  # fmt: skip
    return [table, attempts]


def _rate(value: float | None) -> str:
    return "" if value is None else repr(value)


def _money(report: Report, seconds: float) -> list[str]:
    """The ``cost`` cell of ``seconds`` of the job's time: none without a price."""
    return [] if report.cost is None else [repr(report.cost.money(seconds))]


def _write_buckets(report: Report, path: Path) -> Path:
    total = report.total_seconds
    with open_output(path, newline="") as f:
        w = csv.writer(f)
        w.writerow(["bucket", "seconds", "fraction", "description", *_cost_head(report)])
        for name, seconds in ordered_buckets(report.buckets):
            fraction = seconds / total if total > 0 else 0.0
            w.writerow([_text(name), repr(seconds), repr(fraction), bucket_description(name),
                        *_money(report, seconds)])  # fmt: skip
    return path


def _cost_head(report: Report) -> list[str]:
    return [] if report.cost is None else ["cost"]


_ATTEMPT_COLUMNS = [
    "index",
    "id",
    "start",
    "end",
    "seconds",
    "end_reason",
    "status",
    "exit_code",
    "restore_step",
    "first_step",
    "last_step",
    "wasted_steps",
]


def _write_attempts(report: Report, timeline: Timeline, path: Path) -> Path:
    wasted = wasted_steps(timeline, len(report.attempts))
    with open_output(path, newline="") as f:
        w = csv.writer(f)
        w.writerow([*_ATTEMPT_COLUMNS, *_cost_head(report)])
        for i, a in enumerate(report.attempts):
            w.writerow(
                [
                    i,
                    _text(a.id),
                    repr(a.start),
                    repr(a.end),
                    repr(a.end - a.start),
                    _text(a.end_reason),
                    _text(a.status),
                    _opt(a.exit_code),
                    _opt(a.restore_step),
                    _opt(a.first_step),
                    _opt(a.last_step),
                    wasted[i],
                    *_money(report, a.end - a.start),
                ]
            )
    return path


def _write_steps(report: Report, timeline: Timeline, root: Path) -> list[Path]:
    """One file of steps per attempt."""
    written = []
    steps = timeline.steps
    lane_attempt = np.array([ln.attempt_index for ln in timeline.lanes] or [0], np.int64)
    lane_rank = np.array([ln.rank if ln.rank is not None else 0 for ln in timeline.lanes] or [0])
    attempt_of = lane_attempt[steps.lane] if len(steps) else np.zeros(0, np.int64)
    for i in range(len(report.attempts)):
        path = root / f"steps_attempt_{i}.csv"
        sel = np.flatnonzero(attempt_of == i)
        with open_output(path, newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "rank", "start", "end", "own_seconds", "bucket", "ended"])
            for k in sel:
                w.writerow(
                    [
                        int(steps.step[k]),
                        int(lane_rank[steps.lane[k]]),
                        repr(float(steps.start[k])),
                        repr(float(steps.end[k])),
                        repr(float(steps.own[k])),
                        STEP_BUCKETS[int(steps.bucket[k])],
                        int(bool(steps.closed[k])),
                    ]
                )
        written.append(path)
    return written
