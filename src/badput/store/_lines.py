"""Turning the bytes of one append-only stream into decoded :class:`Chunk` s.

Shared by every store that keeps JSON lines (files, memory). The rules are those
of ``EVENTS.md``: only ``\\n``-terminated lines are consumed (a torn last line is
left for a later read), empty lines are skipped but counted, line numbers are
1-based and continue across incremental reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from badput._codec import decode_block, decode_lines
from badput.store._base import Chunk

__all__ = ["CHUNK_LINES", "parse_stream", "written_part"]

#: Most lines decoded into one :class:`Chunk` (bounds the size of one decode batch).
CHUNK_LINES: Final = 65_536


def written_part(block: bytes) -> tuple[bytes, bool]:
    """``block`` up to its first NUL byte, and whether it had one.

    The recorder's event files are pre-allocated and memory-mapped: what was not
    written yet reads as a run of NUL bytes, which no JSON line contains. A reader
    stops there (the rest is a write in progress, or the tail of a killed writer).
    """
    cut = block.find(b"\0")
    return (block, False) if cut < 0 else (block[:cut], True)


def parse_stream(
    blocks: Iterable[bytes],
    source: str,
    lines_done: int,
    chunk_lines: int = CHUNK_LINES,
) -> tuple[list[Chunk], int, int]:
    """Decode the complete lines of ``blocks`` (consecutive bytes of one stream).

    ``lines_done`` is the number of lines already consumed before the first byte of
    ``blocks``. Returns ``(chunks, bytes_consumed, lines_consumed)``: the bytes and
    lines consumed here, up to and including the last ``\\n`` seen; whatever follows
    it (a write in progress) is not consumed.

    The complete lines of each block are decoded in one call when they are all
    plain one-object lines (the common case); otherwise line by line, so that a
    blank line is skipped but counted and a bad line is reported with its number.
    """
    chunks: list[Chunk] = []
    consumed = 0
    lineno = lines_done  # number of the last complete line seen so far
    carry = b""
    for block in blocks:
        if not block:
            continue
        data = carry + block if carry else block
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            carry = data
            continue
        region, carry = data[:cut], data[cut:]
        consumed += cut
        fast = decode_block(region, source, lineno + 1) if len(region) < (1 << 28) else None
        if fast is not None:
            for k in range(0, len(fast), chunk_lines):
                chunks.append(Chunk(source, lineno + 1 + k, fast[k : k + chunk_lines]))
            lineno += len(fast)
            continue
        lineno = _parse_lines(region.split(b"\n")[:-1], source, lineno, chunk_lines, chunks)
    return chunks, consumed, lineno - lines_done


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
