"""The node state as OTLP gauges, encoded straight into the protobuf request.

Per-pod series are not SDK instruments: an instrument remembers every
attribute set it has seen (opentelemetry-sdk 1.45 has no delete and no
MetricProducer), so a pod that is gone would linger or overflow the
cardinality limit. Instead each export encodes exactly the points of the
current snapshot, from the one ``state_points()`` function that ``/metrics``
uses too, and adds them to what the SDK collected for the agent's own
instruments. A deleted pod's series is absent from the very next export.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, ScopeMetrics
from opentelemetry.sdk.metrics.export import MetricsData

from agent.export.metrics import GAUGES, Point, state_points
from agent.pipeline.state import NodeState

__all__ = ["add_state_points", "count_points", "RequestBuilder", "SCOPE_NAME"]

SCOPE_NAME = "node_requests_agent.state"


def _scope(request: ExportMetricsServiceRequest, resource_attributes: dict[str, str], version: str) -> ScopeMetrics:
    if not request.resource_metrics:
        rm = request.resource_metrics.add()
        for key, value in resource_attributes.items():
            kv = rm.resource.attributes.add()
            kv.key = key
            kv.value.string_value = value
    scope = request.resource_metrics[0].scope_metrics.add()
    scope.scope.name = SCOPE_NAME
    scope.scope.version = version
    return scope


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
        attributes = dp.attributes
        for key, value in point.attributes.items():
            kv = attributes.add()
            kv.key = key
            kv.value.string_value = value
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
    """One export's request: what the SDK collected (the agent's own instruments) plus the current state."""

    def __init__(self, state: NodeState, resource_attributes: dict[str, str], version: str,
                 wall_ns: Callable[[], int] = time.time_ns) -> None:
        self._state = state
        self._resource = resource_attributes
        self._version = version
        self._wall_ns = wall_ns

    def build(self, metrics_data: MetricsData) -> tuple[ExportMetricsServiceRequest, int]:
        """The request and how many points it carries."""
        request = encode_metrics(metrics_data)
        sdk_points = count_points(request)
        snapshot = self._state.snapshot()
        added = add_state_points(request, state_points(snapshot.pods, snapshot.summary()), self._wall_ns(),
                                 self._resource, self._version)
        return request, sdk_points + added
