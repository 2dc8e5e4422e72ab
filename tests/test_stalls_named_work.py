"""Time inside a recorded interval a rank closed is named work, not a stall (issue 39): a
start-up phase, a checkpoint save, a blocking batch or an evaluation longer than a short hang
timeout is not listed as a stall; an interval still open at a kill is where the job hung,
and the stall says so. Real runs: tests/integrations/test_torch.py (the hang under torchrun)
and the ``badput run --hang-timeout`` test below."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from badput.engine import Accountant, RankOptions, Report
from badput.recorder import Recorder
from badput.testing import MemoryStore, read_all, recorder_for_tests

JOB = "named"
T0 = 1_700_000_000.0


def report_of(store: MemoryStore, **kw: float) -> Report:
    events, errors = read_all(store, JOB)
    assert errors == []
    acc = Accountant(JOB)
    acc.ingest_events(sorted(events, key=lambda e: e.ts))
    return acc.report(ideal_step_time=1.0, **kw)


def start_up(rec: Recorder, t: float) -> float:
    """A distributed start of 31 s, each phase longer than a 4 s timeout: 8 s of
    ``distributed_init``, 6 s of ``model_build``, 5 s of ``compile``, 7 s of
    ``training_prep`` and 5 s of ``checkpoint_restore``. Returns its end."""
    for begin, end, dt in (
        (rec.record_distributed_init_start, rec.record_distributed_init_end, 8.0),
        (rec.record_model_build_start, rec.record_model_build_end, 6.0),
        (rec.record_compile_start, rec.record_compile_end, 5.0),
        (rec.record_training_prep_start, rec.record_training_prep_end, 7.0),
    ):
        begin(ts=t)
        end(ts=t + dt)
        t += dt
    rec.record_checkpoint_restore_start(0, ts=t)
    rec.record_checkpoint_restore_end(0, ts=t + 5.0)
    return t + 5.0


def steps(rec: Recorder, first: int, n: int, t: float, load: float = 0.0) -> float:
    """``n`` steps of 1 s from ``first``, each after a blocking batch of ``load`` s."""
    for k in range(first, first + n):
        if load:
            rec.record_data_loading_start(ts=t)
            rec.record_data_loading_end(ts=t + load)
            t += load
        rec.record_step_start(k, ts=t)
        rec.record_step_end(k, ts=t + 1.0)
        t += 1.0
    return t


def two_ranks(body: Callable[[Recorder, int], float], end: float | None = None) -> MemoryStore:
    """The launcher's ``job_start`` (hang timeout 4 s), ``body`` on ranks 0 and 1 (each its own
    recorder), then the launcher's ``attempt_end`` (``hung``) at ``end``, else its
    ``job_end`` after the later rank's end."""
    store = MemoryStore()
    launcher = recorder_for_tests(JOB, store, rank=None)
    launcher.record("job_start", ts=T0, hang_timeout=4.0)
    ends = []
    for rank in (0, 1):
        rec = recorder_for_tests(JOB, store, rank=rank)
        ends.append(body(rec, rank))
        rec.flush()
    if end is None:
        launcher.record_job_end("completed", ts=max(ends) + 1.0)
    else:
        launcher.record_attempt_end("hung", 1, ts=end)
    launcher.flush()
    return store


def test_start_up_saves_loads_and_evaluation_longer_than_the_timeout_are_no_stalls() -> None:
    def body(rec: Recorder, rank: int) -> float:
        t = start_up(rec, T0 + 1.0)
        t = steps(rec, 1, 5, t)
        rec.record_checkpoint_save_start(5, ts=t)
        rec.record_checkpoint_save_end(5, ts=t + 9.0)
        t = steps(rec, 6, 3, t + 9.0, load=6.0)  # a slow reader: 6 s per blocking batch
        rec.record_custom_start("evaluation", ts=t)
        rec.record_custom_end("evaluation", ts=t + 12.0)
        return steps(rec, 9, 2, t + 12.0)

    rep = report_of(two_ranks(body))
    # every second of the 31 s start, the 9 s save, the 18 s of loads and the 12 s
    # evaluation is named; none is a stall, though each is longer than the 4 s timeout
    assert rep.stalls == []
    assert rep.bucket("distributed_init") == 8.0 and rep.bucket("model_build") == 6.0
    assert rep.bucket("compile") == 5.0 and rep.bucket("training_prep") == 7.0
    assert rep.bucket("checkpoint_restore") == 5.0 and rep.bucket("checkpoint_save") == 9.0
    assert rep.bucket("data_loading") == 18.0 and rep.bucket("custom:evaluation") == 12.0
    assert rep.bucket("hung") == 0.0


def test_an_interval_open_at_the_kill_is_where_the_job_hung() -> None:
    # After the 31 s start and 5 steps, rank 1 enters a checkpoint save at 37 s and never
    # leaves it; rank 0 saves in 1 s and waits for it (silent). The launcher kills at 60 s.
    def body(rec: Recorder, rank: int) -> float:
        t = steps(rec, 1, 5, start_up(rec, T0 + 1.0))
        rec.record_checkpoint_save_start(5, ts=t)
        if rank == 0:
            rec.record_checkpoint_save_end(5, ts=t + 1.0)
        return t

    rep = report_of(two_ranks(body, end=T0 + 60.0))
    (stall,) = rep.stalls  # the start-up phases are not among them
    assert (stall.start, stall.end) == (T0 + 38.0, T0 + 60.0)  # rank 0's save ended at 38
    assert stall.first_stopped == [1] and stall.inside == ["checkpoint_save"]
    assert stall.threshold == 4.0 and stall.last_step == 5
    assert rep.bucket("hung") == 22.0


def test_a_silence_between_intervals_is_still_a_stall() -> None:
    # both ranks finish their start-up at 32 s, then say nothing for 10 s before step 1
    def body(rec: Recorder, rank: int) -> float:
        return steps(rec, 1, 3, start_up(rec, T0 + 1.0) + 10.0)

    (stall,) = report_of(two_ranks(body)).stalls
    assert (stall.start, stall.end, stall.seconds) == (T0 + 32.0, T0 + 42.0, 10.0)
    assert stall.inside == []


def test_a_live_job_inside_an_open_interval_is_stalled_until_it_closes() -> None:
    store = MemoryStore()
    rec = recorder_for_tests(JOB, store)
    rec.record("job_start", ts=T0, hang_timeout=4.0)
    t = steps(rec, 1, 3, T0 + 1.0)
    rec.record_checkpoint_save_start(3, ts=t)
    rec.flush()
    events, _ = read_all(store, JOB)
    acc = Accountant(JOB)
    acc.ingest_events(events)
    (stall,) = acc.report(now=t + 10.0, ideal_step_time=1.0).stalls
    assert stall.ongoing and stall.inside == ["checkpoint_save"] and stall.seconds == 10.0
    # the save ends: its 12 s were the save, not a stall
    rec.record_checkpoint_save_end(3, ts=t + 12.0)
    rec.flush()
    acc = Accountant(JOB)
    acc.ingest_events(read_all(store, JOB)[0])
    assert acc.report(now=t + 13.0, ideal_step_time=1.0).stalls == []
    # as of a time before it ended, it was still open: the stall is as it was then
    (then,) = acc.report(now=t + 10.0, ideal_step_time=1.0).stalls
    assert then.ongoing and then.seconds == 10.0


# A rank's life as blocks: a step of 1 s, a closed interval or an open one, or silence.
BLOCK = st.tuples(
    st.sampled_from(["step", "distributed_init", "checkpoint_save", "data_loading", "silence"]),
    st.floats(0.1, 20.0),
)


@settings(max_examples=120, deadline=None)
@given(
    blocks=st.lists(BLOCK, min_size=1, max_size=12),
    lag=st.floats(0.0, 3.0),
    threshold=st.floats(0.5, 10.0),
    open_last=st.booleans(),
)
def test_no_stall_overlaps_a_closed_interval_and_every_long_silence_is_one(
    blocks: list[tuple[str, float]], lag: float, threshold: float, open_last: bool
) -> None:
    """Two ranks live the same blocks, rank 1 ``lag`` s later. A stall never overlaps an
    interval closed by a rank, and every silence longer than the threshold plus the lag
    (no progress from either rank) is inside one."""
    store = MemoryStore()
    closed: list[tuple[float, float]] = []
    silences: list[tuple[float, float]] = []
    end = 0.0
    for rank in (0, 1):
        rec = recorder_for_tests(JOB, store, rank=rank)
        t = T0 + rank * lag
        rec.record_step_start(0, ts=t)
        rec.record_step_end(0, ts=t + 1.0)
        t += 1.0
        for i, (kind, given_dt) in enumerate(blocks):
            dt = given_dt
            if kind == "step":
                rec.record_step_start(i + 1, ts=t)
                rec.record_step_end(i + 1, ts=t + 1.0)
                dt = 1.0
            elif kind == "silence":
                if rank == 1:  # both ranks silent: rank 0's silence and rank 1's overlap
                    silences.append((t, t + dt - lag))
            else:
                rec.record(f"{kind}_start", ts=t, **({"step": i} if "check" in kind else {}))
                if not (open_last and i == len(blocks) - 1):
                    rec.record(f"{kind}_end", ts=t + dt, **({"step": i} if "check" in kind else {}))
                    closed.append((t, t + dt))
                t += 0.01  # (an end and the next start at one time: a pair of no time)
            t += dt
        end = max(end, t)
        rec.flush()
    events, errors = read_all(store, JOB)
    assert errors == []
    acc = Accountant(JOB)
    acc.ingest_events(sorted(events, key=lambda e: e.ts))
    acc.rank_options = RankOptions(stall_factor=0.0, stall_floor=threshold)
    stalls = acc.report(now=end + 0.5).stalls
    for s in stalls:
        assert s.seconds > threshold
        for lo, hi in closed:
            assert min(s.end, hi) - max(s.start, lo) <= 1e-9, (s, lo, hi)
    for lo, hi in silences:
        if hi - lo > threshold + 1e-6:
            assert any(s.start <= lo + 1e-9 and hi <= s.end + 1e-9 for s in stalls), (
                lo,
                hi,
                stalls,
            )


def test_badput_run_with_a_short_hang_timeout_lists_no_start_up_stall(tmp_path: Path) -> None:
    """A real ``badput run --hang-timeout 2``: a start-up phase of 3 s (``distributed_init``,
    timed by the script around a sleep) then 3 steps; the run is not killed and no stall is
    listed; the phase is 3 s of ``distributed_init``."""
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import time, badput
            rec = badput.Recorder()
            rec.record_job_start()
            rec.record_distributed_init_start()
            time.sleep(3.0)
            rec.record_distributed_init_end()
            for k in range(3):
                rec.record_step_start(k)
                time.sleep(0.1)
                rec.record_step_end(k)
            rec.record_job_end("completed")
            rec.close()
            """
        )
    )
    store = tmp_path / "runs"
    cmd = [sys.executable, "-m", "badput.cli", "run", "--store", str(store), "--job", "boot"]
    cmd += ["--hang-timeout", "2", "--", sys.executable, str(script)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "badput.cli", "report", str(store / "boot"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rep = json.loads(shown.stdout)
    assert rep["stalls"] == []
    assert [a["end_reason"] for a in rep["attempts"]] == ["job_end"]
    assert math.isclose(rep["buckets"]["distributed_init"], 3.0, abs_tol=0.3)


def test_the_docs_example_of_named_work_and_an_open_interval_runs() -> None:
    """docs/ranks.md: the 8 s ``distributed_init`` is no stall; the save never ended is."""
    text = (Path(__file__).parent.parent / "docs" / "ranks.md").read_text()
    section = text[text.index("**Time inside a recorded interval is named work") :]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "hang_timeout=4.0" in code and "assert" in code
    exec(compile(code, "docs/ranks.md", "exec"), {"__name__": "docs_ranks_named"})
