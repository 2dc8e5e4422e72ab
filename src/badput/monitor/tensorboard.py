"""TensorBoard exporter: goodput and badput scalars, appended to event files (``[tensorboard]``).

``pip install 'badput[tensorboard]'`` brings tensorboardX, which is imported only
when a :class:`TensorBoardExporter` is created.

Tags written (fractions are of the job's total time so far)::

    goodput/goodput                       Report.goodput
    goodput/observed                      Report.observed_goodput
    goodput/at_risk                       Report.at_risk_seconds (seconds)
    badput/<bucket>                       every bucket except productive, as a fraction
    step_time/ideal                       ideal step time (seconds)
    step_time/deviation                   the GCM step-time deviation statistic (seconds)
    step_time/deviation_p50, _p90         per-step deviation percentiles (seconds)
    step_time/recent_median               median of the last 100 step times (seconds)
    goodput_window/<w>s/goodput           goodput of the rolling window of w seconds
    goodput_window/<w>s/observed          observed goodput of that window
    goodput_window/<w>s/badput/<bucket>   badput buckets of that window, as fractions
    program/tokens_per_second             program goodput (docs/program-goodput.md), each
    program/productive_tokens_per_second  only when computed: tokens/s of the job and of
    program/mfu                           its kept steps, MFU of the kept steps, SG, RG,
    program/scheduling_goodput            PG and MPG = SG x RG x PG
    program/runtime_goodput
    program/program_goodput
    program/mpg

Bucket tags form a stable set: once a bucket has appeared (cumulative, or in a given
window) it is written at every point after, as 0 while it is empty, so that curves do
not stop. The set is bounded: at most ``MAX_NAMED_BUCKETS`` (20) named buckets
(``custom:<name>``...) have tags of their own, the others are added into
``badput/custom:(other)`` (:class:`~badput.monitor._base.BucketSeries`). Statistics that
are unknown (no ideal step time yet...) are not written.

**Step axis.** The step of every point is the last step reached
(:attr:`Snapshot.last_step`, 0 before the first step), never going back: after a
restore from an older checkpoint the axis holds at the highest step written so far
until training passes it again (TensorBoard would otherwise discard the points "after"
the lower step as orphaned data). The wall time of every point is the snapshot's time.

- When the step advanced since the previous export, every tag is written at the new step.
- When it did not (a checkpoint, a stall, a recovery, a restored job catching up),
  only the tags whose value changed are written, at the held step: no duplicate
  points, yet a stalled job's falling goodput still shows on TensorBoard's wall-time
  axis. A finished job exported again writes nothing.

Events are appended (tensorboardX flushes every ``flush_secs`` and on :meth:`close`);
history already written is never rewritten.
"""

from __future__ import annotations

import os
from typing import Any

from badput.engine import PRODUCTIVE
from badput.monitor._base import BucketSeries, Snapshot
from badput.monitor._rankmetrics import rank_scalars
from badput.monitor._vocab import METRICS, program_values, window_label
from badput.runtime.optional import import_optional

__all__ = ["TensorBoardExporter"]

# The tags of the metrics TensorBoard shares with the other exporters.
_TAG = {key: m.tensorboard for key, m in METRICS.items() if m.tensorboard is not None}


def _fraction(seconds: float, total: float) -> float:
    return seconds / total if total > 0 else 0.0


class TensorBoardExporter:
    """Writes each snapshot as TensorBoard scalars under ``logdir`` (see the module doc).

    >>> exporter = TensorBoardExporter("runs/llama-8b/badput")  # doctest: +SKIP
    """

    name = "tensorboard"

    def __init__(self, logdir: str | os.PathLike[str], *, flush_secs: int = 5) -> None:
        self._tbx = import_optional("tensorboardX", "tensorboard")
        self.logdir = os.fspath(logdir)
        self._flush_secs = flush_secs
        # Opened at the first export, not here: an unwritable directory must fail inside
        # export(), where the Monitor catches it, warns once and retries with back-off,
        # never in the training script that builds the exporter.
        # tensorboardX ships no type information: the writer is Any.
        self._writer: Any = None
        self._step: int | None = None  # the step of the last point written
        self._last: dict[str, float] = {}  # tag -> the value last written
        self._series = BucketSeries()  # the bucket tags: bounded, stable
        self._closed = False

    def export(self, snapshot: Snapshot) -> None:
        """Append the snapshot's scalars (see the module doc for tags and the step rule)."""
        if self._closed:
            raise RuntimeError("TensorBoardExporter is closed")
        values = self._values(snapshot)
        reached = snapshot.last_step if snapshot.last_step is not None else 0
        if self._step is None or reached > self._step:
            step, changed = reached, values
        else:
            step = self._step
            changed = {k: v for k, v in values.items() if self._last.get(k) != v}
        if self._writer is None:
            self._writer = self._tbx.SummaryWriter(logdir=self.logdir, flush_secs=self._flush_secs)
        for tag, value in changed.items():
            self._writer.add_scalar(tag, value, global_step=step, walltime=snapshot.time)
        self._step = step
        self._last.update(changed)

    def flush(self) -> None:
        """Write pending events to disk now."""
        if not self._closed and self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()

    def _values(self, snapshot: Snapshot) -> dict[str, float]:
        r = snapshot.report
        out: dict[str, float] = {
            _TAG["goodput"]: r.goodput,
            _TAG["observed_goodput"]: r.observed_goodput,
            _TAG["at_risk"]: r.at_risk_seconds,
        }
        self._series.update(snapshot)
        out.update(_badput("badput/", self._series.cumulative(), r.total_seconds))
        st = snapshot.step_time
        ideal = r.ideal_step_time
        if ideal is None and st is not None:
            ideal = st.ideal_step_time
        stats: dict[str, float | None] = {"step_time/ideal": ideal}
        if st is not None:
            stats.update(
                {
                    "step_time/deviation": st.gcm_deviation,
                    "step_time/deviation_p50": st.deviation_p50,
                    "step_time/deviation_p90": st.deviation_p90,
                    "step_time/recent_median": st.recent_median,
                }
            )
        out.update({k: v for k, v in stats.items() if v is not None})
        out.update(rank_scalars(snapshot))
        out.update((_TAG[key], value) for key, value in program_values(snapshot))
        if r.cost is not None:  # with a price: badput in money a day, each bucket's money
            out[_TAG["badput_cost_per_day"]] = r.cost.badput_per_day
            out.update({f"cost/{b}": r.cost.money(v) for b, v in self._series.cumulative()})
        for w in sorted(snapshot.windows):
            wr = snapshot.windows[w]
            prefix = f"goodput_window/{window_label(w)}/"
            out[prefix + "goodput"] = wr.goodput
            out[prefix + "observed"] = wr.observed_goodput
            out.update(_badput(prefix + "badput/", self._series.window(w), wr.total_seconds))
        return out


def _badput(prefix: str, buckets: list[tuple[str, float]], total: float) -> dict[str, float]:
    """Each badput bucket's tag and fraction of ``total``."""
    return {prefix + b: _fraction(v, total) for b, v in buckets if b != PRODUCTIVE}
