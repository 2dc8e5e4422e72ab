"""Running the per-job analyses of a fleet: on a process pool (``local``), as Ray tasks
(``ray``), or in this process (``serial``, for measuring). Each job's analysis is a pure
function of its files (:func:`~badput.fleet._job.analyse_job`), so the engines give the
same results; the driver keeps them in the store's job order.

The driver fingerprints every job and takes the cached results first: only the jobs whose
files changed (or that were never analysed) go to the engine."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Literal

from badput.fleet._cache import ResultCache
from badput.fleet._job import JobResult, analyse_job, job_fingerprint
from badput.store import EventStore, job_sources

__all__ = ["ENGINES", "FleetRun", "analyse_fleet", "run_batch"]

Engine = Literal["local", "ray", "serial"]
ENGINES: Final = ("local", "ray", "serial")

#: Batches per worker: enough that a slow batch does not leave the other workers idle at
#: the end, few enough that the per-task cost (a pickle, a pipe or a Ray task) is small.
_BATCHES_PER_WORKER: Final = 8
#: Times Ray runs a task again after the worker running it died.
RAY_MAX_RETRIES: Final = 5


@dataclass(frozen=True)
class FleetRun:
    """The results of every job of a store, in the store's job order, and how they came."""

    source: str
    results: list[JobResult]
    analysed: int  # jobs analysed in this run
    cached: int  # jobs whose cached result was used
    #: Each job's store and name, in the same order as ``results``.
    sources: list[tuple[EventStore, str]]


def run_batch(batch: Sequence[tuple[EventStore, str]]) -> list[JobResult]:
    """The results of a batch of jobs, in order (what one pool task or Ray task runs)."""
    return [analyse_job(store, job) for store, job in batch]


def _batches(todo: list[Any], workers: int) -> list[list[Any]]:
    n = max(1, min(len(todo), workers * _BATCHES_PER_WORKER))
    size = -(-len(todo) // n)
    return [todo[i : i + size] for i in range(0, len(todo), size)]


def _run_serial(todo: list[tuple[EventStore, str]], workers: int) -> list[JobResult]:
    del workers
    return run_batch(todo)


def _run_local(todo: list[tuple[EventStore, str]], workers: int) -> list[JobResult]:
    if workers <= 1 or len(todo) <= 1:
        return run_batch(todo)
    # fork: the workers start with badput and the engine imported (spawn imports them again
    # in each worker, 0.3 s); the driver holds no threads of ours here.
    context = multiprocessing.get_context("fork")
    out: list[JobResult] = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for part in pool.map(run_batch, _batches(todo, workers)):
            out.extend(part)
    return out


def _run_ray(todo: list[tuple[EventStore, str]], workers: int) -> list[JobResult]:
    from badput.runtime.optional import import_optional  # noqa: PLC0415

    ray = import_optional("ray", "ray")
    if not ray.is_initialized():
        # RAY_ADDRESS (set by `ray job submit`, or by hand) names the cluster; without it
        # Ray starts one on this machine.
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False)
    task = ray.remote(max_retries=RAY_MAX_RETRIES, retry_exceptions=False)(run_batch)
    cpus = int(ray.cluster_resources().get("CPU", workers)) or workers
    refs = [task.remote(batch) for batch in _batches(todo, max(cpus, 1))]
    out: list[JobResult] = []
    for part in ray.get(refs):
        out.extend(part)
    return out


_RUNNERS: Final[dict[str, Callable[[list[tuple[EventStore, str]], int], list[JobResult]]]] = {
    "serial": _run_serial,
    "local": _run_local,
    "ray": _run_ray,
}


def analyse_fleet(
    source: str | os.PathLike[str] | EventStore,
    *,
    engine: Engine = "local",
    workers: int | None = None,
    cache: ResultCache | None = None,
) -> FleetRun:
    """Every job of the store ``source`` analysed (:func:`badput.store.job_sources`), the
    jobs whose files did not change since ``cache`` kept their result taken from it.

    ``engine``: ``local`` (a process pool of ``workers``, default one per core), ``ray``
    (Ray tasks on the cluster ``RAY_ADDRESS`` names, else a local one; a task whose worker
    died runs again) or ``serial`` (this process). Raises ``ValueError`` for a source that
    is not a store."""
    if engine not in _RUNNERS:
        raise ValueError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    sources = job_sources(source)
    results: list[JobResult | None] = [None] * len(sources)
    keys: list[str | None] = []
    todo: list[tuple[EventStore, str]] = []
    where: list[int] = []
    for i, (store, job) in enumerate(sources):
        key = job_fingerprint(store, job) if cache is not None else None
        keys.append(key)
        held = cache.get(job, key) if cache is not None else None
        if held is not None:
            results[i] = held
        else:
            todo.append((store, job))
            where.append(i)
    done = _RUNNERS[engine](todo, workers or os.cpu_count() or 1) if todo else []
    for i, result in zip(where, done, strict=True):
        results[i] = result
        if cache is not None and result.get("error") is None:
            cache.put(sources[i][1], keys[i], result)
    text = (
        source
        if isinstance(source, str)
        else os.fspath(source)
        if isinstance(source, os.PathLike)
        else source.uri
    )
    return FleetRun(
        str(text),
        [r for r in results if r is not None],
        analysed=len(todo),
        cached=len(sources) - len(todo),
        sources=sources,
    )
