"""State kept on disk between runs: what a compacted job's read built, loaded instead of
built again.

A job's columnar archive (``badput compact``) no longer changes. The engine's state after
reading it (its columns, its sealed rows, what the first report left in its cache) is
the same for every later reader with the same options. :class:`StateCache` keeps that
state under a key the caller makes of everything it depends on (the archive's identity,
the options, the engine's code), so a second report of the job loads it (0.2 s for a
million steps, where reading the archive takes 1.5 s) and reads only what the job wrote
after its archive.

The cache is the user's own (``$XDG_CACHE_HOME/badput/state`` by default, or
``BADPUT_STATE_CACHE``; ``off`` turns it off), never the store's: nothing in a job's
directory is ever unpickled. Even so, loading allows only the classes a state is made
of (:class:`_StateUnpickler`): a file planted there runs no code. A file that cannot be
read, is cut short or holds anything else is a miss; a write that fails is skipped.
The cache only ever saves work: dropping it changes no number.

File layout: a magic line; the number of out-of-band buffers (numpy columns), each one's
length and the in-band pickle's (protocol 5); the buffers; the pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import struct
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from badput.runtime.env import BADPUT_STATE_CACHE, cache_home

__all__ = [
    "DEFAULT_MAX_BYTES",
    "StateCache",
    "code_fingerprint",
    "default_state_cache",
]

logger = logging.getLogger("badput")

_MAGIC: Final = b"badput-state 1\n"
_LENGTH: Final = struct.Struct("<Q")
_SUFFIX: Final = ".state"

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
    text from a log). ``max_bytes``: see :data:`DEFAULT_MAX_BYTES`."""

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES):
        self.root = Path(root)
        self.max_bytes = max_bytes

    def __repr__(self) -> str:
        return f"StateCache({str(self.root)!r}, max_bytes={self.max_bytes})"

    def path(self, key: str) -> Path:
        """The file of ``key``."""
        return self.root / (hashlib.sha256(key.encode()).hexdigest()[:40] + _SUFFIX)

    def load(self, key: str, modules: tuple[str, ...]) -> Any | None:
        """The state saved under ``key``, or None (none saved, or a file that is not a whole
        state of ``modules``' classes: see :class:`_StateUnpickler`)."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                state = _read(f, key, modules)
        except FileNotFoundError:
            return None
        except Exception as exc:  # a damaged or foreign file is a miss
            logger.debug("badput: state %s not used: %s", path, exc)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be removed
        return state

    def save(self, key: str, state: object) -> Path | None:
        """Keep ``state`` under ``key`` (written whole, then renamed: a reader sees the old
        file or the new one); the file, or None when it could not be written. Never
        raises: a full disk or a read-only cache costs only the next read's time."""
        target = self.path(key)
        buffers: list[pickle.PickleBuffer] = []
        try:
            body = pickle.dumps((key, state), protocol=5, buffer_callback=buffers.append)
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=self.root)
        except Exception as exc:  # the cache only ever saves work
            logger.debug("badput: state not kept in %s: %s", self.root, exc)
            return None
        try:
            with os.fdopen(fd, "wb") as f:
                _write(f, body, buffers)
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
            files = [(p.stat(), p) for p in self.root.glob("*" + _SUFFIX)]
        except OSError:
            return
        total = sum(st.st_size for st, _ in files)
        for st, path in sorted(files, key=lambda f: f[0].st_mtime_ns):
            if total <= self.max_bytes:
                break
            if path != keep:
                with contextlib.suppress(OSError):
                    path.unlink()  # (a reader that has it open keeps its bytes)
                total -= st.st_size


def _write(f: Any, body: bytes, buffers: list[pickle.PickleBuffer]) -> None:
    raws = [b.raw() for b in buffers]
    f.write(_MAGIC)
    f.write(_LENGTH.pack(len(raws)))
    for raw in raws:
        f.write(_LENGTH.pack(raw.nbytes))
    f.write(_LENGTH.pack(len(body)))
    for raw in raws:
        f.write(raw)
    f.write(body)
    f.flush()


def _read(f: Any, key: str, modules: tuple[str, ...]) -> Any:
    """The state in the file ``f``, checked to be ``key``'s and whole. Each out-of-band
    buffer is read into memory of its own, which its arrays keep (writable, as they were);
    the pickle itself is read as it is loaded (no copy of it in memory)."""
    if f.read(len(_MAGIC)) != _MAGIC:
        raise ValueError("not a state file")

    def length() -> int:
        raw = f.read(_LENGTH.size)
        if len(raw) != _LENGTH.size:
            raise ValueError("a state file cut short")
        return int(_LENGTH.unpack(raw)[0])

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
