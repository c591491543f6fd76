"""``/metrics``: Prometheus text exposition rendered from current state at scrape time.

Pods that are gone are simply absent; nothing is cached between scrapes.
Names and labels are what the shipped Collector configuration produces
(attribute dots become underscores, ``k8s_node_name`` on every series), so a
dashboard works against either path.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from agent.export.metrics import GAUGES, state_points
from agent.model.units import le_label
from agent.pipeline.state import NodeSnapshot
from agent.telemetry.stats import StatsSnapshot
from agent.telemetry.table import PREFIX, RUNTIME_METRICS, Readings

__all__ = ["render_metrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(attribute: str) -> str:
    """An OTel attribute name as the Collector's prometheus exporter writes it."""
    return attribute.replace(".", "_")


class _Collector:
    def __init__(self, node: NodeSnapshot, stats: StatsSnapshot, now: float) -> None:
        self._node = node
        self._stats = stats
        self._now = now

    def describe(self) -> list[Metric]:
        return []  # no pre-registration scrape

    def collect(self) -> Iterator[Metric]:
        node = self._node.node_name
        families: dict[str, GaugeMetricFamily] = {}
        for point in state_points(self._node.pods, self._node.summary(), self._node.verdict(self._now)):
            keys = sorted(point.attributes)
            family = families.get(point.metric)
            if family is None:
                family = families[point.metric] = GaugeMetricFamily(
                    point.metric, GAUGES[point.metric].description, labels=["k8s_node_name", *map(_label, keys)])
            family.add_metric([node, *(point.attributes[k] for k in keys)], point.value)
        yield from families.values()

        readings = Readings(self._stats, self._node)
        for metric in RUNTIME_METRICS:
            name = PREFIX + metric.name
            if metric.kind == "histogram":
                h = metric.read(readings)
                if h is None:
                    continue
                histogram = HistogramMetricFamily(name, metric.description, labels=["k8s_node_name"])
                histogram.add_metric([node], [(le_label(b), n) for b, n in h.cumulative()], h.sum)
                yield histogram
                continue
            points = metric.read(readings)
            keys = sorted({k for attrs, _ in points for k in attrs})
            labels = ["k8s_node_name", *keys]
            series: CounterMetricFamily | GaugeMetricFamily
            if metric.kind == "counter":
                series = CounterMetricFamily(name.removesuffix("_total"), metric.description, labels=labels)
            else:
                series = GaugeMetricFamily(name, metric.description, labels=labels)
            for attrs, value in points:
                series.add_metric([node, *(attrs.get(k, "") for k in keys)], value)
            yield series


def render_metrics(node: NodeSnapshot, stats: StatsSnapshot, now: float) -> bytes:
    """The scrape's text; ``now`` (Unix seconds, from the endpoint's clock) is when the verdict is judged."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(node, stats, now))
    return generate_latest(registry)
