"""Plain-data views of evaluated pods, shared by ``explain`` and the debug endpoint."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.model.quantity import to_bytes, to_float
from agent.model.valuation import PodValue

__all__ = ["pod_report", "pods_report", "totals_report", "sorted_values"]


def sorted_values(values: Iterable[PodValue]) -> list[PodValue]:
    return sorted(values, key=lambda v: (v.namespace, v.name, v.uid))


def pod_report(v: PodValue) -> dict[str, Any]:
    """What the agent exports for one pod and why (no env, secrets or other annotations)."""
    return {
        "namespace": v.namespace,
        "name": v.name,
        "uid": v.uid,
        "phase": v.phase,
        "reported": v.reported,
        "source": v.source,
        "cpu_cores": to_float(v.cpu),
        "memory_bytes": to_bytes(v.memory),
        "problems": [str(p) for p in v.problems],
        "contributions": [
            {"name": c.name, "kind": c.kind,
             "cpu_cores": None if c.cpu is None else to_float(c.cpu),
             "memory_bytes": None if c.memory is None else to_bytes(c.memory),
             "note": c.note}
            for c in v.contributions
        ],
        "vm": None if v.vm is None else {
            "name": v.vm.name, "migration_role": v.vm.migration_role or None,
            "cpu_cores": to_float(v.vm.cpu), "memory_bytes": to_bytes(v.vm.memory),
        },
    }


def totals_report(values: Iterable[PodValue]) -> dict[str, Any]:
    reported = [v for v in values if v.reported]
    return {
        "pods_reported": len(reported),
        "cpu_cores": to_float(sum(v.cpu for v in reported)),
        "memory_bytes": to_bytes(sum(v.memory for v in reported)),
    }


def pods_report(values: Iterable[PodValue]) -> dict[str, Any]:
    ordered = sorted_values(values)
    return {"pods": [pod_report(v) for v in ordered], "totals": totals_report(ordered)}
