"""Mutated real logs, for the read-path fuzzers (tests/test_fuzz_read.py, bench/fuzz_read.py).

A case is a few real logs (a crashed-and-restored job, the worked example with and
without attempt ids), each mutated by a random sequence of the damage logs meet in
practice or by malice: byte flips, truncation, lost/duplicated/swapped lines, values
of the wrong type, huge and non-finite numbers, deep nesting, bad encodings, terminal
controls and markup, NUL-filled tails, FIFOs. :func:`check_case` writes a case to a
store, reports it as ``badput report`` does (table and JSON), and returns what went
wrong: nothing, for the read path to be right.
"""

from __future__ import annotations

import io
import os
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from _worked_example import worked_example_events
from badput.analysis import analyze
from badput.events import EventError
from badput.formats.codec import decode_line, encode_lines
from badput.report import render_table, to_json
from badput.testing import Timeline

JOB = "fuzzed"
T0 = 1_732_000_000.0


def _restarted_job() -> bytes:
    tl = Timeline(JOB, start=T0)
    tl.identity.update(attempt=0, rank=0, host="h0")
    tl.emit("job_scheduled")
    tl.emit("job_start", dt=5.0)
    tl.span("accelerator_init", 3.0)
    tl.span("training_prep", 2.0)
    tl.steps(6, 1.0)
    tl.span("checkpoint_save", 0.5, step=6)
    tl.emit("checkpoint_committed", step=6)
    tl.span("data_loading", 0.2, blocking=False)
    tl.steps(4, 1.2)
    tl.span("custom", 0.7, name="eval")
    tl.emit("attempt_end", status="failed", exit_code=1)
    tl.identity["attempt"] = 1
    tl.emit("job_start", dt=4.0)
    tl.span("elastic_wait", 1.0, name="scale_up")
    tl.emit("elastic_slices", active=2, total=4, available=2)
    tl.span("checkpoint_restore", 1.0, step=6)
    tl.span("compile", 0.5)
    tl.steps(8, 1.0, first=7)
    tl.emit("heartbeat")
    tl.emit("job_end", status="completed")
    return encode_lines(tl.events)


def _rename(data: bytes, job: bytes) -> bytes:
    return data.replace(b'"worked-example"', b'"' + job + b'"')


SEEDS: list[bytes] = [
    _restarted_job(),
    _rename(encode_lines(worked_example_events()), JOB.encode()),
    _rename(encode_lines(worked_example_events(with_ids=False, step_ends=False)), JOB.encode()),
]

# Values that break naive readers, by what they break.
HOSTILE_VALUES: list[bytes] = [
    b"9223372036854775808",  # 2**63
    b"-9223372036854775809",
    b"18446744073709551616",  # 2**64
    b"1" + b"0" * 400,  # 10**400 as an integer
    b"1e300",
    b"-1e300",
    b"1e400",  # overflows to inf
    b"-1e400",
    b"NaN",
    b"Infinity",
    b"-0",
    b"2.5e-320",  # subnormal
    b"253402300800",  # year 10000
    b"-62135596801",  # before year 1
    b"true",
    b"null",
    b'""',
    b'"12"',
    b"[]",
    b"{}",
    b'"\\ud800"',  # lone surrogate
    b'"\\u0000"',
    b'"\x1b]0;title\x07[link=https://x.example]c[/link]"',
    b'"' + b"x" * 5000 + b'"',
]


def _line_spans(data: bytes) -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in re.finditer(rb"\n", data):
        spans.append((start, m.start()))
        start = m.end()
    if start < len(data):
        spans.append((start, len(data)))
    return spans


def flip_bytes(data: bytes, rnd: random.Random) -> bytes:
    if not data:
        return data
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 8)):
        i = rnd.randrange(len(buf))
        buf[i] = rnd.choice([rnd.randrange(256), 0, 0x0A, 0x1B, 0x80, 0xE9, 0xFF, ord("{"), 0x22])
    return bytes(buf)


def truncate(data: bytes, rnd: random.Random) -> bytes:
    return data[: rnd.randrange(len(data) + 1)]


def shuffle_lines(data: bytes, rnd: random.Random) -> bytes:
    lines = data.split(b"\n")
    for _ in range(rnd.randint(1, 4)):
        if len(lines) < 2:
            break
        i, j = rnd.randrange(len(lines)), rnd.randrange(len(lines))
        op = rnd.randrange(3)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


_VALUE = re.compile(rb'(?<=:)(-?[0-9][0-9.eE+-]*|"[^"\\]*"|true|false|null)')


def wrong_value(data: bytes, rnd: random.Random) -> bytes:
    """A field's value replaced by one of the wrong type or out of range."""
    matches = list(_VALUE.finditer(data))
    if not matches:
        return data
    out = data
    chosen = rnd.sample(matches, min(len(matches), rnd.randint(1, 3)))
    for m in sorted(chosen, key=lambda m: -m.start()):
        out = out[: m.start()] + rnd.choice(HOSTILE_VALUES) + out[m.end() :]
    return out


def deep_nesting(data: bytes, rnd: random.Random) -> bytes:
    spans = _line_spans(data)
    if not spans:
        return data
    a, _ = rnd.choice(spans)
    depth = rnd.choice([100, 999, 1000, 1001, 5000, 50_000])
    opener, closer = rnd.choice([(b"[", b"]"), (b'{"a":', b"}")])
    nested = b'{"ts":1732000001,"kind":"heartbeat","job":"fuzzed","x":' + opener * depth
    nested += b"1" + closer * depth + b"}"
    return data[:a] + nested + b"\n" + data[a:]


def bad_encoding(data: bytes, rnd: random.Random) -> bytes:
    spans = _line_spans(data)
    if not spans:
        return data
    a, b = rnd.choice(spans)
    line = data[a:b]
    op = rnd.randrange(6)
    if op == 0:  # latin-1 é inside a string
        new = line.replace(b'"job":"', b'"job":"caf\xe9', 1)
    elif op == 1:
        new = line.decode("utf-8", "replace").encode("utf-16")
    elif op == 2:
        new = b"\xef\xbb\xbf" + line  # a BOM (fine on line 1 only)
    elif op == 3:  # an overlong encoding and a lone continuation byte
        new = line.replace(b'"kind":"', b'"kind":"\xc0\xaf\x80', 1)
    elif op == 4:
        new = line.replace(b"\n", b"") + b"\r"  # CRLF
    else:
        new = line[: len(line) // 2] + b"\xf0\x9f" + line[len(line) // 2 :]  # cut code point
    return data[:a] + new + data[b:]


def nul_tail(data: bytes, rnd: random.Random) -> bytes:
    """A pre-extended segment: the written bytes, then NULs (maybe mid-line)."""
    cut = rnd.randrange(len(data) + 1) if rnd.random() < 0.5 else len(data)
    return data[:cut] + b"\x00" * rnd.choice([1, 100, 5000])


def long_line(data: bytes, rnd: random.Random) -> bytes:
    size = rnd.choice([70_000, 1 << 20, 3 << 20])
    junk = b'{"ts":1732000001,"kind":"custom_start","job":"fuzzed","name":"' + b"n" * size
    return data + junk + (b'"}\n' if rnd.random() < 0.5 else b"")


MUTATORS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "flip_bytes": flip_bytes,
    "truncate": truncate,
    "shuffle_lines": shuffle_lines,
    "wrong_value": wrong_value,
    "deep_nesting": deep_nesting,
    "bad_encoding": bad_encoding,
    "nul_tail": nul_tail,
    "long_line": long_line,
}
# long_line is costly (megabytes): drawn less often.
_WEIGHTS = {"long_line": 0.2}


@dataclass
class Case:
    """Files of one job (relative path -> bytes) and odd entries to create."""

    files: dict[str, bytes]
    fifo: bool = False
    mutations: list[str] = field(default_factory=list)


def make_case(rnd: random.Random) -> Case:
    files: dict[str, bytes] = {}
    names: list[str] = []
    for k in range(rnd.choice([1, 1, 2])):
        data = rnd.choice(SEEDS)
        for _ in range(rnd.randint(1, 4)):
            name = rnd.choices(list(MUTATORS), [_WEIGHTS.get(n, 1.0) for n in MUTATORS])[0]
            names.append(name)
            data = MUTATORS[name](data, rnd)
        files[f"{k}/h-0-{k + 1}.jsonl"] = data
    return Case(files, fifo=rnd.random() < 0.05, mutations=names)


def write_case(case: Case, root: Path) -> Path:
    job_dir = root / JOB
    for rel, data in case.files.items():
        path = job_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if case.fifo:
        os.mkfifo(job_dir / "0" / "pipe.jsonl")
        os.mkfifo(root / "stray.jsonl")
    return job_dir


def bad_lines(data: bytes) -> list[int]:
    """Line numbers of complete lines that are not valid events (as a reader numbers them)."""
    out = []
    lines = data.split(b"\n")[:-1]
    for i, raw in enumerate(lines, 1):
        line = raw[3:] if i == 1 and raw.startswith(b"\xef\xbb\xbf") else raw
        if not line.strip():
            continue
        try:
            decode_line(line)
        except EventError:
            out.append(i)
    return out


def check_case(case: Case, root: Path, seen: Counter[str] | None = None) -> list[str]:
    """Report ``case`` like ``badput report`` (table and JSON); what went wrong, if anything.

    An exception escapes to the caller (a traceback or an abort); the returned
    problems are diagnostics that fail to name their file and line. ``seen``
    counts the diagnostic codes of the report.
    """
    job_dir = write_case(case, root)
    report = analyze(root, JOB)
    con = Console(file=io.StringIO(), width=100)
    render_table(report, con)
    to_json(report)
    if seen is not None:
        seen.update(d.code for d in report.diagnostics)
    problems = []
    by_line = {(d.file, d.line) for d in report.diagnostics if d.code == "malformed_line"}
    capped = sum(1 for d in report.diagnostics if d.code == "malformed_line") >= 20
    for rel, data in case.files.items():
        path = str(job_dir / rel)
        written = data.rstrip(b"\x00")
        complete = written[: written.rfind(b"\n") + 1]
        for n in bad_lines(complete):
            if (path, n) not in by_line and not capped:
                problems.append(f"{rel}:{n} is not a valid event but no diagnostic names it")
        torn = written[len(complete) :]
        if not complete and torn.startswith(b"\xef\xbb\xbf"):
            torn = torn[3:]  # a byte order mark alone is no event: the reader skips it
        if torn and not any(
            d.code == "torn_line" and d.file == path and d.line == complete.count(b"\n") + 1
            for d in report.diagnostics
        ):
            problems.append(f"{rel}: torn last line not reported")
    for d in report.diagnostics:
        if d.message.startswith("... and "):  # the count of those past the cap of 20 per code
            continue
        if d.code in ("malformed_line", "torn_line") and (d.file is None or d.line is None):
            problems.append(f"diagnostic without file:line: {d}")
    if case.fifo and not any(d.code == "not_a_file" for d in report.diagnostics):
        problems.append("a FIFO named *.jsonl was not reported")
    return problems
