"""The accounting engine: events in, a partition of the job's time out. No I/O."""

from __future__ import annotations

from badput.engine._model import AttemptSummary, Diagnostic, Report, StepCounts

__all__ = ["AttemptSummary", "Diagnostic", "Report", "StepCounts"]
