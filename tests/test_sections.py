"""``rec.section(name)``: timed in the process, written as ``section_summary`` events."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from badput import Recorder
from badput.recorder import NullRecorder
from badput.recorder._sections import SectionTimers, summarize
from badput.store import MemoryStore
from badput.testing import read_all, recorder_for_tests


def summaries(store: MemoryStore, job: str = "test-job") -> list:  # type: ignore[type-arg]
    events, errors = read_all(store, job)
    assert errors == []
    return [e for e in events if e.kind == "section_summary"]


def test_sections_become_one_summary_per_period_not_two_events_per_run() -> None:
    rec = recorder_for_tests(section_interval=3600)
    for step in range(50):
        with rec.step(step), rec.section("forward"):
            time.sleep(0.001)
    with rec.section("backward"):
        pass
    rec.flush()
    events, _ = read_all(rec.store, "test-job")  # type: ignore[arg-type]
    assert len(events) == 100 + 2  # the steps, and one summary per section
    bwd, fwd = sorted(summaries(rec.store), key=lambda e: e.name)  # type: ignore[arg-type]
    assert (bwd.name, bwd.count) == ("backward", 1)
    assert (fwd.name, fwd.count) == ("forward", 50)
    q = fwd.quantiles
    assert 0.001 <= q["min"] <= q["p50"] <= q["p90"] <= q["max"]
    assert fwd.seconds == pytest.approx(50 * q["p50"], rel=0.5)
    assert fwd.open_since is None
    assert fwd.ts - 5 < fwd.last <= fwd.ts  # wall clock of the last completion
    rec.flush()  # nothing ran since: no new summary
    assert len(summaries(rec.store)) == 2  # type: ignore[arg-type]
    rec.close()


def test_the_writer_thread_writes_summaries_periodically_and_reports_open_runs() -> None:
    rec = recorder_for_tests(section_interval=0.05, flush_interval=0.01)
    with rec.section("forward"):
        pass
    entered = time.time()
    with rec.section("forward"):  # stuck for a while: the summaries say it is open
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            opened = [e for e in summaries(rec.store) if e.open_since is not None]  # type: ignore[arg-type]
            if opened:
                break
            time.sleep(0.01)
    assert opened, "no summary reported the open run"
    assert opened[0].open_since == pytest.approx(entered, abs=0.05)
    rec.close()
    assert sum(e.count for e in summaries(rec.store)) == 2  # type: ignore[arg-type]


def test_a_section_that_raises_is_timed_and_the_error_propagates() -> None:
    rec = recorder_for_tests()
    with pytest.raises(KeyError), rec.section("forward"):
        raise KeyError("x")
    with rec.section("forward"), rec.section("forward"):  # nested, same name
        pass
    rec.close()
    assert sum(e.count for e in summaries(rec.store)) == 3  # type: ignore[arg-type]


def test_a_close_waits_for_the_summary_the_thread_is_writing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread has taken a summary's samples and not yet written them when ``close``
    comes: the close waits, and the summary is written, not dropped as after a close."""
    rec = recorder_for_tests(section_interval=0.001, flush_interval=0.005)
    fields = rec._fields
    writing = threading.Event()

    def slow(kind: str, values: object, ts: float | None) -> None:
        if threading.current_thread() is not threading.main_thread():
            writing.set()
            time.sleep(0.2)  # taken from the timers, not yet written
        fields(kind, values, ts)  # type: ignore[arg-type]

    monkeypatch.setattr(rec, "_fields", slow)
    with rec.section("tight"):
        pass
    assert writing.wait(5.0)
    rec.close()
    assert sum(e.count for e in summaries(rec.store)) == 1  # type: ignore[arg-type]
    assert rec.dropped_events == 0


def test_nothing_is_lost_while_the_writer_takes_samples() -> None:
    rec = recorder_for_tests(section_interval=0.001, flush_interval=0.005)
    runs = 20_000

    def work() -> None:
        for _ in range(runs):
            with rec.section("tight"):
                pass

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(50):
        rec.flush()
    for t in threads:
        t.join()
    rec.close()
    assert sum(e.count for e in summaries(rec.store)) == 2 * runs  # type: ignore[arg-type]


def test_disabled_closed_and_bad_names_time_nothing() -> None:
    off = Recorder("j", MemoryStore(), enabled=False)
    assert isinstance(off, NullRecorder)
    with off.section("forward"):
        pass
    rec = recorder_for_tests()
    with rec.section(""):  # not a name: a warning, no timer
        pass
    rec.close()
    with rec.section("forward"):  # closed: no timer, nothing kept
        pass
    assert summaries(rec.store) == []  # type: ignore[arg-type]
    assert rec._sections.timers == {}


@given(st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), min_size=1, max_size=200))
def test_summary_quantiles_are_numpys(samples: list[float]) -> None:
    out = summarize(samples)
    assert out["count"] == len(samples)
    assert out["seconds"] == pytest.approx(sum(samples))
    q = out["quantiles"]
    for key, p in (("min", 0), ("p50", 50), ("p90", 90), ("max", 100)):
        assert q[key] == pytest.approx(float(np.percentile(samples, p)), abs=1e-9)


def test_empty_timers_give_no_summary() -> None:
    timers = SectionTimers()
    timers.timer("x")
    assert timers.summaries() == []
