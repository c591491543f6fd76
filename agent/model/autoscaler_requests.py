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

The NeonVM usage annotation applies as it does for the exported value, for every release: the product's premise
is that the number that matters is the one neon's patched autoscaler decides with, and a VM's usage is that
number wherever the annotation is.
"""

from __future__ import annotations

from typing import NamedTuple

from agent.model.autoscaler_settings import NEON
from agent.model.pod_requests import statuses_repeat_spec
from agent.model.rules import RULES_1_36, RULES_1_37, Rules
from agent.model.valuation import PodValue, evaluate

__all__ = ["AutoscalerRequests", "requests_of_release", "autoscaler_requests"]


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


def autoscaler_requests(value: PodValue, how: AutoscalerRequests) -> tuple[int, int, str]:
    """(cpu, memory, why) of a pod as ``how`` computes it; why is "" where that is the exported value."""
    if _same_as_exported(value, how):
        return value.cpu, value.memory, ""
    assert value.record is not None
    mine = evaluate(value.record, how.rules, use_status=how.use_status, pod_level=how.pod_level,
                    pod_status=how.pod_status)
    if (mine.cpu, mine.memory) == (value.cpu, value.memory):
        return value.cpu, value.memory, ""
    pod = value.record
    reasons = []
    if pod.pod_requests is not None and not how.pod_level:
        reasons.append("ignores pod-level spec.resources")
    if not how.use_status and not statuses_repeat_spec(pod):
        reasons.append("ignores in-place-resize status")
    elif how.use_status and not how.pod_status and pod.pod_status is not None:
        reasons.append("ignores the pod's own in-place-resize status (status.resources, status.allocatedResources)")
    if how.rules != value.rules and how.use_status and not reasons:
        reasons.append(f"reads resize status with the {how.rules} arithmetic, not the {value.rules}")
    return mine.cpu, mine.memory, f"{how.name} ({how.helper}) " + "; ".join(reasons or ["computes differently"])
