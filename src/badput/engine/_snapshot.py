"""The one report object every view renders: a :class:`Snapshot` of a job.

The table, JSON, HTML, CSV, trace, watch view and every exporter take a ``Snapshot``:
the partition (:class:`~badput.engine.Report`) and what the engine computed beside it for
the views that show more (rolling windows, step-time statistics, the timeline to draw,
goodput over time, the job's state). A view renders what it holds and derives no figure
of its own; what a view needs and the snapshot lacks is an error that says how to ask
for it (:meth:`Snapshot.drawn`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from badput.engine._model import Report
from badput.engine._over_time import GoodputSeries
from badput.engine._program_time import MfuSeries
from badput.engine._state import JobState, job_state, silence_threshold
from badput.engine._steptime import StepTimeStats
from badput.engine._timeline import Timeline

if TYPE_CHECKING:
    from badput.engine._accountant import Accountant

__all__ = ["Snapshot", "take"]


@dataclass(frozen=True)
class Snapshot:
    """The state of one job at ``time``.

    - ``report``: the partition (cumulative, or of ``report.window``).
    - ``windows``: rolling windows, seconds → the partition of ``[time - w, time]``.
    - ``step_time``: step-time statistics (``None`` when not asked for).
    - ``sequence``: 0, 1, 2... one per monitor cycle (a TensorBoard step axis must not
      go back).
    - ``last_event_time``: timestamp of the newest event read so far (``None`` before
      any); ``time - last_event_time`` is how long the job has been silent.
    - ``timeline`` and ``goodput_over_time``: what the drawing views (HTML, CSV, trace)
      need, made when asked (``Accountant.snapshot(drawing=True)``), else ``None``;
      ``mfu_over_time`` beside them when the report has an MFU (``report.program``).
    - ``hang_timeout``: the hang timeout a launcher recorded (``Accountant.hang_timeout``,
      ``badput run --hang-timeout``), else ``None``: the silence after which the job is
      down, as its stalls' threshold is.
    """

    job: str
    time: float
    report: Report
    windows: dict[float, Report] = field(default_factory=dict)
    step_time: StepTimeStats | None = None
    sequence: int = 0
    last_event_time: float | None = None
    timeline: Timeline | None = None
    goodput_over_time: GoodputSeries | None = None
    mfu_over_time: MfuSeries | None = None
    hang_timeout: float | None = None

    @classmethod
    def of(cls, report: Report, *, time: float | None = None) -> Snapshot:
        """A snapshot holding only ``report`` (what a view that shows the partition alone
        needs: the table, the JSON), at ``time`` (default: the report's end)."""
        return cls(job=report.job, time=report.end if time is None else time, report=report)

    @property
    def last_step(self) -> int | None:
        """The last step reached (the step axis of dashboards)."""
        return self.report.steps.last

    @property
    def disruptions(self) -> int:
        """Restarts so far: attempts after the first."""
        return max(0, len(self.report.attempts) - 1)

    @property
    def silence_threshold(self) -> float:
        """Seconds without any event after which the job is taken to be down: the recorded
        :attr:`hang_timeout`, else ``max(60 s, 3 x typical step time)`` (the recent median
        step, else the ideal)."""
        typical = None
        if self.step_time is not None:
            typical = self.step_time.recent_median
        if typical is None:
            typical = self.report.ideal_step_time
        return silence_threshold(typical, self.hang_timeout)

    def state(self, now: float | None = None) -> JobState:
        """The job's state at ``now`` (default: the snapshot's time), as
        :func:`badput.engine.job_state` gives it: the one every view and exporter shows."""
        at = self.time if now is None else now
        return job_state(self.report, self.last_event_time, at, self.silence_threshold)

    def drawn(self, view: str) -> Timeline:
        """The timeline, for ``view``; ``ValueError`` saying how to ask for it when this
        snapshot was made without it."""
        if self.timeline is None:
            raise ValueError(_NOT_DRAWN.format(view=view, what="its timeline"))
        return self.timeline

    def over_time(self, view: str) -> GoodputSeries:
        """Goodput over time, for ``view``; ``ValueError`` as :meth:`drawn`."""
        if self.goodput_over_time is None:
            raise ValueError(_NOT_DRAWN.format(view=view, what="goodput over time"))
        return self.goodput_over_time


_NOT_DRAWN = (
    "{view} draws the job: make the snapshot with {what} "
    "(Accountant.snapshot(drawing=True) or LiveJob.snapshot(drawing=True))"
)


def take(
    accountant: Accountant,
    now: float | None = None,
    report: Report | None = None,
    windows: Sequence[float] = (),
    *,
    step_time: bool = False,
    drawing: bool = False,
) -> Snapshot:
    """The snapshot of what ``accountant`` ingested: ``report`` (default: its report as of
    ``now``), the rolling ``windows`` (seconds: the report of ``[now - w, now]``),
    step-time statistics when ``step_time``, and when ``drawing`` the timeline and goodput
    over time that the HTML page, the CSV files and the trace draw. ``now`` defaults to
    the report's end."""
    rep = report if report is not None else accountant.report(now=now)
    at = now if now is not None else rep.end
    timeline = accountant.timeline(rep) if drawing else None
    series = accountant.goodput_over_time(rep) if drawing else None
    return Snapshot(
        job=rep.job,
        time=at,
        report=rep,
        windows={w: accountant.report(now=now, window=(at - w, at)) for w in windows},
        step_time=accountant.step_time_stats(now=now) if step_time else None,
        last_event_time=accountant.last_event_ts,
        timeline=timeline,
        goodput_over_time=series,
        mfu_over_time=(
            accountant.mfu_over_time(rep, timeline, series)
            if timeline is not None and series is not None
            else None
        ),
        hang_timeout=accountant.hang_timeout,
    )
