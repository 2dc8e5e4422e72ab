"""What the Monitor hands to exporters, and what an exporter is.

A :class:`Snapshot` is computed once per monitor cycle from the incremental
engine; exporters turn it into their system's metrics. Exporters compute no
accounting of their own (DESIGN.md): every number comes from the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from badput.engine import Report, StepTimeStats

__all__ = ["Exporter", "Snapshot"]


@dataclass(frozen=True)
class Snapshot:
    """The state of one job at ``time``.

    - ``report``: the cumulative partition (``Report.buckets`` in seconds, goodput...).
    - ``windows``: rolling windows, seconds → the partition of ``[time - w, time]``.
    - ``step_time``: step-time statistics (``None`` when the monitor was asked not to).
    - ``sequence``: 0, 1, 2... one per cycle (a TensorBoard step axis must not go back).
    - ``last_event_time``: timestamp of the newest event read so far (``None`` before
      any); ``time - last_event_time`` is how long the job has been silent.
    """

    job: str
    time: float
    report: Report
    windows: dict[float, Report] = field(default_factory=dict)
    step_time: StepTimeStats | None = None
    sequence: int = 0
    last_event_time: float | None = None

    @property
    def last_step(self) -> int | None:
        """The last step reached (the step axis of dashboards)."""
        return self.report.steps.last

    @property
    def disruptions(self) -> int:
        """Restarts so far: attempts after the first."""
        return max(0, len(self.report.attempts) - 1)


@runtime_checkable
class Exporter(Protocol):
    """Sends snapshots somewhere. Called from the monitor's thread, one call at a time.

    ``export`` may raise: the monitor catches it, logs one warning per exporter and
    backs off; it must not block for long (use timeouts on network calls).
    """

    name: str

    def export(self, snapshot: Snapshot) -> None: ...

    def close(self) -> None:
        """Flush and release resources (called once, by ``Monitor.stop``)."""
