"""``badput run``: run a command as a job, record its attempts, restart it on failure.

The launcher writes the lifecycle events a training script cannot write about
itself: ``job_start`` before each (re)start of the command, ``attempt_end`` with
the exit code when it fails, ``job_end`` when the job is over. Each start of the
command is one attempt (ids ``"0"``, ``"1"``, ...); the command sees its job,
store and attempt id in ``BADPUT_JOB``, ``BADPUT_STORE`` and ``BADPUT_ATTEMPT``,
so a :class:`~badput.recorder.Recorder` inside it writes into the same attempt.

SIGINT and SIGTERM sent to the launcher are forwarded to the command's process
group, each signal once (SIGKILL follows only after ``kill_timeout``); the job
then ends (``cancelled`` for SIGINT, ``preempted`` for SIGTERM) without a restart.

Faults (``docs/reliability.md``):

- Each attempt runs under a small keeper process (``badput/launcher/_keeper.py``): the
  command dies with the launcher, even when the launcher is SIGKILLed, and what an
  attempt leaves running (background and ``setsid`` processes included) is killed
  when its command exits.
- An attempt left without an end by a launcher that was killed is ended in the
  record at the next launch of the job (``attempt_end``, status ``orphaned``, at
  its last recorded event).
- The launcher's own recording runs on a helper thread: a store that hangs never
  delays the command's start or the launcher's exit (bounded by
  ``JOURNAL_TIMEOUT``).
- Attempts that keep failing are restarted after an exponential back-off
  (``backoff`` seconds, doubling, at most ``backoff_max``; reset by an attempt that
  ran longer than ``backoff_max``); ``restart_delay`` is the least wait.

Restarts inside the command are attempts too: when torchrun restarts its worker
group, the workers' recorders write attempt ``"<k>.<n>"`` (``badput.runtime.env``), and
the launcher records the end of attempt ``k`` on the newest of them (the one that
was running when the command exited). A job whose last run *completed* is not
continued: ``badput run`` of it again records a new job ``<job>.2`` (``.3``, ...),
so the time between the two runs is not counted as recovery.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from badput.events import MAX_SETTING_SECONDS
from badput.launcher import _keeper
from badput.launcher._attempts import (
    end_orphaned_attempt,
    job_completed,
    latest_inner_restart,
    next_attempt,
    next_free_job,
    ship_orphaned_of,
)
from badput.launcher._hangwatch import HangWatch, parse_hang_timeout
from badput.recorder import Recorder
from badput.runtime import env as _env

if TYPE_CHECKING:
    from badput.store import EventStore

__all__ = ["LaunchResult", "Launcher", "default_job_name", "run_job"]

#: Status recorded when the launcher receives each forwarded signal.
SIGNAL_STATUS: dict[int, str] = {
    signal.SIGINT: "cancelled",
    signal.SIGTERM: "preempted",
}

_POLL_SECONDS = 0.05
#: After a hang is detected: seconds between SIGTERM and SIGKILL (at most ``kill_timeout``).
HANG_KILL_GRACE = 5.0
#: Most seconds the launcher waits for its own events to be stored (at exit).
JOURNAL_TIMEOUT = 5.0
#: Most seconds spent listing the store for the next attempt number at start.
LIST_TIMEOUT = 5.0
#: Default first back-off and its cap (seconds).
DEFAULT_BACKOFF = 0.25
DEFAULT_BACKOFF_MAX = 60.0


class _Journal:
    """The launcher's own recording, on a helper thread, in submission order.

    Every operation is stamped on the caller's thread (``ts``) and run later: a store
    that is slow or hangs delays the record, never the command.
    """

    def __init__(self, job: str, store: str | EventStore) -> None:
        self.job = job
        self.store = store
        self._ops: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._recorders: dict[int | str, Recorder] = {}
        self._thread = threading.Thread(target=self._run, name="badput-launcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            op = self._ops.get()
            if op is None:
                return
            with contextlib.suppress(Exception):  # the recorder never raises; be sure
                op()

    def _recorder(self, attempt: int | str) -> Recorder:
        rec = self._recorders.get(attempt)
        if rec is None:
            # An integer id, as the command's own recorder writes it (from BADPUT_ATTEMPT).
            # No heartbeats: once the command restarts inside (torchrun), attempt `attempt`
            # is over while the launcher still waits; the command's recorders beat for it.
            rec = Recorder(self.job, self.store, attempt=attempt, heartbeat_interval=0)
            rec._defer_job_end = False  # the launcher owns the job's end, even when launched
            self._recorders[attempt] = rec
        return rec

    def record(
        self, attempt: int | str, method: str, *, ts: float | None = None, **fields: Any
    ) -> None:
        stamp = time.time() if ts is None else ts
        self._ops.put(lambda: getattr(self._recorder(attempt), method)(ts=stamp, **fields))

    def close(self, attempt: int | str) -> None:
        """Close ``attempt``'s recorder: no heartbeat of it after its end."""

        def op() -> None:
            rec = self._recorders.pop(attempt, None)
            if rec is not None:
                rec.close()

        self._ops.put(op)

    def submit(self, op: Callable[[], object]) -> None:
        self._ops.put(op)

    def finish(self, timeout: float) -> bool:
        """Close every recorder and stop; False if the store did not take it in time."""

        def close_all() -> None:
            for rec in list(self._recorders.values()):
                rec.close()
            self._recorders.clear()

        self._ops.put(close_all)
        self._ops.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()


def _call_with_timeout(fn: Callable[[], Any], timeout: float, default: Any) -> Any:
    """``fn()`` on a helper thread; ``default`` if it raises or takes longer than ``timeout``."""
    result: list[Any] = []

    def run() -> None:
        with contextlib.suppress(Exception):
            result.append(fn())

    thread = threading.Thread(target=run, name="badput-launcher-list", daemon=True)
    thread.start()
    thread.join(timeout)
    return result[0] if result else default


def _command_problem(command: Sequence[str], env: Mapping[str, str], cwd: Any) -> OSError | None:
    """Why ``command`` cannot be started (missing, not executable), else None."""
    program = command[0]
    if os.sep in program:
        path = program if cwd is None else os.path.join(os.fspath(cwd), program)
        if not os.path.exists(path):
            return FileNotFoundError(2, "No such file or directory", program)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            return PermissionError(13, "Permission denied", program)
        return None
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        return FileNotFoundError(2, "No such file or directory", program)
    return None


def _check_arguments(
    command: Sequence[str], max_restarts: int, durations: Mapping[str, float]
) -> None:
    """``ValueError`` for a launch that cannot run as asked."""
    if not command:
        raise ValueError("no command to run")
    if max_restarts < 0:
        raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
    for name, seconds in durations.items():
        # inf would sleep or wait for ever; nan would fail only at its first use.
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"{name} must be a finite number of seconds >= 0, got {seconds}")


def _store_of(
    store: str | os.PathLike[str] | EventStore | None, base_env: Mapping[str, str]
) -> str | EventStore:
    """The store of the job: ``store``, else ``$BADPUT_STORE``, else the default."""
    if store is None:
        where = base_env.get(_env.BADPUT_STORE) or _env.DEFAULT_STORE
    elif isinstance(store, (str, os.PathLike)):
        where = os.fspath(store)
    else:
        return store
    if "://" not in where:
        # A directory: absolute, so that a command started elsewhere (cwd=) finds it.
        where = os.path.abspath(where)
    return where


def _where_to_start(
    store: str | EventStore, job: str, first_attempt: int | None
) -> tuple[str, int, bool, str | None]:
    """(job, first attempt, whether the store was listed, the completed job it follows).

    Continue after the attempts already in the store: a second `badput run` of the same
    job must not write into attempt "0" again (two runs' events would merge); a job whose
    last run completed is followed by a new one (``<job>.2``). Listed on a helper thread:
    a store that hangs must not keep the job from starting."""
    listed = first_attempt is None
    if first_attempt is None:
        first_attempt = _call_with_timeout(lambda: next_attempt(store, job), LIST_TIMEOUT, None)
        if first_attempt is None:  # unlisted in time: an id after any plausible count
            first_attempt = int(time.time())
            listed = False
    if not (listed and _call_with_timeout(lambda: job_completed(store, job), LIST_TIMEOUT, False)):
        return job, first_attempt, listed, None
    ended = job
    job = _call_with_timeout(
        lambda: next_free_job(store, ended),
        LIST_TIMEOUT,
        f"{ended}.{int(time.time())}",  # unlisted in time: a name no run has
    )
    first_attempt = _call_with_timeout(lambda: next_attempt(store, job), LIST_TIMEOUT, 0)
    return job, first_attempt, listed, ended


def _install_handlers(handler: Callable[[int, FrameType | None], None]) -> dict[int, Any]:
    """Handle the signals of ``SIGNAL_STATUS`` with ``handler``; the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}  # signal handlers can only be set from the main thread
    previous: dict[int, Any] = {}
    for signum in SIGNAL_STATUS:
        previous[signum] = signal.signal(signum, handler)
    return previous


def _restore_handlers(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _start_fields(hang_timeout: float | str | None) -> dict[str, float]:
    """The fields of an attempt's ``job_start`` besides its time: the hang timeout it runs
    with, which the report takes as its stall threshold (``auto`` is the report's own)."""
    if isinstance(hang_timeout, float) and hang_timeout <= MAX_SETTING_SECONDS:
        return {"hang_timeout": hang_timeout}
    return {}


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
    #: The job's archive, when ``compact`` asked for one and it was written (else None).
    archive: str | None = None


class Launcher:
    """Runs ``command`` as job ``job``, restarting it up to ``max_restarts`` times.

    ``store`` is a store URI / directory (default: ``BADPUT_STORE`` or
    ``./badput-runs``) or an :class:`~badput.store.EventStore` whose ``uri`` the
    command can open too. ``restart_delay`` seconds pass between a failed attempt
    and the next start (accounted as ``recovery``). ``kill_timeout``: after a
    forwarded signal, seconds to wait before the process group gets SIGKILL.
    ``on_event`` (optional) is called with a one-line message at each lifecycle
    change (for progress output). ``hang_timeout`` (seconds, or ``"auto"``): an
    attempt with no progress for that long is killed (its process group) and
    restarted like a failure, its ``attempt_end`` status ``"hung"``
    (:mod:`badput.launcher._hangwatch`, docs/ranks.md). ``compact``: at the job's end
    (whatever it is), write its archive (docs/archive.md); a failure is only said.
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
        hang_timeout: float | str | None = None,
        backoff: float = DEFAULT_BACKOFF,
        backoff_max: float = DEFAULT_BACKOFF_MAX,
        compact: bool = False,
    ) -> None:
        _check_arguments(
            command,
            max_restarts,
            {
                "restart_delay": restart_delay,
                "kill_timeout": kill_timeout,
                "backoff": backoff,
                "backoff_max": backoff_max,
            },
        )
        if hang_timeout is not None:
            try:
                hang_timeout = parse_hang_timeout(str(hang_timeout))
            except ValueError as exc:
                raise ValueError(f"hang_timeout: {exc}") from None
        self.command = [os.fspath(c) for c in command]
        base_env = dict(os.environ if env is None else env)
        job = job or base_env.get(_env.BADPUT_JOB) or default_job_name(self.command)
        self.store: str | EventStore = _store_of(store, base_env)
        self.store_uri = self.store if isinstance(self.store, str) else self.store.uri
        self.max_restarts = max_restarts
        self.restart_delay = restart_delay
        self.base_env = base_env
        self.cwd = cwd
        self.kill_timeout = kill_timeout
        self.on_event = on_event
        self.job, self.first_attempt, self._listed, ended = _where_to_start(
            self.store, job, first_attempt
        )
        if ended is not None:
            self._say(f"job {ended!r} already completed; this run is recorded as job {self.job!r}")
        self._attempt_started = time.time()
        self.hang_timeout = hang_timeout
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.compact = compact
        self._signals = 0  # signals received (a compaction stops at the next)
        self._proc: subprocess.Popen[bytes] | None = None
        self._signal: int | None = None
        self._signal_at = 0.0  # time.monotonic() of the first signal
        # The command the handler forwarded the signal to: the wait loop forwards it only
        # to a command the handler did not reach (started as the signal came), never twice.
        self._signalled: subprocess.Popen[bytes] | None = None
        self._hang: HangWatch | None = None
        self._hung: str | None = None  # why the running attempt was killed as hung

    # -- signals ---------------------------------------------------------------

    def _forward(self, signum: int) -> subprocess.Popen[bytes] | None:
        """Send ``signum`` to the running attempt; the command signalled, if any."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return None
        with contextlib.suppress(ProcessLookupError):
            if signum == signal.SIGKILL:
                # The keeper kills every process of the attempt (setsid ones too).
                os.kill(proc.pid, _keeper.PARENT_DEATH_SIGNAL)
            else:
                os.killpg(proc.pid, signum)
        return proc

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signal is None:  # the first signal decides the status
            self._signal = signum
            self._signal_at = time.monotonic()
        # Each signal received is forwarded once, here: a second SIGTERM would cut short
        # what the command does on the first (a preemption checkpoint saved in `finally`).
        signalled = self._forward(signum)
        if signalled is not None:
            self._signalled = signalled

    # -- the job ---------------------------------------------------------------

    def _say(self, message: str) -> None:
        if self.on_event is not None:
            # A progress line that cannot be shown (a closed stderr, a callback's bug)
            # must not stop the job: the command would be left without restarts or end.
            with contextlib.suppress(Exception):
                self.on_event(message)

    def _child_env(self, attempt: str) -> dict[str, str]:
        env = dict(self.base_env)
        env[_env.BADPUT_JOB] = self.job
        env[_env.BADPUT_STORE] = self.store_uri
        env[_env.BADPUT_ATTEMPT] = attempt
        env[_env.BADPUT_ATTEMPT_START] = repr(self._attempt_started)
        env[_env.BADPUT_LAUNCHER] = "1"
        return env

    def _end_attempt(self, attempt: int) -> int | str:
        """The id to end attempt ``attempt`` on: its newest restart inside the command
        (torchrun's ``"<attempt>.<n>"``), which is what ended."""
        store, job = self.store, self.job
        inner = _call_with_timeout(
            lambda: latest_inner_restart(store, job, attempt), LIST_TIMEOUT, 0
        )
        return f"{attempt}.{inner}" if inner else attempt

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
                    if self._signalled is not proc:  # it came as the child was started
                        self._signalled = self._forward(self._signal)
                    deadline = self._signal_at + self.kill_timeout
                elif time.monotonic() > deadline:
                    self._forward(signal.SIGKILL)
                    if time.monotonic() > deadline + 5:  # the keeper did not do it
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, signal.SIGKILL)
            elif self._hang is not None:
                deadline = self._check_hang(deadline)

    def _check_hang(self, deadline: float | None) -> float | None:
        """Kill the attempt's process group once its progress stops (TERM, then KILL)."""
        if self._hung is None:
            assert self._hang is not None
            why = self._hang.check()
            if why is None:
                return None
            self._hung = why
            self._say(f"attempt {self._hang.attempt}: {why}; killing its process group")
            self._forward(signal.SIGTERM)
            return time.monotonic() + min(self.kill_timeout, HANG_KILL_GRACE)
        if deadline is not None and time.monotonic() > deadline:
            self._forward(signal.SIGKILL)
            return None
        return deadline

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while self._signal is None:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, _POLL_SECONDS))

    def run(self) -> LaunchResult:
        """Run the job to its end; return its exit status and per-attempt return codes."""
        previous = _install_handlers(self._handle)
        self._journal = _Journal(self.job, self.store)
        if self._listed and self.first_attempt > 0:
            last = self.first_attempt - 1  # ended at its last event if a launcher was killed
            orphan = functools.partial(end_orphaned_attempt, self.store, self.job, last)
            self._journal.submit(orphan)
        result: LaunchResult | None = None
        try:
            result = self._run()
            return result
        finally:
            _finish(self, result, previous)

    def _backoff_delay(self, failures: int) -> float:
        """Seconds before the restart after ``failures`` consecutive quick failures."""
        backoff = 0.0
        if self.backoff > 0 and failures > 0:
            backoff = min(self.backoff_max, self.backoff * 2.0 ** min(failures - 1, 60))
        return max(self.restart_delay, backoff)

    def _start(self, attempt: str) -> subprocess.Popen[bytes]:
        keeper = [sys.executable, "-I", "-S", _keeper.__file__, str(os.getpid())]
        return subprocess.Popen(
            [*keeper, *self.command],
            env=self._child_env(attempt),
            cwd=self.cwd,
            start_new_session=True,  # own process group: signals reach all of it
        )

    def _run(self) -> LaunchResult:
        codes: list[int | None] = []
        journal = self._journal
        last = self.first_attempt + self.max_restarts
        failures = 0
        for i in range(self.first_attempt, last + 1):
            attempt = str(i)
            self._attempt_started = time.time()
            start = {"ts": self._attempt_started, **_start_fields(self.hang_timeout)}
            journal.record(i, "record", kind="job_start", **start)
            if self._signal is not None:
                return self._cancelled(i, codes, None)
            self._say(f"attempt {attempt}: starting {' '.join(self.command)}")
            problem = _command_problem(self.command, self._child_env(attempt), self.cwd)
            proc: subprocess.Popen[bytes] | None = None
            if problem is None:
                try:
                    proc = self._start(attempt)
                except OSError as exc:
                    problem = exc
            if proc is None:
                # Not the command failing but the command missing: no restart helps.
                status = 126 if isinstance(problem, PermissionError) else 127
                journal.record(i, "record_attempt_end", status="failed", exit_code=status)
                journal.record(i, "record_job_end", status="failed")
                self._say(f"attempt {attempt}: cannot start {self.command[0]!r}: {problem}")
                return LaunchResult(status, "failed", codes)
            started = time.monotonic()
            self._proc = proc
            self._hung = None
            if self.hang_timeout is not None:
                self._hang = HangWatch(self.store, self.job, attempt, self.hang_timeout)
            rc = self._wait(proc)
            self._proc = None
            self._hang = None
            codes.append(rc)
            # What the command's killed processes left in their spool goes to their event
            # files before the attempt's end is recorded (on the journal's thread).
            journal.submit(lambda: ship_orphaned_of(self.store, self.job))
            end = self._end_attempt(i)
            if self._signal is not None:
                return self._cancelled(end, codes, rc)
            if self._hung is not None:
                rc = rc or 1  # killed for a hang: a failure, whatever it exited with
            elif rc == 0:
                journal.record(end, "record_job_end", status="completed")
                self._say(f"attempt {attempt}: completed")
                return LaunchResult(0, "completed", codes)
            status = _exit_status(rc)
            why = "hung" if self._hung is not None else "failed"
            journal.record(end, "record_attempt_end", status=why, exit_code=status)
            what = (
                f"failed with exit code {status}"
                if why == "failed"
                else f"hung: killed (exit code {status})"
            )
            if i == last:
                journal.record(end, "record_job_end", status="failed")
                allowed = f"({self.max_restarts} allowed)"
                self._say(f"attempt {attempt}: {what}; no restarts left {allowed}")
                return LaunchResult(status, "failed", codes)
            # This attempt's end is recorded: no heartbeat of it lands in the recovery time.
            journal.close(i)
            journal.close(end)
            ran = time.monotonic() - started
            failures = 1 if ran > self.backoff_max else failures + 1
            delay = self._backoff_delay(failures)
            self._say(f"attempt {attempt}: {what}; restarting in {delay:g}s")
            self._sleep(delay)
            if self._signal is not None:  # stopped while waiting to restart
                return self._cancelled(end, codes, None)
        raise AssertionError("unreachable")  # pragma: no cover

    def _cancelled(
        self, attempt: int | str, codes: list[int | None], rc: int | None
    ) -> LaunchResult:
        """End the job after a forwarded signal; ``rc``: the command's code, if it ran."""
        signum = self._signal
        assert signum is not None
        status = SIGNAL_STATUS.get(signum, "cancelled")
        exit_code = 128 + signum if rc is None else _exit_status(rc)
        self._journal.record(attempt, "record_job_end", status=status)
        self._say(f"job {status} ({signal.Signals(signum).name}); exit code {exit_code}")
        return LaunchResult(exit_code, status, codes, signum)


def _finish(launcher: Launcher, result: LaunchResult | None, handlers: dict[int, Any]) -> None:
    """The launcher's end: its own events stored, its archive written if asked (under its
    signal handlers: a signal then stops only the compaction), its handlers put back."""
    if not launcher.compact:
        _restore_handlers(handlers)
    if not launcher._journal.finish(JOURNAL_TIMEOUT):
        launcher._say(
            f"the store {launcher.store_uri} did not take the launcher's events "
            f"within {JOURNAL_TIMEOUT:g}s; some may be missing"
        )
    if launcher.compact:
        if result is not None:
            signals = functools.partial(getattr, launcher, "_signals")
            result.archive = _compacted(launcher.store, launcher.job, launcher._say, signals)
        _restore_handlers(handlers)


def _compacted(
    store: str | EventStore, job: str, say: Callable[[str], None], stop: Callable[[], int]
) -> str | None:
    """Compact ``job`` (its files as they are now) on a helper thread, and say where its
    archive is; None when it is not written (a failure, said; ``stop``: the launcher's
    count of signals received: once it changes, the compaction is given up)."""
    signals = stop()
    done: list[Any] = []

    def work() -> None:
        from badput.store import compact, open_store  # noqa: PLC0415 (pyarrow: on demand)

        try:
            done.append(compact(open_store(store), job))
        except Exception as exc:  # said: the job's exit is not the archive's
            done.append(exc)

    thread = threading.Thread(target=work, name="badput-compact", daemon=True)
    thread.start()
    while thread.is_alive() and stop() == signals:
        thread.join(_POLL_SECONDS)
    if not done:
        say("compaction given up (signalled); the event files are as they were")
        return None
    out = done[0]
    if isinstance(out, Exception):
        say(f"cannot compact job {job!r}: {out}; the event files are as they were")
        return None
    ratio = out.archive_bytes / out.covered_bytes if out.covered_bytes else 0.0
    say(
        f"archive {out.path}: {out.archive_bytes:,} bytes for {out.covered_bytes:,} "
        f"of JSON lines ({ratio:.1%}), {out.rows:,} lines"
    )
    return str(out.path)


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
    hang_timeout: float | str | None = None,
    backoff: float = DEFAULT_BACKOFF,
    backoff_max: float = DEFAULT_BACKOFF_MAX,
    compact: bool = False,
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
            hang_timeout=hang_timeout,
            backoff=backoff,
            backoff_max=backoff_max,
            compact=compact,
        )
        .run()
        .exit_code
    )
