#!/usr/bin/env python3
"""Replay goodput scenarios through the real ml-goodput-measurement and write goldens.

Usage (from the project root, on a machine that reaches PyPI)::

    python3 tools/reference_replay.py                 # all scenarios -> tests/compat/golden/
    python3 tools/reference_replay.py --only clean_run --venv /tmp/mgm-venv

What it does:

1. Creates a virtual environment of its own (``--venv``, default ``.reference-venv``) and
   installs ``ml-goodput-measurement==0.2.3`` from PyPI into it, with ``freezegun`` to
   freeze the library's clock. badput is *not* installed there: the goldens are the
   library's numbers alone.
2. Re-runs itself inside that environment (``--inner``). For each scenario below it
   creates the library's own ``GoodputRecorder`` (or ``ElasticGoodputRecorder``) and
   makes the scenario's ``record_*`` calls, each at its scenario time (the clock frozen
   there). The recorder and calculator are the library's real classes; the only stand-in
   is Cloud Logging itself: an in-memory log behind the library's ``_CloudLogger``, whose
   ``list_entries`` evaluates the library's own filter string (``timestamp``/``insertId``
   bounds) over entries stamped with the time they were written. Orbax's checkpoint
   entries go into the same log, as Orbax's logger writes them.
3. Runs the scenario's queries, each on a fresh ``GoodputCalculator`` (fresh cache
   directory) at its query time, and writes one JSON file per scenario: the calls, the
   queries and the library's answers (or the ``ValueError`` it raised).

The goldens are committed (tests/compat/golden/); tests/compat/test_mgm_parity.py replays
the same calls through badput's compatibility layer and compares. A scenario with a
``difference`` is one where the library is wrong (docs/compat.md); its golden keeps the
library's answer so the test can show both numbers.

Only the standard library is used outside the inner run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REFERENCE_PACKAGE = "ml-goodput-measurement"
REFERENCE_VERSION = "0.2.3"
FREEZEGUN = "freezegun==1.5.1"
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "compat" / "golden"
DEFAULT_VENV = ROOT / ".reference-venv"
EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z
LOGGER_NAME = "goodput-log"


# --------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    """Recorder calls at scenario times (seconds after EPOCH) and the queries to run."""

    name: str
    description: str
    difference: str | None = None
    elastic: bool = False
    #: The log's clock runs this many seconds behind the recorded times (skewed hosts,
    #: back-filled timestamps): each call is written, and each query made, at t - skew.
    clock_skew: float = 0.0
    calls: list[dict[str, Any]] = field(default_factory=list)
    queries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def job_name(self) -> str:
        return f"replay-{self.name.replace('_', '-')}"

    def call(self, t: float, method: str, **kwargs: Any) -> Scenario:
        self.calls.append({"t": round(t, 6), "method": method, **kwargs})
        return self

    def interval(self, t0: float, t1: float, what: str, **kwargs: Any) -> Scenario:
        """A start/end pair of the recorder (``what``: tpu_init, training_preparation,
        data_loading, custom_badput_event, elastic_wait, elastic_reinit)."""
        self.call(t0, f"record_{what}_start_time", **kwargs)
        return self.call(t1, f"record_{what}_end_time", **kwargs)

    def slices(self, t: float, active: int, total: int, available: int) -> Scenario:
        """The elastic recorder's slice counts at ``t``."""
        return self.call(
            t,
            "record_elastic_slice_counts",
            active_slices=active,
            total_slices=total,
            available_slices=available,
        )

    def orbax_save(
        self,
        t_end: float,
        step: int,
        seconds: float,
        directory: str = "gs://replay/ckpt",
        *,
        posix_start: float | None = None,
    ) -> Scenario:
        """Orbax's CheckpointManager logs a save's statistics when its blocking part ends;
        times in the payload are relative to EPOCH here (the replay makes them absolute),
        unless ``posix_start`` gives the payload's start as POSIX seconds as it stands
        (``"absolute": true`` in the call)."""
        start = t_end - seconds if posix_start is None else posix_start
        self.calls.append(
            {
                "t": round(t_end, 6),
                **({"absolute": True} if posix_start is not None else {}),
                "orbax": {
                    "step": step,
                    "event_type": "save",
                    "directory": directory,
                    "wait_for_prev_start_time": start,
                    "wait_for_prev_duration_secs": 0.0,
                    "checkpointer_blocking_start_time": start,
                    "checkpointer_blocking_duration_secs": seconds,
                    "get_old_steps_start_time": start,
                    "get_old_steps_duration_secs": 0.0,
                    "checkpoint_manager_blocking_start_time": start,
                    "checkpoint_manager_blocking_duration_secs": seconds,
                },
            }
        )
        return self

    def orbax_restore(
        self,
        t_end: float,
        step: int,
        seconds: float,
        event_type: str = "restore",
        directory: str = "gs://replay/ckpt",
        *,
        posix_start: float | None = None,
    ) -> Scenario:
        start = t_end - seconds if posix_start is None else posix_start
        self.calls.append(
            {
                "t": round(t_end, 6),
                **({"absolute": True} if posix_start is not None else {}),
                "orbax": {
                    "step": step,
                    "event_type": event_type,
                    "directory": directory,
                    "checkpointer_start_time": start,
                    "checkpointer_duration_secs": seconds,
                    "checkpoint_manager_start_time": start,
                    "checkpoint_manager_duration_secs": seconds,
                },
            }
        )
        return self

    def steps(
        self,
        t: float,
        first: int,
        last: int,
        seconds: float = 2.0,
        *,
        load: float = 0.0,
        first_seconds: float | None = None,
        every: int = 1,
    ) -> float:
        """Steps ``first..last`` the MaxText way (load a batch, then record the step's
        start); returns the time after the last step. ``every``: log every k-th step."""
        for step in range(first, last + 1, every):
            if load:
                self.interval(t, t + load, "data_loading")
                t += load
            self.call(t, "record_step_start_time", step=step)
            span = first_seconds if (step == first and first_seconds is not None) else seconds
            t += span * every
        return t

    def query(self, method: str, t_now: float, **kwargs: Any) -> Scenario:
        self.queries.append({"method": method, "t_now": round(t_now, 6), **kwargs})
        return self

    def standard_queries(self, t_now: float, *, deviation: bool = True) -> Scenario:
        self.query("get_job_goodput", t_now, include_badput_breakdown=True)
        self.query("get_job_goodput", t_now, include_badput_breakdown=False)
        self.query("get_job_goodput_details", t_now)
        if deviation:
            self.query("get_step_deviation", t_now)
        return self


def _job(s: Scenario, t: float = 0.0) -> Scenario:
    return s.call(t, "record_job_start_time")


def scenarios() -> Iterator[Scenario]:
    # 1. A clean MaxText-style run: init, preparation, a batch before each step.
    s = Scenario(
        "clean_run", "init 5 s, prep 10 s, 20 steps of 2 s with 0.5 s loads, step 0 compiles (12 s)"
    )
    _job(s).interval(0, 5, "tpu_init").interval(5, 15, "training_preparation")
    t = s.steps(15, 0, 19, 2.0, load=0.5, first_seconds=12.0)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t + 30)

    # 2-9: each badput bucket alone (steps of 2 s, no loads unless the bucket is loading).
    s = Scenario("accelerator_init_only", "30 s of accelerator init, then 20 steps")
    _job(s).interval(0, 30, "tpu_init")
    t = s.steps(30, 0, 19)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    s = Scenario("training_prep_only", "25 s of training preparation, then 20 steps")
    _job(s).interval(0, 25, "training_preparation")
    t = s.steps(25, 0, 19)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    s = Scenario("program_startup_only", "the first step takes 30 s (compilation), the others 2 s")
    _job(s)
    t = s.steps(0, 0, 19, first_seconds=30.0)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    s = Scenario("data_loading_sync_only", "a 12 s blocking load before the first step")
    _job(s).interval(0, 12, "data_loading")
    t = s.steps(12, 0, 19)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    s = Scenario(
        "data_loading_async",
        "a 6 s load before the loop, then a 0.5 s load "
        "before each later step (overlapping training, the library's ASYNC)",
    )
    _job(s).interval(0, 6, "data_loading")
    s.call(6, "record_step_start_time", step=0)
    t = s.steps(8, 1, 19, load=0.5)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    s = Scenario("checkpoint_save_only", "Orbax saves of 3 s (blocking) after steps 9 and 19")
    _job(s)
    t = s.steps(0, 0, 9)
    t += 3.0
    s.orbax_save(t, 10, 3.0)
    t = s.steps(t, 10, 19)
    t += 3.0
    s.orbax_save(t, 20, 3.0)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    s = Scenario(
        "checkpoint_restore_only", "an 8 s Orbax restore of step 50 at job start, then steps 51..70"
    )
    _job(s).orbax_restore(8, 50, 8.0)
    t = s.steps(8, 51, 70)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    s = Scenario(
        "other_untracked",
        "20 s between preparation and the first step that nothing covers (the library's OTHER)",
    )
    _job(s).interval(0, 5, "training_preparation")
    t = s.steps(25, 0, 19)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    # 10. Custom badput events inside the loop.
    s = Scenario(
        "custom_events",
        "eval of 4 s every 10 steps, one SDC check of 1 s, recorded inside the step they follow",
    )
    _job(s)
    t = 0.0
    for step in range(30):
        s.call(t, "record_step_start_time", step=step)
        t += 2.0
        if step % 10 == 5:
            s.interval(t, t + 4.0, "custom_badput_event", custom_badput_event_type="eval_step")
            t += 4.0
        if step == 17:
            s.interval(t, t + 1.0, "custom_badput_event", custom_badput_event_type="sdc_check")
            t += 1.0
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    # 11-12. Restarts that repeat steps: wasted progress and recovery.
    s = Scenario(
        "restart_repeated_steps",
        "steps 0..30, crash; restart 40 s later with "
        "5 s of preparation, resuming at step 21 (checkpoint 20)",
    )
    _job(s).interval(0, 5, "training_preparation")
    t = s.steps(5, 0, 30)
    t_crash = t - 2.0  # the last event is step 30's start
    t = t_crash + 40.0
    _job(s, t).interval(t, t + 5, "training_preparation")
    t = s.steps(t + 5, 21, 40)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    s = Scenario(
        "two_restarts",
        "three attempts: steps 0..15 crash, resume at 11 up to 25 "
        "crash, resume at 21 to 35; 30 s and 50 s down",
    )
    _job(s)
    t = s.steps(0, 0, 15) - 2.0
    t += 30.0
    _job(s, t)
    t = s.steps(t, 11, 25) - 2.0
    t += 50.0
    _job(s, t)
    t = s.steps(t, 21, 35)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    # 13. Interval queries over a job with a restart.
    s = Scenario(
        "interval_queries",
        "windows over a job with prep, a restart and custom "
        "events: whole job, inside the first attempt, across the restart",
    )
    _job(s).interval(0, 10, "training_preparation")
    t = s.steps(10, 0, 20)
    t_crash = t - 2.0
    t = t_crash + 20.0
    _job(s, t)
    t = s.steps(t, 16, 30)
    s.interval(t, t + 5.0, "custom_badput_event", custom_badput_event_type="eval")
    t += 5.0
    t = s.steps(t, 31, 40)
    s.call(t, "record_job_end_time")
    s.query("get_job_goodput", t, include_badput_breakdown=True)
    for a, b in ((0.0, t), (12.0, 40.0), (20.0, 80.0), (-100.0, t + 100.0), (70.0, t)):
        s.query("get_job_goodput_interval", t, start=a, end=b)
    s.query("get_interval_metric_details", t, start=12.0, end=40.0)
    yield s

    # 14. Step deviation: an ideal step time from the library's rule, and a configured one.
    s = Scenario("step_deviation", "steps of 2 s with noise and two stragglers (9 s, 15 s)")
    _job(s)
    t = 0.0
    for step in range(40):
        s.call(t, "record_step_start_time", step=step)
        t += {7: 9.0, 23: 15.0}.get(step, 2.0 + 0.1 * ((step * 7) % 5 - 2))
    s.call(t, "record_job_end_time")
    s.standard_queries(t)
    s.query("get_step_deviation", t, configured_ideal_step_time=2.5)
    yield s

    # 15. A running job, queried live.
    s = Scenario("running_job", "no job end: queried while step 25 runs")
    _job(s).interval(0, 4, "tpu_init").interval(4, 10, "training_preparation")
    t = s.steps(10, 0, 25)
    yield s.standard_queries(t - 1.0)

    # 16. Elastic: waits, re-initialisation, slice counts, before the loop.
    s = Scenario(
        "elastic_events",
        "2 of 4 slices; a 20 s scale-up wait, then 15 s of "
        "reinit that contains 5 s of accelerator init and 4 s of preparation; "
        "4 of 4 slices from 20 s; 30 steps",
        elastic=True,
    )
    _job(s)
    s.slices(0, 2, 4, 2)
    s.interval(0, 20, "elastic_wait", event_type="scale_up")
    s.slices(20, 4, 4, 4)
    s.interval(20, 35, "elastic_reinit")
    s.interval(22, 27, "tpu_init").interval(28, 32, "training_preparation")
    t = s.steps(35, 0, 29)
    s.call(t, "record_job_end_time")
    s.standard_queries(t)
    # A window that opens before the first slice record (see interval_slice_efficiency).
    s.query("get_interval_metric_details", t, start=-10.0, end=t)
    yield s

    # 17-23. Where the library defines things differently (ACCOUNTING.md §6, issue 14).
    s = Scenario(
        "finished_job_after_query_clock",
        "a finished job whose recorded times run 30 s ahead of the clock of the log and "
        "of the query (skewed hosts): measured from its start to its job_end",
        clock_skew=30.0,
    )
    _job(s).interval(0, 4, "tpu_init").interval(4, 10, "training_preparation")
    t = s.steps(10, 0, 19, load=0.5, first_seconds=6.0)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t - 30.0 + 1.0, deviation=False)

    s = Scenario(
        "last_step_to_job_end",
        "steps of 2 s with 0.5 s loads; the last step runs 7 s up to job_end "
        "(the library counts it whole)",
    )
    _job(s).interval(0, 5, "training_preparation")
    t = s.steps(5, 0, 14, load=0.5)
    s.call(t, "record_step_start_time", step=15)
    t += 7.0
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t)

    s = Scenario(
        "eval_after_last_step",
        "an eval of 4 s between the last step's start and job_end: the library counts "
        "it as productive and as custom badput",
        difference="eval_after_last_step",
    )
    _job(s)
    t = s.steps(0, 0, 19)
    s.call(t, "record_step_start_time", step=20)
    s.interval(t + 2.0, t + 6.0, "custom_badput_event", custom_badput_event_type="eval")
    s.call(t + 6.0, "record_job_end_time")
    yield s.standard_queries(t + 6.0, deviation=False)

    s = Scenario(
        "crash_recovery_after_last_step",
        "init, prep and a load before steps 0..4 of 3 s (step 0 takes 8 s); the attempt "
        "dies 5 s after step 4 starts; the restart repeats init, prep and load and resumes "
        "at step 2",
    )
    _job(s).interval(0, 1, "tpu_init").interval(1, 3, "training_preparation")
    s.interval(3, 5, "data_loading")
    t = s.steps(5, 0, 4, 3.0, first_seconds=8.0) - 3.0
    t += 5.0
    _job(s, t).interval(t, t + 1, "tpu_init").interval(t + 1, t + 3, "training_preparation")
    s.interval(t + 3, t + 5, "data_loading")
    t = s.steps(t + 5, 2, 4, 3.0, first_seconds=8.0)
    s.call(t, "record_job_end_time")
    s.standard_queries(t)
    s.query("get_job_goodput_interval", t, start=-0.000001, end=t)
    s.query("get_job_goodput_interval", t, start=-0.000001, end=25.0)
    yield s

    s = Scenario(
        "restart_after_job_end",
        "steps 0..60 of 2 s and a job_end 2 s after step 60 starts; a new job_start 45 s "
        "later resumes at step 51 (checkpoint 50) and runs to step 70, then job_end: the "
        "library keeps only the last job_end, so the first run reads as a disruption whose "
        "last step, up to the restart, is recovery",
    )
    _job(s)
    t = s.steps(0, 0, 60)
    s.call(t, "record_job_end_time")
    t += 45.0
    _job(s, t)
    t = s.steps(t, 51, 70)
    s.call(t, "record_job_end_time")
    s.standard_queries(t)
    s.query("get_job_goodput_interval", t, start=-0.000001, end=t)
    yield s

    s = Scenario(
        "interval_redone_steps",
        "steps 0..20 of 2 s, crash, restart 20 s later at step 11: windows over the first "
        "attempt's steps that the restart redid",
    )
    _job(s)
    t = s.steps(0, 0, 20) - 2.0
    t_restart = t + 20.0
    _job(s, t_restart)
    t = s.steps(t_restart, 11, 30)
    s.call(t, "record_job_end_time")
    s.query("get_job_goodput", t, include_badput_breakdown=True)
    for a, b in ((15.0, 38.0), (0.0, 45.0), (21.0, t), (-1.0, t)):
        s.query("get_job_goodput_interval", t, start=a, end=b)
    yield s

    def exclusion_job(s: Scenario) -> tuple[float, float]:
        """prep 0..10, a gap to 20, steps of 2 s, an eval of 4 s after step 15, a crash
        after step 20 starts (64 s), a restart at 79 s resuming at step 18."""
        _job(s).interval(0, 10, "training_preparation")
        t = s.steps(20, 0, 15)
        s.interval(t, t + 4, "custom_badput_event", custom_badput_event_type="eval")
        t = s.steps(t + 4, 16, 20) - 2.0
        t_restart = t + 15.0
        _job(s, t_restart)
        t = s.steps(t_restart, 18, 30)
        s.call(t, "record_job_end_time")
        return t_restart, t

    s = Scenario(
        "exclusion_windows",
        "goodput with exclusion windows: none, over preparation and the gap after it, "
        "over the recovery, outside the job",
    )
    t_restart, t = exclusion_job(s)
    for windows in (
        [],
        [(5.0, 15.0)],
        [(t_restart - 15.0, t_restart)],
        [(-50.0, -10.0), (t + 10.0, t + 20.0)],
    ):
        s.query(
            "get_job_goodput_with_exclusions",
            t,
            exclusions=[list(w) for w in windows],
            include_badput_breakdown=True,
        )
    yield s

    s = Scenario(
        "exclusion_inside_steps",
        "exclusion windows inside the loop: over steps 2..6 (the library shortens those "
        "steps, so the first step looks slower: PROGRAM_STARTUP), and over an eval (the "
        "library keeps the eval's badput and takes it out of productive time again)",
        difference="exclusion_inside_steps",
    )
    t_restart, t = exclusion_job(s)
    for windows in ([(25.0, 30.0), (28.0, 33.0)], [(52.0, 56.0)]):
        s.query(
            "get_job_goodput_with_exclusions",
            t,
            exclusions=[list(w) for w in windows],
            include_badput_breakdown=True,
        )
    yield s

    s = Scenario(
        "checkpoint_statistics",
        "Orbax saves to GCS and to local storage; a restart restores step 20 from GCS and "
        "repeats steps 21..29, a second one restores step 30 locally (emergency restore) "
        "and repeats steps 31..35: the CheckpointBadputCalculator's statistics",
    )
    _job(s)
    t = s.steps(0, 0, 9)
    t += 3.0
    s.orbax_save(t, 10, 3.0)
    t = s.steps(t, 10, 19)
    t += 1.5
    s.orbax_save(t, 20, 1.5, directory="/local/ckpt")
    t = s.steps(t, 20, 29) - 2.0
    t_restart = t + 10.0
    _job(s, t_restart)
    s.orbax_restore(t_restart + 4.0, 20, 4.0)
    t = s.steps(t_restart + 4.0, 21, 30)
    t += 5.0
    s.orbax_save(t, 30, 5.0)
    t = s.steps(t, 31, 35) - 2.0
    t_restart = t + 10.0
    _job(s, t_restart)
    s.orbax_restore(
        t_restart + 2.0, 30, 2.0, event_type="emergency_restore", directory="/local/ckpt"
    )
    t = s.steps(t_restart + 2.0, 31, 40)
    s.call(t, "record_job_end_time")
    s.query("get_job_goodput", t, include_badput_breakdown=True)
    for operation in ("save", "restore"):
        for kind in ("persistent", "local", "persistent_and_local"):
            s.query("checkpoint_statistics", t, operation=operation, operation_type=kind)
    yield s

    s = Scenario(
        "orbax_entries_outside_job",
        "as the library's own test of checkpoint badput: init 1 s, prep 2 s, 2 s untracked, "
        "steps 0..4 of 3 s (step 0 +5 s); Orbax entries stamped 10 s after the Unix epoch "
        "(1970), a 6 s save and a 2 s restore; a crash, a restart 5 s later repeating steps "
        "2..4: the entries' durations count wherever they fall (the test's 2 s load is left "
        "out: the library counts it twice when the restart logs no load of its own)",
    )
    _job(s).interval(0, 1, "tpu_init").interval(1, 3, "training_preparation")
    t = s.steps(5, 0, 4, 3.0, first_seconds=8.0)
    s.orbax_save(t, 1, 6.0, posix_start=10.0)
    t_restart = t + 5.0
    _job(s, t_restart)
    t = s.steps(t_restart + 5.0, 2, 4, 3.0, first_seconds=8.0)
    s.orbax_restore(t, 1, 2.0, posix_start=10.0)
    s.call(t, "record_job_end_time")
    s.standard_queries(t)
    for operation in ("save", "restore"):
        s.query("checkpoint_statistics", t, operation=operation, operation_type="persistent")
    yield s

    s = Scenario(
        "orbax_save_logged_by_two_hosts",
        "steps 0..19 of 2 s; two hosts log the save of step 10, a 4 s and a 6 s blocking "
        "part from 20 s (the second host waits 2 s longer): the library counts the mean, "
        "5 s, and takes it from productive time",
    )
    _job(s)
    t = s.steps(0, 0, 9)
    s.orbax_save(t + 4.0, 10, 4.0)
    s.orbax_save(t + 6.0, 10, 6.0)
    t = s.steps(t + 6.0, 10, 19)
    s.call(t, "record_job_end_time")
    s.standard_queries(t)
    s.query("checkpoint_statistics", t, operation="save", operation_type="persistent_and_local")
    yield s

    # ---------------------------------------------------------- the library's bugs
    s = Scenario(
        "restart_resumes_next_step",
        "steps 0..20, crash after step 20 was "
        "checkpointed; restart 60 s later resuming at step 21, the next number",
        difference="restart_resumes_next_step",
    )
    _job(s)
    t = s.steps(0, 0, 20)
    t += 60.0
    _job(s, t)
    t = s.steps(t, 21, 40)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t, deviation=False)

    s = Scenario(
        "restore_counted_as_prep",
        "a 10 s Orbax restore inside 20 s of training preparation",
        difference="restore_counted_as_prep",
    )
    _job(s).interval(0, 20, "training_preparation").orbax_restore(15, 100, 10.0)
    t = s.steps(20, 101, 120)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t, deviation=False)

    s = Scenario(
        "first_data_load_after_restart_sync",
        "loads of 1 s before every step; a "
        "restart repeats steps; the library counts a load inside the loop of the "
        "new attempt as blocking",
        difference="first_data_load_after_restart_sync",
    )
    _job(s)
    t = s.steps(0, 0, 20, load=1.0)
    t_crash = t - 2.0
    t = t_crash + 30.0
    _job(s, t)
    t = s.steps(t, 11, 30, load=1.0)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t, deviation=False)

    s = Scenario(
        "restart_from_step_0_other",
        "steps 0..20, crash with no checkpoint, restart 20 s later from step 0",
        difference="restart_from_step_0_other",
    )
    _job(s)
    t = s.steps(0, 0, 20) - 2.0
    t += 20.0
    _job(s, t)
    t = s.steps(t, 0, 30)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t, deviation=False)

    s = Scenario(
        "elastic_wait_in_loop",
        "a 20 s slice-down wait and 15 s of reinit "
        "between two steps of the loop: the library adds them to badput but "
        "leaves them in the step's time too",
        elastic=True,
        difference="elastic_wait_in_loop",
    )
    _job(s)
    s.slices(0, 4, 4, 4)
    t = s.steps(0, 0, 14)
    s.interval(t, t + 20, "elastic_wait", event_type="slice_down")
    s.slices(t + 20, 2, 4, 2)
    s.interval(t + 20, t + 35, "elastic_reinit")
    t = s.steps(t + 35, 15, 29)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t, deviation=False)

    s = Scenario(
        "interval_slice_efficiency",
        "2 of 4 slices from 0 s, 4 of 4 from 20 s; "
        "the window [10 s, end] opens while 2 of 4 run, but the library only sees "
        "the slice records inside the window and scores [10 s, 20 s] as 0",
        elastic=True,
        difference="interval_slice_efficiency",
    )
    _job(s)
    s.slices(0, 2, 4, 2)
    t = s.steps(0, 0, 9)
    s.slices(20, 4, 4, 4)
    t = s.steps(t, 10, 39)
    s.call(t, "record_job_end_time")
    s.query("get_interval_metric_details", t, start=10.0, end=t)
    yield s

    s = Scenario(
        "sparse_step_logging",
        "a step start logged every 10th step (steps of 2 s)",
        difference="sparse_step_logging",
    )
    _job(s)
    t = s.steps(0, 0, 199, every=10)
    s.call(t, "record_job_end_time")
    yield s.standard_queries(t, deviation=False)


# --------------------------------------------------------------------------- outer run


def _ensure_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    spec = f"{REFERENCE_PACKAGE}=={REFERENCE_VERSION}"
    print(f"installing {spec} and {FREEZEGUN} into {venv}", file=sys.stderr)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", spec, FREEZEGUN], check=True)
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="golden directory")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="reference venv")
    parser.add_argument("--only", action="append", default=[], help="scenario name(s)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    chosen = [s for s in scenarios() if not args.only or s.name in args.only]
    if args.list:
        for s in chosen:
            tag = f" [library bug: {s.difference}]" if s.difference else ""
            print(f"{s.name}: {s.description}{tag}")
        return 0
    if args.only and len(chosen) != len(set(args.only)):
        known = sorted(s.name for s in scenarios())
        parser.error(f"unknown scenario in {args.only}; known: {', '.join(known)}")
    if args.inner:
        return _inner(chosen, args.out)
    python = _ensure_venv(args.venv)
    cmd = [str(python), str(Path(__file__).resolve()), "--inner", "--out", str(args.out)]
    for name in args.only:
        cmd += ["--only", name]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BADPUT_STORE")}
    env["TZ"] = "UTC"
    return subprocess.run(cmd, env=env, check=False).returncode


# --------------------------------------------------------------------------- inner run
# Everything below runs inside the reference venv, with the real library imported.

_BOUND = re.compile(r'timestamp\s*(<=|>|=|<|>=)\s*"([^"]+)"')
_AFTER_ID = re.compile(
    r'\(timestamp > "([^"]+)" OR \(timestamp = "([^"]+)" AND insertId > "([^"]+)"\)\)'
)


@dataclass
class _Entry:
    payload: dict[str, Any]
    timestamp: Any  # datetime, tz-aware
    insert_id: str


class _InMemoryLog:
    """Stands in for one Cloud Logging log: entries stamped when written, listed with the
    library's filter (only the timestamp/insertId clauses matter: one job, one log)."""

    def __init__(self) -> None:
        self.entries: list[_Entry] = []

    def append(self, payload: dict[str, Any]) -> None:
        import datetime as dt

        now = dt.datetime.now(dt.timezone.utc)  # frozen by freezegun at the call's time
        self.entries.append(_Entry(dict(payload), now, f"{len(self.entries):08d}"))

    def list_entries(self, filter_: str, order_by: Any = None, page_size: int = 0) -> list[Any]:
        import datetime as dt

        def parse(text: str) -> dt.datetime:
            return dt.datetime.fromisoformat(text)

        after_id = _AFTER_ID.search(filter_)
        rest = _AFTER_ID.sub("", filter_) if after_id else filter_
        tests = []
        for op, value in _BOUND.findall(rest):
            tests.append((op, parse(value)))
        out = []
        for e in sorted(self.entries, key=lambda e: (e.timestamp, e.insert_id)):
            ok = True
            for op, bound in tests:
                ts = e.timestamp
                ok &= {
                    "<=": ts <= bound,
                    "<": ts < bound,
                    ">": ts > bound,
                    ">=": ts >= bound,
                    "=": ts == bound,
                }[op]
            if after_id:
                bound = parse(after_id.group(1))
                ok &= e.timestamp > bound or (
                    e.timestamp == bound and e.insert_id > after_id.group(3)
                )
            if ok:
                out.append(e)
        return out


def _cloud_logger(job_name: str, log: _InMemoryLog) -> Any:
    """The library's real ``_CloudLogger`` with its Google client swapped for ``log``."""
    import datetime as dt

    from ml_goodput_measurement.src import goodput

    cl = goodput._CloudLogger.__new__(goodput._CloudLogger)
    cl.job_name = job_name
    cl.project_id = "replay-project"
    cl.log_name = LOGGER_NAME
    cl.logger = log
    cl.job_start_time = None
    cl.retention_period = dt.timedelta(days=7)

    class _Handler:
        def flush(self) -> None:
            pass

    class _AsyncLogger:
        def info(self, entry: dict[str, Any]) -> None:
            log.append(entry)

    cl._async_handler = _Handler()
    cl._async_logger = _AsyncLogger()
    return cl


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {(k.name if hasattr(k, "name") else str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def _inner(chosen: list[Scenario], out: Path) -> int:
    import datetime as dt
    import importlib.metadata

    from freezegun import freeze_time
    from ml_goodput_measurement.src import goodput, goodput_elastic

    version = importlib.metadata.version(REFERENCE_PACKAGE)
    if version != REFERENCE_VERSION:
        print(f"expected {REFERENCE_PACKAGE} {REFERENCE_VERSION}, found {version}")
        return 2
    out.mkdir(parents=True, exist_ok=True)

    def at(t: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(EPOCH + t, dt.timezone.utc)

    for s in chosen:
        log = _InMemoryLog()
        rec_cls = goodput_elastic.ElasticGoodputRecorder if s.elastic else goodput.GoodputRecorder
        calc_cls = (
            goodput_elastic.ElasticGoodputCalculator if s.elastic else goodput.GoodputCalculator
        )
        rec = rec_cls(s.job_name, LOGGER_NAME, True, cloud_logger=_cloud_logger(s.job_name, log))
        for call in s.calls:
            with freeze_time(at(call["t"] - s.clock_skew)):
                if "orbax" in call:
                    shift = 0.0 if call.get("absolute") else EPOCH
                    payload = {
                        k: (v + shift if "time" in k and isinstance(v, (int, float)) else v)
                        for k, v in call["orbax"].items()
                    }
                    log.append({"job_name": s.job_name, **payload})
                    continue
                kwargs = {k: v for k, v in call.items() if k not in ("t", "method")}
                method = getattr(rec, call["method"])
                time_kw = next(
                    p
                    for p in ("start_time", "end_time", "timestamp")
                    if p in method.__code__.co_varnames
                )
                method(**kwargs, **{time_kw: at(call["t"])})
        results = []
        for q in s.queries:
            with tempfile.TemporaryDirectory() as cache, freeze_time(at(q["t_now"])):
                calc = calc_cls(
                    s.job_name,
                    LOGGER_NAME,
                    cloud_logger=_cloud_logger(s.job_name, log),
                    cache_dir=cache,
                )
                entry = dict(q)
                try:
                    if q["method"] == "checkpoint_statistics":
                        entry["result"] = _checkpoint_statistics(s.job_name, log, q)
                    else:
                        entry["result"] = _run_query(calc, q, at)
                except ValueError as exc:
                    entry["error"] = str(exc)
            results.append(entry)
        golden = {
            "scenario": s.name,
            "description": s.description,
            "difference": s.difference,
            "elastic": s.elastic,
            "epoch": EPOCH,
            "job_name": s.job_name,
            "reference": {"package": REFERENCE_PACKAGE, "version": version},
            "calls": s.calls,
            "queries": results,
        }
        if s.clock_skew:
            golden["clock_skew"] = s.clock_skew
        path = out / f"{s.name}.json"
        path.write_text(json.dumps(golden, indent=1, sort_keys=False) + "\n")
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


def _run_query(calc: Any, q: dict[str, Any], at: Any) -> dict[str, Any]:
    method = q["method"]
    if method == "get_job_goodput":
        gp, breakdown, last = calc.get_job_goodput(
            include_badput_breakdown=q.get("include_badput_breakdown", False)
        )
        return {"goodput": gp, "badput": _jsonable(breakdown), "last_step": int(last)}
    if method == "get_job_goodput_interval":
        gp, breakdown, last, total, disruptions = calc.get_job_goodput_interval(
            at(q["start"]), at(q["end"])
        )
        return {
            "goodput": gp,
            "badput": _jsonable(breakdown),
            "last_step": int(last),
            "total_job_time": total,
            "disruptions": disruptions,
        }
    if method == "get_step_deviation":
        deviations = calc.get_step_deviation(q.get("configured_ideal_step_time"))
        info = calc._goodput_cache.get_step_info()
        return {
            "ideal_step_time": info.ideal_step_time,
            "deviations": {str(k): v for k, v in deviations.items()},
        }
    if method == "get_job_goodput_details":
        calc.get_job_goodput(include_badput_breakdown=True)
        return _jsonable(calc.get_job_goodput_details())
    if method == "get_interval_metric_details":
        return _jsonable(calc.get_interval_metric_details(at(q["start"]), at(q["end"])))
    if method == "get_job_goodput_with_exclusions":
        gp, breakdown, last, excluded = calc.get_job_goodput_with_exclusions(
            [(at(a), at(b)) for a, b in q["exclusions"]],
            include_badput_breakdown=q.get("include_badput_breakdown", False),
        )
        return {
            "goodput": gp,
            "badput": _jsonable(breakdown),
            "last_step": int(last),
            "excluded": excluded,
        }
    raise ValueError(f"unknown query {method}")


def _checkpoint_statistics(job_name: str, log: _InMemoryLog, q: dict[str, Any]) -> Any:
    """The library's CheckpointBadputCalculator on the scenario's log (its Cloud Logging
    client stands in: ``logger(name).list_entries`` lists the in-memory log)."""
    import dataclasses

    from ml_goodput_measurement.src import checkpoint_badput_calculator as cbc

    class _Client:
        def logger(self, name: str) -> _InMemoryLog:
            return log

    calc = cbc.CheckpointBadputCalculator(
        cbc.CheckpointLoggerOptions(job_name=job_name, logger_name=LOGGER_NAME, client=_Client())
    )
    if q["operation"] == "save":
        stats = calc.calculate_save_operation_checkpoint_manager_blocking_time(q["operation_type"])
    else:
        stats = calc.calculate_restore_operation_checkpoint_manager_blocking_time(
            q["operation_type"]
        )
    return dataclasses.asdict(stats)


if __name__ == "__main__":
    sys.exit(main())
