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

from ..quantity import to_bytes, to_float
from ..state import NodeState
from ..stats import RuntimeStats
from ..summary import NodeSummary
from .metrics import (NODE_CPU, NODE_MEM, NODE_POD_SLOTS, NODE_PODS_BY_PHASE, NODE_PODS_BY_SOURCE, NODE_RATIO, POD_CPU,
                      POD_MEM, VM_CPU, VM_MEM)
from .runtime import PREFIX, RUNTIME_METRICS, le_label

__all__ = ["render_metrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_POD_LABELS = ["k8s_node_name", "k8s_namespace_name", "k8s_pod_name", "k8s_pod_uid"]


class _Collector:
    def __init__(self, state: NodeState, stats: RuntimeStats, summary: NodeSummary | None) -> None:
        self._state = state
        self._stats = stats
        self._summary = summary

    @staticmethod
    def _node(node: str, s: NodeSummary) -> Iterator[Metric]:
        cpu = GaugeMetricFamily(NODE_CPU, "Node CPU by quantity (cores)", labels=["k8s_node_name", "quantity"])
        for q, v in s.cpu.quantities().items():
            cpu.add_metric([node, q], to_float(v))
        mem = GaugeMetricFamily(NODE_MEM, "Node memory by quantity (bytes)", labels=["k8s_node_name", "quantity"])
        for q, v in s.memory.quantities().items():
            mem.add_metric([node, q], to_bytes(v))
        ratio = GaugeMetricFamily(NODE_RATIO, "Node ratios", labels=["k8s_node_name", "resource", "ratio"])
        for resource, comparison in (("cpu", s.cpu), ("memory", s.memory)):
            for name, v in comparison.ratios().items():
                ratio.add_metric([node, resource, name], v)
        phase = GaugeMetricFamily(NODE_PODS_BY_PHASE, "Pods bound to the node, by phase", labels=["k8s_node_name", "phase"])
        for k, v in s.pods_by_phase.items():
            phase.add_metric([node, k], v)
        source = GaugeMetricFamily(NODE_PODS_BY_SOURCE, "Reported pods, by value source", labels=["k8s_node_name", "source"])
        for k, v in s.pods_by_source.items():
            source.add_metric([node, k], v)
        slots = GaugeMetricFamily(NODE_POD_SLOTS, "Node pod capacity and allocatable pods", labels=["k8s_node_name", "quantity"])
        for k, v in s.pod_slots.items():
            slots.add_metric([node, k], v)
        yield from (cpu, mem, ratio, phase, source, slots)

    def describe(self) -> list[Metric]:
        return []  # no pre-registration scrape

    def collect(self) -> Iterator[Metric]:
        node = self._state.node_name
        cpu = GaugeMetricFamily(POD_CPU, "CPU the cluster-autoscaler accounts to the pod (cores)", labels=[*_POD_LABELS, "source"])
        mem = GaugeMetricFamily(POD_MEM, "Memory the cluster-autoscaler accounts to the pod (bytes)", labels=[*_POD_LABELS, "source"])
        vm_labels = [*_POD_LABELS, "neon_vm_name", "neon_vm_migration_role"]
        vm_cpu = GaugeMetricFamily(VM_CPU, "NeonVM usage annotation, CPU, before overcommit (cores)", labels=vm_labels)
        vm_mem = GaugeMetricFamily(VM_MEM, "NeonVM usage annotation, memory, before overcommit (bytes)", labels=vm_labels)
        for pod in self._state.pods():
            if not pod.reported:
                continue
            labels = [node, pod.namespace, pod.name, pod.uid]
            cpu.add_metric([*labels, pod.source], to_float(pod.cpu))
            mem.add_metric([*labels, pod.source], to_bytes(pod.memory))
            if pod.vm is not None:
                extra = [pod.vm.name, pod.vm.migration_role or "none"]
                vm_cpu.add_metric([*labels, *extra], to_float(pod.vm.cpu))
                vm_mem.add_metric([*labels, *extra], to_bytes(pod.vm.memory))
        yield from (cpu, mem, vm_cpu, vm_mem)
        if self._summary is not None:
            yield from self._node(node, self._summary)

        snapshot = self._stats.snapshot()
        for metric in RUNTIME_METRICS:
            name = PREFIX + metric.name
            if metric.kind == "histogram":
                h = metric.read(snapshot)
                if h is None:
                    continue
                family = HistogramMetricFamily(name, metric.description, labels=["k8s_node_name"])
                family.add_metric([node], [(le_label(b), n) for b, n in h.cumulative()], h.sum)
                yield family
                continue
            points = metric.read(snapshot)
            keys = sorted({k for attrs, _ in points for k in attrs})
            if metric.kind == "counter":
                family = CounterMetricFamily(name.removesuffix("_total"), metric.description, labels=["k8s_node_name", *keys])
            else:
                family = GaugeMetricFamily(name, metric.description, labels=["k8s_node_name", *keys])
            for attrs, value in points:
                family.add_metric([node, *(attrs.get(k, "") for k in keys)], value)
            yield family


def render_metrics(state: NodeState, stats: RuntimeStats, summary: NodeSummary | None = None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(state, stats, summary))
    return generate_latest(registry)
