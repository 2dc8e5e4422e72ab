"""Turning the bytes of one append-only stream into decoded :class:`Chunk` s.

Shared by every store that keeps JSON lines (files, memory). The rules are those
of ``EVENTS.md``: only ``\\n``-terminated lines are consumed (a torn last line is
left for a later read, and handed back so that readers can report it), empty
lines are skipped but counted, line numbers are 1-based and continue across
incremental reads, and a UTF-8 byte order mark at the start of a stream is skipped.

A stream may be a file that its writer extended before writing (a memory-mapped
segment): its unwritten tail reads as NUL bytes. :func:`written_length` is the one
rule for where the written part ends: at the first NUL of a trailing NUL run.
Those bytes are "not yet written", neither a line nor a torn line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, NamedTuple

from badput.events import EventError
from badput.formats.codec import decode_block_coded, decode_line, decode_lines
from badput.store._base import Chunk, Cursor, Unread

__all__ = [
    "BOM",
    "CHUNK_LINES",
    "MAX_LINE_BYTES",
    "Parsed",
    "parse_stream",
    "torn_tail",
    "written_length",
]

#: Most lines decoded into one :class:`Chunk` (bounds the size of one decode batch).
CHUNK_LINES: Final = 65_536
#: The UTF-8 byte order mark some editors write at the start of a file.
BOM: Final = b"\xef\xbb\xbf"
#: Longest unterminated tail decoded to tell a complete event from a torn one.
_DECODE_TAIL_MAX: Final = 1 << 20
#: Longest line kept in memory. A longer one (no event is: they are well under 1 KB) is
#: skipped without being held, and reported with its length.
MAX_LINE_BYTES: Final = 64 << 20


def written_length(data: bytes) -> int:
    """How many bytes of ``data`` were written: all but its trailing run of NUL bytes.

    A pre-extended (memory-mapped) stream file reads as NUL past its last write;
    a reader stops at the first NUL of that run and reads on from there later.
    A NUL followed by other bytes is data (and makes its line malformed).
    """
    if not data or data[-1] != 0:
        return len(data)
    return len(data.rstrip(b"\x00"))


class Parsed(NamedTuple):
    """What :func:`parse_stream` decoded and where it stopped."""

    chunks: list[Chunk]
    #: Bytes consumed: up to and including the last ``\n`` (and a leading BOM).
    n_bytes: int
    #: Lines consumed.
    n_lines: int
    #: The written bytes after the last ``\n`` (a line in progress, or torn), NULs excluded;
    #: empty when that line is over :data:`MAX_LINE_BYTES` (only its size is known).
    tail: bytes
    #: How many bytes that unterminated line has.
    tail_size: int


def parse_stream(
    blocks: Iterable[bytes],
    source: str,
    lines_done: int,
    chunk_lines: int = CHUNK_LINES,
    *,
    at_start: bool | None = None,
    lean: bool = False,
) -> Parsed:
    """Decode the complete lines of ``blocks`` (consecutive bytes of one stream).

    ``lines_done`` is the number of lines already consumed before the first byte of
    ``blocks``; ``at_start`` says whether ``blocks`` begins at byte 0 of the stream
    (default: when ``lines_done`` is 0), where a UTF-8 BOM is skipped. Returns the
    chunks, the bytes and lines consumed (up to and including the last ``\\n`` seen)
    and the unterminated written tail, which is not consumed.

    The complete lines of each block are decoded in one call when they are all
    plain one-object lines (the common case); otherwise line by line, so that a
    blank line is skipped but counted and a bad line is reported with its number.
    A line longer than :data:`MAX_LINE_BYTES` is never held whole: it becomes an
    error item naming its length (or, unterminated, a tail of known size).
    ``lean``: see :func:`~badput.formats.codec.decode_block_coded` (the engine's reads).
    """
    chunks: list[Chunk] = []
    consumed = 0
    lineno = lines_done  # number of the last complete line seen so far
    carry = b""
    # Blocks without a newline after ``carry`` (a line longer than a block), joined to it once
    # its end comes: adding each to ``carry`` copied and searched the line so far again for
    # every block (a read of a 60 MB line in 1 MiB blocks: 1.73 s, now 0.34 s).
    pending: list[bytes] = []
    pending_len = 0
    skipping = 0  # > 0: inside an overlong line, of which this many bytes were seen
    first = lines_done == 0 if at_start is None else at_start
    for raw in blocks:
        block = raw
        if skipping:
            nl = block.find(b"\n")
            if nl < 0:
                skipping += len(block)
                continue
            lineno += 1
            chunks.append(_overlong(source, lineno, skipping + nl))
            consumed += skipping + nl + 1
            skipping = 0
            block = block[nl + 1 :]
        if not block:
            continue
        if (carry or pending) and not first and b"\n" not in block:
            pending.append(block)
            pending_len += len(block)
            if len(carry) + pending_len > MAX_LINE_BYTES:
                carry, pending, pending_len = carry + b"".join(pending), [], 0
                if written_length(carry) > MAX_LINE_BYTES:
                    skipping, carry = len(carry), b""
            continue
        if pending:
            carry, pending, pending_len = carry + b"".join(pending), [], 0
        data = carry + block if carry else block
        if first:
            if len(data) < len(BOM) and BOM.startswith(data):
                carry = data
                continue
            first = False
            if data.startswith(BOM):
                data = data[len(BOM) :]
                consumed += len(BOM)
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            carry = data
            if written_length(carry) > MAX_LINE_BYTES:
                skipping, carry = len(carry), b""
            continue
        region, carry = data[:cut], data[cut:]
        consumed += cut
        if written_length(carry) > MAX_LINE_BYTES:
            skipping, carry = len(carry), b""
        lineno = _decode_region(region, source, lineno, chunk_lines, chunks, lean)
    return _ended(chunks, consumed, lineno - lines_done, carry + b"".join(pending), skipping)


def _ended(chunks: list[Chunk], consumed: int, n_lines: int, carry: bytes, skipping: int) -> Parsed:
    """What :func:`parse_stream` made of a stream whose unterminated rest is ``carry`` (or,
    ``skipping``, a line over :data:`MAX_LINE_BYTES` of that many bytes so far)."""
    if skipping:
        return Parsed(chunks, consumed, n_lines, b"", skipping)
    tail = carry[: written_length(carry)]
    return Parsed(chunks, consumed, n_lines, tail, len(tail))


def torn_tail(
    parsed: Parsed, source: str, line: int, modified: float | None = None
) -> Unread | None:
    """The :class:`Unread` record of an unterminated tail (``None`` when there is none);
    ``modified``: when its file was last written, if known."""
    tail = parsed.tail
    if not parsed.tail_size:
        return None
    complete = False
    if tail and len(tail) <= _DECODE_TAIL_MAX:
        try:
            decode_line(tail.rstrip(b"\r"))
        except EventError:
            pass
        else:
            complete = True
    return Unread("torn_line", source, line, parsed.tail_size, complete, modified=modified)


def keep_parsed(
    parsed: Parsed,
    stream: str,
    source: str,
    offset: int,
    lines: int,
    *,
    out: Cursor,
    chunks: list[Chunk],
    unread: list[Unread],
    modified: float | None = None,
) -> None:
    """Add what ``parsed`` read of ``stream`` (from byte ``offset``, after ``lines`` lines)
    to a read's chunks, its cursor ``out`` and its ``unread`` records (a torn tail)."""
    chunks.extend(parsed.chunks)
    if parsed.n_bytes:
        out.offsets[stream] = (offset + parsed.n_bytes, lines + parsed.n_lines)
    torn = torn_tail(parsed, source, lines + parsed.n_lines + 1, modified)
    if torn is not None:
        unread.append(torn)


def _overlong(source: str, lineno: int, size: int) -> Chunk:
    """The error item of line ``lineno``, ``size`` bytes long: over :data:`MAX_LINE_BYTES`."""
    message = f"line of {size:,} bytes, longer than {MAX_LINE_BYTES:,}: not read"
    return Chunk(source, lineno, [EventError(message, source, lineno)])


def _decode_region(  # noqa: PLR0917 (parse_stream's state, passed on)
    region: bytes, source: str, lineno: int, chunk_lines: int, chunks: list[Chunk], lean: bool
) -> int:
    """Decode ``region``, complete lines after line ``lineno``, into ``chunks``; the number
    of its last line. In one call when its lines are plain one-object lines, else line by
    line."""
    # A region longer than a line may be holds a line that is too long: line by line.
    coded = None
    if len(region) <= MAX_LINE_BYTES:
        coded = decode_block_coded(region, source, lineno + 1, lean=lean)
    if coded is not None:
        fast, columns = coded
        for k in range(0, len(fast), chunk_lines):
            part = None if columns is None else columns.rows(k, k + chunk_lines)
            chunks.append(Chunk(source, lineno + 1 + k, fast[k : k + chunk_lines], part))
        return lineno + len(fast)
    return _parse_lines(region.split(b"\n")[:-1], source, lineno, chunk_lines, chunks)


def _parse_lines(
    parts: list[bytes], source: str, lineno: int, chunk_lines: int, chunks: list[Chunk]
) -> int:
    """Line-by-line path: blank lines skipped (but counted), runs decoded together."""
    run: list[bytes] = []
    run_first = lineno + 1

    def emit() -> None:
        chunks.append(Chunk(source, run_first, decode_lines(run, source, run_first)))

    for line in parts:
        lineno += 1
        if len(line) > MAX_LINE_BYTES:  # what a reader that never holds it would say
            if run:
                emit()
                run = []
            chunks.append(_overlong(source, lineno, len(line)))
            continue
        if not line.strip():
            if run:
                emit()
                run = []
            continue
        if not run:
            run_first = lineno
        run.append(line)
        if len(run) == chunk_lines:
            emit()
            run = []
    if run:
        emit()
    return lineno
