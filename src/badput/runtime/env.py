"""Every environment variable badput reads, one documented constant each, and the
detection of a process's rank, host, attempt and start time from what launchers set.

Detection needs no configuration: torchrun / ``torch.distributed``, Slurm, Open MPI
and MPICH each announce the rank of a process in their own variable, and restart
counters at two layers (``badput run`` or a Slurm requeue outside, torchrun's own
``--max-restarts`` inside) compose into one attempt id.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from badput.events import attempt_id

__all__ = [
    "BADPUT_ATTEMPT",
    "BADPUT_ATTEMPT_START",
    "BADPUT_DISABLE",
    "BADPUT_HEARTBEAT_INTERVAL",
    "BADPUT_JOB",
    "BADPUT_LAUNCHER",
    "BADPUT_PROCESS_INIT",
    "BADPUT_STATE_CACHE",
    "BADPUT_STORE",
    "DEFAULT_STORE",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "RANK",
    "RANK_VARIABLES",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_RESTART_COUNT",
    "TORCHELASTIC_RESTART_COUNT",
    "cache_home",
    "compose_attempt",
    "detect_attempt",
    "detect_host",
    "detect_rank",
    "launcher_attempt_start",
    "process_start_time",
    "under_launcher",
]

logger = logging.getLogger("badput")

#: Job (run) name used when ``Recorder(job=...)`` is not given. Set by ``badput run``.
BADPUT_JOB: Final = "BADPUT_JOB"
#: Store URI or directory used when no store is given. Default: ``./badput-runs``.
BADPUT_STORE: Final = "BADPUT_STORE"
#: Attempt id of this process, set by ``badput run`` for each (re)start of the command.
BADPUT_ATTEMPT: Final = "BADPUT_ATTEMPT"
#: Set by ``badput run`` in the command's environment: the launcher records the job's
#: lifecycle (``job_start``, ``attempt_end``, ``job_end``), so the recorders inside
#: leave ``job_end`` to it.
BADPUT_LAUNCHER: Final = "BADPUT_LAUNCHER"
#: Set by ``badput run`` in the command's environment: the Unix time of the attempt's
#: ``job_start`` (a process of the attempt cannot have started before it).
BADPUT_ATTEMPT_START: Final = "BADPUT_ATTEMPT_START"
#: ``0``: never record ``process_init``; ``1``: record it even without a launcher;
#: unset: record it in processes a launcher started (``badput run``, torchrun, Slurm, MPI).
BADPUT_PROCESS_INIT: Final = "BADPUT_PROCESS_INIT"
#: ``1``/``true``/``yes``: every recorder in this process is a no-op.
BADPUT_DISABLE: Final = "BADPUT_DISABLE"
#: Seconds between heartbeat events (default 10; ``0`` turns heartbeats off).
BADPUT_HEARTBEAT_INTERVAL: Final = "BADPUT_HEARTBEAT_INTERVAL"
#: Where a compacted job's read is kept between runs (:mod:`badput.runtime.state_cache`):
#: a directory, or ``off``. Default: ``$XDG_CACHE_HOME/badput/state``.
BADPUT_STATE_CACHE: Final = "BADPUT_STATE_CACHE"
#: Set by torchrun / torch.distributed.elastic: the restart number of the worker group.
TORCHELASTIC_RESTART_COUNT: Final = "TORCHELASTIC_RESTART_COUNT"
#: Set by Slurm for a requeued job: how many times it was restarted.
SLURM_RESTART_COUNT: Final = "SLURM_RESTART_COUNT"
#: Set by torchrun / torch.distributed launchers: the global rank of this process.
RANK: Final = "RANK"
#: Set by Slurm in every process of a job allocation.
SLURM_JOB_ID: Final = "SLURM_JOB_ID"
#: Set by Slurm's ``srun`` for each task: its global rank.
SLURM_PROCID: Final = "SLURM_PROCID"
#: Set by Open MPI's ``mpirun`` for each process: its global rank.
OMPI_COMM_WORLD_RANK: Final = "OMPI_COMM_WORLD_RANK"
#: Set by MPICH / Intel MPI (PMI) for each process: its global rank.
PMI_RANK: Final = "PMI_RANK"
#: The rank variables, in the order they are trusted: the innermost launcher first
#: (torchrun inside ``srun`` sets ``RANK`` per worker while ``SLURM_PROCID`` names the task).
RANK_VARIABLES: Final = (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)

#: The store used when neither an argument nor ``BADPUT_STORE`` names one.
DEFAULT_STORE: Final = "./badput-runs"


def cache_home(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/badput`` (default ``~/.cache/badput``): badput's caches, never
    inside a store (where a directory of ours would read as a job). A relative
    ``XDG_CACHE_HOME`` is ignored, as the XDG base directory specification says (a cache
    that moved with the working directory would be made anew wherever a job is read)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "badput"


def _int_var(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        logger.warning("badput: ignoring %s=%r (not an integer)", name, raw)
        return None


def detect_rank(env: Mapping[str, str] | None = None) -> int | None:
    """This process's global rank, or ``None`` when nothing says it runs among others.

    The first of ``RANK_VARIABLES`` that is set; else, when ``torch.distributed`` is
    already imported and initialised (Lightning's DDP launcher sets no ``RANK``), its
    ``get_rank()``. Nothing is imported to find out.
    """
    env = os.environ if env is None else env
    for name in RANK_VARIABLES:
        rank = _int_var(env, name)
        if rank is not None:
            return rank
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank())
        except Exception:  # a half-initialised process group: no rank rather than a crash
            return None
    return None


def detect_host() -> str:
    """The host name (what Slurm, MPI and torchrun call the node)."""
    return socket.gethostname()


def compose_attempt(outer: str | int | None, inner: str | int | None) -> str | int | None:
    """One attempt id from an outer restart counter and torchrun's inner one.

    The first worker group of an outer attempt *is* that attempt (``inner`` 0 keeps
    ``outer``); a restart of the worker group inside it is ``"<outer>.<inner>"``, a
    new attempt, never merged with the outer one. With one layer only, its id.
    """
    if outer is None:
        return inner
    if not inner:
        return outer
    return f"{outer}.{inner}"


def detect_attempt(env: Mapping[str, str] | None = None) -> str | int | None:
    """The attempt id the environment gives this process, ``None`` when none does.

    Outer layer: ``BADPUT_ATTEMPT`` (``badput run``), else ``SLURM_RESTART_COUNT``
    (a requeue); inner layer: ``TORCHELASTIC_RESTART_COUNT`` (torchrun); composed
    by :func:`compose_attempt`.
    """
    env = os.environ if env is None else env
    outer: str | int | None = None
    for name in (BADPUT_ATTEMPT, SLURM_RESTART_COUNT):
        raw = env.get(name, "").strip()
        if raw:
            outer = attempt_id(raw)
            break
    raw_inner = env.get(TORCHELASTIC_RESTART_COUNT, "").strip()
    return compose_attempt(outer, attempt_id(raw_inner) if raw_inner else None)


def under_launcher(env: Mapping[str, str] | None = None) -> bool:
    """True in a command started by ``badput run`` (it records the job's lifecycle)."""
    env = os.environ if env is None else env
    return bool(env.get(BADPUT_LAUNCHER, "").strip())


def launcher_attempt_start(env: Mapping[str, str] | None = None) -> float | None:
    """When ``badput run`` started this attempt (``BADPUT_ATTEMPT_START``), if it did."""
    env = os.environ if env is None else env
    try:
        return float(env.get(BADPUT_ATTEMPT_START, ""))
    except ValueError:
        return None


def _uptime(proc: str) -> float:
    with open(os.path.join(proc, "uptime"), encoding="ascii") as f:
        return float(f.read().split()[0])


def process_start_time(pid: int | str = "self", proc: str = "/proc") -> float | None:
    """When the OS started process ``pid`` (Unix time), or ``None`` where it cannot tell.

    Linux: ``starttime`` (field 22 of ``/proc/<pid>/stat``, clock ticks after boot)
    against the time since boot (``/proc/uptime``, read at once with the clock):
    ``now - (uptime - starttime)``. Precision: one clock tick (10 ms). No psutil.
    """
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="ascii", errors="replace") as f:
            stat = f.read()
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = int(fields[19])  # field 22 counted from 1; fields[0] is field 3
        hz = os.sysconf("SC_CLK_TCK")
        now, uptime = time.time(), _uptime(proc)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    if hz <= 0:
        return None
    age = uptime - ticks / hz
    return now - age if age >= 0 else None
