"""The cluster-autoscaler's verdict on one node: its utilization, whether it is a scale-down candidate, and every
pod that would block its removal, computed as the cluster-autoscaler's ``simulator/`` does.

Pure: the exporters, the debug views and ``explain`` all call ``scale_down_verdict`` on a snapshot, so what is
exported and what is explained cannot disagree. What it cannot see: node-group minimum size, whether the pods fit
elsewhere, the cloud provider's state, and (unless the input holds controller objects: ``controllers``) whether a
pod's controller object still exists.

Followed, with the source read (docs/autoscaler.md has the whole account):

* **utilization** (simulator/utilization/info.go): per resource, the sum of the pods' values over allocatable, in
  milli-units as the autoscaler's ``MilliValue()`` rounds them, divided as float64 the way Go divides; pods
  terminating longer than their grace period plus 30 s left out (strictly after); DaemonSet and mirror pods out of
  the sum and the allocatable when the ignore flags say so, so when they request all of it or more the ratio is
  what Go computes (negative, above 1, or IEEE +Inf/NaN over 0); the larger of cpu and memory by Go's ``cpu > mem``
  (memory on a tie or a NaN), or on a GPU node the GPU's alone (0 when the node has a GPU label but no GPU
  allocatable yet). Terminal pods are left out as the autoscaler's pod lister does.
* **eligibility** (core/scaledown/eligibility): the scale-down-disabled annotation (exactly "true") first; then
  underutilized when below the threshold (the GPU threshold on a GPU node), or at or below it where the release
  says so (:mod:`agent.model.autoscaler_rules`), by the release's own comparison (so a NaN is underutilized).
* **a pod neon's autoscaler would panic on** (a zero overcommit factor): that autoscaler has no utilization at all
  (its pod lister crashes it), so the state is ``autoscaler_crash`` and the utilization unknown.
* **drain rules** (simulator/drainability/rules): the release's chain (:mod:`agent.model.autoscaler_rules`), each
  rule a unit of :mod:`agent.model.drainability`; the first outcome wins.
* **PDB allowance across the node's pods** (core/scaledown/pdb/basic.go ``CanRemovePods``, used by
  core/scaledown/planner/planner.go): the PDB rule blocks a pod only when its PDB allows no disruption; a PDB that
  covers more of the node's pods to move than it allows does not block the node, it makes it *risky* (the
  autoscaler's ``IsRisky``: its evictions cannot all run at once and the drain may time out). The allowance is
  counted down across nodes (``RemovePods``) in the order the autoscaler considers them, which one node cannot see.

The verdict depends on time only through thresholds (a pod's grace period running out, a kube-system pod's
timeout); ``Verdict.holds_until`` says up to when it stays exactly what it is, so a caller may keep it until then.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import msgspec

from agent.model.autoscaler_requests import AutoscalerRequests, autoscaler_requests, go_requests
from agent.model.autoscaler_rules import AutoscalerRules, rules_of_release
from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER, AutoscalerSettings
from agent.model.controllers import Controllers
from agent.model.drainability import (
    CONTROLLER_NOT_FOUND,
    KUBE_SYSTEM_PDB_UNKNOWN,
    LOCAL_STORAGE,
    MIN_REPLICAS_REACHED,
    NOT_ENOUGH_PDB,
    NOT_REPLICATED,
    NOT_SAFE_TO_EVICT,
    ON_COMPLETION,
    ON_COMPLETION_VALUE,
    REASONS,
    UNMOVABLE_KUBE_SYSTEM,
    Clock,
    DrainPod,
    drain_outcome,
    is_daemonset_pod,
    long_terminating,
)
from agent.model.go_amount import INT64_MAX, go_amount, milli_value
from agent.model.neon_patch import wrap_int64
from agent.model.node import NodeRecord
from agent.model.pdb import PdbRecord, coverage_unknown
from agent.model.pdb_index import by_namespace, may_cover
from agent.model.pod import EvictionFacts
from agent.model.pod_requests import Parse, aggregate
from agent.model.problems import at_most
from agent.model.quantity import QuantityError, div_round_up, parse_quantity
from agent.model.valuation import PodValue

__all__ = ["Utilization", "Blocker", "AutoscalerValue", "PdbRisk", "Verdict", "scale_down_verdict", "STATES", "REASONS",
           "UNDERUTILIZED", "NOT_UNDERUTILIZED", "SCALE_DOWN_DISABLED", "NO_NODE", "ALLOCATABLE_UNUSABLE",
           "AUTOSCALER_CRASH", "go_ratio_text", "MAX_PDB_RISKS", "MAX_PDB_PROBLEMS", "node_verdict",
           "NOT_REPLICATED", "UNMOVABLE_KUBE_SYSTEM", "KUBE_SYSTEM_PDB_UNKNOWN", "NOT_SAFE_TO_EVICT", "LOCAL_STORAGE",
           "NOT_ENOUGH_PDB", "CONTROLLER_NOT_FOUND", "MIN_REPLICAS_REACHED", "ON_COMPLETION", "verdict_off"]

# The verdict's states (bounded: exported as a label value).
UNDERUTILIZED = "underutilized"
NOT_UNDERUTILIZED = "not_underutilized"
SCALE_DOWN_DISABLED = "scale_down_disabled"
# No verdict: the Node object is not known (not yet read, or deleted), or the verdict is off (``verdict_off``).
NO_NODE = "unknown"
# The Node is known but its allocatable gives no utilization: cpu or memory missing or zero (the autoscaler's
# CalculateUtilizationOfResource errors and skips the node).
ALLOCATABLE_UNUSABLE = "allocatable_unusable"
# A pod on the node makes the release's autoscaler panic (neon's patch dividing by a zero overcommit factor): it
# computes no utilization for any node while the pod exists.
AUTOSCALER_CRASH = "autoscaler_crash"
STATES = (UNDERUTILIZED, NOT_UNDERUTILIZED, SCALE_DOWN_DISABLED, NO_NODE, ALLOCATABLE_UNUSABLE, AUTOSCALER_CRASH)

_MILLI = 10**6  # nano-units per milli-unit
#: The most PDB risks a verdict holds (the rest counted): a namespace of 10,000 PDBs covering every pod would
#: otherwise make every verdict, export and view carry 10,000 of them.
MAX_PDB_RISKS = 20
#: The most problem lines the PDBs of a node's namespaces add to its verdict (the rest counted in one more line): a
#: tenant's PDBs over the bound would otherwise add one each to every node with a pod in its namespace.
MAX_PDB_PROBLEMS = 5


class Utilization(msgspec.Struct, frozen=True, kw_only=True):
    """Per resource, the autoscaler's sum of pod values over allocatable (DaemonSet/mirror pods taken out of both
    when the settings say so), exactly the float64 Go computes: negative, above 1, +Inf or NaN where those pods
    request all of the allocatable or more (renderings spell those with ``go_ratio_text``); None where allocatable
    is unknown or zero."""

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
    # The node's pods to move that it may cover (its selector or their labels over the agent's bounds): with them
    # the PDB may be risky; it is for certain only when ``pods`` alone pass the allowance.
    unknown: int = 0


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    node: str
    state: str  # one of STATES
    utilization: Utilization
    threshold: float  # the threshold that applied (GPU threshold on a GPU node)
    blockers: tuple[Blocker, ...] = ()
    # False without the PDB watch: kube-system pods are then KUBE_SYSTEM_PDB_UNKNOWN, never silently free.
    pdbs_known: bool = True
    # False where no controller object was read (the agent in its pod): a pod whose controller is gone is not seen.
    controllers_known: bool = False
    release: str = ""
    differing: tuple[AutoscalerValue, ...] = ()
    problems: tuple[str, ...] = ()  # e.g. a malformed safe-to-evict annotation, read as documented
    # PDBs that cover more of the node's pods to move than they allow: the node stays removable, but risky.
    pdb_risks: tuple[PdbRisk, ...] = ()  # the first MAX_PDB_RISKS by namespace and name
    pdb_risks_more: int = 0  # how many more PDBs are risky than ``pdb_risks`` holds
    # The verdict is exactly this for every ``now`` from the one it was computed at up to and including this time
    # (a grace period or a kube-system pod's timeout then runs out); None: time alone never changes it.
    holds_until: float | None = None
    # Why there is no verdict at all: the autoscaler's settings the agent was given are unusable ("" when it has one).
    off: str = ""

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


def go_ratio_text(ratio: float) -> str:
    """A ratio that is not a finite number, as Go prints it in a metric (Prometheus' spelling): "+Inf", "-Inf",
    "NaN"; a finite one as repr."""
    if math.isnan(ratio):
        return "NaN"
    if math.isinf(ratio):
        return "+Inf" if ratio > 0 else "-Inf"
    return repr(ratio)


def _go_divide(used: int, left: int) -> float:
    """``float64(used) / float64(left)`` as Go evaluates it: each int rounded to a float64 first, IEEE division
    (Python's int / int rounds once, and raises on 0)."""
    if left == 0:
        return math.nan if used == 0 else math.copysign(math.inf, used)
    return float(used) / float(left)


def _milli(nanos: int) -> int:
    """resource.Quantity.MilliValue(): rounded up to a whole milli-unit."""
    return div_round_up(nanos, _MILLI) if nanos > 0 else -div_round_up(-nanos, _MILLI)


def _quantity(text: str | None, what: str, problems: list[str], parse: Parse = parse_quantity) -> int | None:
    if text is None:
        return None
    try:
        return parse(text)
    except QuantityError as exc:
        problems.append(f"{what} {text[:40]!r} unreadable ({exc}): read as absent")
        return None


def _gpu_request(facts: EvictionFacts, resource: str, problems: list[str], where: str, replaced: str | None,
                 parse: Parse = parse_quantity) -> int:
    """The pod's request of ``resource`` (KEP-753 over its containers), nano-units; ``replaced``: the name of the app
    container whose requests neon's patch replaced with cpu and memory alone (its GPU request no longer counts)."""
    if not facts.gpu:
        return 0
    items = []
    for kind, container, name, text in facts.gpu:
        if kind == "container" and container == replaced:
            continue
        value = _quantity(text, f"{where}: {name} request", problems, parse) if name == resource else None
        items.append((kind, {"gpu": value} if value is not None else None))
    return aggregate(items).get("gpu", 0)


def _gpu_resource(node: NodeRecord, rules: AutoscalerRules) -> str | None:
    """The GPU resource a GPU node is judged by, None for another node (utils/gpu GetNodeGPUFromCloudProvider): a GPU
    label, or a non-zero allocatable of a resource the release reads; the first such resource, else nvidia.com/gpu."""
    found = next((r for r, _ in node.gpu_allocatable if r in rules.gpu_resources), None)
    if found is None and node.gpu_label is None:
        return None
    return found or rules.gpu_resources[0]


class _Pod(NamedTuple):
    value: PodValue
    facts: EvictionFacts
    cpu: int
    memory: int
    replaced: str | None  # the app container whose requests neon's patch replaced


def _go_milli(nanos: int, go_sum, resource: str, what: str, problems: list[str]) -> int:
    """``MilliValue()`` of a sum the autoscaler holds in a resource.Quantity: exact for a sum of 0 up to int64; past
    it, or below 0 (neon's patch can make a pod's value negative: a big decimal's scaling then reads the low 64 bits of
    its nano-units), what Go gives (:mod:`agent.model.go_amount`), recomputed from ``go_sum()``; a problem line says
    where that is not the exact figure."""
    exact = _milli(nanos)
    if 0 <= exact <= INT64_MAX:
        return exact
    go = milli_value(go_sum())
    if go != exact:
        problems.append(f"{resource}: {what} of {exact}m: the autoscaler's resource.Quantity MilliValue() gives "
                        f"{go}m (int64), and it divides that")
    return go


def _utilization(node: NodeRecord, pods: list[_Pod], settings: AutoscalerSettings, rules: AutoscalerRules,
                 clock: Clock, problems: list[str], requests: AutoscalerRequests) -> Utilization:
    def ratio(resource: str, allocatable_text: str | None, request_of, go_request_of) -> float | None:
        allocatable = _quantity(allocatable_text, f"node allocatable {resource}", problems)
        if allocatable is None:
            return None
        assert allocatable_text is not None
        allocatable_milli = _go_milli(allocatable, lambda: go_amount(allocatable_text), resource, "allocatable",
                                      problems)
        if allocatable_milli == 0:
            return None
        used_pods, taken_pods = [], []
        for pod in pods:
            ignored_daemonset = settings.ignore_daemonsets_utilization and is_daemonset_pod(pod.facts)
            if ignored_daemonset or (settings.ignore_mirror_pods_utilization and pod.facts.mirror):
                taken_pods.append(pod)
            elif not long_terminating(pod.facts, clock, rules.long_terminating_extra):
                used_pods.append(pod)

        def total(of, chosen: list[_Pod]) -> int:
            out = 0  # the autoscaler's resource.MustParse("0"), then Quantity.Add pod by pod
            for pod in chosen:
                out = out + of(pod)
            return out

        used = _go_milli(total(request_of, used_pods), lambda: total(go_request_of, used_pods), resource,
                         "the pods' requests", problems)
        taken_out = _go_milli(total(request_of, taken_pods), lambda: total(go_request_of, taken_pods), resource,
                              "the DaemonSet/mirror pods' requests", problems)
        left = wrap_int64(allocatable_milli - taken_out)
        value = _go_divide(used, left)
        if left <= 0:
            problems.append(f"{resource}: DaemonSet/mirror pods request {taken_out}m of the allocatable "
                            f"{allocatable_milli}m, so the autoscaler divides {used}m by {left}m: "
                            f"{go_ratio_text(value)}")
        return value

    gpu_resource = _gpu_resource(node, rules)
    if gpu_resource is not None:
        def gpu_of(p: _Pod, parse: Parse = parse_quantity) -> int:
            return _gpu_request(p.facts, gpu_resource, problems, f"{p.value.namespace}/{p.value.name}", p.replaced,
                                parse)

        gpu = ratio(gpu_resource, dict(node.gpu_allocatable).get(gpu_resource), gpu_of,
                    lambda p: gpu_of(p, go_amount))
        # No GPU allocatable yet (driver not ready): the autoscaler counts the node as 0 used.
        gpu = 0.0 if gpu is None else gpu
        return Utilization(cpu=None, memory=None, gpu=gpu, value=gpu, resource=gpu_resource)
    cpu = ratio("cpu", node.allocatable.get("cpu"), lambda p: p.cpu, lambda p: go_requests(p.value, requests)[0])
    memory = ratio("memory", node.allocatable.get("memory"), lambda p: p.memory,
                   lambda p: go_requests(p.value, requests)[1])
    if cpu is None or memory is None:
        missing = " and ".join(r for r, v in (("cpu", cpu), ("memory", memory)) if v is None)
        problems.append(f"node allocatable {missing} missing or zero: the autoscaler cannot compute the utilization")
        return Utilization(cpu=cpu, memory=memory)
    return Utilization(cpu=cpu, memory=memory, value=cpu if cpu > memory else memory,
                       resource="cpu" if cpu > memory else "memory")


def scale_down_verdict(*, node_name: str, node: NodeRecord | None, pods: Sequence[PodValue],
                       pdbs: Sequence[PdbRecord] | None, settings: AutoscalerSettings, now: float,
                       controllers: Controllers | None = None,
                       covering: Mapping[str, Sequence[PdbRecord]] | None = None) -> Verdict:
    """The verdict on one node at wall-clock time ``now`` (seconds since the epoch); ``pdbs`` None: not watched;
    ``controllers`` None: no controller object known (the replicacount rule cannot run); ``covering``: the PDBs
    that cover each pod, by uid, where the caller keeps them (the node state, agent.model.pdb_index); a pod it
    does not hold is matched against ``pdbs`` of its namespace here."""
    problems: list[str] = []
    try:
        rules = rules_of_release(settings.release)
    except ValueError as exc:
        problems.append(f"{exc}: using release {DEFAULT_AUTOSCALER.release}'s rules")
        settings = msgspec.structs.replace(settings, release=DEFAULT_AUTOSCALER.release)
        rules = rules_of_release(settings.release)
    live: list[_Pod] = []
    differing: list[AutoscalerValue] = []
    crash = False
    for value in pods:
        if not value.reported:
            continue  # Succeeded/Failed: the autoscaler's pod lister leaves them out
        facts = value.eviction
        cpu, memory, why, panic, replaced_first = autoscaler_requests(value, rules.requests)
        if panic:
            crash = True
            problems.append(f"{value.namespace}/{value.name}: {panic}: the autoscaler would crash listing its pods, "
                            "so it has no utilization for any node")
        if why:
            differing.append(AutoscalerValue(uid=value.uid, namespace=value.namespace, name=value.name, cpu=cpu,
                                             memory=memory, scheduler_cpu=value.cpu, scheduler_memory=value.memory,
                                             why=why))
        first = value.record.containers[0].name if replaced_first and value.record is not None else None
        live.append(_Pod(value, facts, cpu, memory, first))
    gpu_node = node is not None and _gpu_resource(node, rules) is not None
    threshold = (settings.scale_down_gpu_utilization_threshold if gpu_node
                 else settings.scale_down_utilization_threshold)
    clock = Clock(now)
    if node is None:
        utilization, state = Utilization(cpu=None, memory=None), NO_NODE
    elif crash:
        utilization, state = Utilization(cpu=None, memory=None), AUTOSCALER_CRASH
    else:
        utilization = _utilization(node, live, settings, rules, clock, problems, rules.requests)
        if node.scale_down_disabled == "true":
            state = SCALE_DOWN_DISABLED
        elif utilization.value is None:
            state = ALLOCATABLE_UNUSABLE
        elif rules.underutilized(utilization.value, threshold):
            state = UNDERUTILIZED
        else:
            state = NOT_UNDERUTILIZED
        if node.scale_down_disabled is not None and node.scale_down_disabled != "true":
            problems.append(f"node annotation scale-down-disabled {node.scale_down_disabled[:40]!r} is not \"true\": "
                            "scale-down stays enabled")
    checks = tuple(rule.check for rule in rules.chain(settings))
    context = rules.context(settings, clock, problems, controllers)
    words = ("true", "false", ON_COMPLETION_VALUE) if rules.on_completion else ("true", "false")
    blockers = []
    # PDB -> how many of the node's pods to move it covers, and may cover (coverage unknown)
    to_move: dict[tuple[str, str], tuple[PdbRecord, list[int]]] = {}
    grouped: dict[str, list[PdbRecord]] | None = None  # pdbs by namespace, made when a pod needs it
    for pod in live:
        value, facts = pod.value, pod.facts
        safe = facts.safe_to_evict
        if safe is not None and safe not in words:
            problems.append(f"{value.namespace}/{value.name}: safe-to-evict {safe[:40]!r} is not one of "
                            f"{', '.join(repr(w) for w in words)} (cluster-autoscaler {rules.release}): ignored")
        if pdbs is None:
            matching = None
        elif covering is not None and (kept := covering.get(value.uid)) is not None:
            matching = list(kept)
        else:
            if grouped is None:
                grouped = by_namespace(pdbs)
            # The pod's label map is built once, for the PDBs of its namespace only.
            matching = may_cover(grouped.get(value.namespace, ()), value.namespace, facts)
        outcome = drain_outcome(DrainPod(value.namespace, value.name, facts, matching), checks, context)
        if outcome is not None and outcome.blocks:
            blockers.append(Blocker(uid=value.uid, namespace=value.namespace, name=value.name, reason=outcome.reason,
                                    detail=outcome.detail))
        elif matching and (outcome is None or not outcome.skips) and not is_daemonset_pod(facts):
            labels_unknown = facts.labels_over_bound > 0
            for pdb in matching:  # a pod the autoscaler would move (PodsToReschedule; DaemonSet pods aside)
                counts = to_move.setdefault((pdb.namespace, pdb.name), (pdb, [0, 0]))[1]
                counts[(labels_unknown or pdb.selector_over_bound > 0) and coverage_unknown(pdb, labels_unknown)] += 1
    # A PDB is risky when the pods it covers pass its allowance, and may be when those it may cover do too.
    risky = [(pdb, known, unsure) for pdb, (known, unsure) in to_move.values()
             if known + unsure > pdb.disruptions_allowed]
    shown = heapq.nsmallest(MAX_PDB_RISKS, risky, key=lambda e: (e[0].namespace, e[0].name))
    risks = tuple(PdbRisk(namespace=pdb.namespace, name=pdb.name, disruptions_allowed=pdb.disruptions_allowed,
                          pods=known, unknown=unsure) for pdb, known, unsure in shown)
    return Verdict(node=node_name, state=state, utilization=utilization, threshold=threshold,
                   blockers=tuple(blockers), pdbs_known=pdbs is not None, controllers_known=controllers is not None,
                   release=settings.release,
                   differing=tuple(differing), problems=tuple(problems), pdb_risks=risks,
                   pdb_risks_more=len(risky) - len(risks), holds_until=clock.next)


def verdict_off(*, node_name: str, why: str) -> Verdict:
    """No verdict on the node, and ``why`` (one line): the autoscaler's settings the agent was given are unusable, so
    it claims nothing about the node (state ``unknown``, no utilization, no threshold: NaN, which no exporter
    writes) while its pods and node values are reported as usual (docs/configuration.md#when-a-setting-is-wrong)."""
    return Verdict(node=node_name, state=NO_NODE, utilization=Utilization(cpu=None, memory=None), threshold=math.nan,
                   problems=(why,), off=why)


def node_verdict(*, node_name: str, node: NodeRecord | None, pods: Sequence[PodValue],
                 pdbs: Sequence[PdbRecord] | None, settings: AutoscalerSettings, now: float,
                 controllers: Controllers | None = None, covering: Mapping[str, Sequence[PdbRecord]] | None = None,
                 said: Sequence[str] = ()) -> Verdict:
    """:func:`scale_down_verdict` on the node from every PDB of the cluster as the agent keeps them
    (agent.model.pdb.as_kept), with the problems of the PDBs of its pods' namespaces (the first MAX_PDB_PROBLEMS;
    a malformed selector covers no pod) and ``said`` (why PDBs or controllers are not known): what the agent
    exports and ``explain`` prints for a node alike."""
    if pdbs:
        # A PDB covers pods of its own namespace only: the model matches the node's pods against the few PDBs of
        # their namespaces, not every PDB of the cluster.
        namespaces = {v.namespace for v in pods}
        pdbs = tuple(p for p in pdbs if p.namespace in namespaces)
    verdict = scale_down_verdict(node_name=node_name, node=node, pods=pods, pdbs=pdbs, settings=settings, now=now,
                                 controllers=controllers, covering=covering)
    found = at_most((f"PodDisruptionBudget {p.namespace}/{p.name}: {problem}" for p in pdbs or ()
                     for problem in p.problems), MAX_PDB_PROBLEMS)
    found += said
    if found:
        verdict = msgspec.structs.replace(verdict, problems=(*verdict.problems, *found))
    return verdict
