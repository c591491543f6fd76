"""PodDisruptionBudgets as the cluster-autoscaler's drain rules read them: which pods one covers, and whether it
allows a disruption now. Pure records; the cluster-wide watch that fills them lives in source/.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

__all__ = ["PDBS", "Requirement", "LabelSelector", "PdbRecord", "selects", "OPERATORS", "MAX_SELECTOR_BYTES",
           "MAX_SELECTORS_BYTES", "SMALL_SELECTOR_BYTES", "NAMESPACE_SELECTORS_BYTES", "EVERY_POD", "over_bound",
           "SelectorBudget", "coverage_unknown", "reads_labels", "too_many_pdbs", "as_kept"]

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
#: A selector of at most this many bytes is always kept and counts against no shared bound: an honest selector
#: (``app: web`` is 53 bytes as counted, two prefixed labels ~140), so no tenant's large selectors can push it out.
#: ``--max-pdbs`` (10,000) of them at this size cost what docs/benchmarks.md#poddisruptionbudgets-held measures.
SMALL_SELECTOR_BYTES = 256
#: The most bytes of larger selectors (over SMALL_SELECTOR_BYTES) kept across the cluster. Kept selectors cost at most
#: about 15 times their JSON size in memory (a two-character ``In`` value: 5 bytes of JSON, a ~51-byte string and its
#: pointer), so this bounds them to about 15 MiB. A PDB that would pass it is kept as one over the bound.
MAX_SELECTORS_BYTES = 2**20
#: The most bytes of larger selectors one namespace keeps (1/32 of MAX_SELECTORS_BYTES): a tenant filling its
#: namespace's share leaves the rest of the total to the others, so it takes 32 namespaces to fill it.
NAMESPACE_SELECTORS_BYTES = MAX_SELECTORS_BYTES // 32


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
    # The size in bytes of its selector's JSON (what the SelectorBudget counts when over SMALL_SELECTOR_BYTES).
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


def reads_labels(selector: LabelSelector | None) -> bool:
    """Whether ``selector`` reads a pod's labels: None covers no pod and ``{}`` every pod of its namespace,
    whatever the labels."""
    return selector is not None and bool(selector.match_labels or selector.match_expressions)


def coverage_unknown(pdb: PdbRecord, labels_over_bound: bool) -> bool:
    """Whether it is unknown if ``pdb`` (one of those that may cover a pod) covers the pod: its selector was not
    kept, or it reads labels and the pod's (``labels_over_bound``) were not."""
    return bool(pdb.selector_over_bound) or (labels_over_bound and reads_labels(pdb.selector))


def too_many_pdbs(held: int, limit: int | None) -> str:
    """Why the PDBs are unknown when the cluster holds ``held``, more than ``--max-pdbs`` ``limit``."""
    return (f"the cluster holds {held} PodDisruptionBudgets, more than the agent keeps (--max-pdbs {limit}): PDBs "
            f"are unknown until it holds {limit} or fewer")


class SelectorBudget:
    """Which PDBs keep their selector: every selector of at most SMALL_SELECTOR_BYTES; a larger one while its
    namespace keeps at most ``share`` bytes of them and the cluster ``limit`` (first come within those). The node
    state keeps one across events, ``explain`` makes one per dump: a PDB is judged the same either way."""

    __slots__ = ("limit", "share", "total", "_namespaces")

    def __init__(self, limit: int = MAX_SELECTORS_BYTES, share: int = NAMESPACE_SELECTORS_BYTES) -> None:
        self.limit, self.share = limit, share
        self.total = 0
        self._namespaces: dict[str, int] = {}

    def admit(self, pdb: PdbRecord, replaced: PdbRecord | None = None) -> PdbRecord:
        """``pdb`` (in place of ``replaced``, whose bytes are given back), or ``pdb`` over the bound when its
        selector would pass its namespace's share or the total."""
        if replaced is not None:
            self.release(replaced)
        size = pdb.selector_bytes
        if size <= SMALL_SELECTOR_BYTES:
            return pdb
        held = self._namespaces.get(pdb.namespace, 0)
        if held + size > self.share:
            return over_bound(pdb, size, f"its namespace's share of {self.share:,} bytes of selectors over "
                                         f"{SMALL_SELECTOR_BYTES:,} bytes")
        if self.total + size > self.limit:
            return over_bound(pdb, size, f"the agent's bound of {self.limit:,} bytes of selectors over "
                                         f"{SMALL_SELECTOR_BYTES:,} bytes across PDBs")
        self._namespaces[pdb.namespace] = held + size
        self.total += size
        return pdb

    def release(self, pdb: PdbRecord) -> None:
        """``pdb`` (as admitted) is gone: its bytes are free again."""
        size = pdb.selector_bytes
        if size <= SMALL_SELECTOR_BYTES:
            return
        self.total -= size
        left = self._namespaces[pdb.namespace] - size
        if left:
            self._namespaces[pdb.namespace] = left
        else:
            del self._namespaces[pdb.namespace]


def as_kept(pdbs: Iterable[PdbRecord], *, more: int = 0, max_pdbs: int | None = None,
            limit: int = MAX_SELECTORS_BYTES) -> tuple[list[PdbRecord] | None, SelectorBudget, int]:
    """The PDBs of a LIST (``more`` listed beyond those given) as the agent keeps them: each, in order, through one
    SelectorBudget of ``limit`` bytes, which is returned for the events that follow; None and how many the cluster
    holds when that is more than ``max_pdbs`` (too_many_pdbs says so). The node state and ``explain`` both read a
    LIST through it."""
    listed = list(pdbs)
    held = len(listed) + more
    budget = SelectorBudget(limit)
    if more or (max_pdbs is not None and held > max_pdbs):
        return None, budget, held
    return [budget.admit(p) for p in listed], budget, held
