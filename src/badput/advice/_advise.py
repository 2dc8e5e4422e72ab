"""``badput advise``: what to change, and what it would buy, measured from the job's log."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from badput.advice._measure import JobFacts
from badput.advice._model import daly_interval, efficiency, young_interval
from badput.advice._replay import ReplaySettings, replay_seconds, whatif_of
from badput.advice._stats import poisson_rate_interval, quantile
from badput.engine import Report

__all__ = [
    "DALY_ABOVE",
    "Advice",
    "FailureRate",
    "Interval",
    "Lever",
    "Spread",
    "advise_of",
    "failure_rate",
    "pooled_rate",
    "rate_of",
]

#: Daly's higher-order form is used when δ is at least this share of M; below it, Young's
#: √(2δM) (the two then differ by less than 3 %).
DALY_ABOVE = 0.01
#: A failure-rate interval whose bounds differ by more than this factor is "wide": the
#: recommended interval may be far from the best, and the advice says so.
WIDE_FACTOR = 3.0
CONFIDENCE = 0.95


@dataclass(frozen=True)
class FailureRate:
    """Interruptions (failures, hangs, preemptions) per hour of running time."""

    failures: int
    running_hours: float
    per_hour: float
    per_hour_low: float
    per_hour_high: float
    confidence: float
    wide: bool

    @property
    def mtbf_hours(self) -> float:
        return 1.0 / self.per_hour if self.per_hour > 0 else math.inf


@dataclass(frozen=True)
class Spread:
    """A measured cost: median and the 10th and 90th percentiles of ``count`` values."""

    median: float
    low: float
    high: float
    count: int


@dataclass(frozen=True)
class Interval:
    """A checkpoint interval: steps, seconds of work between saves, and its goodput.

    ``expected_goodput``: the measured goodput scaled by Daly's efficiency at this
    interval over the efficiency at the current one; ``replayed_goodput``: what the
    job's own timeline gives with it (``badput whatif``).
    """

    steps: int
    seconds: float
    expected_goodput: float | None
    replayed_goodput: float | None


@dataclass(frozen=True)
class Lever:
    """One change and the time it would give back, at most (``gain_seconds``)."""

    name: str
    gain_seconds: float
    gain_share: float  # of the job's total time
    detail: str
    cost: float | None = None  # gain_seconds in money, with a price per device-hour


@dataclass(frozen=True)
class Advice:
    """What to change (see docs/advice.md). Seconds and fractions; ``None``: not measurable."""

    job: str
    total_seconds: float
    goodput: float
    failure_rate: FailureRate
    checkpoint_cost: Spread | None
    step_seconds: float | None
    restart_seconds: float | None  # down time + preamble per restart
    recovery_per_failure: float | None
    restore_per_failure: float | None
    lost_per_failure: float | None  # wasted progress per failure
    at_risk_seconds: float
    formula: str | None  # "young" | "daly"
    young_seconds: float | None
    daly_seconds: float | None
    current: Interval | None
    recommended: Interval | None
    levers: list[Lever] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    devices: int | None = None
    price_per_device_hour: float | None = None
    # Why ``recommended`` is None (too little data), else None.
    interval_reason: str | None = None
    # The jobs whose failures ``failure_rate`` pools (``badput advise --fleet``); empty:
    # the job's own.
    pooled_jobs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["failure_rate"]["mtbf_hours"] = self.failure_rate.mtbf_hours
        finite: dict[str, Any] = _finite(out)
        return finite


def _finite(value: Any) -> Any:
    """JSON has no infinity: an unbounded figure is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def failure_rate(facts: JobFacts, confidence: float = CONFIDENCE) -> FailureRate:
    """The job's own failures per hour of its running time."""
    return rate_of(facts.failures, facts.running_seconds / 3600.0, confidence)


def pooled_rate(jobs: Sequence[JobFacts], confidence: float = CONFIDENCE) -> FailureRate:
    """The failure rate of several jobs pooled: their failures over their running hours
    together (one Poisson process: the jobs fail alike), with its exact interval."""
    hours = math.fsum(f.running_seconds for f in jobs) / 3600.0
    return rate_of(sum(f.failures for f in jobs), hours, confidence)


def rate_of(k: int, hours: float, confidence: float = CONFIDENCE) -> FailureRate:
    """``k`` failures in ``hours`` of running time: the rate and its exact interval."""
    low, high = poisson_rate_interval(k, hours, confidence)
    rate = k / hours if hours > 0 else 0.0
    wide = k == 0 or (low <= 0 or high / low > WIDE_FACTOR)
    return FailureRate(k, hours, rate, low, high, confidence, wide)


def _rate_notes(rate: FailureRate, pooled: list[str]) -> tuple[float, list[str]]:
    """The MTBF (seconds) the interval is derived from, and what to say of the rate."""
    notes: list[str] = []
    k = rate.failures
    if pooled:
        notes.append(
            f"failure rate pooled over {len(pooled)} jobs: {k} failures in "
            f"{rate.running_hours:.2f} h of running time (each job's own costs)"
        )
    if k == 0:
        bound = 1.0 / rate.per_hour_high * 3600.0 if rate.per_hour_high > 0 else math.inf
        notes.append(
            f"no failure in {rate.running_hours:.2f} h of running time: the interval below "
            f"uses the MTBF's {rate.confidence:.0%} lower bound ({bound / 3600.0:.2f} h)"
        )
        return bound, notes
    if rate.wide:
        notes.append(
            f"only {k} failure{'s' if k != 1 else ''}: the failure rate is known to within "
            f"{rate.per_hour_low:.3g}-{rate.per_hour_high:.3g} per hour "
            f"({rate.confidence:.0%}), so the recommended interval is a rough guide"
        )
    return rate.mtbf_hours * 3600.0, notes


def _spread(values: list[float]) -> Spread | None:
    if not values:
        return None
    return Spread(quantile(values, 0.5), quantile(values, 0.1), quantile(values, 0.9), len(values))


def _restart(facts: JobFacts) -> float | None:
    """Mean down time plus preamble of the attempts that followed another."""
    costs = [facts.gap_after(i - 1) + a.preamble for i, a in enumerate(facts.attempts) if i > 0]
    return math.fsum(costs) / len(costs) if costs else None


def _interval(
    report: Report,
    facts: JobFacts,
    steps: int,
    w: float,
    *,
    model: tuple[float, float, float] | None,
    current: float | None,
    log: Callable[[], dict[str, float]],
) -> Interval:
    expected = None
    if model is not None and current is not None:
        delta, mtbf, restart = model
        now = efficiency(current, delta, mtbf, restart)
        if now > 0:
            expected = report.goodput * efficiency(steps * w, delta, mtbf, restart) / now
    replayed = None
    if facts.save_seconds:
        settings = ReplaySettings(checkpoint_every=steps)
        replayed = whatif_of(report, facts, settings, log=log()).goodput
    return Interval(steps, steps * w, expected, replayed)


def _levers(
    report: Report, facts: JobFacts, rec: Interval | None, log: Callable[[], dict[str, float]]
) -> list[Lever]:
    total = report.total_seconds or 1.0
    b = report.buckets
    out: list[Lever] = []
    if rec is not None and rec.replayed_goodput is not None:
        gain = (rec.replayed_goodput - report.goodput) * total
        out.append(Lever(
            "checkpoint interval", gain, gain / total,
            f"save every {rec.steps} steps: the job's own failures replayed with it",
        ))  # fmt: skip
    if b["checkpoint_save"] > 0:
        replay = whatif_of(report, facts, ReplaySettings(async_save=True), log=log())
        gain = (replay.goodput - report.goodput) * total
        out.append(Lever(
            "asynchronous saves", gain, gain / total,
            "blocking saves replayed as background saves (a checkpoint safe once its "
            "recorded save time has passed); the device-to-host copy that still blocks "
            "is not in the log and is taken as 0",
        ))  # fmt: skip
    restart = b["recovery"] + b["checkpoint_restore"]
    if restart > 0 and facts.failures:
        out.append(Lever(
            "faster restarts", restart, restart / total,
            f"down time {b['recovery'] / facts.failures:.1f} s and restore "
            f"{b['checkpoint_restore'] / facts.failures:.1f} s per failure; each second "
            f"less per restart gives back {facts.failures} s",
        ))  # fmt: skip
    if b["data_loading"] > 0:
        out.append(Lever(
            "non-blocking data loading", b["data_loading"], b["data_loading"] / total,
            "steps waited for batches: a prefetching loader would hide it",
        ))  # fmt: skip
    if b["slowdown"] > 0:
        who = sorted({s.rank for s in report.stragglers})
        out.append(Lever(
            "stragglers and slow steps", b["slowdown"], b["slowdown"] / total,
            "step time beyond the ideal step time"
            + (f"; straggling ranks: {', '.join(map(str, who[:8]))}" if who else ""),
        ))  # fmt: skip
    return sorted(out, key=lambda lv: -lv.gain_seconds)


def _priced(levers: list[Lever], devices: int | None, price: float | None) -> list[Lever]:
    """``levers`` with their gain in money (``devices`` default 1) when a price is given."""
    if price is None:
        return levers
    per_second = (devices or 1) * price / 3600.0
    return [
        Lever(lv.name, lv.gain_seconds, lv.gain_share, lv.detail, lv.gain_seconds * per_second)
        for lv in levers
    ]


def advise_of(
    report: Report,
    facts: JobFacts,
    *,
    devices: int | None = None,
    price_per_device_hour: float | None = None,
    pooled: tuple[FailureRate, list[str]] | None = None,
) -> Advice:
    """The :class:`Advice` of a cumulative ``report`` and its measured ``facts``;
    ``pooled``: a failure rate pooled over several jobs (:func:`pooled_rate`) and their
    names, taken instead of the job's own (its checkpoint and restart costs stay its own)."""
    rate = failure_rate(facts) if pooled is None else pooled[0]
    # the log's own replay, made once for the settings replayed against it
    log = functools.cache(lambda: replay_seconds(facts, ReplaySettings())[0])
    saves = _spread(list(facts.save_seconds))
    w = facts.step_seconds
    restart = _restart(facts)
    k = facts.failures  # the job's own, for its costs per failure
    mtbf_s, notes = _rate_notes(rate, pooled[1] if pooled is not None else [])
    young = daly = None
    formula: str | None = None
    current = recommended = None
    model = None
    reason = None
    if saves is None:
        reason = "the log has no blocking checkpoint save: no interval can be derived"
    elif w is None or w <= 0:
        reason = "the log has no step time: no interval in steps can be derived"
    elif not (math.isfinite(mtbf_s) and mtbf_s > 0):
        reason = "the log has no running time to measure a failure rate in"
    else:
        delta = saves.median
        young, daly = young_interval(delta, mtbf_s), daly_interval(delta, mtbf_s)
        formula = "daly" if delta >= DALY_ABOVE * mtbf_s else "young"
        tau = daly if formula == "daly" else young
        model = (delta, mtbf_s, restart or 0.0)
        cur_s = facts.interval_steps * w if facts.interval_steps else None
        steps = max(1, round(tau / w))
        recommended = _interval(report, facts, steps, w, model=model, current=cur_s, log=log)
        if facts.interval_steps:
            current = Interval(facts.interval_steps, cur_s or 0.0, report.goodput, report.goodput)
    if reason is not None:
        notes.append(reason)
    if facts.attempts and not facts.finished:
        notes.append("the job has not finished: figures are as of the log's end")
    levers = _priced(_levers(report, facts, recommended, log), devices, price_per_device_hour)
    per = (lambda s: s / k) if k else (lambda s: None)
    return Advice(
        job=report.job,
        total_seconds=report.total_seconds,
        goodput=report.goodput,
        failure_rate=rate,
        checkpoint_cost=saves,
        step_seconds=w,
        restart_seconds=restart,
        recovery_per_failure=per(report.buckets["recovery"]),
        restore_per_failure=per(report.buckets["checkpoint_restore"]),
        lost_per_failure=per(report.buckets["wasted"]),
        at_risk_seconds=report.at_risk_seconds,
        formula=formula,
        young_seconds=young,
        daly_seconds=daly,
        current=current,
        recommended=recommended,
        levers=levers,
        notes=notes,
        devices=devices,
        price_per_device_hour=price_per_device_hour,
        interval_reason=reason,
        pooled_jobs=pooled[1] if pooled is not None else [],
    )
