"""JAX's compilations are ``compile`` (issue 39): the ``jax.monitoring`` listener that the
JAX and Keras (JAX backend) integrations install. Real runs under ``badput run``:
tests/integrations/test_jax.py and test_keras.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import badput
from badput.engine import Accountant
from badput.events import Event

SRC = str(Path(badput.__file__).parents[1])
LAUNCHED = {"BADPUT_LAUNCHER": "1", "BADPUT_ATTEMPT": "0", "BADPUT_JOB": "j"}


def union(spans: list[tuple[float, float]]) -> float:
    covered, last = 0.0, -math.inf
    for start, end in sorted(spans):
        covered += max(0.0, end - max(start, last))
        last = max(last, end)
    return covered


def test_compiles_before_the_recorder_and_inside_a_step_are_compile(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    code = """
        import json, time
        import jax, jax.numpy as jnp
        from badput.integrations.jax import recorder
        spans = []  # the script's own record: JAX's compile phases, from its own listener
        def listen(event, start, end, **kwargs):
            if event.startswith("/jax/core/compile/"):
                spans.append((start, end))
        jax.monitoring.register_event_time_span_listener(listen)
        jax.jit(lambda x: x * 2 + 1)(jnp.ones(3)).block_until_ready()  # no recorder yet
        rec_built = time.time()
        rec = recorder(store="s")
        rec.record_job_start()
        g = jax.jit(lambda x: jnp.sin(x) @ x)
        with rec.step(1):
            g(jnp.ones(64)).block_until_ready()  # compiled inside the step
        with rec.step(2):
            g(jnp.ones(64)).block_until_ready()  # compiled already
        json.dump({"spans": spans, "before": rec_built}, open("truth.json", "w"))
    """
    env = dict(os.environ, **LAUNCHED, BADPUT_PROCESS_INIT="1", PYTHONPATH=SRC)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    truth = json.loads((tmp_path / "truth.json").read_text())
    spans = [(s, e) for s, e in truth["spans"]]
    assert any(e <= truth["before"] for _, e in spans)  # some compiled before the recorder
    rep = badput.analyze(tmp_path / "s", "j")
    assert math.isclose(rep.bucket("compile"), union(spans), abs_tol=1e-4)
    assert math.isclose(sum(rep.buckets.values()), rep.total_seconds, abs_tol=1e-6)
    # the compilation is taken out of step 1: what remains of it is a few milliseconds
    inside = union([(s, e) for s, e in spans if s > truth["before"]])
    assert inside > 0
    assert rep.bucket("startup") + rep.bucket("productive") < inside


def ev(ts: float, kind: str, **kw: Any) -> Event:
    return Event(ts=ts, kind=kind, job="j", attempt=0, rank=0, **kw)


@settings(max_examples=60, deadline=None)
@given(
    spans=st.lists(
        st.tuples(st.floats(0.0, 20.0), st.floats(0.0, 3.0)).map(lambda p: (p[0], p[0] + p[1])),
        max_size=12,
    ),
    n_steps=st.integers(0, 8),
)
def test_overlapping_compile_phases_count_once(
    spans: list[tuple[float, float]], n_steps: int
) -> None:
    """JAX's phases nest (tracing inside tracing) and come after the fact, each as one
    start/end pair: whatever their overlaps, ``compile`` is their union, steps lose what
    it covers, and the buckets still sum to the job's time."""
    events = [ev(0.0, "job_start")]
    for k in range(n_steps):  # one-second steps from t=1 with half-second gaps
        events += [ev(1 + 1.5 * k, "step_start", step=k + 1)]
        events += [ev(2 + 1.5 * k, "step_end", step=k + 1)]
    for start, end in spans:
        if end > start:
            events += [ev(start, "compile_start"), ev(end, "compile_end")]
    events += [ev(30.0, "job_end", status="completed")]
    acc = Accountant("j")
    acc.ingest_events(sorted(events, key=lambda e: e.ts))
    rep = acc.report(ideal_step_time=1.0)
    assert math.isclose(rep.bucket("compile"), union(spans), abs_tol=1e-6)
    assert math.isclose(sum(rep.buckets.values()), rep.total_seconds, abs_tol=1e-6)
    assert all(v >= 0 for v in rep.buckets.values())


def test_the_listener_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("jax")
    from badput.integrations import _jax_compile

    class Broken:
        closed = False

        def record_compile_start(self, *, ts: float) -> None:
            raise OSError("disk full")

    monkeypatch.setattr(_jax_compile._lifecycle, "live", lambda group: [Broken()])
    _jax_compile.record_compile(1.0, 2.0)  # nothing raised into the compiling thread
    _jax_compile.record_compile(2.0, 1.0)  # a span of no time: nothing
