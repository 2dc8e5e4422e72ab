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
from array import array
from operator import attrgetter
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt

from badput.engine._batch import Batch
from badput.engine._model import Report
from badput.engine._program_model import AttemptWork, ProgramGoodput, table_peak
from badput.events import KIND_CODE, Kind

__all__ = [
    "ProgramTracker",
    "dense_flops_per_token",
    "kept_marks",
    "program_goodput",
    "with_program",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

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
    """The step marks with work and the model events of one job, as ingested. The marks are
    kept as columns (8 bytes a field: a job that records its tokens every step holds 48
    bytes a mark, not a tuple of objects), read by :func:`kept_work` with numpy."""

    def __init__(self) -> None:
        # each mark with work: its time, attempt (a code of ``attempts``: as written), rank
        # (-1: none), step, tokens and samples (0 when not recorded)
        self.ts = array("d")
        self.attempt = array("q")
        self.rank = array("q")
        self.step = array("q")
        self.tokens = array("q")
        self.samples = array("q")
        self.attempts: list[object] = []
        self._attempt_codes: dict[object, int] = {}
        self.model: dict[str, tuple[float, object]] = {}  # field -> (ts, value), newest

    @property
    def empty(self) -> bool:
        """Whether the job recorded no work and no model."""
        return not self.ts and not self.model

    def _code(self, attempt: object) -> int:
        code = self._attempt_codes.get(attempt)
        if code is None:
            code = self._attempt_codes[attempt] = len(self.attempts)
            self.attempts.append(attempt)
        return code

    def absorb(self, other: ProgramTracker) -> None:
        codes = [self._code(a) for a in other.attempts]
        self.ts += other.ts
        self.attempt += array("q", [codes[c] for c in other.attempt])
        self.rank += other.rank
        self.step += other.step
        self.tokens += other.tokens
        self.samples += other.samples
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
        if not batch.may_hold_work or (
            list(map(_tokens, events)).count(None) == batch.n
            and list(map(_samples, events)).count(None) == batch.n
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
                self.ts.append(e.ts)
                self.attempt.append(self._code(e.attempt))
                self.rank.append(e.rank if type(e.rank) is int else -1)
                self.step.append(step)
                self.tokens.append(tokens or 0)
                self.samples.append(samples or 0)

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


class WorkMarks(NamedTuple):
    """The marks that speak for the job, per attempt the lowest rank with work in it (its
    counts are the job's), ordered by attempt, then as ``(ts, rank, step, tokens,
    samples)``; ``kept``: whether each mark's step is kept (:func:`kept_work`)."""

    attempt: I64  # index among the report's attempts
    ts: F64
    rank: I64
    step: I64
    tokens: I64
    samples: I64
    kept: BoolArray


def kept_work(tracker: ProgramTracker, report: Report) -> WorkMarks:
    """The leading rank's marks of each attempt of ``report`` and which of them are of kept
    steps: a step at most the attempt's kept limit (:func:`_kept_upto`) and not redone by a
    later segment of the same attempt (a step number that goes back: every mark before the
    rewind whose step is not below the step resumed from was redone)."""
    attempts = report.attempts
    ts = np.frombuffer(tracker.ts, np.float64) if tracker.ts else np.zeros(0)
    n = ts.shape[0]
    if not attempts or not n:
        empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0)
        return WorkMarks(empty_i, empty_f, empty_i, empty_i, empty_i, empty_i, np.zeros(0, bool))
    starts = np.array([a.start for a in attempts], np.float64)
    ends = np.array([a.end for a in attempts], np.float64)
    index = np.maximum(np.searchsorted(starts, ts, side="right") - 1, 0)
    inside = ts <= ends[index]  # after its attempt's end: not accounted (events_out_of_order)
    cols = [np.frombuffer(c, np.int64) for c in (tracker.rank, tracker.step, tracker.tokens,
                                                tracker.samples)]  # fmt: skip
    index, ts = index[inside], ts[inside]
    rank, step, tokens, samples = (c[inside] for c in cols)
    # the leading rank of each attempt: the lowest among its marks
    leader = np.full(len(attempts), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(leader, index, rank)
    lead = rank == leader[index]
    index, ts, rank, step, tokens, samples = (
        c[lead] for c in (index, ts, rank, step, tokens, samples)
    )
    order = np.lexsort((samples, tokens, step, rank, ts, index))
    index, ts, rank, step, tokens, samples = (
        c[order] for c in (index, ts, rank, step, tokens, samples)
    )
    upto = np.array(_kept_upto(report), np.float64)
    kept = (step <= upto[index]) & _not_redone(index, step)
    return WorkMarks(index, ts, rank, step, tokens, samples, kept)


def _not_redone(group: I64, step: I64) -> BoolArray:
    """Per mark (grouped by ``group``, in time order within it): no later mark of its group
    resumes, after a step number that went back, at a step at most its own. Worked out as a
    suffix minimum over each group (groups kept apart by an offset larger than any rank of a
    step among the marks)."""
    n = step.shape[0]
    if n < 2:
        return np.ones(n, bool)
    _, ranked = np.unique(step, return_inverse=True)  # order-preserving small integers
    ranked = ranked.astype(np.int64)
    none = ranked.max() + 1  # "no rewind after it"
    resumed = np.full(n, none, np.int64)
    rewind = (group[:-1] == group[1:]) & (step[:-1] > step[1:])
    resumed[:-1][rewind] = ranked[1:][rewind]  # the step resumed from, after a rewind
    big = none + 1
    offset = group * big  # a later group's values never reach an earlier group's
    limit: I64 = np.minimum.accumulate((resumed + offset)[::-1])[::-1] - offset
    kept: BoolArray = ranked < limit
    return kept


def _attempt_work(
    tracker: ProgramTracker, report: Report
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Per attempt ``(tokens, samples)`` of every mark, and of the kept steps' marks."""
    marks = kept_work(tracker, report)
    n = len(report.attempts)
    every = list(zip(_sums(marks.attempt, marks.tokens, n), _sums(marks.attempt, marks.samples, n),
                     strict=True))  # fmt: skip
    k = marks.kept
    kept = list(zip(_sums(marks.attempt[k], marks.tokens[k], n),
                    _sums(marks.attempt[k], marks.samples[k], n), strict=True))  # fmt: skip
    return every, kept


def _sums(group: I64, values: I64, n: int) -> list[int]:
    """Exact integer sums of ``values`` per group ``0..n-1`` (Python integers past what
    int64 holds: each count is at most 2**53, a sum of many may not be)."""
    if values.shape[0] and int(values.max()) * values.shape[0] >= 2**63:
        out = [0] * n
        for g, v in zip(group.tolist(), values.tolist(), strict=True):
            out[g] += v
        return out
    totals = np.zeros(n, np.int64)
    np.add.at(totals, group, values)
    return [int(v) for v in totals.tolist()]


def kept_marks(tracker: ProgramTracker, report: Report) -> WorkMarks:
    """The kept steps' marks with tokens (what MFU over time spreads over the steps)."""
    marks = kept_work(tracker, report)
    take = marks.kept & (marks.tokens != 0)
    return WorkMarks(*(c[take] for c in marks))


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
