"""The archive is lossless of the fields a line carries that schema v1 lacks: a read of the
JSON lines drops them (its events have no place for them), the archive keeps them in its
``extra`` column (a JSON object's text, each value the line's own bytes), through a
compaction of the archive too; its events and report stay those of the JSON lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from badput.cli import main
from badput.events import Event, EventError
from badput.store import ARCHIVE_NAME, compact, open_source

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

KNOWN = frozenset(Event.__struct_fields__)
_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_KEYS = st.text(st.characters(exclude_categories=("Cs",)), max_size=10).filter(
    lambda k: k not in KNOWN
)
_KINDS = ["step_start", "step_end", "data_loading_start", "data_loading_end", "heartbeat"]


@st.composite
def lines_with_unknown_fields(draw: st.DrawFn) -> tuple[list[bytes], list[dict[str, Any] | None]]:
    """One writer's lines, some with fields schema v1 lacks, a malformed one now and then:
    the lines, and each line's unknown fields (None: none, or not an event)."""
    lines: list[bytes] = []
    unknown: list[dict[str, Any] | None] = []
    for i in range(draw(st.integers(1, 30))):
        if draw(st.integers(0, 9)) == 0:
            lines.append(b'{"ts": 1, "kind": ')  # malformed
            unknown.append(None)
            continue
        kind = draw(st.sampled_from(_KINDS))
        event: dict[str, Any] = {"ts": 1.7e9 + i, "kind": kind, "job": "p", "rank": 0}
        if kind.startswith("step"):
            event["step"] = i
        extra = draw(st.dictionaries(_KEYS, _JSON_VALUES, max_size=3))
        line = json.dumps({**event, **extra}, ensure_ascii=draw(st.booleans())).encode()
        lines.append(line)
        unknown.append(extra or None)
    return lines, unknown


def _report(path: Path) -> str:
    result = CliRunner().invoke(main, ["report", "--json", str(path)])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def _items(path: Path) -> list[Event | EventError]:
    store, job = open_source(path)
    out: list[Event | EventError] = []
    cursor = None
    while True:
        result = store.read(job, cursor)
        out += [i for c in result.chunks for i in c.items]
        if result.reached_end or not result.chunks:
            return out
        cursor = result.cursor


def _key(item: Event | EventError) -> Any:
    if isinstance(item, EventError):
        return ("error", item.message, item.line)
    assert type(item) is Event  # a read gives Events, archive or not (no unknown field)
    return item


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=lines_with_unknown_fields(), large=st.sampled_from([False, False, True]))
def test_archive_keeps_every_unknown_field(
    tmp_path_factory: pytest.TempPathFactory,
    case: tuple[list[bytes], list[dict[str, Any] | None]],
    large: bool,
) -> None:
    """Random events with random unknown fields, in a small file (read event by event) or
    a large one (read in blocks, lean): each row's ``extra`` holds its line's unknown fields,
    through a second compaction (of the archive) too, and the archive's events and report
    are the JSON lines'."""
    lines, unknown = case
    log = tmp_path_factory.mktemp("extra") / "run.jsonl"
    block = b"\n".join(lines) + b"\n"
    copies = 300_000 // len(block) + 1 if large else 1  # large: decoded lean, in blocks
    log.write_bytes(block * copies)
    expected_report = _report(log)
    expected_items = [_key(i) for i in _items(log)]
    for _ in range(2):  # the JSON lines, then the archive of them
        done = compact(*open_source(log))
        extra = pq.read_table(done.path, columns=["extra"]).column("extra").to_pylist()
        assert [None if e is None else json.loads(e) for e in extra] == unknown * copies
        assert _report(log) == expected_report
        assert [_key(i) for i in _items(log)] == expected_items


def test_unknown_values_are_kept_as_the_line_wrote_them(tmp_path: Path) -> None:
    """Each value's own bytes: a number past a double (a read of the line accepts it), spaces
    inside an array; keys re-encoded (the escape of ``é`` as the character)."""
    job_dir = tmp_path / "p" / "0"
    job_dir.mkdir(parents=True)
    (job_dir / "h-0-1.jsonl").write_bytes(
        b'{"ts":1700000000.0,"kind":"job_start","job":"p","big":1e400,"a":{"b" : [1, 2]}}\n'
        b'{"ts":1700000001.0,"kind":"step_start","job":"p","step":1,"\\u00e9":"x"}\n'
        b'{"ts":1700000002.0,"kind":"step_end","job":"p","step":1}\n'
    )
    done = compact(*open_source(tmp_path / "p"))
    assert done.path == tmp_path / "p" / ARCHIVE_NAME
    extra = pq.read_table(done.path, columns=["extra"]).column("extra").to_pylist()
    assert extra == ['{"big":1e400,"a":{"b" : [1, 2]}}', '{"é":"x"}', None]
