"""Program goodput: the work a job's steps did (tokens, samples), their FLOPs, model FLOPs
utilisation (MFU) and ML Productivity Goodput, MPG = SG x RG x PG (docs/program-goodput.md).

Computed after the partition, from its report, never inside its passes: the
:class:`ProgramTracker` keeps the step marks that carry work and the ``model`` events as
they are ingested (a job that records neither pays one look at each batch), and
:func:`program_goodput` reads them with the report's attempts and buckets.

FLOPs per token follow the dense-transformer count, forward and backward together:
``6 * params + 12 * layers * hidden * seq_len``: 6 per parameter (2 forward, 4 backward)
and the attention scores and their use (PaLM, Chowdhery et al. 2022, appendix B, "model
FLOPs utilization": 6N + 12LHQT with H*Q = hidden; torchtitan ``get_num_flop_per_token``
and MaxText ``calculate_tflops_training_per_device`` use the same count; Megatron-LM,
Narayanan et al. 2021 §5.1, the same terms written per batch). A ``model`` event's
``flops_per_token`` replaces it for anything else.
"""

from __future__ import annotations

import dataclasses
import math
from operator import attrgetter
from typing import Final

import numpy as np

from badput.engine._batch import Batch
from badput.engine._model import Report
from badput.engine._program_model import AttemptWork, ProgramGoodput, table_peak
from badput.events import KIND_CODE, Kind

__all__ = ["ProgramTracker", "dense_flops_per_token", "program_goodput", "with_program"]

_tokens = attrgetter("tokens")
_samples = attrgetter("samples")
_MODEL_CODE = KIND_CODE[Kind.MODEL]
_STEP_CODES = (KIND_CODE[Kind.STEP_START], KIND_CODE[Kind.STEP_END])
#: The fields of a ``model`` event, each kept as last recorded (by time).
MODEL_FIELDS: Final = (
    "params",
    "layers",
    "hidden",
    "seq_len",
    "flops_per_token",
    "devices",
    "peak_flops",
    "device",
)


def dense_flops_per_token(params: int, layers: int = 0, hidden: int = 0, seq_len: int = 0) -> int:
    """Training FLOPs per token of a dense transformer: ``6 * params`` plus the attention
    term ``12 * layers * hidden * seq_len`` (see the module docstring for the sources)."""
    return 6 * params + 12 * layers * hidden * seq_len


class ProgramTracker:
    """The step marks with work and the model events of one job, as ingested."""

    def __init__(self) -> None:
        # (ts, attempt as written, rank, step, tokens, samples) of each mark with work
        self.work: list[tuple[float, object, int, int, int, int]] = []
        self.model: dict[str, tuple[float, object]] = {}  # field -> (ts, value), newest

    @property
    def empty(self) -> bool:
        """Whether the job recorded no work and no model."""
        return not self.work and not self.model

    def absorb(self, other: ProgramTracker) -> None:
        self.work += other.work
        for name, (ts, value) in other.model.items():
            if name not in self.model or ts >= self.model[name][0]:
                self.model[name] = (ts, value)

    def ingest_batch(self, batch: Batch, job: str | None) -> None:
        """Keep what ``batch`` holds of work and model (one look at it when none)."""
        if job is None or not batch.n:
            return
        same = batch.same_job(job)
        models = batch.kind == _MODEL_CODE
        if same is not None:
            models &= same
        for i in np.flatnonzero(models).tolist():
            self._model(batch.events[i])
        events = batch.events
        if list(map(_tokens, events)).count(None) == batch.n and (
            list(map(_samples, events)).count(None) == batch.n
        ):
            return
        steps = (batch.kind == _STEP_CODES[0]) | (batch.kind == _STEP_CODES[1])
        if same is not None:
            steps &= same
        at = np.flatnonzero(steps)
        values, ok = batch.steps(at)
        for i, step, good in zip(at.tolist(), values.tolist(), ok.tolist(), strict=True):
            e = events[i]
            tokens, samples = e.tokens, e.samples
            if good and (tokens is not None or samples is not None):
                rank = e.rank if type(e.rank) is int else -1
                self.work.append((e.ts, e.attempt, rank, step, tokens or 0, samples or 0))

    def _model(self, event: object) -> None:
        ts = float(getattr(event, "ts", 0.0))
        for name in MODEL_FIELDS:
            value = getattr(event, name, None)
            if value is not None and (name not in self.model or ts >= self.model[name][0]):
                self.model[name] = (ts, value)

    def recorded(self, name: str) -> object:
        """The newest recorded value of a ``model`` field, else None."""
        kept = self.model.get(name)
        return None if kept is None else kept[1]


def _kept_upto(report: Report) -> list[float]:
    """Per attempt: the highest step number of it that no later attempt redid (the lowest
    restore point of the later attempts; ACCOUNTING.md §3)."""
    attempts = report.attempts
    upto = [math.inf] * len(attempts)
    running = math.inf
    for i in range(len(attempts) - 1, -1, -1):
        upto[i] = running
        a = attempts[i]
        point = a.restore_step
        if point is None and a.first_step is not None:
            point = a.first_step - 1
        if point is not None:
            running = min(running, float(point))
    return upto


def _attempt_work(
    tracker: ProgramTracker, report: Report
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Per attempt ``(tokens, samples)`` of every mark, and of the kept steps' marks: the
    lowest rank with work in each attempt speaks for the job (its counts are the job's)."""
    attempts = report.attempts
    starts = np.array([a.start for a in attempts], np.float64)
    by_attempt: list[list[tuple[float, int, int, int, int]]] = [[] for _ in attempts]
    for ts, _, rank, step, tokens, samples in tracker.work:
        i = max(int(np.searchsorted(starts, ts, side="right")) - 1, 0)
        if ts <= attempts[i].end:  # after its end: not accounted (events_out_of_order)
            by_attempt[i].append((ts, rank, step, tokens, samples))
    upto = _kept_upto(report)
    every: list[tuple[int, int]] = []
    kept: list[tuple[int, int]] = []
    for i, found in enumerate(by_attempt):
        leader = min((m[1] for m in found), default=-1)
        marks = sorted(m for m in found if m[1] == leader)
        every.append((sum(m[3] for m in marks), sum(m[4] for m in marks)))
        kept.append(_kept_work(marks, upto[i]))
    return every, kept


def _kept_work(marks: list[tuple[float, int, int, int, int]], upto: float) -> tuple[int, int]:
    """The work of the marks (in time order) whose step is kept: at most ``upto`` and not
    redone by a later segment of the same attempt (a step number that goes back)."""
    limit = upto
    tokens = samples = 0
    previous: int | None = None
    for _, _, step, t, s in reversed(marks):
        if previous is not None and step > previous:  # a rewind: what follows restored
            limit = min(limit, previous - 1)
        previous = step
        if step <= limit:
            tokens += t
            samples += s
    return tokens, samples


def _rate(amount: float, seconds: float) -> float | None:
    return amount / seconds if seconds > 0 else None


def _flops_per_token(
    tracker: ProgramTracker, absent: dict[str, str]
) -> tuple[float | None, str | None]:
    given = tracker.recorded("flops_per_token")
    if isinstance(given, (int, float)):
        return float(given), "recorded"
    params = tracker.recorded("params")
    if isinstance(params, int) and params > 0:
        sizes = [tracker.recorded(n) for n in ("layers", "hidden", "seq_len")]
        if all(isinstance(v, int) for v in sizes):
            layers, hidden, seq_len = (int(v) for v in sizes)  # type: ignore[call-overload]
            return float(dense_flops_per_token(params, layers, hidden, seq_len)), (
                "dense_transformer"
            )
        absent["attention_term"] = "layers, hidden or seq_len not recorded: 6 x params only"
        return float(dense_flops_per_token(params)), "dense_transformer"
    absent["flops_per_token"] = (
        "no FLOPs per token: record_model(params=..., layers=..., hidden=..., seq_len=...) "
        "or record_model(flops_per_token=...)"
    )
    return None, None


def _peak(
    tracker: ProgramTracker, peak_flops: float | None, absent: dict[str, str]
) -> tuple[float | None, str | None]:
    if peak_flops is not None:
        return peak_flops, "given"
    recorded = tracker.recorded("peak_flops")
    if isinstance(recorded, (int, float)):
        return float(recorded), "recorded"
    device = tracker.recorded("device")
    if isinstance(device, str):
        found = table_peak(device)
        if found is not None:
            return found[1], f"table:{found[0]}"
        absent["peak_flops"] = (
            f"peak FLOP/s unknown, MFU omitted: device {device!r} is not in the table of "
            "peaks (give --peak-flops or record_model(peak_flops=...))"
        )
        return None, None
    absent["peak_flops"] = (
        "peak FLOP/s unknown, MFU omitted: no device recorded (give --peak-flops, or "
        "record_model(device=...) or (peak_flops=...))"
    )
    return None, None


def _devices(tracker: ProgramTracker, devices: int | None, absent: dict[str, str]) -> int | None:
    if devices is not None:
        return devices
    recorded = tracker.recorded("devices")
    if isinstance(recorded, int) and recorded > 0:
        return recorded
    absent["devices"] = "number of devices unknown: record_model(devices=...) or --devices"
    return None


def program_goodput(
    report: Report,
    tracker: ProgramTracker,
    *,
    peak_flops: float | None = None,
    devices: int | None = None,
) -> ProgramGoodput:
    """Tokens, samples, MFU and MPG of ``report``'s job (a whole-job report).

    ``peak_flops`` (one device's, FLOP/s) and ``devices`` override what the log records.
    """
    absent: dict[str, str] = {}
    every, kept = _attempt_work(tracker, report)
    tokens, samples = sum(t for t, _ in every), sum(s for _, s in every)
    kept_tokens, kept_samples = sum(t for t, _ in kept), sum(s for _, s in kept)
    total = report.total_seconds
    productive = report.bucket("productive")
    stepping = productive + report.bucket("slowdown")  # the kept steps' time
    held = total - report.bucket("queued") - report.bucket("recovery")
    # (each a share of what holds it: at most 1, to the rounding of the buckets' sums)
    sg = min(held / total, 1.0) if total > 0 else None
    rg = min(productive / held, 1.0) if held > 0 else None
    if sg is None or rg is None:
        absent["runtime_goodput"] = "the job has no time in which it held its devices"
    attempts = [
        AttemptWork(
            a.id, t, s, a.end - a.start, _rate(t, a.end - a.start), _rate(s, a.end - a.start)
        )
        for a, (t, s) in zip(report.attempts, every, strict=True)
    ]
    flops, flops_source = _flops_per_token(tracker, absent)
    peak, peak_source = _peak(tracker, peak_flops, absent)
    n = _devices(tracker, devices, absent)
    mfu_productive = mfu_job = pg = mpg = None
    if flops is not None and peak is not None and n is not None:
        capacity = peak * n  # FLOP/s of every device together
        useful = kept_tokens * flops
        if kept_tokens == 0 or productive <= 0:
            absent["program_goodput"] = "no kept step recorded its tokens"
        elif useful / productive > capacity * (1 + 1e-9):
            absent["program_goodput"] = (
                f"the kept steps did {useful / productive / n:.4g} FLOP/s per device, above "
                f"the peak {peak:.4g}: the peak, the device count or the FLOPs count is wrong"
            )
        else:
            pg = min(useful / (productive * capacity), 1.0)  # to rounding
            mfu_productive = min(useful / (stepping * capacity), 1.0)
            mfu_job = min(useful / (total * capacity), 1.0)
            if sg is not None and rg is not None:
                mpg = sg * rg * pg
    else:
        absent["program_goodput"] = "; ".join(
            absent[k] for k in ("flops_per_token", "peak_flops", "devices") if k in absent
        )
    if pg is None:
        absent["mpg"] = "program goodput is absent (see program_goodput)"
    return ProgramGoodput(
        tokens=tokens,
        samples=samples,
        kept_tokens=kept_tokens,
        kept_samples=kept_samples,
        tokens_per_second=_rate(tokens, total),
        samples_per_second=_rate(samples, total),
        productive_tokens_per_second=_rate(kept_tokens, stepping),
        productive_samples_per_second=_rate(kept_samples, stepping),
        attempts=attempts,
        flops_per_token=flops,
        flops_source=flops_source,
        devices=n,
        peak_flops=peak,
        peak_source=peak_source,
        mfu_productive=mfu_productive,
        mfu_job=mfu_job,
        scheduling_goodput=sg,
        runtime_goodput=rg,
        program_goodput=pg,
        mpg=mpg,
        absent=absent,
    )


def with_program(
    report: Report, tracker: ProgramTracker, peak_flops: float | None, devices: int | None
) -> Report:
    """``report`` with its :class:`ProgramGoodput` when it is a whole-job report of a log
    that records step work or a model (or a peak is given); else ``report`` itself."""
    if report.window is not None or (tracker.empty and peak_flops is None):
        return report
    program = program_goodput(report, tracker, peak_flops=peak_flops, devices=devices)
    return dataclasses.replace(report, program=program)
