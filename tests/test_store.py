"""Stores: JSONL directory and memory, with identical semantics; open_store / open_source."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from badput.events import Event, EventError
from badput.formats.codec import encode_line, encode_lines
from badput.runtime.env import BADPUT_STORE, DEFAULT_STORE
from badput.store import (
    Cursor,
    EventStore,
    JsonlStore,
    MemoryStore,
    ReadResult,
    SingleFileStore,
    WriterKey,
    open_source,
    open_store,
)
from badput.store._jsonl import has_jsonl_below
from badput.store._lines import BOM, parse_stream, torn_tail

JOB = "job-a"
KEY0 = WriterKey("0", "h0", 0, 100)
KEY1 = WriterKey("0", "h1", 1, 101)


def ev(i: int, job: str = JOB, kind: str = "step_start") -> Event:
    return Event(ts=1_700_000_000.0 + i, kind=kind, job=job, attempt=0, rank=0, step=i)


class Harness:
    """A store plus a way to append raw bytes to one of its streams."""

    def __init__(self, store: EventStore, append: Callable[[str, str, bytes], None]) -> None:
        self.store = store
        self.append = append

    def source_of(self, result: ReadResult) -> set[str]:
        return {c.source for c in result.chunks}


@pytest.fixture(params=["jsonl", "memory"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "jsonl":
        root = tmp_path / "store"

        def append_file(job: str, stream: str, data: bytes) -> None:
            p = root / job / stream
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "ab") as f:
                f.write(data)

        yield Harness(JsonlStore(root), append_file)
    else:
        mem = MemoryStore()
        yield Harness(mem, mem.append)


def items(result: ReadResult) -> list[Event | EventError]:
    return [it for c in result.chunks for it in c.items]


def events(result: ReadResult) -> list[Event]:
    return [it for it in items(result) if isinstance(it, Event)]


def line_numbers(result: ReadResult) -> list[int]:
    return [c.first_line + i for c in result.chunks for i in range(len(c.items))]


# --------------------------------------------------------------------- parity


def test_write_read_round_trip(harness: Harness) -> None:
    store = harness.store
    writer = store.open_writer(JOB, KEY0)
    written = [ev(i) for i in range(5)]
    writer.write(encode_lines(written[:2]))
    writer.write(encode_lines(written[2:]))
    writer.flush()
    writer.close()
    result = store.read(JOB)
    assert events(result) == written
    assert line_numbers(result) == [1, 2, 3, 4, 5]
    assert store.jobs() == [JOB]
    assert result.n_items == 5
    # the stream is named after the writer key
    assert KEY0.stream_name() in result.cursor.offsets


def test_read_of_unknown_job_is_empty(harness: Harness) -> None:
    result = harness.store.read("nope")
    assert result.chunks == [] and result.cursor.offsets == {}
    assert harness.store.jobs() == []


def test_incremental_reads_return_only_new_lines(harness: Harness) -> None:
    store = harness.store
    writer = store.open_writer(JOB, KEY0)
    writer.write(encode_lines([ev(0), ev(1), ev(2)]))
    first = store.read(JOB)
    assert [e.step for e in events(first)] == [0, 1, 2]

    again = store.read(JOB, first.cursor)
    assert again.chunks == []
    assert again.cursor.offsets == first.cursor.offsets

    writer.write(encode_lines([ev(3), ev(4)]))
    second = store.read(JOB, first.cursor)
    assert [e.step for e in events(second)] == [3, 4]
    assert line_numbers(second) == [4, 5]
    # the input cursor is not mutated
    assert first.cursor.offsets[KEY0.stream_name()][1] == 3
    assert second.cursor.offsets[KEY0.stream_name()][1] == 5


def test_torn_last_line_is_skipped_then_read_once_complete(harness: Harness) -> None:
    stream = KEY0.stream_name()
    whole = encode_line(ev(1))
    harness.append(JOB, stream, encode_line(ev(0)) + whole[:20])
    r1 = harness.store.read(JOB)
    assert [e.step for e in events(r1)] == [0]
    assert not any(isinstance(i, EventError) for i in items(r1))
    offset, lines = r1.cursor.offsets[stream]
    assert (offset, lines) == (len(encode_line(ev(0))), 1)

    # still torn: nothing new, cursor unchanged
    r1b = harness.store.read(JOB, r1.cursor)
    assert r1b.chunks == [] and r1b.cursor.offsets == r1.cursor.offsets

    harness.append(JOB, stream, whole[20:])
    r2 = harness.store.read(JOB, r1.cursor)
    assert [e.step for e in events(r2)] == [1]
    assert line_numbers(r2) == [2]
    # a cold read sees both
    assert [e.step for e in events(harness.store.read(JOB))] == [0, 1]


def test_torn_line_alone_is_nothing(harness: Harness) -> None:
    harness.append(JOB, "s.jsonl", b'{"ts":1,"kind":"heartbe')
    r = harness.store.read(JOB)
    assert r.chunks == []
    assert r.cursor.offsets.get("s.jsonl", (0, 0)) == (0, 0)


def test_malformed_line_reported_with_file_and_line_and_skipped(harness: Harness) -> None:
    stream = KEY0.stream_name()
    data = encode_line(ev(0)) + b"this is not json\n" + encode_line(ev(2))
    harness.append(JOB, stream, data)
    r = harness.store.read(JOB)
    got = items(r)
    assert len(got) == 3
    assert isinstance(got[0], Event) and isinstance(got[2], Event)
    err = got[1]
    assert isinstance(err, EventError)
    assert err.line == 2
    assert err.file is not None and err.file.endswith(stream)
    assert err.file in harness.source_of(r)
    assert [e.step for e in events(r)] == [0, 2]


def test_empty_lines_are_skipped_but_counted(harness: Harness) -> None:
    data = b"\n" + encode_line(ev(0)) + b"\n\n" + encode_line(ev(1)) + b"this is bad\n"
    harness.append(JOB, "s.jsonl", data)
    r = harness.store.read(JOB)
    got = items(r)
    assert [type(x) for x in got] == [Event, Event, EventError]
    assert line_numbers(r) == [2, 5, 6]
    assert isinstance(got[2], EventError) and got[2].line == 6
    assert r.cursor.offsets["s.jsonl"] == (len(data), 6)


def test_multiple_streams_union_in_sorted_stream_order(harness: Harness) -> None:
    store = harness.store
    w1 = store.open_writer(JOB, KEY1)
    w0 = store.open_writer(JOB, KEY0)
    w1.write(encode_lines([ev(10), ev(11)]))
    w0.write(encode_lines([ev(0)]))
    w2 = store.open_writer(JOB, WriterKey("1", "h0", 0, 200))
    w2.write(encode_lines([ev(20)]))
    r = store.read(JOB)
    assert len(r.chunks) == 3
    assert [e.step for e in events(r)] == [0, 10, 11, 20]  # 0/h0..., 0/h1..., 1/h0...
    assert sorted(r.cursor.offsets) == sorted(
        [KEY0.stream_name(), KEY1.stream_name(), "1/h0-0-200.jsonl"]
    )
    # an incremental read touching one stream only
    w1.write(encode_line(ev(12)))
    r2 = store.read(JOB, r.cursor)
    assert [e.step for e in events(r2)] == [12]
    assert line_numbers(r2) == [3]


def test_jobs_are_separate(harness: Harness) -> None:
    store = harness.store
    store.open_writer("b", KEY0).write(encode_line(ev(1, job="b")))
    store.open_writer("a", KEY0).write(encode_line(ev(2, job="a")))
    assert store.jobs() == ["a", "b"]
    assert [e.job for e in events(store.read("a"))] == ["a"]


@pytest.mark.parametrize("block", [1 << 20, 8 << 20])
def test_big_stream_is_chunked(
    harness: Harness, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk holds at most 65,536 lines (a block of the 6 MB file read whole, 8 MiB, is
    cut there), and the chunks' lines follow on."""
    from badput.store import _reading

    monkeypatch.setattr(_reading, "READ_BLOCK", block)
    n = 70_000
    harness.append(JOB, "s.jsonl", encode_lines([ev(i) for i in range(n)]))
    r = harness.store.read(JOB)
    assert max(len(c.items) for c in r.chunks) <= 65_536
    if block > 6_200_000 or not isinstance(harness.store, JsonlStore):  # one block: two chunks
        assert len(r.chunks) == 2
        assert r.chunks[1].first_line == 65_537
    else:  # a chunk a block
        assert len(r.chunks) == 6
    assert r.n_items == n
    assert line_numbers(r) == list(range(1, n + 1))


def test_parse_stream_across_blocks() -> None:
    data = encode_lines([ev(i) for i in range(50)]) + b"\n" + encode_line(ev(50)) + b'{"ts":'
    for size in (1, 7, 64, 1000, len(data)):
        blocks = [data[i : i + size] for i in range(0, len(data), size)]
        chunks, n_bytes, n_lines, tail, _ = parse_stream(blocks, "src", 10, chunk_lines=16)
        got = [(c.first_line + i, it) for c in chunks for i, it in enumerate(c.items)]
        assert [ln for ln, _ in got] == [*range(11, 61), 62]
        assert all(isinstance(it, Event) for _, it in got)
        assert [it.step for _, it in got if isinstance(it, Event)] == list(range(51))
        assert n_bytes == len(data) - len(b'{"ts":')
        assert n_lines == 52
        assert tail == b'{"ts":'
        assert all(len(c.items) <= 16 for c in chunks)


# ------------------------------------------------------------------- jsonl only


def test_jsonl_layout_and_lazy_directories(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    store = JsonlStore(root)
    assert store.jobs() == []
    assert not root.exists()  # nothing created before a writer is opened
    w = store.open_writer(JOB, KEY0)
    w.write(encode_line(ev(0)))
    w.close()
    path = root / JOB / "0" / "h0-0-100.jsonl"
    assert path.read_bytes() == encode_line(ev(0))
    # appending: a second writer of the same stream never rewrites
    w = store.open_writer(JOB, KEY0)
    w.write(encode_line(ev(1)))
    w.close()
    assert path.read_bytes() == encode_line(ev(0)) + encode_line(ev(1))


def test_jsonl_writer_terminates_a_torn_line_left_by_a_dead_writer(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    path = tmp_path / JOB / KEY0.stream_name()
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_line(ev(0)) + b'{"ts":1,"ki')
    w = store.open_writer(JOB, KEY0)
    w.write(encode_line(ev(1)))
    w.close()
    got = items(store.read(JOB))
    assert [type(x) for x in got] == [Event, EventError, Event]
    assert isinstance(got[1], EventError) and got[1].line == 2


def test_jsonl_job_names_cannot_escape_the_root(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "root")
    w = store.open_writer("../evil/x", KEY0)
    w.write(encode_line(ev(0, job="../evil/x")))
    w.close()
    assert not (tmp_path / "evil").exists()
    assert store.jobs() == [".._evil_x"]
    assert [e.job for e in events(store.read("../evil/x"))] == ["../evil/x"]


def test_jsonl_ignores_other_files_and_dirs_without_events(tmp_path: Path) -> None:
    (tmp_path / "empty-job").mkdir()
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / JOB / "0").mkdir(parents=True)
    (tmp_path / JOB / "0" / "readme.md").write_text("x")
    (tmp_path / JOB / "0" / "a.jsonl").write_bytes(encode_line(ev(0)))
    store = JsonlStore(tmp_path)
    assert store.jobs() == [JOB]
    assert [e.step for e in events(store.read(JOB))] == [0]


def test_jsonl_error_names_full_path(tmp_path: Path) -> None:
    p = tmp_path / JOB / "0" / "a.jsonl"
    p.parent.mkdir(parents=True)
    p.write_bytes(b"oops\n")
    (err,) = items(JsonlStore(tmp_path).read(JOB))
    assert isinstance(err, EventError)
    assert err.file == str(p) and err.line == 1


# ------------------------------------------------------------------ open_store


def test_open_store_default_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(BADPUT_STORE, raising=False)
    store = open_store()
    assert isinstance(store, JsonlStore) and store.root == Path(DEFAULT_STORE)
    monkeypatch.setenv(BADPUT_STORE, str(tmp_path / "s"))
    store = open_store()
    assert isinstance(store, JsonlStore) and store.root == tmp_path / "s"
    monkeypatch.setenv(BADPUT_STORE, "memory://from-env")
    assert open_store() is open_store("memory://from-env")


def test_open_store_variants(tmp_path: Path) -> None:
    a = open_store("memory://shared")
    assert isinstance(a, MemoryStore)
    assert open_store("memory://shared") is a
    assert open_store("memory://other") is not a
    assert open_store(a.uri) is a
    anon = MemoryStore()
    assert open_store(anon.uri) is anon
    assert open_store(anon) is anon

    f = open_store(f"file://{tmp_path}/x")
    assert isinstance(f, JsonlStore) and f.root == tmp_path / "x"
    p = open_store(tmp_path / "y")
    assert isinstance(p, JsonlStore) and p.root == tmp_path / "y"
    assert isinstance(open_store(str(tmp_path)), JsonlStore)
    assert open_store(p.uri).root == p.root  # type: ignore[attr-defined]

    single = tmp_path / "one.jsonl"
    single.write_bytes(encode_line(ev(0)))
    assert isinstance(open_store(single), SingleFileStore)


@pytest.mark.parametrize("uri", ["http://x", "ftp://bucket/x"])
def test_open_store_unknown_scheme(uri: str) -> None:
    with pytest.raises(ValueError, match=r"unsupported store URI scheme.*memory://"):
        open_store(uri)


@pytest.mark.parametrize("uri", ["gcl://project", "gcl:///log", "gcl://project/"])
def test_open_store_gcl_needs_project_and_log(uri: str) -> None:
    """A gcl:// URI without both parts names the form it expects."""
    with pytest.raises(ValueError, match=r"expected gcl://PROJECT/LOG"):
        open_store(uri)


def test_open_store_remote_file_uri() -> None:
    with pytest.raises(ValueError, match="remote host"):
        open_store("file://somehost/data")


def test_memory_store_fail_writes() -> None:
    mem = MemoryStore()
    w = mem.open_writer(JOB, KEY0)
    mem.fail_writes = True
    with pytest.raises(OSError):
        w.write(b"x\n")
    with pytest.raises(OSError):
        mem.open_writer(JOB, KEY1)
    mem.fail_writes = False
    w.write(encode_line(ev(0)))
    assert [e.step for e in events(mem.read(JOB))] == [0]


# ----------------------------------------------------------------- open_source


def _write(path: Path, *evs: Event) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(encode_lines(list(evs)))
    return path


def test_open_source_single_file(tmp_path: Path) -> None:
    p = _write(tmp_path / "x" / "events.jsonl", ev(0, job="from-file"), ev(1, job="from-file"))
    store, job = open_source(p)
    assert isinstance(store, SingleFileStore)
    assert job == "from-file"
    assert [e.step for e in events(store.read(job))] == [0, 1]
    assert store.jobs() == [job]
    with pytest.raises(OSError):
        store.open_writer(job, KEY0)
    store2, job2 = open_source(p, job="renamed")
    assert job2 == "renamed" and events(store2.read("renamed"))


def test_open_source_single_file_without_valid_event_uses_stem(tmp_path: Path) -> None:
    p = tmp_path / "broken.jsonl"
    p.write_bytes(b"nope\n")
    _store, job = open_source(p)
    assert job == "broken"


def test_open_source_store_root_recorder_layout(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "0" / "h-0-1.jsonl", ev(0, job="a"))
    store, job = open_source(tmp_path)
    assert isinstance(store, JsonlStore) and store.root == tmp_path.absolute()
    assert job == "a"
    _write(tmp_path / "b" / "0" / "h-0-1.jsonl", ev(0, job="b"))
    with pytest.raises(ValueError, match=r"several jobs.*a, b"):
        open_source(tmp_path)
    assert open_source(tmp_path, job="b")[1] == "b"
    with pytest.raises(ValueError, match=r"no job 'c'.*a, b"):
        open_source(tmp_path, job="c")


def test_open_source_store_root_flat_jobs(tmp_path: Path) -> None:
    # <root>/<job>/<stream>.jsonl: recognised by the events' job field
    _write(tmp_path / "alpha" / "s.jsonl", ev(0, job="alpha"))
    _write(tmp_path / "beta" / "s.jsonl", ev(0, job="beta"))
    store, job = open_source(tmp_path, job="beta")
    assert isinstance(store, JsonlStore) and job == "beta"
    assert [e.job for e in events(store.read(job))] == ["beta"]


def test_open_source_job_directory(tmp_path: Path) -> None:
    # recorder layout: <job>/<attempt>/<stream>.jsonl
    jobdir = tmp_path / "runs" / "llama"
    _write(jobdir / "0" / "h-0-1.jsonl", ev(0, job="llama"))
    _write(jobdir / "1" / "h-0-2.jsonl", ev(1, job="llama"))
    store, job = open_source(jobdir)
    assert job == "llama"
    assert [e.step for e in events(store.read(job))] == [0, 1]
    assert open_source(jobdir, job="llama")[1] == "llama"
    with pytest.raises(ValueError, match="directory of job 'llama'"):
        open_source(jobdir, job="other")


def test_open_source_flat_job_directory(tmp_path: Path) -> None:
    jobdir = tmp_path / "mine"
    _write(jobdir / "a.jsonl", ev(0, job="whatever"))
    _write(jobdir / "b.jsonl", ev(1, job="whatever"))
    store, job = open_source(jobdir)
    assert job == "whatever"  # the job its events name, not the directory's name
    assert [e.step for e in events(store.read(job))] == [0, 1]
    assert open_source(jobdir, job="mine")[1] == "whatever"


def test_open_source_uri_and_store(tmp_path: Path) -> None:
    mem = open_store("memory://open-source-test")
    assert isinstance(mem, MemoryStore)
    mem.append("j", "s.jsonl", encode_line(ev(0, job="j")))
    assert open_source("memory://open-source-test") == (mem, "j")
    assert open_source(mem) == (mem, "j")
    _write(tmp_path / "k" / "0" / "s.jsonl", ev(0, job="k"))
    store, job = open_source(f"file://{tmp_path}")
    assert isinstance(store, JsonlStore) and job == "k"


def test_open_source_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        open_source(tmp_path / "missing")
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"no \.jsonl"):
        open_source(tmp_path / "empty")
    with pytest.raises(ValueError, match="holds no jobs"):
        open_source(MemoryStore())


def test_cursor_default_is_empty() -> None:
    assert Cursor().offsets == {}


class _CountingStore(JsonlStore):
    """Counts how often the job directory is listed, and the reads."""

    listings = 0
    reads = 0

    def streams(self, job: str) -> list[str]:
        _CountingStore.listings += 1
        return super().streams(job)

    def read(
        self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        _CountingStore.reads += 1
        return super().read(job, cursor, max_bytes=max_bytes)


def test_a_catch_up_reads_files_in_small_slices_and_other_stores_in_large_ones(
    tmp_path: Path,
) -> None:
    """Files are read in READ_SLICE_BYTES (1 MiB: their decoded objects reuse freed memory);
    any other store (a Cloud Logging read is a query against its quota) in
    OTHER_STORE_SLICE_BYTES: the budgets each read is given."""
    from badput import analysis

    def budgets(store: JsonlStore | MemoryStore) -> set[int | None]:
        """The budget of every read a cold catch-up of ``store`` makes."""
        seen: set[int | None] = set()
        read = store.read

        def counting(job: str, cursor: Cursor | None = None, **kw: int | None) -> ReadResult:
            seen.add(kw.get("max_bytes"))
            return read(job, cursor, **kw)

        store.read = counting  # type: ignore[method-assign]
        writer = store.open_writer(JOB, KEY0)
        writer.write(encode_lines([ev(i) for i in range(3)]))
        writer.close()
        assert analysis.LiveJob(store, JOB, parallel=False).update() == 3
        return seen

    assert budgets(JsonlStore(tmp_path)) == {analysis.READ_SLICE_BYTES} == {1 << 20}
    assert budgets(MemoryStore()) == {analysis.OTHER_STORE_SLICE_BYTES} == {8 << 20}


def test_a_catch_up_in_slices_does_not_list_the_job_for_every_slice_and_misses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job of many files read in small slices: the job is listed once a catch-up; the
    reads that go on from a budget stop do not list it again (Cursor.resume), and the last
    read, which reaches the end, ends the catch-up (no read that finds nothing). A torn
    last line early in the order is still seen; a file created meanwhile is read by the
    next catch-up."""
    from badput import analysis

    job_dir = tmp_path / "j"
    for a in range(40):
        events = [
            Event(ts=float(a * 10 + i), kind="heartbeat", job="j", attempt=a) for i in range(5)
        ]
        (job_dir / str(a)).mkdir(parents=True)
        (job_dir / str(a) / "h-0-1.jsonl").write_bytes(encode_lines(events))
    with (job_dir / "0" / "h-0-1.jsonl").open("ab") as fh:
        fh.write(b'{"ts": 1.5, "kind": "heartb')  # torn: the writer died mid-line
    monkeypatch.setattr(analysis, "READ_SLICE_BYTES", 1_000)  # about 12 lines a slice
    created: list[bool] = []

    class _Creating(_CountingStore):
        """Creates a new attempt's file while the catch-up goes on from a budget stop."""

        def read(
            self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
        ) -> ReadResult:
            if cursor is not None and cursor.resume is not None and not created:
                late = [Event(ts=999.0, kind="heartbeat", job="j", attempt="late")]
                (job_dir / "late").mkdir()
                (job_dir / "late" / "h-0-1.jsonl").write_bytes(encode_lines(late))
                created.append(True)
            return super().read(job, cursor, max_bytes=max_bytes)

    store = _Creating(tmp_path)
    _CountingStore.listings = _CountingStore.reads = 0
    live = analysis.LiveJob(store, "j", parallel=False)
    assert live.update() == 200  # 40 files x 5 events
    # listed by the first read; the reads after it go on from where each stopped
    assert created and _CountingStore.listings == 1 and _CountingStore.reads > 10
    torn = [u for u in live._unread if u.code == "torn_line"]
    assert [(u.source.endswith("0/h-0-1.jsonl"), u.line) for u in torn] == [(True, 6)]
    reads = _CountingStore.reads
    assert live.update() == 1  # the late file, found by the next listing
    assert (_CountingStore.listings, _CountingStore.reads) == (2, reads + 1)
    assert live.accountant.n_events == 201
    torn = [u for u in live._unread if u.code == "torn_line"]
    assert [(u.source.endswith("0/h-0-1.jsonl"), u.line) for u in torn] == [(True, 6)]
    assert live.update() == 0
    assert (_CountingStore.listings, _CountingStore.reads) == (3, reads + 2)


# A line of a file in the property below: a valid event, or one of what logs hold besides.
_LINE = st.one_of(
    st.integers(0, 10**6).map(lambda i: encode_line(ev(i))),  # a valid event
    st.just(b"\n"),  # blank
    st.just(b'{"ts": "not a number"}\n'),  # malformed
    st.just(b'{"ts": 1.0, "kind": "step_end", "job": "job-a", "v": 1}\n'),  # no step: invalid
    st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b"") + b"\n"),
)
_VALID_LINE = st.integers(0, 10**6).map(lambda i: encode_line(ev(i)))
_FILE = st.tuples(
    st.booleans(),  # a UTF-8 BOM first
    st.one_of(st.lists(_LINE, max_size=30), st.lists(_VALID_LINE, max_size=30)),
    st.sampled_from([b"", b'{"ts": 1.5, "ki', b"\0" * 300, b'{"ts": 2.0}']),  # the tail
)


@settings(max_examples=120, deadline=None)
@given(
    files=st.lists(_FILE, min_size=1, max_size=12),
    block=st.integers(16, 400),
    slice_bytes=st.integers(1, 5_000),
    odd=st.booleans(),
    probe=st.integers(1, 120) | st.just(64 * 1024),
)
def test_a_catch_up_in_slices_reads_what_each_file_read_whole_holds(  # noqa: PLR0917
    tmp_path_factory: pytest.TempPathFactory,
    files: list[tuple[bool, list[bytes], bytes]],
    block: int,
    slice_bytes: int,
    odd: bool,
    probe: int,
) -> None:
    """Whatever the files (a BOM, blank, malformed and invalid lines, a torn last line, a
    run of NULs) and the budget of each read: the reads of one catch-up (one listing, then
    reads that go on from each budget stop, the first of each file opened without a stat)
    give the lines, file:line, cursor and unread tails of each file decoded whole, in
    stream order. With ``odd``, a FIFO, a link to a file and a link to a directory too.
    ``probe``: how far past a block's end its last line's end is looked for (a small one
    misses it often: that block is then cut mid-line)."""
    from badput import analysis
    from badput.store import _reading

    root = tmp_path_factory.mktemp("catchup")
    job_dir = root / JOB
    for k, (bom, lines, tail) in enumerate(files):
        path = job_dir / str(k % 3) / f"h-{k}-1.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((BOM if bom else b"") + b"".join(lines) + tail)
    if odd:
        os.mkfifo(job_dir / "fifo.jsonl")
        (job_dir / "link.jsonl").symlink_to(job_dir / "0" / "h-0-1.jsonl")
        (job_dir / "dir.jsonl").symlink_to(job_dir / "0")
    store = JsonlStore(root)
    expected: list[tuple[str, int | None, object]] = []
    offsets: dict[str, tuple[int, int]] = {}
    tails: list[tuple[str, str, int | None, int]] = []
    for stream in store.streams(JOB):
        path = job_dir / stream
        if stream == "fifo.jsonl":
            tails.append(("not_a_file", str(path), None, 0))
            continue
        parsed = parse_stream([path.read_bytes()], str(path), 0, at_start=True)
        expected += [
            (str(path), c.first_line + i, item)
            for c in parsed.chunks
            for i, item in enumerate(c.items)
        ]
        if parsed.n_bytes:
            offsets[stream] = (parsed.n_bytes, parsed.n_lines)
        torn = torn_tail(parsed, str(path), parsed.n_lines + 1)
        if torn is not None:
            tails.append((torn.code, torn.source, torn.line, torn.size))
    assert "dir.jsonl" not in store.streams(JOB)  # a link to a directory is not followed

    got: list[tuple[str, int | None, object]] = []

    class Keeping(JsonlStore):
        def read(
            self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
        ) -> ReadResult:
            result = super().read(job, cursor, max_bytes=max_bytes)
            got.extend(
                (c.source, c.first_line + i, item)
                for c in result.chunks
                for i, item in enumerate(c.items)
            )
            return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_reading, "READ_BLOCK", block)
        mp.setattr(_reading, "_PROBE", probe)
        mp.setattr(analysis, "READ_SLICE_BYTES", slice_bytes)
        live = analysis.LiveJob(Keeping(root), JOB, parallel=False)
        live.update()

    def same_item(a: object, b: object) -> bool:
        if isinstance(a, EventError) and isinstance(b, EventError):
            return (a.message, a.file, a.line) == (b.message, b.file, b.line)
        return a == b

    assert [(s, n) for s, n, _ in got] == [(s, n) for s, n, _ in expected]
    assert all(same_item(a, b) for (_, _, a), (_, _, b) in zip(got, expected, strict=True))
    assert live._cursor is not None and live._cursor.offsets == offsets
    assert [(u.code, u.source, u.line, u.size) for u in live._unread] == tails


def test_a_torn_line_completed_during_a_catch_up_is_not_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read that uses up its budget in a file reports that file's torn last line; the
    next read of the catch-up starts in that file again and, the line completed meanwhile,
    reads it: what the catch-up leaves unread is the last read's word on each file."""
    from badput import analysis

    first = tmp_path / JOB / "0" / "h-0-1.jsonl"
    first.parent.mkdir(parents=True)
    line = encode_line(ev(1))
    first.write_bytes(line + line[:20])  # a complete line, then one being written
    second = tmp_path / JOB / "1" / "h-0-1.jsonl"
    second.parent.mkdir(parents=True)
    second.write_bytes(encode_line(ev(2)))
    monkeypatch.setattr(analysis, "READ_SLICE_BYTES", len(line) // 2)
    seen: list[list[str]] = []

    class Completing(JsonlStore):
        def read(
            self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
        ) -> ReadResult:
            if cursor is not None and cursor.resume is not None and len(seen) == 1:
                with first.open("ab") as fh:
                    fh.write(line[20:])  # the writer completes its line
            result = super().read(job, cursor, max_bytes=max_bytes)
            seen.append([u.code for u in result.unread])
            return result

    live = analysis.LiveJob(Completing(tmp_path), JOB, parallel=False)
    assert live.update() == 3
    assert seen[0] == ["torn_line"]  # the first read saw it torn, and stopped in that file
    assert len(seen) >= 2
    assert live._unread == []
    assert "torn_line" not in {d.code for d in live.report(final=True).diagnostics}


def test_a_read_stops_where_blocks_cut_every_read_block_bytes_would(tmp_path: Path) -> None:
    """Blocks are read on to the end of their last line, but the budget counts the bytes
    that blocks cut every READ_BLOCK would hold: a budget that ends inside the line the first
    block was read on to (bytes 100..114) is not used up there, and the read goes on to the
    end of the line holding byte 199 (228), as read_stops says. Fails if the budget counted
    the lengthened blocks (the read would stop at 114)."""
    from badput.store import _reading

    line = b'{"ts":1,"kind":"heartbeat","job":"j","name":"xxxxxxxxx"}\n'  # 57 bytes
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "a.jsonl").write_bytes(line * 20)
    store = JsonlStore(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_reading, "READ_BLOCK", 100)
        result = store.read("j", None, max_bytes=110)
        stops = store.read_stops("j", 110)
    assert result.cursor.offsets == {"a.jsonl": (228, 4)}
    assert stops[0] == ("a.jsonl", 228, 4)
    assert [len(c.items) for c in result.chunks] == [2, 2]  # two blocks, each whole lines


def test_paths_are_what_a_read_opens_and_its_chunks_name(tmp_path: Path) -> None:
    """JsonlStore.paths: the plan of a parallel read names each file by it, and a worker's
    chunks must carry the same name as the serial read's."""
    store = JsonlStore(tmp_path)
    for stream in ("0/h-0-1.jsonl", "1/h-0-2.jsonl", "1/sub/h-1-3.jsonl"):
        path = tmp_path / "j" / stream
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_line(Event(ts=1.0, kind="heartbeat", job="j")))
    streams = store.streams("j")
    sources = [chunk.source for chunk in store.read("j").chunks]
    assert store.paths("j", streams) == sources
    assert store.paths("j", streams) == [str(path) for _, path in store.files("j")]


def _walk_finds_jsonl(top: str, depth: int) -> bool:
    """The rule ``has_jsonl_below`` keeps, as ``os.walk`` states it: a ``.jsonl`` name
    among the non-directories ``depth`` or more levels below ``top``."""
    base = top.rstrip(os.sep).count(os.sep)
    for dirpath, _dirnames, filenames in os.walk(top):
        level = dirpath.rstrip(os.sep).count(os.sep) - base + 1
        if level >= depth and any(f.endswith(".jsonl") for f in filenames):
            return True
    return False


_TREE_ENTRY = st.tuples(
    st.integers(0, 20),  # parent: an index among the directories made so far
    st.sampled_from(["dir", "file", "link_to_dir", "fifo", "dangling"]),
    st.sampled_from(["a", "b", "a.jsonl", "b.jsonl", "0", "x.jsonl.bak"]),
)


@settings(max_examples=150, deadline=None)
@given(entries=st.lists(_TREE_ENTRY, max_size=14), depth=st.integers(1, 3))
def test_has_jsonl_below_finds_what_os_walk_finds(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[int, str, str]], depth: int
) -> None:
    """Depth first and stopping at the first file, it answers as a whole walk does, for
    every directory of any tree of files, directories, FIFOs and links (to directories,
    which are not entered, and to nothing)."""
    root = tmp_path_factory.mktemp("tree")
    dirs = [root]
    for parent, what, name in entries:
        path = dirs[parent % len(dirs)] / name
        if path.exists() or path.is_symlink():
            continue
        if what == "dir":
            path.mkdir()
            dirs.append(path)
        elif what == "file":
            path.write_bytes(b"")
        elif what == "link_to_dir":
            path.symlink_to(dirs[parent % len(dirs)])  # a loop, if it were entered
        elif what == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to(path.with_name(name + ".gone"))
    for d in dirs:
        assert has_jsonl_below(d, depth) == _walk_finds_jsonl(str(d), depth), (d, depth)
