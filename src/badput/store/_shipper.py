"""Shipping a job's local event files to an object store as numbered part objects.

Objects cannot be appended to. A recorder writing to ``s3://...`` keeps its local spool and
event file exactly as on a directory store (the same ``SIGKILL`` promise), in a local
directory of the machine (:func:`local_root`); a :class:`Shipper` thread uploads each
event file as consecutive **parts**: ``<job>/<attempt>/<file>.jsonl.part-00000001``, ...,
each the next bytes of the file, cut after a newline. A part of :data:`PART_BYTES` goes as
soon as it is written; the growing tail at most every ``ship_interval`` seconds.

What was shipped of a file is kept beside it (``.shipped/<attempt>/<file>.jsonl.state``,
fixed-width, rewritten in place): the next part's number and its first byte, and the end
of a part being uploaded (written *before* the upload: a process killed during it leaves
the same part to be uploaded again, with the same bytes, never a gap or an overlap).
Whoever ships a file holds an exclusive ``flock`` on its state file, so a recorder, the
next recorder of the job and ``badput run`` on the same machine never ship it twice.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from badput.runtime.env import cache_home
from badput.store._base import safe_name
from badput.store._spool import SpooledWriter, SpoolSegment

__all__ = [
    "DEFAULT_SHIP_INTERVAL",
    "MAX_LOCAL_BYTES",
    "PART_BYTES",
    "BoundedSpooledWriter",
    "Shipper",
    "local_root",
    "part_key",
    "ship_file",
]

_log = logging.getLogger("badput")

#: Seconds between uploads of a file's growing tail.
DEFAULT_SHIP_INTERVAL: Final = 10.0
#: Most bytes of one part (a part this full goes at once, not at the next interval).
PART_BYTES: Final = 8 * 1024 * 1024
#: Most bytes of a process's event files waiting to be shipped: past it, the recorder's
#: spool takes no new segment, its lines wait in memory (16 MB), then are dropped, counted.
MAX_LOCAL_BYTES: Final = 1024 * 1024 * 1024
#: Seconds a closing recorder waits for its file's last part (then it ships later).
CLOSE_SHIP_TIMEOUT: Final = 5.0
_STATE_DIR: Final = ".shipped"
_STATE_FMT: Final = "{:010d} {:020d} {:020d}\n"
_STATE_LEN: Final = len(_STATE_FMT.format(0, 0, 0))
_PART_FMT: Final = "{}.part-{:08d}"

#: ``put(key, data)``: upload one object (raises on failure).
Put = Callable[[str, bytes], None]


def local_root(uri: str) -> Path:
    """Where a machine keeps the local files of the object store ``uri``:
    ``$XDG_CACHE_HOME/badput/objects/<uri as a name>`` (``~/.cache`` by default)."""
    return cache_home() / "objects" / safe_name(uri.replace("://", "__"))


def part_key(stream: str, number: int) -> str:
    """The object name of part ``number`` of ``stream`` (relative to the job's prefix)."""
    return _PART_FMT.format(stream, number)


def _read_state(fd: int) -> tuple[int, int, int]:
    raw = os.pread(fd, _STATE_LEN, 0)
    if len(raw) < _STATE_LEN:
        return 1, 0, 0
    part, offset, pending = raw.split()
    return int(part), int(offset), int(pending)


def _write_state(fd: int, part: int, offset: int, pending: int) -> None:
    os.pwrite(fd, _STATE_FMT.format(part, offset, pending).encode(), 0)


def _next_part(fd: int, offset: int, size: int, *, tail: bool) -> bytes:
    """The bytes of the next part from ``offset`` (``size``: the file's now): whole lines up
    to :data:`PART_BYTES`; b"" when there is not a full part and ``tail`` is not wanted."""
    data = os.pread(fd, min(size - offset, PART_BYTES), offset)
    if len(data) < PART_BYTES and not tail:
        return b""
    cut = data.rfind(b"\n")
    if cut < 0:  # a line longer than a part: split (the reader joins a stream's parts)
        return data if len(data) == PART_BYTES else b""
    return data[: cut + 1]


def ship_file(
    job_dir: Path, stream: str, put: Put, *, tail: bool = True, wait: bool = False
) -> int | None:
    """Upload the unshipped bytes of ``job_dir/stream`` as its next parts (``put`` is called
    with each part's key relative to the job's prefix). Only full parts unless ``tail``.
    Returns the bytes still unshipped; None when another process is shipping it. Raises
    what ``put`` raises (what was uploaded before stays recorded). ``wait``: for the other
    process's shipment to end, then ship what is left."""
    state_path = job_dir / _STATE_DIR / (stream + ".state")
    state_path.parent.mkdir(parents=True, exist_ok=True)
    sfd = os.open(state_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            fcntl.flock(sfd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        fd = os.open(job_dir / stream, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            part, offset, pending = _read_state(sfd)
            if pending > offset:  # killed during this upload: the same bytes again
                put(part_key(stream, part), os.pread(fd, pending - offset, offset))
                part, offset = part + 1, pending
                _write_state(sfd, part, offset, 0)
            size = os.fstat(fd).st_size
            while offset < size:
                data = _next_part(fd, offset, size, tail=tail)
                if not data:
                    break
                _write_state(sfd, part, offset, offset + len(data))
                put(part_key(stream, part), data)
                part, offset = part + 1, offset + len(data)
                _write_state(sfd, part, offset, 0)
            return max(size - offset, 0)
        finally:
            os.close(fd)
    finally:
        os.close(sfd)


def local_streams(job_dir: Path) -> Iterator[str]:
    """The event files of a local job directory (``<attempt>/<file>.jsonl``)."""
    with contextlib.suppress(OSError):
        for attempt in sorted(os.scandir(job_dir), key=lambda e: e.name):
            if attempt.name.startswith(".") or not attempt.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                for entry in sorted(os.scandir(attempt.path), key=lambda e: e.name):
                    if entry.name.endswith(".jsonl") and entry.is_file(follow_symlinks=False):
                        yield f"{attempt.name}/{entry.name}"


class Shipper:
    """The background thread that ships the local event files of an object store's jobs
    (one per store per process, started by its first writer). Every ``tick`` it ships full
    parts; every ``ship_interval`` the tails too. A store that fails (unreachable, 503
    after the client's retries) is tried again at the next interval: nothing is lost, and
    the training thread never waits for it."""

    def __init__(
        self, root: Path, put: Callable[[str, str, bytes], None], ship_interval: float, uri: str
    ) -> None:
        self.root = root
        self._put = put  # (job directory name, key relative to it, data)
        self.ship_interval = ship_interval
        self.uri = uri
        self.backlog = 0  # bytes of this store's local files not shipped yet
        self.failures = 0  # shipments that failed (retried later)
        self._jobs: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._urgent: list[tuple[str, str, threading.Event]] = []
        self._thread: threading.Thread | None = None
        self._warned = False
        self._next_tail = time.monotonic() + ship_interval

    def watch(self, job_dir_name: str) -> None:
        """Ship ``job_dir_name``'s local files from now on (starts the thread)."""
        with self._lock:
            self._jobs.add(job_dir_name)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="badput-shipper", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def ship_soon(self, job_dir_name: str, stream: str) -> threading.Event:
        """Ask the thread to ship ``stream`` whole now; the event is set when it is done."""
        done = threading.Event()
        with self._lock:
            self._urgent.append((job_dir_name, stream, done))
        self.watch(job_dir_name)
        return done

    def ship_job(self, job_dir_name: str, *, tail: bool = True, wait: bool = False) -> int:
        """Ship the job's local files now, on the calling thread; the bytes left unshipped
        (of files another process is shipping: not counted unless ``wait``, which waits for
        it to end first). Raises what the upload raises."""
        job_dir = self.root / job_dir_name
        left = 0
        for stream in local_streams(job_dir):
            put = self._putter(job_dir_name)
            left += ship_file(job_dir, stream, put, tail=tail, wait=wait) or 0
        return left

    def _putter(self, job_dir_name: str) -> Put:
        return lambda key, data: self._put(job_dir_name, key, data)

    def _run(self) -> None:
        tick = min(self.ship_interval, 0.5)
        while True:
            self._wake.wait(tick)
            self._wake.clear()
            with self._lock:
                urgent, self._urgent = self._urgent, []
                jobs = sorted(self._jobs)
            for job, stream, done in urgent:
                with contextlib.suppress(Exception):
                    ship_file(self.root / job, stream, self._putter(job))
                done.set()
            now = time.monotonic()
            tail = now >= self._next_tail
            if tail:
                self._next_tail = now + self.ship_interval
            backlog = 0
            try:
                for job in jobs:
                    backlog += self.ship_job(job, tail=tail)
            except Exception as exc:
                self.failures += 1
                self._next_tail = now + self.ship_interval  # tried again then
                if not self._warned:
                    self._warned = True
                    _log.warning(
                        "badput: cannot ship events to %s (%s); they are kept on this machine "
                        "in %s and shipped when it can take them. The training run is not "
                        "affected.",
                        self.uri,
                        (str(exc).splitlines() or [type(exc).__name__])[0],
                        self.root,
                    )
                backlog = sum(_unshipped(self.root / job) for job in jobs)
            self.backlog = backlog


def _unshipped(job_dir: Path) -> int:
    """Bytes of a local job directory's event files not shipped yet (from their states)."""
    total = 0
    for stream in local_streams(job_dir):
        with contextlib.suppress(OSError):
            size = os.stat(job_dir / stream).st_size
            offset = 0
            state = job_dir / _STATE_DIR / (stream + ".state")
            with contextlib.suppress(OSError):
                raw = state.read_bytes()
                if len(raw) >= _STATE_LEN:
                    offset = int(raw.split()[1])
            total += max(size - offset, 0)
    return total


class BoundedSpooledWriter(SpooledWriter):
    """A recorder's spooled stream whose event file is shipped to an object store: no new
    spool segment while more than ``max_local_bytes`` wait to be shipped (the recorder then
    keeps lines in memory, then drops and counts them); closing asks for the last part."""

    shipper: Shipper
    max_local_bytes: int

    def rotate(self, need: int) -> SpoolSegment:
        if self.shipper.backlog > self.max_local_bytes:
            raise OSError(
                errno.ENOSPC,
                f"{self.shipper.backlog >> 20} MB not shipped to {self.shipper.uri} yet",
            )
        return super().rotate(need)

    def close(self) -> bool:
        shipped = super().close()
        job_dir_name = self.job_dir.name
        stream = self.target
        self.shipper.ship_soon(job_dir_name, stream).wait(CLOSE_SHIP_TIMEOUT)
        return shipped
