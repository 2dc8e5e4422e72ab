"""A report with the per-rank view: each rank's sections, stragglers, and stalls with the
partition of their own time (docs/ranks.md)."""

from __future__ import annotations

import dataclasses

from badput.engine._hung import stall_options
from badput.engine._ingest import Ingestor
from badput.engine._model import Report
from badput.engine._partition import compute_report
from badput.engine._rank_model import RankOptions, Stall
from badput.engine._ranks import RankTracker
from badput.engine._segments import Typical

__all__ = ["StallBuckets", "with_ranks"]

#: The stalls of the last report with the partition of their time, and what that report
#: was asked (the state, its size, now, ideal, typical, the stalls found).
StallBuckets = tuple[Ingestor, tuple[object, ...], list[Stall]]


def with_ranks(
    report: Report,
    ing: Ingestor,
    tracker: RankTracker,
    options: RankOptions,
    *,
    kept: StallBuckets | None,
    asked: tuple[float | None, float | None, Typical],
) -> tuple[Report, StallBuckets]:
    """``report`` with the per-rank view, stragglers and stalls, and the stalls' buckets to
    keep for the next report of the same state (``kept``: those of the last one).

    Each stall carries the partition of its own time (a windowed report), so a hang is
    never shown as ordinary slowdown without saying so. ``asked``: the report's ``now``,
    ideal step time and typical rule.
    """
    now, ideal, typical = asked
    attempts = []
    for i, a in enumerate(report.attempts):
        ended = i < len(report.attempts) - 1 or report.end_reason == "job_end"
        completed = a.end_reason == "job_end"  # what follows its last progress is shutdown
        attempts.append((str(a.id), a.start, a.end, ended, completed))
    live_now = now if report.end_reason == "now" else None
    # Cached by the tracker while nothing changes (a report of 10,000 attempts asks the
    # same again at every refresh of a view).
    # the launcher's hang timeout, when it recorded one, is the stall threshold
    found = tracker.analyze(attempts, live_now, stall_options(options, ing))
    key = (ing.n_events, now, ideal, typical, found.stalls)
    if kept is not None and kept[0] is ing and kept[1] == key:
        stalls = list(kept[2])
    else:
        stalls = []
        for stall in found.stalls:
            inner = compute_report(
                ing,  # the state as of `now` the report was computed on
                now=now,
                window=(stall.start, stall.end),
                ideal_step_time=ideal,
                typical=typical,
            )
            buckets = {k: v for k, v in inner.buckets.items() if v > 0}
            stalls.append(dataclasses.replace(stall, buckets=buckets))
        kept = (ing, key, list(stalls))
    report = dataclasses.replace(
        report, ranks=found.ranks, stragglers=found.stragglers, stalls=stalls
    )
    return report, kept
