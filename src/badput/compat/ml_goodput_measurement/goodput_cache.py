"""``ml_goodput_measurement.goodput_cache``: the library's ``GoodputCache``, in memory.

The library caches the Cloud Logging entries it has read (a local JSONL file, synced to
GCS) so that a later query reads only new entries. badput's calculator reads its store
incrementally and needs no such cache; this class keeps the library's API for code that
uses it directly (same constructor, same methods), holding everything in memory:
``cache_dir`` and ``gcs_path`` are accepted and unused, ``sync_to_gcs`` does nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from badput.compat.ml_goodput_measurement.goodput_utils import GoodputInfo, StepInfo
from badput.formats import mgm as pl

__all__ = ["GoodputCache"]


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)


class GoodputCache:
    """The entries read so far, the last entry's (timestamp, id), the job's start and end
    times, and the last goodput and step results."""

    def __init__(self, job_name: str, cache_dir: str = "/tmp", gcs_path: str | None = None):
        self.job_name = job_name
        self.cache_dir = cache_dir
        self.gcs_path = gcs_path
        self._entries: list[dict[str, Any]] = []
        self._last_entry_info: tuple[datetime.datetime, str] | None = None
        self._job_start_time: datetime.datetime | None = None
        self._job_end_time: datetime.datetime | None = None
        self._goodput_info: GoodputInfo | None = None
        self._step_info: StepInfo | None = None

    def update_step_info(self, step_info: StepInfo) -> None:
        self._step_info = step_info

    def update_cached_entries(
        self,
        entries: Sequence[Mapping[str, Any]],
        last_entry_info: tuple[datetime.datetime, str] | None,
    ) -> None:
        """Append ``entries``; the job starts at the first ``job_start_time`` seen and
        ends at the last ``job_end_time``."""
        for entry in entries:
            self._entries.append(dict(entry))
            if self._job_start_time is None and pl.JOB_START_TIME in entry:
                self._job_start_time = _utc(float(entry[pl.JOB_START_TIME]))
            if pl.JOB_END_TIME in entry:
                self._job_end_time = _utc(float(entry[pl.JOB_END_TIME]))
        if last_entry_info and last_entry_info[0] is not None:
            self.update_last_entry_info(last_entry_info)

    def update_last_entry_info(self, last_entry_info: tuple[datetime.datetime, str]) -> None:
        self._last_entry_info = last_entry_info

    def update_goodput_info(self, goodput_info: GoodputInfo) -> None:
        self._goodput_info = goodput_info

    def get_cached_entries(self) -> list[dict[str, Any]]:
        return [dict(e) for e in self._entries]

    def get_step_entries(self) -> list[dict[str, Any]]:
        return [dict(e) for e in self._entries if pl.STEP_START_TIME in e]

    def get_goodput_info(self) -> GoodputInfo | None:
        return self._goodput_info

    def get_job_start_time(self) -> datetime.datetime | None:
        return self._job_start_time

    def get_job_end_time(self) -> datetime.datetime | None:
        return self._job_end_time

    def get_last_entry_info(self) -> tuple[datetime.datetime, str] | None:
        return self._last_entry_info

    def get_step_info(self) -> StepInfo | None:
        return self._step_info

    def sync_to_gcs(self) -> None:
        """Nothing to sync: the cache lives in memory."""

    def clear_cache(self) -> None:
        self._entries = []
        self._last_entry_info = None
        self._job_start_time = None
        self._job_end_time = None
        self._goodput_info = None
        self._step_info = None

    def is_cache_empty(self) -> bool:
        return not self._entries
