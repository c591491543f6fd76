"""PodDisruptionBudgets as the cluster-autoscaler's drain rules read them: which pods one covers, and whether it
allows a disruption now. Pure records; the cluster-wide watch that fills them lives in source/.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

__all__ = ["PDBS", "Requirement", "LabelSelector", "PdbRecord", "selects"]

# The watched resource's name, as the agent's own metrics label it.
PDBS = "poddisruptionbudgets"


class Requirement(msgspec.Struct, frozen=True, kw_only=True):
    """One ``matchExpressions`` entry: In, NotIn, Exists or DoesNotExist."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


class LabelSelector(msgspec.Struct, frozen=True, kw_only=True):
    match_labels: dict[str, str] = msgspec.field(default_factory=dict)
    match_expressions: tuple[Requirement, ...] = ()


class PdbRecord(msgspec.Struct, frozen=True, kw_only=True):
    uid: str
    namespace: str
    name: str
    resource_version: str = ""
    # None: the PDB has no selector, which matches no pod (policy/v1); an empty selector matches every pod of the
    # namespace.
    selector: LabelSelector | None = None
    # status.disruptionsAllowed: 0 blocks the eviction of every pod it covers.
    disruptions_allowed: int = 0
    problems: tuple[str, ...] = ()


def selects(pdb: PdbRecord, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether ``pdb`` covers a pod of ``namespace`` with ``labels`` (metav1.LabelSelectorAsSelector semantics)."""
    raise NotImplementedError  # issue 31: model helper
