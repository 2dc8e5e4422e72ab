"""Work shared with forked helper processes: how many are worth starting, and the tasks.

A cold read of a large log is shared among processes (``badput.analysis``): the tasks are
a list, this process takes them from the front and forked helpers from the back, each
helper sending its results on a queue. Here is what that needs and nothing of reading:
whether forking is safe now (:func:`fork_safe`), how many helpers the idle cores allow
(:func:`idle_helpers`), the claims from both ends of the list (:func:`claim`,
:func:`claim_run`, :func:`claim_all`) and the results taken from the queue (:func:`receive`,
:func:`wait_for`). Standard library only.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from typing import Any, Final, Protocol, TypeVar

__all__ = [
    "Numbered",
    "claim",
    "claim_all",
    "claim_run",
    "fork_safe",
    "idle_helpers",
    "own_running",
    "receive",
    "runnable_others",
    "usable_cores",
    "wait_for",
]


class Numbered(Protocol):
    """A helper's result: the number of the task it is of."""

    @property
    def number(self) -> int: ...


R = TypeVar("R", bound=Numbered)


def claim(claims: Any, *, front: bool) -> int | None:
    """The next task nobody has taken: from the front (the parent) or the back (helpers).

    ``claims`` is a shared array ``[next from the front, end of the unclaimed]``
    (``ctx.Array("q", [0, len(tasks)])``)."""
    with claims.get_lock():
        lo, hi = claims[0], claims[1]
        if lo >= hi:
            return None
        if front:
            claims[0] = lo + 1
            return int(lo)
        claims[1] = hi - 1
        return int(hi - 1)


def claim_run(claims: Any, *, share: int, most: int) -> range | None:
    """Consecutive tasks from the back for a helper: a ``share``-th of those nobody has
    taken (at least one, at most ``most``), so that runs shorten as the two ends near
    each other and nobody is left with a long run when the other stops (guided
    scheduling). A helper that sends one result a run sends fewer, larger ones."""
    with claims.get_lock():
        lo, hi = claims[0], claims[1]
        if lo >= hi:
            return None
        n = max(1, min(most, (hi - lo) // share))
        claims[1] = hi - n
        return range(int(hi - n), int(hi))


def claim_all(claims: Any) -> None:
    """Leave nothing for the helpers to take."""
    with claims.get_lock():
        claims[1] = claims[0]


def receive(out: Any, got: dict[int, R]) -> int:
    """Take the helpers' results waiting in ``out``, without waiting; return how many
    helpers said they were done (a helper puts None when it is)."""
    done = 0
    while True:
        try:
            item = out.get_nowait()
        except queue.Empty:
            return done
        if item is None:
            done += 1
        else:
            got[item.number] = item


def wait_for(out: Any, got: dict[int, R], procs: list[Any], running: int) -> None:
    """Take results until ``running`` more helpers say they are done, or every helper has
    exited (one killed, say: its missing tasks are left to the caller)."""
    while running > 0:
        try:
            item = out.get(timeout=0.1)
        except queue.Empty:
            if all(proc.exitcode is not None for proc in procs):
                receive(out, got)  # what they sent before they exited
                return
            continue
        if item is None:
            running -= 1
        else:
            got[item.number] = item


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: Looks at the tasks runnable now (``/proc/loadavg``) when the first sees another task.
_RUNNABLE_LOOKS: Final = 5
_LOADAVG = "/proc/loadavg"  # "1.02 0.73 0.60 2/345 12345": the 4th field is runnable/total


def own_running() -> int:
    """Threads of this process running now, native ones included (numpy's BLAS starts a
    pool that spins a moment after the import); 1 where ``/proc`` does not say."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 1
    n = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                stat_line = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        # "tid (comm) S ...": the state follows the last ")" (a name may hold one)
        end = stat_line.rfind(b")")
        n += end >= 0 and stat_line[end + 2 : end + 3] == b"R"
    return max(n, 1)


def runnable_others() -> int | None:
    """Tasks runnable now besides this process's own threads; None where the kernel does
    not say (no ``/proc/loadavg``). When the first look sees any, the median of
    :data:`_RUNNABLE_LOOKS` looks 2 ms apart: a process that keeps a core busy is in most
    of them, one that only passes (the shell that started this one) is not."""
    try:
        looks = [_runnable_look()]
        while looks[0] and len(looks) < _RUNNABLE_LOOKS:
            time.sleep(0.002)
            looks.append(_runnable_look())
    except (OSError, ValueError, IndexError):
        return None
    return sorted(looks)[len(looks) // 2]


def _runnable_look() -> int:
    """One look: the kernel's count of runnable tasks less this process's running threads."""
    before = own_running()
    with open(_LOADAVG, "rb") as f:
        running = int(f.read().split()[3].split(b"/")[0])
    return max(0, running - max(before, own_running()))


def idle_helpers(cores: int) -> int:
    """Helper processes worth starting now: one per idle core beyond this process's own and
    half a core, at most ``cores`` (the processes the work may use) minus this process. A
    helper on a busy core only adds the cost of sending its results back.

    A core is busy when another task is runnable on it now. The load average over the last
    minute was the measure before: it counts this command's own earlier runs too (a report
    of 4 s leaves a load of 0.5 to 0.8 for a minute), which made the next run read serially on
    an idle machine (4.5 s instead of 2.9 s). Where the kernel gives no count of runnable
    tasks, the last minute's load average is still used."""
    busy = runnable_others()
    if busy is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average: assume the cores are free
            load = 0.0
    else:
        load = float(busy)
    return max(0, min(cores - 1, int(cores - load - 0.5)))


def fork_safe() -> bool:
    """Forking is safe only with no other thread alive (locks would be copied held)."""
    return (
        sys.platform.startswith("linux")
        and (os.cpu_count() or 1) >= 2
        and threading.active_count() == 1
    )
