"""The agent's product metrics: one table of names and units, and one function
turning state into points. The OTLP request (``otlp_encode``) and ``/metrics``
both consume them, so the two paths cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from agent.model.quantity import to_bytes, to_float
from agent.model.node_summary import NodeSummary
from agent.model.valuation import PodValue

__all__ = ["Gauge", "Point", "GAUGES", "state_points", "POD_CPU", "POD_MEM", "VM_CPU", "VM_MEM",
           "NODE_CPU", "NODE_MEM", "NODE_RATIO", "NODE_PODS_BY_PHASE", "NODE_PODS_BY_SOURCE", "NODE_POD_SLOTS"]

POD_CPU = "pod_or_vm_cpu_requests"
POD_MEM = "pod_or_vm_mem_requests"
VM_CPU = "vm_cpu_usage"
VM_MEM = "vm_mem_usage"
# Node comparisons: one metric per resource with a bounded ``quantity``
# attribute (capacity, allocatable, scheduled, pod_or_vm, vm_usage, used), the
# way neon's scheduler plugin exports autoscaling_plugin_node_cpu_resources_current{field}.
NODE_CPU = "node_requests_node_cpu_cores"
NODE_MEM = "node_requests_node_memory_bytes"
NODE_RATIO = "node_requests_node_ratio"
NODE_PODS_BY_PHASE = "node_requests_node_pods_by_phase"
NODE_PODS_BY_SOURCE = "node_requests_node_pods_by_source"
NODE_POD_SLOTS = "node_requests_node_pod_slots"


class Gauge(NamedTuple):
    unit: str
    description: str


GAUGES: dict[str, Gauge] = {
    POD_CPU: Gauge("{cpu}", "CPU the cluster-autoscaler accounts to the pod: the NeonVM's usage, else the pod's effective requests (cores)"),
    POD_MEM: Gauge("By", "Memory the cluster-autoscaler accounts to the pod: the NeonVM's usage, else the pod's effective requests"),
    VM_CPU: Gauge("{cpu}", "NeonVM usage annotation, CPU, before overcommit (cores)"),
    VM_MEM: Gauge("By", "NeonVM usage annotation, memory, before overcommit"),
    NODE_CPU: Gauge("{cpu}", "Node CPU by quantity: capacity, allocatable, scheduled (spec requests), pod_or_vm (what the autoscaler sees), vm_usage, used (cores)"),
    NODE_MEM: Gauge("By", "Node memory by quantity: capacity, allocatable, scheduled, pod_or_vm, vm_usage, used"),
    NODE_RATIO: Gauge("1", "Node ratios: pod_or_vm, scheduled and used to allocatable; used to pod_or_vm"),
    NODE_PODS_BY_PHASE: Gauge("{pod}", "Pods bound to the node, by phase"),
    NODE_PODS_BY_SOURCE: Gauge("{pod}", "Reported pods, by the source of their value"),
    NODE_POD_SLOTS: Gauge("{pod}", "Pod capacity and allocatable pod count of the node"),
}


class Point(NamedTuple):
    metric: str
    attributes: dict[str, str]
    value: float


def _bytes(nanos: int) -> float:
    # Whole bytes, rounded up as Quantity.Value() does (overcommit can leave fractions).
    return float(to_bytes(nanos))


def state_points(pods: Iterable[PodValue], summary: NodeSummary | None) -> Iterator[Point]:
    """Every product data point for the current state.

    Terminal pods and unknown node quantities (the Node not read yet or
    deleted, /proc unreadable) yield nothing, so those series are absent, never zero.
    """
    for pod in pods:
        if not pod.reported:
            continue
        attrs = pod.identity
        source = {**attrs, "source": pod.source}
        yield Point(POD_CPU, source, to_float(pod.cpu))
        yield Point(POD_MEM, source, _bytes(pod.memory))
        if pod.vm is not None:
            vm = {**attrs, "neon.vm.name": pod.vm.name, "neon.vm.migration.role": pod.vm.migration_role or "none"}
            yield Point(VM_CPU, vm, to_float(pod.vm.cpu))
            yield Point(VM_MEM, vm, _bytes(pod.vm.memory))
    if summary is None:
        return
    for quantity, value in summary.cpu.quantities().items():
        yield Point(NODE_CPU, {"quantity": quantity}, to_float(value))
    for quantity, value in summary.memory.quantities().items():
        yield Point(NODE_MEM, {"quantity": quantity}, _bytes(value))
    for resource, comparison in (("cpu", summary.cpu), ("memory", summary.memory)):
        for ratio, value in comparison.ratios().items():
            yield Point(NODE_RATIO, {"resource": resource, "ratio": ratio}, value)
    for phase, n in summary.pods_by_phase.items():
        yield Point(NODE_PODS_BY_PHASE, {"phase": phase}, n)
    for source, n in summary.pods_by_source.items():
        yield Point(NODE_PODS_BY_SOURCE, {"source": source}, n)
    for quantity, n in summary.pod_slots.items():
        yield Point(NODE_POD_SLOTS, {"quantity": quantity}, n)
