"""Node-level comparisons: what the node offers, what the scheduler reserved,
what the autoscaler sees, and what is really used. Pure functions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.model.node import NodeRecord
from agent.model.quantity import NANO, QuantityError, parse_quantity, to_bytes, to_float
from agent.source.host_usage import Usage
from agent.model.valuation import PodValue

__all__ = ["Comparison", "NodeSummary", "summarize", "RATIOS", "QUANTITIES", "summary_report"]

QUANTITIES = ("capacity", "allocatable", "scheduled", "pod_or_vm", "vm_usage", "used")
# name -> (numerator, denominator)
RATIOS = {
    "pod_or_vm_to_allocatable": ("pod_or_vm", "allocatable"),
    "scheduled_to_allocatable": ("scheduled", "allocatable"),
    "used_to_allocatable": ("used", "allocatable"),
    "used_to_pod_or_vm": ("used", "pod_or_vm"),
}


@dataclass(frozen=True)
class Comparison:
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


@dataclass(frozen=True)
class NodeSummary:
    node: str
    node_present: bool
    cpu: Comparison
    memory: Comparison
    pod_slots: dict[str, int] = field(default_factory=dict)  # capacity / allocatable pod counts
    pods_by_phase: dict[str, int] = field(default_factory=dict)
    pods_by_source: dict[str, int] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


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
            scheduled=sum(p.spec_cpu if resource == "cpu" else p.spec_memory for p in reported),
            pod_or_vm=sum(p.cpu if resource == "cpu" else p.memory for p in reported),
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


def summary_report(s: NodeSummary) -> dict[str, Any]:
    """JSON-ready: cores and bytes."""
    return {
        "node": s.node,
        "node_present": s.node_present,
        "cpu_cores": {q: to_float(v) for q, v in s.cpu.quantities().items()},
        "memory_bytes": {q: to_bytes(v) for q, v in s.memory.quantities().items()},
        "ratios": {"cpu": s.cpu.ratios(), "memory": s.memory.ratios()},
        "pod_slots": s.pod_slots,
        "pods_by_phase": s.pods_by_phase,
        "pods_by_source": s.pods_by_source,
        "problems": list(s.problems),
    }
