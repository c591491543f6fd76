"""Hypothesis strategies for whole nodes as the autoscaler meets them: a Node, its pods, the PDBs over them.

What varies is what the cluster-autoscaler's verdict reads (shared/KNOWLEDGE.md §6): every owner kind (none,
non-controller owner references, custom kinds, DaemonSet, StatefulSets and DaemonSets of other groups, a group
version Go cannot parse), controller objects with spec.replicas absent, 0 or more (present, gone, or in another
namespace than the pod) against every --min-replica-count, volumes, the safe-to-evict annotations (valid and odd
values, "on-completion"), mirror and DaemonSet pods (by owner and by annotation), kube-system pods of every age
around the system-pod timeout (or none), deletion times around the long-terminating cut with
terminationGracePeriodSeconds absent, 0, large or past what Go's time.Duration holds, every phase (empty too) with
every restart policy, init containers and sidecars, overhead, PDBs (every allowance, negative too, every kind of
selector, one selecting nothing, several over one pod, any namespace), GPU nodes (label and extended resource, none
or 0 allocatable), other extended resources, quantities with odd spellings (exponents, 0.5Gi, micro units, bare
decimals) and, now and then, past int64 in milli-units (exbibytes, petacores: Go's MilliValue() then wraps or gives 0),
allocatables small enough that DaemonSet and mirror pods reach or pass them, the autoscaler's flags, and
NeonVM runner pods with every shape of annotation (JSON numbers, missing fields, odd spellings). Each value is
drawn from a small set around the boundaries, so shrinking lands on a readable case.

``dumps()`` draws a ``Generated``: one kubectl-style List of several nodes (with their pods, PDBs and, sometimes,
controller objects), the autoscaler's flags and the moment to judge at.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

__all__ = ["Generated", "dumps", "as_json", "NOW", "GPU_LABEL", "FLAG_VALUES"]

#: The moment every generated dump is judged at; ages and deletion times are drawn relative to it.
NOW = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
#: The GPU label the oracle's kwok provider is configured with (its --gpu-label default; the agent reads it too).
GPU_LABEL = "k8s.amazonaws.com/accelerator"

#: The autoscaler's flags the verdict depends on, each with the values drawn (None: not given).
FLAG_VALUES: dict[str, tuple[str | None, ...]] = {
    "scale-down-utilization-threshold": (None, "0", "0.25", "0.5", "0.75", "1"),
    "scale-down-gpu-utilization-threshold": (None, "0", "0.5", "1"),
    "ignore-daemonsets-utilization": (None, "true", "false"),
    "ignore-mirror-pods-utilization": (None, "true", "false"),
    "skip-nodes-with-system-pods": (None, "true", "false"),
    "skip-nodes-with-local-storage": (None, "true", "false"),
    "skip-nodes-with-custom-controller-pods": (None, "true", "false"),
    "blocking-system-pod-distruption-timeout": (None, "0s", "30m", "1h", "2h"),
    "min-replica-count": (None, "0", "1", "2", "5", "-1"),
}


@dataclass(frozen=True, kw_only=True)
class Generated:
    """One drawn dump: ``dump`` the List (Nodes, Pods, PDBs, controllers), ``flags`` the autoscaler's ("--name=value"),
    ``now`` RFC 3339."""

    dump: dict[str, Any]
    flags: tuple[str, ...]
    now: str = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes: int = field(default=0)

    def objects(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.dump["items"] if o["kind"] == kind]

    def pods_of(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.objects("Pod") if p["spec"].get("nodeName") == node]

    def flag(self, name: str) -> str | None:
        """The value given for ``name`` (the last one, as Go's flag package reads it), None if not given."""
        values = [f.partition("=")[2] for f in self.flags if f.partition("=")[0] == "--" + name]
        return values[-1] if values else None


def _ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mostly(common: list[Any], rare: list[Any], one_in: int = 4) -> st.SearchStrategy[Any]:
    """A value of ``common``, or one of ``rare`` about one time in ``one_in`` (shrinking towards the first common
    one). One draw from one weighted table: a flatmap costs a new strategy per draw, most of the generator's time."""
    copies = max(1, round((one_in - 1) * len(rare) / len(common)))
    return st.sampled_from(tuple(common * copies + rare))


# Odd spellings the API server accepts now and then: exponents (small and large), fractions of binary suffixes,
# micro units, bare decimals.
ODD_QUANTITIES = ["1e3", "1E-3", "0.5Gi", "1000000u", "1.5", "1e9", "2e-1", "12345678901234567n", "1.0000001"]
CPU = _mostly([None, "0", "100m", "250m", "500m", "1", "1500m", "2", "3", "0.1", "100001m"], ODD_QUANTITIES, 6)
MEMORY = _mostly([None, "0", "64Mi", "500M", "1Gi", "1500Mi", "2Gi", "3Gi", "0.5Gi", "1Ki"],
                 ODD_QUANTITIES + ["1e10", "1Ti", "3.3e9", "0.25Ti"], 6)
# Small enough that DaemonSet and mirror pods reach or pass them; missing or zero now and then (no utilization).
ALLOCATABLE_CPU = _mostly(["4", "2", "1", "3", "500m", "100m"],
                          [None, "0", "1e3", "1.5", "3500000u", "2E0", "10P", "9223372036854775807m"], one_in=8)
ALLOCATABLE_MEMORY = _mostly(["4Gi", "2Gi", "1Gi", "3G", "256Mi"],
                             [None, "0", "0.5Gi", "4e9", "3.5Gi", "1e12", "1073741824000m", "9E",
                              "9223372036854775807"], one_in=8)
# Quantities at or past int64 in milli-units (and sums of them past it): Go's MilliValue() then wraps or gives 0,
# by the form resource.Quantity holds the sum in (an int64 at some power of ten, or a big decimal; docs/autoscaler.md).
# Each is one form: an int64 at the powers of ten -3, 0, 1, 3, 6, 9, 15, 16, 17, 18, or a big decimal (binary
# suffixes past 2**50, 19 digits); none past 2**63 - 1 units, the most one quantity may be.
BIG_CPU = ("9P", "10P", "1E", "9E", "5e15", "1e16", "5e17", "92233720368547758", "92233720368547758e1",
           "9223372036854775k", "9223372036854M", "9223372036G", "4.5e18", "9223372036854775807m")
BIG_MEMORY = ("1Ei", "4Ei", "7Ei", "1Pi", "8000Pi", "2.5Ei", "9E", "5E", "1e18", "9223372036854775807",
              "4611686018427387904", "5e17", "92233720368547758e1")
# Extended resources that are not GPUs (the utilization reads cpu and memory; a GPU node only its GPU resource).
EXTENDED = st.sampled_from(("example.com/foo", "hugepages-2Mi", "ephemeral-storage", "nvidia.com/gpu-memory"))

OWNERS = st.sampled_from((
    None,
    ("apps/v1", "ReplicaSet", True), ("batch/v1", "Job", True), ("apps/v1", "StatefulSet", True),
    ("v1", "ReplicationController", True), ("apps/v1", "DaemonSet", True),
    ("apps/v1", "ReplicaSet", False), ("apps/v1", "ReplicaSet", None),  # not a controller reference
    ("vm.neon.tech/v1", "VirtualMachine", True), ("example.com/v1", "Widget", True), ("v1", "Node", True),
    ("extensions/v1beta1", "ReplicaSet", True),
    # The replicacount rule reads the group only for StatefulSets (1.36) and DaemonSets; a group version Go cannot
    # parse makes it step aside.
    ("example.com/v1", "StatefulSet", True), ("example.com/v1", "DaemonSet", True), ("apps/v1beta2", "DaemonSet", True),
    ("batch/v1beta1", "Job", True), ("a/b/c", "ReplicaSet", True), ("apps.kruise.io/v1beta1", "StatefulSet", True),
))
VOLUMES = st.sampled_from([
    {"hostPath": {"path": "/var/log"}}, {"emptyDir": {}}, {"emptyDir": {"medium": "Memory"}},
    {"emptyDir": {"medium": ""}}, {"emptyDir": {"sizeLimit": "1Gi"}}, {"configMap": {"name": "c"}},
    {"projected": {"sources": []}}, {"persistentVolumeClaim": {"claimName": "data"}}, {"secret": {"secretName": "s"}},
])
SAFE_TO_EVICT = st.sampled_from((None, "true", "false", "True", "maybe", "", "on-completion", "On-Completion"))
USAGE = st.sampled_from((
    '{"cpu": "1", "memory": "2Gi"}', '{"cpu": "250m", "memory": "1Gi"}', '{"cpu": 0.5, "memory": "1Gi"}',
    '{"cpu": "2", "memory": 1073741824}', '{"cpu": "1"}', '{"memory": "1Gi"}', "{}", "not json", "null",
    '{"cpu": "x", "memory": "1Gi"}', '{"cpu": "3", "memory": "3Gi"}',
    '{"cpu": "1e3", "memory": "0.5Gi"}', '{"cpu": "1000000u", "memory": "1e9"}', '{"cpu": 1e3, "memory": 5e8}',
    '{"cpu": "1.5", "memory": "1Ti"}', '{"cpu": 0.0005, "memory": 1.5}', '{"cpu": "2e-1", "memory": "3.5Gi"}',
    '{"cpu": "1e6", "memory": "1"}', '{"cpu": -1, "memory": "1Gi"}',
    '{"cpu": "9E", "memory": "7Ei"}', '{"cpu": "9223372036854775807", "memory": "9223372036854775807"}',
))
OVERCOMMIT = st.sampled_from((
    None, '{"cpu": "2", "memory": "1"}', '{"cpu": "3"}', '{"memory": "1.5"}', '"nope"', '{"cpu": "0"}',
    '{"cpu": "2", "memory": "0"}', '{"cpu": "1.5", "memory": "2"}', "{}",
    '{"cpu": "1e0", "memory": "0.5"}', '{"cpu": "1000m", "memory": "2e0"}', '{"cpu": 3, "memory": 1.5}',
    '{"cpu": "1000000u", "memory": "7"}', '{"cpu": "0.001"}',
))
AGES = st.sampled_from((None, 0, 1799, 1800, 1801, 3599, 3600, 3601, 7199, 7200, 7201, 86400))
# Seconds ago; negative: ahead (the API server sets deletionTimestamp to the deletion time plus the grace period).
DELETED = _mostly([None], [0, 29, 30, 31, 59, 60, 61, 90, 3600, -30, -3600])
GRACE = st.sampled_from((None, 0, 10, 30, 60))
# spec.terminationGracePeriodSeconds (what IsPodLongTerminating reads): zero, around the cut, a year, and past what
# Go's time.Duration holds in nanoseconds (about 292 years).
TERMINATION_GRACE = _mostly([None], [0, 1, 30, 60, 3600, 31536000, 9223372036, 10**10, 2**62], one_in=3)
PHASES = _mostly(["Running", None, "Pending"], ["Succeeded", "Failed", "Unknown", ""], one_in=3)
RESTART = st.sampled_from((None, "Always", "OnFailure", "Never"))
NAMESPACES = st.sampled_from(("default", "kube-system", "apps"))
APPS = st.sampled_from((None, "a", "b"))


def _requests(draw: st.DrawFn, gpu: bool) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", draw(CPU)), ("memory", draw(MEMORY))) if v is not None}
    if draw(st.integers(0, 63)) == 63:  # now and then a quantity past int64 in milli-units
        resource = draw(st.sampled_from(("cpu", "memory")))
        requests[resource] = draw(st.sampled_from(BIG_CPU if resource == "cpu" else BIG_MEMORY))
    if gpu and draw(st.booleans()):
        requests[draw(st.sampled_from(("nvidia.com/gpu", "amd.com/gpu")))] = draw(st.sampled_from(("0", "1", "2")))
    if draw(st.integers(0, 7)) == 7:
        requests[draw(EXTENDED)] = draw(st.sampled_from(("1", "2", "1Gi")))
    return {"requests": requests} if requests else {}


def _container(draw: st.DrawFn, name: str, gpu: bool, init: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "example/app:1", "resources": _requests(draw, gpu)}
    if init and draw(st.booleans()):
        c["restartPolicy"] = "Always"  # a sidecar
    return c


@st.composite
def _pod(draw: st.DrawFn, *, node: str, name: str, gpu: bool) -> dict[str, Any]:
    namespace = draw(NAMESPACES)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    annotations: dict[str, str] = {}
    spec: dict[str, Any] = {"nodeName": node}
    owner = draw(OWNERS)
    neon = draw(st.integers(0, 4)) == 4
    if neon:
        owner = ("vm.neon.tech/v1", "VirtualMachine", True)
        annotations["vm.neon.tech/usage"] = draw(USAGE)
        overcommit = draw(OVERCOMMIT)
        if overcommit is not None:
            annotations["vm.neon.tech/overcommit"] = overcommit
    if owner is not None:
        api, kind, controller = owner
        ref: dict[str, Any] = {"apiVersion": api, "kind": kind, "name": f"{kind.lower()}-{draw(st.sampled_from('xy'))}",
                               "uid": f"uid-{kind}"}
        if controller is not None:
            ref["controller"] = controller
        meta["ownerReferences"] = [ref]
        if draw(st.integers(0, 7)) == 7:  # another owner first, never a controller (the API server allows one)
            meta["ownerReferences"].insert(0, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "other",
                                               "uid": "uid-other", "controller": False})
    if draw(st.integers(0, 5)) == 5:
        annotations["cluster-autoscaler.kubernetes.io/daemonset-pod"] = draw(st.sampled_from(("true", "false", "True")))
    if draw(st.integers(0, 5)) == 5:
        annotations["kubernetes.io/config.mirror"] = draw(st.sampled_from(("hash", "")))
    safe = draw(SAFE_TO_EVICT)
    if safe is not None:
        annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] = safe
    volumes = [dict(draw(VOLUMES), name=f"v{i}") for i in range(draw(st.integers(0, 2)))]
    if volumes:
        spec["volumes"] = volumes
    local = draw(st.sampled_from((None, "v0", "v0,v1", "v1, v0", "nope", "")))
    if local is not None:
        annotations["cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"] = local
    app = draw(APPS)
    if app is not None:
        meta["labels"] = {"app": app}
    age = draw(AGES)
    if age is not None:
        meta["creationTimestamp"] = _ago(age)
    deleted = draw(DELETED)
    if deleted is not None:
        meta["deletionTimestamp"] = _ago(deleted)
        grace = draw(GRACE)
        if grace is not None:
            meta["deletionGracePeriodSeconds"] = grace
    termination_grace = draw(TERMINATION_GRACE)
    if termination_grace is not None:
        spec["terminationGracePeriodSeconds"] = termination_grace
    if annotations:
        meta["annotations"] = annotations
    first = "neonvm-runner" if neon else "main"
    spec["containers"] = [_container(draw, first, gpu)] + [_container(draw, f"c{i}", gpu)
                                                           for i in range(draw(st.integers(0, 1)))]
    inits = [_container(draw, f"init{i}", gpu, init=True) for i in range(draw(st.integers(0, 2)))]
    if inits:
        spec["initContainers"] = inits
    restart = draw(RESTART)
    if restart is not None:
        spec["restartPolicy"] = restart
    if draw(st.integers(0, 4)) == 4:
        spec["overhead"] = {"cpu": draw(_mostly(["100m", "250m"], list(BIG_CPU), one_in=32)),
                            "memory": draw(_mostly(["64Mi"], list(BIG_MEMORY), one_in=32))}
    status: dict[str, Any] = {}
    phase = draw(PHASES)
    if phase is not None:
        status["phase"] = phase
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


@st.composite
def _node(draw: st.DrawFn, *, name: str) -> tuple[dict[str, Any], bool]:
    allocatable = {k: v for k, v in (("cpu", draw(ALLOCATABLE_CPU)), ("memory", draw(ALLOCATABLE_MEMORY)))
                   if v is not None}
    allocatable["pods"] = "110"
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    gpu = draw(st.integers(0, 5)) == 5
    if gpu:
        if draw(st.booleans()):
            meta["labels"] = {GPU_LABEL: draw(st.sampled_from(("nvidia-tesla-t4", "")))}
        if draw(st.booleans()):
            resource = draw(st.sampled_from(("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.5gb")))
            allocatable[resource] = draw(st.sampled_from(("0", "1", "4", "1e0", "0.5")))
    if draw(st.integers(0, 7)) == 7:
        allocatable[draw(EXTENDED)] = draw(st.sampled_from(("0", "4", "1Gi")))
    disabled = draw(st.sampled_from((None, None, "true", "false", "True", "yes")))
    if disabled is not None:
        meta["annotations"] = {"cluster-autoscaler.kubernetes.io/scale-down-disabled": disabled}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "status": {"capacity": dict(allocatable), "allocatable": allocatable}}
    return node, gpu


SELECTORS = st.sampled_from([
    None, {}, {"matchLabels": {"app": "a"}}, {"matchLabels": {"app": "b"}},
    {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]},
    {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]},
    {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]},
    {"matchLabels": {"app": "nothing"}},  # selects no pod
    {"matchExpressions": [{"key": "app", "operator": "In", "values": ["zzz"]}]},
    {"matchLabels": {"app": "a"}, "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a", "b"]},
                          {"key": "app", "operator": "Exists"}]},
])


@st.composite
def _pdb(draw: st.DrawFn, *, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    selector = draw(SELECTORS)
    if selector is not None:
        spec["selector"] = selector
    allowed = draw(st.sampled_from((None, 0, 1, 2, -1)))
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": draw(NAMESPACES), "uid": f"uid-{name}"}, "spec": spec,
            "status": {} if allowed is None else {"disruptionsAllowed": allowed}}


_CONTROLLER_KINDS = {"ReplicaSet": "apps/v1", "Job": "batch/v1", "StatefulSet": "apps/v1",
                     "ReplicationController": "v1", "DaemonSet": "apps/v1"}
# spec.replicas as drawn (None: absent); the rule compares it with --min-replica-count for ReplicaSets and
# ReplicationControllers only.
# Where a controller object is: mostly in its pod's namespace (None), sometimes in another one.
ELSEWHERE = _mostly([None], ["default", "kube-system", "apps", "elsewhere"])
REPLICAS = st.sampled_from((None, 0, 1, 2, 3, 5, 7))


@st.composite
def _controllers(draw: st.DrawFn, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Some of the controller objects the pods' references name (the others are gone), some of them in another
    namespace than the pod's (gone for the rule, which looks in the pod's)."""
    named = sorted({(p["metadata"]["namespace"], r["kind"], r["name"]) for p in pods
                    for r in p["metadata"].get("ownerReferences", ()) if r["kind"] in _CONTROLLER_KINDS})
    kept = sorted({(draw(ELSEWHERE) or ns, kind, name) for ns, kind, name in named if draw(st.integers(0, 3))})
    if not kept:  # a dump holding a controller object, whichever
        kept = [("default", "ReplicaSet", "unrelated")]
    out = []
    for ns, kind, name in kept:
        spec: dict[str, Any] = {}
        replicas = draw(REPLICAS)
        if kind != "DaemonSet" and kind != "Job" and replicas is not None:
            spec["replicas"] = replicas
        elif kind == "Job" and replicas is not None:
            spec["parallelism"] = replicas
        out.append({"apiVersion": _CONTROLLER_KINDS[kind], "kind": kind,
                    "metadata": {"name": name, "namespace": ns, "uid": f"uid-{kind}-{ns}-{name}"}, "spec": spec})
    return out


@st.composite
def dumps(draw: st.DrawFn, *, max_nodes: int = 10) -> Generated:
    """A List of 1..``max_nodes`` nodes with their pods and the PDBs over them (controllers in one dump of two), and
    a flag combination."""
    items: list[dict[str, Any]] = []
    n_nodes = draw(st.integers(1, max_nodes))
    for i in range(n_nodes):
        node, gpu = draw(_node(name=f"n{i}"))
        items.append(node)
        pods = draw(st.integers(0 if i else 1, 5))  # explain needs a pod in the dump
        items += [draw(_pod(node=f"n{i}", name=f"n{i}-p{j}", gpu=gpu)) for j in range(pods)]
    items += [draw(_pdb(name=f"pdb{k}")) for k in range(draw(st.integers(0, 4)))]
    if draw(st.booleans()):
        items += draw(_controllers([o for o in items if o["kind"] == "Pod"]))
    flags = tuple(f"--{name}={value}" for name, values in FLAG_VALUES.items()
                  if (value := draw(st.sampled_from(values))) is not None)
    return Generated(dump={"apiVersion": "v1", "kind": "List", "items": items}, flags=flags, nodes=n_nodes)


def as_json(generated: Generated) -> str:
    """The dump as explain reads it: the List, then an empty PodDisruptionBudgetList so the PDBs count as known (a
    dump without one means "not listed" to the agent; the autoscaler always has its PDB lister)."""
    return json.dumps(generated.dump) + "\n" + json.dumps({"apiVersion": "policy/v1",
                                                           "kind": "PodDisruptionBudgetList", "items": []})
