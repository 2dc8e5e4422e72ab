"""The one place that turns events into bytes and back.

msgspec does the work (about 0.3 µs an event); the bytes are plain JSON lines,
so the standard library's ``json`` reads everything written here.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from operator import attrgetter
from typing import Any, Final, Literal, NamedTuple, cast

import msgspec

from badput.events import (
    KIND_CODE,
    KIND_NAMES,
    NAMED_KINDS,
    SCHEMA_VERSION,
    STEP_KINDS,
    DecodedColumns,
    Event,
    EventError,
    Kind,
    LeanEvent,
    LeanRows,
    Writer,
    validate,
)

__all__ = [
    "EventWithUnknown",
    "decode_block",
    "decode_block_coded",
    "decode_line",
    "decode_lines",
    "decoding_for_columns",
    "encode_line",
    "encode_lines",
    "why_not_text",
]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Event)


class EventWithUnknown(Event, kw_only=True, omit_defaults=True, gc=False):
    """An :class:`~badput.events.Event` whose line also had fields schema v1 lacks, which a
    read drops: only a read for columns (:func:`decoding_for_columns`) makes one, for the
    archive to keep them. ``unknown_fields``: a JSON object's text of them, each key
    re-encoded and each value the line's own bytes (``1e400`` stays ``1e400``)."""

    unknown_fields: str | None = None


class _StrictEvent(Event, kw_only=True, omit_defaults=True, gc=False, forbid_unknown_fields=True):
    """An :class:`~badput.events.Event` whose line has no field schema v1 lacks (a read for
    columns decodes a block as these: one with an unknown field fails, and is read again
    with them kept)."""


_strict_decoder = msgspec.json.Decoder(_StrictEvent)
_raw_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])
_KNOWN_FIELDS: Final = frozenset(Event.__struct_fields__)


def _unknown_text(fields: dict[str, msgspec.Raw]) -> str | None:
    """The JSON text of the fields of ``fields`` (a line's, values undecoded) that schema v1
    lacks; None when it has none."""
    unknown = [(k, v) for k, v in fields.items() if k not in _KNOWN_FIELDS]
    if not unknown:
        return None
    return (
        "{"
        + ",".join(f"{_encoder.encode(k).decode()}:{bytes(v).decode()}" for k, v in unknown)
        + "}"
    )


def _with_unknown(event: Event, line: bytes | str) -> Event:
    """``event`` (decoded from ``line``) with the fields of ``line`` that schema v1 lacks."""
    try:
        unknown = _unknown_text(_raw_fields.decode(line))
    except Exception:  # (the event decoded: a line this cannot read has nothing to add)
        return event
    if unknown is None:
        return event
    return EventWithUnknown(**msgspec.structs.asdict(event), unknown_fields=unknown)


def _decoded_keeping_unknown(block: bytes) -> list[Event]:
    """The events of ``block`` (one object a line) with the fields schema v1 lacks
    (:class:`EventWithUnknown`); raises as a decode of the block does."""
    events: list[Event] = _decoder.decode_lines(block)
    raws = _raw_fields.decode_lines(block)
    asdict = msgspec.structs.asdict
    for i, fields in enumerate(raws):
        unknown = _unknown_text(fields)
        if unknown is not None:
            events[i] = EventWithUnknown(**asdict(events[i]), unknown_fields=unknown)
    return events


# Kinds whose rules a present ``step`` does not settle.
_CHECK_ALWAYS = NAMED_KINDS | {Kind.ELASTIC_SLICES, Kind.SECTION_SUMMARY}
# By kind code (the last entry stands for -1, an unknown kind: validate() has no rule for it).
_CHECK_CODES = [k in _CHECK_ALWAYS for k in KIND_NAMES] + [False]
_STEP_CODES = [k in STEP_KINDS for k in KIND_NAMES] + [False]
_kind = attrgetter("kind")
_step = attrgetter("step")


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


_BOM = b"\xef\xbb\xbf"


def decode_line(line: bytes | str, file: str | None = None, lineno: int | None = None) -> Event:
    """Decode and validate one line; raise :class:`EventError` naming ``file:lineno``.

    Whatever the bytes, the only exception is :class:`EventError`: invalid UTF-8,
    nesting too deep for the decoder, out-of-range numbers and the like each
    become the error of this one line. A UTF-8 byte order mark before the object
    (editors on Windows write one on line 1) is skipped.
    """
    if isinstance(line, bytes) and line.startswith(_BOM):
        line = line[len(_BOM) :]
    elif isinstance(line, str) and line.startswith("\ufeff"):
        line = line[1:]
    try:
        event = _decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise EventError(f"invalid event: {exc}", file, lineno) from None
    except (msgspec.DecodeError, UnicodeError) as exc:
        # msgspec says "Input data was truncated" of a lone surrogate escape, and names the
        # position of a bad byte in its string, not in the line: say what is wrong, where.
        why = why_not_text(line)
        if why is None:
            why = f"not a JSON object: {exc}"
            if isinstance(exc, UnicodeDecodeError):
                why = f"not valid UTF-8: {exc.reason}"
        raise EventError(why, file, lineno) from None
    except RecursionError:
        raise EventError("JSON nested too deeply to decode", file, lineno) from None
    except Exception as exc:  # never let one line stop a report (a decoder bug, memory...)
        raise EventError(f"undecodable line: {type(exc).__name__}: {exc}", file, lineno) from None
    problem = validate(event)
    if problem is not None:
        raise EventError(problem, file, lineno)
    if _for_columns.get():  # (the archive keeps what schema v1 lacks)
        return _with_unknown(event, line)
    return event


#: A JSON escape: ``\\uXXXX`` or a backslash and one character (``\\\\`` among them, so that
#: the ``u`` after an escaped backslash is never taken for one).
_ESCAPE: Final = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)


def why_not_text(line: bytes | str) -> str | None:
    """What makes ``line`` not text, if that is why it does not decode: a byte that is
    not UTF-8, or a ``\\uD800``-``\\uDFFF`` escape that is not half of a surrogate pair
    (JSON allows it; no character is, and UTF-8 cannot hold it); None when neither."""
    if isinstance(line, str):  # (given as text: a surrogate in it is a character)
        at = next((i for i, c in enumerate(line) if "\ud800" <= c <= "\udfff"), None)
        if at is not None:
            return f"a lone surrogate U+{ord(line[at]):04X} at character {at + 1:,} of the line"
        raw = line.encode("utf-8")
    else:
        raw = line
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = raw[exc.start : exc.end].hex(" ")
            return f"not valid UTF-8: byte {exc.start + 1:,} of the line ({bad}): {exc.reason}"
    pending: re.Match[bytes] | None = None  # a high half, waiting for its low half
    for m in _ESCAPE.finditer(raw):
        unit = int(m.group(1), 16) if m.group(1) else -1
        low = 0xDC00 <= unit <= 0xDFFF
        if pending is not None:
            if low and m.start() == pending.end():
                pending = None
                continue
            return _lone_surrogate(pending)
        if low:
            return _lone_surrogate(m)
        if 0xD800 <= unit <= 0xDBFF:
            pending = m
    return None if pending is None else _lone_surrogate(pending)


def _lone_surrogate(escape: re.Match[bytes]) -> str:
    return (
        f"a lone surrogate escape {escape.group(0).decode('ascii')} at byte "
        f"{escape.start() + 1:,} of the line: half of a UTF-16 pair, not a character "
        "(UTF-8 cannot hold it)"
    )


#: From this many bytes on, a block's lines are checked with numpy (one pass, 4x faster
#: than two ``bytes.count``); below, numpy's per-call cost is more than the counts take.
_VECTOR_CHECK_BYTES = 64 * 1024


def _lines_if_one_object_each(block: bytes) -> int:
    """The number of lines of ``block`` when every line starts with ``{`` and ends with
    ``}\n``, else 0.

    It is what makes a whole-block decode safe: with every boundary ``}\n{``, a line
    holding two objects or half of one makes the decoder fail or return the wrong count,
    so no bad line can hide. A small block is checked with byte counts (C speed); a large
    one with numpy, its newlines found once and the bytes beside each compared (0.08 s for
    the 350 MB of a million steps with a data load each, against 0.3 s for the counts).
    """
    if block[:1] != b"{" or block[-2:] != b"}\n":
        return 0
    if len(block) < _VECTOR_CHECK_BYTES:
        n_lines = block.count(b"\n")
        return n_lines if block.count(b"}\n{") == n_lines - 1 else 0
    import numpy as np  # noqa: PLC0415 (the recorder encodes with this module: numpy stays out)

    raw = np.frombuffer(block, np.uint8)
    newlines = np.flatnonzero(raw == _NEWLINE)
    # block[0] is "{", so no newline is at 0 (newlines - 1 never wraps round)
    if not (raw[newlines - 1] == _CLOSE).all() or not (raw[newlines[:-1] + 1] == _OPEN).all():
        return 0
    return int(newlines.shape[0])


_NEWLINE, _OPEN, _CLOSE = ord("\n"), ord("{"), ord("}")


def decode_block(
    block: bytes, file: str | None = None, first_lineno: int = 1
) -> list[Event | EventError] | None:
    """Decode a block of complete ``\n``-terminated lines in one call, or ``None``.

    ``None`` means the block is not the common case (a blank, malformed or odd
    line is in it): decode it line by line with :func:`decode_lines` instead.
    """
    coded = decode_block_coded(block, file, first_lineno)
    return None if coded is None else cast("list[Event | EventError]", coded[0])


@functools.cache
def _code_tables() -> tuple[Any, Any]:
    """:data:`_CHECK_CODES` and :data:`_STEP_CODES` as numpy arrays (made on first use)."""
    import numpy as np  # noqa: PLC0415 (see decode_block_coded)

    return np.array(_CHECK_CODES, np.bool_), np.array(_STEP_CODES, np.bool_)


def decode_block_coded(
    block: bytes, file: str | None = None, first_lineno: int = 1, *, lean: bool = False
) -> tuple[list[Event | EventError] | LeanRows, DecodedColumns | None] | None:
    """:func:`decode_block`, with the columns its checks work out anyway (the kind code of
    each item, the steps of the step kinds: :class:`~badput.events.DecodedColumns`) for a
    block of :data:`_VECTOR_CHECK_BYTES` or more; None for a smaller one, whose events are
    checked one by one (numpy's cost per call is more than the loop over a few dozen, and
    more than the engine's columns of them: the file of an attempt of a job of 10,000).

    With ``lean`` (the engine's reads), a block of :data:`_VECTOR_CHECK_BYTES` or more whose
    lines all have its first line's writer is decoded as :class:`~badput.events.LeanEvent` s
    (the items are then :class:`~badput.events.LeanRows`, and the columns name the writer).
    Their events cost a second decode: a reader of events leaves ``lean`` off.
    """
    n_lines = _lines_if_one_object_each(block)
    if not n_lines:
        return None
    if lean and len(block) >= _VECTOR_CHECK_BYTES:
        decoded = _decode_lean(block, file, first_lineno, n_lines)
        if decoded is not None:
            return decoded
    columns = _for_columns.get()
    try:
        events = (_strict_decoder if columns else _decoder).decode_lines(block)
    except Exception as exc:  # any bad line (bad UTF-8, deep nesting...): the per-line path
        if not (columns and "unknown field" in str(exc)):
            return None
        try:  # fields schema v1 lacks, which a read for columns keeps
            events = _decoded_keeping_unknown(block)
        except Exception:
            return None
    if len(events) != n_lines:
        return None
    out = cast("list[Event | EventError]", events)  # ours: an error takes its event's place
    if len(block) < _VECTOR_CHECK_BYTES:
        for i in [
            i
            for i, e in enumerate(events)
            if e.kind in _CHECK_ALWAYS or (e.step is None and e.kind in STEP_KINDS)
        ]:
            problem = validate(events[i])
            if problem is not None:
                out[i] = EventError(problem, file, first_lineno + i)
        return out, None
    return out, _checked_columns(events, out, file, first_lineno)


def _checked_columns(
    decoded: Sequence[Event | LeanEvent],
    out: list[Any],
    file: str | None,
    first_lineno: int,
) -> DecodedColumns:
    """The kind codes and steps of the events ``decoded`` from a block; each that breaks a
    rule of :func:`~badput.events.validate` is replaced in ``out`` (the same list, or its
    copy) by its error, with kind code -1 and step 0."""
    import numpy as np  # noqa: PLC0415 (the recorder encodes with this module: numpy stays out)

    n_lines = len(decoded)
    check_codes, step_codes = _code_tables()
    kinds = np.fromiter(map(KIND_CODE.__getitem__, map(_kind, decoded)), np.int16, n_lines)
    # JSON cannot spell NaN or infinity and msgspec already enforced the non-empty
    # strings, the version and the ranges of times and integers, so only the per-kind
    # rules of validate() remain: a step kind without its step, and the kinds of
    # _CHECK_ALWAYS. Every other event (an interval mark, a heartbeat) passes as decoded.
    # Worked out on the kind codes: a loop over the events' kinds cost more than decoding.
    check = np.flatnonzero(check_codes[kinds])
    at_steps = np.flatnonzero(step_codes[kinds])
    steps = np.zeros(n_lines, np.int64)
    if at_steps.shape[0]:
        found = list(map(_step, map(decoded.__getitem__, at_steps.tolist())))
        if found.count(None):
            missing = [i for i, step in zip(at_steps.tolist(), found, strict=True) if step is None]
            check = np.union1d(check, np.array(missing, np.intp))
            found = [0 if step is None else step for step in found]
        steps[at_steps] = np.fromiter(found, np.int64, len(found))  # msgspec checked: 53 bits
    clean = True
    for i in check.tolist():
        problem = validate(decoded[i])
        if problem is not None:
            out[i] = EventError(problem, file, first_lineno + i)  # (decoded[i] is not asked again)
            kinds[i] = -1
            steps[i] = 0
            clean = False
    return DecodedColumns(kinds, steps, clean=clean)


#: Names of the writer's fields of an event, in the order of :data:`~badput.events.Writer`.
_WRITER_FIELDS: Final = ("job", "attempt", "host", "rank", "pid")
_writer_of = attrgetter(*_WRITER_FIELDS)


#: A block decoded lean needs its writer's decoder, which costs 0.36 ms to make: what
#: decoding 1,400 lines lean saves (about 250 ns a line). One is made for a block of this
#: many bytes or more (2,400 lines of a data-load log); a smaller block is decoded lean
#: only with a decoder made before (a large file's last block).
_LEAN_NEW_BYTES: Final = 256 * 1024
#: Writers whose decoders are kept (the newest made).
_LEAN_KEPT: Final = 64


class _LeanDecoder(NamedTuple):
    """A writer's decoder, and which of its narrowed fields (:data:`_NARROW`, or
    :data:`_NARROW_ALL` for columns) it takes as an Event does."""

    decoder: msgspec.json.Decoder[LeanEvent]
    opened: frozenset[str]
    narrow: dict[str, tuple[str, Any] | tuple[str, Any, Any]]


#: The writers' decoders (None: the decoder of any writer's events, for a shared file).
_lean_decoders: dict[Writer | None, _LeanDecoder] = {}
#: The writers' decoders of a read for columns (:func:`decoding_for_columns`).
_column_decoders: dict[Writer | None, _LeanDecoder] = {}
_for_columns: ContextVar[bool] = ContextVar("_for_columns", default=False)


@contextlib.contextmanager
def decoding_for_columns() -> Iterator[None]:
    """Within it (this thread), a lean decode (``decode_block_coded(lean=True)``) uses
    decoders of its own, which fail a block with a field schema v1 lacks (it is read again
    keeping it): a writer of columns (the archive) keeps every field. As every lean decode,
    it takes each optional field as absent until a line of the writer has it, and its
    columns name the fields that may hold a value (:attr:`DecodedColumns.fields
    <badput.events.DecodedColumns.fields>`). The events are those of any other decode."""
    token = _for_columns.set(True)
    try:
        yield
    finally:
        _for_columns.reset(token)


def _kept_decoders() -> dict[Writer | None, _LeanDecoder]:
    """The writers' decoders of this thread's reads (for columns, or the engine's)."""
    return _column_decoders if _for_columns.get() else _lean_decoders


def _lean_decoder_for(writer: Writer | None, size: int) -> _LeanDecoder | None:
    """The decoder of ``writer``'s events (None: of any writer's), made if the block
    (``size`` bytes) pays for it (:data:`_LEAN_NEW_BYTES`); None otherwise."""
    kept = _kept_decoders()
    lean = kept.get(writer)
    if lean is None and size >= _LEAN_NEW_BYTES:
        lean = _lean_decoder(writer, narrow=_NARROW_ALL if _for_columns.get() else _NARROW)
        # No lock (a reader may run in any thread, and a parallel read forks): at worst two
        # threads drop the same oldest one, or one more is kept for a while.
        while len(kept) >= _LEAN_KEPT:
            try:
                kept.pop(next(iter(kept)), None)
            except (RuntimeError, StopIteration):  # changed meanwhile by another thread
                break
        kept[writer] = lean
    return lean


def _lean_decoder(
    writer: Writer | None,
    opened: frozenset[str] = frozenset(),
    narrow: dict[str, tuple[str, Any] | tuple[str, Any, Any]] | None = None,
) -> _LeanDecoder:
    """A decoder of events of ``writer`` only: its fields are typed as exactly its values
    (``Literal``; ``None`` for an absent one), so a line of any other writer, or one that
    repeats a writer's field with another value, fails the decode (the block is then
    decoded as :class:`Event` s), and each value is one object, not one a line. With
    ``writer`` None, of any writer's events: the writer's fields typed as an Event's.

    The fields of ``narrow`` not ``opened`` are taken narrower too: absent ones are no
    field of the class (:class:`~badput.events.LeanEvent`'s class attribute is read), so a
    line with one fails as an unknown field. ``opened`` fields are taken as an Event takes
    them; an opened name Event lacks (a newer recorder's field) is kept and never read."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = (
        [
            (name, None, None) if value is None else (name, Literal[value])
            for name, value in zip(_WRITER_FIELDS, writer, strict=True)
        ]
        if writer is not None
        else [_event_field(name) for name in _WRITER_FIELDS]
    )
    narrow = _NARROW if narrow is None else narrow
    fields += [_event_field(name) for name in sorted(opened)]
    fields += [
        field
        for name, field in narrow.items()
        if name not in opened and field != (name, None, None)
    ]
    # (for columns: a line with a field schema v1 lacks fails it, and is read again keeping it)
    lean = msgspec.defstruct(
        "LeanEventOf",
        fields,
        bases=(LeanEvent,),
        kw_only=True,
        gc=False,
        forbid_unknown_fields=True,
    )
    return _LeanDecoder(msgspec.json.Decoder(lean), opened, narrow)


def _event_field(name: str) -> tuple[str, Any] | tuple[str, Any, Any]:
    """The field ``name`` of a lean decoder's class as an Event has it (a name Event lacks:
    any value, kept unread); ``job``, required, has no default."""
    info = _EVENT_FIELD_INFO.get(name)
    if info is None:
        return (name, Any, None)
    if info.required:
        return (name, info.type)
    return (name, info.type, info.default)


#: The fields a writer's decoder first takes narrower than an Event does (for an engine's
#: read and for columns alike): ``kind`` one of schema v1's (each kind one object, whose
#: code is looked up without hashing a new string: a serial read of the 4 M-event data-load
#: log 3.09 s against 3.35 s, medians of 5); ``v`` 1; every other field but ``ts`` and the
#: writer's absent, no field of its class (a line of steps, loads and heartbeats holds two
#: or three of the 32: filling and freeing the other defaults took 1,630 of the 8,916
#: instructions an event of the data-load log's read and report cost, 2026-11-29). A block
#: with another value, or with an absent field, opens that field of the writer's decoder,
#: for that block and the writer's later ones. Step work absent at first also tells that a
#: block of a writer that records none holds none (``DecodedColumns.work``) without reading
#: ``tokens`` and ``samples`` of every event (0.44 s of the 4 M-event log's 7.3 s CPU).
_NARROW: Final[dict[str, tuple[str, Any] | tuple[str, Any, Any]]] = {
    **{
        f: (f, None, None)
        for f in Event.__struct_fields__
        if f not in {"ts", "kind", "job", "v", *_WRITER_FIELDS}
    },
    "kind": ("kind", Literal[KIND_NAMES]),
    "v": ("v", Literal[SCHEMA_VERSION], SCHEMA_VERSION),
}
_WORK_FIELDS: Final = frozenset({"tokens", "samples"})
_EVENT_FIELD_INFO: Final = {f.name: f for f in msgspec.structs.fields(Event)}
#: For columns (:func:`decoding_for_columns`): the same narrowing, kept apart (its
#: decoders also forbid fields schema v1 lacks, and its columns name the opened fields).
_NARROW_ALL: Final[dict[str, tuple[str, Any] | tuple[str, Any, Any]]] = dict(_NARROW)

_UNKNOWN_FIELD: Final = re.compile(r"unknown field `([^`]*)`")


def _narrowed(message: str, lean: _LeanDecoder) -> str | None:
    """The field to open that a decode error names, if any: a narrowed field not yet
    opened whose value the narrow type refused (msgspec ends the message with the path:
    ``... - at `$[12].kind```), or a field the class lacks (``unknown field `name```):
    one of Event's, or, in a read for the engine, any (kept unread, as Event ignores it)."""
    unknown = _UNKNOWN_FIELD.search(message)
    if unknown is not None:
        name = unknown.group(1)
        if name in lean.opened:
            return None
        if name in _EVENT_FIELD_INFO:
            return name
        if lean.narrow is _NARROW_ALL or len(lean.opened - _EVENT_FIELD_INFO.keys()) >= 8:
            return None  # (a writer of ever new field names: read in full, not a decoder each)
        return name
    return next(
        (f for f in lean.narrow if f not in lean.opened and message.endswith(f".{f}`")), None
    )


def _decode_lean(
    block: bytes, file: str | None, first_lineno: int, n_lines: int
) -> tuple[LeanRows, DecodedColumns] | None:
    """The lines of ``block`` (``n_lines`` plain one-object lines) as lean events of its
    first line's writer, with their columns; or, when a line is of another writer (a file
    several ranks share), as lean events of any writer, with each one's writer as a
    column (:attr:`DecodedColumns.writers`); None when a line is not a valid event (the
    caller decodes the block in full then: the same outcome)."""
    try:
        writer: Writer | None = cast(
            "Writer", _writer_of(_decoder.decode(block[: block.index(b"\n")]))
        )
    except Exception:  # a bad first line: the full decode sorts it out
        return None
    if file in _shared_files or (len(block) < _LEAN_NEW_BYTES and writer not in _kept_decoders()):
        # (a file whose last block was several writers', or a block too small to make its
        # writer's decoder: the decoder of any writer's lines, if made)
        writer = None
    try:
        decoded = _lean_rows(block, writer)
    except _OtherWriterError:  # a line of another writer: the block is any writers' lines
        writer = None
        decoded = _lean_rows(block, None)
    if decoded is None or len(decoded[0]) != n_lines:
        return None
    rows, lean = decoded
    writers = None
    if writer is None:
        writers = _writers_of_rows(rows)
        if len(writers[1]) == 1:  # (one writer's lines after all)
            writer, writers = writers[1][0], None
    _remember_shared(file, shared=writers is not None)
    out = cast("list[LeanEvent | EventError]", rows)
    columns = _checked_columns(rows, out, file, first_lineno)
    full = functools.partial(_decoded_in_full, block, file, first_lineno)
    work = not _WORK_FIELDS.isdisjoint(lean.opened)
    # A narrowed field its decoder has not opened is absent from every line (a line with
    # it fails that decoder): the engine then reads it of no event (``blocking``, say).
    fields = frozenset(Event.__struct_fields__) - (lean.narrow.keys() - lean.opened)
    return LeanRows(out, full), columns._replace(
        writer=writer, work=work, fields=fields, writers=writers
    )


#: Files whose last block decoded lean was of several writers (a file ranks share): their
#: next block is decoded by the decoder of any writer's lines at once (the first line's
#: writer's decoder would fail it in a few lines, and, made anew for each of 64 ranks,
#: cost 0.36 ms a block). The newest kept.
_shared_files: dict[str | None, None] = {}
_SHARED_FILES_KEPT: Final = 256


def _remember_shared(file: str | None, *, shared: bool) -> None:
    if file is None:
        return
    if not shared:
        _shared_files.pop(file, None)
        return
    if file not in _shared_files:
        while len(_shared_files) >= _SHARED_FILES_KEPT:  # (no lock: as the decoders')
            try:
                _shared_files.pop(next(iter(_shared_files)), None)
            except (RuntimeError, StopIteration):
                break
        _shared_files[file] = None


class _OtherWriterError(Exception):
    """A line of a block is of another writer than its first line's."""


def _lean_rows(block: bytes, writer: Writer | None) -> tuple[list[Any], _LeanDecoder] | None:
    """The lines of ``block`` decoded by ``writer``'s lean decoder (None: any writer's),
    and that decoder (opened as lines need); None when a line fails it, or none is made.
    Raises :class:`_OtherWriterError` when a line is another writer's."""
    lean = _lean_decoder_for(writer, len(block))
    if lean is None:
        return None
    try:
        while True:
            try:
                return lean.decoder.decode_lines(block), lean
            except msgspec.ValidationError as exc:
                message = str(exc)
                field = _narrowed(message, lean)
                if field is None and writer is not None and _of_another_writer(message):
                    raise _OtherWriterError from None
                if field is None:
                    raise
                # this block, and the writer's later ones, with that field as an Event has it
                kept = _lean_decoders if lean.narrow is _NARROW else _column_decoders
                lean = kept[writer] = _lean_decoder(writer, lean.opened | {field}, lean.narrow)
    except _OtherWriterError:
        raise
    except Exception:  # a bad line...: the full decode sorts it out
        return None


#: How msgspec's error ends when a writer's field has another value (``- at `$[12].rank```).
_AT_WRITER: Final = tuple(f".{name}`" for name in _WRITER_FIELDS)
#: msgspec's error when a line lacks a field its writer's lines have.
_MISSING_WRITER_FIELD: Final = re.compile(
    "missing required field `(?:" + "|".join(_WRITER_FIELDS) + ")`"
)


def _of_another_writer(message: str) -> bool:
    """Whether a writer's decoder failed a line (msgspec's ``message``) for its writer's
    fields: another value, or one absent."""
    return message.endswith(_AT_WRITER) or _MISSING_WRITER_FIELD.search(message) is not None


class _Numbering(dict[Writer, int]):
    """Writers numbered in the order they are first looked up."""

    def __missing__(self, key: Writer) -> int:
        number = self[key] = len(self)
        return number


def _writers_of_rows(rows: list[Any]) -> tuple[Any, tuple[Writer, ...]]:
    """Each row's writer as a number (int32), and the writers (:attr:`DecodedColumns.writers`)."""
    import numpy as np  # noqa: PLC0415 (the recorder encodes with this module: numpy stays out)

    numbering = _Numbering()
    index = np.fromiter(map(numbering.__getitem__, map(_writer_of, rows)), np.int32, len(rows))
    return index, tuple(numbering)


def _decoded_in_full(block: bytes, file: str | None, first_lineno: int) -> list[Event | EventError]:
    """The items of a block decoded as :class:`Event` s (what a lean decode stands for)."""
    coded = decode_block_coded(block, file, first_lineno)
    if coded is not None and isinstance(coded[0], list):
        return coded[0]
    return decode_lines(block.split(b"\n")[:-1], file, first_lineno)  # never, as a rule


def decode_lines(
    lines: Sequence[bytes], file: str | None = None, first_lineno: int = 1
) -> list[Event | EventError]:
    """Decode complete lines (without their ``\n``); each result is an event or its error.

    Lines that are each one JSON object are decoded in one call (several times
    faster than line by line); anything else falls back to per-line decoding so
    that every error names its line.
    """
    if not lines:
        return []
    fast = decode_block(b"\n".join(lines) + b"\n", file, first_lineno)
    if fast is not None and len(fast) == len(lines):
        return fast
    results: list[Event | EventError] = []
    for i, line in enumerate(lines):
        try:
            results.append(decode_line(line, file, first_lineno + i))
        except EventError as exc:
            results.append(exc)
    return results
