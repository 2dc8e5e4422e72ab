"""What a report keeps, by owner: the numpy arrays and ``array.array`` columns a job's
state holds after a cold read and a final report (issue 38).

    python bench/mem_owners.py JOB_DIR [--depth D] [--steps N]

Every array reachable from the :class:`~badput.analysis.LiveJob` (breadth first, so each
is put to its shortest path of attributes, cut to ``--depth`` names) is counted once, by
the buffer that owns its bytes (views and zero-stride columns cost nothing), and shown in
bytes per step (``--steps``: the job's; default 1e6) with the process's peak RSS.
"""

from __future__ import annotations

import argparse
import array
import collections
from typing import Any

import numpy as np

from badput.analysis import LiveJob
from badput.report import to_json
from badput.runtime.heap import large_blocks_mapped

_LEAVES = (str, int, float, bool, type(None), bytes, type)
_SKIPPED = ("threading", "logging", "_io", "io", "builtins", "concurrent")


def _owner(a: np.ndarray[Any, Any]) -> tuple[int, int]:
    """The id and size of the buffer that owns an array's bytes."""
    b: Any = a
    while isinstance(b, np.ndarray) and b.base is not None:
        b = b.base
    if isinstance(b, np.ndarray):
        return id(b), b.nbytes
    try:
        return id(b), memoryview(b).nbytes
    except TypeError:
        return id(b), 0


def _children(obj: object, path: str) -> list[tuple[object, str]]:
    if isinstance(obj, dict):
        return [
            (v, f"{path}.{k}" if isinstance(k, str) else f"{path}[{k!r:.20}]")
            for k, v in obj.items()
        ]
    if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
        return [(v, f"{path}[]") for v in obj]
    if type(obj).__module__.startswith(_SKIPPED):
        return []
    out = [(v, f"{path}.{k}") for k, v in getattr(obj, "__dict__", {}).items()]
    for cls in type(obj).__mro__:
        slots = getattr(cls, "__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if hasattr(obj, name):
                out.append((getattr(obj, name), f"{path}.{name}"))
    return out


def held(root: object, depth: int) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Bytes and arrays held under ``root``, by path of attributes."""
    seen: set[int] = set()
    buffers: set[int] = set()
    sizes: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    todo: collections.deque[tuple[object, str]] = collections.deque([(root, "live")])
    while todo:
        obj, path = todo.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        key = ".".join(path.split(".")[:depth])
        if isinstance(obj, np.ndarray):
            i, nbytes = _owner(obj)
            if i not in buffers:
                buffers.add(i)
                sizes[key] += nbytes
                counts[key] += 1
        elif isinstance(obj, array.array):
            sizes[key] += obj.buffer_info()[1] * obj.itemsize
            counts[key] += 1
        elif (not isinstance(obj, _LEAVES) and not callable(obj)) or hasattr(obj, "__dict__"):
            todo.extend(_children(obj, path))
    return sizes, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job")
    parser.add_argument("--depth", type=int, default=7)
    parser.add_argument("--steps", type=int, default=1_000_000)
    args = parser.parse_args()
    live = LiveJob(args.job, parallel=False)
    live.update()
    with large_blocks_mapped():
        to_json(live.snapshot(final=True))
    sizes, counts = held(live, args.depth)
    total = sum(sizes.values())
    name = type(live.store).__name__
    print(f"{name}: arrays held {total / 1e6:.1f} MB, {total / args.steps:.1f} B/step")
    for key, size in sizes.most_common():
        if size >= 1e5:
            print(f"{size / args.steps:8.1f} B/step {size / 1e6:8.1f} MB {counts[key]:5d}  {key}")
    with open("/proc/self/status") as status:
        print(*(x.strip() for x in status if x.startswith(("VmHWM", "VmRSS"))))


if __name__ == "__main__":
    main()
