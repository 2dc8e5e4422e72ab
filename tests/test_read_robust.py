"""The read path survives any input: one bad line is a diagnostic with file:line (§9.11).

Each case appends one hostile line (or file) to a small real job and checks that the
report is the clean job's report plus exactly the diagnostic that names the line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from badput import Recorder
from badput.analysis import TORN_AFTER_SECONDS, LiveJob, analyze
from badput.cli import main
from badput.engine import Report
from badput.events import MAX_INT, MAX_TS, Event, EventError, attempt_id, validate
from badput.formats.codec import decode_block, decode_line, decode_lines
from badput.report._format import format_duration, format_percent, format_ts
from badput.report._watch import window_label
from badput.store import JsonlStore, MemoryStore, WriterKey, _jsonl, _lines
from badput.store._base import MAX_NAME_BYTES, safe_name
from badput.store._lines import parse_stream, written_length

JOB = "good"
T0 = 1_732_000_000.0


def line(ts: float, kind: str, **fields: object) -> bytes:
    return (
        json.dumps({"ts": ts, "kind": kind, "job": JOB, "attempt": 0, **fields}) + "\n"
    ).encode()


CLEAN = b"".join(
    [
        line(T0, "job_start"),
        *(line(T0 + 10 * i, "step_start", step=i) for i in range(1, 8)),
        line(T0 + 80, "step_end", step=7),
        line(T0 + 90, "job_end", status="completed"),
    ]
)
N_CLEAN = CLEAN.count(b"\n")


def write_job(root: Path, data: bytes, name: str = "h-0-1.jsonl") -> Path:
    path = root / JOB / "0" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def codes(report: Report) -> dict[str, list[tuple[str | None, int | None]]]:
    out: dict[str, list[tuple[str | None, int | None]]] = {}
    for d in report.diagnostics:
        out.setdefault(d.code, []).append((d.file, d.line))
    return out


@pytest.fixture(scope="module")
def clean_report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    root = tmp_path_factory.mktemp("clean")
    write_job(root, CLEAN)
    return analyze(root, JOB)


def same_numbers(a: Report, b: Report) -> None:
    assert a.buckets == b.buckets
    assert a.total_seconds == b.total_seconds
    assert a.steps == b.steps
    assert a.end_reason == b.end_reason


H = b'{"ts":1732000005,"job":"good",'  # the start of every hostile line
HOSTILE = {
    "invalid UTF-8 in a string": H + b'"kind":"custom_start","name":"caf\xe9"}',
    "deep nesting (10,000)": H + b'"kind":"heartbeat","x":' + b"[" * 10_000 + b"]" * 10_000 + b"}",
    "step 2**63": H + b'"kind":"step_start","step":9223372036854775808}',
    "step 2**53": H + b'"kind":"step_start","step":9007199254740992}',
    "rank -2**70": H + b'"kind":"heartbeat","rank":-1180591620717411303424}',
    "attempt 10**400": H + b'"kind":"heartbeat","attempt":1' + b"0" * 400 + b"}",
    "ts 1e300": b'{"ts":1e300,"kind":"heartbeat","job":"good"}',
    "ts -1e300": b'{"ts":-1e300,"kind":"heartbeat","job":"good"}',
    "ts 1e400 (inf)": b'{"ts":1e400,"kind":"heartbeat","job":"good"}',
    "ts year 10000": b'{"ts":253402300800,"kind":"heartbeat","job":"good"}',
    "ts a string": b'{"ts":"soon","kind":"heartbeat","job":"good"}',
    "NaN literal": b'{"ts":NaN,"kind":"heartbeat","job":"good"}',
    "an array": b"[1,2,3]",
    "NUL in the middle": b'{"ts":1732000005,\x00"kind":"heartbeat","job":"good"}',
    "lone surrogate escape": H + b'"kind":"custom_start","name":"\\ud800"}',
}


@pytest.mark.parametrize("bad", list(HOSTILE), ids=list(HOSTILE))
def test_one_hostile_line_is_a_diagnostic_and_costs_nothing_else(
    tmp_path: Path, clean_report: Report, bad: str
) -> None:
    # The hostile line goes in the middle: line 5 of the file.
    lines = CLEAN.splitlines(keepends=True)
    data = b"".join([*lines[:4], HOSTILE[bad] + b"\n", *lines[4:]])
    path = write_job(tmp_path, data)
    report = analyze(tmp_path, JOB)
    assert codes(report)["malformed_line"] == [(str(path), 5)]
    same_numbers(report, clean_report)


C = H + b'"kind":"custom_start","name":"'  # 60 bytes: byte 61 is the name's first
SURROGATE = "half of a UTF-16 pair, not a character (UTF-8 cannot hold it)"
NOT_TEXT = {
    "lone high surrogate escape": (
        C + b'\\ud800"}',
        f"a lone surrogate escape \\ud800 at byte 61 of the line: {SURROGATE}",
    ),
    "lone low surrogate escape": (
        C + b'a\\udc00"}',
        f"a lone surrogate escape \\udc00 at byte 62 of the line: {SURROGATE}",
    ),
    "high surrogate escape, then no low one": (
        C + b'\\ud800\\u0041"}',
        f"a lone surrogate escape \\ud800 at byte 61 of the line: {SURROGATE}",
    ),
    "raw invalid UTF-8 (Latin-1)": (
        C + b'caf\xe9"}',
        "not valid UTF-8: byte 64 of the line (e9): invalid continuation byte",
    ),
    "raw surrogate bytes": (
        C + b'\xed\xa0\x80"}',
        "not valid UTF-8: byte 61 of the line (ed): invalid continuation byte",
    ),
}


@pytest.mark.parametrize("bad", list(NOT_TEXT), ids=list(NOT_TEXT))
def test_a_line_that_is_not_text_says_why_and_where(
    tmp_path: Path, clean_report: Report, bad: str
) -> None:
    # msgspec said "Input data was truncated" of a lone surrogate escape, and numbered a
    # bad byte from the start of its string, not of the line.
    line_bytes, message = NOT_TEXT[bad]
    lines = CLEAN.splitlines(keepends=True)
    path = write_job(tmp_path, b"".join([*lines[:4], line_bytes + b"\n", *lines[4:]]))
    report = analyze(tmp_path, JOB)
    found = [(d.file, d.line, d.message) for d in report.diagnostics if d.code == "malformed_line"]
    assert found == [(str(path), 5, message)]
    same_numbers(report, clean_report)
    result = CliRunner().invoke(main, ["report", str(tmp_path / JOB), "--json"])
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)["diagnostics"]
    assert {"code": "malformed_line", "message": message, "file": str(path), "line": 5} in shown
    # In a block of 64 KiB or more (decoded whole, and lean, until a line fails): the same.
    many = CLEAN.splitlines(keepends=True)[1:-1] * 200
    big = write_job(tmp_path, b"".join([*many, line_bytes + b"\n", *many]), "big.jsonl")
    assert big.stat().st_size >= 64 * 1024
    report = analyze(tmp_path, JOB)
    found = [(d.file, d.line, d.message) for d in report.diagnostics if d.code == "malformed_line"]
    assert (str(big), len(many) + 1, message) in found


def test_a_surrogate_pair_and_an_escaped_backslash_are_text() -> None:
    assert decode_line(C + b'\\ud83d\\ude00"}').name == "\U0001f600"
    assert decode_line(C + b'\\\\ud800"}').name == "\\ud800"  # a backslash, then "ud800"
    given_as_text = '{"ts":1,"kind":"job_start","job":"\ud800"}'
    with pytest.raises(EventError, match=r"^a lone surrogate U\+D800 at character 35 of"):
        decode_line(given_as_text)


def test_a_bom_on_line_1_is_skipped(tmp_path: Path, clean_report: Report) -> None:
    write_job(tmp_path, b"\xef\xbb\xbf" + CLEAN)
    report = analyze(tmp_path, JOB)
    assert "malformed_line" not in codes(report)
    same_numbers(report, clean_report)
    # ... and a BOM cut across two reads (live) too.
    store = MemoryStore()
    store.append(JOB, "s.jsonl", b"\xef\xbb")
    live = LiveJob(store, JOB)
    live.update()
    store.append(JOB, "s.jsonl", b"\xbf" + CLEAN)
    live.update()
    rep = live.report()
    assert "malformed_line" not in codes(rep)
    same_numbers(rep, clean_report)


def test_a_file_holding_only_a_bom_is_empty_not_torn(tmp_path: Path) -> None:
    # Found by the fuzzer: a BOM, then the file cut right after it. No event was lost.
    write_job(tmp_path, b"\xef\xbb\xbf")
    report = analyze(tmp_path, JOB)
    assert "torn_line" not in codes(report)
    assert "malformed_line" not in codes(report)
    assert "empty_log" in codes(report)


def test_decoders_raise_only_event_error() -> None:
    for bad in HOSTILE.values():
        with pytest.raises(EventError):
            decode_line(bad, "f", 3)
        assert decode_block(bad + b"\n") is None or isinstance(
            decode_block(bad + b"\n")[0],  # type: ignore[index]
            EventError,
        )
        (item,) = decode_lines([bad], "f", 3)
        assert isinstance(item, EventError)
        assert (item.file, item.line) == ("f", 3)


def test_validate_checks_ranges_of_built_events() -> None:
    ok = Event(ts=T0, kind="step_start", job=JOB, step=MAX_INT)
    assert validate(ok) is None
    problem = validate(Event(ts=T0, kind="step_start", job=JOB, step=2**63))
    assert problem is not None and "step" in problem
    assert validate(Event(ts=MAX_TS + 1, kind="heartbeat", job=JOB)) is not None
    assert validate(Event(ts=T0, kind="heartbeat", job=JOB, attempt=10**5000)) is not None


def test_attempt_id_from_the_environment() -> None:
    assert attempt_id("3") == 3
    assert attempt_id("007") == 7
    assert attempt_id("²") == "²"  # a Unicode digit, not a number
    assert attempt_id("1" * 5000) == "1" * 5000  # no 4,300-digit conversion error
    assert attempt_id("..") == ".."


# ----------------------------------------------------------- torn and unwritten


def test_torn_last_line_of_a_dead_writer_is_reported_by_a_cold_read(
    tmp_path: Path, clean_report: Report
) -> None:
    path = write_job(tmp_path, CLEAN + b'{"ts":1732000095,"kind":"heart')
    report = analyze(tmp_path, JOB)
    assert codes(report)["torn_line"] == [(str(path), N_CLEAN + 1)]
    (d,) = [d for d in report.diagnostics if d.code == "torn_line"]
    assert "30 bytes" in d.message and "lost" in d.message
    same_numbers(report, clean_report)


def test_a_complete_event_without_newline_is_named_and_not_counted(
    tmp_path: Path, clean_report: Report
) -> None:
    # Counting it cold but not live would make two numbers for one log: it is reported instead.
    lines = CLEAN.splitlines(keepends=True)
    data = b"".join([*lines[:-1], lines[-1].rstrip(b"\n")])
    path = write_job(tmp_path, data)
    report = analyze(tmp_path, JOB)
    (d,) = [d for d in report.diagnostics if d.code == "torn_line"]
    assert (d.file, d.line) == (str(path), N_CLEAN)
    assert "complete event" in d.message
    assert report.end_reason == "last_event"


def test_a_live_reader_waits_for_the_newline_then_reads_the_line() -> None:
    store = MemoryStore()
    store.append(JOB, "s.jsonl", CLEAN[:-20])  # job_end cut short: a write in progress
    live = LiveJob(store, JOB)
    live.update()
    assert "torn_line" not in codes(live.report())  # not yet: a live writer is mid-line
    assert "torn_line" in codes(live.report(final=True))
    store.append(JOB, "s.jsonl", CLEAN[-20:])
    live.update()
    rep = live.report(final=True)
    assert "torn_line" not in codes(rep)
    assert rep.end_reason == "job_end"


def test_a_live_reader_reports_a_line_torn_for_long(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    store = MemoryStore()
    store.append(JOB, "s.jsonl", CLEAN[:-20])
    live = LiveJob(store, JOB)
    live.update()
    clock[0] += TORN_AFTER_SECONDS - 1
    live.update()
    assert "torn_line" not in codes(live.report())
    clock[0] += 2
    live.update()
    assert codes(live.report())["torn_line"] == [(f"{store.uri}/{JOB}/s.jsonl", N_CLEAN)]
    store.append(JOB, "s.jsonl", b"xx")  # it grew: a writer is alive after all
    live.update()
    assert "torn_line" not in codes(live.report())


def test_a_live_reader_reports_at_once_a_line_torn_in_a_file_left_for_long(
    tmp_path: Path,
) -> None:
    # A reader that starts after the writer died (badput watch, the jobs list) needs not
    # wait a minute more: the file's time says how long the line has been as it is.
    path = write_job(tmp_path, CLEAN[:-20])
    live = LiveJob(tmp_path, JOB)
    live.update()
    assert "torn_line" not in codes(live.report())  # written just now: a write in progress
    old = time.time() - TORN_AFTER_SECONDS - 1
    os.utime(path, (old, old))
    live = LiveJob(tmp_path, JOB)
    live.update()
    assert codes(live.report())["torn_line"] == [(str(path), N_CLEAN)]


def test_badput_report_names_a_torn_last_line_at_once(tmp_path: Path) -> None:
    # The command reads the log once, as it is (docs/events.md): it lost this diagnostic
    # when it began to read through a LiveJob.
    path = write_job(tmp_path, CLEAN + b'{"ts":1732000095,"kind":"heart')
    result = CliRunner().invoke(main, ["report", str(tmp_path), "--job", JOB, "--json"])
    assert result.exit_code == 0, result.output
    torn = [d for d in json.loads(result.stdout)["diagnostics"] if d["code"] == "torn_line"]
    assert [(d["file"], d["line"]) for d in torn] == [(str(path), N_CLEAN + 1)]


def test_a_100_mb_line_without_newline_is_a_torn_line(tmp_path: Path) -> None:
    path = write_job(
        tmp_path, CLEAN + b'{"ts":1,"kind":"x","job":"good","name":"' + b"a" * 100_000_000
    )
    report = analyze(tmp_path, JOB)
    assert codes(report)["torn_line"] == [(str(path), N_CLEAN + 1)]


@pytest.mark.parametrize("block", [7, 100, 1 << 20])
def test_a_line_over_the_limit_is_skipped_without_being_held(
    monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(_lines, "MAX_LINE_BYTES", 1000)
    long = b'{"ts":1,"kind":"x","job":"good","name":"' + b"a" * 5000 + b'"}\n'
    data = CLEAN[:200] + CLEAN[200:].split(b"\n", 1)[0] + b"\n"
    n = data.count(b"\n")
    data += long + CLEAN
    parsed = parse_stream([data[i : i + block] for i in range(0, len(data), block)], "f", 0)
    items = [(c.first_line + i, it) for c in parsed.chunks for i, it in enumerate(c.items)]
    errors = [(ln, it) for ln, it in items if isinstance(it, EventError)]
    assert [ln for ln, _ in errors] == [n + 1]
    assert "line of 5,042 bytes" in errors[0][1].message  # without its newline
    assert [ln for ln, it in items if isinstance(it, Event)] == [
        *range(1, n + 1),
        *range(n + 2, n + 2 + N_CLEAN),
    ]
    assert parsed.n_bytes == len(data) and parsed.tail_size == 0
    # Unterminated: a torn tail of known size, not held.
    torn = parse_stream([CLEAN, long[:3000], long[3000:4000]], "f", 0)
    assert (torn.n_lines, torn.tail, torn.tail_size) == (N_CLEAN, b"", 4000)


def test_nul_filled_tail_is_not_yet_written() -> None:
    assert written_length(b"abc\n\x00\x00\x00") == 4
    assert written_length(b"\x00\x00") == 0
    assert written_length(b"a\x00b") == 3  # a NUL inside data is data
    # A pre-extended segment: lines, then NUL bytes; a line half-copied, then NULs.
    for data, tail in (
        (CLEAN + b"\x00" * 5000, b""),
        (CLEAN + b'{"ts":1' + b"\x00" * 99, b'{"ts":1'),
    ):
        parsed = parse_stream([data[:100], data[100:]], "seg", 0)
        assert parsed.n_lines == N_CLEAN
        assert parsed.n_bytes == len(CLEAN)
        assert parsed.tail == tail


def test_a_pre_extended_file_is_read_as_it_fills(tmp_path: Path, clean_report: Report) -> None:
    path = write_job(tmp_path, b"\x00" * (20 << 20))  # 20 MB of NUL: more than a read block
    live = LiveJob(tmp_path, JOB)
    live.update()
    with open(path, "r+b") as f:
        f.write(CLEAN)
    live.update()
    report = live.report(final=True)
    assert report.diagnostics == clean_report.diagnostics  # no torn or malformed line
    same_numbers(report, clean_report)


# --------------------------------------------------------------- not a file


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "directory"])
def test_a_jsonl_that_is_not_a_regular_file_is_never_opened(
    tmp_path: Path, clean_report: Report, kind: str
) -> None:
    write_job(tmp_path, CLEAN)
    odd = tmp_path / JOB / "0" / "odd.jsonl"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "socket":
        short = Path(f"/tmp/bp-{os.getpid()}-{time.monotonic_ns()}.sock")
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(short))
        odd.symlink_to(short)
    elif kind == "device":
        odd.symlink_to("/dev/zero")  # would never end
    else:
        odd.mkdir()
    stray = tmp_path / "stray.jsonl"  # in the store root, too
    os.mkfifo(stray)
    try:
        # In another process, so that a hang fails this test instead of the suite.
        out = subprocess.run(
            [sys.executable, "-m", "badput.cli", "report", str(tmp_path), "--job", JOB, "--json"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        report = analyze(tmp_path, JOB)
    finally:
        if kind == "socket":
            sock.close()
            short.unlink()
    assert out.returncode == 0, out.stderr
    if kind != "directory":  # a directory named *.jsonl is walked into, not read
        assert codes(report)["not_a_file"] == [(str(odd), None)]
    same_numbers(report, clean_report)


def test_an_unreadable_file_is_named(
    tmp_path: Path, clean_report: Report, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_job(tmp_path, CLEAN)
    locked = write_job(tmp_path, CLEAN.replace(b'"job_end"', b'"heartbeat"'), "locked.jsonl")
    real_open = os.open

    def refuse(path: str | os.PathLike[str], flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == str(locked):  # as chmod 000 does to anyone but root
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(_jsonl.os, "open", refuse)
    report = analyze(tmp_path, JOB)
    (d,) = [d for d in report.diagnostics if d.code == "unreadable_file"]
    assert (d.file, d.line) == (str(locked), None)
    assert "Permission denied" in d.message
    same_numbers(report, clean_report)


# -------------------------------------------------------------- sanitised paths


@pytest.mark.parametrize(
    "value", ["..", ".", "/", "../../etc", "a/../../b", "\x1b[2J", "", "x" * 5000, "1" * 5000]
)
def test_safe_name_stays_one_component(value: str) -> None:
    name = safe_name(value)
    assert name not in ("", ".", "..")
    assert "/" not in name and "\\" not in name and "\x1b" not in name
    assert len(name.encode()) <= MAX_NAME_BYTES
    assert safe_name(value + "y") != name or value == ""  # distinct values stay distinct


ATTEMPT_VARS = ("BADPUT_ATTEMPT", "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")


@pytest.mark.parametrize("var", ATTEMPT_VARS)
@pytest.mark.parametrize("value", ["..", "/", "../..", "x" * 5000, "1" * 5000])
def test_hostile_attempt_ids_stay_inside_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    for other in ATTEMPT_VARS:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(var, value)
    store = tmp_path / "store"
    for job in ("bad", JOB):
        rec = Recorder(job, store)
        rec.record_job_start(ts=T0)
        rec.record_job_end(ts=T0 + 5)
        rec.close()
    files = sorted(p.relative_to(store).parts for p in store.rglob("*.jsonl"))
    assert len(files) == 2
    assert all(len(parts) == 3 for parts in files)  # <job>/<attempt>/<stream>
    report = analyze(store, JOB)  # the store root is still a store of two jobs
    assert report.total_seconds == 5.0
    assert str(report.attempts[0].id) == value  # the events keep the real value


def test_hostile_attempt_argument_and_writer_key(tmp_path: Path) -> None:
    rec = Recorder("j", tmp_path, attempt="../..", host="../h")
    rec.record_job_start(ts=T0)
    rec.close()
    (path,) = tmp_path.rglob("*.jsonl")
    assert path.relative_to(tmp_path).parts[:2] == ("j", ".._..")
    name = WriterKey("..", "/", None, 1).stream_name()
    assert name.split("/")[0] == "__" and len(name.split("/")) == 2
    assert JsonlStore(tmp_path).jobs() == ["j"]


# ------------------------------------------------------------- total formatters


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True), st.booleans())
def test_every_formatter_takes_any_float(value: float, millis: bool) -> None:
    for text in (
        format_ts(value, millis=millis),
        format_duration(value),
        format_percent(value),
        window_label(value),
    ):
        assert isinstance(text, str) and text
        assert len(text) < 40  # a table cell, not 300 digits


def test_formatters_on_absurd_values() -> None:
    assert format_ts(1e300) == "1e+300"
    assert format_ts(-1e300) == "-1e+300"
    assert format_ts(MAX_TS, millis=False) == "9999-12-31T23:59:59Z"
    assert format_ts(-62_135_596_800.0) == "0001-01-01T00:00:00.000Z"
    assert format_duration(1e300) == "1.157e+295d"
    assert format_duration(-1e300) == "-1.157e+295d"


def test_a_jsonl_that_cannot_be_looked_at_is_named_not_skipped(tmp_path: Path) -> None:
    # A symbolic link loop named *.jsonl: stat fails; a file gone since the listing is
    # skipped, but one that is there and cannot be looked at is said.
    path = write_job(tmp_path, CLEAN)
    loop = path.parent / "loop.jsonl"
    loop.symlink_to(loop.name)
    dangling = path.parent / "gone.jsonl"
    dangling.symlink_to("nowhere.jsonl")
    report = analyze(tmp_path, JOB)
    found = {d.file: d.message for d in report.diagnostics if d.code == "unreadable_file"}
    assert set(found) == {str(loop), str(dangling)}
    assert "symbolic links" in found[str(loop)]
    assert "a symbolic link to nothing" in found[str(dangling)]
    assert report.total_seconds == 90.0
