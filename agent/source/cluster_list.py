"""One LIST of pods and one of Nodes, for ``explain --live``: no watch, nothing kept running.

The same parts the agent's reflectors use: the kubernetes package's
configuration and transport (``KubeApi``), the reflectors' watched resources
(path, field selector), the streamed LIST reader and the decode reader, so a
live answer and the agent's numbers come from the same code.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from agent.decode.reader import Skipped
from agent.model.node import NodeRecord
from agent.model.pod import PodRecord
from agent.source.listing import read_list
from agent.source.reflector import ListWatchApi, NodeObject, PodsOfNode, Watched

__all__ = ["Listed", "list_cluster", "list_resource"]


class Listed(NamedTuple):
    pods: list[PodRecord]
    nodes: list[NodeRecord]
    skipped: list[Skipped]  # objects that could not be identified, with why


def list_resource(api: ListWatchApi, watched: Watched, timeout: float = 60.0) -> tuple[list[Any], list[Skipped]]:
    """Every decodable object of one LIST, and what was skipped."""
    params = {"fieldSelector": watched.field_selector} if watched.field_selector else {}
    _, items = read_list(api.get_chunks(watched.path, params, read_timeout=timeout), watched.kind.list_item)
    return watched.kind.decode_all(items)


def list_cluster(api: ListWatchApi, node: str | None = None, timeout: float = 60.0) -> Listed:
    """The pods (bound to ``node`` when given, by the indexed field spec.nodeName) and the Nodes."""
    pods, skipped_pods = list_resource(api, PodsOfNode(node_name=node), timeout)
    nodes, skipped_nodes = list_resource(api, NodeObject(node_name=node), timeout)
    return Listed(pods, nodes, skipped_pods + skipped_nodes)
