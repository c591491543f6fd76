"""The agent's own metrics: one table over the stats snapshot, read by every exporter and view.

Names mirror controller-runtime's workqueue set under the agent's namespace.
Every value is already counted in ``RuntimeStats``, so nothing here is an SDK
instrument: each OTLP export encodes one snapshot of the table
(export/runtime.py), the way ``/metrics`` renders it natively. Through the
SDK's observable instruments the same ~100 points cost four times their
direct encoding (callbacks, per-attribute aggregation, then re-encoding) and
came from several snapshots. Every attribute is bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import msgspec

from agent.pipeline.state import NodeSnapshot
from agent.telemetry.stats import HistogramSnapshot, StatsSnapshot

__all__ = ["RuntimeMetric", "RUNTIME_METRICS", "Readings", "Points", "PREFIX"]

PREFIX = "node_requests_agent_"

# A reading: (attributes, value) pairs, or a histogram.
Points = list[tuple[dict[str, str], float]]


class Readings(NamedTuple):
    """The two immutable snapshots every runtime metric is read from."""

    stats: StatsSnapshot
    node: NodeSnapshot


class RuntimeMetric(msgspec.Struct, frozen=True):
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


#: The info point's ``server_version`` is the API server's gitVersion cut to this length: a release and a vendor's
#: build suffix fit ("v1.37.2-gke.1500000"); the Collector drops points with longer values and bounds each node's
#: series, so a longer answer would cost the node its info point (rules and source come from fixed sets).
SERVER_VERSION_LENGTH = 64


def _kubernetes(r: Readings) -> Points:
    """One info point: the API server's version (``unknown`` until read, or when set by flag) and the rules in force."""
    k = r.node.kubernetes
    version = (k.server_version or "unknown")[:SERVER_VERSION_LENGTH]
    return [({"server_version": version, "rules": k.rules.name, "source": k.source}, 1)]


RUNTIME_METRICS: tuple[RuntimeMetric, ...] = (
    RuntimeMetric("workqueue_depth", "gauge", "{event}",
                  "Events waiting in the queue between the Kubernetes source and the handler",
                  _one(lambda s: s.queue_depth)),
    RuntimeMetric("workqueue_adds_total", "counter", "{event}",
                  "Events put on the queue, by Kubernetes event type", _by("event_type", lambda s: s.events_added)),
    RuntimeMetric("workqueue_queue_duration_seconds", "histogram", "s",
                  "Time an event waits in the queue before the handler takes it",
                  _histogram(lambda s: s.queue_duration)),
    RuntimeMetric("workqueue_work_duration_seconds", "histogram", "s",
                  "Time the handler takes per event", _histogram(lambda s: s.work_duration)),
    RuntimeMetric("workqueue_unfinished_work_seconds", "gauge", "s",
                  "Age of the event being handled now (0 when idle)", _one(lambda s: s.unfinished_work_seconds)),
    RuntimeMetric("workqueue_longest_running_processor_seconds", "gauge", "s",
                  "Longest running handler (one worker, so equal to unfinished work)",
                  _one(lambda s: s.unfinished_work_seconds)),
    RuntimeMetric("events_handled_total", "counter", "{event}",
                  "Events the handler finished, by result (success, error); both exist from start-up",
                  _by("result", lambda s: s.events_handled_by_result)),
    RuntimeMetric("objects_skipped_total", "counter", "{object}",
                  "Objects a source dropped, by resource and reason (undecodable; other_node: the server ignored the "
                  "field selector), or kept without a part over the agent's bounds (selector_over_bound, "
                  "labels_over_bound: their PDB coverage unknown)",
                  _by_pair("resource", "reason", lambda s: s.skipped)),
    RuntimeMetric("handler_errors_total", "counter", "{error}",
                  "Events whose handling failed, by bounded error type", _by("error_type", lambda s: s.handler_errors)),
    RuntimeMetric("pod_problems_total", "counter", "{problem}",
                  "Pod changes that carried bad input; the pod was still reported per the fallback rules",
                  _by_pair("subject", "reason", lambda s: s.pod_problems)),
    RuntimeMetric("watch_starts_total", "counter", "{watch}",
                  "Watch requests started, by resource and why the previous one ended",
                  _by_pair("resource", "reason", lambda s: s.watch_starts)),
    RuntimeMetric("relists_total", "counter", "{list}",
                  "Full LISTs by resource: one at start, more only after 410 Gone",
                  _by("resource", lambda s: s.relists)),
    RuntimeMetric("api_errors_total", "counter", "{error}",
                  "Failed API requests and broken streams, by resource and reason",
                  _by_pair("resource", "reason", lambda s: s.requests_failed)),
    RuntimeMetric("list_duration_seconds", "gauge", "s", "Duration of the last LIST, by resource",
                  _by("resource", lambda s: s.list_duration_seconds)),
    RuntimeMetric("last_event_age_seconds", "gauge", "s",
                  "Seconds since the last LIST, watch event or bookmark, by resource",
                  _by("resource", lambda s: s.last_event_age_seconds)),
    RuntimeMetric("pods_cached", "gauge", "{pod}",
                  "Pods bound to this node that the agent tracks, terminal ones included",
                  _of_node(lambda n: len(n.pods))),
    RuntimeMetric("synced", "gauge", "1", "1 once the initial LIST has been handled",
                  _of_node(lambda n: int(n.synced))),
    RuntimeMetric("kubernetes_info", "gauge", "1",
                  "1, with the API server's version and the Kubernetes release whose request rules the values follow "
                  "(source: apiserver, flag or default)", _kubernetes),
    RuntimeMetric("exports_total", "counter", "{export}", "OTLP exports, by result",
                  _by("result", lambda s: s.exports)),
    RuntimeMetric("export_failures_total", "counter", "{export}",
                  "Failed OTLP exports by bounded reason (http_503, http_3xx, unexpected_body, rejected, timeout, "
                  "transport, ...)",
                  _by("reason", lambda s: s.export_failures)),
    RuntimeMetric("export_rejected_points_total", "counter", "{point}",
                  "Points the Collector reported as rejected (OTLP partial success)",
                  _one(lambda s: s.rejected_points)),
    RuntimeMetric("last_export_success_timestamp_seconds", "gauge", "s",
                  "Unix time of the last successful OTLP export", _one(lambda s: s.last_export_success_unixtime)),
    RuntimeMetric("export_duration_seconds", "histogram", "s", "Time one OTLP export takes",
                  _histogram(lambda s: s.export_duration)),
    RuntimeMetric("usage_read_errors_total", "counter", "{error}",
                  "Failed reads of the host's /proc for the used series, by reason (missing, unreadable, malformed)",
                  _by("reason", lambda s: s.usage_errors)),
)
