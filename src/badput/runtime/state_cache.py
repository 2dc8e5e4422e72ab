"""State kept on disk between runs: what a compacted job's read built, loaded instead of
built again.

A job's columnar archive (``badput compact``) no longer changes. The engine's state after
reading it (its columns, its sealed rows, what the first report left in its cache) is
the same for every later reader with the same options. :class:`StateCache` keeps that
state under a key the caller makes of everything it depends on (the archive's identity,
the options, the engine's code), so a second report of the job loads it (0.3 s for a
million steps, where reading the archive takes 1.5 s) and reads only what the job wrote
after its archive.

The cache is the user's own (``$XDG_CACHE_HOME/badput/state`` by default, or
``BADPUT_STATE_CACHE``; ``off`` turns it off), never the store's: nothing in a job's
directory is ever unpickled. Even so, loading allows only the classes a state is made
of (:class:`_StateUnpickler`): a file planted there runs no code. A file that cannot be
read, is cut short or holds anything else is a miss; a write that fails is skipped.
The cache only ever saves work: dropping it changes no number.

File layout: a magic line; a note (JSON, with its length: what a loader checks before it
reads the rest); the number of out-of-band buffers (numpy columns), each one's length and
the in-band pickle's (protocol 5); the buffers; the pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pickle
import re
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from badput.runtime.env import BADPUT_STATE_CACHE, cache_home
from badput.runtime.shared_work import fork_safe

__all__ = [
    "DEFAULT_MAX_BYTES",
    "StateCache",
    "code_fingerprint",
    "default_state_cache",
]

logger = logging.getLogger("badput")

_MAGIC: Final = b"badput-state 2\n"
_LENGTH: Final = struct.Struct("<Q")
_SUFFIX: Final = ".state"
_PART: Final = ".tmp"  # a file being written: ".badput-state-<random>.tmp"
_PART_PREFIX: Final = ".badput-state-"
#: The names of this cache's files: nothing else in the directory is ever removed (a
#: ``BADPUT_STATE_CACHE`` pointed at a directory of other files loses none of them).
_OURS: Final = re.compile(r"[0-9a-f]{40}\.state|\.badput-state-[A-Za-z0-9_]+\.tmp")
_PART_LIFE: Final = 24 * 3600.0
_NOTE_MOST: Final = 64 * 1024 * 1024  # (a note is a few kB: more is not a state file)

#: What the cache keeps at most (bytes): the files used longest ago are removed first.
#: One compacted job of a million steps with a data load each keeps about 250 MB.
DEFAULT_MAX_BYTES: Final = 4 * 1024**3

#: Classes and functions a state may be made of, besides the classes of the modules
#: :meth:`StateCache.load` is given: numpy's arrays and dtypes, ``array.array``, and the
#: few builtin containers pickle names.
_ALLOWED: Final = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("array", "array"),
        ("array", "_array_reconstructor"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "bytearray"),
        ("builtins", "complex"),
        ("builtins", "slice"),
        ("collections", "deque"),
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),
        ("copyreg", "_reconstructor"),
    }
)


class _StateUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :data:`_ALLOWED` and the *classes* of ``modules``
    (a module named exactly, or a package and everything below it): no function of
    theirs, nothing of any other module (``os.system`` is refused, so is ``eval``)."""

    def __init__(self, file: Any, modules: tuple[str, ...], buffers: Iterable[Any]) -> None:
        super().__init__(file, buffers=buffers)
        self._modules = modules

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if any(module == m or module.startswith(m + ".") for m in self._modules):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a state")


def code_fingerprint(packages: Iterable[str | os.PathLike[str]]) -> str:
    """A digest of the source of ``packages`` (directories of ``.py`` files) and of the
    Python and numpy that run it: a state pickled by other code is never loaded."""
    digest = hashlib.sha256(sys.version.encode())
    numpy = sys.modules.get("numpy")
    digest.update(str(getattr(numpy, "__version__", "")).encode())
    for package in packages:
        for path in sorted(Path(package).rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


class StateCache:
    """Pickled states under ``root``, one file a key (its name a digest of the key: never
    text from a log). ``max_bytes``: see :data:`DEFAULT_MAX_BYTES`; ``background``: see
    :meth:`save`."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        background: bool = True,
    ) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.background = background

    def __repr__(self) -> str:
        return f"StateCache({str(self.root)!r}, max_bytes={self.max_bytes})"

    def path(self, key: str) -> Path:
        """The file of ``key``."""
        return self.root / (hashlib.sha256(key.encode()).hexdigest()[:40] + _SUFFIX)

    def load(
        self,
        key: str,
        modules: tuple[str, ...],
        accept: Callable[[Any], bool] = lambda note: True,
    ) -> Any | None:
        """The state saved under ``key``, or None: none saved, a file that is not a whole
        state of ``modules``' classes (see :class:`_StateUnpickler`), or one whose note
        (see :meth:`save`) ``accept`` refuses: then nothing but the note is read."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                state = _read(f, key, modules, accept)
        except (FileNotFoundError, _RefusedError):
            return None
        except Exception as exc:  # a damaged or foreign file is a miss
            logger.debug("badput: state %s not used: %s", path, exc)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be removed
        return state

    def save(self, key: str, state: object, note: object = None) -> Path | None:
        """Keep ``state`` under ``key`` (written whole, then renamed: a reader sees the old
        file or the new one); the file, or None when it could not be written. Never
        raises: a full disk or a read-only cache costs only the next read's time.
        ``note``: a little JSON a loader checks before it reads the state (``accept``).

        With ``background`` (the default) and forking safe (no other thread), a process of
        its own writes it while the caller goes on: pickling a million steps' state takes
        0.6 s and 240 MB, which a report would otherwise wait for and peak with. The file
        appears once whole; the call returns the path it will have."""
        try:
            header = json.dumps(note).encode()
        except (TypeError, ValueError) as exc:  # (a caller's mistake: said, never raised)
            logger.debug("badput: state not kept: its note is not JSON: %s", exc)
            return None

        def write() -> Path | None:
            return self._write(key, state, header)

        if self.background and fork_safe() and _in_background(write):
            return self.path(key)
        return write()

    def _write(self, key: str, state: object, note: bytes) -> Path | None:
        target = self.path(key)
        buffers: list[pickle.PickleBuffer] = []
        try:
            body = pickle.dumps((key, state), protocol=5, buffer_callback=buffers.append)
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_PART_PREFIX, suffix=_PART, dir=self.root)
        except Exception as exc:  # the cache only ever saves work
            logger.debug("badput: state not kept in %s: %s", self.root, exc)
            return None
        try:
            with os.fdopen(fd, "wb") as f:
                _write(f, note, body, buffers)
            os.replace(tmp, target)
        except Exception as exc:  # (as above)
            logger.debug("badput: state not kept in %s: %s", self.root, exc)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return None
        self._evict(keep=target)
        return target

    def _evict(self, keep: Path) -> None:
        """Remove the files used longest ago until the cache holds at most ``max_bytes``
        (``keep``, just written, stays even when it alone is larger)."""
        try:
            ours = [p for p in self.root.iterdir() if _OURS.fullmatch(p.name)]
            files = [(p.stat(), p) for p in ours if p.name.endswith(_SUFFIX)]
            parts = [(p.stat(), p) for p in ours if p.name.endswith(_PART)]
        except OSError:
            return
        for st, path in parts:  # a write that died (a power cut): gone after a day
            if st.st_mtime < time.time() - _PART_LIFE:
                with contextlib.suppress(OSError):
                    path.unlink()
        total = sum(st.st_size for st, _ in files)
        for st, path in sorted(files, key=lambda f: f[0].st_mtime_ns):
            if total <= self.max_bytes:
                break
            if path != keep:
                with contextlib.suppress(OSError):
                    path.unlink()  # (a reader that has it open keeps its bytes)
                total -= st.st_size


def _in_background(work: Callable[[], object]) -> bool:
    """Run ``work`` in a process of its own that nobody waits for (forked twice: the
    caller reaps the first at once, the second is the system's), in a session of its own (a
    Ctrl-C of the command does not cut its write short) and holding none of the caller's
    files (a pipe the command writes to ends when the command does); whether it started."""
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:  # pragma: no cover (a forked process: its coverage is not collected)
        try:
            if os.fork() == 0:
                os.setsid()
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.closerange(3, _max_fd())
                work()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return True


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (OSError, ValueError):
        return 4096


class _RefusedError(Exception):
    """A state whose note the loader refused (not an error: a state of another time)."""


def _write(f: Any, note: bytes, body: bytes, buffers: list[pickle.PickleBuffer]) -> None:
    raws = [b.raw() for b in buffers]
    f.write(_MAGIC)
    f.write(_LENGTH.pack(len(note)))
    f.write(note)
    f.write(_LENGTH.pack(len(raws)))
    for raw in raws:
        f.write(_LENGTH.pack(raw.nbytes))
    f.write(_LENGTH.pack(len(body)))
    for raw in raws:
        f.write(raw)
    f.write(body)
    f.flush()


def _read(f: Any, key: str, modules: tuple[str, ...], accept: Callable[[Any], bool]) -> Any:
    """The state in the file ``f``, checked to be ``key``'s and whole, once ``accept`` has
    taken its note (else :class:`_RefusedError`). Each out-of-band buffer is read into memory of
    its own, which its arrays keep (writable, as they were); the pickle itself is read as it
    is loaded (no copy of it in memory)."""
    if f.read(len(_MAGIC)) != _MAGIC:
        raise ValueError("not a state file")

    def length() -> int:
        raw = f.read(_LENGTH.size)
        if len(raw) != _LENGTH.size:
            raise ValueError("a state file cut short")
        return int(_LENGTH.unpack(raw)[0])

    n_note = length()
    if n_note > _NOTE_MOST:
        raise ValueError(f"a note of {n_note} bytes")
    if not accept(json.loads(f.read(n_note))):
        raise _RefusedError
    sizes = [length() for _ in range(length())]
    n_body = length()
    if os.fstat(f.fileno()).st_size != f.tell() + sum(sizes) + n_body:
        raise ValueError("a state file of another size than it says")
    buffers = []
    for size in sizes:
        buffer = bytearray(size)
        if f.readinto(buffer) != size:
            raise ValueError("a state file cut short")
        buffers.append(buffer)
    saved_key, state = _StateUnpickler(f, modules, buffers).load()
    if saved_key != key:  # (two keys of one digest: never in practice, but never wrong)
        raise ValueError("a state of another key")
    return state


def default_state_cache(env: dict[str, str] | None = None) -> StateCache | None:
    """The cache ``BADPUT_STATE_CACHE`` names (a directory; ``off`` or ``0``: none), else
    ``$XDG_CACHE_HOME/badput/state`` (default ``~/.cache/badput/state``)."""
    env = dict(os.environ) if env is None else env
    named = env.get(BADPUT_STATE_CACHE, "").strip()
    if named.lower() in {"off", "0", "false", "no"}:
        return None
    return StateCache(named or cache_home(env) / "state")
