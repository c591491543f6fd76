"""The controller objects the cluster-autoscaler's ``replicacount`` rule looks up (its listers), as plain records.

A running autoscaler always has its listers, so a pod whose ReplicationController, Job, ReplicaSet, StatefulSet or
DaemonSet is gone blocks its node as ControllerNotFound. The agent in its pod watches no controllers (the verdict
says it cannot see this); ``explain`` can, from a dump that holds them or from ``--live``. Only what the rule reads
is kept: kind, namespace, name and ``spec.replicas``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

import msgspec

__all__ = ["CONTROLLER_KINDS", "ControllerRecord", "Controllers", "controller_index", "HOW_TO_DUMP_CONTROLLERS"]

#: The kinds the rule looks up, each through its own lister (core, batch and apps).
CONTROLLER_KINDS = ("ReplicationController", "Job", "ReplicaSet", "StatefulSet", "DaemonSet")
#: A dump that holds them (any one object of these kinds makes all five count as listed).
HOW_TO_DUMP_CONTROLLERS = "kubectl get nodes,pods,pdb,rs,jobs,sts,rc,ds -A -o json"

#: (kind, namespace, name) -> spec.replicas (None: unset, or a kind without replicas).
Controllers = Mapping[tuple[str, str, str], "int | None"]


class ControllerRecord(msgspec.Struct, frozen=True, kw_only=True):
    kind: str  # one of CONTROLLER_KINDS
    namespace: str
    name: str
    uid: str = ""
    replicas: int | None = None


def controller_index(records: Iterable[ControllerRecord]) -> Controllers:
    """The records as the rule looks them up, by kind, namespace and name."""
    return MappingProxyType({(r.kind, r.namespace, r.name): r.replicas for r in records})
