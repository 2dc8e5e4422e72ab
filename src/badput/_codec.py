"""The one place that turns events into bytes and back.

msgspec does the work (about 0.3 µs an event); the bytes are plain JSON lines,
so the standard library's ``json`` reads everything written here.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from badput.events import Event, EventError, validate

__all__ = ["decode_line", "decode_lines", "encode_line", "encode_lines"]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Event)
_batch_decoder = msgspec.json.Decoder(list[Event])


def encode_line(event: Event) -> bytes:
    """One event as a ``\\n``-terminated JSON line."""
    return _encoder.encode(event) + b"\n"


def encode_lines(events: Sequence[Event]) -> bytes:
    """Many events as consecutive JSON lines (one buffer, one write)."""
    buf = bytearray()
    for event in events:
        _encoder.encode_into(event, buf, len(buf))
        buf += b"\n"
    return bytes(buf)


def decode_line(line: bytes | str, file: str | None = None, lineno: int | None = None) -> Event:
    """Decode and validate one line; raise :class:`EventError` naming ``file:lineno``."""
    try:
        event = _decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise EventError(f"invalid event: {exc}", file, lineno) from None
    except msgspec.DecodeError as exc:
        raise EventError(f"not a JSON object: {exc}", file, lineno) from None
    problem = validate(event)
    if problem is not None:
        raise EventError(problem, file, lineno)
    return event


def decode_lines(
    lines: Sequence[bytes], file: str | None = None, first_lineno: int = 1
) -> list[Event | EventError]:
    """Decode complete lines; each result is an event or the error for that line.

    The common case (every line valid) is decoded as one JSON array, which is
    several times faster than line by line; a batch with a bad line falls back to
    per-line decoding so that the error names its line.
    """
    if not lines:
        return []
    try:
        events = _batch_decoder.decode(b"[" + b",".join(lines) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    else:
        if len(events) == len(lines):
            out: list[Event | EventError] = []
            for i, event in enumerate(events):
                problem = validate(event)
                out.append(
                    event if problem is None else EventError(problem, file, first_lineno + i)
                )
            return out
    results: list[Event | EventError] = []
    for i, line in enumerate(lines):
        try:
            results.append(decode_line(line, file, first_lineno + i))
        except EventError as exc:
            results.append(exc)
    return results
