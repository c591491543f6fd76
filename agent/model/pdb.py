"""PodDisruptionBudgets as the cluster-autoscaler's drain rules read them: which pods one covers, and whether it
allows a disruption now. Pure records; the cluster-wide watch that fills them lives in source/.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

__all__ = ["PDBS", "Requirement", "LabelSelector", "PdbRecord", "selects", "OPERATORS", "MAX_SELECTOR_BYTES",
           "MAX_SELECTORS_BYTES", "EVERY_POD", "over_bound",
           "within_total"]

# The watched resource's name, as the agent's own metrics label it.
PDBS = "poddisruptionbudgets"
#: metav1.LabelSelectorOperator values; any other is refused at decode time (a problem) and matches nothing.
OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


#: The largest selector (its JSON as the API server sends it, matchLabels and matchExpressions) the agent keeps per
#: PDB. An honest selector names a few labels (well under 1 KiB); an ``In`` list of 100 values of the longest label
#: value (63 characters) is 6.6 KiB. A tenant may write about 1.5 MB (the API server's object limit), which the agent
#: would keep as some 210,000 Python strings (~14.5 MiB) on every node: beyond this bound the selector is not kept
#: and the PDB's coverage is unknown (docs/autoscaler.md#pdb-unknown).
MAX_SELECTOR_BYTES = 16 * 1024
#: The most selector bytes kept across every PDB of the cluster (``--max-pdbs`` of them at most): 10,000 honest PDBs
#: of about 100 bytes each take half of it. Kept selectors cost at most about 15 times their JSON size in memory (a
#: one-character ``In`` value: 4 bytes of JSON, a ~58-byte string and its pointer), so this bounds them to about
#: 30 MiB. A PDB that would pass it is kept as one over the bound.
MAX_SELECTORS_BYTES = 2 * 2**20


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
    # The size in bytes of its selector's JSON (what MAX_SELECTORS_BYTES counts).
    selector_bytes: int = 0
    # Not 0: the selector was over the agent's bound (its size in bytes) and is not kept: the PDB is read as
    # covering every pod of its namespace (EVERY_POD), whose verdict then says "PDB unknown", never free or blocked.
    selector_over_bound: int = 0


#: The selector of a PDB whose own is not kept: it matches every pod of the namespace, so whatever finds the PDBs
#: that may cover a pod finds this one too (and the drain rules read ``selector_over_bound``).
EVERY_POD = LabelSelector()


def over_bound(pdb: PdbRecord, size: int, why: str) -> PdbRecord:
    """``pdb`` without its selector of ``size`` bytes, which ``why`` (a bound) refused: coverage unknown."""
    return msgspec.structs.replace(pdb, selector=EVERY_POD, selector_bytes=0, selector_over_bound=size,
                                   problems=(*pdb.problems, f"selector of {size:,} bytes over {why}: not kept; the "
                                             "pods of its namespace read \"PDB unknown\""))


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


def within_total(pdb: PdbRecord, kept: int, limit: int = MAX_SELECTORS_BYTES) -> PdbRecord:
    """``pdb``, or ``pdb`` over the bound when its selector would take the ``kept`` selector bytes past ``limit``."""
    if pdb.selector_bytes and kept + pdb.selector_bytes > limit:
        return over_bound(pdb, pdb.selector_bytes, f"the agent's bound of {limit:,} selector bytes across PDBs")
    return pdb
