"""Orbax's checkpoint statistics into badput's store.

Orbax's ``CheckpointManager`` takes a ``logger`` (``orbax.checkpoint.logging``) and logs
one entry per save and restore: step, event type, directory and the duration of each
phase. ml-goodput-measurement reads those entries from Cloud Logging for its checkpoint
badput. :class:`OrbaxCheckpointLogger` is such a logger that writes them to a badput
store instead (``store=``, else ``$BADPUT_STORE``, else ``./badput-runs``), as checkpoint
save/restore events of ``job_name``, where badput's report, the drop-in calculator and
``CheckpointBadputCalculator`` find them::

    import orbax.checkpoint as ocp
    from badput.compat.orbax_logger import OrbaxCheckpointLogger

    manager = ocp.CheckpointManager(path, options=..., logger=OrbaxCheckpointLogger("run-1"))

Orbax itself is not imported here. When it is already loaded, the class is registered as
a virtual subclass of its ``AbstractLogger`` so that ``CompositeLogger`` accepts it. Like
the recorder, it never raises into the training loop: a bad entry is logged and dropped.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from badput.compat.ml_goodput_measurement import goodput
from badput.store import EventStore

__all__ = ["OrbaxCheckpointLogger"]

logger = logging.getLogger(__name__)


class OrbaxCheckpointLogger:
    """An Orbax checkpoint logger writing to a badput store.

    Args:
        job_name: the job the checkpoint events belong to.
        logging_enabled: record only where ``True`` (e.g. process 0), as the goodput
            recorder does.
        store: an ``EventStore`` or URI (default ``$BADPUT_STORE``, else ``./badput-runs``).
    """

    def __init__(
        self,
        job_name: str,
        logging_enabled: bool = True,
        *,
        store: EventStore | str | os.PathLike[str] | None = None,
    ) -> None:
        self.job_name = job_name
        self._enabled = bool(logging_enabled)
        self._store = store
        self._own: Any = None  # a recorder of our own, when the job has none here
        _register_with_orbax()

    def _recorder(self) -> Any:
        # The goodput recorder owns the payload decoding and the writer threads. Entries
        # go through the job's own recorder in this process when there is one, so that
        # checkpoint events join its attempt; else through a recorder of our own.
        rec = goodput.live_recorder(self.job_name)
        if rec is None:
            if self._own is None:
                self._own = goodput.GoodputRecorder(self.job_name, "orbax", True, store=self._store)
            rec = self._own
        return rec

    def log_entry(self, entry: Mapping[str, Any]) -> None:
        """Record one Orbax entry (a save or restore's statistics); others are ignored."""
        if not self._enabled:
            return
        try:
            self._recorder().record_payload(dict(entry))
        except Exception as exc:  # never into the training loop
            logger.warning("badput: Orbax entry not recorded: %r", exc)

    def flush(self) -> None:
        """Block until the entries logged so far are in the store."""
        if self._enabled:
            self._recorder().flush()

    def close(self) -> None:
        """Flush and stop our own writer, if we made one (also done at interpreter exit)."""
        if self._own is not None:
            self._own.close()


def _register_with_orbax() -> None:
    module = sys.modules.get("orbax.checkpoint.logging")
    base = getattr(module, "AbstractLogger", None)
    if base is not None and hasattr(base, "register"):
        with suppress(TypeError):
            base.register(OrbaxCheckpointLogger)
