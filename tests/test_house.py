"""The house's rules, checked on the code as it stands (docs/architecture.md, "Rooms").

- ``src/badput/`` holds the public surface (``__init__.py``, public modules) and the rooms
  (packages), and no private module.
- Rooms meet through public names only: no module imports another room's private module or
  private name.
- Modules, classes and functions stay small enough to hold in mind (800, 300 and 80 lines).
  What is larger today is named below with its size now, as a ceiling: it may shrink, never
  grow, and a name that no longer needs its place fails the test until it is taken off.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "badput"

#: The public modules beside the rooms.
PUBLIC_MODULES = {"__init__.py", "events.py", "analysis.py", "testing.py", "py.typed"}

MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 80

#: Not yet split (issue 37), each with its size when this test was written: a ceiling.
LARGE_MODULES = {}
LARGE_CLASSES: dict[str, int] = {}
LARGE_FUNCTIONS = {}


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_the_package_holds_its_public_surface_and_rooms_only() -> None:
    loose = sorted(p.name for p in SRC.iterdir() if p.is_file() and p.name not in PUBLIC_MODULES)
    assert loose == []
    rooms = sorted(p.name for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert all(not _private(r) and (SRC / r / "__init__.py").exists() for r in rooms), rooms


def _crossings(source: str, rel: str) -> list[str]:
    """Imports in ``source`` (the module at ``rel`` below ``src/badput``) of another room's
    private module or private name."""
    me = rel.split("/", maxsplit=1)[0].removesuffix(".py")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            parts, names = [], []
            for alias in node.names:
                if alias.name.startswith("badput."):
                    parts = alias.name.split(".")
        else:
            continue
        if parts[:1] != ["badput"]:
            continue
        if len(parts) == 1:  # from badput import x: x is a room or a public module
            bad = [n for n in names if _private(n)]
        elif parts[1] == me:
            continue
        elif any(_private(p) for p in parts[1:]):
            bad = [".".join(parts)]
        else:
            bad = [f"{'.'.join(parts)}.{n}" for n in names if _private(n)]
        found += [f"{rel}:{node.lineno} imports {b}" for b in bad]
    return found


def test_rooms_meet_through_public_names_only() -> None:
    found = [
        c for p in _modules() for c in _crossings(p.read_text(), p.relative_to(SRC).as_posix())
    ]
    assert found == []


def test_the_rule_sees_a_private_import_of_another_room() -> None:
    probe = (
        "from badput.engine._steps import compute_rows\n"
        "from badput import _x\n"
        "import badput.store._jsonl\n"
        "from badput.recorder import _resolve\n"
        "from badput.monitor._vocab import METRICS\n"  # its own room: allowed
        "from badput.engine import Report\n"
    )
    assert len(_crossings(probe, "monitor/probe.py")) == 4


def _sizes() -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    modules, classes, functions = {}, {}, {}
    for path in _modules():
        rel = path.relative_to(SRC).as_posix()
        text = path.read_text()
        modules[rel] = text.count("\n")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if isinstance(node, ast.ClassDef):
                classes[f"{rel}:{node.name}"] = size
            else:
                key = f"{rel}:{node.name}"
                functions[key] = max(size, functions.get(key, 0))
    return modules, classes, functions


@pytest.mark.parametrize(
    ("kind", "limit", "named"),
    [
        ("modules", MAX_MODULE_LINES, LARGE_MODULES),
        ("classes", MAX_CLASS_LINES, LARGE_CLASSES),
        ("functions", MAX_FUNCTION_LINES, LARGE_FUNCTIONS),
    ],
)
def test_nothing_grows_past_its_size(kind: str, limit: int, named: dict[str, int]) -> None:
    sizes = dict(zip(("modules", "classes", "functions"), _sizes(), strict=True))[kind]
    too_big = {k: v for k, v in sizes.items() if v > limit and v > named.get(k, limit)}
    assert too_big == {}, f"{kind} over {limit} lines (split them, or justify them here)"
    no_longer = sorted(k for k in named if sizes.get(k, 0) <= limit)
    assert no_longer == [], f"small enough now: take them off the list of large {kind}"
