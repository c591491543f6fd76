"""The cluster-autoscaler's verdict on one node: its utilization, whether it is a scale-down candidate, and every
pod that would block its removal, computed as cluster-autoscaler's ``simulator/`` does (shared/KNOWLEDGE.md §6).

Pure: the exporters, the debug views and ``explain`` all call ``scale_down_verdict`` on a snapshot, so what is
exported and what is explained cannot disagree. What it cannot see: node-group minimum size, whether the pods fit
elsewhere, the cloud provider's state, whether a pod's controller object still exists.

Followed, with the source read (docs/autoscaler.md has the whole account):

* **utilization** (simulator/utilization/info.go): per resource, the sum of the pods' values over allocatable, in
  milli-units as the autoscaler's ``MilliValue()`` rounds them; pods terminating longer than their grace period
  plus 30 s left out (strictly after); DaemonSet and mirror pods out of the sum and the allocatable when the
  ignore flags say so; the larger of cpu and memory (memory on a tie), or on a GPU node the GPU's alone (0 when the
  node has a GPU label but no GPU allocatable yet). Terminal pods are left out as the autoscaler's pod lister does.
* **eligibility** (core/scaledown/eligibility): the scale-down-disabled annotation (exactly "true") first; then
  underutilized when below the threshold (the GPU threshold on a GPU node); at or below it
  (``isNodeAtOrBelowUtilizationThreshold``, kubernetes/autoscaler #8975) in 1.36 and later and in the patch
  releases of 1.32 to 1.34 cut after 2026-01-09 (#9033, #9034, #9035; 1.35 treated alike, unverified).
* **drain rules** (simulator/drainability/rules, defaults), in order, the first outcome wins: mirror,
  long-terminating, controller existence (skipped: the agent does not watch controllers, so a pod whose
  ReplicaSet/Job/StatefulSet/ReplicationController is gone is not reported as ControllerNotFound), DaemonSet,
  safe-to-evict "true", terminal, then the blocking ones: replicated, system, safe-to-evict "false", local storage,
  PDB. 1.28 (before the rules were split out) checked local storage before safe-to-evict "false".
* **PDB allowance across the node's pods** (core/scaledown/pdb/basic.go ``CanRemovePods``, used by
  core/scaledown/planner/planner.go): the PDB rule blocks a pod only when its PDB allows no disruption; a PDB that
  covers more of the node's pods to move than it allows does not block the node, it makes it *risky* (the
  autoscaler's ``IsRisky``: its evictions cannot all run at once and the drain may time out). The allowance is
  counted down across nodes (``RemovePods``) in the order the autoscaler considers them, which one node cannot see.

The verdict depends on time only through thresholds (a pod's grace period running out, a kube-system pod's
timeout); ``Verdict.holds_until`` says up to when it stays exactly what it is, so a caller may keep it until then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from agent.model.autoscaler_requests import AutoscalerRequests, autoscaler_requests, requests_of_release
from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER, NEON, AutoscalerSettings
from agent.model.node import GPU_RESOURCES, NodeRecord
from agent.model.pdb import PdbRecord, selects
from agent.model.pod import EvictionFacts
from agent.model.pod_requests import aggregate
from agent.model.quantity import QuantityError, div_round_up, parse_quantity
from agent.model.valuation import PodValue

__all__ = ["Utilization", "Blocker", "AutoscalerValue", "PdbRisk", "Verdict", "scale_down_verdict", "STATES", "REASONS",
           "UNDERUTILIZED", "NOT_UNDERUTILIZED", "SCALE_DOWN_DISABLED", "NO_NODE", "NOT_REPLICATED",
           "UNMOVABLE_KUBE_SYSTEM", "KUBE_SYSTEM_PDB_UNKNOWN", "NOT_SAFE_TO_EVICT", "LOCAL_STORAGE", "NOT_ENOUGH_PDB",
           "LONG_TERMINATING_EXTRA", "AT_OR_BELOW_FROM"]

# The verdict's states (bounded: exported as a label value).
UNDERUTILIZED = "underutilized"
NOT_UNDERUTILIZED = "not_underutilized"
SCALE_DOWN_DISABLED = "scale_down_disabled"
NO_NODE = "unknown"  # the Node object is not known (not yet read, or deleted), or its allocatable is unusable
STATES = (UNDERUTILIZED, NOT_UNDERUTILIZED, SCALE_DOWN_DISABLED, NO_NODE)

# Why a pod blocks removal: the autoscaler's drainability reasons, snake-cased (bounded: exported as a label value).
NOT_REPLICATED = "not_replicated"
UNMOVABLE_KUBE_SYSTEM = "unmovable_kube_system"
KUBE_SYSTEM_PDB_UNKNOWN = "kube_system_pdb_unknown"  # no PDB watch: blocks unless a PDB covers it
NOT_SAFE_TO_EVICT = "not_safe_to_evict"
LOCAL_STORAGE = "local_storage"
NOT_ENOUGH_PDB = "not_enough_pdb"
REASONS = (NOT_REPLICATED, UNMOVABLE_KUBE_SYSTEM, KUBE_SYSTEM_PDB_UNKNOWN, NOT_SAFE_TO_EVICT, LOCAL_STORAGE,
           NOT_ENOUGH_PDB)

#: The first minor release whose patch releases count a node exactly at its threshold as underutilized.
AT_OR_BELOW_FROM = 32
#: drain.PodLongTerminatingExtraThreshold: a deleted pod counts until its grace period plus this has passed.
LONG_TERMINATING_EXTRA = 30.0
#: apiv1.DefaultTerminationGracePeriodSeconds, for a pod whose spec does not say.
DEFAULT_GRACE = 30
# The kinds the replicated rule trusts while --skip-nodes-with-custom-controller-pods is on.
_REPLICATED_KINDS = frozenset({"ReplicationController", "Job", "ReplicaSet", "StatefulSet"})
_SYSTEM_NAMESPACE = "kube-system"
_MILLI = 10**6  # nano-units per milli-unit


class Utilization(msgspec.Struct, frozen=True, kw_only=True):
    """Per resource, the autoscaler's sum of pod values over allocatable (DaemonSet/mirror pods taken out of both
    when the settings say so); None where allocatable is unknown or zero."""

    cpu: float | None
    memory: float | None
    gpu: float | None = None  # a GPU node is judged by its GPU alone
    # The node's utilization (max of cpu and memory, or the GPU's) and the resource that gave it ("" when unknown).
    value: float | None = None
    resource: str = ""


class Blocker(msgspec.Struct, frozen=True, kw_only=True):
    uid: str
    namespace: str
    name: str
    reason: str  # one of REASONS
    detail: str  # one line for people: which controller, volume, annotation or PDB


class AutoscalerValue(msgspec.Struct, frozen=True, kw_only=True):
    """A pod whose value under the autoscaler's release differs from the exported (scheduler's) value."""

    uid: str
    namespace: str
    name: str
    cpu: int  # nano-units, as the autoscaler's release computes them
    memory: int
    scheduler_cpu: int
    scheduler_memory: int
    why: str


class PdbRisk(msgspec.Struct, frozen=True, kw_only=True):
    """A PDB covering more of the node's pods to move than it allows disruptions: the autoscaler still counts the
    node removable, but marks it risky (``CanRemovePods``'s inParallel false)."""

    namespace: str
    name: str
    disruptions_allowed: int
    pods: int  # the node's pods to move that it covers


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    node: str
    state: str  # one of STATES
    utilization: Utilization
    threshold: float  # the threshold that applied (GPU threshold on a GPU node)
    blockers: tuple[Blocker, ...] = ()
    # False without the PDB watch: kube-system pods are then KUBE_SYSTEM_PDB_UNKNOWN, never silently free.
    pdbs_known: bool = True
    release: str = ""
    differing: tuple[AutoscalerValue, ...] = ()
    problems: tuple[str, ...] = ()  # e.g. a malformed safe-to-evict annotation, read as documented
    # PDBs that cover more of the node's pods to move than they allow: the node stays removable, but risky.
    pdb_risks: tuple[PdbRisk, ...] = ()
    # The verdict is exactly this for every ``now`` from the one it was computed at up to and including this time
    # (a grace period or a kube-system pod's timeout then runs out); None: time alone never changes it.
    holds_until: float | None = None

    @property
    def candidate(self) -> bool:
        """A scale-down candidate as the autoscaler means it: underutilized and eligible (scale-down not disabled by
        the Node's annotation), whether or not pods block its removal."""
        return self.state == UNDERUTILIZED

    @property
    def removable(self) -> bool:
        """A candidate no pod blocks: what the autoscaler would remove (what the verdict cannot see aside)."""
        return self.candidate and not self.blockers

    def blocking_counts(self) -> dict[str, int]:
        """Blocking pods by reason, every reason of REASONS present (0 where none), in REASONS' order."""
        counts = dict.fromkeys(REASONS, 0)
        for blocker in self.blockers:
            counts[blocker.reason] += 1
        return counts


def _minor(release: str) -> int:
    """The release's minor version (neon's is 31)."""
    return 31 if release == NEON else int(release.partition(".")[2])


def _milli(nanos: int) -> int:
    """resource.Quantity.MilliValue(): rounded up to a whole milli-unit."""
    return div_round_up(nanos, _MILLI) if nanos > 0 else -div_round_up(-nanos, _MILLI)


def _quantity(text: str | None, what: str, problems: list[str]) -> int | None:
    if text is None:
        return None
    try:
        return parse_quantity(text)
    except QuantityError as exc:
        problems.append(f"{what} {text[:40]!r} unreadable ({exc}): read as absent")
        return None


def _is_daemonset_pod(facts: EvictionFacts) -> bool:
    """utils/pod IsDaemonSetPod: controlled by a DaemonSet, or annotated daemonset-pod "true"."""
    controller = facts.controller
    return (controller is not None and controller.kind == "DaemonSet") or facts.daemonset_pod == "true"


class _Clock:
    """``now``, and the earliest threshold still ahead of it that the verdict read (when it may change)."""

    __slots__ = ("now", "next")

    def __init__(self, now: float) -> None:
        self.now = now
        self.next: float | None = None

    def passed(self, threshold: float) -> bool:
        """Whether ``threshold`` is strictly behind ``now`` (the autoscaler's checks are strict); if not, the
        verdict holds at most until it."""
        if threshold < self.now:
            return True
        if self.next is None or threshold < self.next:
            self.next = threshold
        return False


def _long_terminating(facts: EvictionFacts, clock: _Clock) -> bool:
    """drain.IsPodLongTerminating: deleted, and grace period plus 30 s strictly passed."""
    if facts.deleted is None:
        return False
    grace = DEFAULT_GRACE if facts.termination_grace is None else facts.termination_grace
    return clock.passed(facts.deleted + grace + LONG_TERMINATING_EXTRA)


def _gpu_request(facts: EvictionFacts, resource: str, problems: list[str], where: str) -> int:
    """The pod's request of ``resource`` (KEP-753 over its containers), nano-units."""
    if not facts.gpu:
        return 0
    items = []
    for kind, name, text in facts.gpu:
        value = _quantity(text, f"{where}: {name} request", problems) if name == resource else None
        items.append((kind, {"gpu": value} if value is not None else None))
    return aggregate(items).get("gpu", 0)


class _Pod(NamedTuple):
    value: PodValue
    facts: EvictionFacts
    cpu: int
    memory: int


def _utilization(node: NodeRecord, pods: list[_Pod], settings: AutoscalerSettings, clock: _Clock,
                 problems: list[str]) -> Utilization:
    def ratio(resource: str, allocatable_text: str | None, request_of) -> float | None:
        allocatable = _quantity(allocatable_text, f"node allocatable {resource}", problems)
        if allocatable is None or _milli(allocatable) == 0:
            return None
        used = taken_out = 0
        for pod in pods:
            request = request_of(pod)
            if settings.ignore_daemonsets_utilization and _is_daemonset_pod(pod.facts):
                taken_out += request
            elif settings.ignore_mirror_pods_utilization and pod.facts.mirror:
                taken_out += request
            elif not _long_terminating(pod.facts, clock):
                used += request
        left = _milli(allocatable) - _milli(taken_out)
        if left <= 0:
            problems.append(f"{resource}: DaemonSet/mirror pods request all of the allocatable; utilization unknown")
            return None
        return _milli(used) / left

    gpu_resource = node.gpu_resource or (GPU_RESOURCES[0] if node.gpu_label else None)
    if gpu_resource is not None:
        gpu = ratio(gpu_resource, node.gpu_allocatable,
                    lambda p: _gpu_request(p.facts, gpu_resource, problems, f"{p.value.namespace}/{p.value.name}"))
        # No GPU allocatable yet (driver not ready): the autoscaler counts the node as 0 used.
        gpu = 0.0 if gpu is None else gpu
        return Utilization(cpu=None, memory=None, gpu=gpu, value=gpu, resource=gpu_resource)
    cpu = ratio("cpu", node.allocatable.get("cpu"), lambda p: p.cpu)
    memory = ratio("memory", node.allocatable.get("memory"), lambda p: p.memory)
    if cpu is None or memory is None:
        missing = " and ".join(r for r, v in (("cpu", cpu), ("memory", memory)) if v is None)
        problems.append(f"node allocatable {missing} missing or zero: the autoscaler cannot compute the utilization")
        return Utilization(cpu=cpu, memory=memory)
    return Utilization(cpu=cpu, memory=memory, value=cpu if cpu > memory else memory,
                       resource="cpu" if cpu > memory else "memory")


def _local_volumes_blocking(facts: EvictionFacts, where: str, problems: list[str]) -> tuple[str, ...]:
    """drain.HasBlockingLocalStorage: the local volumes not named in safe-to-evict-local-volumes."""
    if not facts.local_volumes:
        return ()
    listed = facts.safe_to_evict_local_volumes
    if listed is None:
        return facts.local_volumes
    names = listed.split(",")  # not trimmed, as upstream
    unknown = [n for n in names if n not in facts.local_volumes]
    if unknown:
        shown = ", ".join(repr(n[:40]) for n in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        problems.append(f"{where}: safe-to-evict-local-volumes names {shown}, no local volume of the pod: ignored")
    return tuple(v for v in facts.local_volumes if v not in names)


def _blocker(pod: _Pod, facts: EvictionFacts, settings: AutoscalerSettings, matching: list[PdbRecord] | None,
             clock: _Clock, problems: list[str]) -> tuple[str, str] | None:
    """(reason, detail) of the first drain rule that blocks the pod, or None."""
    value = pod.value
    where = f"{value.namespace}/{value.name}"
    safe = facts.safe_to_evict
    if safe is not None and safe not in ("true", "false"):
        problems.append(f"{where}: safe-to-evict {safe[:40]!r} is neither \"true\" nor \"false\": ignored")
    if facts.mirror or _long_terminating(facts, clock):
        return None
    # Controller existence (customcontroller/replicacount): not visible to the agent; see the module docstring.
    if _is_daemonset_pod(facts) or safe == "true":
        return None  # (terminal pods never get here: the autoscaler's lister leaves them out)
    controller = facts.controller
    if controller is None:
        return NOT_REPLICATED, "no controller (no ownerReference with controller: true)"
    if settings.skip_nodes_with_custom_controller_pods and controller.kind not in _REPLICATED_KINDS:
        return NOT_REPLICATED, (f"controller {controller.kind}/{controller.name} is not one the autoscaler trusts "
                                "(--skip-nodes-with-custom-controller-pods)")
    minor = _minor(settings.release)
    if settings.skip_nodes_with_system_pods and value.namespace == _SYSTEM_NAMESPACE and not matching:
        timeout = settings.blocking_system_pod_distruption_timeout
        # From 1.33 a kube-system pod older than the timeout no longer blocks (no creationTimestamp reads as Go's
        # zero time: older than any timeout).
        expired = minor >= 33 and (facts.created is None or clock.passed(facts.created + timeout))
        if not expired:
            if matching is None:
                return KUBE_SYSTEM_PDB_UNKNOWN, "kube-system pod: blocks unless a PodDisruptionBudget covers it " \
                                                "(PDBs not watched)"
            return UNMOVABLE_KUBE_SYSTEM, "kube-system pod not covered by any PodDisruptionBudget"
    local = _local_volumes_blocking(facts, where, problems) if settings.skip_nodes_with_local_storage else ()
    local_first = minor == 28
    if local and local_first:
        return LOCAL_STORAGE, f"local storage: {', '.join(local)}"
    if safe == "false":
        return NOT_SAFE_TO_EVICT, "annotated cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\""
    if local:
        return LOCAL_STORAGE, f"local storage: {', '.join(local)} (not in safe-to-evict-local-volumes)"
    for pdb in matching or ():
        if pdb.disruptions_allowed < 1:
            return NOT_ENOUGH_PDB, f"PodDisruptionBudget {pdb.namespace}/{pdb.name} allows " \
                                   f"{pdb.disruptions_allowed} disruptions"
    return None


def scale_down_verdict(*, node_name: str, node: NodeRecord | None, pods: Sequence[PodValue],
                       pdbs: Sequence[PdbRecord] | None, settings: AutoscalerSettings, now: float) -> Verdict:
    """The verdict on one node at wall-clock time ``now`` (seconds since the epoch); ``pdbs`` None: not watched."""
    problems: list[str] = []
    try:
        how: AutoscalerRequests = requests_of_release(settings.release)
    except ValueError as exc:
        problems.append(f"{exc}: using release {DEFAULT_AUTOSCALER.release}'s rules")
        settings = msgspec.structs.replace(settings, release=DEFAULT_AUTOSCALER.release)
        how = requests_of_release(settings.release)
    live: list[_Pod] = []
    differing: list[AutoscalerValue] = []
    for value in pods:
        if not value.reported:
            continue  # Succeeded/Failed: the autoscaler's pod lister leaves them out
        facts = value.record.eviction if value.record is not None else EvictionFacts()
        cpu, memory, why = autoscaler_requests(value, how)
        if why:
            differing.append(AutoscalerValue(uid=value.uid, namespace=value.namespace, name=value.name, cpu=cpu,
                                             memory=memory, scheduler_cpu=value.cpu, scheduler_memory=value.memory,
                                             why=why))
        live.append(_Pod(value, facts, cpu, memory))
    gpu_node = node is not None and (node.gpu_label is not None or node.gpu_resource is not None)
    threshold = (settings.scale_down_gpu_utilization_threshold if gpu_node
                 else settings.scale_down_utilization_threshold)
    clock = _Clock(now)
    if node is None:
        utilization, state = Utilization(cpu=None, memory=None), NO_NODE
    else:
        utilization = _utilization(node, live, settings, clock, problems)
        # At or below the threshold (kubernetes/autoscaler #8975, merged to master for 1.36 and cherry-picked to
        # release-1.32/1.33/1.34 on 2026-01-09): a release's latest patches; below it before 1.32.
        at_or_below = _minor(settings.release) >= AT_OR_BELOW_FROM
        if node.scale_down_disabled == "true":
            state = SCALE_DOWN_DISABLED
        elif utilization.value is None:
            state = NO_NODE
        elif utilization.value < threshold or (at_or_below and utilization.value == threshold):
            state = UNDERUTILIZED
        else:
            state = NOT_UNDERUTILIZED
        if node.scale_down_disabled is not None and node.scale_down_disabled != "true":
            problems.append(f"node annotation scale-down-disabled {node.scale_down_disabled[:40]!r} is not \"true\": "
                            "scale-down stays enabled")
    blockers = []
    to_move: dict[tuple[str, str], tuple[PdbRecord, list[str]]] = {}  # PDB -> the node's pods to move it covers
    for pod in live:
        value, facts = pod.value, pod.facts
        matching = None if pdbs is None else [p for p in pdbs if selects(p, value.namespace, facts.label_map())]
        found = _blocker(pod, facts, settings, matching, clock, problems)
        if found is not None:
            blockers.append(Blocker(uid=value.uid, namespace=value.namespace, name=value.name, reason=found[0],
                                    detail=found[1]))
        elif matching and not (facts.mirror or _long_terminating(facts, clock) or _is_daemonset_pod(facts)):
            for pdb in matching:  # a pod the autoscaler would move (PodsToReschedule)
                to_move.setdefault((pdb.namespace, pdb.name), (pdb, []))[1].append(value.name)
    risks = tuple(PdbRisk(namespace=pdb.namespace, name=pdb.name, disruptions_allowed=pdb.disruptions_allowed,
                          pods=len(names))
                  for pdb, names in sorted(to_move.values(), key=lambda e: (e[0].namespace, e[0].name))
                  if len(names) > pdb.disruptions_allowed)
    return Verdict(node=node_name, state=state, utilization=utilization, threshold=threshold,
                   blockers=tuple(blockers), pdbs_known=pdbs is not None, release=settings.release,
                   differing=tuple(differing), problems=tuple(problems), pdb_risks=risks, holds_until=clock.next)
