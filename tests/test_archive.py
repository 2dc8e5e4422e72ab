"""``badput compact``: a job's columnar archive, read by every reader as its JSON lines are.

What a report of the archive must be: byte for byte the JSON of the report of the JSON lines
it covers (events, malformed lines and their numbers, torn last lines), with whatever was
appended to the files after it; ``--replace`` loses nothing.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from _log_fuzz import make_case, write_case
from badput.analysis import LiveJob
from badput.cli import main
from badput.events import KIND_NAMES, STEP_KINDS, Chunk, Event, EventError
from badput.formats.archive import batch_of
from badput.formats.codec import decode_line, decoding_for_columns, encode_lines
from badput.store import ARCHIVE_NAME, ArchivedStore, compact, open_source, read_meta
from badput.store import _archive as archive_store
from test_engine_properties import event_logs

pytest.importorskip("pyarrow")

BAD_LINES = [
    b'{"ts": 1',  # truncated
    b"not json at all",
    b'{"ts": "soon", "kind": "step_start", "job": "p"}',  # wrong type
    b'{"ts": 1700000000.0, "kind": "step_start", "job": "p"}',  # no step
    b"",  # blank: skipped, counted
    b"   ",
    b"\xff\xfe{}",  # not UTF-8
]


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def report_json(path: Path) -> str:
    return invoke("report", "--json", str(path))


def write_files(job_dir: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = job_dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def append_files(job_dir: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = job_dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("ab") as f:
            f.write(data)


def jsonl_only(job_dir: Path) -> str:
    """The report of the JSON lines alone (the archive moved aside meanwhile)."""
    archive = job_dir / ARCHIVE_NAME
    aside = job_dir.parent / "aside.parquet"
    archive.rename(aside)
    try:
        return report_json(job_dir)
    finally:
        aside.rename(archive)


def log_files(events: list[Event], rnd: random.Random) -> dict[str, bytes]:
    """The events in one file per (attempt, rank), with malformed and blank lines put among
    them and now and then a torn last line."""
    files: dict[str, list[bytes]] = {}
    for e in events:
        rel = f"{e.attempt if e.attempt is not None else 'x'}/h-{e.rank}-1.jsonl"
        files.setdefault(rel, []).append(encode_lines([e]).rstrip(b"\n"))
    out: dict[str, bytes] = {}
    for rel, lines in files.items():
        for _ in range(rnd.randint(0, 3)):
            lines.insert(rnd.randint(0, len(lines)), rnd.choice(BAD_LINES))
        data = b"\n".join(lines) + b"\n"
        if rnd.random() < 0.2:
            data += rnd.choice([b'{"ts": 17', encode_lines(events[:1]).rstrip(b"\n")])
        out[rel] = data
    return out


def split_log(
    files: dict[str, bytes], rnd: random.Random
) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Each file cut at a line end: what was written before compaction, and after."""
    before: dict[str, bytes] = {}
    after: dict[str, bytes] = {}
    for rel, data in files.items():
        ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
        cut = rnd.choice([0, *ends])
        if cut:
            before[rel] = data[:cut]
        if data[cut:]:
            after[rel] = data[cut:]
    return before, after


@settings(
    max_examples=30,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(
    events=event_logs(),
    seed=st.integers(0, 2**32 - 1),
    slice_bytes=st.sampled_from([None, 1, 200, 2_000]),
)
def test_archive_report_is_the_jsonl_report_byte_for_byte(
    tmp_path_factory: pytest.TempPathFactory,
    events: list[Event],
    seed: int,
    slice_bytes: int | None,
) -> None:
    """Any log, malformed lines and torn last lines among its lines: the report of the
    compacted job is the report of its JSON lines, and so it stays for a job that goes on
    after compaction (lines appended to its files, new files), archive kept or files
    replaced. ``slice_bytes``: compaction reads the lines so many bytes at a time (a row
    group a slice: row groups of one file, of part of one, of several), so that the read
    of a row group from its statistics alone (one file, one writer) is tried as well as
    the read of its columns."""
    with pytest.MonkeyPatch.context() as patch:
        if slice_bytes is not None:
            patch.setattr(archive_store, "_SLICE_BYTES", slice_bytes)
        check_archive_report(tmp_path_factory, events, seed)


def check_archive_report(
    tmp_path_factory: pytest.TempPathFactory, events: list[Event], seed: int
) -> None:
    rnd = random.Random(seed)
    root = tmp_path_factory.mktemp("archive")
    job_dir = root / "p"
    files = log_files(events, rnd)
    before, after = split_log(files, rnd)
    if not before:  # nothing to compact yet
        before, after = files, {}
    write_files(job_dir, files)
    expected = report_json(job_dir)  # the whole log, as JSON lines
    shutil.rmtree(job_dir)
    write_files(job_dir, before)
    at_compaction = report_json(job_dir)
    invoke("compact", str(job_dir))
    assert report_json(job_dir) == at_compaction
    assert report_json(job_dir) == at_compaction  # (the read kept by the first, if it was kept)
    append_files(job_dir, after)
    assert report_json(job_dir) == expected  # (that read loaded, then the lines after it)
    assert jsonl_only(job_dir) == expected
    # --replace: the files the archive covers whole are removed, and never written again
    # (a writer that goes on writes a new file: the recorder's are named by process)
    removed = {rel for rel, data in before.items() if data.endswith(b"\n")}
    later = {(f"{rel[:-6]}-9.jsonl" if rel in removed else rel): d for rel, d in after.items()}
    shutil.rmtree(job_dir)
    write_files(job_dir, before)
    append_files(job_dir, later)
    expected = report_json(job_dir)
    shutil.rmtree(job_dir)
    write_files(job_dir, before)
    invoke("compact", "--replace", str(job_dir))
    assert {p.relative_to(job_dir).as_posix() for p in job_dir.rglob("*.jsonl")} == (
        set(before) - removed
    )
    assert report_json(job_dir) == at_compaction
    append_files(job_dir, later)
    assert report_json(job_dir) == expected
    # compacted again: the archive of the archive and what came after it
    invoke("compact", "--replace", str(job_dir))
    assert report_json(job_dir) == expected


@pytest.mark.parametrize("seed", range(30))
def test_fuzzed_logs_read_the_same_from_the_archive(tmp_path: Path, seed: int) -> None:
    """The read-path fuzzer's damaged real logs (flipped bytes, truncation, bad encodings,
    NUL tails, overlong lines, deep nesting...): the same report from the archive, before
    and after ``--replace``."""
    case = make_case(random.Random(seed))
    case.fifo = False  # (a FIFO is never read: nothing to archive)
    job_dir = write_case(case, tmp_path)
    expected = report_json(job_dir)
    invoke("compact", str(job_dir))
    assert report_json(job_dir) == expected
    invoke("compact", "--replace", str(job_dir))
    assert report_json(job_dir) == expected


def test_malformed_lines_keep_their_numbers_and_messages(tmp_path: Path) -> None:
    job_dir = tmp_path / "p"
    good = [Event(ts=1_700_000_000.0 + i, kind="step_start", job="p", step=i) for i in range(5)]
    lines = encode_lines(good).split(b"\n")[:-1]
    lines[2:2] = [b'{"ts": 1', b"", b'{"ts": "x", "kind": "k", "job": "p"}']
    write_files(job_dir, {"0/h-0-1.jsonl": b"\n".join(lines) + b"\n" + b'{"ts": 17'})
    expected = json.loads(report_json(job_dir))
    done = compact(*open_source(job_dir), replace=True)
    assert (done.rows, done.errors) == (7, 2)
    assert done.kept == (str(job_dir / "0/h-0-1.jsonl"),)  # its torn line: kept
    got = json.loads(report_json(job_dir))
    assert got == expected
    codes = [(d["code"], d.get("line")) for d in got["diagnostics"]]
    assert ("malformed_line", 3) in codes
    assert ("malformed_line", 5) in codes
    assert ("torn_line", 9) in codes


def test_replace_removes_only_what_the_archive_covers_whole(tmp_path: Path) -> None:
    job_dir = tmp_path / "p"
    events = [
        Event(ts=1_700_000_000.0 + i, kind="step_start", job="p", step=i, attempt=0, rank=r)
        for i in range(50)
        for r in (0, 1)
    ]
    write_files(
        job_dir,
        {
            "0/h-0-1.jsonl": encode_lines([e for e in events if e.rank == 0]),
            "0/h-1-1.jsonl": encode_lines([e for e in events if e.rank == 1]),
        },
    )
    expected = report_json(job_dir)
    done = compact(*open_source(job_dir), replace=True)
    assert sorted(Path(p).name for p in done.removed) == ["h-0-1.jsonl", "h-1-1.jsonl"]
    assert not list(job_dir.rglob("*.jsonl"))
    assert done.rows == 100
    meta = read_meta(job_dir / ARCHIVE_NAME)
    assert meta["job"] == "p"
    assert [s for s, _, _ in meta["streams"]] == ["0/h-0-1.jsonl", "0/h-1-1.jsonl"]
    # every reader finds the job: by its directory, its store root, the archive file
    assert report_json(job_dir) == expected
    assert report_json(tmp_path) == expected
    assert report_json(job_dir / ARCHIVE_NAME) == expected
    store, job = open_source(tmp_path)
    assert (isinstance(store, ArchivedStore), job) == (True, "p")
    assert json.loads(invoke("jobs", "--json", str(tmp_path)))[0]["job"] == "p"


def test_a_live_reader_follows_a_job_that_goes_on_after_compaction(tmp_path: Path) -> None:
    """``LiveJob`` (watch, the monitor): the archive, then each new line once."""
    job_dir = tmp_path / "p"
    t0 = 1_700_000_000.0

    def steps(a: int, b: int, rank: int = 0) -> bytes:
        return encode_lines(
            [
                Event(ts=t0 + i, kind="step_start", job="p", step=i, attempt=0, rank=rank)
                for i in range(a, b)
            ]
        )

    write_files(job_dir, {"0/h-0-1.jsonl": steps(0, 10)})
    compact(*open_source(job_dir))
    live = LiveJob(job_dir)
    assert isinstance(live.store, ArchivedStore)
    assert live.update() == 10
    append_files(job_dir, {"0/h-0-1.jsonl": steps(10, 15), "0/h-1-1.jsonl": steps(0, 15, 1)})
    assert live.update() == 20
    assert live.update() == 0
    archived = live.report(final=True)
    (job_dir / ARCHIVE_NAME).unlink()
    plain = LiveJob(job_dir)
    plain.update()
    assert archived == plain.report(final=True)


def test_a_single_file_is_compacted_beside_it(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    events = [
        Event(ts=1_700_000_000.0 + i, kind="step_start", job="solo", step=i) for i in range(20)
    ]
    log.write_bytes(encode_lines(events) + b"oops\n")
    expected = report_json(log)
    invoke("compact", str(log))
    archive = tmp_path / "run.archive.parquet"
    assert archive.is_file()
    assert report_json(log) == expected
    invoke("compact", "--replace", str(log))
    assert not log.exists()
    assert report_json(archive) == expected


#: Events of fields of every type: an attempt as text and as an integer, a step of 53 bits,
#: quantiles (an object).
TYPED_EVENTS = [
    Event(ts=1.7e9, kind="job_start", job="p", attempt="a-1", host="h", rank=0, pid=7),
    Event(ts=1.7e9 + 1, kind="step_start", job="p", attempt=3, step=2**53 - 1),
    Event(
        ts=1.7e9 + 2,
        kind="section_summary",
        job="p",
        name="fwd",
        count=2,
        seconds=0.5,
        quantiles={"p50": 0.25},
    ),
]


def test_the_archive_is_typed_column_by_column(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    job_dir = tmp_path / "p"
    events = TYPED_EVENTS
    write_files(job_dir, {"0/h-0-7.jsonl": encode_lines(events)})
    compact(*open_source(job_dir))
    table = pq.read_table(job_dir / ARCHIVE_NAME)
    types = {f.name: str(f.type) for f in table.schema}
    assert types["kind"] == "dictionary<values=string, indices=int32, ordered=0>"
    assert (types["ts"], types["step"], types["rank"]) == ("double", "int64", "int64")
    assert table.column("step").to_pylist() == [None, 2**53 - 1, None]
    assert table.column("attempt").to_pylist() == ["a-1", "3", None]
    assert table.column("attempt_is_int").to_pylist() == [False, True, None]
    store, job = open_source(job_dir)
    items = [i for c in store.read(job).chunks for i in c.items]
    assert items == events  # every field as it was, attempt's type included


DOC_QUERY = """
SELECT kind, count(*) AS events, max(step) AS last_step
FROM read_parquet('{archive}')
WHERE error IS NULL
GROUP BY kind ORDER BY kind
"""


def test_duckdb_reads_the_archive_as_documented(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    job_dir = tmp_path / "p"
    events = [Event(ts=1.7e9 + i, kind="step_start", job="p", step=i) for i in range(7)]
    write_files(job_dir, {"0/h-0-1.jsonl": encode_lines(events) + b"garbage\n"})
    compact(*open_source(job_dir))
    docs = (Path(__file__).parent.parent / "docs" / "archive.md").read_text()
    assert DOC_QUERY.strip().replace("{archive}", "p/badput-archive.parquet") in docs
    rows = duckdb.sql(DOC_QUERY.format(archive=job_dir / ARCHIVE_NAME)).fetchall()
    assert rows == [("step_start", 7, 6)]
    errors = duckdb.sql(
        f"SELECT line, error FROM read_parquet('{job_dir / ARCHIVE_NAME}') WHERE error IS NOT NULL"
    ).fetchall()
    assert errors[0][0] == 8


def test_without_pyarrow_the_error_names_the_extra(tmp_path: Path) -> None:
    job_dir = tmp_path / "p"
    write_files(
        job_dir, {"0/h-0-1.jsonl": encode_lines([Event(ts=1.7e9, kind="heartbeat", job="p")])}
    )
    code = (
        "import sys; sys.modules['pyarrow'] = None; sys.modules['pyarrow.parquet'] = None\n"
        "from badput.cli import main; main(['compact', sys.argv[1]])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(job_dir)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "pip install 'badput[archive]'" in done.stderr
    assert not (job_dir / ARCHIVE_NAME).exists()


_TYPED: dict[str, st.SearchStrategy[object]] = {
    "name": st.sampled_from(["eval", "sdc", "é\u2603"]),
    "blocking": st.booleans(),
    "status": st.sampled_from(["ok", "failed"]),
    "exit_code": st.integers(-9, 255),
    "count": st.integers(0, 9),
    "seconds": st.floats(0, 1e3),
    "quantiles": st.dictionaries(st.sampled_from(["min", "p50", "p90", "max"]), st.floats(0, 9)),
    "last": st.floats(1.6e9, 1.8e9),
    "tokens": st.integers(0, 2**53 - 1),
    "samples": st.integers(0, 10**6),
    "active": st.integers(0, 9),
    "flops_per_token": st.floats(1.0, 1e12),
    "device": st.sampled_from(["cpu", "h100"]),
    "hang_timeout": st.floats(0.5, 3600.0),
    "v": st.integers(1, 3),
    "unknown_field": st.sampled_from([1, "x", [1, {"a": None}]]),
}


@st.composite
def writers_lines(draw: st.DrawFn) -> list[bytes]:
    """Valid events of one writer or a few (their fields any of their types: a file one
    process writes, or several share), of every kind and unknown ones, each optional field
    now and then, unknown fields among them."""
    writers = [
        {
            "job": "p",
            "attempt": draw(st.sampled_from([None, 0, 3, "a-1", "7"])),
            "host": draw(st.sampled_from([None, "h0"])),
            "rank": draw(st.sampled_from([None, 0, 5])),
            "pid": draw(st.sampled_from([None, 4242])),
        }
        for _ in range(draw(st.sampled_from([1, 1, 2, 3])))
    ]
    kinds = st.sampled_from([*KIND_NAMES, "a_newer_kind"])
    lines = []
    for i in range(draw(st.integers(1, 40))):
        kind = draw(kinds)
        event: dict[str, object] = {"ts": 1.7e9 + i * 0.25, "kind": kind}
        writer = draw(st.sampled_from(writers))
        event.update({k: v for k, v in writer.items() if v is not None})
        if kind in STEP_KINDS or draw(st.integers(0, 3)) == 0:
            event["step"] = draw(st.integers(0, 2**53 - 1))
        for field in draw(st.lists(st.sampled_from(sorted(_TYPED)), max_size=4)):
            event[field] = draw(_TYPED[field])
        line = json.dumps(event).encode()
        try:
            decode_line(line)
        except EventError:
            continue  # (a rule of its kind broken: not what this test is about)
        lines.append(line)
    return lines


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=writers_lines())
@example(  # a row made alone: its ``blocking`` false, not 0 (a blocking load)
    lines=[
        b'{"ts": 1700000000.0, "kind": "accelerator_init_end", "job": "p", "step": 0}',
        b'{"ts": 1700000001.0, "kind": "data_loading_start", "job": "p", "blocking": false}',
    ]
)
def test_columns_of_a_writers_block_are_its_events_columns(
    tmp_path_factory: Any, lines: list[bytes]
) -> None:
    """A large block of one writer's events, or of a few writers', is compacted from its
    decoded columns, their writers and the fields it holds (unless a line has a field
    schema v1 lacks): the same rows, column by column, as made field by field of its
    events, and the same report."""
    if not lines:
        return
    block = b"\n".join(lines) + b"\n"
    log = tmp_path_factory.mktemp("writer") / "run.jsonl"
    log.write_bytes(block * (300_000 // len(block) + 1))  # a block decoded lean
    store, job = open_source(log)
    with decoding_for_columns():
        chunks = store.read(job, lean=True).chunks
    # (a line with a field schema v1 lacks: its block is read with it kept, as events)
    if not any(set(json.loads(line)) - set(Event.__struct_fields__) for line in lines):
        assert all(c.columns is not None and c.columns.fields is not None for c in chunks)
        assert all(c.columns and (c.columns.writer or c.columns.writers) for c in chunks)
    names = {log.as_posix(): log.name}
    by_columns = batch_of(chunks, names)
    by_events = batch_of([Chunk(c.source, c.first_line, c.items) for c in chunks], names)
    assert by_columns.schema == by_events.schema
    for name in by_columns.column_names:
        assert by_columns.column(name).to_pylist() == by_events.column(name).to_pylist(), name
    expected = report_json(log)
    invoke("compact", str(log))
    assert report_json(log) == expected


def count_rows_made(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts, from now on, the rows of an archive made one by one (``one``) and the row
    groups made whole (``all``)."""
    from badput.formats import archive

    made = {"one": 0, "all": 0}
    one, every = archive._TableRows.row, archive._TableRows.all

    def row(self: Any, i: int) -> Any:
        made["one"] += 1
        return one(self, i)

    def all_rows(self: Any) -> Any:
        made["all"] += 1
        return every(self)

    monkeypatch.setattr(archive._TableRows, "row", row)
    monkeypatch.setattr(archive._TableRows, "all", all_rows)
    return made


def test_a_report_of_the_archive_makes_only_the_rare_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine reads an archive's columns (times, kinds, steps, writer, which fields are
    filled): of 60,000 steps with a data load each, only the lifecycle events, the named
    intervals and the checkpoints are made as events, and the report is the JSON lines'."""

    t0 = 1_700_000_000.0
    events = [Event(ts=t0, kind="job_start", job="p", attempt=0, rank=0)]
    rare = 1
    for i in range(60_000):
        t = t0 + 1 + i
        events += [
            Event(ts=t, kind="step_start", job="p", attempt=0, rank=0, step=i),
            Event(ts=t + 0.1, kind="data_loading_start", job="p", attempt=0, rank=0),
            Event(ts=t + 0.2, kind="data_loading_end", job="p", attempt=0, rank=0),
            Event(ts=t + 0.9, kind="step_end", job="p", attempt=0, rank=0, step=i),
        ]
        if i % 5_000 == 0:
            for kind in ("custom_start", "custom_end"):
                events.append(Event(ts=t + 0.95, kind=kind, job="p", attempt=0, rank=0, name="e"))
            events.append(
                Event(
                    ts=t + 0.97,
                    kind="checkpoint_save_start",
                    job="p",
                    attempt=0,
                    rank=0,
                    step=i,
                )
            )
            rare += 3
    events.append(Event(ts=t0 + 70_000, kind="job_end", job="p", attempt=0, rank=0))
    rare += 1
    job_dir = tmp_path / "p"
    write_files(job_dir, {"0/h-0-1.jsonl": encode_lines(events)})
    expected = report_json(job_dir)
    compact(*open_source(job_dir))
    made = count_rows_made(monkeypatch)
    assert report_json(job_dir) == expected
    assert made["all"] == 0
    # each rare event (twice at most: the accounting and the per-rank view), nothing else
    assert made["one"] <= 2 * rare, made


def test_a_report_reads_of_a_plain_row_group_only_the_engines_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row group of one file's consecutive lines of one writer, none malformed (its
    statistics say so): its times, kinds and steps are read, nothing else (stream, line,
    writer and which fields hold a value are the statistics'), and the rest of its columns
    only where the engine asks for an event (the first and last row groups: the job's start
    and end)."""
    import pyarrow.parquet as pq

    t0 = 1_700_000_000.0
    events = [Event(ts=t0, kind="job_start", job="p", attempt=3, rank=1, host="h")]
    for i in range(1, 2_001):
        t = t0 + i
        events += [
            Event(ts=t, kind="step_start", job="p", attempt=3, rank=1, host="h", step=i),
            Event(ts=t + 0.1, kind="data_loading_start", job="p", attempt=3, rank=1, host="h"),
            Event(ts=t + 0.2, kind="data_loading_end", job="p", attempt=3, rank=1, host="h"),
            Event(ts=t + 0.9, kind="step_end", job="p", attempt=3, rank=1, host="h", step=i),
        ]
    events.append(Event(ts=t0 + 3_000, kind="job_end", job="p", attempt=3, rank=1, host="h"))
    job_dir = tmp_path / "p"
    write_files(job_dir, {"3/h-1-7.jsonl": encode_lines(events)})
    expected = report_json(job_dir)
    monkeypatch.setattr(archive_store, "_ROW_GROUP", 1_000)
    compact(*open_source(job_dir))
    groups = pq.ParquetFile(job_dir / ARCHIVE_NAME).num_row_groups
    assert groups == 9
    reads: list[tuple[int, list[str]]] = []
    read_row_group = pq.ParquetFile.read_row_group

    def record(self: Any, i: int, columns: list[str], **kw: Any) -> Any:
        reads.append((i, list(columns)))
        return read_row_group(self, i, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", record)
    assert report_json(job_dir) == expected
    engine = [(i, ["ts", "kind", "step"]) for i in range(groups)]
    rest = [(i, cols) for i, cols in reads if (i, cols) not in engine]
    assert [r for r in reads if r in engine] == engine
    assert sorted(i for i, _ in rest) == [0, groups - 1], reads


def test_a_row_made_value_by_value_is_the_row_made_of_whole_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first rows a reader asks of a row group are made value by value, the rest of
    numpy views of whole columns: both give every field as a decode does (an attempt's
    type, quantiles as an object, a boolean, an unknown field kept as its text)."""
    pq = pytest.importorskip("pyarrow.parquet")
    from badput.formats import archive

    job_dir = tmp_path / "p"
    lines = [
        encode_lines(TYPED_EVENTS),
        encode_lines([Event(ts=1.7e9 + 3, kind="data_loading_start", job="p", blocking=False)]),
        b'{"ts": 1700000004.0, "kind": "heartbeat", "job": "p", "colour": [1, "x"]}\n',
        b"not json\n",
    ]
    write_files(job_dir, {"0/h-0-7.jsonl": b"".join(lines)})
    compact(*open_source(job_dir))
    file = pq.ParquetFile(job_dir / ARCHIVE_NAME)
    table = file.read_row_group(0, columns=archive.columns_to_read(file.metadata.row_group(0)))
    where = ({"0/h-0-7.jsonl": "f"}, ["0/h-0-7.jsonl"], [0] * 6, list(range(1, 7)))

    def rows(few: int) -> list[Any]:
        monkeypatch.setattr(archive, "_FEW_ROWS", few)
        made = archive._TableRows(table, *where)
        return [made.row(i) for i in range(5)]  # (the sixth: an error, never asked a row)

    by_value, by_column = rows(32), rows(0)
    fields = [*Event.__struct_fields__, "unknown_fields"]
    as_values = [[getattr(r, f, None) for f in fields] for r in by_value]
    assert as_values == [[getattr(r, f, None) for f in fields] for r in by_column]
    assert [r.attempt for r in by_value[:2]] == ["a-1", 3]
    assert by_value[2].quantiles == {"p50": 0.25}
    assert by_value[3].blocking is False
    assert json.loads(by_value[4].unknown_fields) == {"colour": [1, "x"]}


def test_the_thread_reading_row_groups_ahead_ends_with_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row group's first columns are read while the one before is ingested, by a thread
    that is gone once the archive is read (a process with another thread alive does not
    fork its read workers): and the rows are the same as read one group at a time."""
    import threading

    import pyarrow.parquet as pq

    events = [
        Event(ts=1.7e9 + i, kind=kind, job="p", step=i if kind in STEP_KINDS else None)
        for i in range(600)
        for kind in ("step_start", "data_loading_start", "data_loading_end", "step_end")
    ]
    job_dir = tmp_path / "p"
    write_files(job_dir, {"0/h-0-1.jsonl": encode_lines(events)})
    monkeypatch.setattr(archive_store, "_ROW_GROUP", 500)
    compact(*open_source(job_dir))
    read_by: list[tuple[int, str]] = []
    read_row_group = pq.ParquetFile.read_row_group

    def record(self: Any, i: int, **kw: Any) -> Any:
        read_by.append((i, threading.current_thread().name))
        return read_row_group(self, i, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", record)
    store, job = open_source(job_dir)
    assert isinstance(store, ArchivedStore)
    got: list[Any] = []
    result = store.read(job)
    while True:
        got += [i for c in result.chunks for i in c.items]
        if result.reached_end:
            break
        result = store.read(job, result.cursor)
    assert got == events
    ahead = sorted(i for i, name in read_by if name == "badput-archive")
    assert ahead == [1, 2, 3, 4], read_by  # (5 groups: every one after the first)
    assert not any(t.name == "badput-archive" for t in threading.enumerate())


def test_a_file_shared_by_several_ranks_is_read_from_the_archive_as_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four ranks on two hosts write one file, their lines interleaved: the archive gives
    each row's writer as an index (no row made for it), the ranks' hosts come from their
    writers, and the report is the JSON lines' byte for byte."""

    t0 = 1_700_000_000.0
    events: list[Event] = []
    who = [{"rank": r, "host": f"h{r // 2}", "pid": 100 + r} for r in range(4)]
    events += [Event(ts=t0, kind="job_start", job="p", attempt=0, **w) for w in who]
    for i in range(1, 3_001):
        t = t0 + i
        for r, w in enumerate(who):
            late = 0.001 * r
            events += [
                Event(ts=t + late, kind="step_start", job="p", attempt=0, step=i, **w),
                Event(ts=t + 0.1 + late, kind="data_loading_start", job="p", attempt=0, **w),
                Event(ts=t + 0.2 + late, kind="data_loading_end", job="p", attempt=0, **w),
                Event(ts=t + 0.9 + late, kind="step_end", job="p", attempt=0, step=i, **w),
            ]
    events += [Event(ts=t0 + 4_000, kind="job_end", job="p", attempt=0, **w) for w in who]
    job_dir = tmp_path / "p"
    write_files(job_dir, {"0/h-0-1.jsonl": encode_lines(events)})
    expected = report_json(job_dir)
    assert '"host": "h1"' in expected
    monkeypatch.setattr(archive_store, "_ROW_GROUP", 10_000)
    compact(*open_source(job_dir))
    made = count_rows_made(monkeypatch)
    assert report_json(job_dir) == expected
    assert made["all"] == 0
    assert made["one"] <= 2 * 8, made  # the job's starts and ends: 8 events


def test_a_file_of_a_writer_a_line_is_compacted_and_read_as_its_lines(tmp_path: Path) -> None:
    """Each line of another process and host (a broken or hostile log: 30,000 writers in a
    row group): compacted, and read from the archive, as the JSON lines are read (each
    writer numbered once: no search of the writers for each)."""
    events = [
        Event(
            ts=1.7e9 + i,
            kind="step_start" if i % 2 == 0 else "step_end",
            job="p",
            attempt=0,
            rank=0,
            pid=1_000 + i,
            host=f"h{i}",
            step=i // 2,
        )
        for i in range(30_000)
    ]
    job_dir = tmp_path / "p"
    write_files(job_dir, {"0/h-0-1.jsonl": encode_lines(events)})
    expected = report_json(job_dir)
    done = compact(*open_source(job_dir))
    assert done.rows == 30_000
    assert report_json(job_dir) == expected
    store, job = open_source(job_dir)
    hosts = [e.host for c in store.read(job).chunks for e in c.items]
    assert hosts == [f"h{i}" for i in range(30_000)]
