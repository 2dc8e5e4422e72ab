"""Per-rank metrics of a snapshot: the stall (by progress) and the stragglers.

Exporters map these; they compute nothing (the numbers are the report's
``stalls`` and ``stragglers``, docs/ranks.md). Backends that cope with one series
per rank (Prometheus) get per-rank gauges; the others (TensorBoard scalars, one
tag per series) get the job-level figures and the top-k worst ranks only.
"""

from __future__ import annotations

from typing import Final

from badput.monitor._base import Snapshot

__all__ = ["TOP_K", "rank_scalars", "stall_state"]

#: Straggler ranks that backends without per-rank series get, worst first.
TOP_K: Final = 3


def stall_state(snapshot: Snapshot) -> tuple[bool, float, list[int]]:
    """``(stalled now, seconds without progress, ranks that stopped first)``."""
    rep = snapshot.report
    if snapshot.state().state not in ("hung", "down"):  # ended, restarting: no stall now
        return False, 0.0, []
    for stall in reversed(rep.stalls):
        if stall.ongoing:
            return True, max(0.0, snapshot.time - stall.start), list(stall.first_stopped)
    return False, 0.0, []


def rank_scalars(snapshot: Snapshot, top_k: int = TOP_K) -> dict[str, float]:
    """Job-level stall and straggler figures plus the ``top_k`` worst stragglers.

    Tags: ``ranks/stalled`` (0/1), ``ranks/stall_seconds``, ``ranks/stalls``,
    ``ranks/stragglers``, ``ranks/straggler_<i>/rank`` and ``.../score`` (the lower of
    its two scores) for i = 1..top_k, worst first.
    """
    stalled, seconds, _ = stall_state(snapshot)
    rep = snapshot.report
    out = {
        "ranks/stalled": 1.0 if stalled else 0.0,
        "ranks/stall_seconds": seconds,
        "ranks/stalls": float(len(rep.stalls)),
        "ranks/stragglers": float(len(rep.stragglers)),
    }
    for i, s in enumerate(rep.stragglers[:top_k], start=1):
        out[f"ranks/straggler_{i}/rank"] = float(s.rank)
        out[f"ranks/straggler_{i}/score"] = min(s.relative_score or 1.0, s.individual_score or 1.0)
    return out
