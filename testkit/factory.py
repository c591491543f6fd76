"""Builders for pod objects as the API server serves them (JSON dicts)."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

GI, MI = 2**30, 2**20

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


def node(name: str = "node-a", cpu: str = "8", memory: str = "32Gi", allocatable_cpu: str | None = None,
         allocatable_memory: str | None = None, pods: str = "110") -> dict[str, Any]:
    """A Node object with capacity and allocatable, as the kubelet reports it (allocatable = capacity unless given)."""
    capacity = {"cpu": cpu, "memory": memory, "pods": pods}
    allocatable = {"cpu": allocatable_cpu or cpu, "memory": allocatable_memory or memory, "pods": pods}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "namespace": "", "uid": f"uid-{name}"},
            "status": {"capacity": capacity, "allocatable": allocatable}}


def pdb(name: str, namespace: str = "default", match_labels: dict[str, str] | None = None,
        match_expressions: list[dict[str, Any]] | None = None, disruptions_allowed: int | None = 0,
        selector: bool = True, min_available: int | None = 1, uid: str | None = None) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget as the API server serves it (status as the disruption controller writes it;
    ``selector=False``: none, which covers no pod)."""
    spec: dict[str, Any] = {} if min_available is None else {"minAvailable": min_available}
    if selector:
        spec["selector"] = {k: v for k, v in (("matchLabels", match_labels),
                                              ("matchExpressions", match_expressions)) if v is not None}
    status = {} if disruptions_allowed is None else {"disruptionsAllowed": disruptions_allowed}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace,
                         "uid": uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"pdb/{namespace}/{name}")),
                         "resourceVersion": str(next(_rv))},
            "spec": spec, "status": status}


def for_create(p: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """``p`` as a client POSTs it to a real API server: what the server, scheduler and kubelet set is left out
    (uid, resourceVersion, status, nodeName; owner references, whose owners do not exist there), ``spec`` added."""
    meta = {k: v for k, v in p["metadata"].items() if k in ("name", "labels", "annotations")}
    body = {k: v for k, v in p["spec"].items() if k != "nodeName"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {**body, **spec}}


def summary_node(**kw: Any) -> dict[str, Any]:
    """node-a as the node-summary tests see it: 8 cores / 32Gi, 7500m / 30Gi allocatable."""
    return node(**{"allocatable_cpu": "7500m", "allocatable_memory": "30Gi", **kw})


def unscheduled(name: str, cpu: str, memory: str) -> dict:
    p = pod(name, phase="Pending", containers=[container("app", cpu, memory)])
    del p["spec"]["nodeName"]
    return p


def resizing_pod(name: str = "resizing") -> dict:
    """The issue's example: 4 cpu under 1.36 (sum of per-container maxima), 3 under 1.37 (max of sums)."""
    return pod(name, containers=[container("c1", "2"), container("c2", "1")], container_statuses=[
        {"name": "c1", "allocatedResources": {"cpu": "1"}, "resources": {"requests": {"cpu": "1"}}},
        {"name": "c2", "allocatedResources": {"cpu": "2"}, "resources": {"requests": {"cpu": "2"}}}])


def mixed_pods():
    bad = vm_pod("broken-vm", "vm-x", "9", "9Gi")
    bad["metadata"]["annotations"]["vm.neon.tech/usage"] = "{nope"
    bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "250m", "memory": "256Mi"}}
    return [
        # ordinary: 500m + 250m, 1Gi + 256Mi
        pod("web", containers=[container("a", "500m", "1Gi"), container("b", "250m", "256Mi")]),
        # init 2/1Gi, sidecar 100m/128Mi, app 1/512Mi, overhead 100m/64Mi -> max(1.1, 2.1)+0.1 = 2.2 cpu; max(640Mi, 1152Mi)+64Mi
        pod("batch", init_containers=[container("sidecar", "100m", "128Mi", restart_policy="Always"), container("init", "2", "1Gi")],
            containers=[container("app", "1", "512Mi")], overhead={"cpu": "100m", "memory": "64Mi"}),
        # Pending but bound: counted by scheduler and autoscaler.
        pod("pending", phase="Pending", containers=[container("a", "1", "2Gi")]),
        # Terminal: nothing.
        pod("finished", phase="Succeeded", containers=[container("a", "4", "8Gi")]),
        pod("crashed", phase="Failed", containers=[container("a", "4", "8Gi")]),
        # Live migration pair of one VM (2 cores, 4Gi), overcommit on the source only.
        vm_pod("vm1-src", "vm1", "2", "4Gi", role="source", overcommit={"cpu": "2", "memory": "1"}),
        vm_pod("vm1-dst", "vm1", "2", "4Gi", role="target", phase="Pending"),
        # Another VM.
        vm_pod("vm2", "vm2", "500m", "1Gi"),
        # Malformed annotation: falls back to pod requests.
        bad,
    ]


def realistic_pod(i: int, node: str = "bench-node") -> dict:
    """A pod of the size real ones have (~5-10 KB of JSON): env, probes, volumes, status."""
    if i % 5 == 0:
        p = vm_pod(f"compute-{i}", f"vm-{i}", f"{(i % 8 + 1) * 250}m", f"{i % 8 + 1}Gi", node=node)
    else:
        p = pod(f"app-{i}", namespace=f"team-{i % 7}", node=node,
                init_containers=[container("init-config", "100m", "64Mi"),
                                 container("proxy", "100m", "128Mi", restart_policy="Always")],
                containers=[container("app", f"{i % 4 + 1}00m", f"{i % 3 + 1}Gi"), container("metrics", "50m", "32Mi")])
    p["metadata"]["labels"] = dict(p["metadata"].get("labels", {}), **{"app.kubernetes.io/part-of": "bench", "pod-template-hash": "7d4b9c"})
    p["metadata"]["creationTimestamp"] = "2026-11-30T06:00:00Z"
    for c in p["spec"]["containers"]:
        c["env"] = [{"name": f"VAR_{j}", "value": f"value-{j}-" + "x" * 20} for j in range(12)]
        c["ports"] = [{"containerPort": 8080, "protocol": "TCP"}]
        c["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}
        c["volumeMounts"] = [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}]
    p["spec"]["volumes"] = [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
    p["spec"].update({"restartPolicy": "Always", "schedulerName": "default-scheduler", "serviceAccountName": "default",
                      "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}]})
    p["status"].update({"hostIP": "10.0.0.1", "podIP": f"10.1.{i // 250}.{i % 250}", "qosClass": "Burstable",
                        "conditions": [{"type": t, "status": "True"} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                        "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"],
                                               "imageID": "sha256:" + "0" * 64, "containerID": "containerd://" + "1" * 64,
                                               "started": True, "state": {"running": {"startedAt": "2026-11-30T06:00:05Z"}},
                                               "allocatedResources": c["resources"].get("requests", {}),
                                               "resources": {"requests": c["resources"].get("requests", {})}}
                                              for c in p["spec"]["containers"]]})
    p["metadata"]["managedFields"] = _managed_fields(p)
    return p


def _managed_fields(p: dict) -> list[dict]:
    """managedFields as the API server records them: every field path each manager set."""
    def containers(items):
        return {f'k:{{"name":"{c["name"]}"}}': {
            ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:resources": {"f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
            "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
            "f:env": {f'k:{{"name":"{e["name"]}"}}': {".": {}, "f:name": {}, "f:value": {}} for e in c.get("env", [])},
            "f:ports": {'k:{"containerPort":8080,"protocol":"TCP"}': {".": {}, "f:containerPort": {}, "f:protocol": {}}},
            "f:livenessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}}, "f:periodSeconds": {}},
            "f:volumeMounts": {'k:{"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}': {".": {}, "f:mountPath": {}, "f:name": {}, "f:readOnly": {}}},
        } for c in items}
    spec = {"f:containers": containers(p["spec"]["containers"]), "f:initContainers": containers(p["spec"].get("initContainers", [])),
            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
            "f:serviceAccount": {}, "f:serviceAccountName": {}, "f:terminationGracePeriodSeconds": {}, "f:tolerations": {}, "f:volumes": {}}
    status = {"f:conditions": {f'k:{{"type":"{t}"}}': {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
                               for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")},
              "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}
    return [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T06:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {}, "f:ownerReferences": {}}, "f:spec": spec}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T06:00:05Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": status}, "subresource": "status"},
    ]
