"""The slim per-pod record the agent keeps.

A pod object is ~10 KB of JSON and ~130 KiB as the kubernetes client's model;
the agent needs a few hundred bytes of it. ``agent.decode`` builds this record
straight from the bytes (or a parsed object), noting what it could not read in
``problems``, so a malformed pod is still reported, never dropped.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from agent.model.fields import Oversized, Requests

__all__ = [
    "ContainerRequests",
    "Controller",
    "EvictionFacts",
    "LocalStorage",
    "MAX_LABELS_BYTES",
    "NO_EVICTION_FACTS",
    "StatusRequests",
    "PodRecord",
    "USAGE_ANNOTATION",
    "OVERCOMMIT_ANNOTATION",
    "VM_NAME_LABEL",
    "TERMINAL_PHASES",
    "NEONVM_API_VERSION",
    "PODS",
    "RESOURCES",
]

# The watched resource's name, as the agent's own metrics label it.
PODS = "pods"
USAGE_ANNOTATION = "vm.neon.tech/usage"
OVERCOMMIT_ANNOTATION = "vm.neon.tech/overcommit"
VM_NAME_LABEL = "vm.neon.tech/name"
# The owner references of a NeonVM runner pod (VirtualMachine, VirtualMachineMigration) use this group.
NEONVM_API_VERSION = "vm.neon.tech/v1"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# The annotations and the kubelet's mark the cluster-autoscaler's drain rules read (utils/drain, utils/pod).
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
DAEMONSET_POD_ANNOTATION = "cluster-autoscaler.kubernetes.io/daemonset-pod"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

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


class Controller(NamedTuple):
    """The ownerReference with ``controller: true`` (metav1.GetControllerOf); a reference without it is no owner."""

    kind: str
    api_version: str
    name: str


#: The most label bytes (metadata.labels as JSON) the agent keeps per pod. Honest pods carry a few dozen labels at
#: most (Helm, Argo CD and a mesh together write about 1 KiB). The API server bounds labels only by the object's size
#: (etcd's 1.5 MiB request limit; the 256 KiB limit is annotations'), so a pod may carry some 30,000 of them, which
#: the agent would keep on every event of the pod (90 such pods: 168.6 MiB). Beyond it the labels are not kept
#: (EvictionFacts.labels_over_bound).
MAX_LABELS_BYTES = 16 * 1024


class LocalStorage(msgspec.Struct, frozen=True, gc=False):
    """What the local-storage drain rule reads (agent.model.local_storage): the local volumes it blocks on and the
    listed names it ignores, the first of each in the pod's order (volumes) and the annotation's (names), and how
    many more."""

    blocking: tuple[str, ...] = ()
    more_blocking: int = 0
    unknown: tuple[str, ...] = ()
    more_unknown: int = 0


class EvictionFacts(msgspec.Struct, frozen=True, gc=False):
    """What the cluster-autoscaler's drain rules read of a pod, and nothing its value depends on.

    Kept apart from the requests so a change here (a label, a deletion) never re-evaluates the pod's value. The
    defaults describe a bare pod, so records built without them stay valid. Built for every watch event, so a
    Struct not tracked by the garbage collector (it holds no cycles: strings, numbers, tuples of them): the
    collector's passes over a queue of events skip it. Fields in this order are the positional constructor's.
    """

    controller: Controller | None = None
    # Every label, sorted by key, as one string: "key1\0value1\0key2\0value2" (PDB selectors read them). One string,
    # not a tuple of them: no object the garbage collector tracks, one allocation per event. No label key or value
    # holds a NUL (the API server admits only a few ASCII characters in both).
    labels: str = ""
    # The local-storage rule's facts, bounded whatever the pod's volumes (None: no hostPath volume nor emptyDir
    # volume outside memory, the rule never blocks).
    local_storage: LocalStorage | None = None
    # The annotations as written (None when absent): the rules compare them to exact strings. Words compared to
    # "true"/"false" are kept clipped (agent.model.fields.clipped); safe-to-evict-local-volumes is read into
    # ``local_storage``.
    safe_to_evict: str | None = None
    daemonset_pod: str | None = None
    mirror: bool = False
    # metadata.creationTimestamp and metadata.deletionTimestamp as seconds since the epoch (None: absent or
    # unreadable, the latter noted in PodRecord.problems).
    created: float | None = None
    deleted: float | None = None
    # spec.terminationGracePeriodSeconds (the autoscaler's IsPodLongTerminating reads it; None: the default, 30 s).
    termination_grace: int | None = None
    # GPU requests, per container that has one: (container kind "container"/"init"/"sidecar", container name,
    # resource, quantity). The name tells the first app container's apart: neon's patch replaces its requests.
    gpu: tuple[tuple[str, str, str, str], ...] = ()
    # Not 0: the pod's labels were over MAX_LABELS_BYTES (their size in bytes) and are not kept (``labels`` is
    # empty): which PDBs cover the pod is unknown, so every PDB of its namespace may, and its verdict says
    # "PDB unknown".
    labels_over_bound: int = 0

    def label(self, key: str) -> str | None:
        return self.label_map().get(key)

    def label_map(self) -> dict[str, str]:
        if not self.labels:
            return {}
        parts = self.labels.split("\0")
        return dict(zip(parts[::2], parts[1::2], strict=False))


NO_EVICTION_FACTS = EvictionFacts()


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
    # As written, or only the length and an excerpt of text too long to read (refused: agent.model.neon).
    usage_annotation: str | Oversized | None = None
    overcommit_annotation: str | Oversized | None = None
    vm_name: str | None = None
    # "source" or "target" while a NeonVM live migration owns the pod, else "".
    migration_role: str = ""
    problems: tuple[str, ...] = ()
    # What the autoscaler's drain rules read; not part of value_inputs (the value does not depend on it).
    eviction: EvictionFacts = NO_EVICTION_FACTS

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
