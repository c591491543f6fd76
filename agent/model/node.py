"""The agent's own Node object, reduced to what the comparisons need."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["NodeRecord", "NODES", "SCALE_DOWN_DISABLED_ANNOTATION", "GPU_LABELS", "GPU_RESOURCES"]

# The watched resource's name, as the agent's own metrics label it.
NODES = "nodes"
SCALE_DOWN_DISABLED_ANNOTATION = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
# The cloud providers' GPU node labels the cluster-autoscaler reads (GPULabel() of GKE, AWS, Azure).
GPU_LABELS = ("cloud.google.com/gke-accelerator", "k8s.amazonaws.com/accelerator", "kubernetes.azure.com/accelerator")
# GPU extended resources, in the order the autoscaler looks for them (1.36.1's utils/gpu GPUVendorResourceNames,
# exact names: a MIG resource such as nvidia.com/mig-1g.5gb is none; which of them a release reads is the release's:
# agent.model.autoscaler_rules).
GPU_RESOURCES = ("nvidia.com/gpu", "habana.ai/gaudi", "gpu.intel.com/xe", "amd.com/gpu", "microsoft.com/directx")


class NodeRecord(NamedTuple):
    name: str
    uid: str
    resource_version: str
    # Raw quantity strings for cpu, memory and pods, as status reports them.
    capacity: dict[str, str]
    allocatable: dict[str, str]
    problems: tuple[str, ...] = ()
    # The annotation cluster-autoscaler.kubernetes.io/scale-down-disabled as written (only "true" disables).
    scale_down_disabled: str | None = None
    # The first GPU label of GPU_LABELS the node carries, and its value.
    gpu_label: str | None = None
    # (resource, quantity) of each GPU resource of GPU_RESOURCES with a non-zero (or unreadable) allocatable, in that
    # order: the release picks among them (NodeHasGpu, DetectNodeGPUResourceName).
    gpu_allocatable: tuple[tuple[str, str], ...] = ()
