"""One helper for a package's lazy names (PEP 562): a name is imported on first use.

``import badput`` must not pull numpy, and ``badput report --json`` must not pull rich: a
package face lists the names whose module is heavy and lets them load when asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``where`` (name -> module) is
    taken from its module on first use and kept in the package's namespace, so the next
    use is a plain attribute lookup.

    >>> import types, sys
    >>> sys.modules["demo_pkg"] = types.ModuleType("demo_pkg")
    >>> getattr_ = lazy_attributes("demo_pkg", {"sqrt": "math"})
    >>> getattr_("sqrt")(9.0), "sqrt" in vars(sys.modules["demo_pkg"])
    (3.0, True)
    """
    namespace = vars(sys.modules[package])

    def load(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return load
