"""Node-level comparisons: what the node offers, what the scheduler reserved,
what the autoscaler sees, and what is really used. Pure functions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import msgspec

from agent.model.node import NodeRecord
from agent.model.quantity import NANO, QuantityError, parse_quantity
from agent.model.valuation import SOURCE_VM_USAGE, PodValue

__all__ = ["Comparison", "NodeSummary", "PodTotals", "Usage", "pod_totals", "summarize", "RATIOS", "QUANTITIES"]

QUANTITIES = ("capacity", "allocatable", "scheduled", "pod_or_vm", "vm_usage", "used")
# name -> (numerator, denominator)
RATIOS = {
    "pod_or_vm_to_allocatable": ("pod_or_vm", "allocatable"),
    "scheduled_to_allocatable": ("scheduled", "allocatable"),
    "used_to_allocatable": ("used", "allocatable"),
    "used_to_pod_or_vm": ("used", "pod_or_vm"),
}


class Usage(msgspec.Struct, frozen=True):
    """What the host really uses, in nano-units (read at the edge, in agent.source.host_usage)."""

    cpu: int | None  # cores busy over the last interval; None until two samples exist
    memory: int  # MemTotal - MemAvailable


class Comparison(msgspec.Struct, frozen=True):
    """One resource, in nano-units; None where the source is unknown (Node not read, /proc unreadable)."""

    capacity: int | None
    allocatable: int | None
    scheduled: int
    pod_or_vm: int
    vm_usage: int
    used: int | None

    def quantities(self) -> dict[str, int]:
        return {q: v for q in QUANTITIES if (v := getattr(self, q)) is not None}

    def ratios(self) -> dict[str, float]:
        values = self.quantities()
        return {name: values[num] / values[den] for name, (num, den) in RATIOS.items()
                if num in values and values.get(den)}


class NodeSummary(msgspec.Struct, frozen=True):
    node: str
    node_present: bool
    cpu: Comparison
    memory: Comparison
    pod_slots: dict[str, int] = msgspec.field(default_factory=dict)  # capacity / allocatable pod counts
    pods_by_phase: dict[str, int] = msgspec.field(default_factory=dict)
    pods_by_source: dict[str, int] = msgspec.field(default_factory=dict)
    problems: tuple[str, ...] = ()


class PodTotals(msgspec.Struct, frozen=True):
    """Sums over the pods the autoscaler counts (terminal pods excluded), in nano-units."""

    pods: int
    cpu: int
    memory: int
    spec_cpu: int
    spec_memory: int
    by_vm_usage: int


def pod_totals(pods: Iterable[PodValue]) -> PodTotals:
    reported = [p for p in pods if p.reported]
    return PodTotals(
        pods=len(reported),
        cpu=sum(p.cpu for p in reported),
        memory=sum(p.memory for p in reported),
        spec_cpu=sum(p.spec_cpu for p in reported),
        spec_memory=sum(p.spec_memory for p in reported),
        by_vm_usage=sum(1 for p in reported if p.source == SOURCE_VM_USAGE),
    )


def _node_quantity(raw: dict[str, str], resource: str, where: str, problems: list[str]) -> int | None:
    text = raw.get(resource)
    if text is None:
        return None
    try:
        value = parse_quantity(text)
    except QuantityError as exc:
        problems.append(f"node {where}.{resource}: {exc}")
        return None
    return value if value >= 0 else None


def summarize(node_name: str, node: NodeRecord | None, pods: Iterable[PodValue], usage: Usage | None) -> NodeSummary:
    problems: list[str] = [] if node is None else list(node.problems)
    pods = list(pods)
    reported = [p for p in pods if p.reported]
    totals = pod_totals(reported)
    vm_peak: dict[tuple[str, str], tuple[int, int]] = {}
    for p in reported:
        if p.vm is not None:
            # Source and target of a live migration carry the same usage: one VM, counted once.
            key = (p.namespace, p.vm.name)
            cpu, mem = vm_peak.get(key, (0, 0))
            vm_peak[key] = (max(cpu, p.vm.cpu), max(mem, p.vm.memory))

    def comparison(resource: str, index: int) -> Comparison:
        cap = alloc = None
        if node is not None:
            cap = _node_quantity(node.capacity, resource, "status.capacity", problems)
            alloc = _node_quantity(node.allocatable, resource, "status.allocatable", problems)
        used = None if usage is None else (usage.cpu if resource == "cpu" else usage.memory)
        return Comparison(
            capacity=cap,
            allocatable=alloc,
            scheduled=totals.spec_cpu if resource == "cpu" else totals.spec_memory,
            pod_or_vm=totals.cpu if resource == "cpu" else totals.memory,
            vm_usage=sum(v[index] for v in vm_peak.values()),
            used=used,
        )

    slots = {}
    if node is not None:
        for where, raw in (("capacity", node.capacity), ("allocatable", node.allocatable)):
            value = _node_quantity(raw, "pods", f"status.{where}", problems)
            if value is not None:
                slots[where] = value // NANO
    return NodeSummary(
        node=node_name,
        node_present=node is not None,
        cpu=comparison("cpu", 0),
        memory=comparison("memory", 1),
        pod_slots=slots,
        pods_by_phase=dict(Counter(p.phase or "Unknown" for p in pods)),
        pods_by_source=dict(Counter(p.source for p in reported)),
        problems=tuple(problems),
    )
