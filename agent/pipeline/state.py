"""What the agent knows about its node: every pod bound to it, evaluated, the Node, the host's usage, and the
cluster's PodDisruptionBudgets with the autoscaler's settings, from which the autoscaler's verdict is computed.

Written only by the handler thread. Readers (exporters, the debug endpoint)
take ``snapshot()``, one immutable value, so an export never sees half an
update and no reader needs to know who wrote it.
"""

from __future__ import annotations

import threading
from bisect import bisect
from collections.abc import Iterable, Mapping

import msgspec

from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER, AutoscalerSettings
from agent.model.node import NodeRecord
from agent.model.node_summary import NodeSummary, Usage, summarize
from agent.model.pdb import MAX_SELECTORS_BYTES, PdbRecord, SelectorBudget, as_kept, too_many_pdbs
from agent.model.pdb_index import PdbIndex, may_cover, may_cover_pod
from agent.model.rules import NEWEST, Rules
from agent.model.scale_down import Verdict, node_verdict, verdict_off
from agent.model.valuation import PodValue

__all__ = ["NodeState", "NodeSnapshot", "KubernetesInfo", "VerdictCache"]


class KubernetesInfo(msgspec.Struct, frozen=True):
    """Whose request arithmetic the values follow, and why."""

    rules: Rules
    # The API server's gitVersion; "" until read, and always with --kubernetes-version or a replay.
    server_version: str = ""
    # "apiserver" (read from /version), "flag" (--kubernetes-version) or "default" (the newest, nothing read yet).
    source: str = "default"
    # The one line said when the version is outside the supported releases.
    warning: str | None = None


DEFAULT_KUBERNETES = KubernetesInfo(NEWEST)


class VerdictCache:
    """The last verdict a node state's snapshots computed, kept while it is exact: for the same inputs (the state's
    version and the autoscaler's settings) and while time has not passed the point the verdict holds until
    (``Verdict.holds_until``). Every export and every view asks for the verdict; at 2,000 pods recomputing it each
    time cost as much as the rest of the node's points. Shared by the snapshots of one state; any thread may ask."""

    __slots__ = ("_lock", "_entry")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entry: tuple[object, float, Verdict] | None = None  # (inputs, computed at, verdict)

    def get(self, inputs: object, now: float) -> Verdict | None:
        with self._lock:
            entry = self._entry
        if entry is None or entry[0] != inputs or now < entry[1]:
            return None  # other inputs, or a clock behind the one it was computed at
        until = entry[2].holds_until
        return entry[2] if until is None or now <= until else None

    def put(self, inputs: object, now: float, verdict: Verdict) -> None:
        with self._lock:
            self._entry = (inputs, now, verdict)


class NodeSnapshot(msgspec.Struct, frozen=True):
    node_name: str
    pods: tuple[PodValue, ...]
    node: NodeRecord | None
    usage: Usage | None
    # The initial LIST of pods, and of the Node, has been handled.
    synced: bool
    node_listed: bool
    # The newest pod resourceVersion handled (event, bookmark or LIST).
    resource_version: str = ""
    kubernetes: KubernetesInfo = DEFAULT_KUBERNETES
    # Every PDB of the cluster; None: not known (the watch is off, not yet listed, or over its limit).
    pdbs: tuple[PdbRecord, ...] | None = None
    autoscaler: AutoscalerSettings = DEFAULT_AUTOSCALER
    # Why the PDBs are not known though watched ("" when they are, or are not watched).
    pdbs_problem: str = ""
    # Bumped by every change of what the verdict reads (pods, Node, the PDBs that cover or could cover the node's
    # pods, rules): the key of ``verdicts``.
    version: int = 0
    verdicts: VerdictCache | None = None  # the state's; None: computed each time
    # The PDBs that cover each pod, by uid, kept by the state as PDBs and pods change (None: PDBs not known).
    covering: Mapping[str, tuple[PdbRecord, ...]] | None = None
    # Why the verdict is off (the autoscaler's settings given are unusable); "" when it is computed.
    verdict_off: str = ""

    def summary(self) -> NodeSummary:
        return summarize(self.node_name, self.node, self.pods, self.usage)

    def verdict(self, now: float) -> Verdict:
        """The cluster-autoscaler's verdict on the node at wall-clock ``now`` (model.scale_down), from the state's
        cache while it is exact; off (state unknown, and why) when the autoscaler's settings were unusable."""
        if self.verdict_off:
            return verdict_off(node_name=self.node_name, why=self.verdict_off)
        if self.verdicts is None:
            return self._verdict(now)
        inputs = (self.version, self.autoscaler)
        verdict = self.verdicts.get(inputs, now)
        if verdict is None:
            verdict = self._verdict(now)
            self.verdicts.put(inputs, now, verdict)
        return verdict

    def _verdict(self, now: float) -> Verdict:
        return node_verdict(node_name=self.node_name, node=self.node, pods=self.pods, pdbs=self.pdbs,
                            settings=self.autoscaler, now=now, covering=self.covering,
                            said=(self.pdbs_problem,) if self.pdbs_problem else ())


class NodeState:
    def __init__(self, node_name: str, *, autoscaler: AutoscalerSettings = DEFAULT_AUTOSCALER,
                 max_pdbs: int | None = None, max_selector_bytes: int = MAX_SELECTORS_BYTES,
                 verdict_off: str = "") -> None:
        """``verdict_off``: why the autoscaler's settings are unusable (config.Config.verdict_off); the snapshots then
        carry no verdict but that line."""
        self.node_name = node_name
        self.autoscaler = autoscaler
        self.verdict_off = verdict_off
        self.max_pdbs = max_pdbs
        self.max_selector_bytes = max_selector_bytes
        self._budget = SelectorBudget(max_selector_bytes)  # which PDBs keep their selector
        self._lock = threading.Lock()
        # Notified when the pods are first synced or the Node first listed: the first export waits on it.
        self._listed = threading.Condition(self._lock)
        self._pods: dict[str, PodValue] = {}
        self._by_name: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid
        self._node: NodeRecord | None = None
        self._usage: Usage | None = None
        self._synced = False
        self._node_listed = False
        self._resource_version = ""
        self._kubernetes = DEFAULT_KUBERNETES
        # None until the PDBs are listed (and for good without the watch).
        self._pdbs: PdbIndex | None = None
        self._pdb_tuple: tuple[PdbRecord, ...] | None = None  # what snapshots share until the next PDB change
        # Over max_pdbs: how many the cluster holds; the records are dropped until the next LIST within the limit.
        self._pdbs_over = 0
        # Every change the verdict reads bumps it (under the lock); usage samples and bookmarks do not.
        self._version = 0
        self._verdicts = VerdictCache()
        # The PDBs covering each pod, by uid, while the PDBs are known: matched when a pod arrives or its labels or
        # namespace change, and for the pods a PDB change can reach, so no verdict matches every (pod, PDB) pair.
        self._covering: dict[str, tuple[PdbRecord, ...]] = {}
        self._covering_uids: dict[str, tuple[str, ...]] = {}  # the same, as PDB uids (found with a C search)

    def set_node(self, node: NodeRecord | None, listed: bool = False) -> None:
        """The Node object, or None when it does not exist (deleted, or not yet created)."""
        with self._lock:
            self._version += 1
            self._node = node
            if listed and not self._node_listed:
                self._node_listed = True
                self._listed.notify_all()

    def observed(self, resource_version: str) -> None:
        """The pod watch has been handled up to ``resource_version``."""
        if resource_version:
            with self._lock:
                self._resource_version = resource_version

    def set_kubernetes(self, info: KubernetesInfo) -> None:
        with self._lock:
            self._version += 1
            self._kubernetes = info

    def set_usage(self, usage: Usage | None) -> None:
        with self._lock:
            self._usage = usage

    def upsert(self, value: PodValue) -> list[PodValue]:
        """Store ``value``; return what it replaced: the same uid, or an older pod of the same namespace/name.

        A pod deleted and recreated under the same name while the watch missed
        the DELETED event arrives as a new uid; one name is one pod on a node,
        so the newer uid replaces the older at once instead of both counting
        until the next relist.
        """
        key = (value.namespace, value.name)
        cover = self._cover(value)  # outside the lock: only this thread writes what it reads
        with self._lock:
            self._version += 1
            replaced = []
            if (previous := self._pods.get(value.uid)) is not None:
                replaced.append(previous)
            older = self._by_name.get(key)
            if older is not None and older != value.uid:
                replaced.append(self._pods.pop(older))
                self._set_cover(older, None)
            self._pods[value.uid] = value
            self._by_name[key] = value.uid
            if cover is not None:
                self._set_cover(value.uid, cover)
            return replaced

    def remove(self, uid: str) -> PodValue | None:
        with self._lock:
            self._version += 1
            value = self._pods.pop(uid, None)
            self._set_cover(uid, None)
            if value is not None and self._by_name.get((value.namespace, value.name)) == uid:
                del self._by_name[(value.namespace, value.name)]
            return value

    def replace(self, values: Iterable[PodValue]) -> list[PodValue]:
        """Make the state exactly ``values`` (one pod per namespace/name, the later wins); return what went."""
        by_name: dict[tuple[str, str], str] = {}
        fresh: dict[str, PodValue] = {}
        for v in values:
            key = (v.namespace, v.name)
            if (older := by_name.get(key)) is not None and older != v.uid:
                del fresh[older]
            fresh[v.uid] = v
            by_name[key] = v.uid
        # Kept for the pods whose namespace and labels the relist did not change (only this thread writes them).
        covering = {v.uid: cover for v in fresh.values() if (cover := self._cover(v)) is not None}
        uids = self._uids(covering)
        with self._lock:
            self._version += 1
            previous = self._pods
            self._pods, self._by_name = fresh, by_name
            self._covering, self._covering_uids = covering, uids
            if not self._synced:
                self._synced = True
                self._listed.notify_all()
        return [v for uid, v in previous.items() if uid not in fresh]

    # -- PodDisruptionBudgets (each change re-matches only the node's pods it can reach) -------------------------
    def replace_pdbs(self, pdbs: Iterable[PdbRecord], more: int = 0) -> None:
        """Exactly these PDBs (a LIST); ``more`` held beyond the limit makes them unknown, with their count."""
        kept, budget, held = as_kept(pdbs, more=more, limit=self.max_selector_bytes)
        fresh = PdbIndex(kept or ())
        covering = {} if kept is None else self._covering_of(self._pods.values(), fresh)
        uids = self._uids(covering)
        with self._lock:
            self._version += 1
            self._pdbs, self._pdbs_over, self._budget = fresh, 0 if kept is not None else held, budget
            self._covering, self._covering_uids = covering, uids
            self._pdb_tuple = None

    def upsert_pdb(self, pdb: PdbRecord, added: bool) -> PdbRecord | None:
        """Store ``pdb``; return the version it replaced. Past ``max_pdbs`` every record is dropped and only the
        count is kept (``added``: an ADDED event, which counts one more)."""
        with self._lock:
            if self._pdbs_over:
                self._version += 1
                self._pdbs_over += added
                return None
            self._pdb_tuple = None
            pdb = self._budget.admit(pdb, self._pdbs.get(pdb.uid) if self._pdbs is not None else None)
            if self._pdbs is None:  # an event before any LIST (a replay that starts with watch events)
                self._pdbs = PdbIndex([pdb])
                self._covering = self._covering_of(self._pods.values(), self._pdbs)
                self._covering_uids = self._uids(self._covering)
                self._version += 1
                return None
            previous = self._pdbs.put(pdb)
            if self.max_pdbs is not None and len(self._pdbs) > self.max_pdbs:
                self._pdbs_over, self._pdbs = len(self._pdbs), PdbIndex()
                self._covering, self._covering_uids = {}, {}
                self._budget = SelectorBudget(self.max_selector_bytes)
                self._version += 1
            elif self._rematch(self._pdbs, pdb.uid, previous, pdb):
                self._version += 1
            return previous

    def remove_pdb(self, uid: str) -> PdbRecord | None:
        with self._lock:
            if self._pdbs_over:
                self._version += 1
                self._pdbs_over = max(0, self._pdbs_over - 1)
                return None
            if self._pdbs is None:
                return None
            previous = self._pdbs.pop(uid)
            if previous is not None:
                self._budget.release(previous)
                self._pdb_tuple = None
                if self._rematch(self._pdbs, uid, previous, None):
                    self._version += 1
            return previous

    def _set_cover(self, pod_uid: str, cover: tuple[PdbRecord, ...] | None,
                   uids: tuple[str, ...] | None = None) -> None:
        """``cover`` for the pod ``pod_uid`` (None: none kept), with its PDBs' ``uids`` where the caller has them."""
        if cover is None:
            self._covering.pop(pod_uid, None)
            self._covering_uids.pop(pod_uid, None)
        elif self._covering.get(pod_uid) is not cover:  # a pod's status update keeps its covering: nothing to do
            self._covering[pod_uid] = cover
            self._covering_uids[pod_uid] = tuple(p.uid for p in cover) if uids is None else uids

    def _uids(self, covering: dict[str, tuple[PdbRecord, ...]]) -> dict[str, tuple[str, ...]]:
        """The PDB uids of each of ``covering``, those of a covering kept unchanged reused (read outside the lock:
        only this thread writes them)."""
        kept, uids = self._covering, self._covering_uids
        return {pod: uids[pod] if kept.get(pod) is cover and pod in uids else tuple(p.uid for p in cover)
                for pod, cover in covering.items()}

    def _rematch(self, index: PdbIndex, uid: str, previous: PdbRecord | None, pdb: PdbRecord | None) -> bool:
        """After the PDB ``uid`` of ``index`` changed from ``previous`` to ``pdb`` (None: absent), the coverings of
        the pods it covered or may now cover, old selector and new; whether the verdict's inputs changed (a
        covering, or the problems of a PDB of a namespace the node has pods in). Only pods of its namespaces are
        looked at, only those whose joined labels ``may_cover_pod`` passes have their labels split, and a covering
        changes in place (the PDB found by a C search of its uids, put in the cluster's order by bisection): the
        cost is the pods reached, not the PDBs that cover them."""
        namespaces = {p.namespace for p in (previous, pdb) if p is not None}
        reached = changed = False
        for pod_uid, value in self._pods.items():
            if value.namespace not in namespaces:
                continue
            reached = True
            held, uids = self._covering.get(pod_uid, ()), self._covering_uids.get(pod_uid, ())
            at = uids.index(uid) if uid in uids else None
            has = pdb is not None and may_cover_pod(pdb, value.namespace, value.eviction)
            if has:
                assert pdb is not None
                if at is None:
                    at = bisect(held, index.place(pdb), key=index.place)
                    self._set_cover(pod_uid, (*held[:at], pdb, *held[at:]), (*uids[:at], uid, *uids[at:]))
                    changed = True
                elif held[at] != pdb:
                    self._set_cover(pod_uid, (*held[:at], pdb, *held[at + 1:]), uids)
                    changed = True
            elif at is not None:
                self._set_cover(pod_uid, held[:at] + held[at + 1:], uids[:at] + uids[at + 1:])
                changed = True
        return changed or (reached and any(p is not None and p.problems for p in (previous, pdb)))

    def _cover(self, value: PodValue) -> tuple[PdbRecord, ...] | None:
        """The PDBs covering ``value`` (None: PDBs not known): the ones kept for its uid while its namespace and
        labels stay the same (a status update), else matched against its namespace's PDBs."""
        index = self._pdbs
        if index is None or self._pdbs_over:
            return None
        previous = self._pods.get(value.uid)
        if previous is not None and previous.namespace == value.namespace \
                and previous.eviction.labels == value.eviction.labels \
                and bool(previous.eviction.labels_over_bound) == bool(value.eviction.labels_over_bound):
            kept = self._covering.get(value.uid)
            if kept is not None:
                return kept
        return _pod_covering(index, value)

    def _covering_of(self, values: Iterable[PodValue], index: PdbIndex | None) -> dict[str, tuple[PdbRecord, ...]]:
        """Every pod's covering from ``index`` (None: PDBs not known, and none is kept)."""
        if index is None:
            return {}
        return {v.uid: _pod_covering(index, v) for v in values}

    def pdbs(self) -> tuple[PdbRecord, ...] | None:
        """The PDBs as snapshots see them (None: not known)."""
        with self._lock:
            return self._pdbs_snapshot()[0]

    @property
    def pdbs_over_limit(self) -> int:
        """How many PDBs the cluster holds while that is more than the agent keeps; 0 otherwise."""
        with self._lock:
            return self._pdbs_over

    def _pdbs_snapshot(self) -> tuple[tuple[PdbRecord, ...] | None, str]:
        if self._pdbs_over:
            return None, too_many_pdbs(self._pdbs_over, self.max_pdbs)
        if self._pdbs is None:
            return None, ""
        if self._pdb_tuple is None:
            self._pdb_tuple = self._pdbs.values()
        return self._pdb_tuple, ""

    def get(self, uid: str) -> PodValue | None:
        with self._lock:
            return self._pods.get(uid)

    def pods(self) -> tuple[PodValue, ...]:
        with self._lock:
            return tuple(self._pods.values())

    def snapshot(self) -> NodeSnapshot:
        with self._lock:
            pdbs, problem = self._pdbs_snapshot()
            return NodeSnapshot(self.node_name, tuple(self._pods.values()), self._node, self._usage,
                                self._synced, self._node_listed, self._resource_version, self._kubernetes,
                                pdbs, self.autoscaler, problem, self._version, self._verdicts,
                                None if pdbs is None else dict(self._covering), self.verdict_off)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    @property
    def node(self) -> NodeRecord | None:
        with self._lock:
            return self._node

    @property
    def synced(self) -> bool:
        with self._lock:
            return self._synced

    @property
    def kubernetes(self) -> KubernetesInfo:
        with self._lock:
            return self._kubernetes

    def wait_listed(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until the pods are synced and the Node listed (what readiness needs); whether
        they are."""
        with self._listed:
            return self._listed.wait_for(lambda: self._synced and self._node_listed, timeout)

    @property
    def node_listed(self) -> bool:
        with self._lock:
            return self._node_listed


def _pod_covering(index: PdbIndex, value: PodValue) -> tuple[PdbRecord, ...]:
    """The PDBs of ``index`` covering ``value``; labels over the agent's bound: every PDB of its namespace with a
    selector may (agent.model.pdb_index.may_cover)."""
    facts = value.eviction
    if facts.labels_over_bound:
        return tuple(may_cover(index.in_namespace(value.namespace), value.namespace, facts))
    return index.covering(value.namespace, facts.label_map())
