"""``badput import cloud-logging``: gcloud exports of ml-goodput-measurement / Orbax logs.

The fixture ``data/mgm_cloud_logging_export.json`` is what ``gcloud logging read
--format=json`` prints: newest entry first, RFC 3339 timestamps to the nanosecond (and
without a fraction when it is zero). It holds two jobs:

- ``llama-mgm`` (T0 = 2026-01-10T00:00:00Z): job start; TPU init 1-11 s; training prep
  11-21 s; a load 21-26 s before the first step (blocking); steps 0-5 every 10 s from 26 s;
  a load 40-41 s inside the loop (overlapped); an Orbax save of step 5, 86-90 s; an eval
  90-95 s; step 6 at 95 s, then a crash. Restart at 130 s: a load 130-132.5 s (logged in
  the same second as the job start, which has no fraction: only a nanosecond sort puts it
  after the start, where it blocks), an Orbax restore of step 5 without a start time
  (logged at 135 s, 2.5 s long), steps 6-9 from 135 s, job end at 175 s.
- ``bert-mgm`` (T0 + 1 h): job start, steps 0-3 every 10 s from 5 s, job end at 45 s.

and, to be skipped: a step entry with ``step_start_time: "soon"`` (entry 15), a text
entry, a payload without ``job_name`` and a duplicate of llama's step 2 entry.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from badput.analysis import analyze
from badput.cli import main
from badput.compat.ml_goodput_measurement import cloud_logging as cl
from badput.events import Event
from badput.formats.codec import encode_lines
from badput.store import JsonlStore, MemoryStore, WriterKey

EXPORT = Path(__file__).parent / "data" / "mgm_cloud_logging_export.json"
T0 = 1768003200.0  # 2026-01-10T00:00:00Z


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def report(store: Path, job: str) -> dict[str, Any]:
    code, out, err = invoke("report", str(store), "--job", job, "--json")
    assert code == 0, err
    return dict(json.loads(out))


LLAMA_BUCKETS = {
    "productive": 100.0,  # steps 0-5 (26-86 s, the save and eval inside step 5 excluded) + 6-9
    "recovery": 35.0,  # the crash (last event 95 s) to the restart (130 s)
    "accelerator_init": 10.0,
    "training_prep": 10.0,
    "data_loading": 7.5,  # 21-26 s and, after the restart, 130-132.5 s
    "custom:eval": 5.0,
    "checkpoint_save": 4.0,
    "checkpoint_restore": 2.5,
    "untracked": 1.0,  # 0-1 s
}


def test_import_then_report_gives_the_jobs_numbers(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    code, out, err = invoke("import", "cloud-logging", str(EXPORT), "--store", str(store))
    assert code == 0, err
    assert out.splitlines() == [
        "badput import: read 38 entries from 1 file",
        f"badput import: wrote 6 events of job 'bert-mgm' into {store}",
        f"badput import: wrote 30 events of job 'llama-mgm' into {store}",
        "badput import: skipped 4 entries: 1 duplicate (same log, timestamp and insertId), "
        "1 with a bad payload value, 1 without a job_name, 1 without a jsonPayload",
        f"Report it with: badput report {store} --job bert-mgm",
        f"Report it with: badput report {store} --job llama-mgm",
    ]
    assert err.splitlines() == [
        f"badput import: warning: {EXPORT}: entry 15 (insertId 334fca1a52c312): "
        "step_start_time must be a finite number of POSIX seconds, got 'soon' (entry skipped)"
    ]

    llama = report(store, "llama-mgm")
    assert llama["total_seconds"] == pytest.approx(175.0)
    assert {k: round(v, 9) for k, v in llama["buckets"].items()} == LLAMA_BUCKETS
    assert llama["overlapped"] == {"data_loading": pytest.approx(1.0)}  # the load at 40 s
    assert llama["goodput"] == pytest.approx(100 / 175)
    assert llama["steps"] == {"kept": 10, "wasted": 1, "last": 9}
    attempts = [
        (a["start"] - T0, a["end"] - T0, a["end_reason"], a["restore_step"], a["first_step"])
        for a in llama["attempts"]
    ]
    assert attempts == [(0.0, 95.0, "last_event", None, 0), (130.0, 175.0, "job_end", 5, 6)]
    assert llama["diagnostics"] == []

    bert = report(store, "bert-mgm")
    assert bert["total_seconds"] == pytest.approx(45.0)
    assert {k: round(v, 9) for k, v in bert["buckets"].items()} == {
        "productive": 40.0,
        "untracked": 5.0,
    }
    assert bert["goodput"] == pytest.approx(40 / 45)

    # what was written: the library's attempts are left to the engine (no attempt ids)
    events = [
        i
        for c in JsonlStore(store).read("llama-mgm").chunks
        for i in c.items
        if isinstance(i, Event)
    ]
    assert len(events) == 30 and all(e.attempt is None for e in events)
    loads = [(e.ts - T0, e.blocking) for e in events if e.kind == "data_loading_start"]
    assert loads == [(21.0, None), (40.0, False), (130.0, None)]
    restores = [(e.kind, e.ts - T0, e.step) for e in events if "restore" in e.kind]
    assert restores == [
        ("checkpoint_restore_start", 132.5, 5),
        ("checkpoint_restore_end", 135.0, 5),
    ]

    # importing again would count everything twice
    code, _, err = invoke("import", "cloud-logging", str(EXPORT), "--store", str(store))
    assert code == 2
    assert "already holds job 'bert-mgm'" in err


def test_file_order_and_overlapping_exports_do_not_matter(tmp_path: Path) -> None:
    entries = json.loads(EXPORT.read_text())
    oldest_first = tmp_path / "a.json"
    oldest_first.write_text(json.dumps(entries[::-1]))
    part1, part2 = tmp_path / "p1.json", tmp_path / "p2.json"
    part1.write_text(json.dumps(entries[:25]))
    part2.write_text(json.dumps(entries[10:]))  # 15 entries in both files, 2 of them unused
    code, _, err = invoke(
        "import", "cloud-logging", str(oldest_first), "--store", str(tmp_path / "s1")
    )
    assert code == 0, err
    code, out, err = invoke(
        "import", "cloud-logging", str(part2), str(part1), "--store", str(tmp_path / "s2")
    )
    assert code == 0, err
    assert "read 53 entries from 2 files" in out
    assert "14 duplicate" in out  # 13 in both files, and the one in the export
    for store in ("s1", "s2"):
        r = report(tmp_path / store, "llama-mgm")
        assert {k: round(v, 9) for k, v in r["buckets"].items()} == LLAMA_BUCKETS


def test_job_option_selects_one_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BADPUT_STORE", str(tmp_path / "default"))
    code, out, err = invoke("import", "cloud-logging", str(EXPORT), "--job", "bert-mgm")
    assert code == 0, err
    assert "wrote 6 events of job 'bert-mgm'" in out
    assert "29 of other jobs" in out
    assert JsonlStore(tmp_path / "default").jobs() == ["bert-mgm"]
    assert analyze(tmp_path / "default", "bert-mgm").goodput == pytest.approx(40 / 45)
    code, _, err = invoke("import", "cloud-logging", str(EXPORT), "--job", "nope")
    assert code == 2
    assert "no entries of job 'nope' (jobs: bert-mgm, llama-mgm)" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json at all", "not JSON"),
        ('{"entries": []}', "expected a JSON array of log entries"),
        ("[1, 2", "not JSON"),
        (b'["\xff"]', "not UTF-8 JSON"),
    ],
)
def test_unreadable_files_fail_naming_the_file(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    bad = tmp_path / "bad.json"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    good = tmp_path / "good.json"
    shutil.copy(EXPORT, good)
    code, out, err = invoke(
        "import", "cloud-logging", str(good), str(bad), "--store", str(tmp_path / "s")
    )
    assert code == 2
    assert err.startswith(f"badput import: error: {bad}: ")
    assert message in err
    assert out == ""
    assert not (tmp_path / "s").exists()  # nothing written


def test_missing_file_and_empty_export(tmp_path: Path) -> None:
    code, _, err = invoke(
        "import", "cloud-logging", str(tmp_path / "nope.json"), "--store", str(tmp_path)
    )
    assert code == 2 and "nope.json" in err
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    code, _, err = invoke("import", "cloud-logging", str(empty), "--store", str(tmp_path / "s"))
    assert code == 2
    assert "no entries with a jsonPayload naming a job_name" in err


def test_bad_entries_are_reported_with_file_index_and_insert_id(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    good = {
        "insertId": "a1",
        "timestamp": "2026-01-10T00:00:00Z",
        "jsonPayload": {"job_name": "j", "job_start_time": T0},
    }
    path.write_text(
        json.dumps(
            [
                good,
                "a string",
                {**good, "insertId": "b2", "timestamp": "yesterday"},
                {
                    "insertId": "c3",
                    "timestamp": "2026-01-10T00:00:05Z",
                    "jsonPayload": {"job_name": "j", "event_type": "save", "step": 1},
                },
                {
                    "insertId": "d4",
                    "timestamp": "2026-01-10T00:00:06Z",
                    "jsonPayload": {"job_name": "j", "unknown_key_time": 1.0},
                },
            ]
        )
    )
    summary = cl.import_cloud_logging([path], tmp_path / "s")
    assert summary.events == {"j": 1}
    assert [str(p) for p in summary.problems] == [
        f"{path}: entry 1: not a JSON object: 'a string'",
        f"{path}: entry 2 (insertId b2): not an RFC 3339 time: 'yesterday'",
        f"{path}: entry 3 (insertId c3): "
        "checkpoint_manager_blocking_duration_secs must be a number of seconds, got None",
    ]
    assert dict(summary.skipped) == {
        cl.NOT_AN_OBJECT: 1,
        cl.BAD_TIMESTAMP: 1,
        cl.BAD_PAYLOAD: 1,
        cl.NOTHING_USED: 1,
    }


def test_rfc3339_ns_is_exact_and_strict() -> None:
    assert cl.rfc3339_ns("2026-01-10T00:00:00Z") == int(T0) * 10**9
    assert cl.rfc3339_ns("2026-01-10T00:00:00.000000001Z") == int(T0) * 10**9 + 1
    assert cl.rfc3339_ns("2026-01-10T00:00:00.5Z") == int(T0) * 10**9 + 500_000_000
    assert cl.rfc3339_ns("2026-01-10T01:30:00+01:30") == int(T0) * 10**9
    assert cl.rfc3339_ns("2026-01-09T23:00:00.25-0100") == int(T0) * 10**9 + 250_000_000
    # the order a string sort gets wrong
    assert cl.rfc3339_ns("2026-01-10T00:02:10Z") < cl.rfc3339_ns("2026-01-10T00:02:10.0000005Z")
    for bad in ("2026-01-10", "2026-13-10T00:00:00Z", "2026-01-10T00:00:00.1234567891Z", ""):
        with pytest.raises(ValueError, match="not an RFC 3339 time"):
            cl.rfc3339_ns(bad)


def test_docs_worked_example_matches(tmp_path: Path) -> None:
    """docs/compat.md, "Google Cloud Logging": the table, and what a wrong order would give."""
    text = (Path(__file__).parent.parent / "docs" / "compat.md").read_text()
    section = text[text.index("## Google Cloud Logging") :]
    table = dict(re.findall(r"^\| ([a-z_:]+) \| ([0-9.,]+) \|", section, flags=re.M))
    total = float(table.pop("total").replace(",", ""))
    code, _, err = invoke("import", "cloud-logging", str(EXPORT), "--store", str(tmp_path))
    assert code == 0, err
    r = report(tmp_path, "llama-mgm")
    assert r["total_seconds"] == pytest.approx(total)
    assert {k: float(v) for k, v in table.items()} == pytest.approx(r["buckets"])
    assert table == {k: f"{v:.1f}" for k, v in LLAMA_BUCKETS.items()}

    raw = json.loads(EXPORT.read_text())
    entries = cl.read_export(EXPORT)

    def data_loading(order: list[cl.ExportEntry]) -> float:
        store = MemoryStore()
        writer = store.open_writer("llama-mgm", WriterKey("0", "h", None, 0))
        writer.write(encode_lines(cl.to_badput_events(order)["llama-mgm"]))
        return float(analyze(store, "llama-mgm").buckets.get("data_loading", 0.0))

    by_string = sorted(entries, key=lambda e: (raw[e.index]["timestamp"], e.insert_id))
    assert data_loading(entries) == 7.5
    assert data_loading(by_string) == 5.0
    assert data_loading(sorted(entries, key=lambda e: e.index)) == 0.0  # newest first
