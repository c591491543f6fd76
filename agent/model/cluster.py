"""A cluster dump seen node by node: each node compared over its own pods only.

``explain`` on ``kubectl get nodes,pods -A`` must answer "why is this node
full?" per node: one node's allocatable against that node's pods, never the
sum of every pod in the dump. Unscheduled pods count in no node. Pure
functions: grouping, ordering and filtering; ``summarize`` does the sums.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec

from agent.model.node import NodeRecord
from agent.model.node_summary import Comparison, NodeSummary, summarize
from agent.model.valuation import PodValue

__all__ = ["NodeGroup", "ClusterView", "ClusterTotals", "group_by_node", "SORTS", "order", "pod_filter",
           "cluster_totals", "sections"]

SORTS = ("busy", "cpu", "memory", "name")


class NodeGroup(msgspec.Struct, frozen=True):
    name: str
    node: NodeRecord | None
    pods: tuple[PodValue, ...]  # every pod bound to the node, terminal ones included
    summary: NodeSummary

    def ratio(self, resource: str) -> float | None:
        """pod_or_vm / allocatable: what the cluster-autoscaler sees against what the node offers."""
        comparison = self.summary.cpu if resource == "cpu" else self.summary.memory
        return comparison.ratios().get("pod_or_vm_to_allocatable")

    def busiest(self) -> float | None:
        known = [r for r in (self.ratio("cpu"), self.ratio("memory")) if r is not None]
        return max(known) if known else None


class ClusterView(msgspec.Struct, frozen=True):
    nodes: tuple[NodeGroup, ...]
    unscheduled: tuple[PodValue, ...]


def group_by_node(pods: Iterable[tuple[str, PodValue]], nodes: Iterable[NodeRecord]) -> ClusterView:
    """One group per Node object and per spec.nodeName seen without one; ``pods`` are (nodeName, value)."""
    bound: dict[str, list[PodValue]] = {}
    unscheduled: list[PodValue] = []
    for node_name, value in pods:
        if node_name:
            bound.setdefault(node_name, []).append(value)
        else:
            unscheduled.append(value)
    records = {n.name: n for n in nodes}
    names = list(records) + [name for name in bound if name not in records]
    groups = tuple(NodeGroup(name, records.get(name), tuple(bound.get(name, ())),
                             summarize(name, records.get(name), bound.get(name, ()), None))
                   for name in names)
    return ClusterView(groups, tuple(unscheduled))


def _descending(value: float | None) -> tuple[int, float]:
    """Known values first, largest first; unknown (no allocatable) last."""
    return (0, -value) if value is not None else (1, 0.0)


def _pod_key(sort: str, group: NodeGroup | None) -> Callable[[PodValue], tuple]:
    """Pods that hold nothing (Succeeded, Failed) last, except by name."""
    def name(v: PodValue) -> tuple:
        return (v.namespace, v.name, v.uid)

    if sort == "name":
        return name
    if sort == "memory":
        return lambda v: (not v.reported, -v.memory, -v.cpu, *name(v))
    if sort == "cpu" or group is None:
        return lambda v: (not v.reported, -v.cpu, -v.memory, *name(v))
    cpu = group.summary.cpu.allocatable
    mem = group.summary.memory.allocatable

    def share(v: PodValue) -> tuple:
        # The larger share of the node's allocatable the pod takes: the pods that fill the node come first.
        shares = [v.cpu / cpu if cpu else 0.0, v.memory / mem if mem else 0.0]
        return (not v.reported, -max(shares), -v.cpu, *name(v))
    return share


def order(view: ClusterView, sort: str = "busy") -> ClusterView:
    """Nodes busiest first (``busy``: the larger of the cpu and memory pod_or_vm / allocatable),
    by one resource's ratio, or by name; pods within each node in the same spirit."""
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
    node_key: Callable[[NodeGroup], tuple] = {
        "busy": lambda g: (*_descending(g.busiest()), g.name),
        "cpu": lambda g: (*_descending(g.ratio("cpu")), g.name),
        "memory": lambda g: (*_descending(g.ratio("memory")), g.name),
        "name": lambda g: (0, 0.0, g.name),
    }[sort]
    nodes = tuple(NodeGroup(g.name, g.node, tuple(sorted(g.pods, key=_pod_key(sort, g))), g.summary)
                  for g in sorted(view.nodes, key=node_key))
    return ClusterView(nodes, tuple(sorted(view.unscheduled, key=_pod_key(sort if sort != "busy" else "cpu", None))))


def pod_filter(namespace: str | None = None, source: str | None = None,
               problems: bool = False) -> Callable[[PodValue], bool] | None:
    """Which pod rows to show; None when every pod is shown. Node sums always cover every pod of the node."""
    if namespace is None and source is None and not problems:
        return None
    return lambda v: ((namespace is None or v.namespace == namespace) and (source is None or v.source == source)
                      and (not problems or bool(v.problems)))


def sections(view: ClusterView, shown: Callable[[PodValue], bool] | None = None
             ) -> tuple[list[tuple[NodeGroup, list[PodValue]]], list[PodValue]]:
    """The (node, pod rows) to show and the unscheduled rows; with a filter, nodes without a shown pod are left out."""
    keep = shown or (lambda v: True)
    groups = [(g, [p for p in g.pods if keep(p)]) for g in view.nodes]
    if shown is not None:
        groups = [(g, pods) for g, pods in groups if pods]
    return groups, [p for p in view.unscheduled if keep(p)]


class ClusterTotals(msgspec.Struct, frozen=True):
    """Sums over the nodes whose allocatable is known; nodes without a Node object are listed apart."""

    cpu: Comparison
    memory: Comparison
    nodes: int
    nodes_without_allocatable: tuple[str, ...]
    unscheduled: int


def _sum(groups: list[NodeGroup], resource: str) -> Comparison:
    parts = [g.summary.cpu if resource == "cpu" else g.summary.memory for g in groups]
    parts = [c for c in parts if c.allocatable is not None]

    def total(name: str) -> int:
        return sum(getattr(c, name) or 0 for c in parts)

    known = bool(parts)
    return Comparison(capacity=total("capacity") if known else None,
                      allocatable=total("allocatable") if known else None, scheduled=total("scheduled"),
                      pod_or_vm=total("pod_or_vm"), vm_usage=total("vm_usage"), used=None)


def cluster_totals(view: ClusterView) -> ClusterTotals:
    groups = list(view.nodes)
    missing = tuple(g.name for g in groups
                    if g.summary.cpu.allocatable is None and g.summary.memory.allocatable is None)
    return ClusterTotals(_sum(groups, "cpu"), _sum(groups, "memory"), len(groups), missing,
                         sum(1 for v in view.unscheduled if v.reported))
