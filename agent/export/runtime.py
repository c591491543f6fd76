"""The agent's own metrics: one table over the stats snapshot, two exporters.

Names mirror controller-runtime's workqueue set under the agent's namespace.
OTLP gets observable instruments; the OTel API has no asynchronous histogram,
so each histogram is sent as Prometheus-style ``_bucket{le}``, ``_sum`` and
``_count`` counters read from the same snapshot (one source for every number,
and ``histogram_quantile`` works on them unchanged). ``/metrics`` renders the
same table natively. Every attribute is bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from agent.pipeline.state import NodeSnapshot, NodeState
from agent.pipeline.stats import HistogramSnapshot, RuntimeStats, StatsSnapshot

__all__ = ["RuntimeMetric", "RUNTIME_METRICS", "RuntimeMetrics", "Readings", "PREFIX", "le_label"]

PREFIX = "node_requests_agent_"

# A reading: (attributes, value) pairs, or a histogram.
Points = list[tuple[dict[str, str], float]]


class Readings(NamedTuple):
    """The two immutable snapshots every runtime metric is read from."""

    stats: StatsSnapshot
    node: NodeSnapshot


@dataclass(frozen=True)
class RuntimeMetric:
    name: str  # without PREFIX; counters end in _total
    kind: str  # "gauge", "counter" or "histogram"
    unit: str
    description: str
    read: Callable[[Readings], Any]  # Points, or HistogramSnapshot for histograms


def _by(attribute: str, get: Callable[[StatsSnapshot], Any]) -> Callable[[Readings], Points]:
    return lambda r: [({attribute: str(k)}, v) for k, v in get(r.stats).items()]


def _by_pair(first: str, second: str, get: Callable[[StatsSnapshot], Any]) -> Callable[[Readings], Points]:
    return lambda r: [({first: a, second: b}, v) for (a, b), v in get(r.stats).items()]


def _one(get: Callable[[StatsSnapshot], float | int | None]) -> Callable[[Readings], Points]:
    def read(r: Readings) -> Points:
        value = get(r.stats)
        return [] if value is None else [({}, value)]
    return read


def _of_node(get: Callable[[NodeSnapshot], float | int]) -> Callable[[Readings], Points]:
    return lambda r: [({}, get(r.node))]


def _histogram(get: Callable[[StatsSnapshot], HistogramSnapshot | None]) -> Callable[[Readings], Any]:
    return lambda r: get(r.stats)


def _kubernetes(r: Readings) -> Points:
    """One info point: the API server's version (``unknown`` until read, or when set by flag) and the rules in force."""
    k = r.node.kubernetes
    return [({"server_version": k.server_version or "unknown", "rules": k.rules.name, "source": k.source}, 1)]


RUNTIME_METRICS: tuple[RuntimeMetric, ...] = (
    RuntimeMetric("workqueue_depth", "gauge", "{event}",
                  "Events waiting in the queue between the Kubernetes source and the handler", _one(lambda s: s.queue_depth)),
    RuntimeMetric("workqueue_adds_total", "counter", "{event}",
                  "Events put on the queue, by Kubernetes event type", _by("event_type", lambda s: s.events_added)),
    RuntimeMetric("workqueue_queue_duration_seconds", "histogram", "s",
                  "Time an event waits in the queue before the handler takes it", _histogram(lambda s: s.queue_duration)),
    RuntimeMetric("workqueue_work_duration_seconds", "histogram", "s",
                  "Time the handler takes per event", _histogram(lambda s: s.work_duration)),
    RuntimeMetric("workqueue_unfinished_work_seconds", "gauge", "s",
                  "Age of the event being handled now (0 when idle)", _one(lambda s: s.unfinished_work_seconds)),
    RuntimeMetric("workqueue_longest_running_processor_seconds", "gauge", "s",
                  "Longest running handler (one worker, so equal to unfinished work)", _one(lambda s: s.unfinished_work_seconds)),
    RuntimeMetric("events_handled_total", "counter", "{event}",
                  "Events the handler finished, by result (success, error); both exist from start-up",
                  _by("result", lambda s: s.events_handled_by_result)),
    RuntimeMetric("objects_skipped_total", "counter", "{object}",
                  "Objects a source dropped, by resource and reason (undecodable; other_node: the server ignored the field selector)",
                  _by_pair("resource", "reason", lambda s: s.skipped)),
    RuntimeMetric("handler_errors_total", "counter", "{error}",
                  "Events whose handling failed, by bounded error type", _by("error_type", lambda s: s.handler_errors)),
    RuntimeMetric("pod_problems_total", "counter", "{problem}",
                  "Pod changes that carried bad input; the pod was still reported per the fallback rules",
                  _by_pair("subject", "reason", lambda s: s.pod_problems)),
    RuntimeMetric("watch_starts_total", "counter", "{watch}",
                  "Watch requests started, by resource and why the previous one ended", _by_pair("resource", "reason", lambda s: s.watch_starts)),
    RuntimeMetric("relists_total", "counter", "{list}",
                  "Full LISTs by resource: one at start, more only after 410 Gone", _by("resource", lambda s: s.relists)),
    RuntimeMetric("api_errors_total", "counter", "{error}",
                  "Failed API requests and broken streams, by resource and reason", _by_pair("resource", "reason", lambda s: s.requests_failed)),
    RuntimeMetric("list_duration_seconds", "gauge", "s", "Duration of the last LIST", _one(lambda s: s.list_duration_seconds)),
    RuntimeMetric("last_event_age_seconds", "gauge", "s",
                  "Seconds since the last watch event or bookmark", _one(lambda s: s.last_event_age_seconds)),
    RuntimeMetric("pods_cached", "gauge", "{pod}",
                  "Pods bound to this node that the agent tracks, terminal ones included", _of_node(lambda n: len(n.pods))),
    RuntimeMetric("synced", "gauge", "1", "1 once the initial LIST has been handled", _of_node(lambda n: int(n.synced))),
    RuntimeMetric("kubernetes_info", "gauge", "1",
                  "1, with the API server's version and the Kubernetes release whose request rules the values follow "
                  "(source: apiserver, flag or default)", _kubernetes),
    RuntimeMetric("exports_total", "counter", "{export}", "OTLP exports, by result", _by("result", lambda s: s.exports)),
    RuntimeMetric("export_failures_total", "counter", "{export}",
                  "Failed OTLP exports by bounded reason (http_503, http_3xx, unexpected_body, rejected, timeout, transport, ...)",
                  _by("reason", lambda s: s.export_failures)),
    RuntimeMetric("export_rejected_points_total", "counter", "{point}",
                  "Points the Collector reported as rejected (OTLP partial success)", _one(lambda s: s.rejected_points)),
    RuntimeMetric("last_export_success_timestamp_seconds", "gauge", "s",
                  "Unix time of the last successful OTLP export", _one(lambda s: s.last_export_success_unixtime)),
    RuntimeMetric("export_duration_seconds", "histogram", "s", "Time one OTLP export takes", _histogram(lambda s: s.export_duration)),
    RuntimeMetric("usage_read_errors_total", "counter", "{error}",
                  "Failed reads of the host's /proc for the used series, by reason (missing, unreadable, malformed)",
                  _by("reason", lambda s: s.usage_errors)),
)


def le_label(bound: float) -> str:
    """Prometheus' spelling of a bucket bound."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _histogram_parts(h: HistogramSnapshot | None) -> dict[str, Points]:
    if h is None:
        return {"_bucket": [], "_sum": [], "_count": []}
    return {
        "_bucket": [({"le": le_label(bound)}, n) for bound, n in h.cumulative()],
        "_sum": [({}, h.sum)],
        "_count": [({}, h.count)],
    }


class RuntimeMetrics:
    """OTel observable instruments over the table; ``refresh()`` takes the snapshot they read."""

    # Callbacks within one collection run microseconds apart: they share one pair of snapshots,
    # so the numbers of one export agree with each other.
    _FRESH_FOR = 0.05

    def __init__(self, meter: Meter, stats: RuntimeStats, state: NodeState,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stats = stats
        self._state = state
        self._clock = clock
        self._lock = threading.Lock()
        self._readings = Readings(stats.snapshot(), state.snapshot())
        self._taken = -float("inf")
        for metric in RUNTIME_METRICS:
            if metric.kind == "histogram":
                for suffix, unit in (("_bucket", "{event}"), ("_sum", metric.unit), ("_count", "{event}")):
                    meter.create_observable_counter(
                        PREFIX + metric.name + suffix, unit=unit, description=f"{metric.description} ({suffix[1:]})",
                        callbacks=[self._callback(lambda s, m=metric, x=suffix: _histogram_parts(m.read(s))[x])])
            elif metric.kind == "counter":
                meter.create_observable_counter(PREFIX + metric.name, unit=metric.unit, description=metric.description,
                                                callbacks=[self._callback(metric.read)])
            else:
                meter.create_observable_gauge(PREFIX + metric.name, unit=metric.unit, description=metric.description,
                                              callbacks=[self._callback(metric.read)])

    def _callback(self, read: Callable[[Readings], Points]) -> Callable[[CallbackOptions], Iterable[Observation]]:
        return lambda options: [Observation(value, attrs) for attrs, value in read(self.readings())]

    def readings(self) -> Readings:
        with self._lock:
            now = self._clock()
            if now - self._taken > self._FRESH_FOR:
                self._readings = Readings(self._stats.snapshot(), self._state.snapshot())
                self._taken = now
            return self._readings
