"""Which job each directory of an object store holds, remembered between runs.

A job's directory is its name made safe (``team/llama`` lives in ``team_llama``), so
:meth:`~badput.store.ObjectStore.jobs` reads the first bytes of each directory's first part
to name the job as its events do: one GET per job directory. A :class:`JobNames` keeps
each answer in one small JSON file, keyed by the directory **and** its first part's key,
size and etag: while that part is the same object the answer stands; a part rewritten (other
bytes, other etag), or another first part, is read again. ``badput fleet`` keeps one beside
its result cache, so a second run over an unchanged bucket makes listing requests only.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final, NamedTuple

from badput.store._jsonl import safe_job_dir

__all__ = ["FirstPart", "JobNames", "job_of", "name_directories", "named_by_itself"]

_VERSION: Final = 1


def named_by_itself(directory: str) -> bool:
    """Whether the job directory ``directory`` can hold no job but the one of that name:
    :func:`~badput.store.safe_job_dir` changes a name only by ``_`` (for a separator, a
    control character, ``.`` or ``..``, or an empty name) or by a ``~`` and a hash (a name
    too long), so a directory without either is its own name, and no read can name it
    otherwise (a directory whose events name another is its own name too)."""
    return "_" not in directory and "~" not in directory


class FirstPart(NamedTuple):
    """A job directory's first part as a listing saw it."""

    key: str
    size: int
    etag: str


class JobNames:
    """Directory -> (its first part, the job it names), in the JSON file ``path`` (read on
    first use, written by :meth:`save` when something changed, atomically). A file that
    cannot be read is an empty cache; a write that fails is skipped: the cache only ever
    saves requests, never changes an answer."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._held: dict[str, tuple[str, int, str, str]] | None = None
        self._dirty = False
        self._lock = threading.Lock()

    def _load(self) -> dict[str, tuple[str, int, str, str]]:
        if self._held is None:
            self._held = {}
            try:
                with open(self.path, encoding="utf-8") as f:
                    data = json.load(f)
                names = data["names"] if data.get("version") == _VERSION else {}
                for directory, (key, size, etag, job) in names.items():
                    if isinstance(key, str) and isinstance(etag, str) and isinstance(job, str):
                        self._held[str(directory)] = (key, int(size), etag, job)
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                pass  # no file, or not ours: every directory is read again
        return self._held

    def get(self, directory: str, first: FirstPart) -> str | None:
        """The job ``directory`` holds, if its first part is still ``first``."""
        with self._lock:
            held = self._load().get(directory)
        if held is None or held[:3] != (first.key, first.size, first.etag):
            return None
        return held[3]

    def put(self, directory: str, first: FirstPart, job: str) -> None:
        """Remember that ``directory``, its first part being ``first``, holds ``job``."""
        with self._lock:
            held = self._load()
            value = (first.key, first.size, first.etag, job)
            if held.get(directory) != value:
                held[directory] = value
                self._dirty = True

    def save(self) -> None:
        """Write the file if something changed since it was read."""
        with self._lock:
            if not self._dirty or self._held is None:
                return
            data = {"version": _VERSION, "names": {d: list(v) for d, v in self._held.items()}}
            tmp = None
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".json")
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f, separators=(",", ":"))  # \u escapes: any name
                os.replace(tmp, self.path)
                self._dirty = False
            except (OSError, ValueError):
                if tmp is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)


def name_directories(
    first: dict[str, FirstPart],
    known: dict[str, tuple[FirstPart, str]],
    names: JobNames | None,
    read: Callable[[FirstPart], str | Exception | None],
    fetchers: int,
) -> None:
    """Learn, into ``known``, the job of each directory of ``first`` whose first part is
    not the one ``known`` was told by: its own name when it can hold no other
    (:func:`named_by_itself`), else from ``names``, else by ``read`` of the part (the
    job its first event names; ``fetchers`` at a time). A directory whose events name
    another job's directory, or none, is its own name; one that could not be read is
    left out (its directory's name this time, read again next time)."""
    unseen = [d for d in first if d not in known or known[d][0] != first[d]]
    for d in unseen:
        if named_by_itself(d):  # no other name is kept in it: nothing to read
            known[d] = (first[d], d)
    unseen = [d for d in unseen if d not in known or known[d][0] != first[d]]
    if names is not None:
        for d in unseen:
            held = names.get(d, first[d])
            if held is not None:
                known[d] = (first[d], held)
        unseen = [d for d in unseen if d not in known or known[d][0] != first[d]]
    if not unseen:
        return
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 (import cost)

    with ThreadPoolExecutor(min(fetchers, len(unseen))) as pool:
        named = list(pool.map(lambda d: read(first[d]), unseen))
    for directory, job in zip(unseen, named, strict=True):
        if isinstance(job, Exception):
            known.pop(directory, None)
            continue
        name = job if job is not None and safe_job_dir(job) == directory else directory
        known[directory] = (first[directory], name)
        if names is not None:
            names.put(directory, first[directory], name)
    if names is not None:
        names.save()


def job_of(
    directory: str,
    first: FirstPart,
    names: JobNames | None,
    read: Callable[[FirstPart], str | Exception | None],
) -> str:
    """The job the directory ``directory`` holds, its first part being ``first``: its own
    name when it can be no other (:func:`named_by_itself`), else what ``names`` remembers
    of that first part, else what ``read`` of the part says (then remembered)."""
    if named_by_itself(directory):
        return directory
    held = names.get(directory, first) if names is not None else None
    if held is not None:
        return held
    real = read(first)
    if isinstance(real, Exception):
        return directory  # not remembered: read again next time
    name = real if real is not None and safe_job_dir(real) == directory else directory
    if names is not None:
        names.put(directory, first, name)
        names.save()
    return name
