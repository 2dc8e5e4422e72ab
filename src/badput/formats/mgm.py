"""ml-goodput-measurement's Cloud Logging payloads <-> badput schema-v1 events.

ml-goodput-measurement (0.2.x) writes one flat JSON payload per call to Cloud Logging,
e.g. ``{"job_name": "j", "step_count": 7, "step_start_time": 1767225614.0}``; Orbax's
checkpoint logger writes save/restore statistics into the same log. This module is the one
place that knows those keys:

- :class:`PayloadDecoder` turns payloads (theirs, Orbax's, or ours) into badput events.
  It is stateful because the payloads are: they carry no attempt id (a restart is a new
  ``job_start_time``) and no blocking flag on data loads. Data loads before the first step
  of an attempt are blocking (the library's DATA_LOADING_SYNC); loads once the training
  loop runs overlap training (its DATA_LOADING_ASYNC), which is what that library assumes.
- :class:`PayloadEncoder` writes a badput event in their format, so that their calculator
  and dashboards still read a log badput wrote. Every payload also carries the full event
  under :data:`BADPUT_KEY`, so reading it back loses nothing (attempt, host, rank, step
  ends, heartbeats); their calculator ignores keys it does not know.

Times in payloads are POSIX seconds (floats), as the library writes them.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from badput.events import Event, Kind, validate

__all__ = [
    "BADPUT_KEY",
    "JOB_NAME",
    "SOURCE_OF_BUCKET",
    "PayloadDecoder",
    "PayloadEncoder",
    "PayloadError",
]

#: The library's badput source (its ``BadputType`` name) of each badput bucket
#: (ACCOUNTING.md §6), shared by the Cloud Monitoring exporter and the compat calculator.
#: ``custom:*`` (CUSTOM_BADPUT_EVENTS), ``elastic_wait:*`` and the overlapped loads
#: (DATA_LOADING_ASYNC) are mapped by name where they are used; a bucket not listed is OTHER.
SOURCE_OF_BUCKET: Final[dict[str, str]] = {
    "accelerator_init": "TPU_INITIALIZATION",
    "training_prep": "TRAINING_PREP",
    "startup": "PROGRAM_STARTUP",
    "compile": "PROGRAM_STARTUP",
    "data_loading": "DATA_LOADING_SYNC",
    "checkpoint_save": "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "checkpoint_restore": "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "wasted": "WASTED_PROGRESS_FROM_DISRUPTION",
    "recovery": "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "elastic_reinit": "ELASTIC_REINITIALIZATION",
    # process groups and rendezvous are the runtime's start, as TPU_INITIALIZATION is for
    # JAX's distributed initialisation; building the model is part of TRAINING_PREP
    "distributed_init": "TPU_INITIALIZATION",
    "model_build": "TRAINING_PREP",
    # a hang ends in a kill and a restart: time the library counts as recovery (§6)
    "hung": "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "teardown": "OTHER",
    "untracked": "OTHER",
    "queued": "OTHER",
}

# The library's payload keys (ml_goodput_measurement/src/goodput.py, goodput_elastic.py).
JOB_NAME: Final = "job_name"
STEP_COUNT: Final = "step_count"
STEP_START_TIME: Final = "step_start_time"
JOB_START_TIME: Final = "job_start_time"
JOB_END_TIME: Final = "job_end_time"
TPU_INIT_START_TIME: Final = "tpu_init_start_time"
TPU_INIT_END_TIME: Final = "tpu_init_end_time"
TRAINING_PREP_START_TIME: Final = "training_prep_start_time"
TRAINING_PREP_END_TIME: Final = "training_prep_end_time"
DATA_LOADING_START_TIME: Final = "data_loading_start_time"
DATA_LOADING_END_TIME: Final = "data_loading_end_time"
CUSTOM_BADPUT_EVENT_TYPE: Final = "custom_badput_event_type"
CUSTOM_BADPUT_EVENT_START_TIME: Final = "custom_badput_event_start_time"
CUSTOM_BADPUT_EVENT_END_TIME: Final = "custom_badput_event_end_time"
ACTIVE_SLICES: Final = "active_slices"
TOTAL_SLICES: Final = "total_slices"
AVAILABLE_SLICES: Final = "available_slices"
ELASTIC_SLICE_COUNTS_TIMESTAMP: Final = "elastic_slice_counts_timestamp"
ELASTIC_WAIT_EVENT_TYPE: Final = "elastic_wait_event_type"
ELASTIC_WAIT_START_TIME: Final = "elastic_wait_start_time"
ELASTIC_WAIT_END_TIME: Final = "elastic_wait_end_time"
ELASTIC_REINIT_START_TIME: Final = "elastic_reinit_start_time"
ELASTIC_REINIT_END_TIME: Final = "elastic_reinit_end_time"

# Orbax's checkpoint logger (read by the library's CheckpointBadputCalculator).
ORBAX_EVENT_TYPE: Final = "event_type"
ORBAX_STEP: Final = "step"
ORBAX_DIRECTORY: Final = "directory"
ORBAX_SAVE: Final = "save"
ORBAX_RESTORES: Final = frozenset({"restore", "emergency_restore"})
ORBAX_SAVE_START: Final = "checkpoint_manager_blocking_start_time"
ORBAX_SAVE_DURATION: Final = "checkpoint_manager_blocking_duration_secs"
ORBAX_RESTORE_START: Final = "checkpoint_manager_start_time"
ORBAX_RESTORE_DURATION: Final = "checkpoint_manager_duration_secs"

#: The key under which badput keeps the whole event in a payload it writes.
BADPUT_KEY: Final = "badput_event"

# Payload time key -> badput kind, for the keys that map one to one.
_SIMPLE: Final[dict[str, str]] = {
    JOB_START_TIME: Kind.JOB_START,
    JOB_END_TIME: Kind.JOB_END,
    TPU_INIT_START_TIME: Kind.ACCELERATOR_INIT_START,
    TPU_INIT_END_TIME: Kind.ACCELERATOR_INIT_END,
    TRAINING_PREP_START_TIME: Kind.TRAINING_PREP_START,
    TRAINING_PREP_END_TIME: Kind.TRAINING_PREP_END,
    ELASTIC_REINIT_START_TIME: Kind.ELASTIC_REINIT_START,
    ELASTIC_REINIT_END_TIME: Kind.ELASTIC_REINIT_END,
}
_SIMPLE_BACK: Final[dict[str, str]] = {kind: key for key, kind in _SIMPLE.items()}


class PayloadError(ValueError):
    """A payload that cannot be turned into events (says which key is wrong)."""


def _time(payload: Mapping[str, Any], key: str) -> float:
    value = payload[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PayloadError(f"{key} must be a finite number of POSIX seconds, got {value!r}")
    return float(value)


def _int(payload: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = payload.get(key, default)
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # int, numpy integers
        except TypeError:
            pass
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
    raise PayloadError(f"{key} must be an integer, got {value!r}")


def _duration(payload: Mapping[str, Any], key: str) -> float:
    value = payload.get(key)
    try:
        seconds = float(value)  # type: ignore[arg-type]  # Orbax writes floats or strings
    except (TypeError, ValueError):
        raise PayloadError(f"{key} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise PayloadError(f"{key} must be a non-negative number of seconds, got {value!r}")
    return seconds


class PayloadDecoder:
    """Turns one job's payloads, in log order, into badput events.

    Args:
        job: the job name events get (default: each payload's ``job_name``).
        attempt: attempt id of the events before the first ``job_start_time``; each
            later job start opens attempt ``<attempt>.<n>``. ``None`` (the default, for
            imported logs) leaves attempts unset: the engine starts a new attempt at
            each job start, which is exactly how the library sees restarts.
    """

    def __init__(self, job: str | None = None, attempt: str | int | None = None) -> None:
        self._job = job
        self._attempt_base = attempt
        self._attempt: str | int | None = attempt
        self._starts = 0
        self._looping = False  # a step has started in the current attempt
        self._blocking_load: bool | None = None  # blocking flag of the open data load

    @property
    def attempt(self) -> str | int | None:
        """Attempt id of the events decoded now."""
        return self._attempt

    def decode(self, payload: Mapping[str, Any], timestamp: float | None = None) -> list[Event]:
        """Events of one payload (none for a payload badput has no use for).

        ``timestamp`` is the log entry's own time, used only for Orbax entries that lack
        their start time. Raises :class:`PayloadError` for a payload with a known key
        but a bad value.
        """
        own = payload.get(BADPUT_KEY)
        if own is not None:
            return [self._own(own)]
        job = self._job if self._job is not None else payload.get(JOB_NAME)
        if not isinstance(job, str) or not job:
            raise PayloadError(f"payload has no {JOB_NAME!r}: {dict(payload)!r}")
        out: list[tuple[float, str, dict[str, Any]]] = []
        if STEP_START_TIME in payload:
            self._looping = True
            step = _int(payload, STEP_COUNT)
            out.append((_time(payload, STEP_START_TIME), Kind.STEP_START, {"step": step}))
        for key, kind in _SIMPLE.items():
            if key in payload:
                if kind == Kind.JOB_START:
                    self._new_attempt()
                out.append((_time(payload, key), kind, {}))
        if DATA_LOADING_START_TIME in payload:
            self._blocking_load = not self._looping
            fields: dict[str, Any] = {} if self._blocking_load else {"blocking": False}
            out.append((_time(payload, DATA_LOADING_START_TIME), Kind.DATA_LOADING_START, fields))
        if DATA_LOADING_END_TIME in payload:
            blocking = self._blocking_load if self._blocking_load is not None else not self._looping
            self._blocking_load = None
            fields = {} if blocking else {"blocking": False}
            out.append((_time(payload, DATA_LOADING_END_TIME), Kind.DATA_LOADING_END, fields))
        self._named(
            payload,
            out,
            CUSTOM_BADPUT_EVENT_TYPE,
            "unknown",
            Kind.CUSTOM_START,
            CUSTOM_BADPUT_EVENT_START_TIME,
            Kind.CUSTOM_END,
            CUSTOM_BADPUT_EVENT_END_TIME,
        )
        self._named(
            payload,
            out,
            ELASTIC_WAIT_EVENT_TYPE,
            "unknown",
            Kind.ELASTIC_WAIT_START,
            ELASTIC_WAIT_START_TIME,
            Kind.ELASTIC_WAIT_END,
            ELASTIC_WAIT_END_TIME,
        )
        if ELASTIC_SLICE_COUNTS_TIMESTAMP in payload:
            fields = {
                "active": _int(payload, ACTIVE_SLICES, 0),
                "total": max(_int(payload, TOTAL_SLICES, 1), 1),
                "available": _int(payload, AVAILABLE_SLICES, 0),
            }
            out.append(
                (_time(payload, ELASTIC_SLICE_COUNTS_TIMESTAMP), Kind.ELASTIC_SLICES, fields)
            )
        if ORBAX_EVENT_TYPE in payload:
            out.extend(self._orbax(payload, timestamp))
        return [self._event(job, ts, kind, fields) for ts, kind, fields in out]

    def _named(
        self,
        payload: Mapping[str, Any],
        out: list[tuple[float, str, dict[str, Any]]],
        type_key: str,
        default: str,
        start_kind: str,
        start_key: str,
        end_kind: str,
        end_key: str,
    ) -> None:
        for key, kind in ((start_key, start_kind), (end_key, end_kind)):
            if key in payload:
                name = str(payload.get(type_key) or default)
                out.append((_time(payload, key), kind, {"name": name}))

    def _orbax(
        self, payload: Mapping[str, Any], timestamp: float | None
    ) -> list[tuple[float, str, dict[str, Any]]]:
        event_type = payload.get(ORBAX_EVENT_TYPE)
        if event_type == ORBAX_SAVE:
            start_key, duration_key = ORBAX_SAVE_START, ORBAX_SAVE_DURATION
            kinds = (Kind.CHECKPOINT_SAVE_START, Kind.CHECKPOINT_SAVE_END)
        elif event_type in ORBAX_RESTORES:
            start_key, duration_key = ORBAX_RESTORE_START, ORBAX_RESTORE_DURATION
            kinds = (Kind.CHECKPOINT_RESTORE_START, Kind.CHECKPOINT_RESTORE_END)
        else:
            return []
        step = _int(payload, ORBAX_STEP)
        duration = _duration(payload, duration_key)
        if payload.get(start_key) is not None:
            start = _time(payload, start_key)
        elif timestamp is not None:
            start = timestamp - duration  # Orbax logs an operation when it is done
        else:
            raise PayloadError(f"Orbax {event_type} entry without {start_key!r} or a timestamp")
        fields: dict[str, Any] = {"step": step}
        directory = payload.get(ORBAX_DIRECTORY)
        if event_type == "emergency_restore" or (
            isinstance(directory, str) and not directory.startswith("gs://")
        ):
            # Orbax's local (non-GCS) operations; the checkpoint calculator tells them apart.
            fields["name"] = "local"
        return [(start, kinds[0], fields), (start + duration, kinds[1], fields)]

    def _new_attempt(self) -> None:
        self._starts += 1
        self._looping = False
        self._blocking_load = None
        if self._attempt_base is not None and self._starts > 1:
            self._attempt = f"{self._attempt_base}.{self._starts - 1}"

    def _event(self, job: str, ts: float, kind: str, fields: dict[str, Any]) -> Event:
        return Event(ts=ts, kind=kind, job=job, attempt=self._attempt, **fields)

    def _own(self, raw: Any) -> Event:
        # Lax: Cloud Logging keeps a payload as a protobuf Struct, whose numbers are doubles;
        # read over gRPC, ``step`` 7 comes back as 7.0 (and ``attempt`` 0 as 0.0).
        try:
            event = msgspec.convert(raw, Event, strict=False)
        except (msgspec.ValidationError, TypeError) as exc:
            raise PayloadError(f"{BADPUT_KEY} is not a badput event: {exc}") from None
        problem = validate(event)
        if problem is not None:
            raise PayloadError(f"{BADPUT_KEY} is not a valid event: {problem}")
        if self._job is not None and event.job != self._job:
            event = msgspec.structs.replace(event, job=self._job)
        return event


class PayloadEncoder:
    """Writes one writer stream's badput events as the payloads ml-goodput-measurement reads.

    The library's own keys come first (its timestamp reader takes the first key with
    ``time`` in its name), then :data:`BADPUT_KEY` with the whole event. Events the
    library has no key for (heartbeats, step ends, compile, attempt ends) carry only the
    job name and the event. A checkpoint save/restore becomes, at its end event, an
    Orbax-style entry (step, start time, duration), as Orbax logs it; so the encoder
    remembers open checkpoint starts.
    """

    def __init__(self) -> None:
        self._open: dict[tuple[str, int | None], float] = {}

    def encode(self, event: Event) -> dict[str, Any]:
        """The payload for ``event``."""
        payload: dict[str, Any] = {JOB_NAME: event.job}
        kind, ts = event.kind, event.ts
        simple = _SIMPLE_BACK.get(kind)
        if simple is not None:
            payload[simple] = ts
        elif kind == Kind.STEP_START:
            payload[STEP_COUNT] = event.step
            payload[STEP_START_TIME] = ts
        elif kind == Kind.DATA_LOADING_START:
            payload[DATA_LOADING_START_TIME] = ts
        elif kind == Kind.DATA_LOADING_END:
            payload[DATA_LOADING_END_TIME] = ts
        elif kind in (Kind.CUSTOM_START, Kind.CUSTOM_END):
            payload[CUSTOM_BADPUT_EVENT_TYPE] = event.name
            start = kind == Kind.CUSTOM_START
            payload[CUSTOM_BADPUT_EVENT_START_TIME if start else CUSTOM_BADPUT_EVENT_END_TIME] = ts
        elif kind in (Kind.ELASTIC_WAIT_START, Kind.ELASTIC_WAIT_END):
            payload[ELASTIC_WAIT_EVENT_TYPE] = event.name
            start = kind == Kind.ELASTIC_WAIT_START
            payload[ELASTIC_WAIT_START_TIME if start else ELASTIC_WAIT_END_TIME] = ts
        elif kind == Kind.ELASTIC_SLICES:
            payload[ACTIVE_SLICES] = event.active
            payload[TOTAL_SLICES] = event.total
            payload[AVAILABLE_SLICES] = event.available
            payload[ELASTIC_SLICE_COUNTS_TIMESTAMP] = ts
        elif kind in (Kind.CHECKPOINT_SAVE_START, Kind.CHECKPOINT_RESTORE_START):
            self._open[(kind[: -len("_start")], event.step)] = ts
        elif kind in (Kind.CHECKPOINT_SAVE_END, Kind.CHECKPOINT_RESTORE_END):
            base = kind[: -len("_end")]
            start_ts = self._open.pop((base, event.step), None)
            if start_ts is not None:
                payload.update(_orbax_entry(base == "checkpoint_save", event.step, start_ts, ts))
        payload[BADPUT_KEY] = msgspec.to_builtins(event)
        return payload


def _orbax_entry(save: bool, step: int | None, start: float, end: float) -> dict[str, Any]:
    duration = max(0.0, end - start)
    if save:
        return {
            ORBAX_STEP: step,
            ORBAX_EVENT_TYPE: ORBAX_SAVE,
            ORBAX_DIRECTORY: "badput://",
            "wait_for_prev_start_time": start,
            "wait_for_prev_duration_secs": 0.0,
            "checkpointer_blocking_start_time": start,
            "checkpointer_blocking_duration_secs": duration,
            "get_old_steps_start_time": start,
            "get_old_steps_duration_secs": 0.0,
            ORBAX_SAVE_START: start,
            ORBAX_SAVE_DURATION: duration,
        }
    return {
        ORBAX_STEP: step,
        ORBAX_EVENT_TYPE: "restore",
        ORBAX_DIRECTORY: "badput://",
        "checkpointer_start_time": start,
        "checkpointer_duration_secs": duration,
        ORBAX_RESTORE_START: start,
        ORBAX_RESTORE_DURATION: duration,
    }
