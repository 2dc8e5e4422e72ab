"""Run code as an unprivileged user, for what root is never refused (a mode-000 directory).

The suite may run as root, to whom permissions mean nothing. :func:`run_as_nobody` runs a
function in a child process that drops to ``nobody`` (uid 65534) before calling it; as any
other user, the child keeps the test's own. The interpreter and its standard library may lie
where ``nobody`` cannot read them (``/root/.pyenv``): the child first calls the function as
root on a readable copy of the data, which imports every module it needs, then drops its
privileges and calls it on the data under test. Only the second call's result is returned.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NOBODY = 65534

_CHILD = """
import json, os, sys

{body}

warm, real = sys.argv[1], sys.argv[2]
body(warm)  # as root: imports whatever the body needs while it can be read
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid({uid})
    os.setuid({uid})
    assert os.geteuid() == {uid} and os.getegid() == {uid}
print(json.dumps({{"uid": os.geteuid(), "result": body(real)}}))
"""


@contextmanager
def shared_tmp() -> Iterator[Path]:
    """A new directory that ``nobody`` may enter and read (pytest's ``tmp_path`` lies in a
    directory private to the user running the tests), removed afterwards whatever modes
    the test left in it."""
    top = Path(tempfile.mkdtemp(prefix="badput-nobody-"))
    try:
        top.chmod(0o755)
        yield top
    finally:
        for dirpath, dirnames, _ in os.walk(top):  # each made listable before it is entered
            for name in dirnames:
                Path(dirpath, name).chmod(0o755)
        shutil.rmtree(top, ignore_errors=True)


def readable_copy(src: Path, dst: Path) -> Path:
    """A copy of ``src`` that everyone may read (the warm-up's data)."""
    shutil.copytree(src, dst)
    for dirpath, _, filenames in os.walk(dst):
        Path(dirpath).chmod(0o755)
        for name in filenames:
            Path(dirpath, name).chmod(0o644)
    return dst


def run_as_nobody(body: str, warm: Path, real: Path, *, timeout: float = 120.0) -> Any:
    """Run ``body`` (source defining ``def body(root: str) -> <JSON-able>``) in a child
    process as ``nobody`` (when this process is root) on ``real``, after a warm-up call on
    ``warm`` as this user; returns what it returned. Fails if the child fails."""
    script = _CHILD.format(body=textwrap.dedent(body), uid=NOBODY)
    done = subprocess.run(
        [sys.executable, "-c", script, str(warm), str(real)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=str(warm.parent),  # (one nobody may enter)
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["uid"] == (NOBODY if os.geteuid() == 0 else os.geteuid())
    return out["result"]
