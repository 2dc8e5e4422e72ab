"""Events as columns, and back: the rows of a job's columnar archive (Parquet, pyarrow).

One row a line a read of the job's JSON lines gave: the line's stream and number, and
either its event, field by field (``kind`` as a dictionary, ``ts`` float64, ``step``
int64...), or the reason the line is not one (``error``). Nothing is lost: every field of
:class:`~badput.events.Event` has its column (``attempt``, a string or an integer in a
log, is kept as text with ``attempt_is_int``; ``quantiles`` as JSON text), and fields the
schema lacks go to ``extra`` (JSON text), when the writer was given them.

pyarrow is imported when first needed (``badput[archive]``); this module knows nothing
of files or jobs (:mod:`badput.store` does).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise, repeat
from typing import Any, Final

import msgspec
import numpy as np

from badput.events import (
    KIND_CODE,
    STEP_KINDS,
    Chunk,
    DecodedColumns,
    Event,
    EventError,
)
from badput.runtime.optional import import_optional

__all__ = [
    "ARCHIVE_VERSION",
    "COLUMNS",
    "METADATA_KEY",
    "arrow",
    "arrow_parquet",
    "batch_of",
    "chunks_of",
    "schema",
]

#: The key of the archive's own metadata in the Parquet file's key-value metadata.
METADATA_KEY: Final = b"badput.archive"
ARCHIVE_VERSION: Final = 1
#: Rows of one chunk read back (a run of one stream's lines).
_CHUNK_ROWS: Final = 65_536

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
_STEP_CODES: Final = np.array(sorted(KIND_CODE[k] for k in STEP_KINDS), np.int16)
_json = msgspec.json.Encoder()


def arrow() -> Any:
    """pyarrow (``badput[archive]``)."""
    return import_optional("pyarrow", "archive")


def arrow_parquet() -> Any:
    """pyarrow.parquet (``badput[archive]``)."""
    return import_optional("pyarrow.parquet", "archive")


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
    """The rows of ``chunks`` (a read's) as one record batch; ``stream_of``: each chunk
    source's stream name (what the archive keeps: the path is the reader's)."""
    pa = arrow()
    streams: list[str] = []
    lines: list[int] = []
    errors: list[str | None] = []
    rows: list[tuple[Any, ...]] = []
    empty = (None,) * len(_FIELDS)
    astuple = msgspec.structs.astuple
    for chunk in chunks:
        items = chunk.items
        stream = stream_of[chunk.source]
        streams += [stream] * len(items)
        lines += range(chunk.first_line, chunk.first_line + len(items))
        for item in items:
            if isinstance(item, EventError):
                errors.append(item.message)
                rows.append(empty)
            else:
                errors.append(None)
                rows.append(astuple(item))
    values: dict[str, Any] = {"stream": streams, "line": lines, "error": errors}
    n = len(rows)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in _FIELDS]
    for name, column in zip(_FIELDS, columns, strict=True):
        values[name] = column
    attempt = values["attempt"]
    values["attempt_is_int"] = [None if a is None else isinstance(a, int) for a in attempt]
    values["attempt"] = [a if a is None or isinstance(a, str) else str(a) for a in attempt]
    values["quantiles"] = [
        None if q is None else _json.encode(q).decode() for q in values["quantiles"]
    ]
    values["extra"] = [None] * n
    arrays = [pa.array(values[name], _type(pa, name)) for name in COLUMNS]
    return pa.RecordBatch.from_arrays(arrays, schema=schema())


def chunks_of(table: Any, sources: dict[str, str]) -> Iterator[Chunk]:
    """The chunks a read of the JSON lines gave, from the archive's rows ``table``:
    ``sources``: the path each stream is read by now (chunks and errors name it)."""
    n = table.num_rows
    if not n:
        return
    stream = table.column("stream").combine_chunks()
    names = stream.dictionary.to_pylist()
    codes = stream.indices.to_numpy(zero_copy_only=False)
    line = table.column("line").to_numpy()
    # a new chunk where the stream changes or a line is not the next one
    cut = np.flatnonzero((codes[1:] != codes[:-1]) | (line[1:] != line[:-1] + 1)) + 1
    bounds = [0, *cut.tolist(), n]
    items = _items(table, sources, names, codes, line)
    kinds, steps, clean = _coded(table)
    for begin, end in pairwise(bounds):
        source = sources[names[codes[begin]]]
        for a in range(begin, end, _CHUNK_ROWS):
            b = min(a + _CHUNK_ROWS, end)
            columns = DecodedColumns(kinds[a:b], steps[a:b], None, bool(clean[a:b].all()))
            yield Chunk(source, int(line[a]), items[a:b], columns)


def _coded(table: Any) -> tuple[Any, Any, Any]:
    """Each row's kind code, step (0 where a step kind has none) and whether it is an event:
    what a decoder works out of a block (:class:`~badput.events.DecodedColumns`)."""
    kind = table.column("kind").combine_chunks()
    table_codes = np.array([KIND_CODE[k] for k in kind.dictionary.to_pylist()] + [-1], np.int16)
    index = kind.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    kinds = table_codes[index]  # -1 (the last) for a row without a kind: an error
    clean = table.column("error").is_null().to_numpy(zero_copy_only=False)
    step = table.column("step").fill_null(0).to_numpy()
    steps = np.where(np.isin(kinds, _STEP_CODES) & clean, step, 0).astype(np.int64)
    return kinds, steps, clean


def _items(
    table: Any, sources: dict[str, str], names: list[str], codes: Any, line: Any
) -> list[Event | EventError]:
    """Every row as the read gave it: its event, or its line's error."""
    errors = table.column("error").to_pylist()
    present = [f for f in _FIELDS if table.column(f).null_count < table.num_rows]
    columns = {f: table.column(f).to_pylist() for f in present}
    if "attempt" in columns:
        is_int = table.column("attempt_is_int").to_pylist()
        columns["attempt"] = [
            int(a) if i else a for a, i in zip(columns["attempt"], is_int, strict=True)
        ]
    if "quantiles" in columns:
        columns["quantiles"] = [
            None if q is None else msgspec.json.decode(q) for q in columns["quantiles"]
        ]
    out: list[Event | EventError] = []
    append = out.append
    lines = line.tolist()
    code_list = codes.tolist()
    rows = zip(*columns.values(), strict=True) if columns else repeat((), len(errors))
    for k, row in enumerate(rows):
        error = errors[k]
        if error is not None:
            append(EventError(error, sources[names[code_list[k]]], lines[k]))
            continue
        append(Event(**dict(zip(present, row, strict=True))))
    return out
