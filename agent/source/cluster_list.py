"""One LIST of pods, one of Nodes and one of the cluster's PodDisruptionBudgets, for ``explain --live``: no watch,
nothing kept running.

The same parts the agent's reflectors use: the configuration (kubeconfig
through the kubernetes package) and the transport (``KubeApi``), the reflectors' watched resources
(path, field selector), the streamed LIST reader and the decode reader, so a
live answer and the agent's numbers come from the same code.
"""

from __future__ import annotations

from typing import Any

from agent.decode.reader import Skipped
from agent.source.documents import ClusterObjects
from agent.source.kube import ApiError
from agent.source.listing import read_list
from agent.source.reflector import ListWatchApi, NodeObject, PdbsOfCluster, PodsOfNode, Watched

__all__ = ["list_cluster", "list_resource"]


def list_resource(api: ListWatchApi, watched: Watched, timeout: float = 60.0) -> tuple[list[Any], list[Skipped]]:
    """Every decodable object of one LIST, and what was skipped."""
    params = {"fieldSelector": watched.field_selector} if watched.field_selector else {}
    _, items = read_list(api.get_chunks(watched.path, params, read_timeout=timeout), watched.kind.list_item)
    return watched.kind.decode_all(items)


def list_cluster(api: ListWatchApi, node: str | None = None, timeout: float = 60.0,
                 pdbs: bool = True) -> ClusterObjects:
    """The pods (bound to ``node`` when given, by the indexed field spec.nodeName), the Nodes and, if ``pdbs``,
    every PDB of the cluster (a refusal of that LIST, say by RBAC, leaves them unknown rather than failing)."""
    pods, skipped_pods = list_resource(api, PodsOfNode(node_name=node), timeout)
    nodes, skipped_nodes = list_resource(api, NodeObject(node_name=node), timeout)
    found, error = None, ""
    skipped_pdbs: list[Skipped] = []
    if pdbs:
        try:
            found, skipped_pdbs = list_resource(api, PdbsOfCluster(), timeout)
        except ApiError as exc:
            if exc.status not in (401, 403, 404):
                raise
            error = f"cannot list PodDisruptionBudgets ({exc}): they are unknown"
    return ClusterObjects(pods, nodes, skipped_pods + skipped_nodes + skipped_pdbs, found, error)
