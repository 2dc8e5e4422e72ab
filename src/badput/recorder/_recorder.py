"""The :class:`Recorder`: identity, the hot path that formats and copies each line, the
record calls and their context managers, flush and close (how it all works: the
:mod:`badput.recorder` room's documentation)."""

from __future__ import annotations

import logging
import math
import operator
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from operator import itemgetter
from typing import Any, Final

import msgspec

from badput.events import (
    LIFECYCLE_KINDS,
    MAX_INT,
    MAX_TS,
    MIN_TS,
    Event,
    Kind,
    validate,
)
from badput.formats.codec import encode_line
from badput.recorder._fields import as_int, clean_fields
from badput.recorder._identity import (
    MAX_PROCESS_INIT,
    _env_rank,
    _is_disabled,
    _launched,
    _resolve_heartbeat,
    resolve_attempt,
)
from badput.recorder._phases import PhaseRecords
from badput.recorder._sections import DEFAULT_SECTION_INTERVAL, SectionTimers
from badput.recorder._spans import _NULL_SPAN, SPANS, _Span
from badput.recorder._stream import (
    _BUFFERED,
    _CLOSED,
    _MAPPED,
    _NEW,
    StreamKeeping,
)
from badput.recorder._teardown import begin_teardown, install_crash_hook
from badput.runtime import lifecycle as _lifecycle
from badput.runtime.env import (
    BADPUT_JOB,
    detect_host,
    launcher_attempt_start,
    process_start_time,
    under_launcher,
)
from badput.runtime.worker import PeriodicWorker
from badput.store import EventStore, EventWriter, SpooledWriter, WriterKey, open_store

__all__ = ["CLOSE_TIMEOUT", "LIVE_GROUP", "Recorder"]

logger = logging.getLogger("badput")

#: Shortest accepted ``flush_interval`` (the background thread sleeps at least this).
MIN_FLUSH_INTERVAL: Final = 0.005
#: How long ``close()`` waits for the background thread (at exit: never hang the job).
CLOSE_TIMEOUT: Final = 5.0
#: The lifecycle registry group of live recorders.
LIVE_GROUP: Final = "recorders"


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


_time = time.time
_time_ns = time.time_ns
_isfinite = math.isfinite
_replace = msgspec.structs.replace
_json = msgspec.json.encode


def _ts_text(ts: Any) -> str:
    """An explicit ``ts`` as JSON text (a plausible time, else ``ValueError``)."""
    value = float(ts)
    if not MIN_TS <= value <= MAX_TS:  # also false for NaN
        raise ValueError(f"ts must be a time between {MIN_TS} and {MAX_TS}, got {value!r}")
    return repr(value)


def _as_step(value: Any) -> int:
    """``value`` as an event integer (within +-MAX_INT, which every reader holds)."""
    step = as_int(value)
    if not -MAX_INT <= step <= MAX_INT:
        raise ValueError(f"{step} is outside +-(2**53 - 1)")
    return step


# Jobs whose process_init this process has recorded (once per process and job).
_process_init_jobs: set[str] = set()


class Recorder(PhaseRecords, StreamKeeping):
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
            from badput.recorder._null import NullRecorder  # noqa: PLC0415 (it subclasses this)

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
        self._attempt = resolve_attempt(attempt)
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
        self._teardown_begun = False  # teardown_start is recorded once per process
        self._early_marks: list[tuple[float, str]] = []  # written with process_init
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
        install_crash_hook(LIVE_GROUP)
        self._record_early(init)

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
        marks = [(init[0], "process_init_start"), (init[1], "process_init_end")]
        if self._early_marks:  # the hooks' and torchrun's intervals, in time order with them
            marks = sorted([*marks, *self._early_marks], key=itemgetter(0))
            self._early_marks = []
        pair = [f'{self._pfx}{_ts_text(ts)},"kind":"{kind}"}}\n'.encode() for ts, kind in marks]
        if b'"kind":"job_start"' not in line:
            return [*pair, line]
        before = sum(1 for ts, _ in marks if ts < init[0])  # torchrun's start, before its own
        return [*pair[:before], line, *pair[before:]]

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
        self._teardown_begun = False
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
                event = _replace(
                    self._template, ts=stamp, kind=kind, **clean_fields(fields, self._warn_once)
                )
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
            # What follows until the launcher's job_end (every process gone) is teardown.
            self.record_teardown_start(ts=ts)
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


def _close_all() -> None:
    for rec in _lifecycle.live(LIVE_GROUP):
        begin_teardown(rec)  # the process exits: teardown until the launcher's end
        with suppress(Exception):  # close() already never raises
            rec.close()


def _after_fork_in_child() -> None:
    for rec in _lifecycle.live(LIVE_GROUP):
        with suppress(Exception):
            rec._after_fork_child()


_lifecycle.on_exit(_close_all, _lifecycle.ORDER_RECORDERS)
_lifecycle.on_fork_child(_after_fork_in_child)
