"""The agent's own Node object, reduced to what the comparisons need."""

from __future__ import annotations

from typing import Any, NamedTuple

from agent.model.fields import DecodeError, FieldReader

__all__ = ["NodeRecord", "decode_node"]


class NodeRecord(NamedTuple):
    name: str
    uid: str
    resource_version: str
    # Raw quantity strings for cpu, memory and pods, as status reports them.
    capacity: dict[str, str]
    allocatable: dict[str, str]
    problems: tuple[str, ...] = ()


def _quantities(r: FieldReader, obj: Any, path: str) -> dict[str, str]:
    raw = r.mapping(obj, path)
    out = {}
    for resource in ("cpu", "memory", "pods"):
        value = raw.get(resource)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str):
            out[resource] = value
        elif value is not None:
            r.problems.append(f"{path}.{resource} is not a quantity string")
    return out


def decode_node(obj: Any) -> NodeRecord:
    if not isinstance(obj, dict):
        raise DecodeError(f"node is not an object but {type(obj).__name__}")
    r = FieldReader()
    meta = r.mapping(obj.get("metadata"), "metadata")
    status = r.mapping(obj.get("status"), "status")
    name = r.string(meta.get("name"), "metadata.name")
    if not name:
        raise DecodeError("node has no metadata.name")
    return NodeRecord(
        name=name,
        uid=r.string(meta.get("uid"), "metadata.uid"),
        resource_version=r.string(meta.get("resourceVersion"), "metadata.resourceVersion"),
        capacity=_quantities(r, status.get("capacity"), "status.capacity"),
        allocatable=_quantities(r, status.get("allocatable"), "status.allocatable"),
        problems=tuple(r.problems),
    )
