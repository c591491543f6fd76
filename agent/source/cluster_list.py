"""One LIST of pods, one of Nodes, one of the cluster's PodDisruptionBudgets and one of each controller kind the
autoscaler's replicacount rule looks up, for ``explain --live``: no watch, nothing kept running.

The same parts the agent's reflectors use: the configuration (kubeconfig
through the kubernetes package) and the transport (``KubeApi``), the reflectors' watched resources
(path, field selector), the streamed LIST reader and the decode reader, so a
live answer and the agent's numbers come from the same code.
"""

from __future__ import annotations

from typing import Any

from agent.decode.reader import CONTROLLERS, ObjectKind, Skipped
from agent.model.controllers import CONTROLLER_KINDS, ControllerRecord
from agent.source.documents import ClusterObjects
from agent.source.kube import ApiError
from agent.source.listing import read_list
from agent.source.reflector import ListWatchApi, NodeObject, PdbsOfCluster, PodsOfNode, Watched

__all__ = ["list_cluster", "list_resource", "CONTROLLER_PATHS"]

#: Where each controller kind is listed, cluster-wide (the autoscaler's listers: core, batch and apps).
CONTROLLER_PATHS = {"ReplicationController": "/api/v1/replicationcontrollers", "Job": "/apis/batch/v1/jobs",
                    "ReplicaSet": "/apis/apps/v1/replicasets", "StatefulSet": "/apis/apps/v1/statefulsets",
                    "DaemonSet": "/apis/apps/v1/daemonsets"}
# What a refusal looks like (RBAC, no such API): the objects stay unknown rather than failing the command.
_REFUSED = (401, 403, 404)


def _list(api: ListWatchApi, path: str, field_selector: str, kind: ObjectKind[Any],
          timeout: float) -> tuple[list[Any], list[Skipped]]:
    params = {"fieldSelector": field_selector} if field_selector else {}
    _, items = read_list(api.get_chunks(path, params, read_timeout=timeout), kind.list_item)
    return kind.decode_all(items)


def list_resource(api: ListWatchApi, watched: Watched, timeout: float = 60.0) -> tuple[list[Any], list[Skipped]]:
    """Every decodable object of one LIST, and what was skipped."""
    return _list(api, watched.path, watched.field_selector, watched.kind, timeout)


def _list_controllers(api: ListWatchApi, timeout: float) -> tuple[list[ControllerRecord] | None, list[Skipped], str]:
    """Every object of the five kinds, or None and why at the first kind refused (said once: without all five
    the autoscaler's lookups cannot be followed)."""
    found: list[ControllerRecord] = []
    skipped: list[Skipped] = []
    for kind in CONTROLLER_KINDS:
        try:
            records, bad = _list(api, CONTROLLER_PATHS[kind], "", CONTROLLERS[kind], timeout)
        except ApiError as exc:
            if exc.status not in _REFUSED:
                raise
            return None, [], (f"cannot list {kind}s ({exc}): controllers are unknown, so a pod whose controller is "
                              "gone is not seen")
        found += records
        skipped += bad
    return found, skipped, ""


def list_cluster(api: ListWatchApi, node: str | None = None, timeout: float = 60.0,
                 pdbs: bool = True, controllers: bool = True) -> ClusterObjects:
    """The pods (bound to ``node`` when given, by the indexed field spec.nodeName), the Nodes and, if ``pdbs``,
    every PDB of the cluster and, if ``controllers``, every controller object (a refusal of those LISTs, say by
    RBAC, leaves them unknown rather than failing)."""
    pods, skipped_pods = list_resource(api, PodsOfNode(node_name=node), timeout)
    nodes, skipped_nodes = list_resource(api, NodeObject(node_name=node), timeout)
    found, error = None, ""
    skipped_pdbs: list[Skipped] = []
    if pdbs:
        try:
            found, skipped_pdbs = list_resource(api, PdbsOfCluster(), timeout)
        except ApiError as exc:
            if exc.status not in _REFUSED:
                raise
            error = f"cannot list PodDisruptionBudgets ({exc}): they are unknown"
    owners, skipped_owners, owners_error = _list_controllers(api, timeout) if controllers else (None, [], "")
    return ClusterObjects(pods, nodes, skipped_pods + skipped_nodes + skipped_pdbs + skipped_owners, found, error,
                          owners, owners_error)
