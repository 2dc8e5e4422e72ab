"""Process-level machinery every room may use: one module per job, each a public submodule.

- :mod:`badput.runtime.env`: every environment variable badput reads, and the detection of
  rank, attempt, host and launcher from them.
- :mod:`badput.runtime.lifecycle`: the one registry of interpreter-exit and fork hooks.
- :mod:`badput.runtime.worker`: the one periodic worker (the daemon thread of the recorder,
  the monitor and the compat layer).
- :mod:`badput.runtime.gc_pause`: cyclic garbage collection paused while state is built.
- :mod:`badput.runtime.heap`: freed heap memory handed back after a large temporary pass.
- :mod:`badput.runtime.blas`: numpy imported with one BLAS thread, in badput's own commands.
- :mod:`badput.runtime.shared_work`: work shared with forked helper processes (idle cores,
  tasks claimed from both ends, results taken from a queue).
- :mod:`badput.runtime.lazy`: a package's lazy names (PEP 562).
- :mod:`badput.runtime.state_cache`: a compacted job's read state kept between runs.
- :mod:`badput.runtime.optional`: optional dependencies, with an error naming the extra.

Nothing is imported here: ``import badput`` loads only the submodules it uses.
"""

__all__ = [
    "blas",
    "env",
    "gc_pause",
    "heap",
    "lazy",
    "lifecycle",
    "optional",
    "shared_work",
    "state_cache",
    "worker",
]


def __getattr__(name: str) -> object:
    """``badput.runtime.<module>`` as an attribute, imported on first use."""
    if name in __all__:
        import importlib  # noqa: PLC0415 (only when a submodule is asked for by attribute)

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
