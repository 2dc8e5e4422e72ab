"""numpy imported with one BLAS thread, in a process badput owns (its commands).

badput's numpy work never calls BLAS (no matrix products: sorts, searches, reductions). Yet
numpy from PyPI starts OpenBLAS's thread pool when imported, one thread per core, and the
pool spins for a moment afterwards. A cold read that looks for an idle core to share its
work (``runtime.shared_work.idle_helpers``) then saw that spinning thread as another task about one
time in four (2 cores, a fresh process each time: `bench/bench_shapes.py`'s children, and
every ``badput report``) and read alone: 3.1-4.0 s instead of 2.6-3.0 s for a million steps
with a data load each. With one thread nothing spins, and nothing competes with the read's
worker for the second core.

The environment is set only around the import and restored at once: the processes a
command starts (``badput run`` starts the user's training) inherit the user's environment
unchanged. A value the user set is kept. Where numpy was imported already, nothing changes.
"""

from __future__ import annotations

import os
import sys
from typing import Final

__all__ = ["import_numpy_single_threaded"]

#: What OpenBLAS (pthreads or OpenMP builds) and MKL read when they start.
_THREAD_VARIABLES: Final = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def import_numpy_single_threaded() -> None:
    """Import numpy with its BLAS pool at one thread (see the module docstring)."""
    if "numpy" in sys.modules:
        return
    added = [name for name in _THREAD_VARIABLES if name not in os.environ]
    for name in added:
        os.environ[name] = "1"
    try:
        import numpy  # noqa: F401, PLC0415 (the import is the point)
    finally:
        for name in added:
            os.environ.pop(name, None)
