"""The fleet's per-job result cache: one small JSON file per job, keyed by what the job's
analysis read (:func:`~badput.fleet._job.job_fingerprint`). A second run over a store in
which nothing changed reads these files and analyses nothing.

Beside them, for an object store, the name of the job each directory holds
(:meth:`ResultCache.names`): with it a second run over an unchanged bucket makes listing
requests only (no GET of a part to learn a job's name, no listing per job)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from badput.fleet._job import JobResult
from badput.runtime.env import cache_home
from badput.store import JobNames

__all__ = ["ResultCache", "default_cache_dir"]


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/badput/fleet`` (default ``~/.cache/badput/fleet``): never inside
    the store, where a directory of ours would read as a job."""
    return cache_home() / "fleet"


class ResultCache:
    """Cached job results under ``root``, one file per (store, job): its name a digest of
    both (never log text), its content ``{"key": fingerprint, "result": ...}``. A result is
    used only when its key is the job's fingerprint now; a file that cannot be read or
    parsed is a miss, and a write that fails is skipped (the cache only ever saves work)."""

    def __init__(self, root: str | os.PathLike[str], store_uri: str) -> None:
        self.root = Path(root)
        self.store_uri = store_uri

    def _path(self, job: str) -> Path:
        h = hashlib.sha256(f"{self.store_uri}\0{job}".encode("utf-8", "surrogatepass"))
        digest = h.hexdigest()
        return self.root / digest[:2] / f"{digest}.json"

    def names(self) -> JobNames:
        """Which job each directory of the store holds, as its first part said (an object
        store reads it from the part otherwise: a GET per job directory per run)."""
        digest = hashlib.sha256(self.store_uri.encode("utf-8", "surrogatepass")).hexdigest()
        return JobNames(self.root / "names" / f"{digest}.json")

    def get(self, job: str, key: str | None) -> JobResult | None:
        """The cached result of ``job`` if it was computed from files with fingerprint ``key``."""
        if key is None:
            return None
        try:
            with open(self._path(job), encoding="utf-8") as f:
                held = json.load(f)
        except (OSError, ValueError):
            return None
        if not isinstance(held, dict) or held.get("key") != key or held.get("job") != job:
            return None
        result = held.get("result")
        return result if isinstance(result, dict) else None

    def put(self, job: str, key: str | None, result: JobResult) -> None:
        """Keep ``result`` for ``job`` under ``key`` (atomically: a reader sees the old file
        or the new one, never a part)."""
        if key is None:
            return
        path = self._path(job)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"key": key, "job": job, "result": result}, f, allow_nan=False)
            os.replace(tmp, path)
        except (OSError, ValueError):
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
