"""``badput run``: a command run as a job, its attempts recorded, restarted on failure.

The room holds the launcher (``_run``), what it reads of a job's attempts in the store
(``_attempts``), its hang watch (``_hangwatch``) and the keeper process between the launcher
and each attempt (``_keeper``, run by path: standard library only). Other rooms use the
names below.
"""

from badput.launcher._attempts import (
    end_orphaned_attempt,
    job_completed,
    latest_inner_restart,
    next_attempt,
    ship_orphaned_of,
)
from badput.launcher._hangwatch import AUTO, HangWatch, parse_hang_timeout
from badput.launcher._run import Launcher, LaunchResult, default_job_name, run_job

__all__ = [
    "AUTO",
    "HangWatch",
    "LaunchResult",
    "Launcher",
    "default_job_name",
    "end_orphaned_attempt",
    "job_completed",
    "latest_inner_restart",
    "next_attempt",
    "parse_hang_timeout",
    "run_job",
    "ship_orphaned_of",
]
