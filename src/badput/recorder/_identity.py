"""Who records: the recorder's attempt, heartbeat and whether it records at all, from its
arguments and the environment (``badput.runtime.env``), and whether a launcher started this
process (its start is then the job's: ``process_init``)."""

from __future__ import annotations

import logging
import os
import time
from typing import Final

from badput.runtime.env import (
    BADPUT_DISABLE,
    BADPUT_HEARTBEAT_INTERVAL,
    BADPUT_PROCESS_INIT,
    OMPI_COMM_WORLD_RANK,
    SLURM_JOB_ID,
    TORCHELASTIC_RESTART_COUNT,
    detect_attempt,
    detect_rank,
    under_launcher,
)

__all__ = [
    "MAX_PROCESS_INIT",
    "fresh_attempt_id",
    "resolve_attempt",
]

logger = logging.getLogger("badput")

#: Seconds between heartbeats when neither the argument nor the env var sets it.
DEFAULT_HEARTBEAT_INTERVAL: Final = 10.0

_TRUE: Final = frozenset({"1", "true", "yes", "on"})


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _env_rank() -> int | None:
    return detect_rank()


def resolve_attempt(attempt: str | int | None) -> str | int:
    if attempt is not None:
        return attempt
    detected = detect_attempt()
    return fresh_attempt_id() if detected is None else detected


#: A process older than this when its recorder is built did other things first (a
#: notebook, a server): its age is not recorded as ``process_init``.
MAX_PROCESS_INIT: Final = 600.0


# Variables whose presence says a launcher started this process for a job.
_LAUNCHER_VARIABLES: Final = (TORCHELASTIC_RESTART_COUNT, SLURM_JOB_ID, OMPI_COMM_WORLD_RANK)


def _launched() -> bool:
    """True when a launcher started this process for a job (its start is the job's),
    or ``BADPUT_PROCESS_INIT`` says to treat it so (``1``) or not (``0``)."""
    forced = os.environ.get(BADPUT_PROCESS_INIT, "").strip().lower()
    if forced:
        return forced in _TRUE
    return under_launcher() or any(os.environ.get(v) for v in _LAUNCHER_VARIABLES)


def fresh_attempt_id() -> str:
    """``<UTC start time>-<pid>``: a new attempt id for this process (sorts by time)."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}"


def _resolve_heartbeat(value: float | None) -> float:
    if value is not None:
        return max(float(value), 0.0)
    raw = os.environ.get(BADPUT_HEARTBEAT_INTERVAL, "").strip()
    if raw:
        try:
            return max(float(raw), 0.0)
        except ValueError:
            logger.warning("badput: ignoring %s=%r (not a number)", BADPUT_HEARTBEAT_INTERVAL, raw)
    return DEFAULT_HEARTBEAT_INTERVAL


def _is_disabled(enabled: bool | None, leader_only: bool, rank: int | None) -> bool:
    if _env_flag(BADPUT_DISABLE) or enabled is False:
        return True
    if leader_only:
        rank = rank if rank is not None else _env_rank()
        return rank not in (None, 0)
    return False
