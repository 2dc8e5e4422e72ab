"""Replays the golden scenarios (tests/compat/golden/, written by tools/reference_replay.py
with the real ml-goodput-measurement 0.2.3) through badput's compatibility layer."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from badput.compat.ml_goodput_measurement import goodput, goodput_elastic
from badput.compat.ml_goodput_measurement.checkpoint_badput_calculator import (
    CheckpointBadputCalculator,
    CheckpointLoggerOptions,
)
from badput.store import MemoryStore

GOLDEN_DIR = Path(__file__).parent / "golden"
#: Parity tolerance on every percentage (issue 4: 0.01 percentage points).
PP = 0.01
# Parameters of the recorder's methods that take the call's time.
_TIME_PARAMS = ("start_time", "end_time", "timestamp")


@dataclass
class Golden:
    path: Path
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.data["scenario"])

    @property
    def difference(self) -> str | None:
        return self.data.get("difference")

    @property
    def epoch(self) -> float:
        return float(self.data["epoch"])

    def query(self, method: str, index: int = 0) -> dict[str, Any]:
        found = [q for q in self.data["queries"] if q["method"] == method]
        return found[index]


def load_goldens() -> list[Golden]:
    return [Golden(p, json.loads(p.read_text())) for p in sorted(GOLDEN_DIR.glob("*.json"))]


def golden(name: str) -> Golden:
    return Golden(
        GOLDEN_DIR / f"{name}.json", json.loads((GOLDEN_DIR / f"{name}.json").read_text())
    )


def _when(epoch: float, t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch + t, dt.timezone.utc)


def _absolute(payload: dict[str, Any], epoch: float) -> dict[str, Any]:
    """Orbax payloads hold times relative to the epoch in every key containing 'time'
    (``epoch`` 0: as they stand, for a call marked ``absolute``)."""
    return {
        k: (v + epoch if "time" in k and isinstance(v, (int, float)) else v)
        for k, v in payload.items()
    }


class Replay:
    """One scenario recorded through the compat recorder into a memory store."""

    def __init__(self, g: Golden) -> None:
        self.golden = g
        self.store = MemoryStore()
        elastic = bool(g.data.get("elastic"))
        rec_cls = goodput_elastic.ElasticGoodputRecorder if elastic else goodput.GoodputRecorder
        self.calc_cls = (
            goodput_elastic.ElasticGoodputCalculator if elastic else goodput.GoodputCalculator
        )
        rec = rec_cls(g.data["job_name"], "goodput-log", logging_enabled=True, store=self.store)
        for call in g.data["calls"]:
            t = float(call["t"])
            if "orbax" in call:
                shift = 0.0 if call.get("absolute") else g.epoch
                rec.record_payload(_absolute(call["orbax"], shift), timestamp=g.epoch + t)
                continue
            method = getattr(rec, call["method"])
            kwargs = {k: v for k, v in call.items() if k not in ("t", "method")}
            params = inspect.signature(method).parameters
            time_param = next(p for p in _TIME_PARAMS if p in params)
            kwargs[time_param] = _when(g.epoch, t)
            method(**kwargs)
        rec.close()

    def calculator(self, t_now: float) -> goodput.GoodputCalculator:
        g = self.golden
        return self.calc_cls(
            g.data["job_name"],
            "goodput-log",
            store=self.store,
            clock=lambda: g.epoch + t_now,
        )

    def run(self, query: dict[str, Any]) -> dict[str, Any]:
        """Our answer to one golden query, in the golden's JSON shape."""
        g = self.golden
        calc = self.calculator(float(query["t_now"]))
        method = query["method"]
        if method == "get_job_goodput":
            gp, breakdown, last = calc.get_job_goodput(
                include_badput_breakdown=query.get("include_badput_breakdown", False)
            )
            return {"goodput": gp, "badput": names(breakdown), "last_step": last}
        if method == "get_job_goodput_interval":
            gp, breakdown, last, total, disruptions = calc.get_job_goodput_interval(
                _when(g.epoch, query["start"]), _when(g.epoch, query["end"])
            )
            return {
                "goodput": gp,
                "badput": names(breakdown),
                "last_step": last,
                "total_job_time": total,
                "disruptions": disruptions,
            }
        if method == "get_step_deviation":
            deviations = calc.get_step_deviation(query.get("configured_ideal_step_time"))
            info = calc._step_info
            assert info is not None
            return {
                "ideal_step_time": info.ideal_step_time,
                "deviations": {str(k): v for k, v in deviations.items()},
            }
        if method == "get_job_goodput_details":
            calc.get_job_goodput(include_badput_breakdown=True)
            return jsonable(calc.get_job_goodput_details())
        if method == "get_interval_metric_details":
            return jsonable(
                calc.get_interval_metric_details(
                    _when(g.epoch, query["start"]), _when(g.epoch, query["end"])
                )
            )
        if method == "get_job_goodput_with_exclusions":
            gp, breakdown, last, excluded = calc.get_job_goodput_with_exclusions(
                [(_when(g.epoch, a), _when(g.epoch, b)) for a, b in query["exclusions"]],
                include_badput_breakdown=query.get("include_badput_breakdown", False),
            )
            return {
                "goodput": gp,
                "badput": names(breakdown),
                "last_step": last,
                "excluded": excluded,
            }
        if method == "checkpoint_statistics":
            # From badput's store, where the Orbax entries went as checkpoint events.
            stats = CheckpointBadputCalculator(
                CheckpointLoggerOptions(job_name=g.data["job_name"]), store=self.store
            )
            if query["operation"] == "save":
                result = stats.calculate_save_operation_checkpoint_manager_blocking_time(
                    query["operation_type"]
                )
            else:
                result = stats.calculate_restore_operation_checkpoint_manager_blocking_time(
                    query["operation_type"]
                )
            return dataclasses.asdict(result)
        raise AssertionError(f"unknown golden query {method}")


def names(breakdown: dict[Any, Any]) -> dict[str, Any]:
    return {
        getattr(k, "name", k): (names(v) if isinstance(v, dict) else v)
        for k, v in breakdown.items()
    }


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {(k.name if hasattr(k, "name") else str(k)): jsonable(v) for k, v in value.items()}
    return value


def mismatches(ours: Any, ref: Any, path: str = "", tol: float = PP) -> list[str]:
    """Where ``ours`` differs from ``ref`` beyond ``tol`` (numbers) or at all (others)."""
    if isinstance(ref, dict):
        if not isinstance(ours, dict):
            return [f"{path}: {ours!r} != {ref!r}"]
        out: list[str] = []
        for key in sorted(set(ref) | set(ours)):
            if key not in ours or key not in ref:
                # A zero the other side leaves out is the same answer.
                value = ours.get(key, ref.get(key))
                if value in (0, 0.0, {}, None):
                    continue
                out.append(f"{path}.{key}: missing on one side ({value!r})")
                continue
            out.extend(mismatches(ours[key], ref[key], f"{path}.{key}", tol))
        return out
    if isinstance(ref, bool) or isinstance(ours, bool):
        return [] if ours == ref else [f"{path}: {ours!r} != {ref!r}"]
    if isinstance(ref, (int, float)) and isinstance(ours, (int, float)):
        return [] if abs(ours - ref) <= tol else [f"{path}: ours {ours!r} != reference {ref!r}"]
    return [] if ours == ref else [f"{path}: {ours!r} != {ref!r}"]
