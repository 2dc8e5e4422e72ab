"""A job listed by a helper process while the command imports the engine.

``badput report`` spends its first 0.1 s importing numpy and the engine on one core. A job
of 10,000 attempt files then takes another 0.15 s to resolve, list and ``stat`` (the plan of
its parallel read needs every file's size), mostly waiting on system calls. Forked before
the imports, a helper does that beside them (:func:`badput.store.list_job`) and hands the
listing back through a pipe; the read plans from it (``LiveJob(listing=...)``).

Only where the parallel read itself may fork (Linux, two cores or more, this process's only
thread); anything that goes wrong in the helper leaves the command to list the job itself,
as it did before. The helper imports nothing beyond what the command already holds.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Final

from badput.store import JobListing, list_job, safe_job_dir

__all__ = ["MANY_DIRECTORIES", "ListingAhead", "list_ahead"]


class ListingAhead:
    """:func:`~badput.store.list_job` of ``path`` and ``job``, running in a forked helper."""

    def __init__(self, path: str | os.PathLike[str], job: str | None) -> None:
        import multiprocessing  # noqa: PLC0415 (the parallel read imports it anyway)

        ctx = multiprocessing.get_context("fork")
        self._got, sent = ctx.Pipe(duplex=False)
        self._helper: Any = ctx.Process(target=_helper, args=(path, job, sent), daemon=True)
        self._helper.start()
        sent.close()  # the helper's end: its exit ends the pipe (recv raises, never hangs)
        self._result: JobListing | None = None
        self._done = False

    def result(self) -> JobListing | None:
        """The listing, once the helper sends it (waits); None when the helper failed (the
        path names no job, a file could not be looked at...): the caller lists itself."""
        if not self._done:
            self._done = True
            try:
                got = self._got.recv()
            except (EOFError, OSError, ValueError, TypeError, AttributeError):
                got = None  # the helper died, or sent what cannot be read back
            finally:
                self._got.close()
                self._helper.join(timeout=5.0)
                if self._helper.is_alive():
                    self._helper.kill()
                    self._helper.join()
            self._result = got if isinstance(got, JobListing) else None
        return self._result


def _helper(path: str | os.PathLike[str], job: str | None, sent: Connection) -> None:
    """The helper process: list the job, send the listing (or None), exit. Ctrl-C is the
    command's to handle (it reaches the whole process group): the helper ignores it, and
    ends when its listing is sent or nobody is left to take it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        listing: JobListing | None = list_job(path, job)
    except Exception:  # the command resolves the path itself, and says what is wrong
        listing = None
    try:
        sent.send(listing)
    except Exception:  # e.g. the command is gone: nobody is waiting
        pass
    finally:
        sent.close()


def list_ahead(path: str | os.PathLike[str], job: str | None) -> ListingAhead | None:
    """A helper listing the job ``path`` designates, when one may be forked now (Linux, two
    cores or more, no other thread in this process) and the job looks large enough for it
    to pay (:func:`_many_directories`); None otherwise."""
    if not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2:
        return None
    if threading.active_count() != 1:  # forking copies other threads' locks held
        return None
    if not _many_directories(os.fspath(path), job):
        return None
    try:
        return ListingAhead(path, job)
    except OSError:  # no process could be started: list in this one
        return None


#: Sub-directories (attempts, hosts) a job's directory has for a helper to pay. The fork
#: costs the command about 5 ms (its pages copied as it writes them); listing and taking the
#: sizes of a job of 1,000 attempt directories takes about as long as it saves.
MANY_DIRECTORIES: Final = 1_000
#: Jobs of a store root looked into when the path is one (a few: more is not a guess).
_ROOT_JOBS_LOOKED_AT: Final = 8


def _many_directories(path: str, job: str | None) -> bool:
    """Whether the job ``path`` (and ``job``) designates likely has
    :data:`MANY_DIRECTORIES` sub-directories or more, told from link counts alone: a
    directory's is 2 plus its sub-directories on most Linux file systems, and 1 on those
    that do not count them (btrfs; ext4 past 65,000): then assumed many. The job's
    directory when ``job`` names one below ``path``, else ``path``; a store root's first
    few jobs when ``path`` has only a few sub-directories. A guess: listed ahead or not,
    the report is the same."""
    candidates = [path]
    if job is not None:
        candidates.insert(0, os.path.join(path, safe_job_dir(job)))
    for directory in candidates:
        subdirs = _subdirectory_count(directory)
        if subdirs is None:
            continue
        if subdirs >= MANY_DIRECTORIES:
            return True
        if subdirs > _ROOT_JOBS_LOOKED_AT:
            return False
        try:
            with os.scandir(directory) as entries:
                inside = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            return False
        return any((_subdirectory_count(d) or 0) >= MANY_DIRECTORIES for d in inside)
    return False


def _subdirectory_count(directory: str) -> int | None:
    """How many sub-directories ``directory`` has by its link count (a large number where
    the file system does not count them); None when it is not a directory."""
    try:
        st = os.stat(directory)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    return MANY_DIRECTORIES if st.st_nlink < 2 else st.st_nlink - 2
