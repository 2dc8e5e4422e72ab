"""badput: where does your training time go?

Record the moments of a training job (``Recorder``), store them crash-safely
(``badput.store``), and compute goodput and badput by cause (``Accountant``,
``analyze``). ``import badput`` is light: numpy, rich and click load only when
the engine or CLI is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from badput.events import Event, EventError, Kind
from badput.runtime.lazy import lazy_attributes

__version__ = "0.1.0.dev0"

__all__ = [
    "Accountant",
    "Event",
    "EventError",
    "Kind",
    "LiveJob",
    "Recorder",
    "Report",
    "analyze",
    "open_store",
]

if TYPE_CHECKING:
    from badput.analysis import LiveJob, analyze
    from badput.engine import Accountant, Report
    from badput.recorder import Recorder
    from badput.store import open_store

# Lazy attributes: the engine pulls numpy, which `import badput` must not.
_LAZY = {
    "Accountant": "badput.engine",
    "Report": "badput.engine",
    "Recorder": "badput.recorder",
    "open_store": "badput.store",
    "analyze": "badput.analysis",
    "LiveJob": "badput.analysis",
}

__getattr__ = lazy_attributes(__name__, _LAZY)
