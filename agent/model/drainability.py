"""The cluster-autoscaler's drainability rules, one unit per rule as its ``simulator/drainability/rules/`` has them.

Each rule looks at one pod and either decides (skip it, drain it, or block the node's removal) or leaves the pod to
the next rule; the first decision wins (``rules.Rules.Drainable``). Which rules run, and in which order, is the
release's (:mod:`agent.model.autoscaler_rules`); the settings then leave some out, as ``rules.Default`` skips a rule
whose ``--skip-nodes-with-*`` flag is off.

``replicacount`` reads the controller objects (the autoscaler's listers): it runs where the input holds them
(``explain`` with a dump that has controllers, or ``--live``) and not in the agent's pod, which watches none (the
verdict then says it cannot see a pod whose controller is gone). Not run: ``terminal``, which never sees a pod
here, since the autoscaler's pod lister, like the verdict, leaves Succeeded and Failed pods out. No default rule
returns ``Overrides`` (rules.go's override mechanism), so the first outcome always wins.

Pure: the time a rule compares against comes in through :class:`Clock`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec

from agent.model.controllers import Controllers
from agent.model.pdb import PdbRecord, coverage_unknown
from agent.model.pod import EvictionFacts

__all__ = ["Clock", "Outcome", "SKIP", "DRAINABLE", "blocks", "DrainPod", "DrainContext", "DrainRule",
           "long_terminating", "is_daemonset_pod", "MIRROR", "LONG_TERMINATING", "DAEMONSET", "SAFE_TO_EVICT",
           "REPLICATED", "SYSTEM", "NOT_SAFE_TO_EVICT_RULE", "LOCAL_STORAGE_RULE", "PDB", "REASONS", "NOT_REPLICATED",
           "UNMOVABLE_KUBE_SYSTEM", "KUBE_SYSTEM_PDB_UNKNOWN", "NOT_SAFE_TO_EVICT", "LOCAL_STORAGE", "NOT_ENOUGH_PDB",
           "PDB_UNKNOWN", "DEFAULT_GRACE", "REPLICA_COUNT", "REPLICA_COUNT_ANY_GROUP", "ON_COMPLETION_RULE",
           "CONTROLLER_NOT_FOUND", "MIN_REPLICAS_REACHED", "ON_COMPLETION", "ON_COMPLETION_VALUE", "parse_group",
           "Check", "drain_outcome"]

# Why a pod blocks removal: the autoscaler's drainability reasons, snake-cased (bounded: exported as a label value).
NOT_REPLICATED = "not_replicated"
UNMOVABLE_KUBE_SYSTEM = "unmovable_kube_system"
KUBE_SYSTEM_PDB_UNKNOWN = "kube_system_pdb_unknown"  # no PDB watch: blocks unless a PDB covers it
NOT_SAFE_TO_EVICT = "not_safe_to_evict"
LOCAL_STORAGE = "local_storage"
NOT_ENOUGH_PDB = "not_enough_pdb"
# Not the autoscaler's: whether a PDB covers the pod is unknown to the agent (a PDB's selector or the pod's labels over
# the agent's bounds, agent.model.pdb / agent.model.pod), and the answer would change whether it blocks
# (drain_outcome).
PDB_UNKNOWN = "pdb_unknown"
CONTROLLER_NOT_FOUND = "controller_not_found"  # replicacount: the pod's controller object is gone
MIN_REPLICAS_REACHED = "min_replicas_reached"  # replicacount: spec.replicas below --min-replica-count
# oncompletion (1.36 on): safe-to-evict "on-completion"; the autoscaler waits for the pod (BlockedByOnCompletionPod).
ON_COMPLETION = "on_completion"
# In the order of the rules that give them (rules.Default).
REASONS = (CONTROLLER_NOT_FOUND, MIN_REPLICAS_REACHED, ON_COMPLETION, NOT_REPLICATED, UNMOVABLE_KUBE_SYSTEM,
           KUBE_SYSTEM_PDB_UNKNOWN, NOT_SAFE_TO_EVICT, LOCAL_STORAGE, NOT_ENOUGH_PDB, PDB_UNKNOWN)
#: drain.PodSafeToEvictOnCompletionValue.
ON_COMPLETION_VALUE = "on-completion"

#: apiv1.DefaultTerminationGracePeriodSeconds, for a pod whose spec does not say.
DEFAULT_GRACE = 30
# The kinds the replicated rule trusts while --skip-nodes-with-custom-controller-pods is on.
_REPLICATED_KINDS = frozenset({"ReplicationController", "Job", "ReplicaSet", "StatefulSet"})
_SYSTEM_NAMESPACE = "kube-system"
_UPSTREAM = "cluster-autoscaler/simulator/drainability/rules/"


class Clock:
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


class Outcome(NamedTuple):
    """A rule's decision: ``kind`` "skip" (neither moved nor blocking), "drain" (moved) or "block" (with the
    reason, one of REASONS, and one line for people)."""

    kind: str
    reason: str = ""
    detail: str = ""

    @property
    def blocks(self) -> bool:
        return self.kind == "block"

    @property
    def skips(self) -> bool:
        """Neither moved nor blocking (upstream's SkipDrain): the pod is left where it is."""
        return self.kind == "skip"


SKIP = Outcome("skip")
DRAINABLE = Outcome("drain")


def blocks(reason: str, detail: str) -> Outcome:
    """A rule's "block": ``reason`` one of REASONS, ``detail`` one line for people."""
    return Outcome("block", reason, detail)


class DrainPod(NamedTuple):
    """One pod as the rules read it; ``matching`` None: PDBs not watched (the PDBs that may cover it, some with their
    coverage unknown: drain_outcome gives each rule a covering without those)."""

    namespace: str
    name: str
    facts: EvictionFacts
    matching: list[PdbRecord] | None


class DrainContext(NamedTuple):
    """What the rules share for one verdict: the settings they read, the clock, and where problems go."""

    custom_controllers: bool  # --skip-nodes-with-custom-controller-pods
    system_pod_timeout: float | None  # --blocking-system-pod-distruption-timeout where the release has it
    long_terminating_extra: float
    clock: Clock
    problems: list[str]
    controllers: Controllers | None = None  # the autoscaler's listers; None: not known (replicacount cannot run)
    min_replica_count: int = 0  # --min-replica-count


Check = Callable[[DrainPod, DrainContext], Outcome | None]


class DrainRule(msgspec.Struct, frozen=True, kw_only=True):
    """One drainability rule: its name, the upstream file it follows, the reasons it may block with, the setting
    that must be on for it to run (None: always runs) and the check itself."""

    name: str
    upstream: str
    reasons: tuple[str, ...] = ()
    enabled_by: str | None = None  # an AutoscalerSettings field, as rules.Default's ``skip``
    check: Check


def _go_seconds(seconds: int) -> float:
    """``time.Duration(seconds) * time.Second`` in seconds, as Go computes it: int64 nanoseconds, wrapping past
    about 292 years (a grace period of 10^10 s is some 267 years in the past)."""
    nanos = (seconds * 1_000_000_000 + 2**63) % 2**64 - 2**63
    return nanos / 1e9


def long_terminating(facts: EvictionFacts, clock: Clock, extra: float) -> bool:
    """drain.IsPodLongTerminating: deleted, and grace period plus ``extra`` strictly passed."""
    if facts.deleted is None:
        return False
    grace = DEFAULT_GRACE if facts.termination_grace is None else facts.termination_grace
    return clock.passed(facts.deleted + _go_seconds(grace) + extra)


def is_daemonset_pod(facts: EvictionFacts) -> bool:
    """utils/pod IsDaemonSetPod: controlled by a DaemonSet, or annotated daemonset-pod "true"."""
    controller = facts.controller
    return (controller is not None and controller.kind == "DaemonSet") or facts.daemonset_pod == "true"


def _mirror(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    return SKIP if pod.facts.mirror else None


def _long_terminating(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    return SKIP if long_terminating(pod.facts, ctx.clock, ctx.long_terminating_extra) else None


def _daemonset(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    return DRAINABLE if is_daemonset_pod(pod.facts) else None


def _safe_to_evict(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    return DRAINABLE if pod.facts.safe_to_evict == "true" else None


def _replicated(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    controller = pod.facts.controller
    if controller is None:
        return blocks(NOT_REPLICATED, "no controller (no ownerReference with controller: true)")
    if ctx.custom_controllers and controller.kind not in _REPLICATED_KINDS:
        return blocks(NOT_REPLICATED, f"controller {controller.kind}/{controller.name} is not one the "
                                      "autoscaler trusts (--skip-nodes-with-custom-controller-pods)")
    return None


def _system(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    if pod.namespace != _SYSTEM_NAMESPACE or pod.matching:  # covered by a PDB: the later rules decide
        return None
    timeout, created = ctx.system_pod_timeout, pod.facts.created
    # A pod with no creationTimestamp has no age: it never outlives the timeout (upstream checks IsZero first).
    if timeout is not None and created is not None and ctx.clock.passed(created + timeout):
        return DRAINABLE
    if pod.matching is None:
        return blocks(KUBE_SYSTEM_PDB_UNKNOWN,
                      "kube-system pod: blocks unless a PodDisruptionBudget covers it (PDBs not watched)")
    return blocks(UNMOVABLE_KUBE_SYSTEM, "kube-system pod not covered by any PodDisruptionBudget")


def parse_group(api_version: str) -> str | None:
    """schema.ParseGroupVersion's group: "" for "v1" or "", None where Go returns an error (more than one "/")."""
    if not api_version or api_version == "/":
        return ""
    if api_version.count("/") > 1:
        return None
    return api_version.partition("/")[0] if "/" in api_version else ""


def _replica_count(pod: DrainPod, ctx: DrainContext, *, apps_only_statefulsets: bool) -> Outcome | None:
    """replicacount/rule.go: the controller object looked up by kind in the pod's namespace (the group is read only
    where the rule reads it)."""
    listed, controller = ctx.controllers, pod.facts.controller
    if listed is None or controller is None:
        return None
    group = parse_group(controller.api_version)
    if group is None:
        return None
    kind, name = controller.kind, controller.name
    found = (kind, pod.namespace, name) in listed
    replicas = listed.get((kind, pod.namespace, name))
    gone = blocks(CONTROLLER_NOT_FOUND, f"controller {kind}/{name} not found (gone, or not in the input)")
    too_few = blocks(MIN_REPLICAS_REACHED, f"controller {kind}/{name} has spec.replicas {replicas}, below "
                                           f"--min-replica-count {ctx.min_replica_count}")
    if kind == "ReplicationController":
        if not found:
            return gone
        return too_few if replicas is not None and replicas < ctx.min_replica_count else None
    if is_daemonset_pod(pod.facts):
        # Only an apps DaemonSet has a lister; a pod annotated daemonset-pod with another owner is left alone.
        return gone if group == "apps" and kind == "DaemonSet" and not found else None
    if kind == "Job":
        return None if found else gone
    if kind == "ReplicaSet":
        if not found:
            return gone
        return too_few if replicas is not None and replicas < ctx.min_replica_count else None
    if kind == "StatefulSet" and (group == "apps" or not apps_only_statefulsets):
        return None if found else gone
    return None


def _on_completion(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    if pod.facts.safe_to_evict == ON_COMPLETION_VALUE:
        return blocks(ON_COMPLETION, "annotated cluster-autoscaler.kubernetes.io/safe-to-evict: \"on-completion\": "
                                     "the autoscaler waits for it to complete before removing the node")
    return None


def _not_safe_to_evict(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    if pod.facts.safe_to_evict == "false":
        return blocks(NOT_SAFE_TO_EVICT, "annotated cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\"")
    return None


def _local_storage(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    """drain.HasBlockingLocalStorage: the local volumes not named in safe-to-evict-local-volumes (read at decode,
    agent.model.local_storage)."""
    local = pod.facts.local_storage
    if local is None:
        return None
    if local.unknown:
        shown = ", ".join(repr(n) for n in local.unknown) + (f" and {local.more_unknown} more"
                                                             if local.more_unknown else "")
        ctx.problems.append(f"{pod.namespace}/{pod.name}: safe-to-evict-local-volumes names {shown}, no local "
                            "volume of the pod: ignored")
    if not local.blocking:
        return None
    more = f" and {local.more_blocking} more" if local.more_blocking else ""
    return blocks(LOCAL_STORAGE, f"local storage: {', '.join(local.blocking)}{more} (not in "
                                 "safe-to-evict-local-volumes)")


def _pdb(pod: DrainPod, ctx: DrainContext) -> Outcome | None:
    """pdb/rule.go: the first PDB covering the pod that allows no disruption blocks it."""
    for pdb in pod.matching or ():
        if pdb.disruptions_allowed < 1:
            return blocks(NOT_ENOUGH_PDB, f"PodDisruptionBudget {pdb.namespace}/{pdb.name} allows "
                                          f"{pdb.disruptions_allowed} disruptions")
    return None


def _first(pod: DrainPod, checks: Sequence[Check], ctx: DrainContext) -> Outcome | None:
    for check in checks:
        outcome = check(pod, ctx)
        if outcome is not None:
            return outcome
    return None


def _kind(outcome: Outcome | None) -> tuple[str, str]:
    """What an outcome means for the verdict: no outcome moves the pod, as "drain" does."""
    return ("drain", "") if outcome is None else (outcome.kind, outcome.reason)


def drain_outcome(pod: DrainPod, checks: Sequence[Check], ctx: DrainContext) -> Outcome | None:
    """The first outcome of ``checks`` (rules.Rules.Drainable) for ``pod``, whose ``matching`` may hold PDBs whose
    coverage of the pod is unknown (:func:`agent.model.pdb.coverage_unknown`).

    Only two facts of the coverage reach a rule: whether any PDB covers the pod (the system rule) and whether one
    that allows no disruption does (the pdb rule). So the chain runs on the three coverings that give every
    reachable pair: the known PDBs alone, with the unknown ones that allow disruptions, and with every one. Where
    they agree, that is the outcome (an unknown PDB that allows disruptions changes nothing for a pod outside
    kube-system); where some block and some do not, the pod blocks as PDB_UNKNOWN; where all block for different
    reasons, it blocks with the first, whose detail names the others."""
    matching = pod.matching
    labels_unknown = pod.facts.labels_over_bound > 0
    if not matching or (not labels_unknown and not any(p.selector_over_bound for p in matching)):
        return _first(pod, checks, ctx)  # every coverage known (the common case, read without a call per PDB)
    placed = [not coverage_unknown(p, labels_unknown) for p in matching]
    if all(placed):
        return _first(pod, checks, ctx)
    unsure = [p for p, known in zip(matching, placed, strict=True) if not known]
    known_only = [p for p, known in zip(matching, placed, strict=True) if known]
    lenient = [p for p, known in zip(matching, placed, strict=True) if known or p.disruptions_allowed >= 1]
    outcomes = [_first(pod._replace(matching=known_only), checks, ctx)]
    quiet = ctx._replace(problems=[])  # a problem is said once, from the first run
    outcomes += [_first(pod._replace(matching=m), checks, quiet) for m in (lenient, matching)]
    first = outcomes[0]
    kinds = {_kind(o) for o in outcomes}
    if len(kinds) == 1:
        return first
    culprit = next((p for p in unsure if p.disruptions_allowed < 1), unsure[0])
    why = ("the pod's labels are over the agent's bound" if labels_unknown and not culprit.selector_over_bound
           else f"its selector ({culprit.selector_over_bound:,} bytes) is over the agent's bound")
    where = f"PodDisruptionBudget {culprit.namespace}/{culprit.name} may cover it: {why}"
    if all(kind == "block" for kind, _ in kinds):
        assert first is not None
        others = ", ".join(sorted(reason for _, reason in kinds if reason != first.reason))
        return first._replace(detail=f"{first.detail} (or {others}: {where})")
    return blocks(PDB_UNKNOWN, f"{where}, so whether the autoscaler may evict it is unknown")


MIRROR = DrainRule(name="mirror", upstream=_UPSTREAM + "mirror/rule.go", check=_mirror)
LONG_TERMINATING = DrainRule(name="longterminating", upstream=_UPSTREAM + "longterminating/rule.go",
                             check=_long_terminating)
DAEMONSET = DrainRule(name="daemonset", upstream=_UPSTREAM + "daemonset/rule.go", check=_daemonset)
SAFE_TO_EVICT = DrainRule(name="safetoevict", upstream=_UPSTREAM + "safetoevict/rule.go", check=_safe_to_evict)
REPLICATED = DrainRule(name="replicated", upstream=_UPSTREAM + "replicated/rule.go", reasons=(NOT_REPLICATED,),
                       check=_replicated)
SYSTEM = DrainRule(name="system", upstream=_UPSTREAM + "system/rule.go",
                   reasons=(UNMOVABLE_KUBE_SYSTEM, KUBE_SYSTEM_PDB_UNKNOWN), enabled_by="skip_nodes_with_system_pods",
                   check=_system)
NOT_SAFE_TO_EVICT_RULE = DrainRule(name="notsafetoevict", upstream=_UPSTREAM + "notsafetoevict/rule.go",
                                   reasons=(NOT_SAFE_TO_EVICT,), check=_not_safe_to_evict)
LOCAL_STORAGE_RULE = DrainRule(name="localstorage", upstream=_UPSTREAM + "localstorage/rule.go",
                               reasons=(LOCAL_STORAGE,), enabled_by="skip_nodes_with_local_storage",
                               check=_local_storage)
# replicacount before 1.36 looked a StatefulSet up whatever its group; 1.36.1 only for apps (1.31.1 read).
REPLICA_COUNT_ANY_GROUP = DrainRule(name="replicacount", upstream=_UPSTREAM + "replicacount/rule.go",
                                    reasons=(CONTROLLER_NOT_FOUND, MIN_REPLICAS_REACHED),
                                    enabled_by="skip_nodes_with_custom_controller_pods",
                                    check=lambda pod, ctx: _replica_count(pod, ctx, apps_only_statefulsets=False))
REPLICA_COUNT = msgspec.structs.replace(REPLICA_COUNT_ANY_GROUP,
                                        check=lambda pod, ctx: _replica_count(pod, ctx, apps_only_statefulsets=True))
ON_COMPLETION_RULE = DrainRule(name="oncompletion", upstream=_UPSTREAM + "oncompletion/rule.go",
                               reasons=(ON_COMPLETION,), check=_on_completion)
PDB = DrainRule(name="pdb", upstream=_UPSTREAM + "pdb/rule.go", reasons=(NOT_ENOUGH_PDB, PDB_UNKNOWN), check=_pdb)
