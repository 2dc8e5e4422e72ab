"""badput's commands import numpy with one BLAS thread (badput.runtime.blas): no thread of
OpenBLAS's pool spins beside a cold read and is taken for another task, and the processes
a command starts inherit the user's environment unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_PROBE = r"""
import json, os, sys
names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
before = {k: os.environ.get(k) for k in names}
if sys.argv[1] == "helper":
    from badput.runtime.blas import import_numpy_single_threaded
    import_numpy_single_threaded()
else:
    import numpy
import numpy as np
np.ones((64, 64)) @ np.ones((64, 64))  # (a BLAS call: the pool exists by now)
print(json.dumps({
    "threads": len(os.listdir("/proc/self/task")),
    "before": before,
    "after": {k: os.environ.get(k) for k in names},
}))
"""


def _probe(mode: str, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/task")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no pool either way")
def test_numpy_comes_with_one_thread_and_the_environment_as_it_was() -> None:
    plain, helped = _probe("plain"), _probe("helper")
    assert plain["threads"] > 1  # OpenBLAS's pool: what the helper is for
    assert helped["threads"] == 1
    assert (
        helped["after"]
        == helped["before"]
        == dict.fromkeys(("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"))
    )


def test_a_thread_count_the_user_set_is_kept() -> None:
    got = _probe("helper", OPENBLAS_NUM_THREADS="2")
    assert got["after"] == {
        "OPENBLAS_NUM_THREADS": "2",
        "OMP_NUM_THREADS": None,
        "MKL_NUM_THREADS": None,
    }


def test_numpy_already_imported_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy  # noqa: F401 (imported before the helper is asked)

    from badput.runtime.blas import import_numpy_single_threaded

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    import_numpy_single_threaded()
    assert "OPENBLAS_NUM_THREADS" not in os.environ
