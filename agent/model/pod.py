"""The slim per-pod record the agent keeps.

A pod object is ~10 KB of JSON and ~130 KiB as the kubernetes client's model;
the agent needs a few hundred bytes of it. ``agent.decode`` builds this record
straight from the bytes (or a parsed object), noting what it could not read in
``problems``, so a malformed pod is still reported, never dropped.
"""

from __future__ import annotations

from typing import NamedTuple

from agent.model.fields import Requests

__all__ = [
    "ContainerRequests",
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
