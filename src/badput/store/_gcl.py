"""Google Cloud Logging as a store: ``gcl://PROJECT/LOG``.

Why: jobs instrumented for ml-goodput-measurement already log to Cloud Logging, and that
library's calculator, its Orbax checkpoint calculator and the dashboards built on them read
that log. This store writes badput's events into the same log, as that library's payloads
(:class:`~badput.formats.mgm.PayloadEncoder`), so those readers
keep working; and it reads the log back, badput's own entries losslessly (each carries the
whole event) and the library's or Orbax's entries converted
(:class:`~badput.formats.mgm.PayloadDecoder`).

- **Writing.** A writer stream decodes the JSON lines it is given, encodes each event with
  the stream's own encoder (it pairs checkpoint starts with their ends, so it survives a
  writer re-opened after an error) and queues a structured entry: severity INFO, entry time
  = event time, an ``insertId`` that sorts in write order (Cloud Logging orders entries of
  equal time by ``insertId``). ``flush()`` commits the queue with the client's batch API.
  A failed commit raises ``OSError`` and forgets its entries, which is what the recorder
  expects: it counts them as dropped and carries on with later events. No call waits
  forever: the client gives up after 60 s (gRPC's retry deadline, the HTTP socket timeout).
- **Reading.** The job's entries are listed in ascending (timestamp, insertId) order with
  the filter ml-goodput-measurement uses (``logName``, ``severity=INFO``,
  ``jsonPayload.job_name``), from the cursor on. Entries reach Cloud Logging late (writers
  batch them; hosts' clocks differ), so a cursor does not stop at the last entry it saw: it
  lists again from :attr:`CloudLoggingStore.late_seconds` before the time of its last read
  and skips the entries it already returned. The payload decoder's state (the attempt, and
  whether the training loop runs, which tells a blocking data load from an overlapped one)
  travels with the cursor, so incremental reads classify loads as one whole read would.
  A payload that cannot be decoded becomes an :class:`EventError` naming its ``insertId``.
- **Light.** ``google-cloud-logging`` (extra ``gcp``) is imported and the client created on
  first use, not by ``open_store``. A missing package or a failing client surfaces as
  ``OSError`` saying what to install or what failed.
"""

from __future__ import annotations

import copy
import secrets
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final
from urllib.parse import quote, unquote

import msgspec

from badput.events import Event, EventError
from badput.formats.codec import decode_lines
from badput.formats.mgm import (
    JOB_NAME,
    PayloadDecoder,
    PayloadEncoder,
    PayloadError,
)
from badput.runtime.optional import MissingExtraError, import_optional
from badput.store._base import Chunk, Cursor, EventWriter, ReadResult, WriterKey

__all__ = ["SCHEME", "CloudLoggingCursor", "CloudLoggingStore", "CloudLoggingWriter"]

SCHEME: Final = "gcl://"
_EXTRA: Final = "gcp"
#: Entries per ``entries.list`` page (the API's maximum).
PAGE_SIZE: Final = 1000
#: Entries per ``entries.write`` request (well under the API's 10 MB request limit).
WRITE_BATCH: Final = 500
#: Default of :attr:`CloudLoggingStore.late_seconds`.
LATE_SECONDS: Final = 30.0
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_RFC3339: Final = "%Y-%m-%dT%H:%M:%S.%fZ"

_EntryKey = tuple[datetime, str]  # (entry timestamp, insertId): an entry's identity


def _rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime(_RFC3339)


def _literal(text: str) -> str:
    """``text`` as a quoted string of the Logging query language."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class CloudLoggingCursor(Cursor):
    """Where a reader of one job of a :class:`CloudLoggingStore` stopped.

    ``offsets`` holds one entry, ``{job: (entries consumed, items returned)}``, so that
    callers comparing offsets see progress as with files. ``floor``: entries before it are
    taken as all read; ``seen``: the entries at or after ``floor`` already returned;
    ``decoder``: the payload decoder's state after the last entry read. A read never
    changes the cursor it is given (it returns a new one), so a read can be repeated.
    """

    job: str = ""
    floor: datetime | None = None
    seen: frozenset[_EntryKey] = frozenset()
    decoder: PayloadDecoder | None = None


@dataclass
class _Stream:
    """What one writer stream keeps across re-opened writers: pairing state, insertIds."""

    encoder: PayloadEncoder = field(default_factory=PayloadEncoder)
    prefix: str = field(default_factory=lambda: secrets.token_hex(6))
    seq: int = 0


class CloudLoggingWriter:
    """One writer stream: queues entries on ``write``, commits them on ``flush``/``close``."""

    def __init__(self, store: CloudLoggingStore, job: str, stream: _Stream, source: str) -> None:
        self._store = store
        self._job = job
        self._stream = stream
        self._source = source
        self._pending: list[tuple[dict[str, Any], datetime, str]] = []
        self._carry = b""  # an incomplete last line, completed by the next write
        self._closed = False

    def write(self, data: bytes) -> None:
        """Queue the events of the complete lines of ``data``.

        Raises ``ValueError`` (queuing nothing of ``data``) when a line is not a valid
        event: unlike a file, a log entry cannot hold a line that is not an event.
        """
        if self._closed:
            raise OSError(f"write to a closed stream of {self._store.uri}")
        data = self._carry + data
        cut = data.rfind(b"\n") + 1
        self._carry = data[cut:]
        lines = [line for line in data[:cut].split(b"\n") if line.strip()]
        items = decode_lines(lines, self._source)
        bad = [item for item in items if isinstance(item, EventError)]
        if bad:
            raise ValueError(f"{self._source}: not an event: {bad[0].message}")
        stream = self._stream
        for event in items:
            assert isinstance(event, Event)
            payload = stream.encoder.encode(event)
            when = datetime.fromtimestamp(event.ts, tz=timezone.utc)
            self._pending.append((payload, when, f"{stream.prefix}-{stream.seq:012d}"))
            stream.seq += 1

    def flush(self) -> None:
        """Commit the queued entries. ``OSError`` on failure; the entries are then dropped."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            logger, resource = self._store._logger_and_resource()
            for start in range(0, len(pending), WRITE_BATCH):
                batch = logger.batch()
                for payload, when, insert_id in pending[start : start + WRITE_BATCH]:
                    batch.log_struct(
                        payload,
                        severity="INFO",
                        timestamp=when,
                        insert_id=insert_id,
                        resource=resource,
                    )
                batch.commit()
        except OSError:
            raise
        except Exception as exc:
            raise OSError(
                f"{self._store.uri}: cannot write {len(pending)} entries of job "
                f"{self._job!r}: {type(exc).__name__}: {exc}"
            ) from exc

    def close(self) -> None:
        """Commit what is queued (``OSError`` on failure), then refuse further writes."""
        if self._closed:
            return
        self._closed = True
        self.flush()


class CloudLoggingStore:
    """Events kept in the Cloud Logging log ``LOG`` of ``PROJECT`` (``gcl://PROJECT/LOG``).

    Args:
        project: the Google Cloud project.
        log_name: the log (ml-goodput-measurement's ``logger_name``, e.g. ``goodput_<run>``).
        client: a ``google.cloud.logging.Client`` (tests, custom credentials or endpoint);
            default: ``Client(project=project)``, created on first use.
        late_seconds: how late an entry may become visible after its timestamp and still
            be read by an incremental read (each read lists this much again).

    Entries are written with the ``global`` monitored resource of ``project``: detecting
    the real one would query the metadata server from the recorder's writer thread.
    """

    def __init__(
        self,
        project: str,
        log_name: str,
        *,
        client: Any = None,
        late_seconds: float = LATE_SECONDS,
    ) -> None:
        if not project or "/" in project:
            raise ValueError(f"a Google Cloud project id is needed, got {project!r}")
        if not log_name:
            raise ValueError("a Cloud Logging log name is needed")
        if not late_seconds >= 0:
            raise ValueError(f"late_seconds must be >= 0, got {late_seconds!r}")
        self.project = project
        self.log_name = log_name
        self.late_seconds = float(late_seconds)
        self._client = client
        self._logger: Any = None
        self._resource: Any = None
        self._lock = threading.Lock()
        self._streams: dict[tuple[str, WriterKey], _Stream] = {}

    @classmethod
    def from_uri(cls, uri: str) -> CloudLoggingStore:
        """The store of ``gcl://PROJECT/LOG`` (``LOG`` percent-decoded; it may hold ``/``)."""
        scheme, sep, rest = uri.partition("://")
        project, _, log = rest.partition("/")
        log = unquote(log.strip("/"))
        if not sep or scheme.lower() != SCHEME[:-3] or not project or not log:
            raise ValueError(f"expected gcl://PROJECT/LOG, got {uri!r}")
        return cls(project, log)

    def __repr__(self) -> str:
        return f"CloudLoggingStore({self.project!r}, {self.log_name!r})"

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.project}/{quote(self.log_name, safe='/')}"

    @property
    def full_log_name(self) -> str:
        """``projects/PROJECT/logs/LOG``, as the client and the library name the log."""
        return f"projects/{self.project}/logs/{self.log_name}"

    # ------------------------------------------------------------------ the client

    def _module(self) -> Any:
        try:
            return import_optional("google.cloud.logging", _EXTRA)
        except MissingExtraError as exc:
            raise OSError(f"{self.uri}: {exc}") from exc

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                module = self._module()
                try:
                    self._client = module.Client(project=self.project)
                except Exception as exc:  # credentials, project: google.auth's errors
                    raise OSError(
                        f"{self.uri}: cannot create a Cloud Logging client: {exc}"
                    ) from exc
            return self._client

    def _logger_and_resource(self) -> tuple[Any, Any]:
        client = self._get_client()
        with self._lock:
            if self._logger is None:
                module = self._module()
                self._resource = module.Resource(type="global", labels={"project_id": self.project})
                self._logger = client.logger(self.log_name, resource=self._resource)
            return self._logger, self._resource

    def _entries(self, filter_: str, limit: int | None = None) -> Iterator[Any]:
        """The entries ``filter_`` selects, oldest first; API failures as ``OSError``."""
        client = self._get_client()
        ascending = self._module().ASCENDING
        try:
            iterator = iter(
                client.list_entries(
                    resource_names=[f"projects/{self.project}"],
                    filter_=filter_,
                    order_by=ascending,
                    page_size=min(limit or PAGE_SIZE, PAGE_SIZE),
                    max_results=limit,
                )
            )
        except Exception as exc:
            raise OSError(f"{self.uri}: cannot list entries: {exc}") from exc
        while True:
            try:
                entry = next(iterator)
            except StopIteration:
                return
            except Exception as exc:
                raise OSError(f"{self.uri}: cannot list entries: {exc}") from exc
            yield entry

    def _filter(self, job: str | None, floor: datetime | None) -> str:
        """The library's filter (goodput.py ``_get_filter_msg``), from ``floor`` on.

        An explicit time bound also keeps the client from adding its default of the last
        24 hours.
        """
        parts = [
            f"logName={_literal(self.full_log_name)}",
            "severity=INFO",
            f"jsonPayload.{JOB_NAME}={_literal(job)}"
            if job is not None
            else f"jsonPayload.{JOB_NAME}:*",
            f"timestamp>={_literal(_rfc3339(floor or _EPOCH))}",
        ]
        return " AND ".join(parts)

    # ------------------------------------------------------------- the protocol

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        """A writer for ``key``'s stream; the client is created here (``OSError`` if not)."""
        self._logger_and_resource()
        with self._lock:
            stream = self._streams.setdefault((job, key), _Stream())
        return CloudLoggingWriter(self, job, stream, f"{self.uri}/{job}/{key.stream_name()}")

    def has_job(self, job: str) -> bool:
        """Whether the log holds an entry of ``job`` (one small request, unlike :meth:`jobs`)."""
        return any(True for _ in self._entries(self._filter(job, None), limit=1))

    def jobs(self) -> list[str]:
        """The ``job_name`` of every entry of the log, sorted (lists the whole log)."""
        names: set[str] = set()
        for entry in self._entries(self._filter(None, None)):
            payload = entry.payload
            if isinstance(payload, Mapping):
                name = payload.get(JOB_NAME)
                if isinstance(name, str) and name:
                    names.add(name)
        return sorted(names)

    def read(
        self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        """The job's entries not yet returned through ``cursor``, as one chunk.

        ``max_bytes`` bounds the JSON size of the payloads consumed (at least one entry
        is when any is new). Item ``i`` of the chunk is item ``first_line + i`` of the job
        as this cursor's reads number them.
        """
        state = self._resume(job, cursor)
        decoder = state.decoder if state.decoder is not None else PayloadDecoder(job)
        consumed, numbered = state.offsets.get(job, (0, 0))
        source = f"{self.uri}/{job}"
        started = datetime.now(timezone.utc)
        items: list[Event | EventError] = []
        new_keys: list[_EntryKey] = []
        used = 0
        stopped_early = False
        for entry in self._entries(self._filter(job, state.floor)):
            key: _EntryKey = (entry.timestamp or started, entry.insert_id or "")
            if key in state.seen:
                continue
            new_keys.append(key)
            payload = entry.payload
            try:
                if not isinstance(payload, Mapping):
                    raise PayloadError(f"not a JSON payload: {payload!r:.200}")
                items.extend(decoder.decode(payload, key[0].timestamp()))
            except (PayloadError, ValueError, TypeError) as exc:
                items.append(
                    EventError(
                        f"Cloud Logging entry insertId={key[1]!r} at {_rfc3339(key[0])}: {exc}",
                        source,
                        numbered + len(items) + 1,
                    )
                )
            if max_bytes is not None:
                used += _size(payload)
                if used >= max_bytes:
                    stopped_early = True
                    break
        settled = started - timedelta(seconds=self.late_seconds)
        floor = min(new_keys[-1][0], settled) if stopped_early else settled
        if state.floor is not None:
            floor = max(floor, state.floor)
        seen = frozenset(k for k in (*state.seen, *new_keys) if k[0] >= floor)
        offsets = dict(state.offsets)
        if new_keys:
            offsets[job] = (consumed + len(new_keys), numbered + len(items))
        out = CloudLoggingCursor(offsets, job=job, floor=floor, seen=seen, decoder=decoder)
        chunks = [Chunk(source, numbered + 1, items)] if items else []
        return ReadResult(chunks, out)

    def _resume(self, job: str, cursor: Cursor | None) -> CloudLoggingCursor:
        """A private copy of ``cursor``'s state (a fresh one for ``None`` or an empty cursor)."""
        if cursor is None or (type(cursor) is Cursor and not cursor.offsets):
            return CloudLoggingCursor(job=job)
        if not isinstance(cursor, CloudLoggingCursor) or cursor.job != job:
            what = type(cursor).__name__
            raise ValueError(f"{self.uri}: this {what} is not a cursor of job {job!r} here")
        return CloudLoggingCursor(
            dict(cursor.offsets),
            job=job,
            floor=cursor.floor,
            seen=cursor.seen,
            decoder=copy.copy(cursor.decoder),
        )


def _size(payload: Any) -> int:
    try:
        return len(msgspec.json.encode(payload))
    except (TypeError, ValueError):
        return len(repr(payload))
