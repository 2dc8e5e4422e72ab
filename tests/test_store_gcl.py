"""The ``gcl://`` store against the real google-cloud-logging client and a loopback fake API.

The fake implements ``entries:write`` and ``entries:list`` of the Logging REST API (v2),
with enough of the query language for the filters badput and ml-goodput-measurement build
(``AND``/``OR``/``NOT``, parentheses, ``= != < <= > >= :``, ``:*``), ordering by
(timestamp, insertId) and paging. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("google.cloud.logging")

import google.cloud.logging as gcl
from google.auth.credentials import AnonymousCredentials

import badput
from badput.analysis import analyze
from badput.compat.ml_goodput_measurement.cloud_logging import rfc3339_ns
from badput.events import Event, EventError
from badput.store import MemoryStore, WriterKey, open_source, open_store
from badput.store._gcl import CloudLoggingCursor, CloudLoggingStore

PROJECT = "proj-1"
LOG = "goodput_gcl-job"

# ------------------------------------------------------------------ the fake API

_SEVERITY = {
    s: i
    for i, s in enumerate(
        ["DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT"]
    )
}
_TOKEN = re.compile(
    r'\s*(?:(?P<lp>\()|(?P<rp>\))|(?P<str>"(?:[^"\\]|\\.)*")|(?P<op><=|>=|!=|=|<|>|:)'
    r'|(?P<word>[^\s()"<>=!:]+))'
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m and m.end() > pos, f"cannot parse filter at {text[pos:]!r}"
        pos = m.end()
        kind = m.lastgroup or ""
        value = m.group(kind)
        if kind == "str":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out.append((kind, value))
    return out


Pred = Callable[[dict[str, Any]], bool]


class _Parser:
    """expr := and (OR and)* ; and := unary ([AND] unary)* ; unary := NOT unary | (expr) | cmp"""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def parse(self) -> Pred:
        pred = self.expr()
        assert self.peek() is None, f"trailing tokens {self.toks[self.i :]}"
        return pred

    def expr(self) -> Pred:
        parts = [self.conj()]
        while self.peek() == ("word", "OR"):
            self.take()
            parts.append(self.conj())
        return lambda e: any(p(e) for p in parts)

    def conj(self) -> Pred:
        parts = [self.unary()]
        while (tok := self.peek()) is not None and tok[0] != "rp" and tok != ("word", "OR"):
            if tok == ("word", "AND"):
                self.take()
            parts.append(self.unary())
        return lambda e: all(p(e) for p in parts)

    def unary(self) -> Pred:
        kind, value = self.take()
        if (kind, value) == ("word", "NOT"):
            inner = self.unary()
            return lambda e: not inner(e)
        if kind == "lp":
            inner = self.expr()
            assert self.take()[0] == "rp"
            return inner
        assert kind == "word", f"expected a field, got {value!r}"
        op = self.take()
        assert op[0] == "op", f"expected an operator after {value!r}, got {op}"
        literal = self.take()[1]
        return _comparison(value, op[1], literal)


def _field(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _comparison(path: str, op: str, literal: str) -> Pred:
    def check(entry: dict[str, Any]) -> bool:
        value = _field(entry, path)
        if op == ":":
            if literal == "*":
                return value is not None
            return value is not None and literal.lower() in str(value).lower()
        if value is None:
            return op == "!="
        a: Any
        b: Any
        if path == "timestamp":
            a, b = rfc3339_ns(value), rfc3339_ns(literal)
        elif path == "severity":
            a, b = _SEVERITY[value], _SEVERITY[literal]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            a, b = value, float(literal)
        else:
            a, b = str(value), literal
        return {
            "=": a == b,
            "!=": a != b,
            "<": a < b,
            "<=": a <= b,
            ">": a > b,
            ">=": a >= b,
        }[op]

    return check


def _floats(value: Any) -> Any:
    """Numbers as a protobuf Struct keeps them (doubles), as the gRPC transport returns them."""
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


class FakeLogging:
    """The state of the fake Logging API: stored entries, requests seen, failure switches."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.writes: list[dict[str, Any]] = []
        self.filters: list[str] = []
        self.fail_writes = False
        self.struct_numbers = False  # return numbers as doubles (gRPC's Struct)
        self.max_page = 7  # small pages: the client must follow nextPageToken
        self.lock = threading.Lock()
        self._ids = 0

    def payloads(self) -> list[dict[str, Any]]:
        return [e["jsonPayload"] for e in self.sorted_entries() if "jsonPayload" in e]

    def sorted_entries(self) -> list[dict[str, Any]]:
        with self.lock:
            return sorted(self.entries, key=lambda e: (rfc3339_ns(e["timestamp"]), e["insertId"]))

    def write(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.fail_writes:
            return 503, {"error": {"code": 503, "message": "unavailable", "status": "UNAVAILABLE"}}
        with self.lock:
            self.writes.append(body)
            for raw in body["entries"]:
                entry = dict(raw)
                entry.setdefault("logName", body.get("logName"))
                entry.setdefault("resource", body.get("resource"))
                if "timestamp" not in entry:
                    entry["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                if "insertId" not in entry:
                    self._ids += 1
                    entry["insertId"] = f"srv{self._ids:08d}"
                entry.setdefault("severity", "DEFAULT")
                entry["receiveTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                self.entries.append(entry)
        return 200, {}

    def list(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        filter_ = body.get("filter", "")
        self.filters.append(filter_)
        pred = _Parser(filter_).parse() if filter_ else (lambda e: True)
        projects = {name.split("/", 1)[1] for name in body["resourceNames"]}
        chosen = [
            e for e in self.sorted_entries() if e["logName"].split("/")[1] in projects and pred(e)
        ]
        if body.get("orderBy") == "timestamp desc":
            chosen.reverse()
        start = int(body.get("pageToken") or 0)
        size = min(int(body.get("pageSize") or 1000), self.max_page)
        page = chosen[start : start + size]
        if self.struct_numbers:
            page = [{**e, "jsonPayload": _floats(e["jsonPayload"])} for e in page]
        out: dict[str, Any] = {"entries": page}
        if start + size < len(chosen):
            out["nextPageToken"] = str(start + size)
        return 200, out


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeLogging, str]]:
    # The client asks the GCE metadata server for the monitored resource whenever it
    # parses listed entries (a Logger per list call); offline that lookup can hang 5 s.
    from google.cloud.logging_v2.handlers import _monitored_resources

    monkeypatch.setattr(_monitored_resources, "retrieve_metadata_server", lambda *a, **k: None)
    state = FakeLogging()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
            path = self.path.split("?", 1)[0]
            if path == "/v2/entries:write":
                status, out = state.write(body)
            elif path == "/v2/entries:list":
                status, out = state.list(body)
            else:
                status, out = 404, {"error": {"code": 404, "message": path}}
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


_Client = gcl.Client  # kept: a test replaces gcl.Client, as the store's default client


def make_client(endpoint: str) -> Any:
    return _Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        _use_grpc=False,
        client_options={"api_endpoint": endpoint},
    )


#: The entries of these tests are two hours old: a late-entry window that covers them lets
#: incremental reads see entries written after a read with timestamps before it.
WINDOW = 10 * 86400.0


@pytest.fixture
def store(fake: tuple[FakeLogging, str]) -> CloudLoggingStore:
    return CloudLoggingStore(PROJECT, LOG, client=make_client(fake[1]), late_seconds=WINDOW)


def read_all(store: CloudLoggingStore, job: str) -> tuple[list[Event | EventError], Any]:
    items: list[Event | EventError] = []
    cursor = None
    while True:
        result = store.read(job, cursor, max_bytes=1000)
        items += [i for c in result.chunks for i in c.items]
        progressed = result.cursor.offsets != (cursor.offsets if cursor else {})
        cursor = result.cursor
        if not progressed:
            return items, cursor


# --------------------------------------------------------------- the recorded job

JOB = "gcl-job"
T0 = float(int(time.time()) - 7200)  # recent: the library's readers look at the last days


def record_job(store: Any) -> None:
    """Attempt 0: a 5 s load, steps 0-5 of 10 s, a save of step 5, an eval, step 6 cut by
    a crash. Attempt 1 starts 30 s later, restores step 5, runs steps 6-9 and ends."""
    with badput.Recorder(JOB, store, attempt=0, host="h0", rank=0, heartbeat_interval=0) as rec:
        rec.record_job_start(ts=T0)
        rec.record_data_loading_start(ts=T0 + 1)
        rec.record_data_loading_end(ts=T0 + 6)
        for i in range(6):
            rec.record_step_start(i, ts=T0 + 6 + 10 * i)
            rec.record_step_end(i, ts=T0 + 16 + 10 * i)
        rec.record_checkpoint_save_start(5, ts=T0 + 66)
        rec.record_checkpoint_save_end(5, ts=T0 + 70)
        rec.record_custom_start("eval", ts=T0 + 70)
        rec.record_custom_end("eval", ts=T0 + 73)
        rec.record_step_start(6, ts=T0 + 73)
        rec.record_attempt_end(status="failed", exit_code=1, ts=T0 + 80)
    with badput.Recorder(JOB, store, attempt=1, host="h0", rank=0, heartbeat_interval=0) as rec:
        rec.record_job_start(ts=T0 + 110)
        rec.record_checkpoint_restore_start(5, ts=T0 + 111)
        rec.record_checkpoint_restore_end(5, ts=T0 + 113)
        for i in range(6, 10):
            rec.record_step_start(i, ts=T0 + 113 + 10 * (i - 6))
            rec.record_step_end(i, ts=T0 + 123 + 10 * (i - 6))
        rec.record_job_end(status="completed", ts=T0 + 153)


def _key(e: Event) -> tuple[float, str]:
    return (e.ts, e.kind)


def test_recorder_round_trip_is_lossless_and_report_matches(
    fake: tuple[FakeLogging, str], store: CloudLoggingStore
) -> None:
    record_job(store)
    reference = MemoryStore()
    record_job(reference)
    expected = sorted(
        (i for c in reference.read(JOB).chunks for i in c.items if isinstance(i, Event)), key=_key
    )
    items, _ = read_all(store, JOB)
    assert not [i for i in items if isinstance(i, EventError)]
    assert sorted(items, key=_key) == expected  # type: ignore[arg-type]
    assert len(expected) == 33

    report = analyze(store, JOB)
    assert report.to_dict() == analyze(reference, JOB).to_dict()
    # 153 s: 10 steps of 10 s; step 6 of attempt 0 (73-80 s) lost to the crash; 80-110 s
    # between the attempts; 0-1 s and 110-111 s untracked.
    assert report.total_seconds == pytest.approx(153.0)
    assert {k: round(v, 6) for k, v in report.buckets.items() if v} == {
        "productive": 100.0,
        "wasted": 7.0,
        "recovery": 30.0,
        "data_loading": 5.0,
        "checkpoint_save": 4.0,
        "checkpoint_restore": 2.0,
        "custom:eval": 3.0,
        "untracked": 2.0,
    }
    assert (report.steps.kept, report.steps.wasted, report.steps.last) == (10, 1, 9)
    assert report.goodput == pytest.approx(100.0 / 153.0)
    assert report.diagnostics == []


def test_written_entries_are_the_librarys_payloads(
    fake: tuple[FakeLogging, str], store: CloudLoggingStore
) -> None:
    state, _ = fake
    record_job(store)
    entries = state.sorted_entries()
    assert {e["severity"] for e in entries} == {"INFO"}
    assert {e["logName"] for e in entries} == {f"projects/{PROJECT}/logs/{LOG}"}
    assert {e["resource"]["type"] for e in entries} == {"global"}
    payloads = state.payloads()
    assert all(p["job_name"] == JOB for p in payloads)
    # entry time = event time
    for e in entries:
        assert rfc3339_ns(e["timestamp"]) == pytest.approx(
            e["jsonPayload"]["badput_event"]["ts"] * 1e9, abs=1000
        )
    starts = [p for p in payloads if "job_start_time" in p]
    assert [p["job_start_time"] for p in starts] == [T0, T0 + 110]
    steps = [(p["step_count"], p["step_start_time"]) for p in payloads if "step_start_time" in p]
    assert steps[:2] == [(0, T0 + 6), (1, T0 + 16)]
    assert len(steps) == 11
    assert [(p["data_loading_start_time"]) for p in payloads if "data_loading_start_time" in p] == [
        T0 + 1
    ]
    (save,) = [p for p in payloads if p.get("event_type") == "save"]
    assert save["step"] == 5
    assert save["checkpoint_manager_blocking_start_time"] == T0 + 66
    assert save["checkpoint_manager_blocking_duration_secs"] == pytest.approx(4.0)
    (restore,) = [p for p in payloads if p.get("event_type") == "restore"]
    assert restore["checkpoint_manager_duration_secs"] == pytest.approx(2.0)
    (eval_start,) = [p for p in payloads if "custom_badput_event_start_time" in p]
    assert eval_start["custom_badput_event_type"] == "eval"
    assert [p["job_end_time"] for p in payloads if "job_end_time" in p] == [T0 + 153]
    # insertIds sort in write order within a stream (ties of equal timestamps keep it)
    by_stream: dict[str, list[str]] = {}
    for e in state.entries:
        prefix, _, _seq = e["insertId"].rpartition("-")
        by_stream.setdefault(prefix, []).append(e["insertId"])
    assert len(by_stream) == 2
    assert all(ids == sorted(ids) for ids in by_stream.values())
    # the library's own query (goodput.py _get_filter_msg, first and incremental forms)
    # selects them
    logger = make_client(fake[1]).logger(LOG)
    end = "2100-01-01T00:00:00+00:00"
    base = (
        f'logName="projects/{PROJECT}/logs/{LOG}" AND severity=INFO'
        f' AND jsonPayload.job_name="{JOB}"'
    )
    first = list(
        logger.list_entries(
            filter_=f'{base} AND timestamp<="{end}" AND timestamp>"1970-01-01T00:00:00+00:00"',
            order_by=gcl.ASCENDING,
            page_size=1000000,
        )
    )
    assert len(first) == len(entries)
    last = first[19]
    after = list(
        logger.list_entries(
            filter_=(
                f'{base} AND timestamp<="{end}" AND (timestamp > "{last.timestamp.isoformat()}"'
                f' OR (timestamp = "{last.timestamp.isoformat()}" AND insertId >'
                f' "{last.insert_id}"))'
            ),
            order_by=gcl.ASCENDING,
        )
    )
    assert [e.insert_id for e in after] == [e.insert_id for e in first[20:]]
    # and the Orbax calculator's query (no time bound: the client adds the last 24 hours)
    orbax = list(
        logger.list_entries(
            filter_=(
                f'severity=INFO AND jsonPayload.job_name="{JOB}" AND (jsonPayload.event_type=save'
                " OR jsonPayload.event_type=restore OR jsonPayload.event_type=emergency_restore)"
            ),
            order_by=gcl.ASCENDING,
        )
    )
    assert [e.payload["event_type"] for e in orbax] == ["save", "restore"]


def test_incremental_read_returns_only_new_events(
    fake: tuple[FakeLogging, str], store: CloudLoggingStore
) -> None:
    state, _ = fake
    key = WriterKey("0", "h0", 0, 1)
    writer = store.open_writer("inc", key)
    first = [Event(ts=T0 + i, kind="step_start", job="inc", attempt=0, step=i) for i in range(4)]
    writer.write(badput.formats.codec.encode_lines(first))
    writer.flush()
    r1 = store.read("inc")
    assert [i for c in r1.chunks for i in c.items] == first
    assert r1.cursor.offsets == {"inc": (4, 4)}
    again = store.read("inc", r1.cursor)
    assert again.chunks == [] and again.cursor.offsets == r1.cursor.offsets
    second = [
        Event(ts=T0 + 10 + i, kind="step_start", job="inc", attempt=0, step=4 + i) for i in range(3)
    ]
    late = Event(ts=T0 + 2.5, kind="heartbeat", job="inc", attempt=0)  # arrives late
    writer.write(badput.formats.codec.encode_lines([*second, late]))
    writer.close()
    r2 = store.read("inc", r1.cursor)
    got = [i for c in r2.chunks for i in c.items]
    assert sorted(got, key=_key) == sorted([*second, late], key=_key)
    assert r2.chunks[0].first_line == 5
    assert r2.cursor.offsets == {"inc": (8, 8)}
    assert store.read("inc", r2.cursor).chunks == []
    # the first cursor is unchanged: reading from it again gives the same new events
    assert [i for c in store.read("inc", r1.cursor).chunks for i in c.items] == got
    # a cursor remembers the entries of its late-entry window only
    assert isinstance(r2.cursor, CloudLoggingCursor)
    assert len(r2.cursor.seen) == 8
    prompt = CloudLoggingStore(PROJECT, LOG, client=store._client, late_seconds=60)
    r3 = prompt.read("inc")
    assert r3.n_items == 8 and r3.cursor.offsets == {"inc": (8, 8)}
    assert isinstance(r3.cursor, CloudLoggingCursor) and r3.cursor.seen == frozenset()
    assert r3.cursor.floor is not None
    assert r3.cursor.floor.timestamp() == pytest.approx(time.time() - 60, abs=5)
    assert prompt.read("inc", r3.cursor).chunks == []
    writer = store.open_writer("inc", key)
    writer.write(
        badput.formats.codec.encode_line(Event(ts=time.time() - 1, kind="heartbeat", job="inc"))
    )
    writer.write(badput.formats.codec.encode_line(Event(ts=T0 + 99, kind="heartbeat", job="inc")))
    writer.close()
    r4 = prompt.read("inc", r3.cursor)  # the entry 2 hours late is beyond the window
    assert [e.ts for c in r4.chunks for e in c.items] == [pytest.approx(time.time() - 1, abs=5)]
    assert isinstance(r4.cursor, CloudLoggingCursor) and len(r4.cursor.seen) == 1
    with pytest.raises(ValueError, match="not a cursor of job 'other'"):
        store.read("other", r2.cursor)
    # max_bytes: one entry at a time, all of them in the end
    items, cursor = read_all(store, "inc")
    assert len(items) == 10 and cursor.offsets == {"inc": (10, 10)}
    single = store.read("inc", max_bytes=1)
    assert single.n_items == 1
    assert 'jsonPayload.job_name="inc"' in state.filters[-1]


def test_foreign_payloads_keep_decoder_state_across_reads(
    fake: tuple[FakeLogging, str], store: CloudLoggingStore
) -> None:
    """ml-goodput-measurement's own entries (no badput_event), read in two goes: a load
    after the first step is overlapped, a load after a restart blocks again."""
    state, endpoint = fake
    logger = make_client(endpoint).logger(LOG, resource=gcl.Resource(type="global", labels={}))
    state.struct_numbers = True  # read them back as gRPC does: step 1 as 1.0

    def log(payload: dict[str, Any], at: float) -> None:
        from datetime import datetime, timezone

        when = datetime.fromtimestamp(at, tz=timezone.utc)
        logger.log_struct({"job_name": "mgm", **payload}, severity="INFO", timestamp=when)

    log({"job_start_time": T0}, T0)
    log({"data_loading_start_time": T0 + 1}, T0 + 1)
    log({"data_loading_end_time": T0 + 3}, T0 + 3)
    log({"step_count": 0, "step_start_time": T0 + 3}, T0 + 3)
    log({"step_count": 1, "step_start_time": T0 + 13}, T0 + 13)
    first, _ = read_all(store, "mgm")
    cursor = store.read("mgm").cursor
    assert [(e.kind, e.blocking) for e in first if isinstance(e, Event)][1:3] == [
        ("data_loading_start", None),
        ("data_loading_end", None),
    ]
    log({"data_loading_start_time": T0 + 14}, T0 + 14)
    log({"data_loading_end_time": T0 + 15}, T0 + 15)
    log({"step_count": "soon", "step_start_time": T0 + 23}, T0 + 23)  # a bad entry
    log({"job_start_time": T0 + 40}, T0 + 40)
    log({"data_loading_start_time": T0 + 41}, T0 + 41)
    log({"data_loading_end_time": T0 + 42}, T0 + 42)
    log(
        {
            "event_type": "restore",
            "step": 1,
            "directory": "gs://b/ckpt",
            "checkpoint_manager_start_time": T0 + 42,
            "checkpoint_manager_duration_secs": 2.5,
        },
        T0 + 44.5,
    )
    log({"step_count": 1, "step_start_time": T0 + 45}, T0 + 45)
    result = store.read("mgm", cursor)
    items = [i for c in result.chunks for i in c.items]
    errors = [i for i in items if isinstance(i, EventError)]
    assert len(errors) == 1
    bad_id = state.sorted_entries()[7]["insertId"]
    assert f"insertId={bad_id!r}" in errors[0].message
    assert "step_count must be an integer" in errors[0].message
    events = [(e.kind, e.ts - T0, e.blocking, e.step) for e in items if isinstance(e, Event)]
    assert events == [
        ("data_loading_start", 14.0, False, None),
        ("data_loading_end", 15.0, False, None),
        ("job_start", 40.0, None, None),
        ("data_loading_start", 41.0, None, None),
        ("data_loading_end", 42.0, None, None),
        ("checkpoint_restore_start", 42.0, None, 1),
        ("checkpoint_restore_end", 44.5, None, 1),
        ("step_start", 45.0, None, 1),
    ]
    assert all(e.attempt is None for e in items if isinstance(e, Event))
    assert store.jobs() == ["mgm"]
    # badput's own entries read back as doubles (gRPC) still decode exactly
    record_job(store)
    own, _ = read_all(store, JOB)
    assert len(own) == 33 and all(isinstance(e, Event) for e in own)
    assert {e.attempt for e in own if isinstance(e, Event)} == {0, 1}
    assert store.jobs() == [JOB, "mgm"]


def test_write_failures_are_oserrors_the_recorder_survives(
    fake: tuple[FakeLogging, str], store: CloudLoggingStore
) -> None:
    state, _ = fake
    writer = store.open_writer("f", WriterKey("0", "h", 0, 1))
    state.fail_writes = True
    writer.write(badput.formats.codec.encode_line(Event(ts=T0, kind="job_start", job="f")))
    with pytest.raises(OSError, match="cannot write 1 entries of job 'f'"):
        writer.flush()
    writer.flush()  # the failed entries were dropped: nothing left to send
    with pytest.raises(ValueError, match="not an event"):
        writer.write(b'{"ts": 1, "kind": "step_start", "job": "f"}\n')
    state.fail_writes = False
    rec = badput.Recorder("f", store, attempt=0, heartbeat_interval=0, flush_interval=0.01)
    state.fail_writes = True
    rec.record_job_start(ts=T0)
    rec.flush()
    state.fail_writes = False
    rec.record_step_start(0, ts=T0 + 1)
    rec.close()
    assert rec.dropped_events == 1
    items, _ = read_all(store, "f")
    assert [(e.kind, e.ts) for e in items if isinstance(e, Event)] == [("step_start", T0 + 1)]


def test_uri_open_store_and_open_source(
    fake: tuple[FakeLogging, str], store: CloudLoggingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = open_store(f"gcl://{PROJECT}/{LOG}")
    assert isinstance(opened, CloudLoggingStore)
    assert (opened.project, opened.log_name, opened.uri) == (PROJECT, LOG, f"gcl://{PROJECT}/{LOG}")
    nested = open_store("gcl://p/a/b%20c")
    assert isinstance(nested, CloudLoggingStore)
    assert nested.log_name == "a/b c" and open_store(nested.uri).log_name == "a/b c"  # type: ignore[attr-defined]
    for bad in ("gcl://", "gcl://p", "gcl://p/", "gcl:///log"):
        with pytest.raises(ValueError, match="expected gcl://PROJECT/LOG"):
            open_store(bad)
    record_job(store)
    assert open_source(store) == (store, JOB)
    with pytest.raises(ValueError, match="no job 'nope'"):
        open_source(store, "nope")
    # by URI with a job: one small request instead of listing the whole log
    state, endpoint = fake
    monkeypatch.setattr(gcl, "Client", lambda project: make_client(endpoint))
    uri = f"gcl://{PROJECT}/{LOG}"
    n = len(state.filters)
    by_uri, job = open_source(uri, JOB)
    assert job == JOB and isinstance(by_uri, CloudLoggingStore) and by_uri.uri == uri
    assert len(state.filters) == n + 1
    assert f'jsonPayload.job_name="{JOB}"' in state.filters[-1]
    with pytest.raises(ValueError, match=r"no job 'nope' in this store \(jobs: gcl-job\)"):
        open_source(uri, "nope")
    assert "jsonPayload.job_name:*" in state.filters[-1]  # the listing, for the message


def test_import_stays_light_and_a_missing_package_names_the_extra(tmp_path: Any) -> None:
    code = (
        "import sys\n"
        "from badput.store import open_store\n"
        "s = open_store('gcl://p/log')\n"
        "assert s.uri == 'gcl://p/log'\n"
        "assert not [m for m in sys.modules if m.startswith('google')], 'imported google'\n"
        "sys.modules['google.cloud.logging'] = None  # as if not installed\n"
        "import badput\n"
        "try:\n"
        "    s.open_writer('j', badput.store.WriterKey('0', 'h', 0, 1))\n"
        "except OSError as exc:\n"
        "    print(exc)\n"
        "rec = badput.Recorder('j', s, heartbeat_interval=0)\n"
        "rec.record_job_start()\n"
        "rec.close()\n"
        "print(rec.dropped_events)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("gcl://p/log: ")
    assert "pip install 'badput[gcp]'" in lines[0]
    assert lines[1] == "1"
    assert "badput[gcp]" in out.stderr  # the recorder's one warning says it too


def test_filter_parser_handles_the_librarys_filters() -> None:
    entry = {
        "logName": "projects/p/logs/l",
        "severity": "INFO",
        "timestamp": "2026-01-01T00:00:01.000000500Z",
        "insertId": "b",
        "jsonPayload": {"job_name": 'a "q"', "event_type": "save", "step": 3},
    }
    for text, want in [
        ('severity=INFO AND jsonPayload.job_name="a \\"q\\""', True),
        ('timestamp>"2026-01-01T00:00:01+00:00"', True),
        ('timestamp>"2026-01-01T00:00:01.000001Z"', False),
        (
            '(timestamp > "2026-01-01T00:00:02+00:00" OR (timestamp = '
            '"2026-01-01T00:00:01.000000500Z" AND insertId > "a"))',
            True,
        ),
        ("jsonPayload.event_type=save OR jsonPayload.event_type=restore", True),
        ("NOT jsonPayload.step>=3", False),
        ("jsonPayload.job_name:* logName=projects/p/logs/l", True),
        ("jsonPayload.other:*", False),
    ]:
        assert _Parser(text).parse()(entry) is want, text
