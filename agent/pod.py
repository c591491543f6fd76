"""The slim per-pod record the agent keeps, decoded from a pod's JSON.

A pod object is ~10 KB of JSON and ~130 KiB as the kubernetes client's model;
the agent needs a few hundred bytes of it. Decoding straight from the parsed
JSON dict into this record (instead of building model objects) keeps the
per-event cost close to ``json.loads`` and the per-pod memory tiny.

Decoding is total: whatever shape the input has, :func:`decode_pod` returns a
record (noting what it could not read in ``problems``) unless the object has
no identity at all, so a malformed pod is still reported, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ContainerRequests",
    "ContainerStatusRequests",
    "PodRecord",
    "PodDecodeError",
    "decode_pod",
    "USAGE_ANNOTATION",
    "OVERCOMMIT_ANNOTATION",
    "VM_NAME_LABEL",
    "TERMINAL_PHASES",
]

USAGE_ANNOTATION = "vm.neon.tech/usage"
OVERCOMMIT_ANNOTATION = "vm.neon.tech/overcommit"
VM_NAME_LABEL = "vm.neon.tech/name"
_NEONVM_API_VERSION = "vm.neon.tech/v1"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

# Only these resources feed the exported values; the rest of a request map is
# dropped at decode time so it costs no memory.
RESOURCES = ("cpu", "memory")

Requests = Mapping[str, str]


class PodDecodeError(ValueError):
    """The object cannot be identified as a pod (no name and no uid)."""


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    name: str
    requests: Requests
    # An init container with restartPolicy Always (a KEP-753 sidecar).
    restartable: bool = False


@dataclass(frozen=True, slots=True)
class ContainerStatusRequests:
    """What the kubelet reports for a container during in-place resize."""

    name: str
    allocated: Requests
    # None when the status carries no ``resources`` at all: Kubernetes then
    # falls back to the spec for that container.
    requests: Requests | None


@dataclass(frozen=True, slots=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    node_name: str = ""
    phase: str = ""
    resource_version: str = ""
    containers: tuple[ContainerRequests, ...] = ()
    init_containers: tuple[ContainerRequests, ...] = ()
    pod_requests: Requests | None = None
    overhead: Requests = field(default_factory=dict)
    statuses: tuple[ContainerStatusRequests, ...] = ()
    resize_infeasible: bool = False
    usage_annotation: str | None = None
    overcommit_annotation: str | None = None
    vm_name: str | None = None
    # "source" or "target" while a NeonVM live migration owns the pod, else "".
    migration_role: str = ""
    problems: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.uid

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


class _Reader:
    """Field access that records a problem instead of raising on a wrong type."""

    __slots__ = ("problems",)

    def __init__(self) -> None:
        self.problems: list[str] = []

    def mapping(self, obj: Any, path: str) -> Mapping[str, Any]:
        if obj is None:
            return {}
        if isinstance(obj, Mapping):
            return obj
        self.problems.append(f"{path} is not an object")
        return {}

    def sequence(self, obj: Any, path: str) -> list[Any]:
        if obj is None:
            return []
        if isinstance(obj, list):
            return obj
        self.problems.append(f"{path} is not a list")
        return []

    def string(self, obj: Any, path: str) -> str:
        if obj is None:
            return ""
        if isinstance(obj, str):
            return obj
        self.problems.append(f"{path} is not a string")
        return ""

    def requests(self, obj: Any, path: str) -> dict[str, str]:
        raw = self.mapping(obj, path)
        out: dict[str, str] = {}
        for resource in RESOURCES:
            value = raw.get(resource)
            if value is None:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                # YAML dumps turn `cpu: 1` into a number; the API server would
                # have accepted it as the quantity "1".
                value = repr(value) if isinstance(value, float) else str(value)
            if isinstance(value, str):
                out[resource] = value
            else:
                self.problems.append(f"{path}.{resource} is not a quantity string")
        return out


def _containers(r: _Reader, items: Any, path: str, init: bool) -> tuple[ContainerRequests, ...]:
    out = []
    for i, item in enumerate(r.sequence(items, path)):
        c = r.mapping(item, f"{path}[{i}]")
        name = r.string(c.get("name"), f"{path}[{i}].name") or f"#{i}"
        resources = r.mapping(c.get("resources"), f"{path}[{i}].resources")
        requests = r.requests(resources.get("requests"), f"{name}.resources.requests")
        restartable = init and c.get("restartPolicy") == "Always"
        out.append(ContainerRequests(name, requests, restartable))
    return tuple(out)


def _statuses(r: _Reader, status: Mapping[str, Any]) -> tuple[ContainerStatusRequests, ...]:
    out = []
    for field_name in ("containerStatuses", "initContainerStatuses"):
        for i, item in enumerate(r.sequence(status.get(field_name), f"status.{field_name}")):
            cs = r.mapping(item, f"status.{field_name}[{i}]")
            name = r.string(cs.get("name"), f"status.{field_name}[{i}].name")
            if not name:
                continue
            allocated = r.requests(cs.get("allocatedResources"), f"{name}.allocatedResources")
            resources = cs.get("resources")
            requests = None
            if resources is not None:
                requests = r.requests(r.mapping(resources, f"{name}.resources").get("requests"), f"{name}.resources.requests")
            out.append(ContainerStatusRequests(name, allocated, requests))
    return tuple(out)


def _resize_infeasible(r: _Reader, status: Mapping[str, Any]) -> bool:
    for i, item in enumerate(r.sequence(status.get("conditions"), "status.conditions")):
        cond = r.mapping(item, f"status.conditions[{i}]")
        if cond.get("type") == "PodResizePending":
            return cond.get("reason") == "Infeasible"
    return False


def _migration_role(r: _Reader, refs: Any) -> str:
    for i, item in enumerate(r.sequence(refs, "metadata.ownerReferences")):
        ref = r.mapping(item, f"metadata.ownerReferences[{i}]")
        if ref.get("apiVersion") == _NEONVM_API_VERSION and ref.get("kind") == "VirtualMachineMigration":
            # neonvm: the migration controls only the target pod and keeps a
            # non-controlling reference on the source (pod_helpers.go).
            return "target" if ref.get("controller") is True else "source"
    return ""


def _annotation(r: _Reader, annotations: Mapping[str, Any], name: str) -> str | None:
    value = annotations.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    r.problems.append(f"annotation {name} is not a string")
    return ""


def decode_pod(obj: Any) -> PodRecord:
    """Build a :class:`PodRecord` from a pod as parsed from JSON or YAML."""
    r = _Reader()
    if not isinstance(obj, Mapping):
        raise PodDecodeError(f"pod is not an object but {type(obj).__name__}")
    meta = r.mapping(obj.get("metadata"), "metadata")
    spec = r.mapping(obj.get("spec"), "spec")
    status = r.mapping(obj.get("status"), "status")
    namespace = r.string(meta.get("namespace"), "metadata.namespace")
    name = r.string(meta.get("name"), "metadata.name")
    uid = r.string(meta.get("uid"), "metadata.uid")
    if not uid:
        if not name:
            raise PodDecodeError("pod has neither metadata.uid nor metadata.name")
        # Dumps and hand-written fixtures may lack a uid; the name still
        # identifies the pod within one node.
        uid = f"{namespace}/{name}"
    annotations = r.mapping(meta.get("annotations"), "metadata.annotations")
    labels = r.mapping(meta.get("labels"), "metadata.labels")
    pod_resources = spec.get("resources")
    pod_requests = None
    if pod_resources is not None:
        raw = r.mapping(pod_resources, "spec.resources").get("requests")
        if raw is not None:
            pod_requests = r.requests(raw, "spec.resources.requests")
    vm_name = labels.get(VM_NAME_LABEL)
    return PodRecord(
        uid=uid,
        namespace=namespace,
        name=name,
        node_name=r.string(spec.get("nodeName"), "spec.nodeName"),
        phase=r.string(status.get("phase"), "status.phase"),
        resource_version=r.string(meta.get("resourceVersion"), "metadata.resourceVersion"),
        containers=_containers(r, spec.get("containers"), "spec.containers", init=False),
        init_containers=_containers(r, spec.get("initContainers"), "spec.initContainers", init=True),
        pod_requests=pod_requests,
        overhead=r.requests(spec.get("overhead"), "spec.overhead"),
        statuses=_statuses(r, status),
        resize_infeasible=_resize_infeasible(r, status),
        usage_annotation=_annotation(r, annotations, USAGE_ANNOTATION),
        overcommit_annotation=_annotation(r, annotations, OVERCOMMIT_ANNOTATION),
        vm_name=vm_name if isinstance(vm_name, str) and vm_name else None,
        migration_role=_migration_role(r, meta.get("ownerReferences")),
        problems=tuple(r.problems),
    )
