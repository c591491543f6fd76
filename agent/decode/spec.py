"""The one field specification of the objects the agent reads: msgspec Structs of just the fields it needs.

Two ways fill these Structs, and one function (``records``) turns them into
the model's records, so every rule about what a field means is written once:

- the fast path: msgspec decodes JSON bytes (or converts a parsed object)
  straight into them, accepting only the types a well-formed object has and
  skipping every undeclared field without building it (managedFields alone
  are hundreds of objects);
- the tolerant path (``tolerant``): whatever msgspec refuses is read field by
  field from the parsed object, driven by these same declarations, and each
  field of the wrong type becomes a problem instead of an error.

Not tracked by the garbage collector (they hold no cycles): a LIST of 2,000
pods builds tens of thousands of them.
"""

from __future__ import annotations

import msgspec

from agent.model.node import GPU_LABELS, SCALE_DOWN_DISABLED_ANNOTATION
from agent.model.pod import (
    DAEMONSET_POD_ANNOTATION,
    MIRROR_ANNOTATION,
    OVERCOMMIT_ANNOTATION,
    SAFE_TO_EVICT_ANNOTATION,
    SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION,
    USAGE_ANNOTATION,
    VM_NAME_LABEL,
)

__all__ = ["Pod", "Node", "Pdb", "PodEvent", "NodeEvent", "PdbEvent", "Controller", "ControllerEvent", "Quantities",
           "Labels", "Selector", "Undecoded", "VmName"]

#: A resource map as the API server writes it (cpu, memory, pods, hugepages-*, ...): quantity strings.
Quantities = dict[str, str]
#: metadata.labels: every label (PDB selectors may name any of them); a null value (which the API server never
#: sends) reads as absent.
Labels = dict[str, str | None]
#: A field kept as its JSON text, undecoded (empty: absent): records measures it against its bound before
#: decoding it, so a tenant's 1.5 MB selector or labels up to the object's size limit (etcd's 1.5 MiB request limit;
#: labels have no limit of their own) are never built as Python strings.
Undecoded = msgspec.Raw


class _S(msgspec.Struct, rename="camel", gc=False):
    """JSON names in camelCase; unknown fields are ignored (msgspec's default)."""


class Annotations(_S):
    # Structs of the two keys, not dicts: an annotation map can hold kilobytes
    # (last-applied configurations) of which two values matter.
    usage: str | None = msgspec.field(default=None, name=USAGE_ANNOTATION)
    overcommit: str | None = msgspec.field(default=None, name=OVERCOMMIT_ANNOTATION)
    # The cluster-autoscaler's drain rules read these.
    safe_to_evict: str | None = msgspec.field(default=None, name=SAFE_TO_EVICT_ANNOTATION)
    safe_to_evict_local_volumes: str | None = msgspec.field(default=None, name=SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION)
    daemonset_pod: str | None = msgspec.field(default=None, name=DAEMONSET_POD_ANNOTATION)
    mirror: str | None = msgspec.field(default=None, name=MIRROR_ANNOTATION)


class VmName(_S):
    """The one label the agent reads of a pod whose labels are over their bound (decoded without building the rest)."""

    vm_name: str | None = msgspec.field(default=None, name=VM_NAME_LABEL)


class OwnerReference(_S):
    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    controller: bool | None = None


class Meta(_S):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    annotations: Annotations | None = None
    labels: Undecoded = msgspec.field(default_factory=msgspec.Raw)  # Labels, up to MAX_LABELS_BYTES
    owner_references: list[OwnerReference] | None = None
    # RFC 3339 times, read as seconds since the epoch by records.
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None


class Resources(_S):
    requests: Quantities | None = None


class Container(_S):
    name: str | None = None
    resources: Resources | None = None
    restart_policy: str | None = None


class EmptyDir(_S):
    medium: str | None = None


class HostPath(_S):
    path: str | None = None


class Volume(_S):
    """Only what says whether a volume is local storage (hostPath, emptyDir)."""

    name: str | None = None
    host_path: HostPath | None = None
    empty_dir: EmptyDir | None = None


class Spec(_S):
    node_name: str | None = None
    containers: list[Container] | None = None
    init_containers: list[Container] | None = None
    resources: Resources | None = None
    overhead: Quantities | None = None
    volumes: list[Volume] | None = None
    termination_grace_period_seconds: int | None = None


class ContainerStatus(_S):
    name: str | None = None
    resources: Resources | None = None
    allocated_resources: Quantities | None = None


class Condition(_S):
    type: str | None = None
    reason: str | None = None


class PodStatus(_S):
    phase: str | None = None
    # The pod's own totals (in-place pod-level resize).
    resources: Resources | None = None
    allocated_resources: Quantities | None = None
    container_statuses: list[ContainerStatus] | None = None
    init_container_statuses: list[ContainerStatus] | None = None
    conditions: list[Condition] | None = None


class Pod(_S):
    metadata: Meta | None = None
    spec: Spec | None = None
    status: PodStatus | None = None


class NodeAnnotations(_S):
    scale_down_disabled: str | None = msgspec.field(default=None, name=SCALE_DOWN_DISABLED_ANNOTATION)


class NodeLabels(_S):
    """The cloud providers' GPU labels (agent.model.node.GPU_LABELS), one field each."""

    gke: str | None = msgspec.field(default=None, name=GPU_LABELS[0])
    aws: str | None = msgspec.field(default=None, name=GPU_LABELS[1])
    azure: str | None = msgspec.field(default=None, name=GPU_LABELS[2])


class NodeMeta(_S):
    name: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    annotations: NodeAnnotations | None = None
    labels: NodeLabels | None = None


class NodeStatus(_S):
    capacity: Quantities | None = None
    allocatable: Quantities | None = None


class Node(_S):
    metadata: NodeMeta | None = None
    status: NodeStatus | None = None


class PdbMeta(_S):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None


class Requirement(_S):
    key: str | None = None
    operator: str | None = None
    values: list[str] | None = None


class Selector(_S):
    match_labels: Labels | None = None
    match_expressions: list[Requirement] | None = None


class PdbSpec(_S):
    selector: Undecoded = msgspec.field(default_factory=msgspec.Raw)  # a Selector, up to MAX_SELECTOR_BYTES


class PdbStatus(_S):
    disruptions_allowed: int | None = None


class Pdb(_S):
    """A policy/v1 PodDisruptionBudget: which pods it covers, and whether it allows a disruption now."""

    metadata: PdbMeta | None = None
    spec: PdbSpec | None = None
    status: PdbStatus | None = None


class ControllerSpec(_S):
    replicas: int | None = None


class Controller(_S):
    """A ReplicationController, Job, ReplicaSet, StatefulSet or DaemonSet: its name, and spec.replicas (the
    autoscaler's replicacount rule reads no more)."""

    metadata: PdbMeta | None = None
    spec: ControllerSpec | None = None


class PodEvent(_S):
    type: str
    object: Pod


class NodeEvent(_S):
    type: str
    object: Node


class PdbEvent(_S):
    type: str
    object: Pdb


class ControllerEvent(_S):
    type: str
    object: Controller
