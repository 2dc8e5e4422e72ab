"""Every environment variable badput reads, one documented constant each."""

from __future__ import annotations

from typing import Final

__all__ = [
    "BADPUT_ATTEMPT",
    "BADPUT_DISABLE",
    "BADPUT_HEARTBEAT_INTERVAL",
    "BADPUT_JOB",
    "BADPUT_STORE",
    "DEFAULT_STORE",
    "RANK",
    "SLURM_RESTART_COUNT",
    "TORCHELASTIC_RESTART_COUNT",
]

#: Job (run) name used when ``Recorder(job=...)`` is not given. Set by ``badput run``.
BADPUT_JOB: Final = "BADPUT_JOB"
#: Store URI or directory used when no store is given. Default: ``./badput-runs``.
BADPUT_STORE: Final = "BADPUT_STORE"
#: Attempt id of this process, set by ``badput run`` for each (re)start of the command.
BADPUT_ATTEMPT: Final = "BADPUT_ATTEMPT"
#: ``1``/``true``/``yes``: every recorder in this process is a no-op.
BADPUT_DISABLE: Final = "BADPUT_DISABLE"
#: Seconds between heartbeat events (default 10; ``0`` turns heartbeats off).
BADPUT_HEARTBEAT_INTERVAL: Final = "BADPUT_HEARTBEAT_INTERVAL"
#: Set by torchrun / torch.distributed.elastic: the restart number of the worker group.
TORCHELASTIC_RESTART_COUNT: Final = "TORCHELASTIC_RESTART_COUNT"
#: Set by Slurm for a requeued job: how many times it was restarted.
SLURM_RESTART_COUNT: Final = "SLURM_RESTART_COUNT"
#: Set by torchrun / torch.distributed launchers: the global rank of this process.
#: The recorder's default ``rank`` (no rank when unset).
RANK: Final = "RANK"

#: The store used when neither an argument nor ``BADPUT_STORE`` names one.
DEFAULT_STORE: Final = "./badput-runs"
