"""``ml_goodput_measurement.monitoring_elastic``: the monitor of elastic training jobs.

:class:`ElasticGoodputMonitor` is the :class:`~.monitoring.GoodputMonitor` with the
:class:`~.goodput_elastic.ElasticGoodputCalculator`: its badput breakdown adds
ELASTIC_SLICE_DOWN, ELASTIC_SCALE_UP and ELASTIC_REINITIALIZATION (TensorBoard
``badput/elastic_*``, Cloud Monitoring ``badput_source="ELASTIC_*"``), and with
``include_slice_efficiency`` it also sends the time-weighted slice efficiency to Cloud
Monitoring (``workload/stepping_slice_efficiency`` and
``workload/available_slice_efficiency``; ``window_type="CUMULATIVE"``,
``rolling_window_size="0"`` for the cumulative upload, ``window_type="INTERVAL"`` and the
window's size for rolling windows), as the library does. Pathways is always on, as in
the library (it changes nothing in badput's accounting).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

from badput.compat.ml_goodput_measurement import goodput_elastic, goodput_utils, monitoring

__all__ = ["ElasticGoodputMonitor", "GCPOptions"]

GCPOptions = goodput_utils.GCPOptions


class ElasticGoodputMonitor(monitoring.GoodputMonitor):
    """:class:`~.monitoring.GoodputMonitor` for elastic training jobs (the library's
    signature: ``include_slice_efficiency``, no ``pathway_enabled``; the same keyword-only
    extensions ``store``, ``clock`` and ``gcm_client``)."""

    _calculator_class = goodput_elastic.ElasticGoodputCalculator

    def __init__(
        self,
        job_name: str,
        logger_name: str,
        tensorboard_dir: str,
        upload_interval: int,
        monitoring_enabled: bool = False,
        include_badput_breakdown: bool = False,
        include_step_deviation: bool = False,
        include_slice_efficiency: bool = False,
        configured_ideal_step_time: float | None = None,
        step_deviation_interval_seconds: float = 10,
        gcp_options: goodput_utils.GCPOptions = GCPOptions(),  # noqa: B008 - the library's default
        skip_final_flush: bool = False,
        final_flush_timeout_seconds: float | None = (
            monitoring._PROCESS_TERMINATION_TIMEOUT_SECONDS
        ),
        gcs_sync_interval_seconds: int = 3600,
        cache_dir: str = "/tmp",  # the library's default, unused here
        max_logs_retention_period: datetime.timedelta | None = None,
        *,
        store: monitoring.StoreLike | None = None,
        clock: Callable[[], float] = time.time,
        gcm_client: Any = None,
    ) -> None:
        super().__init__(
            job_name=job_name,
            logger_name=logger_name,
            tensorboard_dir=tensorboard_dir,
            upload_interval=upload_interval,
            monitoring_enabled=monitoring_enabled,
            pathway_enabled=True,  # elastic always uses Pathways
            include_badput_breakdown=include_badput_breakdown,
            include_step_deviation=include_step_deviation,
            configured_ideal_step_time=configured_ideal_step_time,
            step_deviation_interval_seconds=step_deviation_interval_seconds,
            gcp_options=gcp_options,
            skip_final_flush=skip_final_flush,
            final_flush_timeout_seconds=final_flush_timeout_seconds,
            gcs_sync_interval_seconds=gcs_sync_interval_seconds,
            cache_dir=cache_dir,
            max_logs_retention_period=max_logs_retention_period,
            store=store,
            clock=clock,
            gcm_client=gcm_client,
        )
        self._include_slice_efficiency = bool(include_slice_efficiency)
