"""The agent's metrics: names, units, attributes, and how state becomes points."""

from __future__ import annotations

from opentelemetry.metrics import Meter

from ..quantity import to_bytes, to_float
from ..state import NodeState
from ..summary import NodeSummary

__all__ = ["PodMetrics", "NodeMetrics", "POD_CPU", "POD_MEM", "VM_CPU", "VM_MEM", "NODE_CPU", "NODE_MEM",
           "NODE_RATIO", "NODE_PODS_BY_PHASE", "NODE_PODS_BY_SOURCE", "NODE_POD_SLOTS"]

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

ATTR_NAMESPACE = "k8s.namespace.name"
ATTR_POD = "k8s.pod.name"
ATTR_UID = "k8s.pod.uid"
ATTR_SOURCE = "source"
ATTR_VM = "neon.vm.name"
ATTR_ROLE = "neon.vm.migration.role"


class PodMetrics:
    """Per-pod gauges set from the node state right before each collection."""

    def __init__(self, meter: Meter, state: NodeState) -> None:
        self._state = state
        self._cpu = meter.create_gauge(
            POD_CPU, unit="{cpu}",
            description="CPU the cluster-autoscaler accounts to the pod: the NeonVM's usage, else the pod's effective requests (cores)")
        self._mem = meter.create_gauge(
            POD_MEM, unit="By",
            description="Memory the cluster-autoscaler accounts to the pod: the NeonVM's usage, else the pod's effective requests")
        self._vm_cpu = meter.create_gauge(
            VM_CPU, unit="{cpu}", description="NeonVM usage annotation, CPU, before overcommit (cores)")
        self._vm_mem = meter.create_gauge(
            VM_MEM, unit="By", description="NeonVM usage annotation, memory, before overcommit")

    def publish(self) -> None:
        for pod in self._state.pods():
            if not pod.reported:
                continue
            attributes = {ATTR_NAMESPACE: pod.namespace, ATTR_POD: pod.name, ATTR_UID: pod.uid, ATTR_SOURCE: pod.source}
            self._cpu.set(to_float(pod.cpu), attributes)
            # Whole bytes, rounded up as Quantity.Value() does (overcommit can leave fractions).
            self._mem.set(float(to_bytes(pod.memory)), attributes)
            if pod.vm is not None:
                vm_attributes = {ATTR_NAMESPACE: pod.namespace, ATTR_POD: pod.name, ATTR_UID: pod.uid,
                                 ATTR_VM: pod.vm.name, ATTR_ROLE: pod.vm.migration_role or "none"}
                self._vm_cpu.set(to_float(pod.vm.cpu), vm_attributes)
                self._vm_mem.set(float(to_bytes(pod.vm.memory)), vm_attributes)


class NodeMetrics:
    """Node-level gauges, set from a NodeSummary right before each collection.

    Quantities that are unknown (the Node not read yet or deleted, /proc
    unreadable) are simply not set, so those series are absent, never zero.
    """

    def __init__(self, meter: Meter) -> None:
        self._cpu = meter.create_gauge(NODE_CPU, unit="{cpu}", description="Node CPU by quantity: capacity, allocatable, scheduled (spec requests), pod_or_vm (what the autoscaler sees), vm_usage, used (cores)")
        self._mem = meter.create_gauge(NODE_MEM, unit="By", description="Node memory by quantity: capacity, allocatable, scheduled, pod_or_vm, vm_usage, used")
        self._ratio = meter.create_gauge(NODE_RATIO, unit="1", description="Node ratios: pod_or_vm, scheduled and used to allocatable; used to pod_or_vm")
        self._phase = meter.create_gauge(NODE_PODS_BY_PHASE, unit="{pod}", description="Pods bound to the node, by phase")
        self._source = meter.create_gauge(NODE_PODS_BY_SOURCE, unit="{pod}", description="Reported pods, by the source of their value")
        self._slots = meter.create_gauge(NODE_POD_SLOTS, unit="{pod}", description="Pod capacity and allocatable pod count of the node")

    def publish(self, s: NodeSummary) -> None:
        for quantity, value in s.cpu.quantities().items():
            self._cpu.set(to_float(value), {"quantity": quantity})
        for quantity, value in s.memory.quantities().items():
            self._mem.set(float(to_bytes(value)), {"quantity": quantity})
        for resource, comparison in (("cpu", s.cpu), ("memory", s.memory)):
            for ratio, value in comparison.ratios().items():
                self._ratio.set(value, {"resource": resource, "ratio": ratio})
        for phase, n in s.pods_by_phase.items():
            self._phase.set(n, {"phase": phase})
        for source, n in s.pods_by_source.items():
            self._source.set(n, {"source": source})
        for quantity, n in s.pod_slots.items():
            self._slots.set(n, {"quantity": quantity})
