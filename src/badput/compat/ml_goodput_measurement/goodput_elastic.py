"""``ml_goodput_measurement.goodput_elastic``: elastic recorder and calculator.

Elastic training (slices lost and regained without a full restart) records slice counts,
waits for slices (``slice_down`` / ``scale_up``) and re-initialisations. The calculator
reports them as ELASTIC_SLICE_DOWN, ELASTIC_SCALE_UP and ELASTIC_REINITIALIZATION, plus
time-weighted slice efficiency, as the library does.

One re-attribution keeps its numbers: badput gives nested intervals to the innermost one,
so accelerator init or training preparation done *during* an elastic re-initialisation
is init/prep time in a badput report; the library counts it as re-initialisation. The
elastic calculator moves that overlap to ELASTIC_REINITIALIZATION (the time stays
counted once either way).
"""

from __future__ import annotations

import datetime
import time
from typing import Any, Final

from badput.compat.ml_goodput_measurement import goodput, goodput_utils
from badput.compat.ml_goodput_measurement._mapping import LibraryBuckets
from badput.engine import Report
from badput.formats import mgm as pl

__all__ = ["ElasticGoodputCalculator", "ElasticGoodputRecorder", "GoodputRecorder"]

GoodputRecorder = goodput.GoodputRecorder
BadputType = goodput_utils.BadputType

# The library's payload keys under its own (module-private) names.
_JOB_NAME: Final = pl.JOB_NAME
_ACTIVE_SLICES: Final = pl.ACTIVE_SLICES
_TOTAL_SLICES: Final = pl.TOTAL_SLICES
_AVAILABLE_SLICES: Final = pl.AVAILABLE_SLICES
_ELASTIC_SLICE_COUNTS_TIMESTAMP: Final = pl.ELASTIC_SLICE_COUNTS_TIMESTAMP
_ELASTIC_WAIT_EVENT_TYPE: Final = pl.ELASTIC_WAIT_EVENT_TYPE
_ELASTIC_WAIT_START_TIME: Final = pl.ELASTIC_WAIT_START_TIME
_ELASTIC_WAIT_END_TIME: Final = pl.ELASTIC_WAIT_END_TIME
_ELASTIC_REINIT_START_TIME: Final = pl.ELASTIC_REINIT_START_TIME
_ELASTIC_REINIT_END_TIME: Final = pl.ELASTIC_REINIT_END_TIME

_ELASTIC_ORDER: Final = (
    *LibraryBuckets.types,
    BadputType.ELASTIC_SLICE_DOWN,
    BadputType.ELASTIC_SCALE_UP,
    BadputType.ELASTIC_REINITIALIZATION,
)


class ElasticGoodputRecorder(goodput.GoodputRecorder):
    """The recorder, plus elastic slice counts, waits and re-initialisations."""

    @goodput._never_raises
    def record_elastic_slice_counts(
        self,
        active_slices: int,
        total_slices: int,
        available_slices: int,
        timestamp: datetime.datetime | None = None,
    ) -> None:
        """Slices stepping (``active``), available and in total, from ``timestamp`` on."""
        if not self._enabled:
            return
        ts = goodput._posix(timestamp) if timestamp is not None else time.time()
        self._write(
            {
                pl.JOB_NAME: self.job_name,
                pl.ACTIVE_SLICES: active_slices,
                pl.TOTAL_SLICES: total_slices,
                pl.AVAILABLE_SLICES: available_slices,
                pl.ELASTIC_SLICE_COUNTS_TIMESTAMP: ts,
            }
        )

    @goodput._never_raises
    def record_elastic_wait_start_time(
        self, event_type: str, start_time: datetime.datetime | None = None
    ) -> None:
        """Waiting for slices starts (``event_type`` with ``scale_up`` in it: ELASTIC_SCALE_UP,
        else ELASTIC_SLICE_DOWN)."""
        self._record_named(
            pl.ELASTIC_WAIT_EVENT_TYPE, event_type, pl.ELASTIC_WAIT_START_TIME, start_time
        )

    @goodput._never_raises
    def record_elastic_wait_end_time(
        self, event_type: str, end_time: datetime.datetime | None = None
    ) -> None:
        self._record_named(
            pl.ELASTIC_WAIT_EVENT_TYPE, event_type, pl.ELASTIC_WAIT_END_TIME, end_time
        )

    @goodput._never_raises
    def record_elastic_reinit_start_time(self, start_time: datetime.datetime | None = None) -> None:
        self._record_time(pl.ELASTIC_REINIT_START_TIME, start_time)

    @goodput._never_raises
    def record_elastic_reinit_end_time(self, end_time: datetime.datetime | None = None) -> None:
        self._record_time(pl.ELASTIC_REINIT_END_TIME, end_time)


def _overlap(
    spans: list[tuple[float, float]], others: list[tuple[float, float]], lo: float, hi: float
) -> float:
    """Seconds of ``spans`` inside any of ``others``, within ``[lo, hi]``."""
    total = 0.0
    for a, b in spans:
        for c, d in others:
            start, end = max(a, c, lo), min(b, d, hi)
            if end > start:
                total += end - start
    return total


def time_weighted_efficiency(
    records: list[tuple[float, int, int, int]], start: float, end: float
) -> tuple[float, float]:
    """(stepping, available) slice efficiency over ``[start, end]``, time-weighted: each
    count holds from its record to the next one. (0, 0) without records."""
    if not records or end <= start:
        return 0.0, 0.0
    initial = None
    for r in records:
        if r[0] <= start:
            initial = r
    timeline: list[tuple[float, int, int, int]] = []
    if initial is not None:
        timeline.append((start, initial[1], initial[2], initial[3]))
    timeline.extend(r for r in records if start < r[0] < end)
    if not timeline:
        return 0.0, 0.0
    stepping = available = 0.0
    for i, (ts, active, avail, total) in enumerate(timeline):
        nxt = timeline[i + 1][0] if i + 1 < len(timeline) else end
        stepping += active / total * (nxt - ts)
        available += avail / total * (nxt - ts)
    return stepping / (end - start), available / (end - start)


class _ElasticBuckets(LibraryBuckets):
    """The library's breakdown with the elastic badput types."""

    types = _ELASTIC_ORDER

    def bucket_type(self, name: str) -> goodput_utils.BadputType:
        if name.startswith("elastic_wait:"):
            scale_up = "scale_up" in name.lower()
            return BadputType.ELASTIC_SCALE_UP if scale_up else BadputType.ELASTIC_SLICE_DOWN
        if name == "elastic_reinit":
            return BadputType.ELASTIC_REINITIALIZATION
        return super().bucket_type(name)

    def adjust(self, report: Report, seconds: dict[goodput_utils.BadputType, float]) -> None:
        reinit = self.view.intervals.get("elastic_reinit", [])
        if not reinit:
            return
        lo, hi = report.window if report.window is not None else (report.start, report.end)
        for base, bt in (
            ("accelerator_init", BadputType.TPU_INITIALIZATION),
            ("training_prep", BadputType.TRAINING_PREP),
        ):
            moved = min(
                seconds.get(bt, 0.0), _overlap(self.view.intervals.get(base, []), reinit, lo, hi)
            )
            if moved > 0:
                seconds[bt] -= moved
                seconds[BadputType.ELASTIC_REINITIALIZATION] += moved


class ElasticGoodputCalculator(goodput.GoodputCalculator):
    """The calculator, with the elastic badput types and slice efficiency."""

    _buckets_class = _ElasticBuckets

    def get_job_goodput_details(self) -> goodput_utils.ElasticWorkloadMetricDetails:
        result: dict[str, Any] = dict(super().get_job_goodput_details())
        with self._lock:
            start, records = self._view.job_start, list(self._view.slices)
        if start is not None and records:
            end = start + float(result.get("total_elapsed_time", 0.0))
            stepping, available = time_weighted_efficiency(records, start, end)
            result["stepping_slice_efficiency"] = stepping
            result["available_slice_efficiency"] = available
        return result  # type: ignore[return-value]

    def get_interval_metric_details(
        self, interval_start: datetime.datetime, interval_end: datetime.datetime
    ) -> goodput_utils.ElasticIntervalWorkloadMetricDetails:
        result: dict[str, Any] = dict(
            super().get_interval_metric_details(interval_start, interval_end)
        )
        with self._lock:
            records = list(self._view.slices)
        if records:
            stepping, available = time_weighted_efficiency(
                records, goodput._posix_utc(interval_start), goodput._posix_utc(interval_end)
            )
            result["stepping_slice_efficiency"] = stepping
            result["available_slice_efficiency"] = available
        return result  # type: ignore[return-value]
