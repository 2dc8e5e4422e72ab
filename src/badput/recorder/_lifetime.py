"""What a recorder says about itself and how it ends (:class:`RecorderLifetime`, a base of
the recorder): its properties (identity, counters), the section timers' upkeep, ``flush``
and ``close``."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, suppress
from typing import Final

from badput.recorder._lines import LineWriting
from badput.recorder._spans import _NULL_SPAN
from badput.recorder._stream import _BUFFERED, _CLOSED
from badput.runtime import lifecycle as _lifecycle
from badput.store import EventStore

__all__ = ["CLOSE_TIMEOUT", "LIVE_GROUP", "RecorderLifetime"]

#: How long ``close()`` waits for the background thread (at exit: never hang the job).
CLOSE_TIMEOUT: Final = 5.0
#: The lifecycle registry group of live recorders.
LIVE_GROUP: Final = "recorders"


class RecorderLifetime(LineWriting):
    """Properties, sections, flush and close of a :class:`~badput.recorder.Recorder`."""

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

    # --------------------------------------------------------------- sections

    def _new_section(self, name: str) -> AbstractContextManager[None]:
        if not isinstance(name, str) or not name:
            self._warn_once("section", "badput: section names must be non-empty strings")
            return _NULL_SPAN
        with self._lock:
            if self._closed:
                return _NULL_SPAN
            self._start_thread()  # the thread writes the summaries
            return self._sections.timer(name)

    def _record_section_summaries(self, *, last: bool = False) -> None:
        """Record one ``section_summary`` per section that ran (thread, flush, close;
        ``last``: close's, after which later ``section()`` calls time nothing). The samples
        a summary takes from the timers are written before anyone else takes any: a close
        never closes the stream between the thread's taking and its writing (its samples
        were lost so, 30,000 of 40,000 in one run)."""
        try:
            with self._summaries_lock:
                for ts, fields in self._sections.summaries():
                    self._fields("section_summary", fields, ts)
                if last:
                    self._sections.timers.clear()
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
                self._record_section_summaries(last=True)
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
