"""The cluster-autoscaler's verdict on one node: its utilization, whether it is a scale-down candidate, and every
pod that would block its removal, computed as cluster-autoscaler's ``simulator/`` does (shared/KNOWLEDGE.md §6).

Pure: the exporters, the debug views and ``explain`` all call ``scale_down_verdict`` on a snapshot, so what is
exported and what is explained cannot disagree. What it cannot see: node-group minimum size, whether the pods fit
elsewhere, the cloud provider's state, whether a pod's controller object still exists.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from agent.model.autoscaler_settings import AutoscalerSettings
from agent.model.node import NodeRecord
from agent.model.pdb import PdbRecord
from agent.model.valuation import PodValue

__all__ = ["Utilization", "Blocker", "AutoscalerValue", "Verdict", "scale_down_verdict", "STATES", "REASONS",
           "UNDERUTILIZED", "NOT_UNDERUTILIZED", "SCALE_DOWN_DISABLED", "NO_NODE"]

# The verdict's states (bounded: exported as a label value).
UNDERUTILIZED = "underutilized"
NOT_UNDERUTILIZED = "not_underutilized"
SCALE_DOWN_DISABLED = "scale_down_disabled"
NO_NODE = "unknown"  # the Node object is not known (not yet read, or deleted)
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


def scale_down_verdict(*, node_name: str, node: NodeRecord | None, pods: Sequence[PodValue],
                       pdbs: Sequence[PdbRecord] | None, settings: AutoscalerSettings, now: float) -> Verdict:
    """The verdict on one node at wall-clock time ``now`` (seconds since the epoch); ``pdbs`` None: not watched."""
    raise NotImplementedError  # issue 31: model helper
