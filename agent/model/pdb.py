"""PodDisruptionBudgets as the cluster-autoscaler's drain rules read them: which pods one covers, and whether it
allows a disruption now. Pure records; the cluster-wide watch that fills them lives in source/.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

__all__ = ["PDBS", "Requirement", "LabelSelector", "PdbRecord", "selects", "OPERATORS"]

# The watched resource's name, as the agent's own metrics label it.
PDBS = "poddisruptionbudgets"
#: metav1.LabelSelectorOperator values; any other is refused at decode time (a problem) and matches nothing.
OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


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


def _holds(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(requirement.key)
    operator = requirement.operator
    if (operator in ("In", "NotIn")) != bool(requirement.values):
        return False  # In/NotIn need values, Exists/DoesNotExist take none: LabelSelectorAsSelector refuses it
    if operator == "In":
        return value is not None and value in requirement.values
    if operator == "NotIn":
        return value is None or value not in requirement.values  # a pod without the key is not in the set
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    return False  # an unknown operator: LabelSelectorAsSelector fails, and such a PDB covers no pod


def selects(pdb: PdbRecord, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether ``pdb`` covers a pod of ``namespace`` with ``labels`` (metav1.LabelSelectorAsSelector semantics).

    PDBs only cover pods of their own namespace; no selector covers nothing; an empty selector covers every pod of
    the namespace; matchLabels and every matchExpressions entry must all hold.
    """
    selector = pdb.selector
    if selector is None or pdb.namespace != namespace:
        return False
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    return all(_holds(requirement, labels) for requirement in selector.match_expressions)
