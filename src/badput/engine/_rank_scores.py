"""The per-rank view's scores: each rank's sections and view, straggler scores (NVIDIA's
straggler detection, nvidia-resiliency-ext ``straggler/reporting.py``: per section, a
*reference* median time divided by this rank's, see :mod:`~badput.engine._ranks`), and the
ranks that stand out."""

from __future__ import annotations

import math

import numpy as np

from badput.engine._rank_columns import Joined
from badput.engine._rank_derive import derived_of
from badput.engine._rank_model import RankOptions, RankView, SectionView, Stall, Straggler
from badput.engine._rank_stream import DATA_LOADING, RankStream, SectionLog

#: Blocking data loads per block when scoring the ``data_loading`` section.
LOAD_BLOCK = 50


def in_time_order(streams: list[RankStream]) -> list[RankStream]:
    """One rank's streams (its attempts) by their first event: the newest data loads last
    (the recent ones), and the running attempt's stream last, whose values are the only
    ones to grow (the store lists attempt 10 before attempt 2)."""
    if len(streams) < 2:
        return streams
    return sorted(streams, key=lambda s: derived_of(s).first_event)


def sections_of(
    streams: list[RankStream],
    options: RankOptions,
    joined: Joined,
    ordered: list[RankStream],
) -> dict[str, SectionView]:
    """Section logs of one rank, merged over its attempts (recent = the newest);
    ``joined``: its data loads so far, of its streams ``ordered`` in time."""
    merged: dict[str, SectionLog] = {}
    for s in streams:
        for name, log in s.sections.items():
            m = merged.setdefault(name, SectionLog())
            m.count += log.count
            m.parts.extend(log.parts)
            m.periods.extend(log.periods)
            m.see_open(log.open_ts, log.open_since)
    out: dict[str, SectionView] = {}
    for name, log in merged.items():
        good = sorted(
            p for p in log.periods if p[1] >= options.min_samples and not math.isnan(p[2])
        )
        recent = good[-1][2] if good else None
        best = min(p[2] for p in good) if good else None
        out[name] = SectionView(
            log.count,
            log.seconds,
            recent,
            best,
            None,
            best / recent if best is not None and recent else None,
            log.open_since,
        )
    loads, grew = joined.join([s.loads for s in ordered])
    if len(loads) >= options.min_samples and DATA_LOADING not in out:
        block = min(LOAD_BLOCK, max(options.min_samples, len(loads) // 4))
        n_full = len(loads) // block
        medians = joined.medians
        if not (grew and joined.block == block):
            medians.cut(0)  # the blocks are not those taken
        # the blocks taken that are as they were (a cut back loses those after it)
        medians.cut(min(len(medians), joined.kept // block))
        new = loads[len(medians) * block : n_full * block].reshape(-1, block)
        if len(new):
            medians.extend(np.median(new, axis=1))
        joined.block = block
        # (min: a NaN median is the least, as in np.minimum over the blocks taken in turn)
        best = float(medians.view().min()) if len(medians) else math.inf
        recent_l = float(np.median(loads[-block:]))
        best_l = float(min(best, recent_l)) if n_full else recent_l
        out[DATA_LOADING] = SectionView(
            len(loads),
            float(loads.sum()),
            recent_l,
            best_l,
            None,
            best_l / recent_l if recent_l > 0 else None,
        )
    return out


def score_relative(sections: dict[int, dict[str, SectionView]]) -> None:
    """Fill each section's relative score: best recent median over ranks / this rank's."""
    names = {name for per in sections.values() for name in per}
    for name in names:
        recents = [
            per[name].recent_p50
            for per in sections.values()
            if name in per and per[name].recent_p50 is not None
        ]
        if len(recents) < 2:
            continue  # one rank has no one to compare with
        ref = min(r for r in recents if r is not None)
        for per in sections.values():
            view = per.get(name)
            if view is None or view.recent_p50 is None:
                continue
            rel = ref / view.recent_p50 if view.recent_p50 > 0 else 1.0
            per[name] = SectionView(**{**view.__dict__, "relative_score": rel})


def find_stragglers(
    sections: dict[int, dict[str, SectionView]],
    workers: dict[int, list[RankStream]],
    options: RankOptions,
) -> list[Straggler]:
    out: list[Straggler] = []
    refs: dict[str, float] = {}
    for per in sections.values():
        for name, v in per.items():
            if v.recent_p50 is not None and v.relative_score is not None:
                refs[name] = min(refs.get(name, math.inf), v.recent_p50)
    for r, per in sections.items():
        host = next((s.host for s in workers[r] if s.host), None)
        for name, v in sorted(per.items()):
            if v.recent_p50 is None:
                continue
            limit = options.straggler_threshold
            low_rel = v.relative_score is not None and v.relative_score < limit
            low_ind = v.individual_score is not None and v.individual_score < limit
            if not (low_rel or low_ind):
                continue
            ref = refs.get(name, v.best_p50 or v.recent_p50) if low_rel else v.best_p50
            ref = v.recent_p50 if ref is None else ref
            if v.recent_p50 - ref < options.min_excess:
                continue
            out.append(
                Straggler(r, host, name, v.relative_score, v.individual_score, v.recent_p50, ref)
            )
    out.sort(key=lambda x: (min(x.relative_score or 1.0, x.individual_score or 1.0), x.rank))
    return out


def rank_view(
    r: int,
    streams: list[RankStream],
    sections: dict[str, SectionView],
    joined: Joined,
    ordered: list[RankStream],
) -> RankView:
    """``joined``: the rank's step times so far, of its streams ``ordered`` in time."""
    derived = [derived_of(s) for s in streams]
    times, _ = joined.join([s.covered.times for s in ordered])
    lows = [d.step_lo for d in derived if d.step_lo is not None]
    highs = [d.step_hi for d in derived if d.step_hi is not None]
    buckets: dict[str, float] = {}
    for s in streams:
        for b, v in s.buckets.items():
            buckets[b] = buckets.get(b, 0.0) + v
    progress = [d.progress_last for d in derived if d.n_progress]
    return RankView(
        rank=r,
        host=next((s.host for s in streams if s.host), None),
        attempts=len({s.attempt for s in streams}),
        steps=sum(len(s.step_ts) for s in streams),
        typical_step_time=joined.median(times),
        data_loading_seconds=buckets.get(DATA_LOADING, 0.0),
        buckets=dict(sorted(buckets.items())),
        first_step=min(lows) if lows else None,
        last_step=max(highs) if highs else None,
        first_event=min(d.first_event for d in derived),
        last_event=max(d.last_event for d in derived),
        last_progress=max(progress) if progress else None,
        sections=dict(sorted(sections.items())),
    )


def _robust_high(values: dict[int, float], min_excess: float) -> set[int]:
    """Ranks whose value is far above the others': above median + 5 MAD, 10 % above the
    median, and by at least ``min_excess`` (noise on tiny values is not an outlier)."""
    if len(values) < 3:
        return set()
    arr = np.array(list(values.values()))
    med = float(np.median(arr))
    mad = float(np.median(np.abs(arr - med)))
    return {
        r
        for r, v in values.items()
        if v > med + 5 * mad and v > med * 1.1 and v - med >= min_excess
    }


def find_outliers(
    views: dict[int, RankView],
    stragglers: list[Straggler],
    stalls: list[Stall],
    min_excess: float,
) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for st in stragglers:
        out.setdefault(st.rank, []).append(f"straggler in {st.section}")
    for stall in stalls:
        for r in stall.first_stopped:
            reason = "stopped first in a stall"
            if reason not in out.get(r, []):
                out.setdefault(r, []).append(reason)
    typical = {r: v.typical_step_time for r, v in views.items() if v.typical_step_time}
    for r in _robust_high({r: t for r, t in typical.items() if t is not None}, min_excess):
        out.setdefault(r, []).append("slow steps")
    # Data loading (a total): an outlier when it costs over 1 % of the rank's step time more
    # than the others' does.
    busy = [(v.typical_step_time or 0.0) * v.steps for v in views.values()]
    floor = 0.01 * float(np.median(busy)) if busy else 0.0
    loads = {r: v.data_loading_seconds for r, v in views.items()}
    for r in _robust_high(loads, max(floor, min_excess)):
        out.setdefault(r, []).append("slow data loading")
    steps = {r: float(v.last_step) for r, v in views.items() if v.last_step is not None}
    if steps:
        top = max(steps.values())
        for r, s in steps.items():
            if s < top - 1 and len(steps) > 1:  # one step apart: flushed at different times
                out.setdefault(r, []).append(f"behind: last step {int(s)} of {int(top)}")
    return out
