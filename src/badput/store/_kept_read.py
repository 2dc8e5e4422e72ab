"""A compacted job's cold read, kept between runs: see :mod:`badput.runtime.state_cache`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from badput.store._archive import ArchivedStore
from badput.store._base import Cursor, EventStore, Unread

if TYPE_CHECKING:  # (a store is imported by every recorder: pickle and hashlib are not)
    from badput.runtime.state_cache import StateCache

__all__ = ["KeptRead"]


@functools.cache
def _code() -> str:
    """The digest of badput's own code, which a kept state is made by (9 ms, once)."""
    from badput.runtime.state_cache import code_fingerprint  # noqa: PLC0415 (see above)

    return code_fingerprint([Path(__file__).resolve().parents[1]])


class KeptRead:
    """The state a cold read of a job's archive alone builds, in a :class:`StateCache`
    under a key of all it depends on: badput's code, the archive file (a compaction writes
    a new one), the job and the reader's options. The reader loads it (:meth:`load`) instead
    of reading the archive, or, on a miss, notes its read (:meth:`read`) and keeps its
    state (:meth:`keep`) once its first report has filled the engine's cache."""

    def __init__(self, cache: StateCache, store: ArchivedStore, key: str) -> None:
        self.cache, self.store, self.key = cache, store, key
        self._read: tuple[Cursor, int] | None = None  # where a read of the archive alone ended

    @classmethod
    def of(
        cls, cache: StateCache | None, store: EventStore, job: str, options: object
    ) -> KeptRead | None:
        """The kept read of ``job`` in ``store`` (None: ``store`` does not read it through an
        archive, or no cache); ``options``: what else the state depends on (its repr)."""
        if cache is None or not isinstance(store, ArchivedStore) or store.job != job:
            return None
        try:
            archive = store.identity()
        except (OSError, ValueError):  # (its read says what is wrong with it)
            return None
        return cls(cache, store, "\0".join((_code(), archive, repr(job), repr(options))))

    def load(self, modules: tuple[str, ...]) -> tuple[object, Cursor, int] | None:
        """(the state, the cursor its read ended at, the lines it read), or None when none
        is kept (or what is kept is not one: see :meth:`StateCache.load`), or when the job
        wrote after its archive since (checked first, from the state's note: the files'
        sizes the read left). A read of the archive gives a line written after it its place
        among the archive's rows (its file's), which decides between events of one time;
        read after a kept state, it would come after them all."""
        kept = self.cache.load(self.key, modules, accept=self._unchanged)
        if isinstance(kept, tuple) and len(kept) == 3:
            state, cursor, lines = kept
            ok = isinstance(cursor, Cursor) and isinstance(lines, int)
            if ok and self.store.unchanged_since(cursor):
                return state, cursor, lines
        return None

    def _unchanged(self, note: object) -> bool:
        sizes = note.get("sizes") if isinstance(note, dict) else None
        if not isinstance(sizes, dict):
            return False
        return self.store.unchanged_since(Cursor({s: (b, 0) for s, b in sizes.items()}))

    def read(self, cursor: Cursor, lines: int, unread: list[Unread]) -> bool:
        """Note a cold read that ended at ``cursor``; whether it read the archive alone (no
        line of a file after it, nothing left unread): only such a state is kept."""
        if unread or not self.store.read_archive_only(cursor):
            return False
        self._read = (cursor, lines)
        return True

    def keep(self, state: object, cursor: Cursor | None) -> None:
        """Keep ``state`` (once) if it is still the noted read's: the reader's cursor has not
        moved since."""
        read, self._read = self._read, None
        if read is not None and read[0] == cursor:
            sizes = {s: b for s, (b, _) in read[0].offsets.items()}
            self.cache.save(self.key, (state, *read), note={"sizes": sizes})
