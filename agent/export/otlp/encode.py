"""The node state and the agent's own table, encoded straight into the OTLP protobuf request.

Per-pod series are not SDK instruments: an instrument remembers every
attribute set it has seen (opentelemetry-sdk 1.45 has no delete and no
MetricProducer), so a pod that is gone would linger or overflow the
cardinality limit. Instead each export encodes exactly the points of one
snapshot, from the same ``state_points()`` and ``RUNTIME_METRICS`` that
``/metrics`` renders, and adds them to whatever the SDK collected (the
exporter's public contract: ``MetricExporter.export(metrics_data)``). A
deleted pod's series is absent from the very next export.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    Metric,
    NumberDataPoint,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.export import MetricsData

from agent.export.metrics import GAUGES, Point, state_points
from agent.export.runtime import Series, otlp_series
from agent.pipeline.state import NodeState
from agent.telemetry.stats import HistogramSnapshot, StatsReader
from agent.telemetry.table import Readings

__all__ = ["add_state_points", "add_runtime_series", "count_points", "RequestBuilder", "SCOPE_NAME",
           "RUNTIME_SCOPE_NAME"]

SCOPE_NAME = "node_requests_agent.state"
RUNTIME_SCOPE_NAME = "node_requests_agent"


def _scope(request: ExportMetricsServiceRequest, resource_attributes: dict[str, str], version: str,
           name: str = SCOPE_NAME) -> ScopeMetrics:
    if not request.resource_metrics:
        rm = request.resource_metrics.add()
        for key, value in resource_attributes.items():
            kv = rm.resource.attributes.add()
            kv.key = key
            kv.value.string_value = value
    scope = request.resource_metrics[0].scope_metrics.add()
    scope.scope.name = name
    scope.scope.version = version
    return scope


def _set_attributes(dp: NumberDataPoint, attributes: dict[str, str]) -> None:
    for key, text in attributes.items():
        kv = dp.attributes.add()
        kv.key = key
        kv.value.string_value = text


def _add_histogram(metric: Metric, h: HistogramSnapshot, start_unix_nano: int, time_unix_nano: int) -> None:
    """One cumulative explicit-bucket point: OTLP's bucket i holds bounds[i-1] < x <= bounds[i], as the stats count."""
    metric.histogram.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
    dp = metric.histogram.data_points.add()
    dp.start_time_unix_nano, dp.time_unix_nano = start_unix_nano, time_unix_nano
    dp.count, dp.sum = h.count, h.sum
    dp.explicit_bounds.extend(h.bounds)
    dp.bucket_counts.extend(h.counts)  # per bucket, +Inf last: len(bounds) + 1 of them


def add_runtime_series(request: ExportMetricsServiceRequest, series: Iterable[Series], start_unix_nano: int,
                       time_unix_nano: int, resource_attributes: dict[str, str], version: str) -> int:
    """Append the agent's own metrics: gauges, and counters and histograms cumulative since ``start_unix_nano``."""
    scope = _scope(request, resource_attributes, version, RUNTIME_SCOPE_NAME)
    count = 0
    for s in series:
        metric = scope.metrics.add()
        metric.name, metric.unit, metric.description = s.name, s.unit, s.description
        if isinstance(s.points, HistogramSnapshot):  # kind "histogram"
            _add_histogram(metric, s.points, start_unix_nano, time_unix_nano)
            count += 1
            continue
        if s.kind == "gauge":
            data_points, start = metric.gauge.data_points, 0
        else:
            metric.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
            metric.sum.is_monotonic = True
            data_points, start = metric.sum.data_points, start_unix_nano
        for attributes, value in s.points:
            dp = data_points.add()
            dp.start_time_unix_nano, dp.time_unix_nano = start, time_unix_nano
            if isinstance(value, int):
                dp.as_int = value
            else:
                dp.as_double = value
            _set_attributes(dp, attributes)
            count += 1
    return count


def add_state_points(request: ExportMetricsServiceRequest, points: Iterable[Point], time_unix_nano: int,
                     resource_attributes: dict[str, str], version: str) -> int:
    """Append one gauge per product metric holding ``points``; return how many points were added.

    The first resource of ``request`` is the agent's (the SDK's resource);
    ``resource_attributes`` is used only if the SDK collected nothing.
    """
    scope = _scope(request, resource_attributes, version)
    metrics: dict[str, Metric] = {}
    count = 0
    for point in points:
        metric = metrics.get(point.metric)
        if metric is None:
            gauge = GAUGES[point.metric]
            metric = metrics[point.metric] = scope.metrics.add()
            metric.name = point.metric
            metric.unit = gauge.unit
            metric.description = gauge.description
            metric.gauge.SetInParent()
        dp = metric.gauge.data_points.add()
        dp.time_unix_nano = time_unix_nano
        dp.as_double = point.value
        _set_attributes(dp, point.attributes)
        count += 1
    return count


def count_points(request: ExportMetricsServiceRequest) -> int:
    total = 0
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind:
                    total += len(getattr(m, kind).data_points)
    return total


class RequestBuilder:
    """One export's request: what the SDK collected, the agent's own table and the node state, from one snapshot
    each."""

    def __init__(self, state: NodeState, stats: StatsReader, resource_attributes: dict[str, str], version: str,
                 wall_ns: Callable[[], int] = time.time_ns) -> None:
        self._state = state
        self._stats = stats
        self._resource = resource_attributes  # the SDK Resource's, used if the SDK collected nothing
        self._version = version
        self._wall_ns = wall_ns
        self._start_ns = wall_ns()  # the counters count from here: the agent's start

    def build(self, metrics_data: MetricsData) -> tuple[ExportMetricsServiceRequest, int]:
        """The request and how many points it carries."""
        request = encode_metrics(metrics_data)
        points = count_points(request)
        readings = Readings(self._stats.snapshot(), self._state.snapshot())
        now = self._wall_ns()
        points += add_runtime_series(request, otlp_series(readings), self._start_ns, now, self._resource, self._version)
        # The verdict once per export, at the export's own wall-clock time (the model reads no clock).
        node = readings.node
        points += add_state_points(request, state_points(node.pods, node.summary(), node.verdict(now / 1e9)), now,
                                   self._resource, self._version)
        return request, points
