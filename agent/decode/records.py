"""The Structs of ``spec`` turned into the model's records: every rule about what a field means, once.

Both ways of filling the Structs (msgspec's fast decode, the tolerant reader)
end here, so a record never depends on which path its object took.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache

import msgspec

from agent.decode import spec
from agent.decode.spec import (
    Annotations,
    Condition,
    Container,
    ContainerStatus,
    Labels,
    Meta,
    Node,
    OwnerReference,
    Pdb,
    Pod,
    PodStatus,
    Quantities,
    Resources,
    Selector,
    Spec,
    Undecoded,
    VmName,
)
from agent.decode.tolerant import fill
from agent.decode.tolerant import labels as tolerant_labels
from agent.model.container_bound import MAX_CONTAINERS, bound_containers, fold_gpu
from agent.model.controllers import ControllerRecord
from agent.model.fields import NO_REQUESTS, DecodeError, Oversized, Requests, bounded, clipped
from agent.model.local_storage import local_storage
from agent.model.node import GPU_LABELS, GPU_RESOURCES, NodeRecord
from agent.model.pdb import MAX_SELECTOR_BYTES, OPERATORS, LabelSelector, PdbRecord, Requirement, over_bound
from agent.model.pod import (
    MAX_LABELS_BYTES,
    NEONVM_API_VERSION,
    NO_EVICTION_FACTS,
    VM_NAME_LABEL,
    ContainerRequests,
    Controller,
    EvictionFacts,
    PodRecord,
    StatusRequests,
)
from agent.model.quantity import QuantityError, parse_quantity

__all__ = ["pod_of", "node_of", "pdb_of", "controller_of"]

_EMPTY_SPEC, _EMPTY_STATUS = Spec(), PodStatus()


# Interned strings are freed with their last reference, except on CPython 3.12.0-3.12.5 and free-threaded builds,
# which make them immortal (cpython#113993): there an agent seeing ever new namespaces would grow without bound,
# so its records keep their own copies instead.
_INTERN_FREES = ((sys.version_info[:2] != (3, 12) or sys.version_info >= (3, 12, 6))
                 and not sysconfig.get_config_var("Py_GIL_DISABLED"))


def _shared(text: str) -> str:
    """One copy of a string most pods repeat (node, namespace, phase, container names, quantities).

    Decoding makes a new string for every value; a node's pods share a handful
    of these, so each record would otherwise hold its own copies.
    """
    return sys.intern(text) if _INTERN_FREES and type(text) is str else text


def _requests(raw: Quantities | None) -> Requests:
    """The cpu and memory of a resource map: only they feed the exported values, so the rest costs no memory."""
    return _request_map(raw.get("cpu"), raw.get("memory")) if raw else NO_REQUESTS


# Bounded caches of what a node's pods repeat in every event: one shared, never mutated map (or container) per
# distinct value instead of a new one per event. A watch event that changes one request builds no other map, the
# records share them (less memory, fewer objects for the garbage collector) and comparing two versions of a pod
# meets the same objects. Up to this many distinct values each (a node holds at most a few hundred pods; what the
# caches hold when full: docs/benchmarks.md, event throughput); more only costs a rebuild.
_DISTINCT = 512


@lru_cache(maxsize=_DISTINCT)
def _request_map(cpu: str | None, memory: str | None) -> Requests:
    if cpu is not None and memory is not None:
        return {"cpu": _shared(cpu), "memory": _shared(memory)}
    if cpu is not None:
        return {"cpu": _shared(cpu)}
    if memory is not None:
        return {"memory": _shared(memory)}
    return NO_REQUESTS


@lru_cache(maxsize=_DISTINCT)
def _container(name: str, cpu: str | None, memory: str | None, restartable: bool) -> ContainerRequests:
    return ContainerRequests(_shared(name), _request_map(cpu, memory), restartable)


def _present(raw: Quantities | None) -> Requests | None:
    """A status resource map; None when absent or empty (the API server stores an empty map as nil)."""
    return _requests(raw) if raw else None


def _gpu_requests(spec: Spec) -> tuple[tuple[str, str, str, str], ...]:
    """(kind, container, resource, quantity) of each GPU request: looked for only in a request map with more than
    cpu and memory, which few pods have, so most pods cost one pass and no allocation. Past MAX_CONTAINERS of a list
    the requests are folded as the containers are (agent.model.container_bound.fold_gpu)."""
    out: list[tuple[str, str, str, str]] | None = None
    for items, init in ((spec.containers, False), (spec.init_containers, True)):
        if not items:
            continue
        tail: list[tuple[str, str, str, str]] | None = None  # made only for a GPU request past MAX_CONTAINERS
        for i, c in enumerate(items):
            raw = c.resources.requests if c.resources is not None else None
            if not raw or len(raw) <= ("cpu" in raw) + ("memory" in raw):
                continue
            kind = ("sidecar" if c.restart_policy == "Always" else "init") if init else "container"
            found = [(kind, c.name or "", _shared(r), q) for r, q in raw.items() if r in GPU_RESOURCES]
            if not found:
                continue
            out = out if out is not None else []
            if i < MAX_CONTAINERS:
                out.extend(found)
            else:
                tail = tail if tail is not None else []
                tail.extend(found)
        if tail and out is not None:
            out.extend(fold_gpu(tail, len(items) - MAX_CONTAINERS))
    return () if out is None else tuple(out)


def _plain_requests(cpu: str | None, memory: str | None) -> Requests:
    """A request map of a wide pod (over MAX_CONTAINERS containers), neither cached nor interned: what it folds away
    leaves nothing behind (the interpreter's table of interned strings never shrinks)."""
    if cpu is not None:
        return {"cpu": cpu} if memory is None else {"cpu": cpu, "memory": memory}
    return NO_REQUESTS if memory is None else {"memory": memory}


def _plain_container(name: str, cpu: str | None, memory: str | None, restartable: bool) -> ContainerRequests:
    return ContainerRequests(name, _plain_requests(cpu, memory), restartable)


def _containers(items: list[Container] | None, init: bool, share: bool = True) -> tuple[ContainerRequests, ...]:
    if not items:
        return ()
    out = []
    make = _container if share else _plain_container
    for i, c in enumerate(items):
        raw = c.resources.requests if c.resources is not None else None
        out.append(make(f"#{i}" if c.name is None else c.name, raw.get("cpu") if raw else None,
                        raw.get("memory") if raw else None, init and c.restart_policy == "Always"))
    return tuple(out)


def _status(name: str, resources: Resources | None, allocated: Quantities | None) -> StatusRequests:
    return StatusRequests(_shared(name), _present(allocated), resources is not None,
                          None if resources is None else _present(resources.requests))


def _plain_status(name: str, resources: Resources | None, allocated: Quantities | None) -> StatusRequests:
    def plain(raw: Quantities | None) -> Requests | None:
        return _plain_requests(raw.get("cpu"), raw.get("memory")) if raw else None

    return StatusRequests(name, plain(allocated), resources is not None,
                          None if resources is None else plain(resources.requests))


def _statuses(status: PodStatus, share: bool = True) -> tuple[StatusRequests, ...]:
    out = []
    make = _status if share else _plain_status
    items: list[ContainerStatus] | tuple[()]
    for items in (status.container_statuses or (), status.init_container_statuses or ()):
        for cs in items:
            if (cs.resources is None and not cs.allocated_resources) or not cs.name:
                continue  # nothing the value depends on, or no container to apply it to
            out.append(make(cs.name, cs.resources, cs.allocated_resources))
    return tuple(out)


def _pod_status(status: PodStatus) -> StatusRequests | None:
    """The pod's own status totals (in-place pod-level resize), or None."""
    if status.resources is None and not status.allocated_resources:
        return None
    return _status("", status.resources, status.allocated_resources)


def _pod_level_requests(spec: Spec) -> Requests | None:
    """``spec.resources.requests``, or None unless it names a resource pod-level resources support.

    That is component-helpers' IsPodLevelRequestsSet: only cpu, memory and
    hugepages-* count, so ``{"ephemeral-storage": ...}`` alone leaves the
    container aggregate in force. Only cpu and memory are kept.
    """
    raw = spec.resources.requests if spec.resources is not None else None
    if raw is None:
        return None
    requests = _requests(raw)
    return requests if requests or any(k.startswith("hugepages-") for k in raw) else None


def _resize_infeasible(conditions: list[Condition] | None) -> bool:
    for cond in conditions or ():
        if cond.type == "PodResizePending":
            return cond.reason == "Infeasible"
    return False


def _migration_role(refs: list[OwnerReference] | None) -> str:
    for ref in refs or ():
        if ref.api_version == NEONVM_API_VERSION and ref.kind == "VirtualMachineMigration":
            # neonvm: the migration controls only the target pod and keeps a
            # non-controlling reference on the source (pod_helpers.go).
            return "target" if ref.controller is True else "source"
    return ""


def _time(text: str | None, where: str, problems: list[str]) -> float | None:
    """An RFC 3339 time (metav1.Time) as seconds since the epoch; unreadable: None and a problem."""
    if text is None:
        return None
    seconds = _epoch(text)
    if seconds is None:
        problems.append(f"{where} {text[:40]!r} is not an RFC 3339 time: read as absent")
    return seconds


@lru_cache(maxsize=_DISTINCT)
def _epoch(text: str) -> float | None:
    """Cached: a pod's creation time comes again with every event of it."""
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        if parsed.tzinfo is None:
            raise ValueError("no time zone")
        return parsed.timestamp()
    except (ValueError, OverflowError):
        return None


def _controller(refs: list[OwnerReference] | None) -> Controller | None:
    """metav1.GetControllerOf: the first reference with controller: true."""
    for ref in refs or ():
        if ref.controller is True:
            return Controller(_shared(ref.kind or ""), _shared(ref.api_version or ""), ref.name or "")
    return None


_LABELS: msgspec.json.Decoder[Labels | None] = msgspec.json.Decoder(Labels | None)
_SELECTOR: msgspec.json.Decoder[Selector | None] = msgspec.json.Decoder(Selector | None)
_VM_NAME = msgspec.json.Decoder(VmName)


def _pod_labels(raw: Undecoded, problems: list[str]) -> tuple[Mapping[str, str | None] | None, int]:
    """(metadata.labels, 0), or (None, their size in bytes) when over MAX_LABELS_BYTES: then never decoded."""
    size = len(raw)
    if size > MAX_LABELS_BYTES:
        problems.append(f"metadata.labels of {size:,} bytes, over the agent's bound of {MAX_LABELS_BYTES:,}: not "
                        "kept; which PodDisruptionBudgets cover the pod is unknown (\"PDB unknown\")")
        return None, size
    if not size:
        return None, 0
    try:
        return _LABELS.decode(raw), 0
    except msgspec.DecodeError:  # ValidationError included: a value of another type (a dump's YAML)
        return tolerant_labels(msgspec.json.decode(raw), "metadata.labels", problems), 0


def _vm_name(raw: Undecoded) -> str | None:
    """The NeonVM label of labels over their bound, decoded alone (the others are skipped unbuilt)."""
    try:
        return _VM_NAME.decode(raw).vm_name or None
    except msgspec.DecodeError:
        return None


def _labels(labels: Mapping[str, str | None]) -> str:
    """EvictionFacts.labels: every label with a value, sorted by key, NUL-separated."""
    return "\0".join([f"{key}\0{value}" for key, value in sorted(labels.items()) if value is not None])


def _local_volumes(spec: Spec) -> list[str]:
    """Names of hostPath volumes and of emptyDir volumes not in memory (drain.isLocalVolume), in the pod's order."""
    out = []
    for i, v in enumerate(spec.volumes or ()):
        if v.host_path is not None or (v.empty_dir is not None and v.empty_dir.medium != "Memory"):
            out.append(v.name if v.name is not None else f"#{i}")
    return out


def _eviction(meta: Meta | None, annotations: Annotations | None, spec: Spec, labels: Mapping[str, str | None] | None,
              labels_over_bound: int, problems: list[str]) -> EvictionFacts:
    """The drain rules' facts. Built for every watch event: each part only when its field is there, positionally."""
    if meta is None:
        return NO_EVICTION_FACTS
    refs, created, deleted = meta.owner_references, meta.creation_timestamp, meta.deletion_timestamp
    safe = daemonset = None
    mirror = False
    if annotations is not None:
        safe, daemonset = annotations.safe_to_evict, annotations.daemonset_pod
        mirror = annotations.mirror is not None
        if safe is not None:
            safe = clipped(safe)
        if daemonset is not None:
            daemonset = clipped(daemonset)
    return EvictionFacts(
        _controller(refs) if refs else None,
        _labels(labels) if labels else "",
        local_storage(_local_volumes(spec), annotations.safe_to_evict_local_volumes if annotations else None, problems)
        if spec.volumes else None,
        safe, daemonset, mirror,
        None if created is None else _time(created, "metadata.creationTimestamp", problems),
        None if deleted is None else _time(deleted, "metadata.deletionTimestamp", problems),
        spec.termination_grace_period_seconds,
        _gpu_requests(spec),
        labels_over_bound,
    )


def _annotation(text: str | None) -> str | Oversized | None:
    """A NeonVM annotation: shared (overcommit factors repeat), or only its length and excerpt when too long to read."""
    if text is None:
        return None
    kept = bounded(text)
    return _shared(kept) if kept.__class__ is str and len(kept) <= 64 else kept


def pod_of(p: Pod, problems: tuple[str, ...] = ()) -> PodRecord:
    """The record of one pod; DecodeError for a pod nobody could track (no uid and no name)."""
    meta, spec, status = p.metadata, p.spec or _EMPTY_SPEC, p.status or _EMPTY_STATUS
    namespace = name = uid = resource_version = ""
    annotations = labels = refs = None
    found: list[str] = []
    over = 0
    if meta is not None:
        namespace, name, uid = _shared(meta.namespace or ""), meta.name or "", meta.uid or ""
        resource_version, annotations, refs = meta.resource_version or "", meta.annotations, meta.owner_references
        labels, over = _pod_labels(meta.labels, found)
    if not uid:
        if not name:
            raise DecodeError("pod has neither metadata.uid nor metadata.name")
        # Dumps and hand-written fixtures may lack a uid; the name still identifies the pod within one node.
        uid = f"{namespace}/{name}"
    eviction = _eviction(meta, annotations, spec, labels, over, found)
    share = len(spec.containers or ()) <= MAX_CONTAINERS and len(spec.init_containers or ()) <= MAX_CONTAINERS
    containers, init_containers = _containers(spec.containers, False, share), _containers(spec.init_containers, True,
                                                                                           share)
    statuses = _statuses(status, share)
    if not share:  # within the bound (nearly every pod) the lists are kept as they are, at no cost
        kept = bound_containers(containers, init_containers, statuses)
        containers, init_containers, statuses = kept.containers, kept.init_containers, kept.statuses
        found.extend(kept.problems)
    if found:
        problems = (*problems, *found)
    return PodRecord(
        uid=uid,
        namespace=namespace,
        name=name,
        node_name=_shared(spec.node_name or ""),
        phase=_shared(status.phase or ""),
        resource_version=resource_version,
        containers=containers,
        init_containers=init_containers,
        pod_requests=_pod_level_requests(spec),
        overhead=_requests(spec.overhead),
        statuses=statuses,
        pod_status=_pod_status(status),
        resize_infeasible=_resize_infeasible(status.conditions),
        usage_annotation=_annotation(annotations.usage) if annotations is not None else None,
        overcommit_annotation=_annotation(annotations.overcommit) if annotations is not None else None,
        vm_name=(labels.get(VM_NAME_LABEL) or None) if labels is not None else _vm_name(meta.labels) if meta and over
        else None,
        migration_role=_migration_role(refs),
        problems=problems,
        eviction=eviction,
    )


def _node_quantities(raw: Quantities | None) -> dict[str, str]:
    return {k: raw[k] for k in ("cpu", "memory", "pods") if k in raw} if raw else {}


def _gpu(allocatable: Quantities | None) -> tuple[tuple[str, str], ...]:
    """(resource, quantity) of each GPU resource with a non-zero allocatable, in GPU_RESOURCES' order (an unreadable
    one too: the model reports it)."""
    found = []
    for resource in GPU_RESOURCES:
        text = allocatable.get(resource) if allocatable else None
        if text is None:
            continue
        try:
            nonzero = parse_quantity(text) != 0
        except QuantityError:
            nonzero = True
        if nonzero:
            found.append((resource, text))
    return tuple(found)


def node_of(n: Node, problems: tuple[str, ...] = ()) -> NodeRecord:
    """The record of one Node; DecodeError for a Node with no name."""
    meta, status = n.metadata, n.status
    if meta is None or not meta.name:
        raise DecodeError("node has no metadata.name")
    gpu_label = None
    if meta.labels is not None:
        values = (meta.labels.gke, meta.labels.aws, meta.labels.azure)
        labelled = zip(GPU_LABELS, values, strict=True)
        gpu_label = next((f"{key}={value}" for key, value in labelled if value is not None), None)
    gpu_allocatable = _gpu(status.allocatable if status else None)
    return NodeRecord(name=meta.name, uid=meta.uid or "", resource_version=meta.resource_version or "",
                      capacity=_node_quantities(status.capacity if status else None),
                      allocatable=_node_quantities(status.allocatable if status else None),
                      problems=problems,
                      scale_down_disabled=meta.annotations.scale_down_disabled if meta.annotations else None,
                      gpu_label=gpu_label, gpu_allocatable=gpu_allocatable)


def pdb_of(d: Pdb, problems: tuple[str, ...] = ()) -> PdbRecord:
    """The record of one policy/v1 PodDisruptionBudget; DecodeError for one with no name and no uid.

    A requirement with an unknown operator, or values where its operator takes none (or none where it needs
    some), is a problem: LabelSelectorAsSelector refuses the selector, and the PDB covers no pod
    (agent.model.pdb.selects reads it so).
    """
    meta = d.metadata
    name = (meta.name or "") if meta else ""
    namespace = (meta.namespace or "") if meta else ""
    uid = (meta.uid or "") if meta else ""
    if not uid:
        if not name:
            raise DecodeError("poddisruptionbudget has neither metadata.uid nor metadata.name")
        uid = f"{namespace}/{name}"
    found = list(problems)
    resource_version = (meta.resource_version or "") if meta else ""
    allowed = (d.status.disruptions_allowed if d.status is not None else None) or 0
    undecoded = d.spec.selector if d.spec is not None else msgspec.Raw()
    size = len(undecoded)
    if size > MAX_SELECTOR_BYTES:
        return over_bound(PdbRecord(uid=uid, namespace=namespace, name=name, resource_version=resource_version,
                                    disruptions_allowed=allowed, problems=tuple(found)),
                          size, f"the agent's bound of {MAX_SELECTOR_BYTES:,} per PDB")
    selector = None
    raw = _selector(undecoded, found) if size else None
    if raw is not None:
        requirements = []
        for i, r in enumerate(raw.match_expressions or ()):
            requirement = Requirement(key=r.key or "", operator=r.operator or "", values=tuple(r.values or ()))
            if requirement.operator not in OPERATORS:
                found.append(f"spec.selector.matchExpressions[{i}]: unknown operator {requirement.operator[:40]!r}: "
                             "the PDB covers no pod")
            elif (requirement.operator in ("In", "NotIn")) != bool(requirement.values):
                found.append(f"spec.selector.matchExpressions[{i}]: {requirement.operator} with "
                             f"{'no' if not requirement.values else ''} values: the PDB covers no pod")
            requirements.append(requirement)
        labels = {k: v for k, v in (raw.match_labels or {}).items() if v is not None}
        selector = LabelSelector(match_labels=labels, match_expressions=tuple(requirements))
    # What the total bound counts: the selector as the agent reads it, the same whichever path decoded it.
    kept = len(msgspec.json.encode(raw)) if raw is not None else 0
    return PdbRecord(uid=uid, namespace=namespace, name=name, resource_version=resource_version, selector=selector,
                     disruptions_allowed=allowed, problems=tuple(found), selector_bytes=kept)


def _selector(raw: Undecoded, problems: list[str]) -> Selector | None:
    """spec.selector within its bound, decoded; read tolerantly when the fast path refuses it."""
    try:
        return _SELECTOR.decode(raw)
    except msgspec.DecodeError:  # ValidationError included
        parsed = msgspec.json.decode(raw)
        return None if parsed is None else fill(Selector, parsed, problems, "spec.selector")


#: The kinds whose spec.replicas the replicacount rule compares with --min-replica-count.
_REPLICATED = frozenset({"ReplicationController", "ReplicaSet"})


def controller_of(d: spec.Controller, kind: str, problems: tuple[str, ...] = ()) -> ControllerRecord:
    """The record of one controller object of ``kind``; DecodeError for one with no name (nothing can find it)."""
    meta = d.metadata
    name = (meta.name or "") if meta else ""
    if not name:
        raise DecodeError(f"{kind} has no metadata.name")
    replicas = d.spec.replicas if d.spec is not None and kind in _REPLICATED else None
    return ControllerRecord(kind=kind, namespace=(meta.namespace or "") if meta else "", name=name,
                            uid=(meta.uid or "") if meta else "", replicas=replicas)
