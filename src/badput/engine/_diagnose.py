"""The diagnostics of one report: what ingest found, by place in the job (each code's
first by file and line, the codes in the order of their first), then what the accounting
found, in the order it found them.

At most :data:`~badput.engine._ingest_state.MAX_DIAGNOSTICS_PER_CODE` of one code are shown; the
rest are counted and reported as one "... and N more" line. A report of a state already
reported on, for another window, starts from what the first one found before its window's
own part (:meth:`ReportDiagnostics.snapshot`) and replays what it found after
(:meth:`ReportDiagnostics.recording`), so both say the same things in the same order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from badput.engine._ingest_state import MAX_DIAGNOSTICS_PER_CODE, DiagnosticLog
from badput.engine._model import Diagnostic
from badput.engine._rows import AttemptDiagnostics

__all__ = ["Recorded", "ReportDiagnostics", "Snapshot"]

#: ``(code, message, file, line)`` as added; a message of None is a count (in ``line``).
Recorded = list[tuple[str, str | None, str | None, int | None]]
#: What was shown and counted per code so far.
Snapshot = tuple[list[Diagnostic], dict[str, int]]


class ReportDiagnostics:
    """Diagnostics of one report: shown up to the cap per code, counted past it."""

    def __init__(self, start: Snapshot | None = None) -> None:
        self.shown: list[Diagnostic] = list(start[0]) if start else []
        self.counts: dict[str, int] = dict(start[1]) if start else {}
        self._recording: Recorded | None = None

    def add(
        self, code: str, message: str, file: str | None = None, line: int | None = None
    ) -> None:
        """Keep a diagnostic; past the cap of its code, only count it."""
        if self._recording is not None:
            self._recording.append((code, message, file, line))
        n = self.counts.get(code, 0)
        self.counts[code] = n + 1
        if n < MAX_DIAGNOSTICS_PER_CODE:
            self.shown.append(Diagnostic(code, message, file, line))

    def count_more(self, code: str, n: int) -> None:
        """Count ``n`` more diagnostics of ``code`` that are not shown."""
        if self._recording is not None:
            self._recording.append((code, None, None, n))
        self.counts[code] = self.counts.get(code, 0) + n

    def replay(self, found: AttemptDiagnostics) -> None:
        """Add what one attempt's rows were found to hold (kept with its memo)."""
        shown, hidden = found
        for code, message, file, line in shown:
            self.add(code, message, file, line)
        for code, n in hidden.items():
            self.count_more(code, n)

    def replay_recorded(self, recorded: Recorded) -> None:
        """Add again what a :meth:`recording` kept, in order."""
        for code, message, file, line in recorded:
            if message is None:
                self.count_more(code, line or 0)
            else:
                self.add(code, message, file, line)

    def add_ingest(self, log: DiagnosticLog) -> None:
        """Add what ingest found (its entries, and what it only counted), by place in the
        job (:meth:`DiagnosticLog.listed`): not in the order its reads met them."""
        for code, entries, count in log.listed():
            for message, source, line in entries:
                self.add(code, message, source, line)
            extra = count - len(entries)
            if extra > 0:  # counted at ingest, not kept: reported as "... and N more"
                self.count_more(code, extra)

    def snapshot(self) -> Snapshot:
        """What was shown and counted so far (a windowed report of the state starts there)."""
        return list(self.shown), dict(self.counts)

    @contextmanager
    def recording(self) -> Iterator[Recorded]:
        """Keep what is added inside the block, in order, in the list it yields."""
        kept: Recorded = []
        self._recording = kept
        try:
            yield kept
        finally:
            self._recording = None

    def finish(self) -> list[Diagnostic]:
        """The diagnostics shown, then one line per code with more than were shown (fewer
        than the cap may be: one ``foreign_job`` a file)."""
        out = list(self.shown)
        shown = Counter(d.code for d in self.shown)
        for code, n in self.counts.items():
            if n > shown[code]:
                out.append(Diagnostic(code, f"... and {n - shown[code]} more {code}"))
        return out
