"""The Structs of ``spec`` turned into the model's records: every rule about what a field means, once.

Both ways of filling the Structs (msgspec's fast decode, the tolerant reader)
end here, so a record never depends on which path its object took.
"""

from __future__ import annotations

import sys
import sysconfig

from agent.decode.spec import Condition, Container, ContainerStatus, Node, OwnerReference, Pdb, Pod, PodStatus, \
    Quantities, Resources, Selector, Spec
from agent.model.fields import NO_REQUESTS, DecodeError, Requests
from agent.model.node import NodeRecord
from agent.model.pdb import LabelSelector, PdbRecord, Requirement
from agent.model.pod import NEONVM_API_VERSION, ContainerRequests, PodRecord, StatusRequests

__all__ = ["pod_of", "node_of", "pdb_of"]

#: metav1.LabelSelectorOperator; a selector with any other operator selects nothing (LabelSelectorAsSelector fails).
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

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
    if not raw:
        return NO_REQUESTS
    cpu, memory = raw.get("cpu"), raw.get("memory")
    if cpu is not None and memory is not None:
        return {"cpu": _shared(cpu), "memory": _shared(memory)}
    if cpu is not None:
        return {"cpu": _shared(cpu)}
    if memory is not None:
        return {"memory": _shared(memory)}
    return NO_REQUESTS


def _present(raw: Quantities | None) -> Requests | None:
    """A status resource map; None when absent or empty (the API server stores an empty map as nil)."""
    return _requests(raw) if raw else None


def _containers(items: list[Container] | None, init: bool) -> tuple[ContainerRequests, ...]:
    if not items:
        return ()
    return tuple(ContainerRequests(f"#{i}" if c.name is None else _shared(c.name),
                                   NO_REQUESTS if c.resources is None else _requests(c.resources.requests),
                                   init and c.restart_policy == "Always")
                 for i, c in enumerate(items))


def _status(name: str, resources: Resources | None, allocated: Quantities | None) -> StatusRequests:
    return StatusRequests(_shared(name), _present(allocated), resources is not None,
                          None if resources is None else _present(resources.requests))


def _statuses(status: PodStatus) -> tuple[StatusRequests, ...]:
    out = []
    items: list[ContainerStatus]
    for items in (status.container_statuses or (), status.init_container_statuses or ()):
        for cs in items:
            if (cs.resources is None and not cs.allocated_resources) or not cs.name:
                continue  # nothing the value depends on, or no container to apply it to
            out.append(_status(cs.name, cs.resources, cs.allocated_resources))
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


def pod_of(p: Pod, problems: tuple[str, ...] = ()) -> PodRecord:
    """The record of one pod; DecodeError for a pod nobody could track (no uid and no name)."""
    meta, spec, status = p.metadata, p.spec or _EMPTY_SPEC, p.status or _EMPTY_STATUS
    namespace = name = uid = resource_version = ""
    annotations = labels = refs = None
    if meta is not None:
        namespace, name, uid = _shared(meta.namespace or ""), meta.name or "", meta.uid
        resource_version, annotations, labels, refs = (meta.resource_version or "", meta.annotations, meta.labels,
                                                      meta.owner_references)
    if not uid:
        if not name:
            raise DecodeError("pod has neither metadata.uid nor metadata.name")
        # Dumps and hand-written fixtures may lack a uid; the name still identifies the pod within one node.
        uid = f"{namespace}/{name}"
    return PodRecord(
        uid=uid,
        namespace=namespace,
        name=name,
        node_name=_shared(spec.node_name or ""),
        phase=_shared(status.phase or ""),
        resource_version=resource_version,
        containers=_containers(spec.containers, init=False),
        init_containers=_containers(spec.init_containers, init=True),
        pod_requests=_pod_level_requests(spec),
        overhead=_requests(spec.overhead),
        statuses=_statuses(status),
        pod_status=_pod_status(status),
        resize_infeasible=_resize_infeasible(status.conditions),
        usage_annotation=annotations.usage if annotations is not None else None,
        overcommit_annotation=(None if annotations is None or annotations.overcommit is None
                               else _shared(annotations.overcommit)),
        vm_name=(labels.vm_name or None) if labels is not None else None,
        migration_role=_migration_role(refs),
        problems=problems,
    )


def _node_quantities(raw: Quantities | None) -> dict[str, str]:
    return {k: raw[k] for k in ("cpu", "memory", "pods") if k in raw} if raw else {}


def node_of(n: Node, problems: tuple[str, ...] = ()) -> NodeRecord:
    """The record of one Node; DecodeError for a Node with no name."""
    meta, status = n.metadata, n.status
    if meta is None or not meta.name:
        raise DecodeError("node has no metadata.name")
    return NodeRecord(name=meta.name, uid=meta.uid or "", resource_version=meta.resource_version or "",
                      capacity=_node_quantities(status.capacity if status else None),
                      allocatable=_node_quantities(status.allocatable if status else None),
                      problems=problems)


def _selector(raw: Selector, problems: list[str]) -> LabelSelector:
    """The selector as written; a requirement the API server's own conversion refuses is kept (the model's
    ``selects`` refuses it the same way) and noted as a problem."""
    requirements = []
    for i, r in enumerate(raw.match_expressions or ()):
        where = f"spec.selector.matchExpressions[{i}]"
        operator, values = r.operator or "", tuple(r.values or ())
        if operator not in _OPERATORS:
            problems.append(f"{where}.operator {operator!r} is not In, NotIn, Exists or DoesNotExist: the PDB "
                            f"covers no pod")
        elif (operator in ("In", "NotIn")) != bool(values):
            problems.append(f"{where}: {operator} {'needs' if values == () else 'takes no'} values: the PDB covers "
                            f"no pod")
        requirements.append(Requirement(key=r.key or "", operator=operator, values=values))
    return LabelSelector(match_labels=dict(raw.match_labels or {}), match_expressions=tuple(requirements))


def pdb_of(p: Pdb, problems: tuple[str, ...] = ()) -> PdbRecord:
    """The record of one PodDisruptionBudget; DecodeError for one with no name."""
    meta = p.metadata
    if meta is None or not meta.name:
        raise DecodeError("PodDisruptionBudget has no metadata.name")
    namespace = meta.namespace or ""
    noted = list(problems)
    raw = p.spec.selector if p.spec is not None else None
    selector = None if raw is None else _selector(raw, noted)
    allowed = p.status.disruptions_allowed if p.status is not None else None
    return PdbRecord(uid=meta.uid or f"{namespace}/{meta.name}", namespace=_shared(namespace), name=meta.name,
                     resource_version=meta.resource_version or "", selector=selector,
                     disruptions_allowed=allowed or 0, problems=tuple(noted))
