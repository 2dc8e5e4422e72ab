"""ml-goodput-measurement's Cloud Logging entries, exported with ``gcloud``, into a badput store.

Why: a job that ran with ml-goodput-measurement (or Orbax's checkpoint logger) left its
whole history in Cloud Logging. An export of that log is enough for ``badput report`` to
say where the time went, without credentials or network at report time::

    gcloud logging read 'logName="projects/P/logs/goodput_RUN" AND severity=INFO' \\
        --format=json --freshness=30d > export.json
    badput import cloud-logging export.json --store ./runs
    badput report ./runs --job RUN

An export is a JSON array of LogEntry objects (``jsonPayload``, ``timestamp`` in RFC 3339
with up to nanoseconds, ``insertId``, ``logName``, ``severity``, ...). ``gcloud`` prints
the newest entry first, while the payloads must be decoded in log order (they carry no
attempt id, and whether a data load blocks depends on whether the training loop already
runs), so entries are sorted by (timestamp, insertId), Cloud Logging's own order, to the
nanosecond. The conversion itself is :class:`PayloadDecoder`'s, with no attempt id: the
engine starts an attempt at each job start, as the library does.

- :func:`read_export` parses export files (a file that is not an array of JSON raises
  :class:`ExportError`; a single bad entry is skipped and reported).
- :func:`to_badput_events` converts sorted entries, per job.
- :func:`import_cloud_logging` does both and writes the events into a store.
"""

from __future__ import annotations

import calendar
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from badput.events import Event
from badput.formats.mgm import JOB_NAME, PayloadDecoder, PayloadError

__all__ = [
    "IMPORT_HOST",
    "ExportEntry",
    "ExportError",
    "ExportProblem",
    "ImportSummary",
    "import_cloud_logging",
    "read_export",
    "rfc3339_ns",
    "to_badput_events",
]

#: Host (and attempt directory) of the streams :func:`import_cloud_logging` writes.
IMPORT_HOST: Final = "cloud-logging-import"

# Why an entry was not turned into events (keys of ``ImportSummary.skipped``).
NOT_AN_OBJECT: Final = "not a JSON object"
BAD_TIMESTAMP: Final = "without a valid timestamp"
NO_JSON_PAYLOAD: Final = "without a jsonPayload"
NO_JOB_NAME: Final = "without a job_name"
DUPLICATE: Final = "duplicate (same log, timestamp and insertId)"
OTHER_JOB: Final = "of other jobs"
BAD_PAYLOAD: Final = "with a bad payload value"
NOTHING_USED: Final = "with nothing badput uses"

_RFC3339: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:?\d\d)"
)


def rfc3339_ns(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time (``2026-01-10T00:00:26.123456789Z``;
    an offset may also be written ``+0000``, as the Logging client writes it in filters).

    Exact to the nanosecond, which ``datetime`` is not, so that entries within one
    microsecond still sort in Cloud Logging's order. Raises ``ValueError``.
    """
    m = _RFC3339.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    fraction, zone = m.group(7) or "", m.group(8)
    offset = 0
    if zone not in ("Z", "z"):
        sign = -1 if zone[0] == "-" else 1
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[-2:]) * 60)
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second <= 60):
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) - offset
    return seconds * 1_000_000_000 + int(fraction.ljust(9, "0") or 0)


@dataclass(frozen=True)
class ExportProblem:
    """An entry that was skipped: which file, which entry of its array, and why."""

    file: str
    index: int  # 0-based position in the file's array
    insert_id: str | None
    message: str

    def __str__(self) -> str:
        which = f"entry {self.index}" + (f" (insertId {self.insert_id})" if self.insert_id else "")
        return f"{self.file}: {which}: {self.message}"


class ExportError(ValueError):
    """A file that is not a Cloud Logging export (not JSON, or not an array)."""


@dataclass(frozen=True)
class ExportEntry:
    """One entry of an export with a ``jsonPayload`` naming a job."""

    ns: int  # the entry's timestamp, nanoseconds since the epoch
    insert_id: str
    log_name: str
    payload: Mapping[str, Any]
    file: str
    index: int

    @property
    def job(self) -> str:
        return str(self.payload[JOB_NAME])

    @property
    def ts(self) -> float:
        """The entry's timestamp in seconds (what Orbax entries without a start time use)."""
        return self.ns / 1e9


@dataclass
class ImportSummary:
    """What an import read, wrote and left out."""

    files: int = 0
    entries: int = 0  # entries in the files
    events: dict[str, int] = field(default_factory=dict)  # job -> events written
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> entries
    problems: list[ExportProblem] = field(default_factory=list)


def _load(path: str) -> list[Any]:
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except UnicodeDecodeError as exc:
        raise ExportError(f"{path}: not UTF-8 JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ExportError(
            f"{path}: not JSON ({exc}); expected the output of "
            "`gcloud logging read ... --format=json`"
        ) from None
    if not isinstance(data, list):
        raise ExportError(
            f"{path}: expected a JSON array of log entries (gcloud logging read --format=json), "
            f"got a JSON {type(data).__name__}"
        )
    return data


def read_export(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    summary: ImportSummary | None = None,
) -> list[ExportEntry]:
    """The entries of export files that carry a job's payload, in Cloud Logging's order.

    Sorted by (timestamp, insertId), whatever the order in the files; an entry present in
    several files (overlapping exports) is kept once. Entries without a ``jsonPayload``
    (text entries) or without a ``job_name`` in it are left out and counted in
    ``summary.skipped``; an entry that is not an object or has no valid timestamp is also
    reported in ``summary.problems``. A file that cannot be read, is not JSON or is not an
    array raises ``OSError`` or :class:`ExportError`, naming it.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    summary = summary if summary is not None else ImportSummary()
    seen: set[tuple[str, int, str]] = set()
    out: list[ExportEntry] = []
    for path in paths:
        name = os.fspath(path)
        data = _load(name)
        summary.files += 1
        summary.entries += len(data)
        for index, raw in enumerate(data):
            if not isinstance(raw, dict):
                summary.skipped[NOT_AN_OBJECT] += 1
                summary.problems.append(
                    ExportProblem(name, index, None, f"not a JSON object: {raw!r:.80}")
                )
                continue
            insert_id = raw.get("insertId")
            insert_id = insert_id if isinstance(insert_id, str) else None
            payload = raw.get("jsonPayload")
            if not isinstance(payload, dict):
                summary.skipped[NO_JSON_PAYLOAD] += 1
                continue
            job = payload.get(JOB_NAME)
            if not isinstance(job, str) or not job:
                summary.skipped[NO_JOB_NAME] += 1
                continue
            try:
                ns = rfc3339_ns(raw.get("timestamp"))  # type: ignore[arg-type]
            except ValueError as exc:
                summary.skipped[BAD_TIMESTAMP] += 1
                summary.problems.append(ExportProblem(name, index, insert_id, str(exc)))
                continue
            log_name = raw.get("logName")
            log_name = log_name if isinstance(log_name, str) else ""
            identity = (log_name, ns, insert_id or "")
            if insert_id is not None and identity in seen:
                summary.skipped[DUPLICATE] += 1
                continue
            seen.add(identity)
            out.append(ExportEntry(ns, insert_id or "", log_name, payload, name, index))
    out.sort(key=lambda e: (e.ns, e.insert_id))
    return out


def to_badput_events(
    entries: Iterable[ExportEntry], summary: ImportSummary | None = None
) -> dict[str, list[Event]]:
    """Events per job of entries in log order (one :class:`PayloadDecoder` per job).

    An entry whose payload has a bad value is skipped and reported (file, index and
    insertId); one that gives no event is counted as having nothing badput uses.
    """
    summary = summary if summary is not None else ImportSummary()
    decoders: dict[str, PayloadDecoder] = {}
    out: dict[str, list[Event]] = {}
    for entry in entries:
        job = entry.job
        decoder = decoders.setdefault(job, PayloadDecoder(job))
        try:
            events = decoder.decode(entry.payload, entry.ts)
        except PayloadError as exc:
            summary.skipped[BAD_PAYLOAD] += 1
            summary.problems.append(
                ExportProblem(entry.file, entry.index, entry.insert_id, str(exc))
            )
            continue
        if not events:
            summary.skipped[NOTHING_USED] += 1
            continue
        out.setdefault(job, []).extend(events)
    return out


def import_cloud_logging(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    store: Any = None,
    job: str | None = None,
) -> ImportSummary:
    """Read Cloud Logging exports, convert them and write every job (or ``job``) into ``store``.

    ``store`` is anything :func:`badput.store.open_store` takes (``None``: the default
    store). One stream per job (``cloud-logging-import/cloud-logging-import-x-0.jsonl``).
    Nothing is written when a file is unreadable (``OSError``, :class:`ExportError`), when
    no entry belongs to ``job`` or to any job, or when the store already holds one of the
    jobs (``ValueError``: importing twice would count every event twice).
    """
    from badput.formats.codec import encode_lines  # noqa: PLC0415
    from badput.store import WriterKey, open_store, safe_job_dir  # noqa: PLC0415

    summary = ImportSummary()
    entries = read_export(paths, summary)
    if job is not None:
        others = [e for e in entries if e.job != job]
        if others:
            summary.skipped[OTHER_JOB] += len(others)
            names = sorted({e.job for e in entries})
            entries = [e for e in entries if e.job == job]
            if not entries:
                raise ValueError(f"no entries of job {job!r} (jobs: {', '.join(names)})")
    if not entries:
        raise ValueError(
            "no entries with a jsonPayload naming a job_name "
            f"(skipped: {_reasons(summary.skipped) or 'none'})"
        )
    converted = to_badput_events(entries, summary)
    if not converted:
        raise ValueError(f"no events to import (skipped: {_reasons(summary.skipped)})")
    target = open_store(store)
    held = set(target.jobs())
    for name in sorted(converted):
        if name in held or safe_job_dir(name) in held:
            raise ValueError(
                f"the store {target.uri} already holds job {name!r}; importing again would "
                "count its events twice (use another store, or --job for the other jobs)"
            )
    for name, events in sorted(converted.items()):
        writer = target.open_writer(name, WriterKey(IMPORT_HOST, IMPORT_HOST, None, 0))
        try:
            writer.write(encode_lines(events))
            writer.flush()
        finally:
            writer.close()
        summary.events[name] = len(events)
    return summary


def _reasons(skipped: Counter[str]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
