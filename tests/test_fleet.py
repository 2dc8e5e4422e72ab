"""``badput fleet``: a generated fleet's figures against each job's own report, the engines
giving one JSON text, the result cache, the tidy tables and SQL over them, the page's
escaping."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import fsspec
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from _fleet_jobs import write_fleet, write_job
from badput import analysis
from badput.analysis import analyze
from badput.cli import main
from badput.fleet import (
    ResultCache,
    analyse_fleet,
    fleet_html,
    fleet_summary,
    fleet_tables,
    query_parquet_url,
    query_tables,
    write_parquet,
)
from badput.fleet import _engine as fleet_engine
from badput.report import dumps_finite
from badput.store import JsonlStore, open_source
from badput.testing import Timeline, events_to_jsonl

N_JOBS = 40


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, int]]]:
    root = tmp_path_factory.mktemp("fleet") / "store"
    return root, write_fleet(root, N_JOBS)


def cli(*args: str) -> tuple[str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout, result.stderr


def test_fleet_figures_are_the_jobs_own_reports(fleet_store: Any, tmp_path: Path) -> None:
    root, made = fleet_store
    run = analyse_fleet(root, engine="serial")
    assert run.analysed == N_JOBS and run.cached == 0
    summary = fleet_summary(run.results, source="s")
    reports = [analyze(root, f"job-{i:05d}", parallel=False) for i in range(N_JOBS)]
    total = math.fsum(r.total_seconds for r in reports)
    productive = math.fsum(r.bucket("productive") for r in reports)
    assert summary["jobs"] == N_JOBS
    assert summary["attempts"] == sum(m["attempts"] for m in made)
    assert summary["failures"] == sum(m["crashes"] for m in made)  # each crash, and only
    assert summary["total_seconds"] == total
    assert summary["goodput"] == productive / total
    assert 0.3 < summary["goodput"] < 0.9
    # the causes and the goodput partition the fleet's time
    lost = math.fsum(row["seconds"] for row in summary["lost_by_cause"])
    assert lost + summary["goodput_seconds"] == pytest.approx(total, rel=1e-12)
    recovery = math.fsum(r.bucket("recovery") for r in reports)
    assert {row["bucket"]: row["seconds"] for row in summary["lost_by_cause"]}[
        "recovery"
    ] == pytest.approx(recovery, rel=1e-12)
    worst = summary["worst_jobs"]
    assert [w["badput_seconds"] for w in worst] == sorted(
        (w["badput_seconds"] for w in worst), reverse=True
    )
    by_job = {r.job: r for r in reports}
    top = by_job[worst[0]["job"]]
    assert worst[0]["badput_seconds"] == pytest.approx(
        top.total_seconds - top.bucket("productive"), rel=1e-12
    )
    assert max(r.total_seconds - r.bucket("productive") for r in reports) == pytest.approx(
        worst[0]["badput_seconds"], rel=1e-12
    )
    # weeks: every failure counted once; days: the same time as the jobs, cut at midnight
    assert sum(w["failures"] for w in summary["weeks"]) == summary["failures"]
    for w in summary["weeks"]:
        if w["failures"]:
            assert w["mtbf_seconds"] == w["running_seconds"] / w["failures"]
    days_total = math.fsum(d["seconds"] for d in summary["days"])
    assert days_total == pytest.approx(total, rel=1e-9)
    days_good = math.fsum(d["goodput_seconds"] for d in summary["days"])
    assert days_good == pytest.approx(productive, rel=1e-9)
    assert summary["errors"] == []


def test_engines_give_one_json_text(fleet_store: Any) -> None:
    root, _ = fleet_store
    serial, _ = cli("fleet", str(root), "--no-cache", "--engine", "serial", "--json")
    local, err = cli("fleet", str(root), "--no-cache", "--engine", "local", "--json")
    assert serial == local
    assert f"{N_JOBS} analysed" in err
    assert json.loads(local)["jobs"] == N_JOBS


def test_a_large_job_read_in_parts_gives_the_whole_read_s_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job of ``split_bytes`` or more is read by several tasks (runs of its serial read's
    slices, merged in file order by the driver): the fleet's JSON is the same text as when
    every job is one task's, on every engine, and the tasks did read it in parts."""
    root = tmp_path / "store"
    made = [write_job(root, i, steps_scale=1 if i else 100) for i in range(6)]
    big = sum(p.stat().st_size for p in (root / "job-00000").rglob("*.jsonl"))
    assert big > 3 * 1024 * 1024 and made[0]["attempts"] >= 1
    whole = analyse_fleet(root, engine="serial", split_bytes=None)
    want = dumps_finite(fleet_summary(whole.results, source=str(root)))
    read: list[int] = []
    real = analysis.read_split_part

    def counted(split: Any, indices: range) -> Any:
        read.append(len(indices))
        return real(split, indices)

    monkeypatch.setattr(analysis, "read_split_part", counted)
    for engine in ("serial", "local"):
        run = analyse_fleet(root, engine=engine, workers=2, split_bytes=2 * 1024 * 1024)  # type: ignore[arg-type]
        assert run.results == whole.results
        assert dumps_finite(fleet_summary(run.results, source=str(root))) == want
    assert len(read) >= 2  # the serial engine's tasks ran here: the big job, in parts
    assert sum(read) == len(analysis.split_job(root, "job-00000", min_bytes=1).slices)


def test_cache_reanalyses_only_what_changed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_fleet(store, 12)
    cache = tmp_path / "cache"
    first, err1 = cli("fleet", str(store), "--cache", str(cache), "--json")
    assert "12 analysed, 0 from the cache" in err1
    second, err2 = cli("fleet", str(store), "--cache", str(cache), "--json")
    assert "0 analysed, 12 from the cache" in err2
    assert second == first
    # one job's last attempt loses its end (files cut by a copy): only it is analysed
    # again, and the fleet says so
    last_attempt = max((store / "job-00003").iterdir(), key=lambda p: int(p.name))
    for stream in last_attempt.glob("*.jsonl"):
        lines = stream.read_text().splitlines(keepends=True)
        assert '"job_end"' in lines[-1]
        stream.write_text("".join(lines[:-2]))
    third, err3 = cli("fleet", str(store), "--cache", str(cache), "--json")
    assert "1 analysed, 11 from the cache" in err3
    fresh, _ = cli("fleet", str(store), "--no-cache", "--json")
    assert third == fresh
    query = "SELECT status, end_reason FROM jobs WHERE job = 'job-00003'"
    out, _ = cli("fleet", str(store), "--cache", str(cache), "--json", "--sql", query)
    assert json.loads(out) == [{"status": "completed", "end_reason": "last_event"}] or json.loads(
        out
    ) == [{"status": "unended", "end_reason": "last_event"}]
    out, _ = cli("fleet", str(store), "--no-cache", "--json", "--sql", query)
    assert json.loads(out)[0]["end_reason"] == "last_event"


def test_cache_ignores_a_result_of_other_files(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, "store")
    cache.put("j", "k1", {"job": "j", "x": 1})
    assert cache.get("j", "k1") == {"job": "j", "x": 1}
    assert cache.get("j", "k2") is None
    assert cache.get("other", "k1") is None
    assert ResultCache(tmp_path, "another store").get("j", "k1") is None


def test_sql_answers_over_the_tables(fleet_store: Any, tmp_path: Path) -> None:
    root, made = fleet_store
    cache = str(tmp_path / "c")
    out, _ = cli(
        "fleet", str(root), "--cache", cache, "--json",
        "--sql", "SELECT count(*) AS n, sum(failures) AS f, sum(attempts) AS a FROM jobs",
    )  # fmt: skip
    assert json.loads(out) == [
        {
            "n": N_JOBS,
            "f": sum(m["crashes"] for m in made),
            "a": sum(m["attempts"] for m in made),
        }
    ]
    # job x bucket rows add up to each job's time
    out, _ = cli(
        "fleet", str(root), "--cache", cache, "--json", "--sql",
        "SELECT j.job, j.total_seconds AS t, sum(b.seconds) AS s FROM jobs j "
        "JOIN buckets b USING (job) GROUP BY 1, 2 ORDER BY 1",
    )  # fmt: skip
    rows = json.loads(out)
    assert len(rows) == N_JOBS
    for row in rows:
        assert row["s"] == pytest.approx(row["t"], rel=1e-9)
    # Parquet on disk, queried again without the store
    pq = tmp_path / "pq"
    cli("fleet", str(root), "--cache", cache, "--parquet", str(pq))
    assert sorted(p.name for p in pq.iterdir()) == [
        "attempts.parquet", "buckets.parquet", "days.parquet", "jobs.parquet",
    ]  # fmt: skip
    out, _ = cli(
        "fleet", "--tables", str(pq), "--json",
        "--sql", "SELECT count(*) AS n FROM attempts WHERE failed",
    )  # fmt: skip
    assert json.loads(out) == [{"n": sum(m["crashes"] for m in made)}]


def test_sql_through_an_fsspec_filesystem(fleet_store: Any) -> None:
    """Object storage's path: DuckDB reads the Parquet files through the fsspec filesystem
    registered with it (here fsspec's in-memory one), not its own httpfs."""
    root, made = fleet_store
    tables = fleet_tables(analyse_fleet(root, engine="serial").results)
    written = write_parquet(tables, "memory://fleet34/tables")
    assert len(written) == 4
    assert fsspec.filesystem("memory").exists("/fleet34/tables/jobs.parquet")
    _, rows = query_parquet_url(
        "SELECT count(*), sum(failures) FROM jobs", "memory://fleet34/tables"
    )
    assert rows == [(N_JOBS, sum(m["crashes"] for m in made))]
    direct = query_tables("SELECT count(*), sum(failures) FROM jobs", tables)[1]
    assert direct == rows


def test_a_bad_query_is_an_error_not_a_trace(fleet_store: Any, tmp_path: Path) -> None:
    root, _ = fleet_store
    result = CliRunner().invoke(
        main, ["fleet", str(root), "--cache", str(tmp_path), "--sql", "SELECT nope FROM jobs"]
    )
    assert result.exit_code != 0
    assert "--sql" in result.output and "Traceback" not in result.output


HOSTILE = "<script>alert(1)</script>\x1b[31m&\"'"


def test_page_escapes_log_text_and_runs_no_script(tmp_path: Path) -> None:
    root = tmp_path / "store"
    tl = Timeline(HOSTILE)
    tl.emit("job_start")
    tl.steps(5, 1.0)
    tl.emit("attempt_end", dt=10.0, status=HOSTILE, exit_code=3)
    events_to_jsonl(root / "j" / "0" / "h-0-1.jsonl", tl.events)
    write_job(root, 7)
    run = analyse_fleet(root, engine="serial")
    page = fleet_html(fleet_summary(run.results, source=str(root)), job_links="jobs")
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[31m&amp;&quot;&#x27;" in page
    assert 'content="default-src &#x27;none&#x27;; style-src' in page
    assert 'href="jobs/job-' in page


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 1e6),
            st.dictionaries(st.sampled_from(["wasted", "recovery", "custom:x"]), st.floats(0, 1e6)),
        ),
        max_size=12,
    ),
    st.randoms(),
)
def test_summary_is_a_partition_in_any_order(jobs: list[Any], rnd: Any) -> None:
    results = []
    for i, (good, lost) in enumerate(jobs):
        results.append({
            "job": f"j{i}", "error": None, "total_seconds": good + math.fsum(lost.values()),
            "goodput_seconds": good, "buckets": {"productive": good, **lost},
            "attempts": [], "days": [],
        })  # fmt: skip
    a = fleet_summary(results, source="s")
    shuffled = list(results)
    rnd.shuffle(shuffled)
    assert json.dumps(fleet_summary(shuffled, source="s")) == json.dumps(a)
    lost = math.fsum(r["seconds"] for r in a["lost_by_cause"])
    assert lost + a["goodput_seconds"] == pytest.approx(a["total_seconds"], rel=1e-12, abs=1e-9)
    assert 0.0 <= a["goodput"] <= 1.0


def test_a_fleet_lists_its_store_once_not_once_a_job(
    fleet_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each job is opened by its own directory: a listing of the store per job made a
    fleet of 10,000 jobs 10,000 x 10,000 directory walks (the driver's split of each job,
    each worker's read)."""
    root, _made = fleet_store
    listed = []
    real_jobs = JsonlStore.jobs

    def counted(self: JsonlStore) -> list[str]:
        listed.append(self.root)
        return real_jobs(self)

    monkeypatch.setattr(JsonlStore, "jobs", counted)
    run = analyse_fleet(root, engine="serial")
    assert run.analysed == N_JOBS
    assert len(listed) == 1  # job_sources: the fleet's one listing
    listed.clear()
    assert analysis.LiveJob(JsonlStore(root), "job-00003").job == "job-00003"
    analysis.split_job(JsonlStore(root), "job-00004", min_bytes=1)
    assert listed == []


def test_a_job_named_like_a_path_is_not_taken_for_a_directory(tmp_path: Path) -> None:
    """The by-name check refuses what the listing could never hold: ``..``, a path."""
    write_job(tmp_path / "store", 1)
    store = JsonlStore(tmp_path / "store" / "job-00001")
    for name in ("..", ".", "", "0/..", "a\0b"):
        assert not store.holds_job_dir(name)
    assert JsonlStore(tmp_path / "store").holds_job_dir("job-00001")
    with pytest.raises(ValueError, match=r"no job '\.\./store'"):
        open_source(JsonlStore(tmp_path / "store"), "../store")


def test_many_jobs_go_in_small_batches_in_order() -> None:
    """A fleet of 10,000 jobs in 16 batches left a worker alone for a whole batch at its
    end (35 s of a 340 s run): batches hold at most 32 jobs, in the store's order."""
    todo = list(range(10_000))
    batches = fleet_engine._batches(todo, 2)
    assert max(len(b) for b in batches) <= 32
    assert [j for b in batches for j in b] == todo
    assert max(map(len, fleet_engine._batches(list(range(40)), 2))) == 3  # few: 16 batches
