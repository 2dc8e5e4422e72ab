"""Opening a file a view is written to (``report --html``, ``export trace``, ``export csv``).

A FIFO that no process reads would block ``open`` for ever: the file is opened
non-blocking, which fails at once there (``ENXIO``), and the error says what the path is.
A FIFO that a process does read, a device (``/dev/null``) and ``/dev/stdout`` are written
as before: the file is made blocking again once open.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final, TextIO

__all__ = ["open_output"]

_FLAGS: Final = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_TRUNC
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def open_output(path: str | os.PathLike[str], *, newline: str | None = None) -> TextIO:
    """``path`` opened for writing UTF-8 text (created, or emptied). Raises ``OSError``:
    for a FIFO no process is reading or a socket, one that names the path and says so."""
    try:
        fd = os.open(path, _FLAGS, 0o666)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
        if _is_fifo(path):
            what = "a FIFO that no process is reading (start its reader first)"
        else:
            what = "a socket or a device without its driver: not a file to write"
        raise OSError(exc.errno, what, os.fspath(path)) from None
    try:
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "w", encoding="utf-8", newline=newline)


def _is_fifo(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False
