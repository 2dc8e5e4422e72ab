"""Events as columns, and back: the rows of a job's columnar archive (Parquet, pyarrow).

One row a line a read of the job's JSON lines gave: the line's stream and number, and
either its event, field by field (``kind`` as a dictionary, ``ts`` float64, ``step``
int64...), or the reason the line is not one (``error``). Nothing is lost: every field of
:class:`~badput.events.Event` has its column (``attempt``, a string or an integer in a
log, is kept as text with ``attempt_is_int``; ``quantiles`` as JSON text), and fields the
schema lacks go to ``extra`` (JSON text), when the writer was given them.

pyarrow is imported when first needed (``badput[archive]``: its arrays are read as numpy
arrays by :mod:`badput.formats._arrow_values`); this module knows nothing of files or jobs
(:mod:`badput.store` does).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise, repeat
from operator import attrgetter
from typing import Any, Final

import msgspec
import numpy as np

from badput.events import (
    KIND_CODE,
    KIND_NAMES,
    SCHEMA_VERSION,
    STEP_KINDS,
    Chunk,
    DecodedColumns,
    Event,
    EventError,
    LeanRows,
    Writer,
)
from badput.formats._archive_writers import WRITER_FIELDS as _WRITER
from badput.formats._archive_writers import writer_at as _writer_at
from badput.formats._archive_writers import writer_codes as _writer_codes
from badput.formats._archive_writers import writers_of as _writers_of
from badput.formats._arrow_values import arrow, arrow_parquet
from badput.formats._arrow_values import filled as _filled
from badput.formats._arrow_values import numpy_of as _np
from badput.formats._arrow_values import valid as _valid
from badput.formats._arrow_values import whole as _whole

__all__ = [
    "ARCHIVE_VERSION",
    "COLUMNS",
    "METADATA_KEY",
    "arrow",
    "arrow_parquet",
    "batch_of",
    "columns_to_read",
    "first_columns",
    "group_chunks",
    "schema",
]

#: The key of the archive's own metadata in the Parquet file's key-value metadata.
METADATA_KEY: Final = b"badput.archive"
ARCHIVE_VERSION: Final = 1

_FIELDS: Final[tuple[str, ...]] = Event.__struct_fields__
_INT: Final = frozenset(
    {
        "rank",
        "pid",
        "step",
        "exit_code",
        "active",
        "total",
        "available",
        "count",
        "tokens",
        "samples",
        "params",
        "layers",
        "hidden",
        "seq_len",
        "devices",
        "v",
    }
)
_FLOAT: Final = frozenset(
    {"ts", "seconds", "last", "open_since", "flops_per_token", "peak_flops", "hang_timeout"}
)
_DICT_TEXT: Final = frozenset({"kind", "job", "host", "attempt", "status", "name", "device"})
_TEXT: Final = frozenset({"quantiles"})  # JSON text
_BOOL: Final = frozenset({"blocking"})
assert frozenset(_FIELDS) == _INT | _FLOAT | _DICT_TEXT | _TEXT | _BOOL, "a field lacks a column"

#: The columns in order: where a row comes from, its error, the event's fields, ``extra``.
COLUMNS: Final[tuple[str, ...]] = (
    "stream",
    "line",
    "error",
    *_FIELDS[:4],
    "attempt_is_int",
    *_FIELDS[4:],
    "extra",
)
#: The field of an event that carries its line's fields schema v1 lacks (JSON text: the
#: codec's ``EventWithUnknown``, and the rows of an archive's ``extra`` column).
_UNKNOWN: Final = "unknown_fields"
_STEP_CODES: Final = np.array(sorted(KIND_CODE[k] for k in STEP_KINDS), np.int16)
_json = msgspec.json.Encoder()
astuple = msgspec.structs.astuple
_ts = attrgetter("ts")
_step = attrgetter("step")


#: An event as the archive's reader gives the engine (:attr:`Chunk.rows
#: <badput.events.Chunk.rows>`): the fields of :class:`~badput.events.Event` in its order,
#: made from a row's values in one call of msgspec's (a :class:`~badput.events.LeanEvent`
#: of no one writer); :attr:`Chunk.items <badput.events.Chunk.items>` are Events.
RowEvent: Any = msgspec.defstruct(
    "RowEvent",
    [(f.name, Any, f.default) for f in msgspec.structs.fields(Event)],
    array_like=True,
    gc=False,
)


def _type(pa: Any, name: str) -> Any:
    if name in _INT or name == "line":
        return pa.int64()
    if name in _FLOAT:
        return pa.float64()
    if name in _BOOL or name == "attempt_is_int":
        return pa.bool_()
    if name in _DICT_TEXT or name == "stream":
        return pa.dictionary(pa.int32(), pa.string())
    return pa.string()


def schema(metadata: dict[bytes, bytes] | None = None) -> Any:
    """The archive's Arrow schema."""
    pa = arrow()
    return pa.schema([pa.field(n, _type(pa, n)) for n in COLUMNS], metadata=metadata)


def batch_of(chunks: Sequence[Chunk], stream_of: dict[str, str]) -> Any:
    """The rows of ``chunks`` (a read's) as one table; ``stream_of``: each chunk source's
    stream name (what the archive keeps: the path is the reader's).

    A chunk of one writer's valid events decoded for columns (``codec.decoding_for_columns``:
    it knows which fields hold a value) has its columns made from its decoded columns, the
    writer and the few fields it holds (:func:`_batch_of_columns`); any other, field by
    field from its items (:func:`_batch_of_items`)."""
    pa = arrow()
    batches: list[Any] = []
    held: list[Chunk] = []
    for chunk in chunks:
        columns = chunk.columns
        known = columns is not None and (columns.writer or columns.writers) is not None
        if columns is None or not known or columns.fields is None or not columns.clean:
            held.append(chunk)
            continue
        if held:
            batches.append(_batch_of_items(held, stream_of))
            held = []
        batches.append(_batch_of_columns(chunk, columns, stream_of[chunk.source]))
    if held:
        batches.append(_batch_of_items(held, stream_of))
    return pa.Table.from_batches(batches, schema=schema())


def _batch_of_columns(chunk: Chunk, columns: DecodedColumns, stream: str) -> Any:
    """The rows of ``chunk`` (valid events whose writers the columns give, ``columns.fields``
    known)."""
    pa = arrow()
    rows = chunk.rows
    n = len(rows)
    assert columns.fields is not None
    fields = columns.fields
    writers: tuple[Writer, ...]
    if columns.writer is not None:
        index, writers = np.zeros(n, np.intp), (columns.writer,)
    else:
        assert columns.writers is not None
        index, writers = columns.writers
    values: dict[str, Any] = {
        "stream": _constant("stream", stream, n),
        "line": _numbers(np.arange(chunk.first_line, chunk.first_line + n, dtype=np.int64)),
        **_writer_columns(writers, index),
    }
    if "v" not in fields:  # every event of schema v1 (the default)
        values["v"] = _constant("v", SCHEMA_VERSION, n)
    if "kind" not in fields:  # every kind one of schema v1's: the codes are the column
        values["kind"] = _dictionary(columns.kinds.astype(np.int32), KIND_NAMES)
    if n and _UNKNOWN in getattr(type(rows[0]), "__struct_fields__", ()):  # an archive's rows
        values["extra"] = _array(pa, "extra", [getattr(r, _UNKNOWN) for r in rows], n)
    for name in COLUMNS:
        if name in values:
            continue
        if name not in fields:
            values[name] = pa.nulls(n, _type(pa, name))
            continue
        if name == "ts":  # (never null)
            values[name] = _numbers(np.fromiter(map(_ts, rows), np.float64, n))
            continue
        if name == "step":
            values[name] = _steps(rows, columns)
            continue
        found = list(map(attrgetter(name), rows))
        if name in _FLOAT or name in _INT:
            values[name] = _numeric(found, n, np.float64 if name in _FLOAT else np.int64)
        else:
            if name == "quantiles":
                found = [None if q is None else _json.encode(q).decode() for q in found]
            values[name] = _array(pa, name, found, n)
    return pa.RecordBatch.from_arrays([values[name] for name in COLUMNS], schema=schema())


def _steps(rows: Sequence[Any], columns: DecodedColumns) -> Any:
    """The ``step`` column of valid events ``rows``: the decode's steps of the step kinds
    (it checked that each has one), and ``step`` read of the others only."""
    at_step = np.isin(columns.kinds, _STEP_CODES)
    steps = columns.steps.astype(np.int64)  # (a copy: 0 where no step kind)
    valid = at_step
    others = np.flatnonzero(~at_step).tolist()
    found = list(map(_step, map(rows.__getitem__, others)))
    if found.count(None) != len(found):
        valid = at_step.copy()
        for i, step in zip(others, found, strict=True):
            if step is not None:
                steps[i] = step
                valid[i] = True
    return _numbers(steps, None if valid.all() else valid)


def _numbers(values: Any, valid: Any = None) -> Any:
    """An Arrow array of a numpy array of int64 or float64 (``valid``: where it is not null),
    made from its buffers (``pa.array`` imports pandas, 0.5-1 s, on its first call)."""
    pa = arrow()
    kind = pa.int64() if values.dtype == np.int64 else pa.float64()
    mask = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, len(values), [mask, pa.py_buffer(values)])


def _numeric(found: list[Any], n: int, dtype: Any) -> Any:
    """The column of ``found`` (numbers or None) as :func:`_numbers`."""
    if found.count(None) == 0:
        return _numbers(np.array(found, dtype))
    held = np.array(found, dtype=object)
    valid = held != None  # noqa: E711 (elementwise)
    held[~valid] = 0
    return _numbers(held.astype(dtype), valid)


def _strings(values: Sequence[str]) -> Any:
    """An Arrow string array of ``values`` (none null), from its buffers."""
    pa = arrow()
    raw = [v.encode() for v in values]
    offsets = np.zeros(len(raw) + 1, np.int32)
    offsets[1:] = np.cumsum([len(r) for r in raw])
    return pa.Array.from_buffers(
        pa.string(), len(raw), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))]
    )


def _dictionary(indices: Any, names: Sequence[str]) -> Any:
    """A dictionary array of ``indices`` (int32) into ``names``."""
    pa = arrow()
    codes = pa.Array.from_buffers(pa.int32(), len(indices), [None, pa.py_buffer(indices)])
    return pa.DictionaryArray.from_arrays(codes, _strings(names))


def _writer_columns(writers: Sequence[Writer], index: Any) -> dict[str, Any]:
    """The columns of the writer's fields of rows whose writers are ``writers[index]``."""
    of_each: dict[str, list[Any]] = {
        "job": [w[0] for w in writers],
        "attempt": [None if w[1] is None else str(w[1]) for w in writers],
        "attempt_is_int": [None if w[1] is None else isinstance(w[1], int) for w in writers],
        "host": [w[2] for w in writers],
        "rank": [w[3] for w in writers],
        "pid": [w[4] for w in writers],
    }
    if len(writers) == 1:
        n = len(index)
        return {name: _constant(name, values[0], n) for name, values in of_each.items()}
    return {name: _of_writers(name, values, index) for name, values in of_each.items()}


def _of_writers(name: str, values: list[Any], index: Any) -> Any:
    """The column ``name`` of rows whose writers' values are ``values[index]``."""
    pa = arrow()
    n = len(index)
    if values.count(None) == len(values):
        return pa.nulls(n, _type(pa, name))
    valid = np.array([v is not None for v in values], np.bool_)[index]
    mask = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if name in _DICT_TEXT:
        words = list(dict.fromkeys(v for v in values if v is not None))
        number = {word: k for k, word in enumerate(words)}  # (a writer a line: no k² search)
        codes = np.array([number.get(v, 0) for v in values], np.int32)[index]  # (None: null)
        indices = pa.Array.from_buffers(pa.int32(), n, [mask, pa.py_buffer(codes)])
        return pa.DictionaryArray.from_arrays(indices, _strings(words))
    if name in _BOOL or name == "attempt_is_int":
        bits = np.packbits(np.array([bool(v) for v in values], np.bool_)[index], bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [mask, pa.py_buffer(bits)])
    numbers = np.array([v or 0 for v in values], np.int64)[index]
    return _numbers(numbers, None if mask is None else valid)


def _constant(name: str, value: str | bool | int | None, n: int) -> Any:
    """``n`` times ``value`` as the column ``name`` (all null for None)."""
    pa = arrow()
    if value is None:
        return pa.nulls(n, _type(pa, name))
    if isinstance(value, str):
        return _dictionary(np.zeros(n, np.int32), [value])
    if isinstance(value, bool):
        bits = np.packbits(np.full(n, value, np.bool_), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bits)])
    return _numbers(np.full(n, value, np.int64))


def _batch_of_items(chunks: Sequence[Chunk], stream_of: dict[str, str]) -> Any:
    """The rows of ``chunks``, field by field from their items."""
    pa = arrow()
    streams: list[str] = []
    lines: list[int] = []
    errors: list[str | None] = []
    events: list[Any] = []
    blank = RowEvent(None, None, None)  # an error's row: every field null
    for chunk in chunks:
        items = chunk.rows  # (an archive's rows: its events as read, the same fields)
        streams += [stream_of[chunk.source]] * len(items)
        lines += range(chunk.first_line, chunk.first_line + len(items))
        if EventError not in set(map(type, items)):
            errors += [None] * len(items)
            events += items
            continue
        for item in items:
            bad = isinstance(item, EventError)
            errors.append(item.message if isinstance(item, EventError) else None)
            events.append(blank if bad else item)
    n = len(events)
    values: dict[str, Any] = {"stream": streams, "line": lines, "error": errors}
    for name in _FIELDS:
        values[name] = list(map(attrgetter(name), events))
    attempt = values["attempt"]
    if attempt.count(None) != n:
        seen = {a: (a if isinstance(a, str) else str(a), isinstance(a, int)) for a in set(attempt)}
        seen[None] = (None, None)  # type: ignore[assignment]
        coded = list(map(seen.__getitem__, attempt))
        values["attempt"] = [a for a, _ in coded]
        values["attempt_is_int"] = [i for _, i in coded]
    else:
        values["attempt_is_int"] = attempt
    quantiles = values["quantiles"]
    if quantiles.count(None) != n:
        values["quantiles"] = [None if q is None else _json.encode(q).decode() for q in quantiles]
    values["extra"] = [getattr(e, _UNKNOWN, None) for e in events]
    arrays = [_array(pa, name, values[name], n) for name in COLUMNS]
    return pa.RecordBatch.from_arrays(arrays, schema=schema())


def _array(pa: Any, name: str, values: Sequence[Any], n: int) -> Any:
    """The column ``name`` of ``values`` (``n`` of them)."""
    kind = _type(pa, name)
    if values.count(None) == n:
        return pa.nulls(n, kind)
    if name in _DICT_TEXT or name == "stream":
        return pa.array(values, pa.string()).dictionary_encode()
    return pa.array(values, kind)


#: Columns a reader always reads (the others, only when a row group has a value in them).
_ALWAYS: Final = frozenset({"stream", "line", "error", "ts", "kind", "job", "step"})


def columns_to_read(row_group: Any) -> list[str]:
    """The columns of a row group (its Parquet metadata) that hold a value: reading the
    others (most of an event's fields, null in most logs) costs two thirds of a read."""
    out = []
    for j, name in enumerate(COLUMNS):
        stats = row_group.column(j).statistics
        empty = stats is not None and stats.has_null_count
        if name in _ALWAYS or not (empty and stats.null_count == row_group.num_rows):
            out.append(name)
    return out


def _column(table: Any, name: str) -> Any:
    """The column ``name`` of ``table``, all null when it was not read (:func:`columns_to_read`)."""
    if name in table.column_names:
        return table.column(name)
    pa = arrow()
    return pa.chunked_array([pa.nulls(table.num_rows, _type(pa, name))])


#: The columns the engine reads of every event (the others: of the rare kinds).
_ENGINE: Final = ["ts", "kind", "step"]


def group_chunks(
    meta: Any, read: Callable[[list[str]], Any], sources: dict[str, str]
) -> Iterator[Chunk]:
    """The chunks a read of the JSON lines gave, from one row group of the archive: its
    Parquet metadata ``meta``, and ``read(columns)``, which reads those of its columns;
    ``sources``: the path each stream is read by now (chunks and errors name it).

    Each chunk is a run of events or of errors. An event chunk's columns hold all the
    engine reads of every event (kind codes, steps, times, its writer, the fields any
    event has: :class:`~badput.events.DecodedColumns`), and its rows are made one by one
    when asked (:class:`ColumnRows`: the rare kinds), all of them only when iterated.
    Only the columns the engine reads of every event are read at first (times, kinds,
    steps) and those that say where each row is from (stream, line, error, writer) and
    are not known from the row group's statistics (a column of one value, or of none);
    the others, when the engine first asks for a row."""
    n = int(meta.num_rows)
    if not n:
        return
    stats = Stats(meta)
    known = stats.writer()
    fields = frozenset(f for f in _FIELDS if not stats.empty(f))
    work = not fields.isdisjoint(("tokens", "samples"))
    simple = stats.simple()
    table = read(first_columns(meta))
    if known["stream"][0]:
        names, codes = [known["stream"][1]], np.zeros(n, np.int32)
    else:
        stream = _whole(table.column("stream"))
        names, codes = stream.dictionary.to_pylist(), _np(stream.indices)
    if simple:
        first = int(stats.of["line"].min)
        line = np.arange(first, first + n, dtype=np.int64)
    else:
        line = _np(_whole(table.column("line")))
    kinds, steps, clean = _coded(table)
    ts = _filled(_whole(table.column("ts")), 0)
    rows = _TableRows(lambda: read(columns_to_read(meta)), sources, names, codes, line)
    if simple:
        bounds = [0, n]
    else:  # a new chunk where the stream changes, a line is not the next one, errors begin or end
        cut = np.flatnonzero(
            (codes[1:] != codes[:-1]) | (line[1:] != line[:-1] + 1) | (clean[1:] != clean[:-1])
        )
        bounds = [0, *(cut + 1).tolist(), n]
    writers = _writer_codes(table)
    errors = None if clean.all() else _whole(table.column("error"))
    for begin, end in pairwise(bounds):
        source = sources[names[codes[begin]]]
        if not clean[begin]:
            assert errors is not None
            lines = line[begin:end].tolist()
            items: list[Event | EventError] = [
                EventError(m, source, k)
                for m, k in zip(errors.slice(begin, end - begin).to_pylist(), lines, strict=True)
            ]
            yield Chunk(source, lines[0], items, DecodedColumns(kinds[begin:end], steps[begin:end]))
            continue
        for a in range(begin, end, _CHUNK_ROWS):
            b = min(a + _CHUNK_ROWS, end)
            writer = each = None
            if all((w[a:b] == w[a]).all() for w in writers):  # every event's is this one's
                writer = _writer_at(table, known, a)
            else:  # (a file of several writers: each row's, as an index)
                each = _writers_of(table, known, writers, a, b)
            view = ColumnRows(rows, a, b)
            yield Chunk(
                source,
                int(line[a]),
                LeanRows(view, view.events),
                DecodedColumns(
                    kinds[a:b], steps[a:b], writer, True, work, fields, ts[a:b], writers=each
                ),
            )


def first_columns(meta: Any) -> list[str]:
    """The columns :func:`group_chunks` reads first of the row group ``meta`` (its Parquet
    metadata): what the engine reads of every event, and where each row is from unless the
    statistics say (a reader may read them ahead, while the row group before is ingested)."""
    stats = Stats(meta)
    wanted = [*_ENGINE, *(name for name, (one, _) in stats.writer().items() if not one)]
    if not stats.simple():
        wanted += ["line", *(() if stats.empty("error") else ("error",))]
    return wanted


#: Rows of one chunk (a run of one stream's lines).
_CHUNK_ROWS: Final = 1 << 20


class Stats:
    """What a row group's statistics say of its columns (each column's, or None)."""

    def __init__(self, meta: Any) -> None:
        self.n = int(meta.num_rows)
        self.of = {name: meta.column(j).statistics for j, name in enumerate(COLUMNS)}

    def empty(self, name: str) -> bool:
        """Whether the column is all null (False when not known)."""
        s = self.of[name]
        return s is not None and s.has_null_count and s.null_count == self.n

    def one(self, name: str) -> tuple[bool, Any]:
        """Whether the column has one value (null included) in every row, and it."""
        s = self.of[name]
        if s is None or not s.has_null_count:
            return False, None
        if s.null_count == self.n:
            return True, None
        # (Parquet keeps a minimum and a maximum whole, or none: never a cut one)
        return s.null_count == 0 and s.has_min_max and s.min == s.max, s.min

    def writer(self) -> dict[str, tuple[bool, Any]]:
        """:meth:`one` of the stream and of each field of the writer."""
        return {name: self.one(name) for name in ("stream", *_WRITER)}

    def simple(self) -> bool:
        """Whether the row group is one stream's consecutive lines, every one an event."""
        return self.one("stream")[0] and self.empty("error") and self.consecutive("line")

    def consecutive(self, name: str) -> bool:
        """Whether the column (increasing: a stream's line numbers) holds every number from
        its least to its greatest."""
        s = self.of[name]
        return (
            s is not None
            and s.has_null_count
            and s.null_count == 0
            and s.has_min_max
            and s.max - s.min + 1 == self.n
        )


class _TableRows:
    """The rows of a row group, made one by one from its columns (:meth:`row`), or all at
    once (:meth:`all`: one msgspec call), which is done once more than a sixteenth of them
    were asked for one by one. ``table``: the row group's columns, or what reads them
    (a read of the engine's columns only: the others are read when a row is first asked)."""

    def __init__(
        self, table: Any, sources: dict[str, str], names: list[str], codes: Any, line: Any
    ) -> None:
        self._table = table
        self._where = (sources, names, codes, line)
        self._present: list[str] | None = None
        self._unknown: list[str] = []
        self._struct: Any = None
        self._getters: list[Any] | None = None
        self._all: list[Any] | None = None
        self._asked = 0
        self._few = False  # the getters are _scalar_getter's

    @property
    def table(self) -> Any:
        if callable(self._table):
            self._table = self._table()
        return self._table

    @property
    def n(self) -> int:
        return int(self.table.num_rows)

    @property
    def present(self) -> list[str]:
        if self._present is None:
            table, n = self.table, self.n
            self._present = [f for f in _FIELDS if _column(table, f).null_count != n]
            # (rows carry ``extra``, for a compaction of the archive to keep; events drop it)
            self._unknown = [_UNKNOWN] if _column(table, "extra").null_count != n else []
        return self._present

    def row(self, i: int) -> Any:
        if self._all is not None:
            return self._all[i]
        self._asked += 1
        if self._asked > self.n // 16 + 16:
            return self.all()[i]
        if self._getters is None or (self._asked == _FEW_ROWS + 1 and self._few):
            fields = self.present + self._unknown
            # the first few rows (a job's start and end among a million steps) value by
            # value; then from numpy views of whole columns, made once
            self._few = self._asked <= _FEW_ROWS
            made = _scalar_getter if self._few else _getter
            self._getters = [made(self.table, f) for f in fields]
            self._struct = _row_struct(tuple(fields))
        return self._struct(*[get(i) for get in self._getters])

    def all(self) -> list[Any]:
        if self._all is None:
            self._all = _items(self.table, *self._where)
        return self._all


#: Rows of a row group made value by value (:func:`_scalar_getter`) before its columns are
#: made numpy views (:func:`_getter`: 3-6 ms a column of 262,144 rows).
_FEW_ROWS: Final = 32


def _scalar_getter(table: Any, name: str) -> Any:
    """:func:`_getter`, each value taken of its column as a Python object (a few µs)."""
    name = "extra" if name == _UNKNOWN else name
    column = _column(table, name)
    if name == "attempt":
        flags = _column(table, "attempt_is_int")
        return lambda i: (
            None if (v := column[i].as_py()) is None else int(v) if flags[i].as_py() else v
        )
    if name == "quantiles":
        return lambda i: None if (q := column[i].as_py()) is None else msgspec.json.decode(q)
    return lambda i: column[i].as_py()


def _getter(table: Any, name: str) -> Any:
    """The value of the field ``name`` of row ``i`` (a function of ``i``), as a decode
    gives it: made of numpy views of the columns (nothing a row)."""
    name = "extra" if name == _UNKNOWN else name
    column = _column(table, name).combine_chunks()
    if hasattr(column, "dictionary"):
        words = column.dictionary.to_pylist()
        index = _filled(column.indices, -1)
        if name == "attempt":
            flags = _column(table, "attempt_is_int").combine_chunks()
            is_int = _filled(flags, 0).astype(np.bool_)
            return lambda i: (
                None if index[i] < 0 else int(words[index[i]]) if is_int[i] else words[index[i]]
            )
        return lambda i: None if index[i] < 0 else words[index[i]]
    if name == "quantiles":
        return lambda i: None if (q := column[i].as_py()) is None else msgspec.json.decode(q)
    if name == "extra":
        return lambda i: column[i].as_py()
    values = _filled(column, 0)
    if column.type == arrow().bool_():
        values = values.astype(np.bool_)  # (filled: as integers)
    valid = _valid(column)
    return lambda i: values[i].item() if valid[i] else None


class ColumnRows(Sequence[Any]):
    """Rows ``begin:end`` of a row group (:class:`_TableRows`), each made when asked."""

    def __init__(self, rows: _TableRows, begin: int, end: int) -> None:
        self._rows = rows
        self._begin = begin
        self._end = end

    def __len__(self) -> int:
        return self._end - self._begin

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            a, b, _ = i.indices(len(self))
            return ColumnRows(self._rows, self._begin + a, self._begin + max(a, b))
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._rows.row(self._begin + i)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows.all()[self._begin : self._end])

    def events(self) -> list[Event | EventError]:
        """The rows as :class:`~badput.events.Event` s."""
        return _as_events(self._rows.all()[self._begin : self._end])


def _coded(table: Any) -> tuple[Any, Any, Any]:
    """Each row's kind code, step (0 where a step kind has none) and whether it is an event:
    what a decoder works out of a block (:class:`~badput.events.DecodedColumns`)."""
    n = table.num_rows
    kind = _whole(table.column("kind"))
    table_codes = np.array([KIND_CODE[k] for k in kind.dictionary.to_pylist()] + [-1], np.int16)
    kinds = table_codes[_filled(kind.indices, -1)]  # -1 (the last) for a row without a kind
    if "error" in table.column_names:
        clean = ~_valid(_whole(table.column("error")))
        is_step = _IS_STEP[kinds] & clean
    else:  # (not read: no row is an error)
        clean = np.ones(n, np.bool_)
        is_step = _IS_STEP[kinds]
    step = _whole(table.column("step"))
    if step.null_count == n:
        return kinds, np.zeros(n, np.int64), clean
    # an event of a step kind has its step (a read rejects one without): where the column is
    # null, the row is not a step event, and its (undefined) value is not taken
    return kinds, np.where(is_step, _np(step), 0), clean


#: Whether each kind code is one of :data:`~badput.events.STEP_KINDS` (the last: -1).
_IS_STEP: Final = np.isin(np.arange(len(KIND_NAMES) + 1), _STEP_CODES)


def _values(column: Any) -> Any:
    """A column's values as Python objects (one object per distinct dictionary value)."""
    n = len(column)
    if column.null_count == n:
        return repeat(None, n)
    if hasattr(column, "dictionary"):
        values = np.array([*column.dictionary.to_pylist(), None], dtype=object)
        index = _filled(column.indices, len(values) - 1)
        return values[index].tolist()
    if column.null_count == 0 and column.type in (arrow().int64(), arrow().float64()):
        return _np(column).tolist()
    return column.to_pylist()


def _attempts(table: Any) -> Any:
    """The ``attempt`` of each row, an integer where the log's was."""
    column = _column(table, "attempt").combine_chunks()
    if column.null_count == len(column):
        return list(_values(column))
    flags = _column(table, "attempt_is_int").combine_chunks()
    is_int = _filled(flags, 0).astype(np.bool_)
    if not is_int.any():
        return _values(column)
    if is_int[_valid(flags)].all():  # (nulls skipped) every attempt given an integer
        values = np.array([*map(int, column.dictionary.to_pylist()), None], dtype=object)
        index = _filled(column.indices, len(values) - 1)
        return values[index].tolist()
    return [int(a) if i else a for a, i in zip(_values(column), is_int.tolist(), strict=True)]


def _items(
    table: Any, sources: dict[str, str], names: list[str], codes: Any, line: Any
) -> list[Any]:
    """Every row as the read gave it: its event (a :data:`RowEvent`), or its line's error."""
    errors = _column(table, "error")
    n = table.num_rows
    present: list[str] = []
    columns: list[Any] = []
    for name in _FIELDS:
        column = _column(table, name)
        if column.null_count == n:
            continue  # (left to the struct's default: None)
        present.append(name)
        if name == "attempt":
            columns.append(_attempts(table))
        elif name == "quantiles":
            columns.append([None if q is None else msgspec.json.decode(q) for q in _values(column)])
        else:
            columns.append(_values(column.combine_chunks()))
    extra = _column(table, "extra")
    if extra.null_count != n:
        present.append(_UNKNOWN)
        columns.append(_values(extra.combine_chunks()))
    kind: Any = list[_row_struct(tuple(present))]  # type: ignore[misc]
    tuples = list(zip(*columns, strict=True)) if columns else []
    if errors.null_count == n:
        rows: list[Any] = msgspec.convert(tuples, kind)
    else:
        messages = errors.to_pylist()
        good = [i for i, m in enumerate(messages) if m is None]
        events = iter(msgspec.convert([tuples[i] for i in good], kind))
        lines = line.tolist()
        rows = [
            next(events) if m is None else EventError(m, sources[names[c]], lines[i])
            for i, (m, c) in enumerate(zip(messages, codes.tolist(), strict=True))
        ]
    return rows


@functools.cache
def _row_struct(present: tuple[str, ...]) -> Any:
    """:data:`RowEvent` with the fields ``present`` first: a row gives only those (the others
    keep their defaults), and msgspec makes each from a tuple of them in one call."""
    info = {f.name: f for f in msgspec.structs.fields(Event)}
    order = [*present, *(f for f in _FIELDS if f not in present)]  # (and _UNKNOWN if present)
    return msgspec.defstruct(
        "RowEvent",
        [(f, Any, info[f].default) if f not in present else (f, Any) for f in order],
        array_like=True,
        gc=False,
    )


def _as_events(rows: list[Any]) -> list[Event | EventError]:
    """``rows`` (:func:`_items`) as :class:`~badput.events.Event` s."""
    asdict = msgspec.structs.asdict
    first = next((r for r in rows if not isinstance(r, EventError)), None)
    if _UNKNOWN in getattr(type(first), "__struct_fields__", ()):
        kept = [r if isinstance(r, EventError) else asdict(r) for r in rows]
        for r in kept:
            if isinstance(r, dict):
                del r[_UNKNOWN]  # (a read of the JSON lines drops them)
        return [r if isinstance(r, EventError) else Event(**r) for r in kept]
    return [r if isinstance(r, EventError) else Event(**asdict(r)) for r in rows]
