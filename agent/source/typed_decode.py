"""Typed decoding of pods and nodes from JSON bytes, with the tolerant decoder as the fallback.

``json.loads`` builds a dict for every object of a ~9 KiB pod (managedFields
alone are hundreds) only for :func:`agent.model.pod.decode_pod` to read a few
dozen fields. msgspec decodes the bytes straight into Structs that declare
just those fields (unknown fields are skipped without building anything),
which costs less than ``json.loads`` alone. The Structs accept only the types
a well-formed object has; anything else (a number where a string belongs, an
object that is not one, bytes msgspec refuses) fails validation, and the same
bytes go through ``json.loads`` and the tolerant decoder instead. So decoding
stays total, and both paths give the same record (a property test checks it).

:func:`pod_record` and :func:`node_record` are the one entry point for every
source: they take JSON bytes (a LIST item), a Struct (from a watch line) or an
already parsed object (a replayed capture).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from agent.model.fields import NO_REQUESTS, DecodeError, Requests
from agent.model.node import NodeRecord, decode_node
from agent.model.pod import (OVERCOMMIT_ANNOTATION, USAGE_ANNOTATION, VM_NAME_LABEL, ContainerRequests, PodRecord,
                             StatusRequests, decode_pod)
from agent.pipeline.events import ADDED, DELETED, MODIFIED

__all__ = ["pod_record", "node_record", "pod_event", "node_event", "pod_item", "node_item", "loads"]

_NEONVM_API_VERSION = "vm.neon.tech/v1"
_OBJECT_EVENTS = frozenset({ADDED, MODIFIED, DELETED})


class _S(msgspec.Struct, rename="camel", gc=False):
    """Base: JSON names in camelCase; unknown fields are ignored (msgspec's default).

    Not tracked by the garbage collector (they hold no cycles): a LIST of 2,000
    pods builds tens of thousands of them, and every one tracked made
    collections run more often and longer.
    """


class _Annotations(_S):
    usage: str | None = msgspec.field(default=None, name=USAGE_ANNOTATION)
    overcommit: str | None = msgspec.field(default=None, name=OVERCOMMIT_ANNOTATION)


class _Labels(_S):
    vm_name: str | None = msgspec.field(default=None, name=VM_NAME_LABEL)


class _OwnerReference(_S):
    api_version: str | None = None
    kind: str | None = None
    controller: bool | None = None


class _Meta(_S):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    # Structs of the two keys, not dicts: an annotation map can hold kilobytes
    # (last-applied configurations) of which two values matter.
    annotations: _Annotations | None = None
    labels: _Labels | None = None
    owner_references: list[_OwnerReference] | None = None


class _Resources(_S):
    requests: dict[str, str] | None = None


class _Container(_S):
    name: str | None = None
    resources: _Resources | None = None
    restart_policy: str | None = None


class _Spec(_S):
    node_name: str | None = None
    containers: list[_Container] | None = None
    init_containers: list[_Container] | None = None
    resources: _Resources | None = None
    overhead: dict[str, str] | None = None


class _ContainerStatus(_S):
    name: str | None = None
    resources: _Resources | None = None
    allocated_resources: dict[str, str] | None = None


class _Condition(_S):
    type: str | None = None
    reason: str | None = None


class _PodStatus(_S):
    phase: str | None = None
    # The pod's own totals (in-place pod-level resize).
    resources: _Resources | None = None
    allocated_resources: dict[str, str] | None = None
    container_statuses: list[_ContainerStatus] | None = None
    init_container_statuses: list[_ContainerStatus] | None = None
    conditions: list[_Condition] | None = None


class _Pod(_S):
    metadata: _Meta | None = None
    spec: _Spec | None = None
    status: _PodStatus | None = None


class _PodEvent(_S):
    type: str
    object: _Pod


class _Quantities(_S):
    cpu: str | None = None
    memory: str | None = None
    pods: str | None = None


class _NodeMeta(_S):
    name: str | None = None
    uid: str | None = None
    resource_version: str | None = None


class _NodeStatus(_S):
    capacity: _Quantities | None = None
    allocatable: _Quantities | None = None


class _Node(_S):
    metadata: _NodeMeta | None = None
    status: _NodeStatus | None = None


class _NodeEvent(_S):
    type: str
    object: _Node


_EMPTY_META, _EMPTY_SPEC, _EMPTY_STATUS = _Meta(), _Spec(), _PodStatus()
_POD = msgspec.json.Decoder(_Pod)
_POD_EVENT = msgspec.json.Decoder(_PodEvent)
_NODE = msgspec.json.Decoder(_Node)
_NODE_EVENT = msgspec.json.Decoder(_NodeEvent)


def loads(data: bytes | bytearray | memoryview) -> Any:
    """``json.loads`` of bytes the API server sent, reading a bad UTF-8 byte as a replacement character.

    The API server only sends UTF-8; one bad byte in one string must not cost the object.
    """
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        return json.loads(bytes(data).decode("utf-8", errors="replace"))


def _requests(raw: dict[str, str] | None) -> Requests:
    """The cpu and memory of a request map whose values are all strings, as FieldReader.requests reads it."""
    if not raw:
        return NO_REQUESTS
    cpu, memory = raw.get("cpu"), raw.get("memory")
    if cpu is not None and memory is not None:
        return {"cpu": cpu, "memory": memory}
    if cpu is not None:
        return {"cpu": cpu}
    if memory is not None:
        return {"memory": memory}
    return NO_REQUESTS


def _containers(items: list[_Container] | None, init: bool) -> tuple[ContainerRequests, ...]:
    if not items:
        return ()
    out = []
    for i, c in enumerate(items):
        name = c.name
        resources = c.resources
        out.append(ContainerRequests(f"#{i}" if name is None else name,
                                     NO_REQUESTS if resources is None else _requests(resources.requests),
                                     init and c.restart_policy == "Always"))
    return tuple(out)


def _present(raw: dict[str, str] | None) -> Requests | None:
    """A status resource map, None when absent or empty (nil to Kubernetes), as agent.model.pod reads it."""
    return _requests(raw) if raw else None


def _status(name: str, resources: _Resources | None, allocated: dict[str, str] | None) -> StatusRequests:
    return StatusRequests(name, _present(allocated), resources is not None,
                          None if resources is None else _present(resources.requests))


def _statuses(status: _PodStatus) -> tuple[StatusRequests, ...]:
    out = []
    for items in (status.container_statuses, status.init_container_statuses):
        for cs in items or ():
            resources, allocated = cs.resources, cs.allocated_resources
            if (resources is None and not allocated) or not cs.name:
                continue  # nothing the value depends on, or no container to apply it to
            out.append(_status(cs.name, resources, allocated))
    return tuple(out)


def _pod_status(status: _PodStatus) -> StatusRequests | None:
    if status.resources is None and not status.allocated_resources:
        return None
    return _status("", status.resources, status.allocated_resources)


def _pod_level_requests(spec: _Spec) -> Requests | None:
    """``spec.resources.requests`` when it names cpu, memory or hugepages-* (see agent.model.pod), else None."""
    raw = spec.resources.requests if spec.resources is not None else None
    if raw is None:
        return None
    requests = _requests(raw)
    return requests if requests or any(k.startswith("hugepages-") for k in raw) else None


def _resize_infeasible(conditions: list[_Condition] | None) -> bool:
    for cond in conditions or ():
        if cond.type == "PodResizePending":
            return cond.reason == "Infeasible"
    return False


def _migration_role(refs: list[_OwnerReference] | None) -> str:
    for ref in refs or ():
        if ref.api_version == _NEONVM_API_VERSION and ref.kind == "VirtualMachineMigration":
            # neonvm: the migration controls only the target pod (see agent.model.pod).
            return "target" if ref.controller is True else "source"
    return ""


def _pod(p: _Pod) -> PodRecord:
    meta = p.metadata or _EMPTY_META
    spec = p.spec or _EMPTY_SPEC
    status = p.status or _EMPTY_STATUS
    namespace, name, uid = meta.namespace or "", meta.name or "", meta.uid
    if not uid:
        if not name:
            raise DecodeError("pod has neither metadata.uid nor metadata.name")
        uid = f"{namespace}/{name}"
    annotations, labels = meta.annotations, meta.labels
    vm_name = labels.vm_name if labels is not None else None
    return PodRecord(
        uid=uid,
        namespace=namespace,
        name=name,
        node_name=spec.node_name or "",
        phase=status.phase or "",
        resource_version=meta.resource_version or "",
        containers=_containers(spec.containers, init=False),
        init_containers=_containers(spec.init_containers, init=True),
        pod_requests=_pod_level_requests(spec),
        overhead=_requests(spec.overhead),
        statuses=_statuses(status),
        pod_status=_pod_status(status),
        resize_infeasible=_resize_infeasible(status.conditions),
        usage_annotation=annotations.usage if annotations is not None else None,
        overcommit_annotation=annotations.overcommit if annotations is not None else None,
        vm_name=vm_name or None,
        migration_role=_migration_role(meta.owner_references),
    )


def _node(n: _Node) -> NodeRecord:
    meta = n.metadata or _EMPTY_NODE_META
    status = n.status or _EMPTY_NODE_STATUS
    if not meta.name:
        raise DecodeError("node has no metadata.name")
    return NodeRecord(name=meta.name, uid=meta.uid or "", resource_version=meta.resource_version or "",
                      capacity=_quantities(status.capacity), allocatable=_quantities(status.allocatable))


_EMPTY_NODE_META, _EMPTY_NODE_STATUS = _NodeMeta(), _NodeStatus()


def _quantities(q: _Quantities | None) -> dict[str, str]:
    if q is None:
        return {}
    return {k: v for k, v in (("cpu", q.cpu), ("memory", q.memory), ("pods", q.pods)) if v is not None}


_BYTES = (bytes, bytearray, memoryview)


def pod_record(obj: Any) -> PodRecord:
    """The record of one pod: JSON bytes, a Struct from :func:`pod_event`, or a parsed object.

    Raises DecodeError for a pod with no identity, ValueError for bytes that are not JSON.
    """
    if obj.__class__ is _Pod:
        return _pod(obj)
    if isinstance(obj, _BYTES):
        try:
            return _pod(_POD.decode(obj))
        except (msgspec.DecodeError, RecursionError):  # ValidationError included
            obj = loads(obj)
    return decode_pod(obj)


def node_record(obj: Any) -> NodeRecord:
    """The record of one Node, from the same three kinds of input as :func:`pod_record`."""
    if obj.__class__ is _Node:
        return _node(obj)
    if isinstance(obj, _BYTES):
        try:
            return _node(_NODE.decode(obj))
        except (msgspec.DecodeError, RecursionError):
            obj = loads(obj)
    return decode_node(obj)


def pod_item(data: bytes | memoryview) -> _Pod:
    """Bytes of exactly one pod as its Struct, for :func:`pod_record`; msgspec.DecodeError otherwise (a LIST reader's test)."""
    return _POD.decode(data)


def node_item(data: bytes | memoryview) -> _Node:
    return _NODE.decode(data)


def pod_event(line: bytes) -> tuple[str, _Pod] | None:
    """(type, pod) of an ADDED, MODIFIED or DELETED watch line the Structs accept, else None.

    None sends the line down the tolerant path (bookmarks, ERROR events, odd or broken lines).
    """
    try:
        event = _POD_EVENT.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None
    return (event.type, event.object) if event.type in _OBJECT_EVENTS else None


def node_event(line: bytes) -> tuple[str, _Node] | None:
    try:
        event = _NODE_EVENT.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None
    return (event.type, event.object) if event.type in _OBJECT_EVENTS else None
