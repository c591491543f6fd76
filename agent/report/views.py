"""JSON-ready views of pods, node comparisons and the agent's own signals.

One place, shared by ``explain`` and the debug endpoint, so what a person
reads and what a script reads cannot disagree.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from typing import Any

from agent.model.node_summary import NodeSummary, pod_totals
from agent.model.problems import MAX_PROBLEMS_SHOWN, at_most
from agent.model.quantity import to_bytes, to_float
from agent.model.scale_down import go_ratio_text
from agent.model.units import le_label
from agent.model.valuation import PodValue
from agent.pipeline.state import NodeSnapshot
from agent.report.json_body import item_bytes, json_body
from agent.report.verdict_view import VerdictView
from agent.telemetry.stats import HistogramSnapshot, StatsSnapshot

__all__ = ["MAX_PROBLEMS_SHOWN", "pod_key", "pod_report", "pods_report", "totals_report",
           "sorted_values", "summary_report", "runtime_report",
           "verdict_report"]


def sorted_values(values: Iterable[PodValue]) -> list[PodValue]:
    return sorted(values, key=pod_key)


#: Problems shown per pod: a pod read by the tolerant path can carry one per malformed field; past this many the rest
#: are counted in one last line.


def pod_report(v: PodValue) -> dict[str, Any]:
    """What the agent exports for one pod and why (no env, secrets or other annotations). Bounded whatever the pod
    holds: its contributions are the record's containers (at most MAX_CONTAINERS of each list, the rest folded, see
    agent.model.container_bound), its problems at most MAX_PROBLEMS_SHOWN lines."""
    return {
        "namespace": v.namespace,
        "name": v.name,
        "uid": v.uid,
        "phase": v.phase,
        "reported": v.reported,
        "source": v.source,
        "cpu_cores": to_float(v.cpu),
        "memory_bytes": to_bytes(v.memory),
        "problems": at_most(v.problems, MAX_PROBLEMS_SHOWN),
        "contributions": [
            {"name": c.name, "kind": c.kind,
             "cpu_cores": None if c.cpu is None else to_float(c.cpu),
             "memory_bytes": None if c.memory is None else to_bytes(c.memory),
             "note": c.note}
            for c in v.contributions
        ],
        "vm": None if v.vm is None else {
            # Spelled as the metrics' neon.vm.migration.role: source, target or none.
            "name": v.vm.name, "migration_role": v.vm.migration_role or "none",
            "cpu_cores": to_float(v.vm.cpu), "memory_bytes": to_bytes(v.vm.memory),
        },
    }


def totals_report(values: Iterable[PodValue]) -> dict[str, Any]:
    totals = pod_totals(values)
    return {"pods_reported": totals.pods, "cpu_cores": to_float(totals.cpu), "memory_bytes": to_bytes(totals.memory)}


def pod_key(v: PodValue) -> tuple[str, str, str]:
    """The order /debug/pods lists pods in, and where a page resumes."""
    return v.namespace, v.name, v.uid


def pods_report(values: Iterable[PodValue], after: tuple[str, str, str] | None = None, limit: int | None = None,
                max_bytes: int | None = None, reserved: int = 0) -> dict[str, Any]:
    """Every pod past ``after`` in pod_key order, at most ``limit`` of them and, past the first, only while the page
    as served (agent.report.json_body: these keys, and ``reserved`` bytes of the keys the caller adds) stays within
    ``max_bytes``; ``remaining``: how many more follow. The totals are always the node's."""
    ordered = sorted_values(values)
    start = bisect.bisect_right(ordered, after, key=pod_key) if after is not None else 0
    end = len(ordered) if limit is None else min(len(ordered), start + limit)
    totals = totals_report(ordered)
    pods: list[dict[str, Any]] = []
    # The page without pods, and the 2 bytes its "[]" grows by when it opens onto lines for them.
    size = reserved + len(json_body({"pods": [], "totals": totals, "remaining": len(ordered)})) + 2
    for v in ordered[start:end]:
        report = pod_report(v)
        if max_bytes is not None:
            size += item_bytes(report, 2)
            if pods and size > max_bytes:
                break
        pods.append(report)
    return {"pods": pods, "totals": totals, "remaining": len(ordered) - start - len(pods)}


def summary_report(s: NodeSummary) -> dict[str, Any]:
    """Node comparisons in cores and bytes."""
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


def _plain(value: Any) -> Any:
    """A snapshot field as JSON: tuple keys joined with '/', a histogram as its cumulative buckets."""
    if isinstance(value, HistogramSnapshot):
        return {"count": value.count, "sum": value.sum,
                "buckets": [{"le": le_label(b), "count": n} for b, n in value.cumulative()]}
    if isinstance(value, Mapping):
        return {"/".join(k) if isinstance(k, tuple) else k: v for k, v in value.items()}
    return value


def runtime_report(s: StatsSnapshot, node: NodeSnapshot) -> dict[str, Any]:
    """The agent's own signals: every field of the snapshot by its own name (a field added there shows here), and
    what the node state knows of the watches."""
    data = {name: _plain(getattr(s, name)) for name in s.__struct_fields__}
    k = node.kubernetes
    data.update(synced=node.synced, node_listed=node.node_listed, pods_cached=len(node.pods),
                resource_version=node.resource_version,
                kubernetes={"server_version": k.server_version or None, "rules": k.rules.name, "source": k.source,
                            "warning": k.warning})
    return data


def json_ratio(ratio: float | None) -> float | str | None:
    """A ratio for JSON, which has no Inf or NaN: the number, null when unknown, or Go's value spelled "+Inf",
    "-Inf" or "NaN" (DaemonSet/mirror pods requesting all of the allocatable leave the autoscaler dividing by 0)."""
    return go_ratio_text(ratio) if ratio is not None and not math.isfinite(ratio) else ratio


def verdict_report(v: VerdictView) -> dict[str, Any]:
    """The cluster-autoscaler's verdict on one node, the schema docs/operations.md documents for ``explain --output
    json`` and ``/debug/node``: ratios as fractions (0.5, not 50), pods in cores and bytes, null where unknown."""
    u = v.utilization
    return {
        "node": v.node,
        "state": v.state,
        "headline": v.headline,
        "scale_down_candidate": v.candidate,
        "removable": v.removable,
        "utilization": {"cpu": json_ratio(u.cpu), "memory": json_ratio(u.memory), "gpu": json_ratio(u.gpu),
                        "value": json_ratio(u.value), "resource": u.resource or None},
        "threshold": None if math.isnan(v.threshold) else v.threshold,  # NaN: the verdict is off
        "blockers": [{"namespace": b.namespace, "name": b.name, "uid": b.uid, "reason": b.reason, "detail": b.detail}
                     for b in v.blockers],
        "blocking_pods": v.blocking_counts,
        "differing": [{"namespace": d.namespace, "name": d.name, "uid": d.uid,
                       "cpu_cores": to_float(d.cpu), "memory_bytes": to_bytes(d.memory),
                       "scheduler_cpu_cores": to_float(d.scheduler_cpu),
                       "scheduler_memory_bytes": to_bytes(d.scheduler_memory), "why": d.why}
                      for d in (row.value for row in v.differing)],
        "pdbs_known": v.pdbs_known,
        "controllers_known": v.controllers_known,
        "pdb_risks": [{"namespace": r.namespace, "name": r.name, "disruptions_allowed": r.disruptions_allowed,
                       "pods": r.pods, "unknown": r.unknown} for r in v.pdb_risks],
        "pdb_risks_more": v.pdb_risks_more,
        "pdb_risk": v.pdb_risk or None,
        "release": v.release,
        "problems": list(v.problems),  # at most MAX_PROBLEMS_SHOWN (verdict_view)
        "cannot_see": list(v.cannot_see),
    }
