"""The :class:`Recorder`: what training code calls to record its moments.

Recording is nearly free, never hurts training, and loses nothing it acknowledged:

- **Durable when the call returns.** On a directory store (the default) each
  process copies its lines into a pre-allocated, memory-mapped spool segment
  (:class:`~badput.store.SpooledWriter`). A ``record_*`` call reads the clock,
  formats one JSON line and copies it into the mapping: no lock, no syscall, no
  I/O wait. Once the call has returned, the line is in the kernel's page cache,
  so it survives ``SIGKILL``, ``SIGTERM`` or a crash of the process (not a crash
  of the machine). Measured cost: ``bench/bench_record.py``.
- **Background thread.** Started on the first record: every 50 ms (at once after
  lifecycle and checkpoint events) it ships the spool to the process's event file
  with ``write()`` and deletes the segments shipped (the mapped, resident part
  stays a few MiB however long the job); it writes heartbeats every
  ``heartbeat_interval`` seconds and makes the next pages and segment ready ahead
  of the writer. If the event file was deleted or replaced, it warns once and
  writes every event of this process to a new file; if it was cut short from
  outside (``> file``, logrotate's ``copytruncate``), it counts the events cut
  away (:attr:`Recorder.lost_events`), warns once and goes on: the training
  process never maps the file others can touch, so no ``SIGBUS``. What a killed
  process left in its spool is shipped by the next recorder of the job,
  ``badput run`` and readers of the job.
- **Other stores** (``memory://``, ``gcl://``, custom ones), and a directory store
  that cannot be written (read-only, full, missing): lines wait in a bounded
  buffer (:data:`MAX_BUFFERED_BYTES`) that the thread writes every
  ``flush_interval`` (at once after lifecycle and checkpoint events). A store
  that hangs cannot block the training thread: the buffer fills, and what does
  not fit is dropped and counted.
- **Never raises after construction.** Every event ends up written, or counted
  in :attr:`Recorder.dropped_events` with ONE warning per kind of problem on the
  ``badput`` logger (invalid values, unwritable store, overflow, hung store,
  closed recorder).
- **Exit and fork.** Recorders are closed at interpreter exit (bounded by
  ``CLOSE_TIMEOUT``: a hung store never keeps the process alive); a clean close
  truncates the file to what was written. In a forked child, a recorder forgets
  its parent's file, buffer and thread and records to its own stream.

Identity of every event, detected without configuration (``badput._env``):
rank from ``RANK`` (torchrun), ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``,
``SLURM_PROCID`` or an initialised ``torch.distributed``; attempt from the
``attempt`` argument, else the launchers' restart counters composed
(``BADPUT_ATTEMPT`` or ``SLURM_RESTART_COUNT`` outside, torchrun's
``TORCHELASTIC_RESTART_COUNT`` inside: worker-group restart 2 of launcher attempt 1
is attempt ``"1.2"``), else a fresh id per process start,
``<UTC start time YYYYmmddTHHMMSS>-<pid>`` (sorts by start time). Numeric ids
are written as JSON integers.

Process start: in a process started by a launcher (``badput run``, torchrun,
Slurm, MPI), the first record also records ``process_init`` from the OS's start
time of the process to the recorder's construction (interpreter start, imports),
and the process's first ``record_job_start()`` is dated at the process start.
Under ``badput run`` the launcher owns the job's end: ``record_job_end()`` only
flushes (the launcher records ``job_end`` with the exit status).

Disabled recording: ``enabled=False``, ``BADPUT_DISABLE=1`` (wins over
everything), or ``leader_only=True`` on a rank other than 0 make
``Recorder(...)`` return a :class:`NullRecorder`: same interface, every method a
no-op, no thread, no file.
"""

from __future__ import annotations

import logging
import math
import operator
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from types import TracebackType
from typing import Any, Final

import msgspec

from badput import _lifecycle
from badput._codec import encode_line
from badput._env import (
    BADPUT_DISABLE,
    BADPUT_HEARTBEAT_INTERVAL,
    BADPUT_JOB,
    BADPUT_PROCESS_INIT,
    OMPI_COMM_WORLD_RANK,
    SLURM_JOB_ID,
    TORCHELASTIC_RESTART_COUNT,
    detect_attempt,
    detect_host,
    detect_rank,
    launcher_attempt_start,
    process_start_time,
    under_launcher,
)
from badput._sections import DEFAULT_SECTION_INTERVAL, SectionTimers
from badput._worker import PeriodicWorker
from badput.events import (
    LIFECYCLE_KINDS,
    MAX_INT,
    MAX_TS,
    MIN_TS,
    Event,
    Kind,
    validate,
)
from badput.store import EventStore, EventWriter, SpooledWriter, WriterKey, open_store

__all__ = ["DEFAULT_HEARTBEAT_INTERVAL", "SPANS", "NullRecorder", "Recorder"]

logger = logging.getLogger("badput")

#: Seconds between heartbeats when neither the argument nor the env var sets it.
DEFAULT_HEARTBEAT_INTERVAL: Final = 10.0
#: Shortest accepted ``flush_interval`` (the background thread sleeps at least this).
MIN_FLUSH_INTERVAL: Final = 0.005
#: How long ``close()`` waits for the background thread (at exit: never hang the job).
CLOSE_TIMEOUT: Final = 5.0
#: Most bytes of lines held in memory while the store does not take them.
MAX_BUFFERED_BYTES: Final = 16 * 1024 * 1024
#: Bytes of lines in one spool segment (a mapped file; a line longer than this gets one of
#: its own). The resident memory of recording is a few of them, however long the job.
SEGMENT_BYTES: Final = 4 * 1024 * 1024
#: Most spool segments not yet shipped to the event file before lines wait in memory.
MAX_SEGMENTS: Final = 16
#: Bytes of a mapped file made writable ahead of the writer (besides its recent rate).
POPULATE_AHEAD: Final = 1024 * 1024
#: Seconds between shipments of the spool to the event file (and checks that it is in place).
MAINTAIN_INTERVAL: Final = 0.05
#: Bytes populated per madvise call (the GIL is released meanwhile).
POPULATE_STEP: Final = 1024 * 1024
#: Seconds between attempts to reopen a directory store that failed.
REOPEN_INTERVAL: Final = 1.0
#: The lifecycle registry group of live recorders.
LIVE_GROUP: Final = "recorders"

#: Every context manager of a recorder: method name -> (start method, end method).
#: Both :class:`Recorder` and :class:`NullRecorder` build their spans from it.
SPANS: Final[dict[str, tuple[str, str]]] = {
    "step": ("record_step_start", "record_step_end"),
    "checkpoint_save": ("record_checkpoint_save_start", "record_checkpoint_save_end"),
    "checkpoint_restore": ("record_checkpoint_restore_start", "record_checkpoint_restore_end"),
    "data_loading": ("record_data_loading_start", "record_data_loading_end"),
    "custom": ("record_custom_start", "record_custom_end"),
    "accelerator_init": ("record_accelerator_init_start", "record_accelerator_init_end"),
    "training_prep": ("record_training_prep_start", "record_training_prep_end"),
    "compile": ("record_compile_start", "record_compile_end"),
    "elastic_wait": ("record_elastic_wait_start", "record_elastic_wait_end"),
    "elastic_reinit": ("record_elastic_reinit_start", "record_elastic_reinit_end"),
}

# Kinds that wake the background thread at once (matters for buffered stores).
_PROMPT_KINDS: Final[frozenset[str]] = LIFECYCLE_KINDS | frozenset(
    {
        Kind.CHECKPOINT_RESTORE_START,
        Kind.CHECKPOINT_RESTORE_END,
        Kind.CHECKPOINT_SAVE_START,
        Kind.CHECKPOINT_SAVE_END,
        Kind.CHECKPOINT_COMMITTED,
    }
)
# Fields the recorder owns (identity); ``record(kind, **fields)`` cannot set them.
_IDENTITY_FIELDS: Final = frozenset({"ts", "kind", "job", "attempt", "host", "rank", "pid", "v"})
_INT_FIELDS: Final = frozenset({"step", "exit_code", "active", "total", "available", "count"})
_FLOAT_FIELDS: Final = frozenset({"seconds", "last", "open_since"})
_STR_FIELDS: Final = frozenset({"name", "status"})
_BOOL_FIELDS: Final = frozenset({"blocking"})

_TRUE: Final = frozenset({"1", "true", "yes", "on"})

# Stream states.
_NEW: Final = 0  # nothing recorded yet in this process
_MAPPED: Final = 1  # lines are copied into a mapped file
_BUFFERED: Final = 2  # lines wait in memory for the background thread
_CLOSED: Final = 3

_time = time.time
_time_ns = time.time_ns
_isfinite = math.isfinite
_replace = msgspec.structs.replace
_json = msgspec.json.encode


def _as_int(value: Any) -> int:
    if type(value) is int:
        return value
    try:
        return operator.index(value)  # numpy / torch integers
    except TypeError:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise


def _ts_text(ts: Any) -> str:
    """An explicit ``ts`` as JSON text (a plausible time, else ``ValueError``)."""
    value = float(ts)
    if not MIN_TS <= value <= MAX_TS:  # also false for NaN
        raise ValueError(f"ts must be a time between {MIN_TS} and {MAX_TS}, got {value!r}")
    return repr(value)


def _as_step(value: Any) -> int:
    """``value`` as an event integer (within +-MAX_INT, which every reader holds)."""
    step = _as_int(value)
    if not -MAX_INT <= step <= MAX_INT:
        raise ValueError(f"{step} is outside +-(2**53 - 1)")
    return step


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _env_rank() -> int | None:
    return detect_rank()


def _resolve_attempt(attempt: str | int | None) -> str | int:
    if attempt is not None:
        return attempt
    detected = detect_attempt()
    return fresh_attempt_id() if detected is None else detected


#: A process older than this when its recorder is built did other things first (a
#: notebook, a server): its age is not recorded as ``process_init``.
MAX_PROCESS_INIT: Final = 600.0
# Variables whose presence says a launcher started this process for a job.
_LAUNCHER_VARIABLES: Final = (TORCHELASTIC_RESTART_COUNT, SLURM_JOB_ID, OMPI_COMM_WORLD_RANK)
# Jobs whose process_init this process has recorded (once per process and job).
_process_init_jobs: set[str] = set()


def _launched() -> bool:
    """True when a launcher started this process for a job (its start is the job's),
    or ``BADPUT_PROCESS_INIT`` says to treat it so (``1``) or not (``0``)."""
    forced = os.environ.get(BADPUT_PROCESS_INIT, "").strip().lower()
    if forced:
        return forced in _TRUE
    return under_launcher() or any(os.environ.get(v) for v in _LAUNCHER_VARIABLES)


def fresh_attempt_id() -> str:
    """``<UTC start time>-<pid>``: a new attempt id for this process (sorts by time)."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}"


def _resolve_heartbeat(value: float | None) -> float:
    if value is not None:
        return max(float(value), 0.0)
    raw = os.environ.get(BADPUT_HEARTBEAT_INTERVAL, "").strip()
    if raw:
        try:
            return max(float(raw), 0.0)
        except ValueError:
            logger.warning("badput: ignoring %s=%r (not a number)", BADPUT_HEARTBEAT_INTERVAL, raw)
    return DEFAULT_HEARTBEAT_INTERVAL


def _is_disabled(enabled: bool | None, leader_only: bool, rank: int | None) -> bool:
    if _env_flag(BADPUT_DISABLE) or enabled is False:
        return True
    if leader_only:
        rank = rank if rank is not None else _env_rank()
        return rank not in (None, 0)
    return False


class _Span:
    """``with rec.<span>(...):`` records the start, then the end even on error."""

    __slots__ = ("_args", "_end", "_start")

    def __init__(
        self, start: Callable[..., None], end: Callable[..., None], args: tuple[Any, ...]
    ) -> None:
        self._start = start
        self._end = end
        self._args = args

    def __enter__(self) -> None:
        self._start(*self._args)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end(*self._args)


class _NullSpan:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL_SPAN: Final = _NullSpan()


class Recorder:
    """Records a training job's events into an :class:`~badput.store.EventStore`.

    Args:
        job: the job (run) name; default ``$BADPUT_JOB``. ``ValueError`` if neither.
        store: an ``EventStore``, a URI or a directory; default ``open_store()``
            (``$BADPUT_STORE`` or ``./badput-runs``).
        rank: process rank; default ``$RANK`` (torchrun), else none.
        attempt: attempt id; default from the environment (see the module doc).
        host: host name; default ``socket.gethostname()``.
        enabled: ``False`` returns a :class:`NullRecorder`. ``BADPUT_DISABLE=1``
            disables every recorder regardless.
        leader_only: record only on rank 0 (or when no rank is known); other
            ranks get a :class:`NullRecorder`.
        heartbeat_interval: seconds between heartbeats; default
            ``$BADPUT_HEARTBEAT_INTERVAL`` or 10; ``0`` turns them off.
        flush_interval: seconds between background writes of a buffered store
            and checks of a directory store's file (at least 5 ms).
        section_interval: seconds between the ``section_summary`` events of
            :meth:`section` timers (default 5).

    Construction validates arguments and may raise; nothing after it does.
    """

    def __new__(
        cls,
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
    ) -> Recorder:
        if cls is Recorder and _is_disabled(enabled, leader_only, rank):
            return object.__new__(NullRecorder)
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
        job = job if job is not None else os.environ.get(BADPUT_JOB)
        if not job:
            raise ValueError(f"Recorder needs a job name: pass job=... or set ${BADPUT_JOB}")
        if not isinstance(job, str):
            raise TypeError(f"job must be a string, got {type(job).__name__}")
        self._job = job
        self._store: EventStore = open_store(store)
        self._rank = rank if rank is not None else _env_rank()
        if self._rank is not None:
            self._rank = int(self._rank)
        self._attempt = _resolve_attempt(attempt)
        if not isinstance(self._attempt, (str, int)):
            try:
                self._attempt = operator.index(self._attempt)  # numpy integers
            except TypeError:
                self._attempt = str(self._attempt)
        self._host = host if host is not None else detect_host()
        self._heartbeat = _resolve_heartbeat(heartbeat_interval)
        self._flush_interval = max(float(flush_interval), MIN_FLUSH_INTERVAL)
        self._section_interval = max(float(section_interval), MIN_FLUSH_INTERVAL)
        self._warned: set[str] = set()
        self._closed = False
        # The launcher owns the job's end in the command it runs (its own recorder unsets this).
        self._defer_job_end = under_launcher()
        self._process_init = self._process_init_span()
        # The process start dates this process's first job_start (then cleared).
        init = self._process_init
        self._process_start: float | None = None if init is None else init[0]
        self._setup_process()
        problem = validate(_replace(self._template, ts=_time(), kind="job_start"))
        if problem is not None:  # e.g. a rank out of range: every line would be unreadable
            raise ValueError(f"cannot record with this identity: {problem}")
        _lifecycle.track(LIVE_GROUP, self)

    def _process_init_span(self) -> tuple[float, float] | None:
        """(OS start of this process, now) when that span is this job's to record."""
        if self._job in _process_init_jobs or not _launched():
            return None
        now = _time()
        start = process_start_time()
        if start is None or not 0.0 <= now - start <= MAX_PROCESS_INIT:
            return None
        # The OS's start is known to a clock tick; never before the launcher's attempt began.
        start = max(start, launcher_attempt_start() or start)
        _process_init_jobs.add(self._job)
        return start, now

    def _with_process_init(self, line: bytes) -> list[bytes]:
        """The first line of this process, with the process_init lines (once): a job_start
        dated at the process start comes first, anything else after them."""
        init, self._process_init = self._process_init, None
        if init is None:
            return [line]
        pair = [
            f'{self._pfx}{_ts_text(ts)},"kind":"{kind}"}}\n'.encode()
            for ts, kind in ((init[0], "process_init_start"), (init[1], "process_init_end"))
        ]
        return [line, *pair] if b'"kind":"job_start"' in line else [*pair, line]

    # ------------------------------------------------------------------ state

    def _setup_process(self) -> None:
        """(Re)initialise everything that belongs to one process (also after fork)."""
        self._pid = os.getpid()
        self._key = WriterKey(str(self._attempt), self._host, self._rank, self._pid)
        self._template = Event(
            ts=0.0,
            kind="",
            job=self._job,
            attempt=self._attempt,
            host=self._host,
            rank=self._rank,
            pid=self._pid,
        )
        # The constant head of every line: identity first, then the timestamp.
        ident = b'{"job":' + _json(self._job) + b',"attempt":' + _json(self._attempt)
        ident += b',"host":' + _json(self._host)
        if self._rank is not None:
            ident += b',"rank":%d' % self._rank
        self._pfx = (ident + b',"pid":%d,"ts":' % self._pid).decode()
        self._dropped = 0
        self._lock = threading.Lock()  # guards the stream state below
        self._state = _CLOSED if self._closed else _NEW
        # Spooled stream (state _MAPPED): ``_write`` is its current segment's ``mmap.write``,
        # else _put_locked.
        self._seg: SpooledWriter | None = None
        self._write: Callable[[bytes], object] = self._put_locked
        self._n_mapped = 0  # lines of spooled streams already closed
        self._cut = 0  # events cut away from the event file from outside (truncation)
        self._shipped = threading.Condition(threading.Lock())  # a shipment happened
        self._orphans_looked = False
        self._ship_failed = False  # the last shipment failed (a flush stops waiting)
        # Buffered lines (state _BUFFERED), and their progress for flush().
        self._buf: list[bytes] = []
        self._buf_bytes = 0
        self._n_queued = 0  # lines ever buffered
        self._n_handled = 0  # of those: written or dropped
        self._n_written = 0
        self._inflight = 0  # lines being written by the thread right now
        self._handled = threading.Condition(threading.Lock())
        self._writer: EventWriter | None = None
        self._next_reopen = 0.0
        self._last_pos = 0
        self._flush_wanted = False
        self._abandoned = False  # close() gave up waiting for the thread
        self._prompt_wanted = False
        self._stop = False
        self._worker: PeriodicWorker | None = None
        self._thread: threading.Thread | None = None
        self._next_beat: float | None = None
        self._next_drain = 0.0
        self._sections = SectionTimers(self._section_interval)
        self._next_summary = _time() + self._section_interval

    def _after_fork_child(self) -> None:
        self._process_init = self._process_start = None  # the parent's start, not the child's
        # The parent's mapping is shared with the parent: never write to it, only let go.
        seg = self._seg
        if seg is not None:
            seg.forget()
        self._setup_process()

    def _warn_once(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(msg, *args)

    def _invalid(self, kind: object, exc: BaseException) -> None:
        self._dropped += 1
        self._warn_once(
            "invalid",
            "badput: dropping invalid %r event: %s: %s",
            kind,
            type(exc).__name__,
            exc,
        )

    # ------------------------------------------------------------- properties

    @property
    def enabled(self) -> bool:
        return True

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
        return self._store

    @property
    def heartbeat_interval(self) -> float:
        return self._heartbeat

    @property
    def dropped_events(self) -> int:
        """Events lost and counted (invalid values, unwritable or hung store, overflow,
        closed recorder)."""
        return self._dropped

    @property
    def lost_events(self) -> int:
        """Events that were written to the event file and later cut away from it by
        someone else (a truncation from outside, e.g. logrotate's ``copytruncate``)."""
        return self._cut

    @property
    def recorded_events(self) -> int:
        """Events handed to the store by this process (copied into its spool,
        or written by a buffered store's writer)."""
        seg = self._seg
        mapped = 0
        if seg is not None:
            with suppress(Exception), self._lock:
                mapped = seg.count_lines()
        return self._n_mapped + mapped + self._n_written

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(job={self._job!r}, attempt={self._attempt!r}, "
            f"rank={self._rank!r}, store={self._store!r})"
        )

    # ---------------------------------------------------------- the hot path
    #
    # ``self._write`` is the mapped file's ``mmap.write`` while the stream is mapped:
    # one C call that copies the line and advances the position without releasing
    # the GIL, so concurrent threads never interleave and no lock is taken. When
    # the file is full, closed or not open, it raises (or is another function) and
    # the line takes ``_put_locked``, which grows, opens, buffers or drops it.

    def _put_locked(self, line: bytes) -> None:
        try:
            with self._lock:
                self._put_slow(line)
        except Exception as exc:  # pragma: no cover - defensive
            self._dropped += 1
            self._warn_once("bug", "badput: unexpected error while recording: %r", exc)

    def _bare(self, tail: str, ts: float | None) -> None:
        """An event with no field beyond identity; ``tail`` is ``,"kind":"<kind>"}\\n``."""
        if ts is None:
            line = f"{self._pfx}{_time_ns()}e-9{tail}".encode()
        else:
            try:
                line = f"{self._pfx}{_ts_text(ts)}{tail}".encode()
            except Exception as exc:
                self._invalid(tail.split('"')[3], exc)
                return
        try:
            self._write(line)
        except Exception:
            self._put_locked(line)

    def _stepped(self, kind: str, step: Any, ts: float | None) -> None:
        try:
            if type(step) is not int or not -MAX_INT <= step <= MAX_INT:
                step = _as_step(step)
            stamp = f"{_time_ns()}e-9" if ts is None else _ts_text(ts)
            line = f'{self._pfx}{stamp},"kind":"{kind}","step":{step}}}\n'.encode()
        except Exception as exc:
            self._invalid(kind, exc)
            return
        try:
            self._write(line)
        except Exception:
            self._put_locked(line)

    def _fields(self, kind: Any, fields: dict[str, Any] | None, ts: Any) -> None:
        """The general path: build, validate and encode an :class:`Event`."""
        try:
            if type(kind) is not str:
                if not isinstance(kind, str):
                    raise TypeError(f"kind must be a string, got {type(kind).__name__}")
                kind = str(kind)
            stamp = _time() if ts is None else float(ts)
            if fields:
                event = _replace(self._template, ts=stamp, kind=kind, **self._clean(fields))
            else:
                event = _replace(self._template, ts=stamp, kind=kind)
            problem = validate(event)
            if problem is not None:
                raise ValueError(problem)
            line = encode_line(event)
        except Exception as exc:
            self._invalid(kind, exc)
            return
        try:
            self._write(line)
        except Exception:
            self._put_locked(line)
        if kind in _PROMPT_KINDS:
            self._prompt()

    def _clean(self, fields: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in fields.items():
            if value is None:
                continue
            if key in _INT_FIELDS:
                out[key] = _as_int(value)
            elif key in _STR_FIELDS:
                out[key] = value if type(value) is str else str(value)
            elif key in _BOOL_FIELDS:
                out[key] = bool(value)
            elif key in _FLOAT_FIELDS:
                out[key] = float(value)
            elif key == "quantiles":
                out[key] = {str(k): float(v) for k, v in dict(value).items()}
            else:
                what = "identity" if key in _IDENTITY_FIELDS else "unknown"
                self._warn_once(
                    f"field:{key}", "badput: ignoring %s field %r in recorded events", what, key
                )
        return out

    def _prompt(self) -> None:
        """A lifecycle or checkpoint event: written to the store at once (readers and the
        launcher see it without waiting for the next shipment)."""
        if self._state != _MAPPED:
            self._prompt_wanted = True
        self._nudge()

    def _nudge(self) -> None:
        worker = self._worker
        if worker is not None:
            worker.wake()

    # ------------------------------------------------------------- recording

    def record(self, kind: str, *, ts: float | None = None, **fields: Any) -> None:
        """Record an event of any ``kind`` with the given schema fields.

        Identity fields (``job``, ``attempt``, ``host``, ``rank``, ``pid``) are
        the recorder's; unknown fields are ignored (one warning).
        """
        self._fields(kind, fields, ts)

    def record_job_scheduled(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"job_scheduled"}\n', ts)
        self._prompt()

    def record_job_start(self, *, ts: float | None = None) -> None:
        if ts is None and self._process_start is not None:
            # The attempt began when the process did (its process_init is inside it).
            ts, self._process_start = self._process_start, None
        self._bare(',"kind":"job_start"}\n', ts)
        self._prompt()

    def record_job_end(self, status: str | None = None, *, ts: float | None = None) -> None:
        """Record the job's end; under ``badput run`` only flush (the launcher records it,
        with the status of the command's exit, once every process has ended)."""
        if self._defer_job_end:
            self._prompt()
            return
        self._fields("job_end", {"status": status}, ts)

    def record_attempt_end(
        self, status: str | None = None, exit_code: int | None = None, *, ts: float | None = None
    ) -> None:
        self._fields("attempt_end", {"status": status, "exit_code": exit_code}, ts)

    def record_heartbeat(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"heartbeat"}\n', ts)

    # The two hottest calls, written out: one C call to format, one to copy.
    def record_step_start(self, step: int, *, ts: float | None = None) -> None:
        if ts is None and type(step) is int and -MAX_INT <= step <= MAX_INT:
            line = f'{self._pfx}{_time_ns()}e-9,"kind":"step_start","step":{step}}}\n'.encode()
            try:
                self._write(line)
            except Exception:
                self._put_locked(line)
        else:
            self._stepped("step_start", step, ts)

    def record_step_end(self, step: int, *, ts: float | None = None) -> None:
        if ts is None and type(step) is int and -MAX_INT <= step <= MAX_INT:
            line = f'{self._pfx}{_time_ns()}e-9,"kind":"step_end","step":{step}}}\n'.encode()
            try:
                self._write(line)
            except Exception:
                self._put_locked(line)
        else:
            self._stepped("step_end", step, ts)

    def record_accelerator_init_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"accelerator_init_start"}\n', ts)

    def record_accelerator_init_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"accelerator_init_end"}\n', ts)

    def record_training_prep_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"training_prep_start"}\n', ts)

    def record_training_prep_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"training_prep_end"}\n', ts)

    def record_checkpoint_restore_start(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_restore_start", step, ts)
        self._prompt()

    def record_checkpoint_restore_end(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_restore_end", step, ts)
        self._prompt()

    def record_checkpoint_save_start(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_save_start", step, ts)
        self._prompt()

    def record_checkpoint_save_end(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_save_end", step, ts)
        self._prompt()

    def record_checkpoint_committed(self, step: int, *, ts: float | None = None) -> None:
        self._stepped("checkpoint_committed", step, ts)
        self._prompt()

    def record_data_loading_start(self, blocking: bool = True, *, ts: float | None = None) -> None:
        self._data_loading(',"kind":"data_loading_start"', blocking, ts)

    def record_data_loading_end(self, blocking: bool = True, *, ts: float | None = None) -> None:
        self._data_loading(',"kind":"data_loading_end"', blocking, ts)

    def _data_loading(self, head: str, blocking: Any, ts: float | None) -> None:
        try:
            tail = head + ("}\n" if bool(blocking) else ',"blocking":false}\n')
        except Exception as exc:  # e.g. an array of several values
            self._invalid(head.split('"')[3], exc)
            return
        self._bare(tail, ts)

    def record_compile_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"compile_start"}\n', ts)

    def record_compile_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"compile_end"}\n', ts)

    def record_custom_start(self, name: str, *, ts: float | None = None) -> None:
        self._fields("custom_start", {"name": name}, ts)

    def record_custom_end(self, name: str, *, ts: float | None = None) -> None:
        self._fields("custom_end", {"name": name}, ts)

    def record_elastic_wait_start(self, name: str, *, ts: float | None = None) -> None:
        self._fields("elastic_wait_start", {"name": name}, ts)

    def record_elastic_wait_end(self, name: str, *, ts: float | None = None) -> None:
        self._fields("elastic_wait_end", {"name": name}, ts)

    def record_elastic_reinit_start(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"elastic_reinit_start"}\n', ts)

    def record_elastic_reinit_end(self, *, ts: float | None = None) -> None:
        self._bare(',"kind":"elastic_reinit_end"}\n', ts)

    def record_elastic_slices(
        self, active: int, total: int, available: int, *, ts: float | None = None
    ) -> None:
        fields = {"active": active, "total": total, "available": available}
        self._fields("elastic_slices", fields, ts)

    # ------------------------------------------------------- context managers

    def _span(self, name: str, *args: Any) -> AbstractContextManager[None]:
        start, end = SPANS[name]
        return _Span(getattr(self, start), getattr(self, end), args)

    def step(self, step: int) -> AbstractContextManager[None]:
        """``with rec.step(n):`` records ``step_start`` / ``step_end``."""
        return _Span(self.record_step_start, self.record_step_end, (step,))

    def checkpoint_save(self, step: int) -> AbstractContextManager[None]:
        return self._span("checkpoint_save", step)

    def checkpoint_restore(self, step: int) -> AbstractContextManager[None]:
        return self._span("checkpoint_restore", step)

    def data_loading(self, blocking: bool = True) -> AbstractContextManager[None]:
        return self._span("data_loading", blocking)

    def custom(self, name: str) -> AbstractContextManager[None]:
        return self._span("custom", name)

    def accelerator_init(self) -> AbstractContextManager[None]:
        return self._span("accelerator_init")

    def training_prep(self) -> AbstractContextManager[None]:
        return self._span("training_prep")

    def compile(self) -> AbstractContextManager[None]:
        return self._span("compile")

    def elastic_wait(self, name: str) -> AbstractContextManager[None]:
        return self._span("elastic_wait", name)

    def elastic_reinit(self) -> AbstractContextManager[None]:
        return self._span("elastic_reinit")

    def section(self, name: str) -> AbstractContextManager[None]:
        """``with rec.section("forward"):`` times a compute section of this rank.

        Not two events per run: the durations are aggregated in the process and
        the background thread writes one ``section_summary`` per section every
        ``section_interval`` seconds (count, total, quantiles), from which the
        report scores stragglers (docs/ranks.md). Costs well under a microsecond.
        """
        timer = self._sections.timers.get(name)
        return timer if timer is not None else self._new_section(name)

    def _new_section(self, name: str) -> AbstractContextManager[None]:
        if not isinstance(name, str) or not name:
            self._warn_once("section", "badput: section names must be non-empty strings")
            return _NULL_SPAN
        with self._lock:
            if self._closed:
                return _NULL_SPAN
            self._start_thread()  # the thread writes the summaries
            return self._sections.timer(name)

    def _record_section_summaries(self) -> None:
        """Record one ``section_summary`` per section that ran (thread, flush, close)."""
        try:
            for ts, fields in self._sections.summaries():
                self._fields("section_summary", fields, ts)
        except Exception as exc:  # pragma: no cover - defensive
            self._warn_once("bug", "badput: unexpected error in sections: %r", exc)

    # ------------------------------------------------------------- lifecycle

    def flush(self, timeout: float | None = None) -> bool:
        """Block until everything recorded so far is handled: written, or dropped and
        counted. ``False`` if ``timeout`` expired first (a store that hangs).

        Lines in the spool are safe as soon as they are recorded; a flush waits until they
        are in the event file too (where readers see them)."""
        try:
            if not self._closed and self._sections.timers:
                self._record_section_summaries()
            with self._lock:
                target = self._n_queued
                seg = self._seg
                spooled = seg.recorded_bytes() if seg is not None else 0
            if seg is not None and not self._wait_shipped(seg, spooled, timeout):
                return False
            if self._n_handled >= target:
                return True
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._drain()
                return self._n_handled >= target
            self._flush_wanted = True
            self._nudge()
            with self._handled:
                return self._handled.wait_for(lambda: self._n_handled >= target, timeout)
        except Exception as exc:  # never raise into the caller
            self._warn_once("bug", "badput: unexpected error in flush: %r", exc)
            return False

    def _wait_shipped(self, seg: SpooledWriter, upto: int, timeout: float | None) -> bool:
        """Wait until the spool's first ``upto`` bytes are in the event file (the thread
        ships them); False when ``timeout`` expired first or they cannot be written."""
        if seg.shipped_bytes() >= upto:
            return True
        thread = self._thread
        if thread is None or not thread.is_alive():
            with suppress(OSError):
                seg.ship()
            return seg.shipped_bytes() >= upto
        self._flush_wanted = True
        self._nudge()
        with self._shipped:
            return self._shipped.wait_for(
                lambda: self._seg is not seg or seg.shipped_bytes() >= upto or self._ship_failed,
                timeout,
            ) and (self._seg is not seg or seg.shipped_bytes() >= upto)

    def close(self, timeout: float | None = CLOSE_TIMEOUT) -> None:
        """Write what is buffered, stop heartbeats and the background thread, ship the
        spool to the event file. Idempotent; bounded by ``timeout``.

        Events recorded after ``close()`` are dropped (and counted).
        """
        try:
            if not self._closed and self._sections.timers:
                self._record_section_summaries()
                self._sections.timers.clear()  # later section() calls time nothing
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                state = self._state
                self._state = _CLOSED
                self._write = self._put_locked
            self._stop = True
            worker = self._worker
            if worker is not None:
                worker.signal(final=False)  # close() itself does the last drain
            thread = self._thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)
                if thread.is_alive():  # stuck in a write to a hung store
                    self._abandoned = True  # its late outcome is not counted again
                    with self._lock:
                        lost = self._inflight + len(self._buf)
                        self._buf = []
                        self._buf_bytes = 0
                    self._dropped += lost
                    self._warn_once(
                        "hung",
                        "badput: the store %s did not take events of job %r within %gs; "
                        "%d events dropped at close",
                        self._store.uri,
                        self._job,
                        timeout or 0.0,
                        lost,
                    )
                    return
            with self._lock:
                if state == _BUFFERED and self._seg is not None:
                    # Lines waiting for the spool go into it, or are dropped and counted:
                    # never into the event file ahead of the spool's lines.
                    state = self._spool_or_drop_buffer_locked()
                seg, self._seg = self._seg, None
                if seg is not None:
                    seg.current.seal()  # a late write of another thread is counted as dropped
                    lines = seg.count_lines()
            if seg is not None:  # first: a buffered remainder may be appended to its file
                self._n_mapped += lines
                self._note_shipment(seg, seg.close)
                self._notify_shipped()
            if state == _BUFFERED:
                self._drain()
            writer, self._writer = self._writer, None
            if writer is not None:
                writer.close()
        except Exception as exc:
            self._warn_once("bug", "badput: unexpected error in close: %r", exc)
        finally:
            _lifecycle.untrack(LIVE_GROUP, self)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------ stream management

    def _put_slow(self, line: bytes) -> None:
        """A put that the spool did not take (caller holds ``_lock``): first line, full
        segment, buffered or closed stream."""
        state = self._state
        if state == _MAPPED:
            seg = self._seg
            assert seg is not None
            # Other threads write without the lock: they may fill the room we make
            # before our turn comes, so rotate until the line fits.
            for _ in range(64):
                with suppress(ValueError):
                    seg.current.mm.write(line)
                    return
                if not self._rotate_locked(len(line)):
                    break
        elif state == _NEW:
            self._start_thread()
            self._state = _BUFFERED
            lines = self._with_process_init(line)
            if self._open_spool_locked():
                assert self._seg is not None
                for one in lines:
                    self._seg.current.mm.write(one)
                return
            self._buffer_locked(lines)
            return
        elif state == _CLOSED:
            self._dropped += 1
            self._warn_once(
                "closed", "badput: recorder for job %r is closed; events dropped", self._job
            )
            return
        self._buffer_locked([line])

    def _buffer_locked(self, lines: list[bytes]) -> None:
        """Queue ``lines`` for the thread; past the bound, drop and count them."""
        for line in lines:
            if self._buf_bytes + len(line) > MAX_BUFFERED_BYTES:
                self._dropped += 1
                self._warn_once(
                    "overflow",
                    "badput: the store %s is not taking events of job %r (%d MB waiting); "
                    "dropping new ones until it does",
                    self._store.uri,
                    self._job,
                    self._buf_bytes >> 20,
                )
                continue
            self._buf.append(line)
            self._buf_bytes += len(line)
            self._n_queued += 1

    def _start_thread(self) -> None:
        if self._worker is not None:  # already running (e.g. started by section())
            return
        # Ticks often enough for the spool's shipments, the heartbeats and the buffer.
        interval = min(self._flush_interval, MAINTAIN_INTERVAL)
        if self._heartbeat > 0:
            interval = min(interval, self._heartbeat)
            self._next_beat = _time() + self._heartbeat
        self._next_drain = time.monotonic() + self._flush_interval
        worker = PeriodicWorker("badput-writer", interval, self._tick, tick_at_start=False)
        try:
            worker.start()
        except RuntimeError as exc:  # e.g. at interpreter shutdown
            self._warn_once("thread", "badput: cannot start the writer thread: %s", exc)
        else:
            self._worker = worker
            self._thread = worker.thread

    def _open_spool_locked(self) -> bool:
        """Open this process's spooled stream (state -> _MAPPED); False if the store has
        none or it cannot be opened now (state stays _BUFFERED, retried later)."""
        opener = getattr(self._store, "open_spooled_writer", None)
        if opener is None:
            return False
        seg: SpooledWriter | None = None
        try:
            seg = opener(
                self._job, self._key, SEGMENT_BYTES, lock=self._lock, max_segments=MAX_SEGMENTS
            )
            assert seg is not None
            self._attach_locked(seg)
        except Exception as exc:
            if seg is not None:
                with suppress(Exception):
                    seg.close()
            self._next_reopen = time.monotonic() + REOPEN_INTERVAL
            self._warn_write(exc)
            return False
        return True

    def _attach_locked(self, seg: SpooledWriter) -> None:
        """Write into ``seg`` from now on; the lines waiting in memory go first (they were
        recorded first). May raise (no segment can take them): then nothing changed."""
        waiting = self._buf
        data = b"".join(waiting)
        cur = seg.current
        if data and cur.written() + len(data) > cur.capacity:
            cur = seg.rotate(len(data))
        cur.mm.write(data)
        self._buf, self._buf_bytes = [], 0
        self._seg = seg
        self._state = _MAPPED
        self._mark_handled(len(waiting))
        self._write = cur.mm.write

    def _spool_or_drop_buffer_locked(self) -> int:
        """Put the lines waiting in memory into the spool (a new segment); when none can be
        made, drop and count them. The state after."""
        seg = self._seg
        assert seg is not None
        try:
            self._attach_locked(seg)
        except Exception:
            lost = len(self._buf)
            self._buf, self._buf_bytes = [], 0
            self._dropped += lost
            self._mark_handled(lost)
        return self._state

    def _leave_mapped_locked(self) -> None:
        """The spool cannot take more now: buffer until it can."""
        self._state = _BUFFERED
        self._write = self._put_locked
        self._next_reopen = time.monotonic() + REOPEN_INTERVAL

    def _rotate_locked(self, need: int) -> bool:
        """Start the spool's next segment for a line of ``need`` bytes; False (and state
        _BUFFERED) when none can be made (full disk, too many not shipped yet)."""
        seg = self._seg
        if seg is None:
            return False
        try:
            cur = seg.rotate(need)
        except Exception as exc:
            self._warn_write(exc)
            self._leave_mapped_locked()
            return False
        self._write = cur.mm.write
        return True

    def _warn_write(self, exc: BaseException) -> None:
        self._warn_once(
            "write",
            "badput: cannot write events of job %r to %s (%s); keeping up to %d MB of them "
            "in memory and retrying; what cannot be written is dropped and counted. "
            "The training run is not affected.",
            self._job,
            self._store.uri,
            exc,
            MAX_BUFFERED_BYTES >> 20,
        )

    def _mark_handled(self, n: int) -> None:
        if n:
            with self._handled:
                self._n_handled += n
                self._handled.notify_all()

    # ---------------------------------------------------- background thread

    def _tick(self) -> None:
        """One tick of the background thread (badput's periodic worker)."""
        if self._stop:
            return  # close() does the last drain
        if not self._orphans_looked:
            self._orphans_looked = True
            self._ship_orphans()
        if self._next_beat is not None:
            now = _time()
            if now >= self._next_beat:
                self.record_heartbeat(ts=now)
                self._next_beat = now + self._heartbeat
        if self._sections.timers and _time() >= self._next_summary:
            self._next_summary = _time() + self._section_interval
            self._record_section_summaries()
        self._maintain()

    def _ship_orphans(self) -> None:
        """Ship what killed processes of this job left in its spool (their lock is free)."""
        shipper = getattr(self._store, "ship_orphaned", None)
        if shipper is not None:
            with suppress(Exception):
                shipper(self._job)

    def _maintain(self) -> None:
        seg = self._seg
        if seg is not None:
            self._ship(seg)
        state = self._state
        if state == _MAPPED:
            if seg is None or self._stop:
                return
            self._keep_ahead(seg)
        elif state == _BUFFERED:
            flush_wanted, self._flush_wanted = self._flush_wanted, False
            prompt, self._prompt_wanted = self._prompt_wanted, False
            now = time.monotonic()
            due = prompt or flush_wanted or now >= self._next_drain
            spooled = getattr(self._store, "open_spooled_writer", None) is not None
            if spooled and (flush_wanted or time.monotonic() >= self._next_reopen):
                with self._lock:
                    if self._state == _BUFFERED:
                        if self._seg is not None:  # the spool may take them again
                            with suppress(Exception):
                                self._attach_locked(self._seg)
                        else:
                            self._open_spool_locked()
                        if self._state == _BUFFERED:
                            self._next_reopen = time.monotonic() + REOPEN_INTERVAL
                    if flush_wanted and self._state == _BUFFERED and self._seg is not None:
                        # A flush asks for them to be handled now, and the event file must
                        # not get them ahead of the spool's lines: dropped and counted.
                        self._spool_or_drop_buffer_locked()
            if (not spooled and due) or (flush_wanted and self._state == _BUFFERED):
                # A directory store's lines wait for the spool, unless a flush asks
                # for them to be handled now: then written (appended) or dropped.
                self._next_drain = now + self._flush_interval
                self._drain()

    def _ship(self, seg: SpooledWriter) -> None:
        """Ship the spool to the event file; a failure keeps the lines in the spool (retried
        at the next tick) and warns once."""
        self._ship_failed = False
        self._note_shipment(seg, seg.ship)
        self._notify_shipped()

    def _note_shipment(self, seg: SpooledWriter, ship: Callable[[], object]) -> None:
        """Run one shipment (``seg.ship`` or ``seg.close``) and say what it found."""
        old_path, replaced_before, cut_before = seg.path, seg.replaced, seg.cut
        try:
            done = ship()
        except Exception as exc:
            self._ship_failed = True
            self._warn_once(
                "ship",
                "badput: cannot write events of job %r to %s (%s); they are kept in its "
                "spool and written when it can take them. The training run is not affected.",
                self._job,
                seg.path,
                exc,
            )
            return
        if done is False:  # close() left segments for a later recovery
            self._warn_once(
                "ship",
                "badput: events of job %r could not be written to %s at close; they are kept "
                "in %s and written by the next recorder, `badput run` or reader of the job",
                self._job,
                seg.path,
                seg.spool,
            )
        if seg.replaced != replaced_before:
            self._warn_once(
                "detached",
                "badput: the event file %s of job %r was deleted or replaced; its events "
                "were written again to %s",
                old_path,
                self._job,
                seg.path,
            )
        cut = seg.cut - cut_before
        if cut:
            self._cut += cut
            self._warn_once(
                "truncated",
                "badput: the event file %s of job %r was cut short from outside; %d events "
                "recorded before are no longer in it (counted in lost_events). Recording "
                "goes on; the training run is not affected.",
                seg.path,
                self._job,
                cut,
            )

    def _notify_shipped(self) -> None:
        with self._shipped:
            self._shipped.notify_all()

    def _keep_ahead(self, seg: SpooledWriter) -> None:
        """Make the current segment's next pages writable ahead of the writer, and the next
        segment before it is needed, so that the hot path takes no page fault and does no
        file system work."""
        cur = seg.current
        pos = cur.written()
        # Stay ahead of the writer by twice what it wrote since the last check.
        ahead = 2 * max(pos - self._last_pos, 0) + POPULATE_AHEAD
        self._last_pos = pos
        if pos > cur.capacity // 2:
            try:
                seg.prepare()
            except OSError as exc:
                self._warn_write(exc)  # the hot path buffers when the segment is full
        # In small steps: madvise holds the GIL, so one big call would stall the
        # training thread; between steps it runs.
        target = min(pos + ahead, cur.capacity)
        while cur.populated < target and not self._stop:
            with self._lock:  # no close while the kernel populates
                if self._seg is not seg or seg.current is not cur or self._state != _MAPPED:
                    return
                cur.populate(min(cur.populated + POPULATE_STEP, target))
            if not cur.can_populate:
                return

    def _drain(self) -> None:
        """Write the buffered lines through the store's writer (the thread, or close)."""
        with self._lock:
            lines, self._buf, self._buf_bytes = self._buf, [], 0
            self._inflight = len(lines)
        if not lines:
            return
        n = len(lines)
        try:
            writer = self._writer
            if writer is None:
                writer = self._writer = self._store.open_writer(self._job, self._key)
            writer.write(b"".join(lines))
            writer.flush()
        except Exception as exc:
            if self._abandoned:  # close() already counted these lines as dropped
                return
            # A write cut short (a full disk) says how far it got: those lines are on disk.
            done = getattr(exc, "badput_written", 0)
            complete = b"".join(lines)[:done].count(b"\n") if done else 0
            self._n_written += complete
            self._dropped += n - complete
            self._warn_once(
                "write",
                "badput: cannot write events of job %r to %s (%s); dropping them and "
                "retrying with later events. The training run is not affected.",
                self._job,
                self._store.uri,
                exc,
            )
            writer, self._writer = self._writer, None
            if writer is not None:
                with suppress(Exception):
                    writer.close()
        else:
            if not self._abandoned:
                self._n_written += n
        finally:
            self._inflight = 0
            self._mark_handled(n)


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

    def step(self, step: int) -> AbstractContextManager[None]:
        return _NULL_SPAN

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

    def record_step_start(self, step: int, *, ts: float | None = None) -> None:
        return None

    def record_step_end(self, step: int, *, ts: float | None = None) -> None:
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


def _close_all() -> None:
    for rec in _lifecycle.live(LIVE_GROUP):
        with suppress(Exception):  # close() already never raises
            rec.close()


def _after_fork_in_child() -> None:
    for rec in _lifecycle.live(LIVE_GROUP):
        with suppress(Exception):
            rec._after_fork_child()


_lifecycle.on_exit(_close_all, _lifecycle.ORDER_RECORDERS)
_lifecycle.on_fork_child(_after_fork_in_child)
