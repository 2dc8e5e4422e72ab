"""The collector pause around reads and reports (badput.runtime.gc_pause): scoped, re-entrant, and
leaves what it made in the oldest generation instead of the youngest."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator

import pytest

from badput.runtime.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_the_pause_is_scoped_and_reentrant() -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # only the outermost pause resumes
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


@pytest.mark.parametrize(
    ("n", "aged"),
    [
        # a cold read: in the oldest generation (a young collection would have walked
        # them into the middle one), and not frozen
        (150_000, True),
        # a monitor's update in a training job: the job's young garbage is collected as usual
        (100, False),
    ],
    ids=["large-pause-ages", "small-pause-leaves-young"],
)
def test_what_a_pause_made_is_aged_only_when_it_made_many(n: int, aged: bool) -> None:
    gc.enable()
    gc.collect()
    with gc_paused():
        made = [[i] for i in range(n)]
    oldest = {id(x) for x in gc.get_objects(generation=2)}
    assert (id(made) in oldest) is aged
    assert (id(made[0]) in oldest) is aged
    assert (id(made[-1]) in oldest) is aged
    assert gc.get_freeze_count() == 0
    del made


def test_what_the_caller_froze_stays_frozen() -> None:
    gc.enable()
    gc.collect()
    theirs = [[1], [2]]  # objects the caller froze (before a fork, say)
    gc.freeze()
    assert gc.get_freeze_count() > 0
    with gc_paused():
        made = [[i] for i in range(150_000)]
    # still in the permanent generation: in none of the three others
    tracked = {id(x) for x in gc.get_objects()}
    assert id(theirs) not in tracked
    assert id(theirs[0]) not in tracked
    assert id(made) in tracked  # what the pause made is tracked as usual (left young)
    del made


def test_a_body_that_raises_still_resumes() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_during_another_threads_pause_collects() -> None:
    """A monitor's read pauses the collector in its thread; a data loader forking its
    workers meanwhile must not give them a collector that is off for good."""
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    def read() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert inside.wait(10)
        assert not gc.isenabled()  # the pause is process-wide
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running any cleanup
            os.write(w, b"1" if gc.isenabled() else b"0")
            with gc_paused():  # and a pause of its own still works
                pass
            os.write(w, b"1" if gc.isenabled() else b"0")
            os._exit(0)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        got = os.read(r, 2)
        os.close(r)
        assert status == 0
        assert got == b"11"
    finally:
        release.set()
        reader.join(10)
    assert gc.isenabled()
