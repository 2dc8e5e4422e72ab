"""One helper for optional dependencies: a clear error naming the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "import_optional"]


class MissingExtraError(ImportError):
    """An optional dependency is missing; the message says which extra brings it."""


def import_optional(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ``MissingExtraError`` saying ``pip install 'badput[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module!r} is needed for this feature; install it with: pip install 'badput[{extra}]'"
        ) from exc
