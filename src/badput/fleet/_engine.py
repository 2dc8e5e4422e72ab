"""Running the per-job analyses of a fleet: on a process pool (``local``), as Ray tasks
(``ray``), or in this process (``serial``, for measuring). Each job's analysis is a pure
function of its files (:func:`~badput.fleet._job.analyse_job`), so the engines give the
same results; the driver keeps them in the store's job order.

The driver fingerprints every job and takes the cached results first: only the jobs whose
files changed (or that were never analysed) go to the engine.

A job of ``split_bytes`` or more (a store of files) is not one task: its cold read is cut
into the slices of its serial read (:func:`~badput.analysis.split_job`), runs of them are
read as tasks of their own beside the other jobs, and the driver merges them in file order
(:meth:`~badput.analysis.LiveJob.from_split`, the merge of the shared cold read): the same
result as one worker's read of the whole job."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from badput.fleet._cache import ResultCache
from badput.fleet._job import JobResult, analyse_job, job_fingerprint, job_result
from badput.store import EventStore, job_sources

if TYPE_CHECKING:
    from badput.analysis import JobSplit

__all__ = [
    "ENGINES",
    "SPLIT_BYTES",
    "FleetRun",
    "analyse_fleet",
    "pool_context",
    "run_batch",
    "run_task",
]

Engine = Literal["local", "ray", "serial"]
ENGINES: Final = ("local", "ray", "serial")

#: Batches per worker: enough that a slow batch does not leave the other workers idle at
#: the end, few enough that the per-task cost (a pickle, a pipe or a Ray task) is small.
_BATCHES_PER_WORKER: Final = 8
#: Jobs in a batch at most: a fleet of 10,000 jobs in 16 batches left one worker alone for
#: up to a batch (35 s of 340) at its end; a task costs about a millisecond.
_BATCH_JOBS: Final = 32
#: Times Ray runs a task again after the worker running it died.
RAY_MAX_RETRIES: Final = 5
#: A job of this many bytes or more is read by several tasks (default of ``split_bytes``).
SPLIT_BYTES: Final = 256 * 1024 * 1024
#: Tasks a split job is read in, per worker (each a run of consecutive slices).
_PARTS_PER_WORKER: Final = 2

#: A task: a batch of whole jobs, or a run of slices of one split job.
Task = (
    tuple[Literal["jobs"], list[tuple[EventStore, str]]] | tuple[Literal["part"], "JobSplit", range]
)


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
    """The results of a batch of jobs, in order."""
    return [analyse_job(store, job) for store, job in batch]


def run_task(task: Task) -> list[Any]:
    """What one pool task or Ray task runs: a batch's results, or a split job's slices as
    read (:func:`~badput.analysis.read_split_part`)."""
    if task[0] == "jobs":
        return run_batch(task[1])
    from badput.analysis import read_split_part  # noqa: PLC0415 (the engine pulls numpy)

    return read_split_part(task[1], task[2])


def _batches(todo: list[Any], workers: int) -> list[list[Any]]:
    n = max(1, min(len(todo), max(workers * _BATCHES_PER_WORKER, -(-len(todo) // _BATCH_JOBS))))
    size = -(-len(todo) // n)
    return [todo[i : i + size] for i in range(0, len(todo), size)]


def _run_serial(tasks: list[Task], workers: int) -> list[list[Any]]:
    del workers
    return [run_task(task) for task in tasks]


def pool_context(stores: Iterable[EventStore]) -> multiprocessing.context.BaseContext:
    """How a process pool reading ``stores`` starts its processes: ``fork`` (they start
    with badput and the engine imported; ``spawn`` imports them again in each, 0.3 s; the
    driver holds no threads of ours), unless a store's client does not survive a fork (an
    object store's: ``fork_safe`` False), then ``spawn``."""
    forkable = all(getattr(store, "fork_safe", True) for store in stores)
    return multiprocessing.get_context("fork" if forkable else "spawn")


def _run_local(tasks: list[Task], workers: int) -> list[list[Any]]:
    if workers <= 1 or len(tasks) <= 1:
        return [run_task(task) for task in tasks]
    stores = (store for task in tasks if task[0] == "jobs" for store, _ in task[1])
    context = pool_context(stores)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return list(pool.map(run_task, tasks))


def _run_ray(tasks: list[Task], workers: int) -> list[list[Any]]:
    del workers
    from badput.runtime.optional import import_optional  # noqa: PLC0415

    ray = import_optional("ray", "ray")  # started or joined by _ray_cpus
    task = ray.remote(max_retries=RAY_MAX_RETRIES, retry_exceptions=False)(run_task)
    return list(ray.get([task.remote(t) for t in tasks]))


def _ray_cpus(workers: int) -> int:
    """The CPUs of the Ray cluster (its tasks' batches are cut for them)."""
    from badput.runtime.optional import import_optional  # noqa: PLC0415

    ray = import_optional("ray", "ray")
    if not ray.is_initialized():
        # RAY_ADDRESS (set by `ray job submit`, or by hand) names the cluster; without it
        # Ray starts one on this machine.
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False)
    return int(ray.cluster_resources().get("CPU", workers)) or workers


_RUNNERS: Final[dict[str, Callable[[list[Task], int], list[list[Any]]]]] = {
    "serial": _run_serial,
    "local": _run_local,
    "ray": _run_ray,
}


def _tasks(
    todo: list[tuple[EventStore, str]], workers: int, split_bytes: int | None
) -> tuple[list[Task], list[JobSplit | None]]:
    """The tasks of ``todo``: whole jobs in batches, and the parts of each job of
    ``split_bytes`` or more; per job, its split (None: read whole)."""
    splits: list[JobSplit | None] = [None] * len(todo)
    if split_bytes is not None:
        from badput.analysis import split_job  # noqa: PLC0415 (the engine pulls numpy)

        for i, (store, job) in enumerate(todo):
            if _bytes_below(store, job, split_bytes):
                continue  # (a split's planning opens the job: 0.3 ms a job, in the driver)
            try:
                splits[i] = split_job(store, job, min_bytes=split_bytes)
            except (ValueError, OSError):
                splits[i] = None  # read whole: the job's own analysis names the problem
    whole = [item for item, split in zip(todo, splits, strict=True) if split is None]
    tasks: list[Task] = [("jobs", batch) for batch in _batches(whole, workers)] if whole else []
    for split in splits:
        if split is not None:
            tasks += [("part", split, r) for r in split.parts(workers * _PARTS_PER_WORKER)]
    return tasks, splits


def _bytes_below(store: EventStore, job: str, limit: int) -> bool:
    """Whether ``job``'s files (a store of files) hold fewer than ``limit`` bytes; False
    when not known (then :func:`~badput.analysis.split_job` decides)."""
    files = getattr(store, "files", None)
    if not callable(files):
        return False
    total = 0
    try:
        for _, path in files(job):
            total += os.stat(path).st_size
            if total >= limit:
                return False
    except OSError:
        return False
    return True


def _run(
    todo: list[tuple[EventStore, str]], engine: str, workers: int, split_bytes: int | None
) -> list[JobResult]:
    """Each job's result, in ``todo``'s order, on ``engine``."""
    if engine == "ray":
        workers = max(_ray_cpus(workers), 1)  # starts or joins the cluster
    tasks, splits = _tasks(todo, workers, split_bytes)
    outputs = _RUNNERS[engine](tasks, workers)
    whole = iter(
        r for task, out in zip(tasks, outputs, strict=True) if task[0] == "jobs" for r in out
    )
    parts: dict[int, list[Any]] = {}
    for task, out in zip(tasks, outputs, strict=True):
        if task[0] == "part":
            parts.setdefault(id(task[1]), []).extend(out)
    from badput.analysis import LiveJob  # noqa: PLC0415

    results: list[JobResult] = []
    for split in splits:
        if split is None:
            results.append(next(whole))
        else:
            results.append(job_result(LiveJob.from_split(split, parts.pop(id(split)))))
    return results


def analyse_fleet(
    source: str | os.PathLike[str] | EventStore,
    *,
    engine: Engine = "local",
    workers: int | None = None,
    cache: ResultCache | None = None,
    split_bytes: int | None = SPLIT_BYTES,
) -> FleetRun:
    """Every job of the store ``source`` analysed (:func:`badput.store.job_sources`), the
    jobs whose files did not change since ``cache`` kept their result taken from it (and,
    for an object store, its directories' job names: :meth:`ResultCache.names`).

    ``engine``: ``local`` (a process pool of ``workers``, default one per core), ``ray``
    (Ray tasks on the cluster ``RAY_ADDRESS`` names, else a local one; a task whose worker
    died runs again) or ``serial`` (this process). A job of ``split_bytes`` or more is read
    by several tasks and merged (None: every job is one task's). Raises ``ValueError`` for
    a source that is not a store."""
    if engine not in _RUNNERS:
        raise ValueError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    sources = job_sources(source, names=cache.names() if cache is not None else None)
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
    done = _run(todo, engine, workers or os.cpu_count() or 1, split_bytes) if todo else []
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
