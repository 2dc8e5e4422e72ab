"""The work of a step and the job's model (:class:`WorkRecording`, a base of the recorder):
what program goodput is computed from (docs/program-goodput.md)."""

from __future__ import annotations

import time
from typing import Any

from badput.events import MAX_INT
from badput.recorder._fields import as_int
from badput.recorder._lines import LineWriting, _as_step, _ts_text

__all__ = ["WorkRecording"]

_time_ns = time.time_ns


def _as_count(value: Any) -> int:
    """``value`` as a count of work (an integer from 0 to MAX_INT)."""
    count = as_int(value)
    if not 0 <= count <= MAX_INT:
        raise ValueError(f"a count must be from 0 to 2**53 - 1, got {count}")
    return count


class WorkRecording(LineWriting):
    """``record_model`` and the line of a step mark that carries its work.

    ``record_step_start(n, tokens=..., samples=...)`` takes this path only when a count is
    given: the plain call keeps its own (one more test of two ``None`` s); the counts go
    on the step's own mark rather than on an event of their own, which would double the
    lines of a job that records them at every step (docs/events.md)."""

    def _worked(self, kind: str, step: Any, ts: float | None, tokens: Any, samples: Any) -> None:
        """A step mark with the step's work (``tokens``, ``samples``: integers >= 0)."""
        try:
            if type(step) is not int or not -MAX_INT <= step <= MAX_INT:
                step = _as_step(step)
            stamp = f"{_time_ns()}e-9" if ts is None else _ts_text(ts)
            work = "" if tokens is None else f',"tokens":{_as_count(tokens)}'
            work += "" if samples is None else f',"samples":{_as_count(samples)}'
            line = f'{self._pfx}{stamp},"kind":"{kind}","step":{step}{work}}}\n'.encode()
        except Exception as exc:
            self._invalid(kind, exc)
            return
        try:
            self._write(line)
        except Exception:
            self._put_locked(line)

    def record_model(
        self,
        *,
        params: int | None = None,
        layers: int | None = None,
        hidden: int | None = None,
        seq_len: int | None = None,
        flops_per_token: float | None = None,
        devices: int | None = None,
        peak_flops: float | None = None,
        device: str | None = None,
        ts: float | None = None,
    ) -> None:
        """Record the job's model: what a step's FLOPs and the devices' peak are computed
        from (program goodput, docs/program-goodput.md). Give ``params`` (with ``layers``,
        ``hidden`` and ``seq_len`` for the attention term) or ``flops_per_token``; the
        devices (``devices``, their ``device`` name or each one's ``peak_flops``) when the
        report cannot tell them otherwise. An invalid value drops the event (one warning)."""
        fields = {
            "params": params,
            "layers": layers,
            "hidden": hidden,
            "seq_len": seq_len,
            "flops_per_token": flops_per_token,
            "devices": devices,
            "peak_flops": peak_flops,
            "device": device,
        }
        self._fields("model", fields, ts)
