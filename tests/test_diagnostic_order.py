"""A report's diagnostics are in one order, whatever reads met them in.

Ingest-time diagnostics (malformed lines, unknown kinds, clock steps back, events of another
job, steps out of range) are listed by place in the job: each code's first by file and line,
the codes in the order of their first. A read meets them batch by batch (a JSON-lines read:
its slices of bytes; a parallel read: its parts; an archive: its row groups), so a listing in
the order they were met would differ from read to read (docs/events.md#validating-a-file).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from badput import analysis
from badput.events import Event
from badput.formats.codec import encode_lines
from badput.report import to_json
from badput.store import ARCHIVE_NAME, compact, open_source
from badput.store import _archive as archive_store
from badput.store import _reading as store_reading
from test_engine_properties import event_logs

pytest.importorskip("pyarrow")

#: Damage put among a log's lines: each gives one kind of ingest-time diagnostic or more.
DAMAGE = ["malformed", "unknown_kind", "clock_backwards", "foreign_job", "step_out_of_range"]
MALFORMED = [b'{"ts": 1', b"not json at all", b'{"ts": "soon", "kind": "step_start", "job": "p"}']


def damaged_line(what: str, near: Event, rnd: random.Random) -> bytes:
    """A line of damage ``what`` for a file whose line before (or after) is ``near``."""
    if what == "malformed":
        return rnd.choice(MALFORMED)
    fields: dict[str, object] = {"ts": near.ts, "kind": "step_start", "job": "p"}
    if near.attempt is not None:
        fields["attempt"] = near.attempt
    if near.rank is not None:
        fields["rank"] = near.rank
    fields["step"] = 0
    if what == "unknown_kind":
        fields["kind"] = rnd.choice(["future_a", "future_b", "future_c"])
    elif what == "clock_backwards":
        fields["kind"] = "future_a"
        fields["ts"] = near.ts - 100.0
    elif what == "foreign_job":
        fields["job"] = rnd.choice(["q", "r"])
    else:  # a step beyond 64 bits
        fields["step"] = 2**70
    return json.dumps(fields).encode()


def damaged_log(events: list[Event], rnd: random.Random, one_file: bool) -> dict[str, bytes]:
    """The events in one file per (attempt, rank), or all in one file (ranks mixed: a batch
    meets their rare events stream by stream), with damage put among their lines and now
    and then a torn last line."""
    files: dict[str, list[tuple[bytes, Event]]] = {}
    for e in events:
        if one_file:
            rel = "all.jsonl"
        else:
            rel = f"{e.attempt if e.attempt is not None else 'x'}/h-{e.rank}-1.jsonl"
        files.setdefault(rel, []).append((encode_lines([e]).rstrip(b"\n"), e))
    out: dict[str, bytes] = {}
    for rel, lines in files.items():
        text = [line for line, _ in lines]
        for _ in range(rnd.randint(0, 6)):
            at = rnd.randint(0, len(lines))
            near = lines[max(0, at - 1)][1]
            text.insert(at + len(text) - len(lines), damaged_line(rnd.choice(DAMAGE), near, rnd))
        out[rel] = b"\n".join(text) + b"\n" + (b'{"ts": 17' if rnd.random() < 0.2 else b"")
    return out


def report_of(job_dir: Path, *, parallel: bool) -> str:
    return to_json(analysis.analyze(job_dir, "p", parallel=parallel))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    events=event_logs(),
    seed=st.integers(0, 2**32 - 1),
    one_file=st.booleans(),
    slice_bytes=st.sampled_from([64, 300, 4096]),
    parallel=st.booleans(),
    archive_slice=st.sampled_from([1, 200, None]),
)
@example(  # two codes whose first lines a 300-byte read meets in the other order
    events=[
        Event(ts=1_700_000_000.0 + i, kind=k, job="p", step=i // 2, attempt=0, rank=0)
        for i, k in enumerate(["step_start", "step_end"] * 10)
    ],
    seed=5,
    one_file=True,
    slice_bytes=300,
    parallel=False,
    archive_slice=1,
)
def test_diagnostics_are_the_same_however_the_job_is_read(  # noqa: PLR0917 (hypothesis)
    tmp_path_factory: pytest.TempPathFactory,
    events: list[Event],
    seed: int,
    one_file: bool,
    slice_bytes: int,
    parallel: bool,
    archive_slice: int | None,
) -> None:
    """Any log with damage of several kinds: the JSON report (its diagnostics and all) read
    whole is the report read in slices of ``slice_bytes``, serially or shared with worker
    processes, and the report of its archive (compacted in slices of ``archive_slice``)."""
    job_dir = tmp_path_factory.mktemp("order") / "p"
    for rel, data in damaged_log(events, random.Random(seed), one_file).items():
        (job_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (job_dir / rel).write_bytes(data)
    expected = report_of(job_dir, parallel=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(analysis, "READ_SLICE_BYTES", slice_bytes)
        patch.setattr(store_reading, "READ_BLOCK", slice_bytes)
        patch.setattr(store_reading, "_FIRST_BLOCK", min(slice_bytes, 1024))
        patch.setattr(analysis, "PARALLEL_MIN_BYTES", 0)
        patch.setattr(analysis, "PARALLEL_MIN_BYTES_PER_ATTEMPT", 0)
        patch.setattr(analysis, "_workers", lambda: 2)
        assert report_of(job_dir, parallel=parallel) == expected
    with pytest.MonkeyPatch.context() as patch:
        if archive_slice is not None:
            patch.setattr(archive_store, "_SLICE_BYTES", archive_slice)
        compact(*open_source(job_dir))
    assert (job_dir / ARCHIVE_NAME).is_file()
    assert report_of(job_dir, parallel=False) == expected
    shutil.rmtree(job_dir)


def test_ingest_diagnostics_are_listed_by_file_and_line(tmp_path: Path) -> None:
    """An unknown kind (line 6), a clock step back (line 7, in another rank's file too) and a
    malformed line (line 32): listed in that order, each code's by file then line, read
    whole or 100 bytes at a time. A read in one batch met the malformed line first (the
    decoder's errors come before the batch's events), a read in slices the unknown kind."""
    job_dir = tmp_path / "p"
    for rank in (0, 1):
        steps = [
            Event(ts=1_700_000_000.0 + i, kind=kind, job="p", step=i // 2, attempt=0, rank=rank)
            for i, kind in enumerate(["step_start", "step_end"] * 20)
        ]
        lines = encode_lines(steps).split(b"\n")[:-1]
        lines.insert(30, b"not json")
        weird = {"ts": 1_700_000_005.5, "kind": "weird", "job": "p", "attempt": 0, "rank": rank}
        lines.insert(5, json.dumps(weird).encode())
        (job_dir / "0").mkdir(parents=True, exist_ok=True)
        (job_dir / f"0/h-{rank}-1.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    files = [str(job_dir / f"0/h-{rank}-1.jsonl") for rank in (0, 1)]
    expected = [
        ("unknown_kind", files[0], 6),
        ("clock_backwards", files[0], 7),
        ("clock_backwards", files[1], 7),
        ("malformed_line", files[0], 32),
        ("malformed_line", files[1], 32),
        ("no_job_end", None, None),
    ]
    whole = analysis.analyze(job_dir, "p", parallel=False)
    assert [(d.code, d.file, d.line) for d in whole.diagnostics] == expected
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(analysis, "READ_SLICE_BYTES", 100)
        patch.setattr(store_reading, "READ_BLOCK", 100)
        sliced = analysis.analyze(job_dir, "p", parallel=False)
    assert to_json(sliced) == to_json(whole)


def test_another_jobs_events_are_named_once_a_file_and_the_rest_counted(tmp_path: Path) -> None:
    """30 events of job q in a file of job p, in runs that malformed lines cut apart: the
    first named (line 2), the other 29 counted."""
    job_dir = tmp_path / "p"
    (job_dir / "0").mkdir(parents=True)
    ours = Event(ts=1_700_000_000.0, kind="job_start", job="p", attempt=0, rank=0)
    lines = [encode_lines([ours]).rstrip(b"\n")]
    for i in range(30):
        theirs = Event(ts=1_700_000_001.0 + i, kind="step_start", job="q", step=i, rank=0)
        lines.append(encode_lines([theirs]).rstrip(b"\n"))
        if i % 10 == 9:
            lines.append(b"not json")
    (job_dir / "0/h-0-1.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    report = analysis.analyze(job_dir, "p", parallel=False)
    foreign = [(d.line, d.message) for d in report.diagnostics if d.code == "foreign_job"]
    assert foreign == [
        (2, "event of job 'q' in the log of job 'p'; skipped"),
        (None, "... and 29 more foreign_job"),
    ]
