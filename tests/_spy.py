"""Watch a module-level function while a test runs: ``with spy(module, "name") as seen``
replaces it with a wrapper that calls the real one and appends to ``seen`` what ``note``
makes of each call's arguments and result (the result by default; a note keeps no
argument alive: a view of a growing column would stop it from growing). It is put back on
leaving (hypothesis tests cannot use monkeypatch)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def _result(args: tuple[Any, ...], result: Any) -> Any:
    return result


@contextmanager
def spy(
    module: object,
    name: str,
    note: Callable[[tuple[Any, ...], Any], Any] = _result,
) -> Iterator[list[Any]]:
    real = getattr(module, name)
    seen: list[Any] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        seen.append(note(args, result))
        return result

    setattr(module, name, watched)
    try:
        yield seen
    finally:
        setattr(module, name, real)
