"""``badput report`` lists a directory's job in a helper process while it imports the engine.

The listing it hands back is what ``list_job`` gives in this process; a helper that fails
or dies leaves the command to list the job itself, with the same report and errors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from badput.cli import _list_ahead, main
from badput.store import JobListing, JsonlStore, list_job

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_attempts import write_job as write_attempts

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the helper is forked: Linux only"
)


def fields(listing: JobListing) -> tuple[object, ...]:
    store = listing.store
    assert isinstance(store, JsonlStore)
    return store.root, store.job_dirs, listing.job, listing.streams, listing.sizes


def test_list_job_lists_the_streams_in_read_order_with_their_sizes(tmp_path: Path) -> None:
    write_attempts(tmp_path, 12, id_less=False)
    fifo = tmp_path / "many" / "3" / "odd.jsonl"
    os.mkfifo(fifo)  # listed as a stream (its read says it is not a file), size 0
    listing = list_job(tmp_path, "many")
    store = JsonlStore(tmp_path)
    assert listing.job == "many"
    assert listing.streams == tuple(store.streams("many"))
    assert listing.streams is not None and listing.sizes is not None
    sizes = dict(zip(listing.streams, listing.sizes, strict=True))
    assert sizes["3/odd.jsonl"] == 0
    assert sizes["0/h-0-1.jsonl"] == (tmp_path / "many" / "0" / "h-0-1.jsonl").stat().st_size > 0
    one_file = list_job(tmp_path / "many" / "0" / "h-0-1.jsonl")
    assert one_file.streams is None and one_file.sizes is None  # nothing to list ahead


@linux_only
def test_the_helper_hands_back_what_list_job_gives(tmp_path: Path) -> None:
    write_attempts(tmp_path, 30, id_less=False)
    # (made directly: list_ahead() declines while another test's thread runs in this process)
    ahead = _list_ahead.ListingAhead(tmp_path, "many")
    got = ahead.result()
    assert got is not None
    assert fields(got) == fields(list_job(tmp_path, "many"))
    assert ahead.result() is got  # asked again: the same, the helper long gone
    assert not ahead._helper.is_alive()


@linux_only
def test_a_helper_that_fails_or_dies_leaves_the_listing_to_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _list_ahead.ListingAhead(tmp_path / "missing", None).result() is None
    write_attempts(tmp_path, 3, id_less=False)
    monkeypatch.setattr(_list_ahead, "list_job", lambda *_: os._exit(3))
    died = _list_ahead.ListingAhead(tmp_path, "many")
    assert died.result() is None
    assert died._helper.exitcode == 3


def test_no_helper_while_another_thread_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forking copies the locks other threads hold: with one running, no helper."""
    monkeypatch.setattr(_list_ahead.threading, "active_count", lambda: 2)
    assert _list_ahead.list_ahead(tmp_path, None) is None


@linux_only
def test_the_report_is_the_same_listed_ahead_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_attempts(tmp_path, 40, id_less=False)
    (tmp_path / "many" / "7" / "h-0-1.jsonl").open("ab").write(b'{"ts": 17')  # torn
    made: list[object] = []

    def counted(path: str, job: str | None) -> object:
        made.append(path)
        return _list_ahead.ListingAhead(path, job)  # (whatever other threads this process has)

    monkeypatch.setattr(_list_ahead, "list_ahead", counted)
    runner = CliRunner()
    ahead = runner.invoke(main, ["report", str(tmp_path), "--job", "many", "--json"])
    assert made == [str(tmp_path)]
    monkeypatch.setattr(_list_ahead, "list_ahead", lambda *_: None)
    alone = runner.invoke(main, ["report", str(tmp_path), "--job", "many", "--json"])
    assert ahead.exit_code == alone.exit_code == 0, ahead.output
    assert ahead.stdout == alone.stdout
    assert '"torn_line"' in ahead.stdout
    no_job = runner.invoke(main, ["report", str(tmp_path), "--job", "nope"])
    assert no_job.exit_code == 2
    assert "no job 'nope' in this store (jobs: many)" in no_job.output


@linux_only
def test_export_and_compare_read_a_job_listed_ahead_as_they_read_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other commands that read a whole job (``export``, ``compare``) list a
    directory's job ahead too, and write what they write without it."""
    write_attempts(tmp_path / "store", 25, id_less=False)
    job_dir = str(tmp_path / "store" / "many")
    made: list[object] = []

    def counted(path: str, job: str | None) -> object:
        made.append(path)
        return _list_ahead.ListingAhead(path, job)

    runner = CliRunner()
    outputs = []
    for helper in (counted, lambda *_: None):
        monkeypatch.setattr(_list_ahead, "list_ahead", helper)
        trace = tmp_path / f"trace-{len(outputs)}.json"
        done = runner.invoke(main, ["export", "trace", job_dir, str(trace)])
        assert done.exit_code == 0, done.output
        compared = runner.invoke(main, ["compare", job_dir, job_dir, "--json"])
        assert compared.exit_code == 0, compared.output
        outputs.append((trace.read_bytes(), compared.stdout))
    assert made == [job_dir] * 3  # export, and each side of compare
    assert outputs[0] == outputs[1]


def test_a_helper_only_for_a_job_of_many_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fork costs about 5 ms: a job is listed ahead only when its directory (or, in a
    store root, one of its first jobs') has MANY_DIRECTORIES sub-directories or more, by
    link counts; on a file system that does not count them, always."""
    many = _list_ahead.MANY_DIRECTORIES
    write_attempts(tmp_path / "small", 3, id_less=False)
    big = tmp_path / "big" / "many"
    for a in range(many):
        (big / str(a)).mkdir(parents=True)
    guess = _list_ahead._many_directories
    assert not guess(str(tmp_path / "small"), "many")
    assert not guess(str(tmp_path / "small" / "many"), None)
    assert guess(str(tmp_path / "big"), "many")  # a store root and its job
    assert guess(str(tmp_path / "big"), None)  # a store root of one job
    assert guess(str(big), None)  # the job's directory
    assert not guess(str(tmp_path / "missing"), None)
    (big / "0" / "h.jsonl").write_bytes(b"")
    assert not guess(str(big / "0" / "h.jsonl"), None)  # a file: nothing to list
    (big / str(many - 1)).rmdir()
    assert not guess(str(big), None)  # one short
    assert _list_ahead.list_ahead(tmp_path / "small", "many") is None

    class Uncounted:  # a file system that does not count sub-directories (btrfs)
        st_mode = os.stat(tmp_path).st_mode
        st_nlink = 1

    monkeypatch.setattr(_list_ahead.os, "stat", lambda _path: Uncounted())
    assert guess(str(tmp_path / "small"), "many")
