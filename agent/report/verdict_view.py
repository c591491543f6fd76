"""The cluster-autoscaler's verdict as it is shown: built once from a ``Verdict``, rendered by the JSON view
(``views.verdict_report``), the text (``autoscaler.verdict_lines``) and the debug page, which only format it.

Everything a person reads is decided here, once: the headline, the order of the blockers (the drain rules' order of
REASONS, then namespace and name), the wording of a PDB risk and of unknown PDBs, each resource's utilization as
text. Two words, as the cluster-autoscaler uses them: a *candidate* is underutilized and eligible (scale-down not
disabled), whether or not pods block its removal; *removable* is a candidate no pod blocks.
"""

from __future__ import annotations

import math

import msgspec

from agent.model.problems import MAX_PROBLEMS_SHOWN, at_most
from agent.model.scale_down import (
    ALLOCATABLE_UNUSABLE,
    AUTOSCALER_CRASH,
    NOT_UNDERUTILIZED,
    REASONS,
    SCALE_DOWN_DISABLED,
    UNDERUTILIZED,
    AutoscalerValue,
    Blocker,
    PdbRisk,
    Utilization,
    Verdict,
    go_ratio_text,
)
from agent.model.units import cores, memory, percent

__all__ = ["VerdictView", "ResourceView", "DifferingView", "verdict_view", "ratio_text", "requests_text", "plural",
           "CANNOT_SEE"]

# What the agent's verdict cannot know, said wherever the verdict is shown: the autoscaler may still keep a node
# the verdict calls removable.
CANNOT_SEE = ("the node group's minimum size", "whether the pods would fit on other nodes",
              "the cloud provider's state of the node and its group", "whether the pods' controllers still exist")
# Seen where the input holds the controller objects (explain with such a dump, or --live): the replicacount rule ran.
_CONTROLLERS_UNSEEN = CANNOT_SEE[3]


class ResourceView(msgspec.Struct, frozen=True, kw_only=True):
    """One resource's utilization of the node, as text, and whether it is the one that decides (the ratios
    themselves are in ``VerdictView.utilization``)."""

    resource: str
    text: str  # ``ratio_text`` against the threshold; "-" when unknown
    decides: bool


class DifferingView(msgspec.Struct, frozen=True, kw_only=True):
    """One pod the autoscaler's release counts differently from the scheduler, as text (``requests_text``); the
    numbers themselves are in ``value``."""

    pod: str  # namespace/name
    autoscaler: str  # "250m / 64Mi": cpu / memory as the autoscaler counts them
    scheduler: str  # the same as the scheduler counts them
    why: str
    value: AutoscalerValue


class VerdictView(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict on one node as every rendering shows it; the renderers add only labels and markup."""

    node: str
    state: str
    headline: str  # the state and the comparison that decided it, in one line
    candidate: bool
    removable: bool
    release: str
    release_text: str  # the release as shown: "-" when not known
    utilization: Utilization
    threshold: float
    threshold_name: str  # "threshold", or "GPU threshold" on a GPU node
    threshold_text: str  # "50%"
    resources: tuple[ResourceView, ...]  # cpu and memory, or the GPU alone on a GPU node
    blockers: tuple[Blocker, ...]  # in REASONS' order, then namespace, name and uid
    blocking_counts: dict[str, int]  # every reason of REASONS, in its order
    pdbs_known: bool
    pdbs: str  # "known", or "not known: ..." with what that means
    controllers_known: bool  # the controller objects were read: a pod whose controller is gone is seen
    pdb_risks: tuple[PdbRisk, ...]
    pdb_risks_more: int  # risky PDBs beyond those the verdict holds
    pdb_risk: str  # the one sentence on the risky PDBs; "" when there is none
    differing: tuple[DifferingView, ...]  # by namespace, name and uid
    problems: tuple[str, ...]
    cannot_see: tuple[str, ...] = CANNOT_SEE


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, with an s unless n is 1 ("1 pod", "7 pods")."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def ratio_text(ratio: float | None, threshold: float | None = None) -> str:
    """A ratio as a whole percentage, as everywhere else (``percent``); with more digits where that would hide its
    side of ``threshold`` (49.6% is not 50%: the comparison is strict before 1.32)."""
    if ratio is None:
        return "-"
    if not math.isfinite(ratio):
        return go_ratio_text(ratio)
    if threshold is None or ratio == threshold or percent(ratio) != percent(threshold):
        return percent(ratio)
    for digits in range(1, 7):
        text = f"{ratio * 100:.{digits}f}"
        if float(text) != round(threshold * 100, digits):
            return text + "%"
    return f"{ratio * 100!r}%"


def requests_text(cpu: int, memory_: int) -> str:
    """A pod's cpu and memory (nano-units) as one cell: "250m / 64Mi"."""
    return f"{cores(cpu)} / {memory(memory_)}"


def _differing(d: AutoscalerValue) -> DifferingView:
    return DifferingView(pod=f"{d.namespace}/{d.name}", autoscaler=requests_text(d.cpu, d.memory),
                         scheduler=requests_text(d.scheduler_cpu, d.scheduler_memory), why=d.why, value=d)


def _relation(value: float, threshold: float) -> str:
    """The comparison as it came out (from 1.32 a node at its threshold counts as underutilized)."""
    if math.isnan(value):
        return "unordered with"  # NaN: neither above nor below (the autoscaler's "not above" then holds)
    return "<" if value < threshold else ">" if value > threshold else "="


def _headline(v: Verdict, threshold: str) -> str:
    """The state and the comparison that decided it (``threshold``: its name and value)."""
    u = v.utilization
    which = "" if u.value is None else \
        f"{u.resource} {ratio_text(u.value, v.threshold)} {_relation(u.value, v.threshold)} {threshold}"
    n = len(v.blockers)
    if v.state == UNDERUTILIZED:
        removal = ("removable: no pod blocks its removal" if not n else
                   f"not removable: {plural(n, 'pod')} block{'s' if n == 1 else ''} its removal")
        return f"underutilized: {which}, a scale-down candidate, {removal}"
    if v.state == NOT_UNDERUTILIZED:
        return f"not underutilized: {which}" + (f"; {plural(n, 'pod')} would also block its removal" if n else "")
    if v.state == SCALE_DOWN_DISABLED:
        return ("scale-down disabled by the Node's annotation cluster-autoscaler.kubernetes.io/scale-down-disabled=true"
                + (f" ({which})" if which else ""))
    if v.state == AUTOSCALER_CRASH:
        return (f"no utilization: cluster-autoscaler {v.release} would crash on a pod of this node (see the "
                "problems)")
    if v.state == ALLOCATABLE_UNUSABLE:
        return "allocatable unusable: the Node's allocatable gives no utilization (see the problems)"
    if v.off:
        return f"unknown: the verdict is off: {v.off}"
    return "unknown: no Node object to judge utilization against"


def _pdb_risk(risks: tuple[PdbRisk, ...], more: int = 0) -> str:
    if not risks:
        return ""
    return ("; ".join(f"PodDisruptionBudget {r.namespace}/{r.name} allows {plural(r.disruptions_allowed, 'disruption')}"
                      f" and covers {r.pods} of the node's pods"
                      + (f" (and may cover {r.unknown} more: coverage unknown)" if r.unknown else "") for r in risks)
            + (f"; and {more:,} more PodDisruptionBudgets" if more else "")
            + ": not blocking the node's removal, but its pods cannot all be evicted at once (the drain may time out)")


_REASON_ORDER = {reason: i for i, reason in enumerate(REASONS)}


def verdict_view(v: Verdict) -> VerdictView:
    """The view of ``v``: computed here once, so no rendering can order, word or count it differently."""
    u = v.utilization
    # A GPU node is judged by its GPU alone; its resource is the GPU's name (nvidia.com/gpu...), its field ``gpu``.
    gpu = u.gpu is not None
    # An off verdict has no threshold (NaN): shown "-", as an unknown ratio.
    name = "GPU threshold" if gpu else "threshold"
    threshold = ratio_text(None if math.isnan(v.threshold) else v.threshold)
    resources = tuple(ResourceView(resource=r, text=ratio_text(getattr(u, r), v.threshold),
                                   decides=u.value is not None and (gpu or r == u.resource))
                      for r in (("gpu",) if gpu else ("cpu", "memory")))
    blockers = tuple(sorted(v.blockers, key=lambda b: (_REASON_ORDER.get(b.reason, len(REASONS)), b.namespace,
                                                       b.name, b.uid)))
    return VerdictView(
        node=v.node, state=v.state, headline=_headline(v, f"{name} {threshold}"), candidate=v.candidate,
        removable=v.removable, release=v.release, release_text=v.release or "-", utilization=u,
        threshold=v.threshold, threshold_name=name, threshold_text=threshold, resources=resources,
        blockers=blockers, blocking_counts=v.blocking_counts(), pdbs_known=v.pdbs_known,
        pdbs="known" if v.pdbs_known else
             "not known: a kube-system pod is shown as blocking unless a PodDisruptionBudget covers it",
        pdb_risks=v.pdb_risks, pdb_risks_more=v.pdb_risks_more, pdb_risk=_pdb_risk(v.pdb_risks, v.pdb_risks_more),
        differing=tuple(_differing(d) for d in sorted(v.differing, key=lambda d: (d.namespace, d.name, d.uid))),
        problems=tuple(at_most(v.problems, MAX_PROBLEMS_SHOWN)), controllers_known=v.controllers_known,
        cannot_see=tuple(c for c in CANNOT_SEE if not (v.controllers_known and c == _CONTROLLERS_UNSEEN)))
