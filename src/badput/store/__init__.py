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
from typing import Final, NamedTuple
from urllib.parse import unquote, urlsplit

from badput.events import Event
from badput.runtime.env import BADPUT_STORE, DEFAULT_STORE
from badput.store._archive import (
    ArchivedStore,
    Compacted,
    archive_of,
    compact,
    is_archive,
    read_meta,
    with_archive,
)
from badput.store._base import (
    Chunk,
    Cursor,
    EventStore,
    EventWriter,
    ReadResult,
    Unread,
    WriterKey,
    safe_name,
)
from badput.store._jsonl import (
    ARCHIVE_NAME,
    JsonlStore,
    SingleFileStore,
    first_event_below,
    first_event_of,
    first_job_below,
    has_jsonl_below,
    open_regular,
    safe_job_dir,
)
from badput.store._kept_read import KeptRead
from badput.store._lines import MAX_LINE_BYTES
from badput.store._memory import MemoryStore, memory_store
from badput.store._names import FirstPart, JobNames
from badput.store._object import ObjectStore, ObjectStoreError
from badput.store._reading import what_is, written_end
from badput.store._spool import SPOOL_DIR, Orphans, SpooledWriter, ship_orphaned

__all__ = [
    "ARCHIVE_NAME",
    "MAX_LINE_BYTES",
    "SPOOL_DIR",
    "ArchivedStore",
    "Chunk",
    "Compacted",
    "Cursor",
    "EventStore",
    "EventWriter",
    "FirstPart",
    "JobListing",
    "JobNames",
    "JsonlStore",
    "KeptRead",
    "MemoryStore",
    "ObjectStore",
    "ObjectStoreError",
    "Orphans",
    "ReadResult",
    "SingleFileStore",
    "SpooledWriter",
    "Unread",
    "WriterKey",
    "archive_of",
    "compact",
    "is_job_path",
    "job_sources",
    "list_job",
    "open_regular",
    "open_source",
    "open_store",
    "read_meta",
    "safe_job_dir",
    "ship_orphaned",
    "what_is",
    "with_archive",
    "written_end",
]

_SUPPORTED = (
    "file:///<absolute path>, memory://<name>, gcl://<project>/<log>, s3://<bucket>/<prefix>, "
    "gs://<bucket>/<prefix>, az://<container>/<prefix>, or a plain directory path"
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
    - ``s3://BUCKET/PREFIX``, ``gs://...``, ``az://...``: an object store
      (``badput.store._object.ObjectStore``; needs ``badput[s3]``/``[gs]``/``[az]``): written
      through a local spool shipped as part objects, configured from the cloud's environment.

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
        if scheme in ("s3", "gs", "az"):
            from badput.store._object import remembering  # noqa: PLC0415 (an extra's client)

            return remembering(text)
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
    """The store and job that ``path`` designates, for reading (:func:`_open_source`), read
    through the job's columnar archive when it has one (``badput compact``): a job's
    directory, file or store root, or the archive itself (``*.parquet``), whose files
    ``--replace`` removed."""
    archived = _archive_source(path, job)
    if archived is not None:
        return archived
    try:
        store, name = _open_source(path, job)
    except ValueError:
        archived = _archive_source(path, job, look_below=True)
        if archived is None:
            raise
        return archived
    return with_archive(store, name), name


def _archive_source(
    path: str | os.PathLike[str] | EventStore, job: str | None, *, look_below: bool = False
) -> tuple[EventStore, str] | None:
    """The job of an archive ``path`` names (the file), or, ``look_below``, of the archive in
    the directory ``path`` (a job's) or in its sub-directories (a store root's jobs)."""
    if not isinstance(path, (str, os.PathLike)) or "://" in os.fspath(path):
        return None
    p = Path(path)
    if p.name.endswith(".parquet") and is_archive(p):
        meta = read_meta(p)
        if meta["layout"] == "file":
            name = job if job is not None else str(meta["job"])
            jsonl = p.parent / str(meta["streams"][0][0]) if meta["streams"] else p
            return ArchivedStore(SingleFileStore(jsonl, name), name, p), name
        p = p.parent
    elif not look_below or not p.is_dir():
        return None
    if is_archive(p / ARCHIVE_NAME):
        real = str(read_meta(p / ARCHIVE_NAME)["job"])
        if job is not None and job != real:
            raise ValueError(
                f"{path} is the directory of job {real!r}, but job {job!r} was asked for"
            )
        dirs = None if safe_job_dir(real) == p.name else {real: p.name}
        return with_archive(JsonlStore(p.parent, job_dirs=dirs), real), real
    if _archives_below(p):
        store, name = _pick_job(JsonlStore(p), os.fspath(path), job)
        return with_archive(store, name), name
    return None


def _archives_below(p: Path) -> bool:
    """Whether a sub-directory of ``p`` holds a job's archive (a store root's job)."""
    try:
        return any(is_archive(sub / ARCHIVE_NAME) for sub in p.iterdir() if sub.is_dir())
    except OSError:
        return False


def _open_source(
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
       sub-directory named after that event's ``job`` (``<root>/<job>/<stream>.jsonl``,
       the name sanitised or as it is), or beside one named after another job, or
       when two sub-directories hold files of two jobs directly, neither named after
       its events' attempt (job directories another tool named, or renamed).
       ``job`` selects the job (by its name, or by its directory's); it may be omitted
       when the root holds exactly one. A job directory named after no job it holds
       (renamed, copied) is read as the job its events name (``JsonlStore.job_dirs``).
    3. **a job directory**: any other directory with ``.jsonl`` files below it (directly,
       or one level down as ``<job>/<attempt>/<stream>.jsonl``). The job is the ``job``
       of its first event (else the directory's name), whatever the directory is
       called; a ``job`` argument, if given, must name it.
    3b. **a directory inside a job directory** (an attempt's, ``<root>/<job>/0``): the
       whole job it belongs to, when a parent directory is named after its events' job,
       or when it is named after its events' attempt beside another attempt's directory
       of the same job (a renamed job's attempt). A ``job`` argument must name that job.
    4. **a store URI** (``memory://name``, ``file:///dir``, ``gcl://project/log``) or an
       :class:`EventStore`: treated as a store root. An object store's URI
       (``s3://bucket/prefix``) may also name a job's directory or an attempt's, as in 3.

    Raises ``ValueError`` naming ``path`` when it does not exist, holds no events,
    or ``job`` is missing, ambiguous or unknown.
    """
    if not isinstance(path, (str, os.PathLike)):
        return _pick_job(path, str(path.uri), job)
    text = os.fspath(path)
    if "://" in text and not text.lower().startswith("file://"):
        store = open_store(text)
        if isinstance(store, ObjectStore):
            return _object_source(store, text, job)
        if job is not None and text.lower().startswith("gcl://"):
            from badput.store._gcl import CloudLoggingStore  # noqa: PLC0415

            # Checking one job is one small request; listing the jobs reads the whole log.
            if isinstance(store, CloudLoggingStore) and store.has_job(job):
                return store, job
        return _pick_job(store, text, job)
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
    found = _locate(p.absolute(), text, job)
    return _pick_job(found, text, job) if isinstance(found, JsonlStore) else found


def _object_source(store: ObjectStore, text: str, job: str | None) -> tuple[EventStore, str]:
    """:func:`open_source` of an object store's URI: a job's (or an attempt's) directory is
    read as that job of the store above it, as a local one is; a store root's ``job`` is
    looked up by its directory alone (one listing, not the whole store's, kept for the
    job's first read)."""
    if job is not None:  # a job's parts are <dir>/<attempt>/<file>: never a job's own URI
        found = store.find_job(job)
        if found is not None:
            return store, found
    inside = store.job_inside()
    if inside is not None:
        parent, real = inside
        if job is not None and safe_job_dir(job) != safe_job_dir(real):
            raise ValueError(
                f"{text} is the directory of job {real!r}, but job {job!r} was asked for"
            )
        return parent, real if job is None or job == safe_job_dir(real) else job
    return _pick_job(store, text, job)


def job_sources(
    uri_or_path: str | os.PathLike[str] | EventStore,
    *,
    names: JobNames | None = None,
) -> list[tuple[EventStore, str]]:
    """Every job ``uri_or_path`` designates, each as the store and job to read it by:
    a store's jobs (a renamed job directory read as the job its events name), or the one
    job of a job directory, an attempt's directory or a file (see :func:`open_source`).
    ``names``: what an object store remembers its job directories' names in (see
    :class:`JobNames`). Raises ``ValueError`` for a path that does not exist or is neither."""
    if not isinstance(uri_or_path, (str, os.PathLike)):
        if isinstance(uri_or_path, JsonlStore):
            return [_archived(*_held(uri_or_path, name)) for name in uri_or_path.jobs()]
        if names is not None and isinstance(uri_or_path, ObjectStore):
            uri_or_path.names = names
        return [(uri_or_path, name) for name in uri_or_path.jobs()]
    text = os.fspath(uri_or_path)
    if "://" in text and not text.lower().startswith("file://"):
        store = open_store(text)
        if not isinstance(store, ObjectStore):
            return [(store, name) for name in store.jobs()]
        store.names = names if names is not None else store.names
        listing = store.listing()  # one listing: a job's directory, or every job's
        inside = store.job_inside(listing)
        return [inside] if inside is not None else [(store, n) for n in store.jobs(listing)]
    opened = open_store(text)
    if isinstance(opened, JsonlStore) and opened.root.is_dir():
        try:
            found = _locate(opened.root.absolute(), text, None)
        except ValueError:  # no event files: a root of jobs whose archives replaced them?
            if not _archives_below(opened.root):
                raise
            found = opened
        if isinstance(found, JsonlStore):
            return [_archived(*_held(found, name)) for name in found.jobs()]
    return [open_source(text)]


def _archived(store: EventStore, job: str) -> tuple[EventStore, str]:
    return with_archive(store, job), job


def is_job_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` designates one job: a file, a job's directory or a directory inside
    one; False for a store root, or a directory that holds no job yet (in which a job that
    has not written can be waited for)."""
    try:
        store, _job = open_source(path)
    except ValueError:  # no job yet, or several: a store root
        return False
    given = open_store(path)  # (a file:// URI names its directory)
    if isinstance(store, ArchivedStore):
        store = store.inner
    return not (
        isinstance(store, JsonlStore)
        and isinstance(given, JsonlStore)
        and store.root.absolute() == given.root.absolute()
    )


class JobListing(NamedTuple):
    """A job's files as one listing saw them (:func:`list_job`): what the first read of a
    :class:`~badput.analysis.LiveJob` given it plans from, without listing the job again."""

    store: EventStore
    job: str
    #: The job's streams in read order, and each file's size then (0: not a regular file);
    #: None for a store other than a directory of files (nothing to list ahead).
    streams: tuple[str, ...] | None
    sizes: tuple[int, ...] | None


def list_job(path: str | os.PathLike[str], job: str | None = None) -> JobListing:
    """The store and job ``path`` designates (:func:`open_source`), with the job's files
    listed and their sizes taken when it is a directory of files (:meth:`JsonlStore.listed`).

    ``badput report`` calls it in a helper process while it imports the engine: a job of
    10,000 attempt files takes 0.15 s to resolve, list and ``stat``, which then costs the
    command nothing. Raises what :func:`open_source` raises."""
    store, name = open_source(path, job)
    if isinstance(store, JsonlStore):
        streams, sizes = store.listed(name)
        return JobListing(store, name, streams, sizes)
    return JobListing(store, name, None, None)


def _locate(p: Path, text: str, job: str | None) -> JsonlStore | tuple[EventStore, str]:
    """What the directory ``p`` is: a store root (returned as a :class:`JsonlStore`), or
    the directory of a job or inside one (its store and job)."""
    if (
        job is not None
        and p.name != safe_job_dir(job)
        and _has_jsonl_at_depth(p / safe_job_dir(job), 1)
        and not _an_attempt_of_another_job(p / safe_job_dir(job), job)
    ):
        return JsonlStore(p)  # a store root holding --job
    first = first_event_below(p)
    if first is not None:
        rel, event = first
        name = safe_job_dir(event.job)
        if _is_attempt_dir(p, rel, event):
            return _job_dir(p.parent, text, job, (rel, event.job))
        # Neither the job's directory nor a root holding it: maybe a directory inside it
        # (one holding its files: an attempt's, or one below it).
        inside = (
            _enclosing_job_dir(p, name)
            if "/" not in rel and name not in (p.name, rel.split("/", 1)[0])
            else None
        )
        if inside is not None:
            return _job_dir(inside, text, job, (rel, event.job))
    named = None if first is None else (first[0], first[1].job)
    deepest_root = _has_jsonl_at_depth(p, 3, first_dirs=_ROOT_SAMPLE)
    if _has_jsonl_directly(p) and not deepest_root:  # (a store root's stray file: still one)
        return _job_dir(p, text, job, named)
    if first is None and not deepest_root and not _has_jsonl_at_depth(p, 2):
        denied = _unlistable_below(p)
        if denied is not None:  # not "no files": files it was not allowed to see
            raise ValueError(f"{text}: no .jsonl event files could be read: {denied}")
        raise ValueError(f"{text}: no .jsonl event files found below this directory")
    if deepest_root or (first is not None and _names_a_job_below(p, *first)):
        return JsonlStore(p)
    return _job_dir(p, text, job, named)


def _unlistable_below(p: Path, depth: int | None = None) -> str | None:
    """``"<directory>: <why>"`` of the first directory at ``p`` or below it (``depth``
    levels below at most) that cannot be listed (permission denied...); None when every
    one can. For the error that says why a directory's events cannot be found."""
    errors: list[OSError] = []
    top = os.fspath(p).rstrip(os.sep).count(os.sep)
    for dirpath, dirnames, _ in os.walk(p, onerror=errors.append):
        if depth is not None and dirpath.rstrip(os.sep).count(os.sep) - top >= depth:
            dirnames.clear()
        dirnames.sort()
        if errors:
            break
    for exc in errors:
        if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
            return f"{exc.filename}: {exc.strerror or exc}"
    return None


def _attempt_dir_name(event: Event) -> str | None:
    """The directory the recorder keeps ``event``'s attempt in (None: no attempt id)."""
    return None if event.attempt is None else safe_name(str(event.attempt), "0")


def _is_attempt_dir(p: Path, rel: str, event: Event) -> bool:
    """Whether ``p``, which holds the file ``rel`` whose first event is ``event``, is an
    attempt's directory inside its job's (``<job>/<attempt>/<stream>.jsonl``): named
    after the attempt, and either inside a directory named after the job, or beside
    another attempt's directory of the same job (a renamed or copied job). A copy of one
    attempt's directory on its own, or a link to one, is read as a job's directory."""
    if "/" in rel or p.name != _attempt_dir_name(event) or p.is_symlink():
        return False
    job_dir = safe_job_dir(event.job)
    if p.parent.name == job_dir:
        return True
    return p.name != job_dir and _another_attempt_beside(p, event.job)


#: Sub-directories beside a directory looked at for another attempt of its job.
_SIBLINGS_LOOKED_AT: Final = 4


def _another_attempt_beside(p: Path, job: str) -> bool:
    """Whether a sub-directory of ``p``'s parent other than ``p`` is an attempt's directory
    of ``job`` (its first file's first event of ``job``, named after that event's attempt).
    The first few holding ``.jsonl`` files directly are looked at, nothing below them."""
    looked = 0
    for name in _subdirs(p.parent):
        if name == p.name:
            continue
        event = _first_event_directly_in(p.parent / name)
        if event is None:
            continue
        if event.job == job and name == _attempt_dir_name(event):
            return True
        looked += 1
        if looked >= _SIBLINGS_LOOKED_AT:
            return False
    return False


def _an_attempt_of_another_job(directory: Path, job: str) -> bool:
    """Whether ``directory`` holds, directly, the files of an attempt named like it of a
    job other than ``job`` (``<job>/0`` when ``--job 0`` was asked of a job's directory)."""
    event = _first_event_directly_in(directory)
    return event is not None and event.job != job and directory.name == _attempt_dir_name(event)


def _subdirs(directory: Path) -> list[str]:
    """The names of the sub-directories of ``directory`` (links to one not followed), in
    name order; none when it cannot be listed."""
    return _files_and_subdirs(directory)[1]


def _files_and_subdirs(directory: Path) -> tuple[list[str], list[str]]:
    """The names of the ``.jsonl`` regular files directly in ``directory`` and of its
    sub-directories (links not followed), each in name order, from one listing (a job's
    directory of 10,000 attempts takes 5 ms to list); none when it cannot be listed."""
    files: list[str] = []
    subdirs: list[str] = []
    try:
        with os.scandir(directory) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    subdirs.append(e.name)
                elif e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False):
                    files.append(e.name)
    except OSError:
        return [], []
    return sorted(files), sorted(subdirs)


def _first_event_directly_in(directory: Path, files: list[str] | None = None) -> Event | None:
    """The first decodable event of the first ``.jsonl`` file directly in ``directory``
    (in name order) that has one; None when none has. ``files``: those files, if the
    caller has listed them (:func:`_files_and_subdirs`)."""
    if files is None:
        files = _files_and_subdirs(directory)[0]
    for name in files:
        first = first_event_of(directory / name)
        if first is not None:
            return first
    return None


def _names_a_job_below(p: Path, rel: str, event: Event) -> bool:
    """Whether ``p`` is a store root by its first file, ``rel`` (first event ``event``):
    in a sub-directory named after that event's job (``<root>/<job>/<stream>.jsonl``, the
    name sanitised or as it is), or beside one named after another job, or beside one
    holding another job's files directly, neither named after its attempt. One named after
    both the job and its attempt, inside a directory named after the job, is an attempt's
    (``<job>/<attempt>/<stream>.jsonl``: job "0", attempt 0)."""
    top = rel.split("/", 1)[0]
    if top in (safe_job_dir(event.job), event.job):
        return not (top == _attempt_dir_name(event) and p.name == top and rel.count("/") == 1)
    beside = _next_event_beside(p, top)
    if beside is None or beside[2].job == event.job:
        return False
    name, beside_rel, beside_event = beside
    if name in _dir_names(beside_event.job):
        return True
    # Two directories holding files of two jobs directly, neither named after its events'
    # attempt (so neither is an attempt's directory): jobs' directories under other names.
    return (
        rel.count("/") == 1
        and beside_rel.count("/") == 0
        and top != _attempt_dir_name(event)
        and name != _attempt_dir_name(beside_event)
    )


def _dir_names(job: str) -> tuple[str, str]:
    """The names a directory of ``job`` may have: its sanitised name, or the job as it is."""
    return safe_job_dir(job), job


def _next_event_beside(p: Path, top: str) -> tuple[str, str, Event] | None:
    """``(directory, stream, event)``: the first sub-directory of ``p`` after ``top`` with
    an event below it, the file below it that holds the first, and that event (None: none
    has one)."""
    for name in _subdirs(p):
        if name > top:
            first = first_event_below(p / name)
            if first is not None:
                return name, *first
    return None


#: How far above a directory holding event files its job's directory may be (an attempt's
#: directory is one below; a directory of its own inside it, two). Never further: an
#: ancestor that happens to be named like the job (``/tmp/<job>/...``) is not its directory.
_JOB_DIR_ABOVE: Final = 2


def _enclosing_job_dir(p: Path, name: str) -> Path | None:
    """The directory just above ``p`` called ``name`` (a job's directory ``p`` is inside,
    :data:`_JOB_DIR_ABOVE` levels up at most), if any."""
    for parent in p.parents[:_JOB_DIR_ABOVE]:
        if parent.name == name:
            return parent
    return None


def _job_dir(
    p: Path, text: str, job: str | None, first: tuple[str, str] | None
) -> tuple[EventStore, str]:
    real = p.name if first is None else _real_job_name(p, otherwise=first[1], prefer=job)
    if job is not None and job != real and safe_job_dir(job) != p.name:
        raise ValueError(f"{text} is the directory of job {real!r}, but job {job!r} was asked for")
    if safe_job_dir(real) == p.name:
        return JsonlStore(p.parent), real
    # A job directory under another name (renamed, copied): read it as the job its events name.
    return JsonlStore(p.parent, job_dirs={real: p.name}), real


#: Sub-directories of a directory looked into to tell a store root by the depth of its
#: files: a store's first jobs show its layout, and a job's directory of 10,000 attempts
#: is not walked whole to learn that none of its files lies three levels down (0.15 s).
_ROOT_SAMPLE: Final = 8


def _has_jsonl_at_depth(base: Path, depth: int, *, first_dirs: int | None = None) -> bool:
    """True if a ``.jsonl`` file lies ``depth`` or more levels below ``base`` (within its
    first ``first_dirs`` sub-directories in name order, when given)."""
    if first_dirs is None:
        return has_jsonl_below(base, depth)
    # A whole walk of the first few: the sub-directories' name order needs the top listed.
    top = os.fspath(base)
    base_seps = top.rstrip(os.sep).count(os.sep)
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath == top:
            dirnames.sort()
            del dirnames[first_dirs:]
        # separators counted, not a Path made per directory (a job of 10,000 attempts)
        level = dirpath.rstrip(os.sep).count(os.sep) - base_seps + 1
        if level >= depth and any(f.endswith(".jsonl") for f in filenames):
            return True
    return False


def _pick_job(store: EventStore, text: str, job: str | None) -> tuple[EventStore, str]:
    """The store and job ``job`` names in ``store`` (the only one when None). In a
    directory store, a job is a directory: named after the job (sanitised), or renamed or
    copied, when it is read as the job its events name (``job_dirs``); ``job`` may give
    either name."""
    if job is not None and isinstance(store, JsonlStore):
        # The first two of the rules below, each by the job's directory alone; only a job
        # whose directory is named otherwise (renamed, copied) needs every job listed.
        if store.holds_job_dir(job):
            return _held(store, job, prefer=job)
        if safe_job_dir(job) != job and store.holds_job_dir(safe_job_dir(job)):
            return store, job
    jobs = store.jobs()
    if job is not None:
        if isinstance(store, JsonlStore):
            if job in jobs:
                return _held(store, job, prefer=job)
            if safe_job_dir(job) in jobs:
                return store, job  # its events name it as given; its directory is sanitised
            holding = [d for d in jobs if _real_job_name(store.root / d) == job]
            if len(holding) == 1:  # a renamed job directory, asked for by its job's name
                return _held(store, holding[0])
        elif job in jobs or safe_job_dir(job) in jobs:
            return store, job
        if isinstance(store, JsonlStore):  # its directory there, but not to be listed?
            denied = _unlistable_below(store.root / safe_job_dir(job), depth=0)
            if denied is not None:
                raise ValueError(f"{text}: job {job!r} cannot be read: {denied}")
        listing = ", ".join(jobs) if jobs else "none"
        raise ValueError(f"{text}: no job {job!r} in this store (jobs: {listing})")
    if len(jobs) == 1:
        if isinstance(store, JsonlStore):
            return _held(store, jobs[0])
        return store, jobs[0]
    if not jobs:
        raise ValueError(f"{text}: the store holds no jobs")
    raise ValueError(f"{text} holds several jobs; choose one with --job/job=: {', '.join(jobs)}")


def _held(store: JsonlStore, directory: str, prefer: str | None = None) -> tuple[JsonlStore, str]:
    """The job the directory ``directory`` of ``store`` holds, and a store that reads it
    there (one with ``job_dirs`` when the directory is not named after the job). ``prefer``:
    that job, if the directory holds it (two jobs, ``team/llama`` and ``team_llama``, share
    the directory ``team_llama``)."""
    real = _real_job_name(store.root / directory, prefer=prefer)
    if safe_job_dir(real) == directory or store.job_dirs.get(real) == directory:
        return store, real
    return JsonlStore(store.root, job_dirs={**store.job_dirs, real: directory}), real


#: Sub-directories of a job's directory whose first events say which job it holds.
_JOB_SAMPLE: Final = 8


def _real_job_name(
    directory: Path, otherwise: str | None = None, *, prefer: str | None = None
) -> str:
    """The job a job's directory holds: ``prefer`` if its first files' events are of it;
    else the one it is named after, if one of them is of it (a stray file of another job
    renames no directory); else the one job they are all of (a renamed or copied
    directory); else ``otherwise``, or the directory's name."""
    jobs = _jobs_sampled(directory)
    if prefer is not None and prefer in jobs:
        return prefer
    named = [job for job in sorted(jobs) if directory.name in _dir_names(job)]
    if named:
        return named[0]
    if len(jobs) == 1:
        return jobs.pop()
    return otherwise if otherwise is not None else directory.name


def _jobs_sampled(directory: Path) -> set[str]:
    """The jobs of the first event of the first file directly in ``directory`` and of
    the first events below its first :data:`_JOB_SAMPLE` sub-directories that hold one."""
    jobs: set[str] = set()
    files, subdirs = _files_and_subdirs(directory)
    direct = _first_event_directly_in(directory, files)
    if direct is not None:
        jobs.add(direct.job)
    sampled = 0
    for name in subdirs:
        first = first_job_below(directory / name)
        if first is not None:
            jobs.add(first[1])
            sampled += 1
            if sampled >= _JOB_SAMPLE:
                break
    return jobs
