"""A compacted job's read kept between runs (badput.runtime.state_cache, store.KeptRead):
the same report as a read of the archive, from a state loaded instead of the archive's
rows; a state kept only of a read of the archive alone; never used for another archive,
other options or other code; a damaged or planted file a miss that runs nothing."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from badput.analysis import LiveJob
from badput.cli import main
from badput.engine import RankOptions
from badput.events import Event
from badput.formats.codec import encode_lines
from badput.report import to_json
from badput.runtime import state_cache
from badput.runtime.env import cache_home
from badput.runtime.state_cache import StateCache, default_state_cache
from badput.store import ARCHIVE_NAME, KeptRead, compact, open_source
from badput.store import _archive as archive_store

T0 = 1_700_000_000.0


def lines(a: int, b: int, *, rank: int = 0, attempt: int = 0) -> bytes:
    """Steps a..b-1 of a rank, a second apart, each with a data load of 0.25 s."""
    events = []
    for i in range(a, b):
        t = T0 + attempt * 1000 + i
        events += [
            Event(ts=t, kind="step_start", job="p", step=i, attempt=attempt, rank=rank),
            Event(ts=t + 0.5, kind="data_loading_start", job="p", attempt=attempt, rank=rank),
            Event(ts=t + 0.75, kind="data_loading_end", job="p", attempt=attempt, rank=rank),
        ]
    return encode_lines(events)


def write(path: Path, data: bytes, mode: str = "wb") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as f:
        f.write(data)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A job of two attempts, compacted."""
    job_dir = tmp_path / "p"
    write(job_dir / "0" / "h-0-1.jsonl", lines(0, 40))
    write(job_dir / "1" / "h-0-1.jsonl", lines(0, 30, attempt=1))
    compact(*open_source(job_dir))
    return job_dir


def read(job_dir: Path, cache: StateCache | None, **kw: object) -> LiveJob:
    live = LiveJob(job_dir, state_cache=cache, **kw)  # type: ignore[arg-type]
    live.update()
    return live


def report_of(live: LiveJob) -> str:
    return to_json(live.snapshot(final=True))


def no_archive_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("the archive's rows were read")

    monkeypatch.setattr(archive_store._RowGroups, "read", refuse)


def test_a_second_reader_loads_the_state_and_reads_no_row_of_the_archive(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = StateCache(tmp_path / "cache", background=False)
    first = read(job, cache)
    assert first.update() == 0
    expected = report_of(first)  # (its report keeps the state)
    assert len(list(cache.root.glob("*.state"))) == 1
    no_archive_rows(monkeypatch)
    second = LiveJob(job, state_cache=cache)
    assert second.update() == 210  # the lines the kept read had read
    assert report_of(second) == expected
    assert second.accountant is not first.accountant
    monkeypatch.undo()
    assert report_of(read(job, None)) == expected  # the archive read again, no cache


def test_a_job_that_wrote_after_its_archive_is_read_through_the_archive(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line written after the archive takes its place among the archive's rows in a read
    of the archive (its file's), which decides between events of one time: the kept state
    is not used then, and the report is the archive's."""
    cache = StateCache(tmp_path / "cache", background=False)
    report_of(read(job, cache))
    write(job / "1" / "h-0-1.jsonl", lines(30, 45, attempt=1), "ab")
    write(job / "0" / "h-1-1.jsonl", lines(0, 45, rank=1))
    with monkeypatch.context() as patch:
        no_archive_rows(patch)
        with pytest.raises(AssertionError, match="rows were read"):
            read(job, cache)
    with monkeypatch.context() as patch:  # (refused from its note: the state is not read)
        unpickled = count_loads(patch)
        live = read(job, cache)
    assert unpickled == []
    assert report_of(live) == report_of(read(job, None))
    (job / ARCHIVE_NAME).unlink()
    assert report_of(live) == report_of(read(job, None))  # and that is the JSON lines'


def count_loads(patch: pytest.MonkeyPatch) -> list[object]:
    """The states unpickled from now on (a refusal by raising would be taken for damage)."""
    loads: list[object] = []
    load = state_cache._StateUnpickler.load

    def counted(self: object) -> object:
        loads.append(self)
        return load(self)  # type: ignore[arg-type]

    patch.setattr(state_cache._StateUnpickler, "load", counted)
    return loads


def test_a_reader_that_loaded_the_state_follows_what_the_job_writes_next(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As any live reader of a compacted job (``watch``): new lines after what it read."""
    cache = StateCache(tmp_path / "cache", background=False)
    report_of(read(job, cache))
    no_archive_rows(monkeypatch)
    live = read(job, cache)
    write(job / "1" / "h-0-1.jsonl", lines(30, 45, attempt=1), "ab")
    assert live.update() == 45
    assert live.update() == 0
    follower = LiveJob(job, state_cache=None)
    monkeypatch.undo()
    follower.update()  # the archive read, then the same new lines
    assert report_of(live) == report_of(follower)


def test_no_state_is_kept_of_a_read_that_went_past_the_archive(job: Path, tmp_path: Path) -> None:
    cache = StateCache(tmp_path / "cache", background=False)
    write(job / "0" / "h-0-1.jsonl", lines(40, 41), "ab")
    report_of(read(job, cache))
    assert list(cache.root.glob("*.state")) == []
    # nor of one that left a torn last line unread
    compact(*open_source(job), replace=False)
    write(job / "0" / "h-0-1.jsonl", b'{"ts": 17', "ab")
    report_of(read(job, cache))
    assert list(cache.root.glob("*.state")) == []


def test_nor_once_the_reader_has_read_on(job: Path, tmp_path: Path) -> None:
    cache = StateCache(tmp_path / "cache", background=False)
    live = read(job, cache)
    write(job / "0" / "h-0-1.jsonl", lines(40, 41), "ab")
    assert live.update() == 3
    report_of(live)
    assert list(cache.root.glob("*.state")) == []


def test_other_options_another_archive_another_state(job: Path, tmp_path: Path) -> None:
    cache = StateCache(tmp_path / "cache", background=False)
    report_of(read(job, cache))
    report_of(read(job, cache, ideal_step_time=0.5))
    report_of(read(job, cache, rank_options=RankOptions(straggler_threshold=1.5)))
    assert len(list(cache.root.glob("*.state"))) == 3
    write(job / "0" / "h-0-1.jsonl", lines(40, 50), "ab")
    compact(*open_source(job))  # a new archive: its own state
    store, name = open_source(job)
    assert KeptRead.of(cache, store, name, None) is not None
    live = read(job, cache)
    assert report_of(live) == report_of(read(job, None))
    assert len(list(cache.root.glob("*.state"))) == 4


def test_the_readers_own_options_apply_to_a_kept_state(job: Path, tmp_path: Path) -> None:
    """A price and a peak are set after the read (``badput report --price``): the state
    kept by a reader with other ones gives this reader's numbers."""
    cache = StateCache(tmp_path / "cache", background=False)
    saver = read(job, cache)
    saver.accountant.price_per_device_hour, saver.accountant.peak_flops = 9.0, 1e15
    saver.accountant.devices = 8
    report_of(saver)
    for price in (None, 2.0):
        loaded, cold = read(job, cache), read(job, None)
        for live in (loaded, cold):
            live.accountant.price_per_device_hour = price
        assert report_of(loaded) == report_of(cold)
        assert loaded.accountant.peak_flops is None


def test_the_cli_keeps_the_read_where_badput_state_cache_says(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def report() -> str:
        result = CliRunner().invoke(main, ["report", "--json", str(job)])
        assert result.exit_code == 0, result.output
        return result.output

    monkeypatch.setenv("BADPUT_STATE_CACHE", "off")
    expected = report()
    monkeypatch.setenv("BADPUT_STATE_CACHE", str(tmp_path / "kept"))
    assert report() == expected
    wait_for(lambda: len(list((tmp_path / "kept").glob("*.state"))) == 1)  # (kept behind)
    no_archive_rows(monkeypatch)
    assert report() == expected
    assert json.loads(expected)["total_seconds"] > 0


def test_the_default_cache_is_the_users_and_off_is_none(tmp_path: Path) -> None:
    assert default_state_cache({"BADPUT_STATE_CACHE": "off"}) is None
    assert default_state_cache({"BADPUT_STATE_CACHE": "0"}) is None
    named = default_state_cache({"BADPUT_STATE_CACHE": str(tmp_path)})
    assert named is not None and named.root == tmp_path
    xdg = default_state_cache({"XDG_CACHE_HOME": str(tmp_path)})
    assert xdg is not None and xdg.root == tmp_path / "badput" / "state"


# -- the cache itself -------------------------------------------------------------------


def wait_for(done: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "not done in time"
        time.sleep(0.02)


def test_a_state_is_written_behind_the_caller_by_a_process_of_its_own(tmp_path: Path) -> None:
    cache = StateCache(tmp_path)
    state = {"a": np.arange(1_000_000, dtype=np.float64)}
    path = cache.save("k", state)
    assert path == cache.path("k")
    wait_for(path.exists)
    got = cache.load("k", ())
    assert got is not None and np.array_equal(got["a"], state["a"])
    assert not list(tmp_path.glob(".*.tmp"))  # (renamed whole into place)


def test_a_note_is_read_first_and_a_refused_state_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = StateCache(tmp_path, background=False)
    cache.save("k", np.ones(10), note={"sizes": {"a.jsonl": 7}})
    got = cache.load("k", (), accept=lambda note: note == {"sizes": {"a.jsonl": 7}})
    assert got is not None and got.sum() == 10
    unpickled = count_loads(monkeypatch)
    assert cache.load("k", (), accept=lambda note: False) is None
    assert unpickled == []
    assert cache.save("k2", [1], note={1, 2}) is None  # not JSON: nothing kept


def test_a_write_that_died_long_ago_is_removed(tmp_path: Path) -> None:
    cache = StateCache(tmp_path, background=False)
    died = tmp_path / ".badput-state-abc.tmp"
    died.write_bytes(b"half a state")
    fresh = tmp_path / ".badput-state-def.tmp"
    fresh.write_bytes(b"being written")
    old = time.time() - 2 * 86400
    os.utime(died, (old, old))
    cache.save("k", [1])
    assert not died.exists() and fresh.exists()


def test_only_its_own_files_are_ever_removed(tmp_path: Path) -> None:
    """A cache pointed at a directory of other files (``BADPUT_STATE_CACHE=~``) removes
    none of them, however full it gets."""
    others = [tmp_path / name for name in ("notes.state", ".x.tmp", "a" * 40 + ".txt")]
    for path in others:
        path.write_bytes(b"x" * 10_000)
        os.utime(path, (0, 0))  # the oldest files there
    cache = StateCache(tmp_path, max_bytes=1, background=False)
    cache.save("k", np.zeros(1000))
    cache.save("k2", np.zeros(1000))
    assert all(p.exists() for p in others)
    assert not cache.path("k").exists() and cache.path("k2").exists()


def test_a_state_round_trips_with_its_arrays_writable(tmp_path: Path) -> None:
    cache = StateCache(tmp_path, background=False)
    state = {"a": np.arange(100_000, dtype=np.float64), "b": [1, "x", None], "c": {1.5}}
    assert cache.save("k", state) is not None
    got = cache.load("k", ())
    assert got["b"] == [1, "x", None] and got["c"] == {1.5}
    assert np.array_equal(got["a"], state["a"]) and got["a"].flags.writeable
    got["a"][0] = 7.0
    assert cache.load("another", ()) is None


@pytest.mark.parametrize(
    "damage",
    ["cut", "magic", "garbage", "longer", "empty"],
)
def test_a_damaged_file_is_a_miss(tmp_path: Path, damage: str) -> None:
    cache = StateCache(tmp_path, background=False)
    path = cache.save("k", [np.ones(1000)])
    assert path is not None
    data = path.read_bytes()
    damaged = {
        "cut": data[: len(data) // 2],
        "magic": b"X" + data[1:],
        "garbage": os.urandom(len(data)),
        "longer": data + b"\0",
        "empty": b"",
    }[damage]
    path.write_bytes(damaged)
    assert cache.load("k", ()) is None


def test_a_planted_file_runs_no_code(tmp_path: Path) -> None:
    """A state file written by someone else to run a command is refused, unrun: only the
    classes of the modules named (and numpy's arrays) are ever resolved."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    cache = StateCache(tmp_path / "cache", background=False)
    path = cache.save("k", [Evil()])
    assert path is not None
    assert cache.load("k", ("badput.engine",)) is None
    assert not marker.exists()
    # a function of an allowed module is refused as well: classes only
    path2 = cache.save("k2", [len])
    assert path2 is not None and cache.load("k2", ("builtins",)) is None


def test_the_cache_keeps_at_most_max_bytes_newest_first(tmp_path: Path) -> None:
    cache = StateCache(tmp_path, max_bytes=250_000, background=False)
    for i in range(3):  # ~80 kB each: 240 kB
        assert cache.save(f"k{i}", np.zeros(10_000)) is not None
        os.utime(cache.path(f"k{i}"), ns=(i * 10**9, i * 10**9))
    cache.load("k0", ())  # used now: kept before k1 and k2
    cache.save("k3", np.zeros(10_000))  # 320 kB: the one used longest ago goes
    kept = {k for k in ("k0", "k1", "k2", "k3") if cache.path(k).exists()}
    assert kept == {"k0", "k2", "k3"}
    big = StateCache(tmp_path / "small", max_bytes=1, background=False)
    assert big.save("alone", np.zeros(10_000)) is not None  # larger than the cap: kept
    assert big.load("alone", ()) is not None


def test_a_cache_that_cannot_be_written_costs_nothing_but_time(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = StateCache(blocker / "state", background=False)
    assert cache.save("k", [1, 2]) is None
    assert cache.load("k", ()) is None
    assert list(tmp_path.iterdir()) == [blocker]


def test_the_cache_home_is_xdg_cache_home_only_when_absolute(tmp_path: Path) -> None:
    """A relative XDG_CACHE_HOME is ignored, as the XDG specification says: a cache that
    moved with the working directory would be made anew wherever a job is read."""
    home = os.path.join(os.path.expanduser("~"), ".cache", "badput")
    assert cache_home({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "badput"
    assert str(cache_home({"XDG_CACHE_HOME": "relative/cache"})) == home
    assert str(cache_home({"XDG_CACHE_HOME": ""})) == home
    assert str(cache_home({})) == home
