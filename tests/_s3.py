"""A real S3-protocol server for tests and benches: moto's server mode on 127.0.0.1, and a
small TCP proxy in front of it that can refuse connections (an outage) or answer ``503
SlowDown`` (throttling) for a while, which moto itself cannot do. The server's own request
log (``MotoServer(log=...)``) tells which requests a client made: :meth:`MotoServer.requests`.

The proxy, not moto, is what an outage stops: moto keeps its objects in memory, and a
stopped moto would come back empty. To the client the two are the same: nothing listens.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from badput.store import ObjectStore

__all__ = ["FaultProxy", "MotoServer", "Request", "s3_env", "upload_store"]

#: A request line of the server's log (werkzeug's, colours and all).
_LOGGED = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/[0-9.]+(?:\x1b\[[0-9;]*m)*" (\d+)')


class Request(NamedTuple):
    """One request the server answered, from its log."""

    method: str
    bucket: str
    key: str  # the object's key ("" for a request of the bucket: a listing)
    query: dict[str, list[str]]
    status: int

    @property
    def is_listing(self) -> bool:
        return self.method == "GET" and not self.key and "list-type" in self.query

    @property
    def is_object_read(self) -> bool:
        return self.method in ("GET", "HEAD") and bool(self.key)


_THROTTLED = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: 95\r\n"
    b"Connection: close\r\n\r\n"
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """``python -m moto.server`` on a free port of 127.0.0.1, in its own process; ``log``:
    a file its request log goes to (:meth:`requests` reads it); ``niceness``: added to the
    server's nice value (a benchmark's recorder then has the cores first, as beside a store
    that runs on other machines)."""

    def __init__(self, log: Path | None = None, *, niceness: int = 0) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.niceness = niceness
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoServer:
        with contextlib.ExitStack() as stack:
            err = stack.enter_context(open(self.log, "ab")) if self.log else subprocess.DEVNULL
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                preexec_fn=(lambda: os.nice(self.niceness)) if self.niceness else None,  # noqa: PLW1509 (no threads yet in the callers)
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(self.url + "/moto-api/", timeout=1).close()
                return self
            if self._proc.poll() is not None:
                raise RuntimeError("moto server exited at start")
            time.sleep(0.1)
        raise RuntimeError("moto server did not start within 30 s")

    def requests(self) -> list[Request]:
        """Every request the server logged so far (needs ``log``), in order. The server
        logs a request as it answers it: all of a client's requests are there once the
        client has its answers."""
        assert self.log is not None, "MotoServer(log=...) logs requests"
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            m = _LOGGED.search(line)
            if m is None or m.group(2).startswith("/moto-api"):
                continue
            url = urlsplit(m.group(2))
            bucket, _, key = unquote(url.path).lstrip("/").partition("/")
            out.append(Request(m.group(1), bucket, key, parse_qs(url.query), int(m.group(3))))
        return out

    def make_bucket(self, name: str) -> None:
        req = urllib.request.Request(f"{self.url}/{name}", method="PUT")
        urllib.request.urlopen(req, timeout=10).close()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
            self._proc = None


class FaultProxy:
    """A TCP proxy on a free port of 127.0.0.1 to ``target_port``. :meth:`down` stops
    listening (connections refused); :meth:`throttle` answers every request with 503."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.throttled = False
        self.throttled_answers = 0
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None

    def up(self) -> FaultProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()
        return self

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        if self._accepting is not None:
            self._accepting.join(5)

    def throttle(self, on: bool) -> None:
        self.throttled = on

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            if self.throttled:
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(_THROTTLED)
                    self.throttled_answers += 1
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), 5)
            except OSError:
                return
            with upstream:
                pump = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
                pump.start()
                _pump(conn, upstream)
                pump.join(30)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def s3_env(endpoint: str, cache: str) -> Iterator[dict[str, str]]:
    """The environment a client of the test server runs with: the endpoint and keys the
    AWS way (moto takes any keys), and this test's own local spool directory."""
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "XDG_CACHE_HOME": cache,
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def upload_store(root: Path, uri: str, *, part_bytes: int = 1 << 20, threads: int = 8) -> int:
    """Upload the directory store ``root`` (``<job>/<attempt>/<file>.jsonl``) to the object
    store ``uri`` as the shipper lays it out: each file as numbered parts of about
    ``part_bytes``, cut after a newline. Returns the parts uploaded."""
    store = ObjectStore(uri)
    uploads: list[tuple[str, str, bytes]] = []
    for path in sorted(root.glob("*/*/*.jsonl")):
        data = path.read_bytes()
        stream = f"{path.parent.name}/{path.name}"
        start, number = 0, 1
        while start < len(data):
            end = data.find(b"\n", min(start + part_bytes, len(data)) - 1) + 1 or len(data)
            uploads.append(
                (path.parent.parent.name, f"{stream}.part-{number:08d}", data[start:end])
            )
            start, number = end, number + 1
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda u: store._put(*u), uploads))
    return len(uploads)
