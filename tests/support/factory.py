"""Builders for pod objects as the API server serves them (JSON dicts)."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

_rv = itertools.count(1000)


def container(name: str, cpu: str | None = None, memory: str | None = None, restart_policy: str | None = None) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    c: dict[str, Any] = {"name": name, "image": f"example/{name}:1", "resources": {"requests": requests} if requests else {}}
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def pod(
    name: str,
    namespace: str = "default",
    node: str = "node-a",
    phase: str = "Running",
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    owner_references: list[dict[str, Any]] | None = None,
    overhead: dict[str, str] | None = None,
    pod_requests: dict[str, str] | None = None,
    container_statuses: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    uid: str | None = None,
    resource_version: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "containers": containers if containers is not None else [container("main", "100m", "128Mi")]}
    if init_containers:
        spec["initContainers"] = init_containers
    if overhead:
        spec["overhead"] = overhead
    if pod_requests:
        spec["resources"] = {"requests": pod_requests}
    status: dict[str, Any] = {"phase": phase}
    if container_statuses:
        status["containerStatuses"] = container_statuses
    if conditions:
        status["conditions"] = conditions
    meta: dict[str, Any] = {
        "name": name, "namespace": namespace, "uid": uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}")),
        "resourceVersion": resource_version or str(next(_rv)),
    }
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    if owner_references:
        meta["ownerReferences"] = owner_references
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def vm_pod(name: str, vm: str, cpu: str, memory: str, overcommit: dict[str, str] | None = None,
           role: str = "", namespace: str = "neon", **kw: Any) -> dict[str, Any]:
    """A NeonVM runner pod as neonvm-controller creates it."""
    annotations = {"vm.neon.tech/usage": json.dumps({"cpu": cpu, "memory": memory})}
    if overcommit:
        annotations["vm.neon.tech/overcommit"] = json.dumps(overcommit)
    refs = []
    vm_ref = {"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine", "name": vm, "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, vm))}
    if role != "target":
        refs.append(dict(vm_ref, controller=True, blockOwnerDeletion=True))
    if role:
        refs.append({"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachineMigration", "name": f"{vm}-migration",
                     "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, vm + "-m")), "controller": role == "target"})
        if role == "target":
            refs.append(dict(vm_ref, controller=False))
    return pod(
        name, namespace=namespace,
        containers=[container("neonvm-runner")],
        init_containers=[container("init"), container("sysctl")],
        annotations=dict(annotations, **kw.pop("annotations", {})),
        labels={"app.kubernetes.io/name": "NeonVM", "vm.neon.tech/name": vm},
        owner_references=refs, **kw,
    )


def node(name: str, cpu: str = "8", memory: str = "32Gi", allocatable_cpu: str | None = None,
         allocatable_memory: str | None = None, pods: str = "110") -> dict[str, Any]:
    """A Node object with capacity and allocatable, as the kubelet reports it (allocatable = capacity unless given)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": pods}
    allocatable = {"cpu": allocatable_cpu or cpu, "memory": allocatable_memory or memory, "pods": pods}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "namespace": ""},
            "status": {"capacity": capacity, "allocatable": allocatable}}


def for_create(p: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """``p`` as a client POSTs it to a real API server: what the server, scheduler and kubelet set is left out
    (uid, resourceVersion, status, nodeName; owner references, whose owners do not exist there), ``spec`` added."""
    meta = {k: v for k, v in p["metadata"].items() if k in ("name", "labels", "annotations")}
    body = {k: v for k, v in p["spec"].items() if k != "nodeName"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {**body, **spec}}
