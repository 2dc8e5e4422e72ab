"""The public surface, pinned: a name added to or dropped from a package's ``__all__``
is a decision that shows up here (and in the changelog), never an accident."""

from __future__ import annotations

import importlib

import pytest

PUBLIC: dict[str, set[str]] = {
    "badput": {
        "Accountant", "Event", "EventError", "Kind", "LiveJob", "Recorder", "Report",
        "analyze", "open_store",
    },
    "badput.events": {
        "Chunk", "DecodedColumns", "Event", "EventError", "INTERVAL_KINDS", "KINDS", "KIND_CODE",
        "KIND_NAMES", "Kind", "LIFECYCLE_KINDS", "LeanEvent", "LeanRows", "Writer",
        "MAX_INT", "MAX_SETTING_SECONDS", "MAX_TS", "MIN_TS", "NAMED_KINDS", "OPEN_ENDED_KINDS",
        "SCHEMA_VERSION", "SECTION_QUANTILES", "STEP_KINDS", "WORK_COUNTS", "attempt_id",
        "bucket_of", "interval_base", "validate",
    },
    "badput.store": {
        "MAX_LINE_BYTES", "SPOOL_DIR", "Chunk", "Cursor", "EventStore", "EventWriter",
        "FirstPart", "JobListing", "JobNames", "JsonlStore",
        "MemoryStore", "ObjectStore", "Orphans", "ReadResult", "SingleFileStore", "SpooledWriter",
        "ObjectStoreError", "Unread",
        "WriterKey", "is_job_path", "job_sources", "list_job",
        "open_source",
        "open_regular", "open_store", "safe_job_dir", "ship_orphaned", "what_is", "written_end",
        "ARCHIVE_NAME", "ArchivedStore", "Compacted", "archive_of", "compact", "read_meta",
        "with_archive", "KeptRead",
    },
    "badput.engine": {
        "Accountant", "AttemptSummary", "DEFAULT_SLOWDOWN_FACTOR", "Diagnostic", "GOODPUT_BINS",
        "GoodputSeries", "IntervalSpan", "IntervalSpans", "ROLLING_BINS",
        "GroupedBuckets", "Lane", "MAX_NAMED_BUCKETS", "PRODUCTIVE", "RankOptions",
        "RankView", "Report", "STEP_BUCKETS", "SectionView", "Snapshot", "Stall", "StepCounts",
        "StepSpans",
        "StepTimeStats", "Straggler", "Timeline", "cpu_time_with_helpers", "group_buckets",
        "step_time_stats", "JOB_STATES", "JobState", "SILENCE_MIN_SECONDS", "SILENCE_STEP_FACTOR",
        "job_state", "silence_threshold", "PEAK_FLOPS", "AttemptWork", "ProgramGoodput",
        "Cost", "cost_of", "resolve_devices",
        "dense_flops_per_token", "table_peak", "clock_continues", "mfu_over_time", "MfuSeries",
        "PROGRAM_FIGURES",
    },
    "badput.report": {
        "JobRow", "MAX_ATTEMPT_ROWS", "compare_dict", "dumps_finite", "format_duration",
        "format_money",
        "format_percent", "format_ts", "html_report", "inert", "job_row", "no_time_reason",
        "open_output", "render_compare", "render_jobs", "render_table", "render_watch",
        "report_of", "run_watch", "sort_rows",
        "status_line", "to_json", "write_csv", "write_trace",
    },
    "badput.monitor": {
        "CloudMonitoringExporter", "Exporter", "MAX_BACKOFF_CYCLES", "MAX_BACKOFF_SECONDS",
        "Monitor", "OpenTelemetryExporter", "PrometheusExporter", "Snapshot",
        "TensorBoardExporter", "flush_live_recorders", "window_label",
    },
    "badput.analysis": {
        "JobSplit", "LiveJob", "analyze", "read_split_part", "split_job",
    },
    "badput.fleet": {
        "ENGINES", "SPLIT_BYTES", "TABLES", "WORST_JOBS", "FleetRun", "JobResult", "ResultCache",
        "analyse_fleet", "analyse_job", "default_cache_dir", "failed_attempts", "fleet_html",
        "fleet_summary", "fleet_tables", "job_fingerprint", "job_page_name",
        "query_parquet_url", "query_tables", "read_tables", "render_fleet", "run_batch",
        "run_task", "job_result",
        "write_job_pages", "write_parquet",
    },
    "badput.advice": {
        "Advice", "AttemptFacts", "FailureRate", "Interval", "JobFacts", "Lever",
        "ReplaySettings", "SaveFacts", "Spread", "WhatIf", "advise", "advise_of",
        "chi2_quantile", "daly_interval", "devices_of", "efficiency", "measure",
        "poisson_rate_interval", "read_job", "render_advice", "render_whatif",
        "replay_seconds", "report_advice", "advise_pooled", "failure_rate", "pooled_rate",
        "rate_of", "whatif", "whatif_of", "young_interval",
    },
    "badput.recorder": {
        "DEFAULT_HEARTBEAT_INTERVAL", "LIVE_RECORDERS", "NullRecorder", "Recorder", "SPANS",
        "begin_teardown", "record_end", "record_interval", "record_start", "resolve_attempt",
    },
    "badput.launcher": {
        "AUTO", "HangWatch", "LaunchResult", "Launcher", "default_job_name",
        "end_orphaned_attempt", "job_completed", "latest_inner_restart", "next_attempt",
        "parse_hang_timeout", "run_job", "ship_orphaned_of",
    },
    "badput.cli": {"console_main", "main", "parse_timestamp"},
    "badput.runtime": {
        "blas", "env", "gc_pause", "heap", "lazy", "lifecycle", "optional", "shared_work",
        "state_cache", "worker",
    },
    "badput.testing": {
        "MemoryStore", "Timeline", "events_to_jsonl", "events_to_store", "read_all",
        "recorder_for_tests",
    },
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_exported_names_are_pinned_and_importable(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == PUBLIC[module]
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{module}.{name}"
