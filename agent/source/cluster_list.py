"""One LIST of pods and one of Nodes, for ``explain --live``: no watch, nothing kept running.

The same parts the agent's reflectors use: the kubernetes package's
configuration and transport (``KubeApi``), the reflectors' resource
definitions (path, field selector, decoder) and the streamed LIST reader,
so a live answer and the agent's numbers come from the same code.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

from agent.model.node import NodeRecord
from agent.model.pod import PodRecord
from agent.source.listing import Unparsable, read_list
from agent.source.reflector import ListWatchApi, Resource, node_object, pods_of_node

__all__ = ["Listed", "list_cluster", "list_resource"]


class Listed(NamedTuple):
    pods: list[PodRecord]
    nodes: list[NodeRecord]
    skipped: list[str]  # items that could not be identified, with why


def list_resource(api: ListWatchApi, resource: Resource, timeout: float = 60.0) -> tuple[list[Any], list[str]]:
    """Every decodable object of one LIST, and a note for each item skipped."""
    params = {"fieldSelector": resource.field_selector} if resource.field_selector else {}
    _, items = read_list(api.get_chunks(resource.path, params, read_timeout=timeout), resource.typed_item)
    records, skipped = [], []
    for item in items:
        if isinstance(item, Unparsable):
            skipped.append(f"unparsable {resource.name} item at offset {item.offset} ({item.reason})")
            continue
        try:
            records.append(resource.decode(item))
        except (ValueError, RecursionError) as exc:  # DecodeError, or bytes that are not JSON
            skipped.append(f"{resource.name}: {exc}")
    return records, skipped


def list_cluster(api: ListWatchApi, node: str | None = None, timeout: float = 60.0) -> Listed:
    """The pods (bound to ``node`` when given, by the indexed field spec.nodeName) and the Nodes."""
    pods_resource, nodes_resource = pods_of_node(node or ""), node_object(node or "")
    if node is None:
        pods_resource = replace(pods_resource, field_selector="")
        nodes_resource = replace(nodes_resource, field_selector="")
    pods, skipped_pods = list_resource(api, pods_resource, timeout)
    nodes, skipped_nodes = list_resource(api, nodes_resource, timeout)
    return Listed(pods, nodes, skipped_pods + skipped_nodes)
