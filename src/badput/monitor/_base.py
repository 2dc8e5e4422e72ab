"""What an exporter is, and the bucket series exporters share.

A :class:`~badput.engine.Snapshot` (the one report object every view renders) is
computed once per monitor cycle from the incremental engine; exporters turn it into
their system's metrics. Exporters compute no
accounting of their own (DESIGN.md): every number comes from the snapshot.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from badput.engine import MAX_NAMED_BUCKETS, Snapshot, Stall, group_buckets

__all__ = ["BucketSeries", "Exporter", "Snapshot", "Tally"]


@runtime_checkable
class Exporter(Protocol):
    """Sends snapshots somewhere. Called from the monitor's thread, one call at a time.

    ``export`` may raise: the monitor catches it, logs one warning per exporter and
    backs off; it must not block for long (use timeouts on network calls).
    """

    name: str

    def export(self, snapshot: Snapshot) -> None: ...

    def close(self) -> None:
        """Flush and release resources (called once, by ``Monitor.stop``)."""


class BucketSeries:
    """The bucket series that one exporter publishes for one job, cumulative and per rolling
    window: how many there are is bounded, and none comes and goes.

    - **Named buckets** (``custom:<name>``, ``elastic_wait:<kind>``) get series of their
      own up to :data:`~badput.engine.MAX_NAMED_BUCKETS`: the first snapshots' largest
      names take the places, and a name keeps its place for good (no series churn). Every
      other name's time is in its family's ``custom:(other)`` / ``elastic_wait:(other)``
      series (:func:`~badput.engine.group_buckets`), so the series still sum to the job's
      time. A window shows the names the job's series show; its others are in its groups.
    - **Stable**: a bucket, once shown, is shown at 0 while empty rather than vanishing.

    :meth:`update` takes each snapshot; :meth:`cumulative` and :meth:`window` are what to
    publish (sorted by bucket). Not thread-safe: the exporter locks around it.
    """

    __slots__ = ("_named", "_seen", "_values", "_window_seen", "_window_values", "grouped", "limit")

    def __init__(self, limit: int = MAX_NAMED_BUCKETS) -> None:
        self.limit = limit
        self._named: dict[str, None] = {}  # named buckets with a series, in order given
        self._seen: set[str] = set()
        self._values: dict[str, float] = {}
        self._window_seen: dict[float, set[str]] = {}
        self._window_values: dict[float, dict[str, float]] = {}
        #: Named buckets of the cumulative report in the groups (0: each has its series).
        self.grouped = 0

    def update(self, snapshot: Snapshot) -> None:
        """Take ``snapshot``'s cumulative and window buckets."""
        g = group_buckets(snapshot.report.buckets, self.limit, keep=self._named)
        self._named.update(dict.fromkeys(g.named))
        self._values = dict(g.buckets)
        self._seen.update(g.buckets)
        self.grouped = g.grouped
        for w, rep in snapshot.windows.items():
            gw = group_buckets(rep.buckets, len(self._named), keep=self._named)
            self._window_values[w] = dict(gw.buckets)
            self._window_seen.setdefault(w, set()).update(gw.buckets)

    def cumulative(self) -> list[tuple[str, float]]:
        """Every bucket shown so far and its seconds now (0.0 when empty), by name."""
        return [(b, self._values.get(b, 0.0)) for b in sorted(self._seen)]

    def window(self, seconds: float) -> list[tuple[str, float]]:
        """The same for the rolling window of ``seconds``."""
        values = self._window_values.get(seconds, {})
        return [(b, values.get(b, 0.0)) for b in sorted(self._window_seen.get(seconds, ()))]

    def current(self) -> dict[str, float]:
        """The latest snapshot's grouped buckets (only those it holds, as ``Report.buckets``)."""
        return dict(self._values)

    def current_window(self, seconds: float) -> dict[str, float]:
        """The same for the rolling window of ``seconds``."""
        return dict(self._window_values.get(seconds, {}))


class Tally:
    """The counters one exporter publishes for one job, monotone for the life of the
    process (Prometheus counter semantics: ``rate()`` and ``increase()`` read a decrease as
    a reset): each counts what it has **seen**, never what the latest report holds.

    - :attr:`disruptions`: restarts seen: the distinct attempts of every snapshot taken,
      less the first (a windowed report, holding fewer attempts, takes none back);
    - :attr:`stalls`: stalls seen. A stall is the same one while its span overlaps one
      seen before of its attempt (an ongoing stall grows; late progress moves its
      start); a stall that the report no longer lists (its time turned out to be inside a
      recorded interval, a window without the per-rank view) stays counted.

    :meth:`update` takes each snapshot. Not thread-safe: the exporter locks around it.
    """

    __slots__ = ("_attempts", "_spans", "stalls")

    def __init__(self) -> None:
        self._attempts: set[str] = set()
        # Per attempt: the spans of the stalls seen, disjoint, sorted by start.
        self._spans: dict[str | None, tuple[list[float], list[float]]] = {}
        self.stalls = 0

    @property
    def disruptions(self) -> int:
        """Restarts seen: attempts after the first."""
        return max(0, len(self._attempts) - 1)

    def update(self, snapshot: Snapshot) -> None:
        """Take ``snapshot``'s attempts and stalls."""
        self._attempts.update(str(a.id) for a in snapshot.report.attempts)
        self._see(snapshot.report.stalls)

    def _see(self, stalls: Iterable[Stall]) -> None:
        for st in stalls:
            starts, ends = self._spans.setdefault(st.attempt, ([], []))
            lo, hi = st.start, st.end
            k = bisect.bisect_left(starts, hi)  # the spans that start before this one ends
            first = k
            while first > 0 and ends[first - 1] > lo:  # ... and end after it starts
                first -= 1
            if first == k:
                self.stalls += 1  # overlaps none seen: a new stall
            else:  # the same stall (or several seen, now one): one span
                lo, hi = min(lo, starts[first]), max(hi, ends[k - 1])
            starts[first:k], ends[first:k] = [lo], [hi]
