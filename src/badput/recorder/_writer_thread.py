"""The recorder's background thread (:class:`WriterThread`, a base of the recorder).

Its tick ships the spool to the event file, makes the next pages and segment ready ahead of
the writer, writes heartbeats and section summaries, and drains the buffer (a store without
a spool, or one that cannot take lines now); a flush waits here for the spool it asked to be
shipped. The stream's states, which the tick moves between, are in
:mod:`badput.recorder._stream`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Final

from badput.recorder._sections import SectionTimers
from badput.recorder._stream import _BUFFERED, _MAPPED, REOPEN_INTERVAL, StreamKeeping
from badput.runtime.worker import PeriodicWorker
from badput.store import EventWriter, SpooledWriter

__all__ = ["MAINTAIN_INTERVAL", "WriterThread"]

#: Bytes of a segment made writable ahead of the writer (besides its recent rate).
POPULATE_AHEAD: Final = 1024 * 1024
#: Seconds between shipments of the spool to the event file (and checks that it is in place).
MAINTAIN_INTERVAL: Final = 0.05
#: Bytes populated per madvise call (the GIL is released meanwhile).
POPULATE_STEP: Final = 1024 * 1024

_time = time.time


class WriterThread(StreamKeeping):
    """The background thread of a :class:`~badput.recorder.Recorder`: started on the first
    record (or section), woken by prompt events and flushes (see the module doc). The
    recorder sets the attributes below in its ``_setup_process``."""

    _n_written: int
    _inflight: int
    _shipped: threading.Condition
    _writer: EventWriter | None
    _next_drain: float
    _next_beat: float | None
    _next_summary: float
    _last_pos: int
    _flush_wanted: bool
    _prompt_wanted: bool
    _abandoned: bool
    _stop: bool
    _ship_failed: bool
    _orphans_looked: bool
    _cut: int
    _heartbeat: float
    _flush_interval: float
    _section_interval: float
    _sections: SectionTimers
    _worker: PeriodicWorker | None
    _thread: threading.Thread | None

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

    def _nudge(self) -> None:
        worker = self._worker
        if worker is not None:
            worker.wake()

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
        try:  # the next segment always ready: a burst may fill one within a tick
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

    # What the recorder provides (heartbeats, sections).

    def record_heartbeat(self, *, ts: float | None = None) -> None:
        raise NotImplementedError

    def _record_section_summaries(self) -> None:
        raise NotImplementedError
