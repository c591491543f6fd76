"""The agent's metrics: names, units, attributes, and how state becomes points."""

from __future__ import annotations

from opentelemetry.metrics import Meter

from ..quantity import to_bytes, to_float
from ..state import NodeState

__all__ = ["PodMetrics", "POD_CPU", "POD_MEM", "VM_CPU", "VM_MEM"]

POD_CPU = "pod_or_vm_cpu_requests"
POD_MEM = "pod_or_vm_mem_requests"
VM_CPU = "vm_cpu_usage"
VM_MEM = "vm_mem_usage"

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
