"""The agent's product metrics: one table of names and units, and one function
turning state into points. The OTLP request (``otlp_encode``) and ``/metrics``
both consume them, so the two paths cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from agent.model.node_summary import NodeSummary
from agent.model.quantity import to_bytes, to_float
from agent.model.scale_down import STATES, Verdict
from agent.model.valuation import PodValue

__all__ = ["Gauge", "Point", "GAUGES", "state_points", "verdict_points", "POD_CPU", "POD_MEM", "VM_CPU", "VM_MEM",
           "NODE_CPU", "NODE_MEM", "NODE_RATIO", "NODE_PODS_BY_PHASE", "NODE_PODS_BY_SOURCE", "NODE_POD_SLOTS",
           "POD_BLOCKING", "AUTOSCALER_UTILIZATION", "AUTOSCALER_NODE_UTILIZATION", "AUTOSCALER_THRESHOLD",
           "AUTOSCALER_STATE", "AUTOSCALER_CANDIDATE", "AUTOSCALER_REMOVABLE", "AUTOSCALER_BLOCKING_PODS",
           "AUTOSCALER_RESOURCES"]

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
# The cluster-autoscaler's verdict on the node (model/scale_down.py): every label bounded (resources, STATES,
# REASONS); the per-pod series exists only for a pod that blocks, so it is bounded by the node's pods.
POD_BLOCKING = "pod_autoscaler_blocking"
AUTOSCALER_UTILIZATION = "node_requests_node_autoscaler_utilization"
AUTOSCALER_NODE_UTILIZATION = "node_requests_node_autoscaler_node_utilization"
AUTOSCALER_THRESHOLD = "node_requests_node_autoscaler_threshold"
AUTOSCALER_STATE = "node_requests_node_autoscaler_state"
# Candidate as the autoscaler means it (underutilized and eligible, blocked or not); removable: a candidate no pod
# blocks. Two gauges, so "a candidate kept by its pods" is candidate 1 and removable 0.
AUTOSCALER_CANDIDATE = "node_requests_node_autoscaler_scale_down_candidate"
AUTOSCALER_REMOVABLE = "node_requests_node_autoscaler_removable"
AUTOSCALER_BLOCKING_PODS = "node_requests_node_autoscaler_blocking_pods"
AUTOSCALER_RESOURCES = ("cpu", "memory", "gpu")


class Gauge(NamedTuple):
    unit: str
    description: str


GAUGES: dict[str, Gauge] = {
    POD_CPU: Gauge("{cpu}", "CPU the cluster-autoscaler accounts to the pod: the NeonVM's usage, else the pod's "
                            "effective requests (cores)"),
    POD_MEM: Gauge("By", "Memory the cluster-autoscaler accounts to the pod: the NeonVM's usage, else the pod's "
                         "effective requests"),
    VM_CPU: Gauge("{cpu}", "NeonVM usage annotation, CPU, before overcommit (cores)"),
    VM_MEM: Gauge("By", "NeonVM usage annotation, memory, before overcommit"),
    NODE_CPU: Gauge("{cpu}", "Node CPU by quantity: capacity, allocatable, scheduled (spec requests), pod_or_vm (what "
                             "the autoscaler sees), vm_usage, used (cores)"),
    NODE_MEM: Gauge("By", "Node memory by quantity: capacity, allocatable, scheduled, pod_or_vm, vm_usage, used"),
    NODE_RATIO: Gauge("1", "Node ratios: pod_or_vm, scheduled and used to allocatable; used to pod_or_vm"),
    NODE_PODS_BY_PHASE: Gauge("{pod}", "Pods bound to the node, by phase"),
    NODE_PODS_BY_SOURCE: Gauge("{pod}", "Reported pods, by the source of their value"),
    NODE_POD_SLOTS: Gauge("{pod}", "Pod capacity and allocatable pod count of the node"),
    POD_BLOCKING: Gauge("1", "1 for a pod that would block the cluster-autoscaler from removing its node, by reason "
                             "(no series for a pod that does not block)"),
    AUTOSCALER_UTILIZATION: Gauge("1", "The cluster-autoscaler's utilization of the node by resource: pod values over "
                                       "allocatable, as its simulator computes it"),
    AUTOSCALER_NODE_UTILIZATION: Gauge("1", "The node's utilization as the cluster-autoscaler judges it (max of cpu "
                                            "and memory, or the GPU's), labelled with the resource that gave it"),
    AUTOSCALER_THRESHOLD: Gauge("1", "The scale-down utilization threshold in force for the node (the GPU threshold "
                                     "on a GPU node)"),
    AUTOSCALER_STATE: Gauge("1", "The cluster-autoscaler's verdict on the node: 1 for the current state, 0 for the "
                                 "others"),
    AUTOSCALER_CANDIDATE: Gauge("1", "1 when the node is a scale-down candidate: underutilized and not disabled by "
                                     "annotation, whether or not pods block its removal"),
    AUTOSCALER_REMOVABLE: Gauge("1", "1 when the node is a scale-down candidate and no pod blocks its removal (what "
                                     "the verdict cannot see aside)"),
    AUTOSCALER_BLOCKING_PODS: Gauge("{pod}", "Pods that would block the node's removal, by reason (every reason "
                                             "always present)"),
}


class Point(NamedTuple):
    metric: str
    attributes: dict[str, str]
    value: float


def _bytes(nanos: int) -> float:
    # Whole bytes, rounded up as Quantity.Value() does (overcommit can leave fractions).
    return float(to_bytes(nanos))


def verdict_points(verdict: Verdict) -> Iterator[Point]:
    """The verdict's points: states and reasons always all present (an alert sees a count drop to 0), utilization
    only where known, one per-pod point per blocking pod (a pod that stops blocking has no series at all)."""
    utilization = verdict.utilization
    # A ratio Go computes as +Inf or NaN (DaemonSet/mirror pods taking all of the allocatable) is no measurement:
    # no point, as for an unknown one (docs/metrics.md); the state and the problems say what happened.
    for resource in AUTOSCALER_RESOURCES:
        if (value := getattr(utilization, resource)) is not None and math.isfinite(value):
            yield Point(AUTOSCALER_UTILIZATION, {"resource": resource}, value)
    if utilization.value is not None and math.isfinite(utilization.value):
        yield Point(AUTOSCALER_NODE_UTILIZATION, {"resource": utilization.resource}, utilization.value)
    if math.isfinite(verdict.threshold):  # NaN: the verdict is off, no threshold known
        yield Point(AUTOSCALER_THRESHOLD, {}, verdict.threshold)
    for state in STATES:
        yield Point(AUTOSCALER_STATE, {"state": state}, 1 if verdict.state == state else 0)
    yield Point(AUTOSCALER_CANDIDATE, {}, 1 if verdict.candidate else 0)
    yield Point(AUTOSCALER_REMOVABLE, {}, 1 if verdict.removable else 0)
    for blocker in verdict.blockers:
        yield Point(POD_BLOCKING, {"k8s.namespace.name": blocker.namespace, "k8s.pod.name": blocker.name,
                                   "k8s.pod.uid": blocker.uid, "reason": blocker.reason}, 1)
    for reason, n in verdict.blocking_counts().items():
        yield Point(AUTOSCALER_BLOCKING_PODS, {"reason": reason}, n)


def state_points(pods: Iterable[PodValue], summary: NodeSummary | None,
                 verdict: Verdict | None = None) -> Iterator[Point]:
    """Every product data point for the current state.

    Terminal pods and unknown node quantities (the Node not read yet or
    deleted, /proc unreadable) yield nothing, so those series are absent, never zero.
    ``verdict`` is computed once per export by the caller, which holds the clock.
    """
    for pod in pods:
        if not pod.reported:
            continue
        attrs = pod.identity
        sourced = {**attrs, "source": pod.source}
        yield Point(POD_CPU, sourced, to_float(pod.cpu))
        yield Point(POD_MEM, sourced, _bytes(pod.memory))
        if pod.vm is not None:
            vm = {**attrs, "neon.vm.name": pod.vm.name, "neon.vm.migration.role": pod.vm.migration_role or "none"}
            yield Point(VM_CPU, vm, to_float(pod.vm.cpu))
            yield Point(VM_MEM, vm, _bytes(pod.vm.memory))
    if verdict is not None:
        yield from verdict_points(verdict)
    if summary is None:
        return
    for quantity, amount in summary.cpu.quantities().items():
        yield Point(NODE_CPU, {"quantity": quantity}, to_float(amount))
    for quantity, amount in summary.memory.quantities().items():
        yield Point(NODE_MEM, {"quantity": quantity}, _bytes(amount))
    for resource, comparison in (("cpu", summary.cpu), ("memory", summary.memory)):
        for ratio, value in comparison.ratios().items():
            yield Point(NODE_RATIO, {"resource": resource, "ratio": ratio}, value)
    for phase, n in summary.pods_by_phase.items():
        yield Point(NODE_PODS_BY_PHASE, {"phase": phase}, n)
    for source, n in summary.pods_by_source.items():
        yield Point(NODE_PODS_BY_SOURCE, {"source": source}, n)
    for quantity, n in summary.pod_slots.items():
        yield Point(NODE_POD_SLOTS, {"quantity": quantity}, n)
