"""An object store (``s3://bucket/prefix``, ``gs://``, ``az://``) as an :class:`EventStore`.

Layout under the prefix: ``<job>/<attempt>/<host>-<rank>-<pid>.jsonl.part-00000001``, ...:
a stream is the concatenation of its parts in number order (see :mod:`._shipper`, which
writes them). Reading lists the job's parts and fetches only those past the cursor: the
cursor's byte offset of a stream runs across its parts, so a
:class:`~badput.analysis.LiveJob` stays incremental over the network.

The client is obstore (``badput[s3]``, ``badput[gs]``, ``badput[az]``: the same one
package), configured as each cloud's own tools are (:mod:`._clouds`: ``AWS_*`` and
profiles, ``GOOGLE_*``, ``AZURE_*`` and connection strings); its errors are raised as
:class:`ObjectStoreError`, naming what to set when credentials are missing. See
docs/object-storage.md.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

from badput.formats.codec import decode_lines
from badput.runtime.optional import import_optional
from badput.store._base import Chunk, Cursor, EventWriter, ReadResult, Unread, WriterKey
from badput.store._clouds import ObjectStoreError, failed, make_client
from badput.store._jsonl import JsonlStore, safe_job_dir
from badput.store._lines import BOM, keep_parsed, parse_stream
from badput.store._names import FirstPart, JobNames, job_of, name_directories, named_by_itself
from badput.store._shipper import (
    DEFAULT_SHIP_INTERVAL,
    MAX_LOCAL_BYTES,
    BoundedSpooledWriter,
    Shipper,
    local_root,
)
from badput.store._spool import Orphans, SpooledWriter, ship_orphaned

__all__ = ["SCHEMES", "ObjectStore", "ObjectStoreError"]

#: URI scheme -> the extra that brings its client.
SCHEMES: Final = {"s3": "s3", "gs": "gs", "az": "az"}
_PART_MARK: Final = ".part-"
#: Parts fetched at once by a read.
_FETCHERS: Final = 16
#: Bytes of a job's first part read to learn which job its events name.
_HEAD_BYTES: Final = 64 << 10
#: Objects a listing request returns at most (S3's page; obstore asks for as many).
_PAGE: Final = 1000

#: A listed object: its key, size and etag ("" when the store gave none).
Listed = tuple[str, int, str]
#: A job's parts by stream: ``[(number, key, size, etag)]`` in number order.
JobParts = dict[str, list[tuple[int, str, int, str]]]


class ObjectStore:
    """Events in an object store: written through a local spool and event file shipped as
    part objects, read back part by part. ``local``: the machine's directory of this store's
    local files (default :func:`~badput.store._shipper.local_root`); ``client``: an obstore
    store to use instead of one made from the URI and the environment (tests); ``names``:
    where :meth:`jobs` remembers which job each directory holds between runs (a
    :class:`~badput.store.JobNames`; ``badput fleet`` gives its own)."""

    #: No: obstore's runtime does not survive ``fork`` (``badput fleet``'s pool: ``spawn``).
    fork_safe: Final = False

    def __init__(
        self,
        uri: str,
        *,
        ship_interval: float = DEFAULT_SHIP_INTERVAL,
        max_local_bytes: int = MAX_LOCAL_BYTES,
        local: str | os.PathLike[str] | None = None,
        client: Any = None,
        names: JobNames | None = None,
    ) -> None:
        self.scheme, self.bucket, self.prefix = _parse_uri(uri)
        self._uri = f"{self.scheme}://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.ship_interval = ship_interval
        self.max_local_bytes = max_local_bytes
        self.local = JsonlStore(Path(local) if local is not None else local_root(self._uri))
        self._client = client
        self._lock = threading.Lock()
        self._shipper: Shipper | None = None
        #: job directory -> its first part when read, and the job that part's events name
        self._names: dict[str, tuple[FirstPart, str]] = {}
        self.names = names
        #: Each job directory's parts as the last listing of every job (:meth:`jobs`) saw them.
        self._listed: dict[str, list[Listed]] | None = None
        #: Job directory -> every object of it a listing just saw: the next :meth:`parts` of
        #: its job takes it instead of listing again (once; see :meth:`_listed_for_read`).
        self._fresh: dict[str, list[Listed]] = {}

    def __getstate__(self) -> dict[str, Any]:
        """What a worker process is sent (``badput fleet``'s pool, Ray): the store's place
        and client, not its lock, shipper, nor what this process listed and named."""
        state = dict(self.__dict__)
        state.update(_lock=None, _shipper=None, _names={}, names=None, _listed=None, _fresh={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ObjectStore({self._uri!r})"

    @property
    def uri(self) -> str:
        return self._uri

    # ------------------------------------------------------------------ client

    @property
    def client(self) -> Any:
        """The obstore store of the bucket (made on first use)."""
        with self._lock:
            if self._client is None:
                with self._asking("configuring the client"):
                    self._client = make_client(self.scheme, self.bucket)
            return self._client

    @contextlib.contextmanager
    def _asking(self, what: str) -> Iterator[None]:
        """Raise an obstore error of ``what`` as an :class:`ObjectStoreError` that names this
        store and, for missing credentials, what the cloud's tools read (a missing object
        stays the client's ``NotFoundError``)."""
        try:
            yield
        except (ObjectStoreError, ImportError):
            raise
        except Exception as exc:
            if type(exc).__name__ == "NotFoundError":
                raise
            raise failed(self._uri, self.scheme, what, exc) from exc

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def _put(self, job_dir: str, rel: str, data: bytes) -> None:
        obstore = import_optional("obstore", self.scheme)
        key = self._key(job_dir, rel)
        with self._asking(f"uploading {key}"):
            obstore.put(self.client, key, data)

    def _get(self, key: str) -> bytes:
        obstore = import_optional("obstore", self.scheme)
        with self._asking(f"reading {key}"):
            return bytes(obstore.get(self.client, key).bytes())

    def _head(self, key: str, size: int) -> bytes:
        obstore = import_optional("obstore", self.scheme)
        with self._asking(f"reading {key}"):
            return bytes(
                obstore.get_range(self.client, key, start=0, length=min(size, _HEAD_BYTES))
            )

    def _list(self, prefix: str, *, first_page: bool = False) -> list[Listed]:
        """Every object under ``prefix``: key, size, etag (a request per 1,000 objects);
        with ``first_page``, the first 1,000 (one request)."""
        obstore = import_optional("obstore", self.scheme)
        out: list[Listed] = []
        with self._asking(f"listing {prefix or '/'}"):
            for batch in obstore.list(
                self.client, prefix + "/" if prefix else None, chunk_size=1000
            ):
                out += [(str(m["path"]), int(m["size"]), str(m.get("e_tag") or "")) for m in batch]
                if first_page:
                    break
        return out

    def listing(self) -> list[Listed]:
        """Every object under the prefix (a request per 1,000), for :meth:`jobs` and co."""
        return self._list(self.prefix)

    # ----------------------------------------------------------------- writing

    @property
    def shipper(self) -> Shipper:
        with self._lock:
            if self._shipper is None:
                self._shipper = Shipper(self.local.root, self._put, self.ship_interval, self.uri)
            return self._shipper

    def open_writer(self, job: str, key: WriterKey) -> EventWriter:
        """A writer into the local event file of ``key``'s stream, shipped in the background."""
        writer = self.local.open_writer(job, key)
        self.shipper.watch(self.local.job_dir(job).name)
        return writer

    def open_spooled_writer(
        self,
        job: str,
        key: WriterKey,
        segment_bytes: int,
        *,
        lock: threading.Lock | None = None,
        max_segments: int = 16,
    ) -> SpooledWriter:
        """The recorder's spooled stream on this machine (as on a directory store), its
        event file shipped by this store's :class:`Shipper`."""
        writer = BoundedSpooledWriter(
            self.local.job_dir(job),
            key.stream_name(),
            segment_bytes,
            lock=lock,
            max_segments=max_segments,
        )
        writer.shipper = self.shipper
        writer.max_local_bytes = self.max_local_bytes
        self.shipper.watch(writer.job_dir.name)
        return writer

    def ship_orphaned(self, job: str) -> Orphans:
        """Put what killed writers of ``job`` on this machine left in its spool into their
        local event files, and have the shipper upload every local file of the job (in the
        background: a recorder's thread calls this)."""
        done = ship_orphaned(self.local.job_dir(job))
        if self.local.job_dir(job).is_dir():
            self.shipper.watch(self.local.job_dir(job).name)
        return done

    def ship_pending(self, job: str) -> int:
        """Ship now, on the calling thread, everything of ``job`` this machine holds and
        has not shipped (``badput run`` does, before and after each attempt). Returns the
        bytes left unshipped; raises what the upload raises."""
        ship_orphaned(self.local.job_dir(job))
        if not self.local.job_dir(job).is_dir():
            return 0
        return self.shipper.ship_job(self.local.job_dir(job).name, wait=True)

    # ----------------------------------------------------------------- reading

    def jobs(self, listing: list[Listed] | None = None) -> list[str]:
        """The jobs under the prefix that hold at least one part, sorted, each by the name
        its events give it (a job's directory is its name made safe, :func:`safe_job_dir`:
        ``team/llama`` lives in ``team_llama``). One listing, then the first bytes of the
        first part of each directory that may hold another name (:func:`named_by_itself`)
        not seen before (16 at a time): not by this object, nor by :attr:`names` with the
        same first part (key, size and etag).

        The listing (or ``listing``, :meth:`listing`'s) is kept: :meth:`fingerprint` answers
        from it, and each job's next read (:meth:`parts`) takes its parts from it."""
        listing = self._list(self.prefix) if listing is None else listing
        self._listed, first = _by_directory(listing, self.prefix)
        self._fresh = dict(self._listed)
        name_directories(
            first, self._names, self.names, lambda p: self._first_job(p.key, p.size), _FETCHERS
        )
        return sorted({self._names[d][1] if d in self._names else d for d in first})

    def _first_job(self, key: str, size: int) -> str | Exception | None:
        """The job of the first decodable event in the first bytes of the part ``key``
        (None: none there; the exception when it could not be fetched)."""
        try:
            return _first_job_in(self._head(key, size))
        except Exception as exc:  # gone, denied, unreachable: the directory's name stands
            return exc

    def find_job(self, job: str) -> str | None:
        """``job`` as the store names it (its events' name when ``job`` is its directory's
        name), if it has shipped a part (``<directory>/<attempt>/<file>.part-N``); else
        None. One listing request of its directory (kept for the job's first read), not
        of every job as :meth:`jobs`; a part's first bytes if the directory needs naming."""
        directory = safe_job_dir(job)
        base = self._key(directory)
        objects = self._list(base, first_page=True)
        depth = base.count("/") + 2
        listed = [o for o in objects if _PART_MARK in o[0] and o[0].count("/") == depth]
        if not listed:
            return None
        _keep_fresh(self, directory, objects)
        return job if job != directory else self._job_of(directory, FirstPart(*min(listed)))

    def _job_of(self, directory: str, first: FirstPart) -> str:
        return job_of(directory, first, self.names, lambda p: self._first_job(p.key, p.size))

    def job_inside(self, listing: list[Listed] | None = None) -> tuple[ObjectStore, str] | None:
        """When this URI is a job's directory (``s3://b/runs/JOB``) or an attempt's
        (``.../JOB/0``) rather than a store root: the store root above it and the job
        (named by its events), as a local job's directory is read. One listing request
        (none given ``listing``, :meth:`listing`'s)."""
        whole = listing is not None
        listing = self._list(self.prefix, first_page=True) if listing is None else listing
        listed = [o for o in listing if _PART_MARK in o[0]]
        if not listed or not self.prefix:
            return None
        key, size, etag = min(listed)
        up = 2 - key[len(self.prefix) + 1 :].count("/")  # 1: a job's directory; 2: an attempt's
        names = self.prefix.split("/")
        if up not in (1, 2) or len(names) < up:
            return None
        directory = names[-up]
        parent = ObjectStore(
            f"{self.scheme}://{self.bucket}/" + "/".join(names[:-up]),
            ship_interval=self.ship_interval,
            max_local_bytes=self.max_local_bytes,
            client=self._client,
        )
        if self.names is not None:
            parent.names = JobNames(names_file(parent.uri))
        if up == 2:  # an attempt's: its first part is not its job's, to be remembered by
            real = directory if named_by_itself(directory) else self._first_job(key, size)
            named = isinstance(real, str) and safe_job_dir(real) == directory
            return parent, real if named and isinstance(real, str) else directory
        if whole:  # the job directory's listing: its first read need not list again
            parent._fresh[directory] = listing
        else:
            _keep_fresh(parent, directory, listing)
        return parent, parent._job_of(directory, FirstPart(key, size, etag))

    def parts(self, job: str) -> dict[str, list[tuple[int, str, int]]]:
        """``stream -> [(number, key, size)]`` of ``job``'s parts, in number order: one
        listing of the job's directory, or none when a listing that saw all of it was just
        made (:meth:`jobs`, :meth:`find_job`, :meth:`job_inside`): its first read after
        that takes what it saw, and lists again from then on (a :class:`LiveJob`'s
        updates)."""
        directory = safe_job_dir(job)
        base = self._key(directory)
        listed = self._fresh.pop(directory, None)
        return {
            stream: [(number, key, size) for number, key, size, _ in parts]
            for stream, parts in _job_parts(
                base, self._list(base) if listed is None else listed
            ).items()
        }

    def fingerprint(self, job: str) -> str:
        """What a read of ``job`` would fetch: its parts' keys, sizes and etags (equal
        fingerprints read equal events: ``badput fleet``'s cache key). From :meth:`jobs`'s
        last listing if it saw the job (no request), else one listing. An older listing
        than a read is a safe key for what it read: the read saw all it lists."""
        directory = safe_job_dir(job)
        base = self._key(directory)
        listed = self._listed.get(directory) if self._listed is not None else None
        found = _job_parts(base, self._list(base) if listed is None else listed)
        return "\n".join(
            f"{key}\0{size}\0{etag}"
            for _, parts in sorted(found.items())
            for _, key, size, etag in parts
        )

    def streams(self, job: str) -> list[str]:
        """The job's streams: shipped, or still only in this machine's local files (what
        ``badput run`` numbers the next attempt from)."""
        local = set(self.local.streams(job)) if self.local.job_dir(job).is_dir() else set()
        return sorted(set(self.parts(job)) | local)

    def read(
        self, job: str, cursor: Cursor | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        """See :meth:`EventStore.read`: one listing of the job, then only the parts past the
        cursor are fetched (at most :data:`_FETCHERS` at once). A read stops after the part
        in which ``max_bytes`` ran out."""
        return _read(self, job, cursor or Cursor(), max_bytes)


def _read(store: ObjectStore, job: str, cursor: Cursor, max_bytes: int | None) -> ReadResult:
    """:meth:`ObjectStore.read`."""
    out = Cursor(dict(cursor.offsets))
    plan, complete = _plan(store.parts(job), cursor, max_bytes)
    keys = [key for _, _, wanted in plan for _, key in wanted]
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 (import cost)

    with ThreadPoolExecutor(min(_FETCHERS, max(len(keys), 1))) as pool:
        fetched = dict(zip(keys, pool.map(store._get, keys), strict=True))
    chunks: list[Chunk] = []
    unread: list[Unread] = []
    for stream, offset, wanted in plan:
        blocks = [fetched[key] for _, key in wanted]
        blocks[0] = blocks[0][offset - wanted[0][0] :]
        lines = cursor.offsets.get(stream, (0, 0))[1]
        source = f"{store.uri}/{safe_job_dir(job)}/{stream}"
        parsed = parse_stream(blocks, source, lines, at_start=offset == 0)
        keep_parsed(parsed, stream, source, offset, lines, out=out, chunks=chunks, unread=unread)
    return ReadResult(chunks, out, unread, reached_end=complete)


def names_file(uri: str) -> Path:
    """Where this machine's readers of the object store ``uri`` remember its job
    directories' names (:class:`JobNames`): beside the store's local files
    (:func:`~badput.store._shipper.local_root`), ``<that directory>.names.json``."""
    root = local_root(uri)
    return root.with_name(root.name + ".names.json")


def remembering(uri: str) -> ObjectStore:
    """The object store ``uri`` whose :meth:`~ObjectStore.jobs` remember its directories'
    names on this machine (:func:`names_file`): what ``open_store`` gives, so that a
    second ``badput jobs`` or report makes no request to name them."""
    store = ObjectStore(uri)
    store.names = JobNames(names_file(store.uri))
    return store


def _keep_fresh(store: ObjectStore, directory: str, objects: list[Listed]) -> None:
    """Keep ``objects``, a listing of the job directory ``directory``, for its job's next
    read (:meth:`ObjectStore.parts`), when it is the whole directory (not a full page)."""
    if len(objects) < _PAGE:
        store._fresh[directory] = objects


def _parse_uri(uri: str) -> tuple[str, str, str]:
    """``scheme://bucket/prefix`` as its scheme (lower case), bucket and prefix."""
    scheme, _, rest = uri.partition("://")
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"not an object store URI: {uri!r}")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"object store URI without a bucket: {uri!r}")
    return scheme, bucket, prefix.strip("/")


def _by_directory(
    listing: list[Listed], prefix: str
) -> tuple[dict[str, list[Listed]], dict[str, FirstPart]]:
    """The parts of ``listing`` (under ``prefix``) by job directory, and each directory's
    first part among its streams (``<directory>/<attempt>/<file>.part-N``)."""
    listed: dict[str, list[Listed]] = {}
    first: dict[str, FirstPart] = {}
    cut = len(prefix) + 1 if prefix else 0
    for key, size, etag in listing:
        rel = key[cut:]
        directory, sep, _ = rel.partition("/")
        if sep and _PART_MARK in rel:
            listed.setdefault(directory, []).append((key, size, etag))
            if rel.count("/") == 2 and (directory not in first or key < first[directory].key):
                first[directory] = FirstPart(key, size, etag)
    return listed, first


def _job_parts(base: str, listed: Iterable[Listed]) -> JobParts:
    """The parts of the job under the key ``base`` among ``listed``, by stream."""
    found: JobParts = {}
    for key, size, etag in listed:
        if not key.startswith(base + "/"):
            continue
        stream, mark, number = key[len(base) + 1 :].rpartition(_PART_MARK)
        if not mark or not number.isdigit() or "/" not in stream:
            continue
        found.setdefault(stream, []).append((int(number), key, size, etag))
    for parts in found.values():
        parts.sort()
    return found


def _first_job_in(data: bytes) -> str | None:
    """The job of the first decodable event among the complete lines of ``data``."""
    for i, raw in enumerate(data.split(b"\n")[:-1]):
        line = raw.rstrip(b"\r")
        if i == 0 and line.startswith(BOM):
            line = line[len(BOM) :]
        if line:
            item = decode_lines([line])[0]
            if not isinstance(item, Exception):
                return item.job
    return None


def _plan(
    found: dict[str, list[tuple[int, str, int]]], cursor: Cursor, max_bytes: int | None
) -> tuple[list[tuple[str, int, list[tuple[int, str]]]], bool]:
    """What a read fetches: ``[(stream, offset, [(part's start, key)])]`` of the parts past
    the cursor (until ``max_bytes`` ran out), and whether that is all of them."""
    plan: list[tuple[str, int, list[tuple[int, str]]]] = []
    budget = max_bytes
    complete = True
    for stream, parts in sorted(found.items()):
        offset = cursor.offsets.get(stream, (0, 0))[0]
        start, wanted = 0, []
        for _number, key, size in parts:
            if start + size > offset and (budget is None or budget > 0):
                wanted.append((start, key))
                if budget is not None:
                    budget -= start + size - max(offset, start)
            elif start + size > offset:
                complete = False
            start += size
        if wanted:
            plan.append((stream, offset, wanted))
    return plan, complete
