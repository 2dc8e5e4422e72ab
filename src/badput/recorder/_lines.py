"""The lines a recorder writes (:class:`LineWriting`, a base of the recorder): the
identity prefix and the stream state of one process (set up again after fork), and the
helpers of the ``record_*`` calls that format a line and copy it into the stream, or drop
and count an invalid one. The ``record_*`` calls themselves are in
:mod:`badput.recorder._recorder`."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from operator import itemgetter
from typing import Any, Final

import msgspec

from badput.events import LIFECYCLE_KINDS, MAX_INT, MAX_TS, MIN_TS, Event, Kind, validate
from badput.formats.codec import encode_line
from badput.recorder._fields import as_int, clean_fields
from badput.recorder._sections import SectionTimers
from badput.recorder._stream import _CLOSED, _MAPPED, _NEW
from badput.recorder._writer_thread import WriterThread
from badput.runtime.worker import PeriodicWorker
from badput.store import EventWriter, SpooledWriter, WriterKey

__all__ = ["LineWriting"]

logger = logging.getLogger("badput")

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

_time = time.time
_time_ns = time.time_ns
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


class LineWriting(WriterThread):
    """The lines of a :class:`~badput.recorder.Recorder` (see the module doc). The recorder
    sets the identity below in its ``__init__``, then calls ``_setup_process``."""

    _attempt: str | int
    _host: str
    _rank: int | None
    _warned: set[str]
    _closed: bool
    # (OS start of this process, recorder's construction) while process_init is to record.
    _process_init: tuple[float, float] | None
    _process_start: float | None
    # intervals timed before this process had a recorder, written with process_init
    _early_marks: list[tuple[float, str]]
    _teardown_begun: bool

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
        head = ident + b',"pid":%d,"ts":' % self._pid
        self._pfx = head.decode()
        # The hot calls' lines as bytes templates (``template % (time_ns, step)``): one C
        # call where an f-string and its encode are two. A ``%`` of the identity is escaped.
        head = head.replace(b"%", b"%%")
        self._step_start_line = head + b'%de-9,"kind":"step_start","step":%d}\n'
        self._step_end_line = head + b'%de-9,"kind":"step_end","step":%d}\n'
        self._load_start_line = head + b'%de-9,"kind":"data_loading_start"}\n'
        self._load_end_line = head + b'%de-9,"kind":"data_loading_end"}\n'
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
        # Held while summaries taken from the timers are written (thread, flush, close): a
        # close waits for the thread's to be written before it closes the stream.
        self._summaries_lock = threading.Lock()

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

    def _data_loading(self, head: str, blocking: Any, ts: float | None) -> None:
        try:
            tail = head + ("}\n" if bool(blocking) else ',"blocking":false}\n')
        except Exception as exc:  # e.g. an array of several values
            self._invalid(head.split('"')[3], exc)
            return
        self._bare(tail, ts)
