"""TensorBoard exporter: real event files, read back with TensorBoard's own EventAccumulator."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from _worked_example import JOB, t, worked_example_events
from badput.engine import Accountant
from badput.monitor import Exporter, Snapshot, window_label
from badput.monitor.tensorboard import TensorBoardExporter
from badput.runtime.optional import MissingExtraError

WINDOW = 1800.0
# Minutes of the worked example at which the monitor takes a snapshot: before the first
# step, steps 38/51/70, a crash (step held at 70), a restore to 50 (steps 51.. again),
# passing 70, the job's end at 75, and once more after the end.
MINUTES: list[float] = [3, 30, 60, 100, 110, 125, 180, 200, 210]


def snapshots(minutes: list[float] = MINUTES) -> list[Snapshot]:
    events = worked_example_events()
    out = []
    for k, m in enumerate(minutes):
        now = t(m)
        acc = Accountant(JOB, ideal_step_time=120.0)
        acc.ingest_events([e for e in events if e.ts <= now])
        out.append(
            Snapshot(
                JOB,
                now,
                acc.report(now=now),
                windows={WINDOW: acc.report(now=now, window=(now - WINDOW, now))},
                step_time=acc.step_time_stats(now=now),
                sequence=k,
            )
        )
    return out


def accumulate(logdir: Path) -> object:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def points(acc: object, tag: str) -> list[tuple[float, int, float]]:
    """(wall_time, step, value) of every point of ``tag``."""
    return [(e.wall_time, e.step, e.value) for e in acc.Scalars(tag)]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def snaps() -> list[Snapshot]:
    return snapshots()


@pytest.fixture
def written(tmp_path: Path, snaps: list[Snapshot]) -> tuple[Path, object]:
    exp = TensorBoardExporter(tmp_path, flush_secs=1)
    for s in snaps:
        exp.export(s)
    exp.close()
    return tmp_path, accumulate(tmp_path)


def test_is_an_exporter(tmp_path: Path) -> None:
    exp = TensorBoardExporter(tmp_path)
    assert isinstance(exp, Exporter)
    assert exp.name == "tensorboard"
    exp.close()


def test_tags(written: tuple[Path, object]) -> None:
    _, acc = written
    tags = set(acc.Tags()["scalars"])  # type: ignore[attr-defined]
    w = f"goodput_window/{window_label(WINDOW)}"
    assert w == "goodput_window/1800s"
    assert tags == {
        "goodput/goodput",
        "goodput/observed",
        "goodput/at_risk",
        "step_time/ideal",
        "step_time/deviation",
        "step_time/deviation_p50",
        "step_time/deviation_p90",
        "step_time/recent_median",
        "ranks/stalled",
        "ranks/stall_seconds",
        "ranks/stalls",
        "ranks/stragglers",
        *(
            f"badput/{b}"
            for b in (
                "checkpoint_restore",
                "checkpoint_save",
                "untracked",
                "wasted",
                "recovery",
                "startup",
                "slowdown",
            )
        ),
        f"{w}/goodput",
        f"{w}/observed",
        *(
            f"{w}/badput/{b}"
            for b in (
                "checkpoint_restore",
                "checkpoint_save",
                "untracked",
                "wasted",
                "recovery",
                "startup",
                "slowdown",
            )
        ),
    }
    assert "badput/productive" not in tags


def test_goodput_points_follow_the_step_rule(
    written: tuple[Path, object], snaps: list[Snapshot]
) -> None:
    _, acc = written
    got = points(acc, "goodput/goodput")
    # No step before minute 3 → step 0; after the crash (110) and the restore to 50
    # (125, last step 52) the axis holds at 70 and only changed values are written;
    # at 210 the finished job's cumulative goodput did not change: no point.
    assert [p[1] for p in got] == [0, 38, 51, 70, 70, 70, 71, 75]
    assert [p[0] for p in got] == pytest.approx([s.time for s in snaps[:-1]])
    assert [p[2] for p in got] == pytest.approx([s.report.goodput for s in snaps[:-1]], rel=1e-6)
    assert got[-1][2] == pytest.approx(0.5)
    observed = points(acc, "goodput/observed")
    assert [p[2] for p in observed] == pytest.approx(
        [s.report.observed_goodput for s in snaps[:-1]], rel=1e-6
    )
    at_risk = points(acc, "goodput/at_risk")
    assert at_risk[-1][1:] == (75, 0.0)
    assert [p[2] for p in at_risk][:4] == pytest.approx([0.0, 1500.0, 0.0, 2400.0])


def test_steps_never_go_back_and_no_point_is_repeated(written: tuple[Path, object]) -> None:
    _, acc = written
    for tag in acc.Tags()["scalars"]:  # type: ignore[attr-defined]
        pts = points(acc, tag)
        steps = [p[1] for p in pts]
        assert steps == sorted(steps), tag
        for a, b in itertools.pairwise(pts):
            assert not (a[1] == b[1] and a[2] == b[2]), (tag, a, b)


def test_badput_buckets_are_fractions_in_a_stable_set(
    written: tuple[Path, object], snaps: list[Snapshot]
) -> None:
    _, acc = written
    wasted = points(acc, "badput/wasted")
    final = snaps[-2].report
    assert wasted[-1][1] == 75
    assert wasted[-1][2] == pytest.approx(2400 / 12000)
    assert wasted[-1][2] == pytest.approx(final.bucket("wasted") / final.total_seconds, rel=1e-6)
    # startup appears at minute 125 (step axis held at 70) and is gone by 180:
    # still written, as 0, at every point after.
    startup = points(acc, "badput/startup")
    assert [p[1] for p in startup] == [70, 71, 75]
    assert startup[0][2] == pytest.approx(60 / 7500)
    assert [p[2] for p in startup[1:]] == [0.0, 0.0]
    untracked = points(acc, "badput/untracked")
    assert untracked[0][1] == 70
    assert untracked[0][2] == pytest.approx(600 / 6600)
    assert [p[2] for p in untracked[1:]] == [0.0] * (len(untracked) - 1)


def test_step_time_and_windows(written: tuple[Path, object], snaps: list[Snapshot]) -> None:
    _, acc = written
    ideal = points(acc, "step_time/ideal")
    assert {p[2] for p in ideal} == {120.0}
    assert [p[1] for p in ideal] == [0, 38, 51, 70, 71, 75]  # unchanged while held: no point
    deviation = points(acc, "step_time/deviation")
    st = snaps[-2].step_time
    assert st is not None and st.gcm_deviation is not None
    assert deviation[-1][1] == 75
    assert deviation[-1][2] == pytest.approx(st.gcm_deviation, rel=1e-6)
    assert deviation[0][1] == 38  # no step time known at step 0: not written
    w = points(acc, "goodput_window/1800s/goodput")
    # the last snapshot (after the end) changes the window only: written at the held step
    assert [p[1] for p in w] == [0, 38, 51, 70, 70, 70, 71, 75, 75]
    assert [p[2] for p in w] == pytest.approx([s.windows[WINDOW].goodput for s in snaps], rel=1e-6)
    slow = points(acc, "goodput_window/1800s/badput/slowdown")
    wr = snaps[-1].windows[WINDOW]
    assert slow[-1][2] == pytest.approx(wr.bucket("slowdown") / wr.total_seconds, rel=1e-6)


def test_events_are_appended_never_rewritten(tmp_path: Path, snaps: list[Snapshot]) -> None:
    exp = TensorBoardExporter(tmp_path, flush_secs=1)
    for s in snaps[:4]:
        exp.export(s)
    exp.flush()
    (path,) = tmp_path.glob("events.out.tfevents.*")
    before = path.read_bytes()
    assert [p[1] for p in points(accumulate(tmp_path), "goodput/goodput")] == [0, 38, 51, 70]
    for s in snaps[4:]:
        exp.export(s)
    exp.close()
    exp.close()  # idempotent
    assert list(tmp_path.glob("events.out.tfevents.*")) == [path]
    after = path.read_bytes()
    assert len(after) > len(before)
    assert after.startswith(before)
    assert len(points(accumulate(tmp_path), "goodput/goodput")) == 8
    with pytest.raises(RuntimeError, match="closed"):
        exp.export(snaps[-1])


def test_exporting_the_same_snapshot_again_writes_nothing(
    tmp_path: Path, snaps: list[Snapshot]
) -> None:
    exp = TensorBoardExporter(tmp_path)
    for _ in range(3):
        exp.export(snaps[2])
    exp.close()
    acc = accumulate(tmp_path)
    (point,) = points(acc, "goodput/goodput")
    assert point[1] == 51
    assert point[2] == pytest.approx(snaps[2].report.goodput)


def test_missing_tensorboardx_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'badput\[tensorboard\]'"):
        TensorBoardExporter(tmp_path)
