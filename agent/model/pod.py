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

from typing import Any, NamedTuple

from agent.model.fields import NO_REQUESTS, DecodeError, FieldReader, Requests

__all__ = [
    "ContainerRequests",
    "StatusRequests",
    "PodRecord",
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

# Named tuples rather than dataclasses: built and compared in C, and both
# happen for every container of every watch event.
class ContainerRequests(NamedTuple):
    name: str
    requests: Requests
    # An init container with restartPolicy Always (a KEP-753 sidecar).
    restartable: bool = False


class StatusRequests(NamedTuple):
    """What the kubelet reports for one container, or for the whole pod, during in-place resize.

    Absent and present-but-empty differ in Kubernetes' arithmetic, so each
    field keeps that difference. A map is ``None`` when absent or empty (the
    API server stores objects as protobuf, where an empty map is nil, so the
    scheduler sees ``{}`` as absent too); it is an empty mapping when it held
    only resources the agent does not track.
    """

    # The container's name; "" for the pod-level status.
    name: str
    # ``allocatedResources``.
    allocated: Requests | None
    # The status has a ``resources`` object at all (1.36 consults the status only then).
    resources: bool
    # ``resources.requests``: what the runtime actually applied.
    requests: Requests | None


class PodRecord(NamedTuple):
    """One pod as the agent keeps it. A NamedTuple: built once per watch event."""

    uid: str
    namespace: str
    name: str
    node_name: str = ""
    phase: str = ""
    resource_version: str = ""
    containers: tuple[ContainerRequests, ...] = ()
    init_containers: tuple[ContainerRequests, ...] = ()
    pod_requests: Requests | None = None
    overhead: Requests = {}
    # Container and init container statuses that carry resources, by name.
    statuses: tuple[StatusRequests, ...] = ()
    # ``status.allocatedResources`` / ``status.resources`` of the pod itself
    # (in-place pod-level resize); None when the status has neither.
    pod_status: StatusRequests | None = None
    resize_infeasible: bool = False
    usage_annotation: str | None = None
    overcommit_annotation: str | None = None
    vm_name: str | None = None
    # "source" or "target" while a NeonVM live migration owns the pod, else "".
    migration_role: str = ""
    problems: tuple[str, ...] = ()

    @property
    def value_inputs(self) -> tuple:
        """Every field the exported value depends on, except the phase.

        Most watch events are status churn (conditions, restarts, probes) that
        leave these unchanged; the handler compares them to skip evaluation.
        """
        return (self.namespace, self.name, self.containers, self.init_containers, self.pod_requests,
                self.overhead, self.statuses, self.pod_status, self.resize_infeasible, self.usage_annotation,
                self.overcommit_annotation, self.vm_name, self.migration_role, self.problems)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES


def _containers(r: FieldReader, items: Any, path: str, init: bool) -> tuple[ContainerRequests, ...]:
    out = []
    for i, c in enumerate(r.sequence(items, path)):
        if c.__class__ is not dict:
            c = r.mapping(c, path, "[", i, "]")
        name = c.get("name")
        if name.__class__ is not str:
            name = r.string(name, path, "[", i, "].name") or f"#{i}"
        resources = c.get("resources")
        if resources.__class__ is dict:
            requests = r.requests(resources.get("requests"), name, ".resources.requests")
        else:
            r.mapping(resources, name, ".resources")
            requests = NO_REQUESTS
        out.append(ContainerRequests(name, requests, init and c.get("restartPolicy") == "Always"))
    return tuple(out)


def _present_requests(r: FieldReader, raw: Any, *path: object) -> Requests | None:
    """A resource map, or None when absent or empty (nil to Kubernetes); a wrong type is a problem and absent."""
    if raw.__class__ is not dict:
        r.mapping(raw, *path)
        return None
    return r.requests(raw, *path) if raw else None


def _status_requests(r: FieldReader, name: str, resources: Any, allocated: Any, *path: object) -> StatusRequests:
    requests = None
    if resources is not None:
        if resources.__class__ is not dict:
            resources = r.mapping(resources, *path, ".resources")
        requests = _present_requests(r, resources.get("requests"), *path, ".resources.requests")
    return StatusRequests(name, _present_requests(r, allocated, *path, ".allocatedResources"),
                          resources is not None, requests)


def _statuses(r: FieldReader, status: dict[str, Any]) -> tuple[StatusRequests, ...]:
    out = []
    for field_name in ("containerStatuses", "initContainerStatuses"):
        items = status.get(field_name)
        if not items:
            continue
        for i, cs in enumerate(r.sequence(items, "status.", field_name)):
            if cs.__class__ is not dict:
                cs = r.mapping(cs, "status.", field_name, "[", i, "]")
            resources, allocated = cs.get("resources"), cs.get("allocatedResources")
            if resources is None and not allocated:
                continue  # nothing the value depends on
            name = cs.get("name")
            if name.__class__ is not str or not name:
                r.string(name, "status.", field_name, "[", i, "].name")
                continue
            out.append(_status_requests(r, name, resources, allocated, name))
    return tuple(out)


def _pod_status(r: FieldReader, status: dict[str, Any]) -> StatusRequests | None:
    """The pod's own status totals (in-place pod-level resize), or None."""
    resources, allocated = status.get("resources"), status.get("allocatedResources")
    if resources is None and not allocated:
        return None
    return _status_requests(r, "", resources, allocated, "status")


def _resize_infeasible(r: FieldReader, status: dict[str, Any]) -> bool:
    for i, cond in enumerate(r.sequence(status.get("conditions"), "status.conditions")):
        if cond.__class__ is not dict:
            cond = r.mapping(cond, "status.conditions[", i, "]")
        if cond.get("type") == "PodResizePending":
            return cond.get("reason") == "Infeasible"
    return False


def _migration_role(r: FieldReader, refs: Any) -> str:
    for i, ref in enumerate(r.sequence(refs, "metadata.ownerReferences")):
        if ref.__class__ is not dict:
            ref = r.mapping(ref, "metadata.ownerReferences[", i, "]")
        if ref.get("apiVersion") == _NEONVM_API_VERSION and ref.get("kind") == "VirtualMachineMigration":
            # neonvm: the migration controls only the target pod and keeps a
            # non-controlling reference on the source (pod_helpers.go).
            return "target" if ref.get("controller") is True else "source"
    return ""


def _annotation(r: FieldReader, annotations: dict[str, Any], name: str) -> str | None:
    value = annotations.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    r.problems.append(f"annotation {name} is not a string")
    return ""


def _parts(r: FieldReader, obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """metadata, spec and status; the common, well-formed case is checked inline."""
    meta, spec, status = obj.get("metadata"), obj.get("spec"), obj.get("status")
    if meta.__class__ is not dict:
        meta = r.mapping(meta, "metadata")
    if spec.__class__ is not dict:
        spec = r.mapping(spec, "spec")
    if status.__class__ is not dict:
        status = r.mapping(status, "status")
    return meta, spec, status


def _identity(r: FieldReader, meta: dict[str, Any]) -> tuple[str, str, str, str]:
    """(uid, namespace, name, resourceVersion); raises DecodeError for a pod nobody could track."""
    get = meta.get
    namespace, name, uid, rv = get("namespace"), get("name"), get("uid"), get("resourceVersion")
    if namespace.__class__ is not str:
        namespace = r.string(namespace, "metadata.namespace")
    if name.__class__ is not str:
        name = r.string(name, "metadata.name")
    if rv.__class__ is not str:
        rv = r.string(rv, "metadata.resourceVersion")
    if uid.__class__ is not str or not uid:
        uid = r.string(uid, "metadata.uid")
        if not name:
            raise DecodeError("pod has neither metadata.uid nor metadata.name")
        # Dumps and hand-written fixtures may lack a uid; the name still
        # identifies the pod within one node.
        uid = f"{namespace}/{name}"
    return uid, namespace, name, rv


def _pod_level_requests(r: FieldReader, spec: dict[str, Any]) -> Requests | None:
    """``spec.resources.requests``, or None unless it names a resource pod-level resources support.

    That is component-helpers' IsPodLevelRequestsSet: only cpu, memory and
    hugepages-* count, so ``{"ephemeral-storage": ...}`` alone leaves the
    container aggregate in force. Only cpu and memory are kept.
    """
    pod_resources = spec.get("resources")
    if pod_resources is None:
        return None
    raw = r.mapping(pod_resources, "spec.resources").get("requests")
    if raw is None:
        return None
    requests = r.requests(raw, "spec.resources.requests")
    if requests or (isinstance(raw, dict) and any(str(k).startswith("hugepages-") for k in raw)):
        return requests
    return None


def decode_pod(obj: Any) -> PodRecord:
    """Build a :class:`PodRecord` from a pod as parsed from JSON or YAML."""
    if not isinstance(obj, dict):
        raise DecodeError(f"pod is not an object but {type(obj).__name__}")
    r = FieldReader()
    meta, spec, status = _parts(r, obj)
    uid, namespace, name, rv = _identity(r, meta)
    node_name, phase = spec.get("nodeName"), status.get("phase")
    if node_name.__class__ is not str:
        node_name = r.string(node_name, "spec.nodeName")
    if phase.__class__ is not str:
        phase = r.string(phase, "status.phase")
    annotations = r.mapping(meta.get("annotations"), "metadata.annotations")
    vm_name = r.mapping(meta.get("labels"), "metadata.labels").get(VM_NAME_LABEL)
    overhead = spec.get("overhead")
    return PodRecord(
        uid=uid,
        namespace=namespace,
        name=name,
        node_name=node_name,
        phase=phase,
        resource_version=rv,
        containers=_containers(r, spec.get("containers"), "spec.containers", init=False),
        init_containers=_containers(r, spec.get("initContainers"), "spec.initContainers", init=True),
        pod_requests=_pod_level_requests(r, spec),
        overhead=r.requests(overhead, "spec.overhead") if overhead else NO_REQUESTS,
        statuses=_statuses(r, status),
        pod_status=_pod_status(r, status),
        resize_infeasible=_resize_infeasible(r, status),
        usage_annotation=_annotation(r, annotations, USAGE_ANNOTATION) if annotations else None,
        overcommit_annotation=_annotation(r, annotations, OVERCOMMIT_ANNOTATION) if annotations else None,
        vm_name=vm_name if isinstance(vm_name, str) and vm_name else None,
        migration_role=_migration_role(r, meta.get("ownerReferences")),
        problems=tuple(r.problems),
    )
