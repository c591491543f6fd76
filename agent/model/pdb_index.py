"""Which PodDisruptionBudgets cover a pod, found without matching it against every PDB of the cluster.

A PDB covers pods of its own namespace only, so PDBs are grouped by namespace, and within it by their selector's
first matchLabels pair; a pod's labels are read as a map once per pod, not once per (pod, PDB) pair; and a PDB
that changes is checked against the node's pods with a substring test on their joined label strings before any of
them is split. The matches, and their order (the
cluster's PDB order, which the verdict's "first PDB that allows no disruption" reads), are exactly those of
checking every PDB with :func:`agent.model.pdb.selects`.

Pure: plain data in, plain data out; the node state keeps one :class:`PdbIndex` and updates it per event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from agent.model.pdb import LabelSelector, PdbRecord, selects
from agent.model.pod import EvictionFacts

__all__ = ["PdbIndex", "by_namespace", "covering", "may_cover", "may_cover_pod", "may_select"]


def may_select(selector: LabelSelector | None, labels: str) -> bool:
    """False where ``selector`` cannot select a pod whose labels are ``labels`` (EvictionFacts.labels, joined
    "key\\0value\\0..."), read without splitting it; True: it may, and only :func:`selects` says.

    Every label of the map EvictionFacts.label_map() builds is two neighbouring parts of the string, so a
    matchLabels pair it holds is in the string as "key\\0value", and a key an In or Exists requirement needs as
    "key\\0". A C substring search over the string costs far less than splitting a pod of many labels.
    """
    if selector is None:
        return False
    for key, value in selector.match_labels.items():
        if f"{key}\0{value}" not in labels:
            return False
    return all(f"{r.key}\0" in labels for r in selector.match_expressions if r.operator in ("In", "Exists"))


def covering(candidates: Iterable[PdbRecord], namespace: str, labels: Mapping[str, str]) -> list[PdbRecord]:
    """The ``candidates`` (in their order) that cover a pod of ``namespace`` with ``labels``."""
    return [p for p in candidates if selects(p, namespace, labels)]


def may_cover_pod(pdb: PdbRecord, namespace: str, facts: EvictionFacts) -> bool:
    """Whether ``pdb`` covers, or may cover, a pod of ``namespace`` with ``facts``: with its labels over the agent's
    bound, any PDB of the namespace with a selector may (whether one that reads labels covers it is unknown:
    agent.model.pdb.coverage_unknown; no selector covers no pod); else the joined labels are tested
    (:func:`may_select`) before they are split."""
    if pdb.namespace != namespace:
        return False
    if facts.labels_over_bound:
        return pdb.selector is not None
    return may_select(pdb.selector, facts.labels) and selects(pdb, namespace, facts.label_map())


def may_cover(candidates: Iterable[PdbRecord], namespace: str, facts: EvictionFacts) -> list[PdbRecord]:
    """The ``candidates`` (in their order) that cover, or may cover, a pod of ``namespace`` with ``facts``
    (:func:`may_cover_pod`; the labels split once for all of them)."""
    if facts.labels_over_bound:
        return [p for p in candidates if may_cover_pod(p, namespace, facts)]
    return covering(candidates, namespace, facts.label_map())


def by_namespace(pdbs: Sequence[PdbRecord]) -> dict[str, list[PdbRecord]]:
    """``pdbs`` grouped by namespace, each group in their order (duplicates kept, as a scan of all would see
    them)."""
    grouped: dict[str, list[PdbRecord]] = {}
    for pdb in pdbs:
        grouped.setdefault(pdb.namespace, []).append(pdb)
    return grouped


class PdbIndex:
    """The cluster's PDBs by uid, in the order they arrived (a change keeps a PDB's place, as a dict does), by
    namespace in the same order, and by the first matchLabels pair of their selector (a pod without that label is
    covered by none of them). Written by one thread (the node state's writer)."""

    __slots__ = ("_all", "_place", "_namespaces", "_keyed", "_unkeyed", "_next")

    def __init__(self, pdbs: Iterable[PdbRecord] = ()) -> None:
        self._all: dict[str, PdbRecord] = {}
        self._place: dict[str, int] = {}  # uid -> its place in the cluster's order
        self._namespaces: dict[str, dict[str, PdbRecord]] = {}
        # namespace -> (key, value) -> the uids whose selector's first matchLabels pair it is; namespace -> the uids
        # of selectors without matchLabels (candidates for every pod). A PDB without a selector covers nothing and
        # is in neither.
        self._keyed: dict[str, dict[tuple[str, str], set[str]]] = {}
        self._unkeyed: dict[str, set[str]] = {}
        self._next = 0
        for pdb in pdbs:
            self.put(pdb)

    def __len__(self) -> int:
        return len(self._all)

    def get(self, uid: str) -> PdbRecord | None:
        """The PDB ``uid``, if held."""
        return self._all.get(uid)

    def values(self) -> tuple[PdbRecord, ...]:
        """Every PDB, in the cluster's order."""
        return tuple(self._all.values())

    def in_namespace(self, namespace: str) -> Iterable[PdbRecord]:
        """The PDBs of ``namespace``, in the cluster's order."""
        return self._namespaces.get(namespace, {}).values()

    def covering(self, namespace: str, labels: Mapping[str, str]) -> tuple[PdbRecord, ...]:
        """The PDBs that cover a pod of ``namespace`` with ``labels``, in the cluster's order: only those whose first
        matchLabels pair the pod has, and those without matchLabels, are checked."""
        group = self._namespaces.get(namespace)
        if not group:
            return ()
        keyed = self._keyed.get(namespace, {})
        uids = set(self._unkeyed.get(namespace, ()))
        if len(labels) <= len(keyed):  # the smaller side is walked
            for pair in labels.items():
                uids.update(keyed.get(pair, ()))
        else:
            for (key, value), found in keyed.items():
                if labels.get(key) == value:
                    uids.update(found)
        return tuple(covering((group[uid] for uid in sorted(uids, key=self._place.__getitem__)), namespace, labels))

    def place(self, pdb: PdbRecord) -> int:
        """``pdb``'s (held here) place in the cluster's order."""
        return self._place[pdb.uid]

    def in_order(self, pdbs: Iterable[PdbRecord]) -> tuple[PdbRecord, ...]:
        """``pdbs`` (held here) in the cluster's order."""
        return tuple(sorted(pdbs, key=lambda p: self._place[p.uid]))

    def put(self, pdb: PdbRecord) -> PdbRecord | None:
        """Store ``pdb``; the version it replaced."""
        previous = self._all.get(pdb.uid)
        self._all[pdb.uid] = pdb
        if previous is not None:
            self._unkey(previous)
        self._key(pdb)
        if previous is None:
            self._place[pdb.uid] = self._next
            self._next += 1
            self._namespaces.setdefault(pdb.namespace, {})[pdb.uid] = pdb
        elif previous.namespace == pdb.namespace:
            self._namespaces[pdb.namespace][pdb.uid] = pdb
        else:  # a uid in another namespace (only a hand-written input does it): it keeps its place in the order
            self._drop(previous)
            group = self._namespaces.setdefault(pdb.namespace, {})
            group[pdb.uid] = pdb
            self._namespaces[pdb.namespace] = {p.uid: p for p in self.in_order(group.values())}
        return previous

    def pop(self, uid: str) -> PdbRecord | None:
        """Remove the PDB ``uid``; what it was (None: not held)."""
        previous = self._all.pop(uid, None)
        if previous is not None:
            self._drop(previous)
            self._unkey(previous)
            del self._place[uid]
        return previous

    @staticmethod
    def _first_pair(pdb: PdbRecord) -> tuple[str, str] | None:
        return next(iter(pdb.selector.match_labels.items()), None) if pdb.selector is not None else None

    def _key(self, pdb: PdbRecord) -> None:
        if pdb.selector is None:
            return
        pair = self._first_pair(pdb)
        if pair is None:
            self._unkeyed.setdefault(pdb.namespace, set()).add(pdb.uid)
        else:
            self._keyed.setdefault(pdb.namespace, {}).setdefault(pair, set()).add(pdb.uid)

    def _unkey(self, pdb: PdbRecord) -> None:
        if pdb.selector is None:
            return
        pair = self._first_pair(pdb)
        if pair is None:
            held = self._unkeyed[pdb.namespace]
            held.discard(pdb.uid)
            if not held:
                del self._unkeyed[pdb.namespace]
            return
        keyed = self._keyed[pdb.namespace]
        keyed[pair].discard(pdb.uid)
        if not keyed[pair]:
            del keyed[pair]
            if not keyed:
                del self._keyed[pdb.namespace]

    def _drop(self, pdb: PdbRecord) -> None:
        group = self._namespaces[pdb.namespace]
        del group[pdb.uid]
        if not group:
            del self._namespaces[pdb.namespace]
