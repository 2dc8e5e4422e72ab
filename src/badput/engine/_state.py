"""The state of a job as its log tells it: running, hung, down, restarting or finished.

One pure function of a report, so that every view shows the same state (``badput
watch``, ``badput jobs``, the monitor's exporters): none of them derives it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from badput.engine._model import Report

__all__ = [
    "JOB_STATES",
    "SILENCE_MIN_SECONDS",
    "SILENCE_STEP_FACTOR",
    "JobState",
    "job_state",
    "silence_threshold",
]

#: A job silent (not even a heartbeat: the recorder writes one every 10 s) for longer
#: than this is taken to be down ...
SILENCE_MIN_SECONDS: Final = 60.0
#: ... or for longer than this many typical step times, if that is longer.
SILENCE_STEP_FACTOR: Final = 3.0


def silence_threshold(typical_step_time: float | None, hang_timeout: float | None = None) -> float:
    """Seconds without any event after which a job is taken to be down: the hang timeout a
    launcher recorded (``badput run --hang-timeout``: the launcher and the views agree),
    else ``max(60 s, 3 x typical_step_time)``."""
    if hang_timeout is not None:
        return hang_timeout
    scaled = SILENCE_STEP_FACTOR * typical_step_time if typical_step_time else 0.0
    return max(SILENCE_MIN_SECONDS, scaled)


State = Literal["empty", "running", "hung", "down", "restarting", "finished"]
#: Every state :func:`job_state` gives, in the order its rules are tried (the exporters
#: publish one series per state, so this order is also theirs).
JOB_STATES: Final[tuple[State, ...]] = (
    "empty",
    "finished",
    "restarting",
    "down",
    "hung",
    "running",
)


@dataclass(frozen=True)
class JobState:
    """What :func:`job_state` says of a job.

    - ``state``: one of :data:`JOB_STATES`;
    - ``why``: one line of what in the log says so (inert text: built from numbers and
      the log's status strings, which a view escapes like any log text);
    - ``since``: when that state began, as far as the log tells (the job's end, the end of
      the attempt a restart is due after, the last event, the start of the stall);
      ``None`` when unknown;
    - ``status``: the status of the job's ``job_end`` or of the attempt's ``attempt_end``;
    - ``open_ranks``: the ranks that have not written their ``job_end`` while others have;
    - ``restart_due``: the final attempt ended with ``attempt_end`` (``restarting``, or
      ``hung`` when it was killed hung): no step comes until the next attempt starts.
    """

    state: State
    why: str
    since: float | None = None
    status: str | None = None
    open_ranks: tuple[int, ...] = ()
    restart_due: bool = False

    @property
    def ended(self) -> bool:
        """The job has ended for good (a follower may stop following it)."""
        return self.state == "finished"


def _ranks(ranks: tuple[int, ...], limit: int = 8) -> str:
    shown = ", ".join(str(r) for r in ranks[:limit])
    more = len(ranks) - limit
    return ("rank " if len(ranks) == 1 else "ranks ") + shown + (f" (+{more})" if more > 0 else "")


def job_state(report: Report, last_event: float | None, now: float, stall_after: float) -> JobState:
    """The job's state at ``now`` from its cumulative ``report`` (a live one, or offline).

    ``last_event``: the newest event's time (heartbeats included); ``stall_after``: the
    seconds of silence after which the job's processes are taken to be gone. The rules,
    in order (docs/monitoring.md):

    1. **empty**: no attempt yet.
    2. **finished**: the final attempt ended with ``job_end`` and every rank that took
       part in it wrote its own end (or an end without a rank, a launcher's, ended it).
    3. **restarting**: the final attempt ended with ``attempt_end``: a restart is due
       (a launcher with no restarts left writes ``job_end`` after it: rule 2); but
       **hung** when it ended hung: killed for a hang (status ``hung``, ``badput run
       --hang-timeout``), or with hung time (a stall of it holds ``hung`` seconds:
       silent past the stall threshold until whoever killed it).
    4. **down**: the log has been silent (not even a heartbeat) for longer than
       ``stall_after``: the processes are gone or cannot write; also a job whose other
       ranks have ended while these have not, silent as long.
    5. **hung**: events still arrive (heartbeats) but no rank has made progress for
       longer than the engine's stall threshold (the report's ongoing stall).
    6. **running**: otherwise (while some ranks have ended and others not: ending).
    """
    if not report.attempts:
        return JobState("empty", "no attempt in the log yet")
    final = report.attempts[-1]
    ended_by_job_end = final.end_reason == "job_end"
    if ended_by_job_end and not final.open_ranks:
        status = final.status
        return JobState(
            "finished",
            f"job_end ({status})" if status else "job_end",
            since=final.end,
            status=status,
        )
    if final.end_reason.startswith("attempt_end"):
        status = final.status
        killed = _killed_hung(report, final.id, status)
        if killed is not None:
            return JobState("hung", killed, since=final.end, status=status, restart_due=True)
        why = f"attempt {final.id} ended ({status or 'attempt_end'}); a restart is due"
        return JobState("restarting", why, since=final.end, status=status, restart_due=True)
    silent = None if last_event is None else max(0.0, now - last_event)
    if silent is not None and silent > stall_after:
        why = f"no event for {silent:.0f}s (> {stall_after:.0f}s), not even a heartbeat"
        if ended_by_job_end:
            why = f"{_ranks(final.open_ranks)} wrote no job_end; {why}"
        return JobState("down", why, since=last_event, open_ranks=final.open_ranks)
    if ended_by_job_end:
        return JobState(
            "running",
            f"ending: waiting for the job_end of {_ranks(final.open_ranks)}",
            since=final.end,
            open_ranks=final.open_ranks,
        )
    for stall in reversed(report.stalls):
        if stall.ongoing:
            why = f"no progress for {max(0.0, now - stall.start):.0f}s (> {stall.threshold:.0f}s)"
            return JobState("hung", why, since=stall.start)
    return JobState("running", "events arriving", since=final.start)


def _killed_hung(report: Report, attempt: str | int, status: str | None) -> str | None:
    """Why attempt ``attempt``, ended by an ``attempt_end``, ended hung (``None``: it did
    not): the launcher's status ``hung``, or a stall of it that holds hung time."""
    stall = next(
        (s for s in reversed(report.stalls) if s.attempt == str(attempt) and s.buckets.get("hung")),
        None,
    )
    if status != "hung" and stall is None:
        return None
    who = f", {_ranks(tuple(stall.first_stopped))} stopped first" if stall else ""
    if stall and not stall.first_stopped:
        who = ", all ranks stopped together"
    how = "killed for a hang" if status == "hung" else f"ended ({status or 'attempt_end'}) hung"
    return f"attempt {attempt} {how}{who}; a restart is due"
