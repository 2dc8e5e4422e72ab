"""Where events are kept: the :class:`EventStore` protocol and its implementations.

- :class:`JsonlStore`: a directory of append-only JSON-lines files (the default).
- :class:`MemoryStore`: the same semantics in memory, for tests.
- :class:`SingleFileStore`: one ``.jsonl`` file, read-only.

:func:`open_store` turns a URI or path into a store (for writers and readers);
:func:`open_source` turns what a user points a report at (a store root, a job
directory or a single file) into a store and a job name.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from badput._env import BADPUT_STORE, DEFAULT_STORE
from badput.store._base import (
    Chunk,
    Cursor,
    EventStore,
    EventWriter,
    ReadResult,
    Unread,
    WriterKey,
)
from badput.store._jsonl import (
    JsonlStore,
    MappedWriter,
    SingleFileStore,
    first_job_below,
    safe_job_dir,
)
from badput.store._memory import MemoryStore, memory_store

__all__ = [
    "Chunk",
    "Cursor",
    "EventStore",
    "EventWriter",
    "JsonlStore",
    "MappedWriter",
    "MemoryStore",
    "ReadResult",
    "SingleFileStore",
    "Unread",
    "WriterKey",
    "open_source",
    "open_store",
    "safe_job_dir",
]

_SUPPORTED = (
    "file:///<absolute path>, memory://<name>, gcl://<project>/<log>, or a plain directory path"
)


def open_store(uri_or_path: str | os.PathLike[str] | EventStore | None = None) -> EventStore:
    """Open the store a URI or path names.

    - ``None``: the ``BADPUT_STORE`` environment variable, else ``./badput-runs``.
    - an :class:`EventStore` instance: returned as is.
    - ``memory://name``: the process-wide :class:`MemoryStore` called ``name``.
    - ``file:///abs/dir`` or a plain path: a :class:`JsonlStore` rooted there (a
      path to an existing regular file opens a read-only :class:`SingleFileStore`).
    - ``gcl://PROJECT/LOG``: the Cloud Logging log ``LOG`` of ``PROJECT``, in
      ml-goodput-measurement's format (``badput.store._gcl.CloudLoggingStore``; needs
      ``badput[gcp]``, imported on first use, not here).

    Nothing is created on disk here. Any other scheme raises ``ValueError``
    naming the supported ones.
    """
    if uri_or_path is None:
        uri_or_path = os.environ.get(BADPUT_STORE) or DEFAULT_STORE
    if not isinstance(uri_or_path, (str, os.PathLike)):
        if isinstance(uri_or_path, EventStore):
            return uri_or_path
        raise TypeError(f"expected a store, URI or path, got {type(uri_or_path).__name__}")
    text = os.fspath(uri_or_path)
    if "://" in text:
        scheme, _, rest = text.partition("://")
        scheme = scheme.lower()
        if scheme == "memory":
            return memory_store(rest.strip("/") or "default")
        if scheme == "gcl":
            from badput.store._gcl import CloudLoggingStore  # noqa: PLC0415 (rarely used)

            return CloudLoggingStore.from_uri(text)
        if scheme == "file":
            parts = urlsplit(text)
            if parts.netloc not in ("", "localhost"):
                raise ValueError(f"file:// URI with a remote host is not supported: {text!r}")
            path = unquote(parts.path)
            if not path:
                raise ValueError(f"file:// URI without a path: {text!r}")
            return _path_store(Path(path))
        raise ValueError(
            f"unsupported store URI scheme {scheme + '://'!r} in {text!r}; supported: {_SUPPORTED}"
        )
    return _path_store(Path(text))


def _path_store(path: Path) -> EventStore:
    if path.is_file():
        return SingleFileStore(path)
    return JsonlStore(path)


def _has_jsonl_directly(directory: Path) -> bool:
    try:
        return any(e.is_file() and e.name.endswith(".jsonl") for e in os.scandir(directory))
    except OSError:
        return False


def open_source(
    path: str | os.PathLike[str] | EventStore, job: str | None = None
) -> tuple[EventStore, str]:
    """The store and job that ``path`` designates, for reading.

    ``path`` may be:

    1. **a ``.jsonl`` file** (any regular file): a read-only
       :class:`SingleFileStore`; the job is ``job`` if given, else the ``job``
       field of the file's first valid event, else the file name without suffix.
    2. **a store root**: a directory with no ``.jsonl`` file directly inside, whose
       layout is ``<root>/<job>/...``. It is recognised when a ``.jsonl`` file lies
       three or more levels below it (``<root>/<job>/<attempt>/<stream>.jsonl``, the
       recorder's layout), or when the first decodable event below it lies in a
       sub-directory named after that event's ``job`` (``<root>/<job>/<stream>.jsonl``).
       ``job`` selects the job; it may be omitted when the root holds exactly one.
    3. **a job directory**: any other directory with ``.jsonl`` files below it (directly,
       or one level down as ``<job>/<attempt>/<stream>.jsonl``). The job is the ``job``
       of its first event (else the directory's name), whatever the directory is
       called; a ``job`` argument, if given, must name it.
    3b. **a directory inside a job directory** (an attempt's, ``<root>/<job>/0``): the
       whole job it belongs to, when a parent directory is named after its events' job.
    4. **a store URI** (``memory://name``, ``file:///dir``, ``gcl://project/log``) or an
       :class:`EventStore`: treated as a store root.

    Raises ``ValueError`` naming ``path`` when it does not exist, holds no events,
    or ``job`` is missing, ambiguous or unknown.
    """
    if not isinstance(path, (str, os.PathLike)):
        return path, _pick_job(path, str(path.uri), job)
    text = os.fspath(path)
    if "://" in text and not text.lower().startswith("file://"):
        store = open_store(text)
        if job is not None and text.lower().startswith("gcl://"):
            from badput.store._gcl import CloudLoggingStore  # noqa: PLC0415

            # Checking one job is one small request; listing the jobs reads the whole log.
            if isinstance(store, CloudLoggingStore) and store.has_job(job):
                return store, job
        return store, _pick_job(store, text, job)
    if text.lower().startswith("file://"):
        store = open_store(text)
        if isinstance(store, SingleFileStore):
            p = store.path
        else:
            assert isinstance(store, JsonlStore)
            p = store.root
    else:
        p = Path(text)
    if p.is_file():
        single = SingleFileStore(p, job)
        return single, single.job
    if not p.is_dir():
        if p.exists():  # a FIFO, socket or device: never opened (it could block forever)
            raise ValueError(f"{text}: not a regular file or a directory")
        raise ValueError(f"{text}: no such file or directory")
    p = p.absolute()
    if (
        job is not None
        and p.name != safe_job_dir(job)
        and _has_jsonl_at_depth(p / safe_job_dir(job), 1)
    ):
        root = JsonlStore(p)  # a store root holding --job (whatever else lies in it)
        return root, _pick_job(root, text, job)
    first = first_job_below(p)
    if first is not None:
        name = safe_job_dir(first[1])
        # Neither the job's directory nor a root holding it: maybe a directory inside it.
        inside = (
            None if name in (p.name, first[0].split("/", 1)[0]) else _enclosing_job_dir(p, name)
        )
        if inside is not None:
            return JsonlStore(inside.parent), first[1]
    if _has_jsonl_directly(p):
        return _job_dir(p, text, job, first)
    deepest_root = _has_jsonl_at_depth(p, 3)
    if first is None and not deepest_root and not _has_jsonl_at_depth(p, 2):
        raise ValueError(f"{text}: no .jsonl event files found below this directory")
    is_root = deepest_root or (
        first is not None and first[0].split("/", 1)[0] == safe_job_dir(first[1])
    )
    if is_root:
        root = JsonlStore(p)
        return root, _pick_job(root, text, job)
    return _job_dir(p, text, job, first)


def _enclosing_job_dir(p: Path, name: str) -> Path | None:
    """The directory above ``p`` called ``name`` (a job's directory ``p`` is inside), if any."""
    for parent in p.parents:
        if parent.name == name:
            return parent
        if parent == parent.parent:
            break
    return None


def _job_dir(
    p: Path, text: str, job: str | None, first: tuple[str, str] | None
) -> tuple[EventStore, str]:
    real = first[1] if first is not None else p.name
    if job is not None and job != real and safe_job_dir(job) != p.name:
        raise ValueError(f"{text} is the directory of job {real!r}, but job {job!r} was asked for")
    if safe_job_dir(real) == p.name:
        return JsonlStore(p.parent), real
    # A job directory under another name (renamed, copied): read it as the job its events name.
    return JsonlStore(p.parent, job_dirs={real: p.name}), real


def _has_jsonl_at_depth(base: Path, depth: int) -> bool:
    """True if a ``.jsonl`` file lies ``depth`` or more levels below ``base``."""
    base_depth = len(base.parts)
    for dirpath, _dirnames, filenames in os.walk(base):
        level = len(Path(dirpath).parts) - base_depth + 1
        if level >= depth and any(f.endswith(".jsonl") for f in filenames):
            return True
    return False


def _pick_job(store: EventStore, text: str, job: str | None) -> str:
    jobs = store.jobs()
    if job is not None:
        if job in jobs and isinstance(store, JsonlStore):
            return _real_job_name(store.root / job)  # a directory name: the job it holds
        if job in jobs or safe_job_dir(job) in jobs:
            # The events name the job as given; its directory is only its sanitised name.
            return job
        listing = ", ".join(jobs) if jobs else "none"
        raise ValueError(f"{text}: no job {job!r} in this store (jobs: {listing})")
    if len(jobs) == 1:
        if isinstance(store, JsonlStore):
            return _real_job_name(store.root / jobs[0])
        return jobs[0]
    if not jobs:
        raise ValueError(f"{text}: the store holds no jobs")
    raise ValueError(f"{text} holds several jobs; choose one with --job/job=: {', '.join(jobs)}")


def _real_job_name(directory: Path) -> str:
    """The job a store's directory holds: its events' ``job`` if the name is its sanitised form."""
    first = first_job_below(directory)
    if first is not None and safe_job_dir(first[1]) == directory.name:
        return first[1]
    return directory.name
