"""The no-op recorder, written out behind the same interface as :class:`Recorder`."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import Any

from badput.recorder._lifetime import CLOSE_TIMEOUT
from badput.recorder._recorder import Recorder
from badput.recorder._sections import DEFAULT_SECTION_INTERVAL
from badput.recorder._spans import _NULL_SPAN
from badput.runtime.env import BADPUT_JOB
from badput.store import EventStore

__all__ = ["NullRecorder"]


class NullRecorder(Recorder):
    """A recorder that records nothing: every method is a no-op; no thread, no file.

    Returned by ``Recorder(...)`` when recording is disabled; may also be built
    directly (``NullRecorder()``). Every public method of :class:`Recorder` is
    written out here (a test checks it), so none can reach the real recorder's
    state, which a null recorder does not have.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> NullRecorder:
        return object.__new__(cls)

    def __init__(
        self,
        job: str | None = None,
        store: EventStore | str | os.PathLike[str] | None = None,
        *,
        rank: int | None = None,
        attempt: str | int | None = None,
        host: str | None = None,
        enabled: bool | None = None,
        leader_only: bool = False,
        heartbeat_interval: float | None = None,
        flush_interval: float = 0.5,
        section_interval: float = DEFAULT_SECTION_INTERVAL,
    ) -> None:
        self._job = job if job is not None else os.environ.get(BADPUT_JOB, "")
        self._store = None  # type: ignore[assignment]
        self._rank = rank
        self._attempt = attempt if attempt is not None else ""
        self._host = host if host is not None else ""
        self._pid = os.getpid()
        self._heartbeat = 0.0
        self._dropped = 0
        self._n_mapped = 0
        self._n_written = 0
        self._closed = False

    @property
    def enabled(self) -> bool:
        return False

    @property
    def dropped_events(self) -> int:
        return 0

    @property
    def lost_events(self) -> int:
        return 0

    @property
    def recorded_events(self) -> int:
        return 0

    @property
    def job(self) -> str:
        return self._job

    @property
    def attempt(self) -> str | int:
        return self._attempt

    @property
    def rank(self) -> int | None:
        return self._rank

    @property
    def host(self) -> str:
        return self._host

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def store(self) -> EventStore | None:
        return None

    @property
    def heartbeat_interval(self) -> float:
        return 0.0

    @property
    def closed(self) -> bool:
        return self._closed

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float | None = CLOSE_TIMEOUT) -> None:
        self._closed = True

    def _span(self, name: str, *args: Any) -> AbstractContextManager[None]:
        return _NULL_SPAN

    def section(self, name: str) -> AbstractContextManager[None]:
        return _NULL_SPAN

    def step(
        self, step: int, *, tokens: int | None = None, samples: int | None = None
    ) -> AbstractContextManager[None]:
        return _NULL_SPAN

    def record_model(
        self,
        *,
        params: int | None = None,
        layers: int | None = None,
        hidden: int | None = None,
        seq_len: int | None = None,
        flops_per_token: float | None = None,
        devices: int | None = None,
        peak_flops: float | None = None,
        device: str | None = None,
        ts: float | None = None,
    ) -> None:
        return None

    def record(self, kind: str, *, ts: float | None = None, **fields: Any) -> None:
        return None

    def record_job_scheduled(self, *, ts: float | None = None) -> None:
        return None

    def record_job_start(self, *, ts: float | None = None) -> None:
        return None

    def record_job_end(self, status: str | None = None, *, ts: float | None = None) -> None:
        return None

    def record_attempt_end(
        self, status: str | None = None, exit_code: int | None = None, *, ts: float | None = None
    ) -> None:
        return None

    def record_heartbeat(self, *, ts: float | None = None) -> None:
        return None

    def record_step_start(
        self,
        step: int,
        *,
        ts: float | None = None,
        tokens: int | None = None,
        samples: int | None = None,
    ) -> None:
        return None

    def record_step_end(
        self,
        step: int,
        *,
        ts: float | None = None,
        tokens: int | None = None,
        samples: int | None = None,
    ) -> None:
        return None

    def record_accelerator_init_start(self, *, ts: float | None = None) -> None:
        return None

    def record_accelerator_init_end(self, *, ts: float | None = None) -> None:
        return None

    def record_training_prep_start(self, *, ts: float | None = None) -> None:
        return None

    def record_training_prep_end(self, *, ts: float | None = None) -> None:
        return None

    def record_checkpoint_restore_start(self, step: int, *, ts: float | None = None) -> None:
        return None

    def record_checkpoint_restore_end(self, step: int, *, ts: float | None = None) -> None:
        return None

    def record_checkpoint_save_start(self, step: int, *, ts: float | None = None) -> None:
        return None

    def record_checkpoint_save_end(self, step: int, *, ts: float | None = None) -> None:
        return None

    def record_checkpoint_committed(self, step: int, *, ts: float | None = None) -> None:
        return None

    def record_data_loading_start(self, blocking: bool = True, *, ts: float | None = None) -> None:
        return None

    def record_data_loading_end(self, blocking: bool = True, *, ts: float | None = None) -> None:
        return None

    def record_compile_start(self, *, ts: float | None = None) -> None:
        return None

    def record_compile_end(self, *, ts: float | None = None) -> None:
        return None

    def record_custom_start(self, name: str, *, ts: float | None = None) -> None:
        return None

    def record_custom_end(self, name: str, *, ts: float | None = None) -> None:
        return None

    def record_elastic_wait_start(self, name: str, *, ts: float | None = None) -> None:
        return None

    def record_elastic_wait_end(self, name: str, *, ts: float | None = None) -> None:
        return None

    def record_elastic_reinit_start(self, *, ts: float | None = None) -> None:
        return None

    def record_elastic_reinit_end(self, *, ts: float | None = None) -> None:
        return None

    def record_elastic_slices(
        self, active: int, total: int, available: int, *, ts: float | None = None
    ) -> None:
        return None

    def record_distributed_init_start(self, *, ts: float | None = None) -> None:
        return None

    def record_distributed_init_end(self, *, ts: float | None = None) -> None:
        return None

    def record_model_build_start(self, *, ts: float | None = None) -> None:
        return None

    def record_model_build_end(self, *, ts: float | None = None) -> None:
        return None

    def record_teardown_start(self, *, ts: float | None = None) -> None:
        return None

    def record_teardown_end(self, *, ts: float | None = None) -> None:
        return None
