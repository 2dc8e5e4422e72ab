"""Prometheus exporter: a scrape endpoint and/or Pushgateway pushes (``[prometheus]``).

``pip install 'badput[prometheus]'`` brings prometheus-client, which is imported only
when a :class:`PrometheusExporter` is created.

Gauges and two counters (``_total``: monotone for the life of the exporter, what it
has seen; all labelled ``job``, the training job's name; seconds unless a ratio)::

    badput_goodput_ratio                      Report.goodput
    badput_observed_goodput_ratio             Report.observed_goodput
    badput_up                                 1 once a snapshot was exported, 0 before (no job)
    badput_seconds{bucket}                    every bucket, productive included
    badput_grouped_buckets                    named buckets counted in custom:(other)...
    badput_elapsed_seconds                    total time of the job so far
    badput_disruptions_total                  restarts seen (attempts after the first)
    badput_last_step                          last step reached
    badput_ideal_step_seconds                 ideal step time
    badput_step_time_deviation_seconds        the GCM step-time deviation statistic
    badput_slowdown_alarm                     1 when the recent median step time is slow
    badput_at_risk_seconds                    time whose progress is not yet checkpointed
    badput_snapshot_timestamp_seconds         the time the snapshot describes (unix)
    badput_tokens_per_second                  program goodput (docs/program-goodput.md),
    badput_productive_tokens_per_second         each only when computed: tokens/s of the
    badput_mfu_ratio                            job and of its kept steps, MFU of the kept
    badput_scheduling_goodput_ratio             steps, SG, RG, PG and MPG = SG x RG x PG
    badput_runtime_goodput_ratio
    badput_program_goodput_ratio
    badput_mpg_ratio
    badput_last_event_timestamp_seconds       the newest event read (unix; a stall shows)
    badput_window_goodput_ratio{window}       rolling windows, ``window="3600s"``
    badput_window_observed_goodput_ratio{window}
    badput_window_elapsed_seconds{window}
    badput_window_seconds{window,bucket}
    badput_stalled                            1 while no rank makes progress (docs/ranks.md)
    badput_stall_seconds                      how long, 0 when not stalled
    badput_stalls_total                       stalls seen so far (never decreases)
    badput_stall_first_stopped{rank}          1 for each rank that stopped first
    badput_stragglers                         ranks below the score threshold
    badput_straggler{rank,host,section}       1 for each straggler (rank, section)
    badput_rank_score{rank,section,score}     every rank's relative / individual score

A custom collector renders the latest snapshot of each job at scrape time, so no stale
label set survives. The endpoint answers from the start: before the first snapshot a
scrape gets ``badput_up 0`` (and nothing else). Bucket series form a stable set: once a
bucket has appeared for a job (or one of its windows), it is exported at 0 while empty
rather than vanishing. It is bounded too: at most ``MAX_NAMED_BUCKETS`` (20) named
buckets (``custom:<name>``, ``elastic_wait:<kind>``) get a series of their own, the first
snapshots' largest, for good; every other name's time is in ``custom:(other)`` or
``elastic_wait:(other)`` (:class:`~badput.monitor._base.BucketSeries`), so the series still
sum to the job's time. Unknown statistics (no step yet, no ideal step time yet...) are
left out.

The ``job`` label collides with the ``job`` target label Prometheus adds itself:
scrape with ``honor_labels: true`` to keep the training job's name.

**Pushgateway.** With ``pushgateway=URL`` every export PUTs the snapshot's job to
``URL/metrics/job/<push_job>``. By default (``push_job=None``) the group is the training
job's name, so each job has its own group and the Pushgateway (which overwrites a
pushed ``job`` label with the grouping key's) keeps the same ``job`` label a scrape
shows. A fixed ``push_job`` makes that the ``job`` label of every pushed series, and
jobs pushing under the same ``push_job`` replace each other's group.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from badput.engine import JOB_STATES
from badput.monitor._base import BucketSeries, Snapshot, Tally
from badput.monitor._rankmetrics import stall_state
from badput.monitor._vocab import METRICS, PROGRAM_METRICS, program_values, window_label
from badput.runtime.optional import import_optional

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

__all__ = ["PrometheusExporter"]


@dataclass
class _JobState:
    """The latest snapshot of one job and its bucket series (bounded, stable)."""

    snapshot: Snapshot
    series: BucketSeries = field(default_factory=BucketSeries)
    tally: Tally = field(default_factory=Tally)

    def update(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.series.update(snapshot)
        self.tally.update(snapshot)

    def rows(self) -> _Rows:
        """What a scrape shows of this job (taken under the collector's lock)."""
        s, t = self.series, self.tally
        windows = {w: s.window(w) for w in self.snapshot.windows}
        return _Rows(self.snapshot, s.cumulative(), windows, s.grouped, t.disruptions, t.stalls)


@dataclass(frozen=True)
class _Rows:
    snapshot: Snapshot
    buckets: list[tuple[str, float]]
    windows: dict[float, list[tuple[str, float]]]
    grouped: int
    disruptions: int  # the counters: what this process has seen (Tally), never less
    stalls: int


class _SnapshotCollector:
    """A prometheus-client collector (duck-typed: ``collect``/``describe``)."""

    def __init__(
        self, core: Any, states: Iterable[_JobState] | None = None, *, up: bool = True
    ) -> None:
        self._core = core  # prometheus_client.metrics_core, imported lazily
        self._up = up  # serve badput_up (a push is a snapshot: it has none)
        self._lock = threading.Lock()
        self._states: dict[str, _JobState] = {}
        for s in states or ():
            self._states[s.snapshot.job] = s

    def update(self, snapshot: Snapshot) -> _JobState:
        with self._lock:
            state = self._states.get(snapshot.job)
            if state is None:
                state = self._states[snapshot.job] = _JobState(snapshot)
            state.update(snapshot)
            return state

    def describe(self) -> list[Metric]:
        # No names to reserve (and no collect() at registration time).
        return []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            states = [s.rows() for _, s in sorted(self._states.items())]
        if self._up:
            yield _up(self._core, bool(states))
        yield from _families(self._core, states)


def _up(core: Any, up: bool) -> Metric:
    """``badput_up``: served from the start, before the monitor's first snapshot (0), so
    that a scrape tells a monitor still starting from a dead target (no answer)."""
    m = METRICS["up"]
    family = core.GaugeMetricFamily(m.prometheus, f"{m.description}.")
    family.add_metric([], 1.0 if up else 0.0)
    metric: Metric = family
    return metric


def _gauge(core: Any, name: str, doc: str, *labels: str) -> Any:
    return core.GaugeMetricFamily(name, doc, labels=["job", *labels])


def _shared(core: Any, key: str, *labels: str) -> Any:
    """A gauge of the one vocabulary (:data:`~badput.monitor._vocab.METRICS`)."""
    m = METRICS[key]
    return _gauge(core, m.prometheus, f"{m.description}.", *labels)


def _counter(core: Any, name: str, doc: str) -> Any:
    """A counter (a figure that only adds up: rate() and increase() apply;
    ``badput_disruptions_total`` and ``badput_stalls_total`` were gauges before issue 39).
    Its value is what this exporter has seen of the job (:class:`Tally`), which never goes
    down, not a figure of the latest report (which can: a window, a stall that turns out
    to be a recorded interval)."""
    return core.CounterMetricFamily(name, doc, labels=["job"])


def _families(core: Any, states: list[_Rows]) -> list[Metric]:
    goodput = _shared(core, "goodput")
    observed = _shared(core, "observed_goodput")
    seconds = _shared(core, "seconds", "bucket")
    elapsed = _shared(core, "elapsed")
    m = METRICS["disruptions"]
    disruptions = _counter(core, m.prometheus, f"{m.description}.")  # restarts only add up
    last_step = _shared(core, "last_step")
    ideal = _shared(core, "ideal_step_time")
    deviation = _shared(core, "step_time_deviation")
    alarm = _gauge(
        core, "badput_slowdown_alarm", "1 when recent steps are slower than ideal x factor."
    )
    at_risk = _shared(core, "at_risk")
    stamp = _gauge(core, "badput_snapshot_timestamp_seconds", "Unix time the snapshot describes.")
    last_event = _gauge(
        core, "badput_last_event_timestamp_seconds", "Unix time of the newest event."
    )
    grouped = _shared(core, "grouped_buckets")
    for state in states:
        snap = state.snapshot
        r = snap.report
        job = snap.job
        goodput.add_metric([job], r.goodput)
        observed.add_metric([job], r.observed_goodput)
        for b, value in state.buckets:
            seconds.add_metric([job, b], value)
        grouped.add_metric([job], float(state.grouped))
        elapsed.add_metric([job], r.total_seconds)
        disruptions.add_metric([job], float(state.disruptions))
        if snap.last_step is not None:
            last_step.add_metric([job], float(snap.last_step))
        st = snap.step_time
        ideal_s = r.ideal_step_time
        if ideal_s is None and st is not None:
            ideal_s = st.ideal_step_time
        if ideal_s is not None:
            ideal.add_metric([job], ideal_s)
        if st is not None:
            if st.gcm_deviation is not None:
                deviation.add_metric([job], st.gcm_deviation)
            alarm.add_metric([job], 1.0 if st.slowdown_alarm else 0.0)
        at_risk.add_metric([job], r.at_risk_seconds)
        stamp.add_metric([job], snap.time)
        if snap.last_event_time is not None:
            last_event.add_metric([job], snap.last_event_time)
    families = [
        goodput,
        observed,
        seconds,
        elapsed,
        disruptions,
        last_step,
        ideal,
        deviation,
        alarm,
        at_risk,
        stamp,
        last_event,
        *_window_families(core, states),
        grouped,
    ]
    families += _program_families(core, states)
    families += _rank_families(core, states)
    families += _cost_families(core, states)
    return [f for f in families if f.samples]


def _window_families(core: Any, states: list[_Rows]) -> list[Metric]:
    """The rolling windows' goodput, observed goodput, elapsed time and buckets."""
    w_goodput = _shared(core, "window.goodput", "window")
    w_observed = _shared(core, "window.observed_goodput", "window")
    w_elapsed = _shared(core, "window.elapsed", "window")
    w_seconds = _shared(core, "window.seconds", "window", "bucket")
    for state in states:
        snap, job = state.snapshot, state.snapshot.job
        for w in sorted(snap.windows):
            wr = snap.windows[w]
            label = window_label(w)
            w_goodput.add_metric([job, label], wr.goodput)
            w_observed.add_metric([job, label], wr.observed_goodput)
            w_elapsed.add_metric([job, label], wr.total_seconds)
            for b, value in state.windows.get(w, ()):
                w_seconds.add_metric([job, label, b], value)
    return [w_goodput, w_observed, w_elapsed, w_seconds]


def _program_families(core: Any, states: list[_Rows]) -> list[Metric]:
    """Program goodput's gauges (docs/program-goodput.md): a sample per job whose figure
    is computed."""
    program = {key: _shared(core, key) for key in PROGRAM_METRICS.values()}
    for state in states:
        for key, value in program_values(state.snapshot):
            program[key].add_metric([state.snapshot.job], value)
    return list(program.values())


def _cost_families(core: Any, states: list[_Rows]) -> list[Metric]:
    """The buckets in money and badput per day, for jobs with a price (``report.cost``)."""
    cost = _shared(core, "cost", "bucket")
    per_day = _shared(core, "badput_cost_per_day")
    w_per_day = _shared(core, "window.badput_cost_per_day", "window")
    for state in states:
        snap, job = state.snapshot, state.snapshot.job
        c = snap.report.cost
        if c is not None:
            for b, value in state.buckets:
                cost.add_metric([job, b], c.money(value))
            per_day.add_metric([job], c.badput_per_day)
        for w in sorted(snap.windows):
            wc = snap.windows[w].cost
            if wc is not None:
                w_per_day.add_metric([job, window_label(w)], wc.badput_per_day)
    return [cost, per_day, w_per_day]


def _rank_families(core: Any, states: list[_Rows]) -> list[Metric]:
    """Stall and straggler gauges; per rank, since Prometheus copes with that many series."""
    stalled = _gauge(core, "badput_stalled", "1 while no rank makes progress beyond the threshold.")
    stall_s = _gauge(core, "badput_stall_seconds", "Seconds without progress (0 when not stalled).")
    stalls = _counter(core, "badput_stalls_total", "Stalls found so far.")
    first = _gauge(
        core, "badput_stall_first_stopped", "1 for each rank that stopped first.", "rank"
    )
    count = _gauge(core, "badput_stragglers", "Ranks below the straggler score threshold.")
    flag = _gauge(core, "badput_straggler", "1 for each straggler.", "rank", "host", "section")
    score = _gauge(
        core,
        "badput_rank_score",
        "A rank's section score (1 = reference).",
        "rank",
        "section",
        "score",
    )
    for state in states:
        snap = state.snapshot
        job = snap.job
        rep = snap.report
        is_stalled, seconds, ranks = stall_state(snap)
        stalled.add_metric([job], 1.0 if is_stalled else 0.0)
        stall_s.add_metric([job], seconds)
        stalls.add_metric([job], float(state.stalls))
        for r in ranks:
            first.add_metric([job, str(r)], 1.0)
        count.add_metric([job], float(len(rep.stragglers)))
        for s in rep.stragglers:
            flag.add_metric([job, str(s.rank), s.host or "", s.section], 1.0)
        for view in rep.ranks:
            for name, sec in view.sections.items():
                for kind, value in (
                    ("relative", sec.relative_score),
                    ("individual", sec.individual_score),
                ):
                    if value is not None:
                        score.add_metric([job, str(view.rank), name, kind], value)
    return [stalled, stall_s, stalls, first, count, flag, score, _state_family(core, states)]


def _state_family(core: Any, states: list[_Rows]) -> Any:
    """``badput_job_state{state=...}``: 1 for the job's state (``Snapshot.state``, the one
    ``badput watch`` and ``badput jobs`` show), 0 for each other state."""
    family = core.GaugeMetricFamily(
        "badput_job_state", "1 for the job's state, 0 for the others.", labels=["job", "state"]
    )
    for rows in states:
        now = rows.snapshot.state().state
        for name in JOB_STATES:
            family.add_metric([rows.snapshot.job, name], 1.0 if name == now else 0.0)
    return family


class PrometheusExporter:
    """Serves (and optionally pushes) the latest snapshot as Prometheus gauges.

    - ``port``: serve ``http://host:port/metrics`` (``0`` picks a free port, see
      :attr:`port`; ``None`` serves nothing). ``host`` defaults to loopback.
    - ``registry``: register into this ``CollectorRegistry`` instead of a private one
      (the collector is unregistered again by :meth:`close`).
    - ``pushgateway``: a Pushgateway URL (``http://host:9091``) to PUT every snapshot
      to, with ``push_timeout`` seconds per push; a failed push raises from
      :meth:`export` (the monitor logs it and backs off).
    - ``push_job``: the Pushgateway group; ``None`` → the training job's name (see the
      module doc for why that is the default).
    """

    name = "prometheus"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = 9464,
        registry: CollectorRegistry | None = None,
        pushgateway: str | None = None,
        push_job: str | None = None,
        push_timeout: float = 5.0,
    ) -> None:
        prom = import_optional("prometheus_client", "prometheus")
        core = import_optional("prometheus_client.metrics_core", "prometheus")
        self._prom = prom
        self._core = core
        self.registry: CollectorRegistry = (
            registry if registry is not None else prom.CollectorRegistry(auto_describe=False)
        )
        self._collector = _SnapshotCollector(core)
        self.registry.register(self._collector)
        self.host = host
        self.pushgateway = pushgateway
        self.push_job = push_job
        self.push_timeout = push_timeout
        self.port: int | None = None
        self._server: Any = None  # wsgiref WSGIServer
        self._thread: threading.Thread | None = None
        self._closed = False
        if port is not None:
            try:
                server, thread = prom.start_http_server(port, addr=host, registry=self.registry)
            except BaseException:
                self.registry.unregister(self._collector)
                raise
            self._server, self._thread = server, thread
            self.port = int(server.server_port)

    @property
    def url(self) -> str | None:
        """The scrape URL, or ``None`` when no endpoint is served."""
        if self.port is None:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def export(self, snapshot: Snapshot) -> None:
        """Make ``snapshot`` what the next scrape sees; push it when a Pushgateway is set."""
        if self._closed:
            raise RuntimeError("PrometheusExporter is closed")
        state = self._collector.update(snapshot)
        if self.pushgateway:
            self._push(state)

    def _push(self, state: _JobState) -> None:
        registry = self._prom.CollectorRegistry(auto_describe=False)
        registry.register(_SnapshotCollector(self._core, [state], up=False))
        self._prom.push_to_gateway(
            self.pushgateway,
            job=self.push_job or state.snapshot.job,
            registry=registry,
            timeout=self.push_timeout,
        )

    def close(self) -> None:
        """Stop serving and unregister the collector (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        self.registry.unregister(self._collector)
