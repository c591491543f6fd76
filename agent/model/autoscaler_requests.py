"""Which requests each cluster-autoscaler release computes for a pod, and the pods where that differs from the
exported value.

The autoscaler sums pod requests with a Kubernetes helper vendored at its own release (docs/autoscaler.md names
the upstream files and commits read for each point):

* **1.33 and later** (commit ac1c7b5463): its ``utils/pod.PodRequests`` calls component-helpers
  ``resource.PodRequests`` with ``UseStatusResources`` when InPlacePodVerticalScaling is on (beta, on by default
  since 1.33) and ``SkipPodLevelResources`` unless PodLevelResources is on (alpha and off in 1.33, beta and on
  since 1.34). It does not pass ``InPlacePodLevelResourcesVerticalScalingEnabled``, behind which component-helpers
  (v0.36.3, v0.37.2) reads the pod's own resize status (``status.resources``, ``status.allocatedResources``): the
  autoscaler ignores it, while kube-scheduler reads it. Container statuses count. 1.33 to 1.36 are computed with
  the 1.36 arithmetic (per-container maxima of spec and status), 1.37 and 1.38 with the 1.37 arithmetic, as
  kube-scheduler of those releases does (:mod:`agent.model.rules`).
* **before 1.33**, and neon's autoscaler (built on 1.31.1): ``k8s.io/kubernetes/pkg/api/v1/resource.PodRequests``
  with no options: containers, init containers and sidecars (the KEP-753 formula), overhead; no in-place-resize
  status and no pod-level resources. Sidecars count from 1.28 on here; in a 1.28 cluster the SidecarContainers
  gate was alpha and off, so no pod there has one.

The NeonVM usage annotation (``vm.neon.tech/usage``, ``vm.neon.tech/overcommit``) is read by neon's patched
autoscaler only (its ``AllPodLister`` hook in ``utils/kubernetes/listers.go``): release "neon" replaces
``containers[0]``'s requests exactly as that Go code does (:mod:`agent.model.neon_patch`, which differs from the
exported value's stricter reading in JSON numbers, missing fields, truncation and zero factors), and every upstream
release uses the pod's own requests, since no upstream release reads the annotation. Where that differs from the
exported value (which applies the usage), the pod is in the verdict's ``differing`` with why.
"""

from __future__ import annotations

from typing import NamedTuple

from agent.model.autoscaler_settings import NEON
from agent.model.go_amount import as_go_amount, from_go_quantity, go_amount
from agent.model.neon_patch import neon_patch
from agent.model.pod import PodRecord
from agent.model.pod_requests import pod_requests, statuses_repeat_spec
from agent.model.rules import RULES_1_36, RULES_1_37, Rules
from agent.model.valuation import SOURCE_VM_USAGE, PodValue, evaluate

__all__ = ["AutoscalerRequests", "ReleaseValue", "requests_of_release", "autoscaler_requests", "go_requests"]


class AutoscalerRequests(NamedTuple):
    """How one autoscaler release computes a pod's requests."""

    release: str
    rules: Rules  # whose PodRequests arithmetic
    use_status: bool  # in-place-resize status of the containers read
    pod_level: bool  # spec.resources honoured
    pod_status: bool  # the pod's own in-place-resize status read (InPlacePodLevelResourcesVerticalScalingEnabled)
    helper: str  # the Go helper, for people

    @property
    def name(self) -> str:
        return f"cluster-autoscaler {self.release}"


_LEGACY_HELPER = "k8s.io/kubernetes/pkg/api/v1/resource.PodRequests, no options"


def requests_of_release(release: str) -> AutoscalerRequests:
    """The arithmetic of ``release`` ("1.<minor>" of 1.28..1.38, or "neon"); ValueError for another."""
    if release == NEON:
        return AutoscalerRequests(NEON, RULES_1_36, False, False, False, _LEGACY_HELPER + " (neon's patched 1.31.1)")
    major, _, minor_text = release.partition(".")
    if major != "1" or not minor_text.isdigit() or not 28 <= int(minor_text) <= 38:
        raise ValueError(f"unknown cluster-autoscaler release {release!r}")
    minor = int(minor_text)
    if minor < 33:
        return AutoscalerRequests(release, RULES_1_36, False, False, False, _LEGACY_HELPER)
    helper = f"k8s.io/component-helpers v0.{minor} resource.PodRequests"
    return AutoscalerRequests(release, RULES_1_37 if minor >= 37 else RULES_1_36, True, minor >= 34, False, helper)


def _same_as_exported(value: PodValue, how: AutoscalerRequests) -> bool:
    """True when the exported value is, without computing anything, what ``how`` gives."""
    pod = value.record
    if pod is None:
        return True  # nothing to recompute from: the exported value is all there is
    if value.rules == how.rules and how.use_status and how.pod_level and (how.pod_status or pod.pod_status is None):
        return True
    if pod.pod_requests is not None and not how.pod_level:
        return False
    # Without a resize in flight every release's status-aware sum is the spec-only one.
    return statuses_repeat_spec(pod)


class ReleaseValue(NamedTuple):
    """A pod's requests as one release computes them (nano-units); ``why`` is "" where that is the exported value;
    ``crash`` names the Go panic the release's autoscaler would hit on this pod ("" if none)."""

    cpu: int
    memory: int
    why: str = ""
    crash: str = ""
    # neon's patch replaced containers[0]'s requests with exactly cpu and memory: its other resources (a GPU) are gone.
    replaced_first: bool = False


def _vm_pod(value: PodValue, pod: PodRecord, how: AutoscalerRequests) -> ReleaseValue:
    """A pod with the VM usage annotation: neon's patch applied as its Go code does, or (upstream) not at all."""
    if how.release == NEON:
        patch = neon_patch(pod.usage_annotation, pod.overcommit_annotation, has_containers=bool(pod.containers))
        if patch.crash:
            return ReleaseValue(value.cpu, value.memory, f"{how.name}: {patch.crash}", patch.crash)
        note = patch.note
    else:
        # No upstream release reads the annotation: said where the exported value applied it.
        patch, note = None, ("does not read vm.neon.tech/usage (only neon's patched autoscaler does): the pod's own "
                             "requests" if value.source == SOURCE_VM_USAGE else "")
    override = None if patch is None or patch.requests is None else dict(patch.requests)
    mine = pod_requests(pod, how.rules, override, how.use_status, how.pod_level, how.pod_status)
    replaced = override is not None and bool(pod.containers)
    if (mine.cpu, mine.memory) == (value.cpu, value.memory):
        return ReleaseValue(value.cpu, value.memory, replaced_first=replaced)
    reasons = [r for r in (note, *_reasons(value, how)) if r]
    return ReleaseValue(mine.cpu, mine.memory,
                        f"{how.name} ({how.helper}) " + "; ".join(reasons or ["computes differently"]),
                        replaced_first=replaced)


def autoscaler_requests(value: PodValue, how: AutoscalerRequests) -> ReleaseValue:
    """A pod's requests as ``how`` computes them, and why where that is not the exported value."""
    if value.record is not None and value.record.usage_annotation is not None:
        return _vm_pod(value, value.record, how)
    if _same_as_exported(value, how):
        return ReleaseValue(value.cpu, value.memory)
    assert value.record is not None
    mine = evaluate(value.record, how.rules, use_status=how.use_status, pod_level=how.pod_level,
                    pod_status=how.pod_status)
    if (mine.cpu, mine.memory) == (value.cpu, value.memory):
        return ReleaseValue(value.cpu, value.memory)
    reasons = _reasons(value, how)
    if how.rules != value.rules and how.use_status and not reasons:
        reasons.append(f"reads resize status with the {how.rules} arithmetic, not the {value.rules}")
    return ReleaseValue(mine.cpu, mine.memory,
                        f"{how.name} ({how.helper}) " + "; ".join(reasons or ["computes differently"]))


def go_requests(value: PodValue, how: AutoscalerRequests) -> tuple[int, int]:
    """A pod's cpu and memory requests as ``how``'s ``PodRequests`` leaves them (the values of
    :func:`autoscaler_requests`, as :class:`~agent.model.go_amount.GoAmount` values that know their Go form), for a node
    whose sum passes int64 in milli-units."""
    pod = value.record
    if pod is None:
        return as_go_amount(value.cpu), as_go_amount(value.memory)
    override: dict[str, int] | None = None
    if how.release == NEON and pod.usage_annotation is not None:
        patch = neon_patch(pod.usage_annotation, pod.overcommit_annotation, has_containers=bool(pod.containers))
        if patch.quantities is not None:
            override = {resource: from_go_quantity(q) for resource, q in patch.quantities.items()}
    mine = pod_requests(pod, how.rules, override, how.use_status, how.pod_level, how.pod_status, parse=go_amount)
    return as_go_amount(mine.cpu), as_go_amount(mine.memory)


def _reasons(value: PodValue, how: AutoscalerRequests) -> list[str]:
    """What ``how`` reads differently from the exported value's arithmetic, for people."""
    pod = value.record
    assert pod is not None
    reasons = []
    if pod.pod_requests is not None and not how.pod_level:
        reasons.append("ignores pod-level spec.resources")
    if not how.use_status and not statuses_repeat_spec(pod):
        reasons.append("ignores in-place-resize status")
    elif how.use_status and not how.pod_status and pod.pod_status is not None:
        reasons.append("ignores the pod's own in-place-resize status (status.resources, status.allocatedResources)")
    return reasons
