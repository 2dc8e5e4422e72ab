"""Drop-in replacement for Google's ``ml_goodput_measurement`` package (0.2.x API).

Change one import line and keep every call site::

    # from ml_goodput_measurement import goodput, monitoring
    from badput.compat.ml_goodput_measurement import goodput, monitoring

Sub-modules, as in the original: :mod:`.goodput` (``GoodputRecorder``,
``GoodputCalculator``), :mod:`.monitoring` (``GoodputMonitor``), :mod:`.goodput_utils`
(``BadputType``, ``GCPOptions``, ...), :mod:`.goodput_elastic` and
:mod:`.monitoring_elastic`. Events go to a badput store (``$BADPUT_STORE``, else
``./badput-runs``) instead of Cloud Logging; the numbers come from badput's engine,
mapped onto the library's buckets. See ``docs/compat.md`` for the mapping and for each
case where badput reports a different (correct) number.

Nothing is imported until a sub-module is used, so importing the package is free.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = [
    "checkpoint_badput_calculator",
    "exclusion_utils",
    "gcp_metrics",
    "goodput",
    "goodput_cache",
    "goodput_elastic",
    "goodput_utils",
    "monitoring",
    "monitoring_elastic",
]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
