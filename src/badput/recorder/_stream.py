"""What happens to a recorded line after the hot path: the recorder's stream.

A ``record_*`` call (:mod:`badput.recorder._recorder`) copies its line with ``self._write``:
the current spool segment's ``mmap.write`` while the stream is spooled. A line it did not
take comes here, to :class:`StreamKeeping`, the lowest base class of the recorder, which
holds the stream's states:

- ``_NEW``: nothing recorded yet; the first line starts the background thread and opens the
  spool (:class:`~badput.store.SpooledWriter`).
- ``_MAPPED``: lines go into the spool; a full segment rotates to the next one.
- ``_BUFFERED``: the spool cannot take lines now (a store without one, a full disk): they
  wait in a bounded buffer that the thread writes or hands to the spool when it can.
- ``_CLOSED``: lines are dropped and counted.

The background thread (:mod:`badput.recorder._writer_thread`) ships the spool to the event
file, makes the next pages and segment ready, and drains the buffer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Final

from badput.store import EventStore, SpooledWriter, WriterKey

__all__ = [
    "MAX_BUFFERED_BYTES",
    "MAX_SEGMENTS",
    "SEGMENT_BYTES",
    "StreamKeeping",
]

#: Most bytes of lines held in memory while the store does not take them.
MAX_BUFFERED_BYTES: Final = 16 * 1024 * 1024
#: Bytes of lines in one spool segment (a mapped file; a line longer than this gets one of
#: its own). The resident memory of recording is a few of them, however long the job.
SEGMENT_BYTES: Final = 4 * 1024 * 1024
#: Most spool segments not yet shipped to the event file before lines wait in memory.
MAX_SEGMENTS: Final = 16
#: Seconds between attempts to reopen a directory store that failed.
REOPEN_INTERVAL: Final = 1.0

# Stream states.
_NEW: Final = 0  # nothing recorded yet in this process
_MAPPED: Final = 1  # lines are copied into a spool segment
_BUFFERED: Final = 2  # lines wait in memory for the background thread
_CLOSED: Final = 3


class StreamKeeping:
    """The stream of a :class:`~badput.recorder.Recorder`: its states, the spool and the
    buffer (see the module doc). The recorder sets every attribute below in its
    ``_setup_process``; the methods its other layers provide are declared at the end."""

    _job: str
    _store: EventStore
    _key: WriterKey
    _lock: threading.Lock
    _state: int
    _write: Callable[[bytes], object]
    _seg: SpooledWriter | None
    _buf: list[bytes]
    _buf_bytes: int
    _n_queued: int
    _n_handled: int
    _handled: threading.Condition
    _next_reopen: float
    _dropped: int

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
        self._nudge()  # the thread makes the next segment now, not at its next tick
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

    # What the recorder's other layers provide (the line's identity, warnings, the thread).

    def _warn_once(self, key: str, msg: str, *args: object) -> None:
        raise NotImplementedError

    def _with_process_init(self, line: bytes) -> list[bytes]:
        raise NotImplementedError

    def _put_locked(self, line: bytes) -> None:
        raise NotImplementedError

    def _nudge(self) -> None:
        raise NotImplementedError

    def _start_thread(self) -> None:
        raise NotImplementedError
