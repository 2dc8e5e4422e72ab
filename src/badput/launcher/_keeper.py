"""The keeper: the process between ``badput run`` and one attempt of its command.

Run as ``python -I -S <this file> <launcher pid> <command...>`` (standard library
only: it starts in a few milliseconds and imports nothing of badput). It

- leads the attempt's session and process group (the launcher forwards SIGINT and
  SIGTERM to that group; the keeper itself ignores them and lets the command act);
- is a child subreaper (``PR_SET_CHILD_SUBREAPER``): whatever the command starts
  and orphans, even in a new session (``setsid``), becomes the keeper's child;
- dies with the launcher: ``PR_SET_PDEATHSIG`` sends it SIGUSR2 when the launcher
  dies (even by SIGKILL), and it then kills every descendant and exits; the
  command gets SIGKILL when the keeper dies;
- when the command exits, kills what the attempt left running (every descendant),
  then exits with the command's status (re-raising the command's killing signal).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: Signal the keeper gets when the launcher dies.
PARENT_DEATH_SIGNAL = signal.SIGUSR2
#: Seconds given to an attempt's leftovers between SIGTERM and SIGKILL.
LEFTOVER_GRACE = 2.0


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def descendants(root: int) -> list[int]:
    """Pids of every live descendant of ``root`` (from /proc; racy by nature)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc (not Linux): leftovers cannot be found
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_descendants(grace: float) -> None:
    """SIGTERM every descendant, then SIGKILL what is left after ``grace`` seconds."""
    me = os.getpid()
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0)):
        pids = descendants(me)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        end = time.monotonic() + wait
        while time.monotonic() < end:
            _reap()  # orphans are our children: reap them so they vanish
            if not descendants(me):
                return
            time.sleep(0.02)


def _say(message: str) -> None:
    """A line on stderr; lost, not raised, when stderr is closed (``| head`` exited)."""
    with contextlib.suppress(OSError):
        print(message, file=sys.stderr)


def main(argv: list[str]) -> int:
    launcher = int(argv[0])
    command = argv[1:]

    def launcher_died(signum: int, frame: object) -> None:
        kill_descendants(0.0)
        os._exit(128 + signal.SIGKILL)

    signal.signal(PARENT_DEATH_SIGNAL, launcher_died)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL)
    except (OSError, AttributeError) as exc:  # not Linux: run the command unguarded
        _say(f"badput run: cannot guard the command ({exc})")
    if os.getppid() != launcher:  # the launcher died before the guard was set
        return 128 + signal.SIGKILL
    pid = os.fork()
    if pid == 0:
        try:
            # Python ignores SIGPIPE and SIGXFSZ; an exec'd program must not inherit that.
            for signum in (
                signal.SIGINT,
                signal.SIGTERM,
                PARENT_DEATH_SIGNAL,
                signal.SIGPIPE,
                signal.SIGXFSZ,
            ):
                signal.signal(signum, signal.SIG_DFL)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            os.execvp(command[0], command)
        except OSError as exc:
            # SIGPIPE was reset for the command: a closed stderr would kill us by it (status
            # 141) instead of the 126/127 that says the command could not start.
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)
            _say(f"badput run: cannot start {command[0]!r}: {exc}")
            os._exit(126 if isinstance(exc, PermissionError) else 127)
        os._exit(127)  # pragma: no cover - execvp returns only by raising
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        if done == pid:
            break
    kill_descendants(LEFTOVER_GRACE)
    if os.WIFSIGNALED(status):
        killer = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(killer, signal.SIG_DFL)
        os.kill(os.getpid(), killer)
        return 128 + killer  # a signal that does not kill (ignored before exec)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
