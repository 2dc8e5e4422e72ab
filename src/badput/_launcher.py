"""``badput run``: run a command as a job, record its attempts, restart it on failure.

The launcher writes the lifecycle events a training script cannot write about
itself: ``job_start`` before each (re)start of the command, ``attempt_end`` with
the exit code when it fails, ``job_end`` when the job is over. Each start of the
command is one attempt (ids ``"0"``, ``"1"``, ...); the command sees its job,
store and attempt id in ``BADPUT_JOB``, ``BADPUT_STORE`` and ``BADPUT_ATTEMPT``,
so a :class:`~badput.recorder.Recorder` inside it writes into the same attempt.

SIGINT and SIGTERM sent to the launcher are forwarded to the command's process
group; the job then ends (``cancelled`` for SIGINT, ``preempted`` for SIGTERM)
without a restart.

Restarts inside the command are attempts too: when torchrun restarts its worker
group, the workers' recorders write attempt ``"<k>.<n>"`` (``badput._env``), and
the launcher records the end of attempt ``k`` on the newest of them (the one that
was running when the command exited). A job whose last run *completed* is not
continued: ``badput run`` of it again records a new job ``<job>.2`` (``.3``, ...),
so the time between the two runs is not counted as recovery.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from badput import _env
from badput.recorder import Recorder
from badput.store import open_store

if TYPE_CHECKING:
    from badput.store import EventStore

__all__ = [
    "LaunchResult",
    "Launcher",
    "default_job_name",
    "job_completed",
    "latest_inner_restart",
    "next_attempt",
    "run_job",
]

#: Status recorded when the launcher receives each forwarded signal.
SIGNAL_STATUS: dict[int, str] = {
    signal.SIGINT: "cancelled",
    signal.SIGTERM: "preempted",
}

_POLL_SECONDS = 0.05


def default_job_name(command: Sequence[str]) -> str:
    """``<program>-<UTC time>``: a fresh job name for a command run without ``--job``."""
    prog = os.path.basename(command[0]) if command else "job"
    if prog.startswith("python") and len(command) >= 3 and command[1] == "-m":
        prog = command[2].rsplit(".", 1)[-1]
    elif prog.startswith("python") and len(command) >= 2 and not command[1].startswith("-"):
        prog = os.path.splitext(os.path.basename(command[1]))[0]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in prog) or "job"
    return f"{safe}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def _exit_status(returncode: int) -> int:
    """A shell-style exit status: a child killed by signal ``s`` gives ``128 + s``."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class LaunchResult:
    """What happened: the exit status and, per attempt, the command's return code."""

    exit_code: int
    status: str
    attempts: list[int | None] = field(default_factory=list)
    signal: int | None = None


class Launcher:
    """Runs ``command`` as job ``job``, restarting it up to ``max_restarts`` times.

    ``store`` is a store URI / directory (default: ``BADPUT_STORE`` or
    ``./badput-runs``) or an :class:`~badput.store.EventStore` whose ``uri`` the
    command can open too. ``restart_delay`` seconds pass between a failed attempt
    and the next start (accounted as ``recovery``). ``kill_timeout``: after a
    forwarded signal, seconds to wait before the process group gets SIGKILL.
    ``on_event`` (optional) is called with a one-line message at each lifecycle
    change (for progress output).
    """

    def __init__(
        self,
        command: Sequence[str],
        job: str | None = None,
        store: str | os.PathLike[str] | EventStore | None = None,
        max_restarts: int = 0,
        restart_delay: float = 0.0,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        kill_timeout: float = 30.0,
        first_attempt: int | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        if not command:
            raise ValueError("no command to run")
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        if restart_delay < 0:
            raise ValueError(f"restart_delay must be >= 0, got {restart_delay}")
        self.command = [os.fspath(c) for c in command]
        base_env = dict(os.environ if env is None else env)
        self.job = job or base_env.get(_env.BADPUT_JOB) or default_job_name(self.command)
        self.store: str | EventStore
        if store is None:
            self.store = base_env.get(_env.BADPUT_STORE) or _env.DEFAULT_STORE
        elif isinstance(store, (str, os.PathLike)):
            self.store = os.fspath(store)
        else:
            self.store = store
        if isinstance(self.store, str) and "://" not in self.store:
            # A directory: absolute, so that a command started elsewhere (cwd=) finds it.
            self.store = os.path.abspath(self.store)
        self.store_uri = self.store if isinstance(self.store, str) else self.store.uri
        self.max_restarts = max_restarts
        self.restart_delay = restart_delay
        self.base_env = base_env
        self.cwd = cwd
        self.kill_timeout = kill_timeout
        # Continue after the attempts already in the store: a second `badput run` of the same
        # job must not write into attempt "0" again (two runs' events would merge).
        self.on_event = on_event
        if first_attempt is None and job_completed(self.store, self.job):
            ended = self.job
            self.job = _next_free_job(self.store, self.job)
            self._say(f"job {ended!r} already completed; this run is recorded as job {self.job!r}")
        self.first_attempt = (
            next_attempt(self.store, self.job) if first_attempt is None else first_attempt
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._signal: int | None = None

    # -- signals ---------------------------------------------------------------

    def _forward(self, signum: int) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._signal is None:  # the first signal decides the status
            self._signal = signum
        self._forward(signum)

    def _install(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}  # signal handlers can only be set from the main thread
        previous: dict[int, Any] = {}
        for signum in SIGNAL_STATUS:
            previous[signum] = signal.signal(signum, self._handle)
        return previous

    @staticmethod
    def _restore(previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    # -- the job ---------------------------------------------------------------

    def _say(self, message: str) -> None:
        if self.on_event is not None:
            self.on_event(message)

    def _recorder(self, attempt: int | str) -> Recorder:
        # An integer id, as the command's own recorder writes it (from BADPUT_ATTEMPT).
        # No heartbeats: once the command restarts inside (torchrun), attempt `attempt` is
        # over while the launcher still waits; the command's own recorders beat for it.
        rec = Recorder(self.job, self.store, attempt=attempt, heartbeat_interval=0)
        rec._defer_job_end = False  # the launcher owns the job's end, even when launched itself
        return rec

    def _end_recorder(self, rec: Recorder, attempt: int) -> Recorder:
        """The recorder for the end of attempt ``attempt``: on its newest restart inside
        the command (torchrun's ``"<attempt>.<n>"``), which is what ended."""
        inner = latest_inner_restart(self.store, self.job, attempt)
        return rec if inner == 0 else self._recorder(f"{attempt}.{inner}")

    def _child_env(self, attempt: str, started: float) -> dict[str, str]:
        env = dict(self.base_env)
        env[_env.BADPUT_ATTEMPT_START] = repr(started)
        env[_env.BADPUT_JOB] = self.job
        env[_env.BADPUT_STORE] = self.store_uri
        env[_env.BADPUT_ATTEMPT] = attempt
        env[_env.BADPUT_LAUNCHER] = "1"
        return env

    def _wait(self, proc: subprocess.Popen[bytes]) -> int:
        """Wait for the child; after a forwarded signal, SIGKILL it past ``kill_timeout``."""
        deadline: float | None = None
        while True:
            try:
                return proc.wait(timeout=_POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            if self._signal is not None:
                if deadline is None:
                    self._forward(self._signal)  # a signal that raced the child's start
                    deadline = time.monotonic() + self.kill_timeout
                elif time.monotonic() > deadline:
                    self._forward(signal.SIGKILL)

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while self._signal is None:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, _POLL_SECONDS))

    def run(self) -> LaunchResult:
        """Run the job to its end; return its exit status and per-attempt return codes."""
        previous = self._install()
        try:
            return self._run()
        finally:
            self._restore(previous)

    def _run(self) -> LaunchResult:
        codes: list[int | None] = []
        last = self.first_attempt + self.max_restarts
        for i in range(self.first_attempt, last + 1):
            attempt = str(i)
            rec = first = self._recorder(i)
            try:
                started = time.time()
                rec.record_job_start(ts=started)
                rec.flush()
                if self._signal is not None:
                    return self._cancelled(rec, codes, None)
                self._say(f"attempt {attempt}: starting {' '.join(self.command)}")
                try:
                    proc = subprocess.Popen(
                        self.command,
                        env=self._child_env(attempt, started),
                        cwd=self.cwd,
                        start_new_session=True,  # own process group: signals reach all of it
                    )
                except OSError as exc:
                    # Not the command failing but the command missing: no restart helps.
                    status = 126 if isinstance(exc, PermissionError) else 127
                    rec.record_attempt_end(status="failed", exit_code=status)
                    rec.record_job_end(status="failed")
                    self._say(f"attempt {attempt}: cannot start {self.command[0]!r}: {exc}")
                    return LaunchResult(status, "failed", codes)
                self._proc = proc
                rc = self._wait(proc)
                self._proc = None
                codes.append(rc)
                rec.flush()
                rec = self._end_recorder(first, i)
                if self._signal is not None:
                    return self._cancelled(rec, codes, rc)
                if rc == 0:
                    rec.record_job_end(status="completed")
                    self._say(f"attempt {attempt}: completed")
                    return LaunchResult(0, "completed", codes)
                status = _exit_status(rc)
                rec.record_attempt_end(status="failed", exit_code=status)
                if i == last:
                    rec.record_job_end(status="failed")
                    self._say(
                        f"attempt {attempt}: failed with exit code {status}; "
                        f"no restarts left ({self.max_restarts} allowed)"
                    )
                    return LaunchResult(status, "failed", codes)
                self._say(
                    f"attempt {attempt}: failed with exit code {status}; "
                    f"restarting in {self.restart_delay:g}s"
                )
            finally:
                # Flushed and closed before the next start: this attempt's end is on
                # disk, and no heartbeat of it lands inside the recovery time.
                rec.close()
                first.close()
            self._sleep(self.restart_delay)
            if self._signal is not None:  # stopped while waiting to restart
                rec = self._recorder(i)
                try:
                    return self._cancelled(rec, codes, None)
                finally:
                    rec.close()
        raise AssertionError("unreachable")  # pragma: no cover

    def _cancelled(self, rec: Recorder, codes: list[int | None], rc: int | None) -> LaunchResult:
        """End the job after a forwarded signal; ``rc``: the command's code, if it ran."""
        signum = self._signal
        assert signum is not None
        status = SIGNAL_STATUS.get(signum, "cancelled")
        exit_code = 128 + signum if rc is None else _exit_status(rc)
        rec.record_job_end(status=status)
        self._say(f"job {status} ({signal.Signals(signum).name}); exit code {exit_code}")
        return LaunchResult(exit_code, status, codes, signum)


def _stream_names(store: str | EventStore, job: str) -> list[str]:
    """The job's stream names; a store that cannot be listed counts as empty."""
    try:
        opened = open_store(store)
        streams = getattr(opened, "streams", None)
        return list(streams(job)) if callable(streams) else []
    except (OSError, ValueError):
        return []


def _attempt_parts(name: str) -> tuple[int, int] | None:
    """``(outer, inner)`` of a stream's numeric attempt id ``"7"`` or ``"7.2"``."""
    outer, _, inner = name.split("/", 1)[0].partition(".")
    if outer.isascii() and outer.isdigit() and (not inner or (inner.isascii() and inner.isdigit())):
        return int(outer), int(inner or 0)
    return None


def next_attempt(store: str | EventStore, job: str) -> int:
    """One more than the highest numeric attempt id ``job`` already has in ``store`` (else 0).

    Attempt ids are the first part of stream names (``<attempt>/<host>-<rank>-<pid>.jsonl``);
    a restart inside an attempt (``"7.2"``) counts as its attempt (7).
    A store that cannot be listed counts as empty: the job's own recorder will still write.
    """
    ids = [p[0] for p in map(_attempt_parts, _stream_names(store, job)) if p is not None]
    return max(ids) + 1 if ids else 0


def latest_inner_restart(store: str | EventStore, job: str, attempt: int) -> int:
    """The highest restart ``n`` inside ``attempt`` (streams ``"<attempt>.<n>/..."``), else 0."""
    inner = [
        p[1]
        for p in map(_attempt_parts, _stream_names(store, job))
        if p is not None and p[0] == attempt
    ]
    return max(inner, default=0)


_TAIL_BYTES = 64 * 1024


def job_completed(store: str | EventStore, job: str) -> bool:
    """Whether ``job``'s newest attempt ended with ``job_end`` status ``completed``.

    Reads only the tails of that attempt's streams of a directory store (the
    launcher writes the end last); other stores count as not completed.
    """
    names = _stream_names(store, job)
    parts = [(p, n) for n in names if (p := _attempt_parts(n)) is not None]
    if not parts:
        return False
    newest = max(p[0] for p, _ in parts)
    try:
        opened = open_store(store)
        job_dir = getattr(opened, "job_dir", None)
        if not callable(job_dir):
            return False
        base = job_dir(job)
        for (outer, _inner), name in parts:
            if outer == newest and _tail_has_completed_end(os.path.join(base, name)):
                return True
    except (OSError, ValueError):
        return False
    return False


def _tail_has_completed_end(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - _TAIL_BYTES))
        tail = f.read()
    for line in reversed(tail.splitlines()):  # the last end is the job's
        if b'"job_end"' not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("kind") == "job_end":
            return event.get("status") == "completed"
    return False


def _next_free_job(store: str | EventStore, job: str) -> str:
    """``<job>.2``, ``<job>.3``, ...: the first name with no completed run in ``store``."""
    n = 2
    while job_completed(store, f"{job}.{n}"):
        n += 1
    return f"{job}.{n}"


def run_job(
    command: Sequence[str],
    job: str | None = None,
    store: str | os.PathLike[str] | EventStore | None = None,
    max_restarts: int = 0,
    restart_delay: float = 0.0,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    kill_timeout: float = 30.0,
    first_attempt: int | None = None,
    on_event: Callable[[str], None] | None = None,
) -> int:
    """Run ``command`` as a recorded job; return its final exit status.

    See :class:`Launcher` for the arguments. The status is the command's last
    exit code (``128 + N`` when it was killed by signal N).
    """
    return (
        Launcher(
            command,
            job,
            store,
            max_restarts,
            restart_delay,
            env=env,
            cwd=cwd,
            kill_timeout=kill_timeout,
            first_attempt=first_attempt,
            on_event=on_event,
        )
        .run()
        .exit_code
    )
