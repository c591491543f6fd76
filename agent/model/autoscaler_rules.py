"""One cluster-autoscaler release's rules for a node's verdict, decided once per release: which drainability rules
run and in which order, and the release points that move a cut-off.

The release points, each in one place:

* **at or below the threshold** (``core/scaledown/eligibility/eligibility.go``, ``isNodeAtOrBelowUtilizationThreshold``,
  kubernetes/autoscaler #8975): a node exactly at its threshold is underutilized in 1.36 and later and in the patch
  releases of 1.32 to 1.34 cut after 2026-01-09 (#9033, #9034, #9035; 1.35 treated alike, unverified); strictly below
  before 1.32 and in neon's 1.31.1.
* **the kube-system pod timeout** (``simulator/drainability/rules/system/rule.go``): from 1.33 a kube-system pod older
  than ``--blocking-system-pod-distruption-timeout`` is drainable; before, it blocks however old.
* **oncompletion** (``simulator/drainability/rules/oncompletion/rule.go``, kubernetes/autoscaler #9355, merged
  2026-03): a pod annotated safe-to-evict "on-completion" keeps its node until it completes; in 1.36.1's chain,
  not in 1.31.1's (so not in neon's); 1.37 and 1.38 follow 1.36.
* **replicacount's StatefulSet group** (``rules/replicacount/rule.go``, #8011, merged 2025-04): from 1.33 only an
  ``apps`` StatefulSet is looked up (a custom group's is left alone); 1.31.1 (neon's) looks any up by name.
  Cherry-picked into later patch releases of 1.29 to 1.32, which a minor release here cannot tell apart.
* **which GPU resources make a GPU node** (``utils/gpu/gpu.go``): 1.31.1 (and neon's) reads ``nvidia.com/gpu``
  alone (``NodeHasGpu``; its ``GpuConfig`` always names it); 1.36.1 the vendor list ``GPUVendorResourceNames``
  (#8629, merged 2025-11, and #8853), exact names only, the first with a non-zero allocatable (else
  ``nvidia.com/gpu``). Taken from 1.35 on (its cut follows those merges; **unverified**).
* **the order of local storage and safe-to-evict "false"**: 1.28 (one function in ``utils/drain/drain.go``, before
  the rules were split out) checked local storage first; from 1.29 ``rules.Default`` puts not-safe-to-evict first.
  So a 1.28 record's rules name drain.go as their upstream file, a later one's their own ``rules/`` file.

docs/autoscaler.md lists the sources read for each.
"""

from __future__ import annotations

from types import MappingProxyType

import msgspec

from agent.model.autoscaler_requests import AutoscalerRequests, requests_of_release
from agent.model.autoscaler_settings import NEON, RELEASES, AutoscalerSettings
from agent.model.controllers import Controllers
from agent.model.drainability import (
    DAEMONSET,
    LOCAL_STORAGE_RULE,
    LONG_TERMINATING,
    MIRROR,
    NOT_SAFE_TO_EVICT_RULE,
    ON_COMPLETION_RULE,
    PDB,
    REPLICA_COUNT,
    REPLICA_COUNT_ANY_GROUP,
    REPLICATED,
    SAFE_TO_EVICT,
    SYSTEM,
    Clock,
    DrainContext,
    DrainRule,
)
from agent.model.node import GPU_RESOURCES

__all__ = ["AutoscalerRules", "rules_of_release", "RULES_BY_RELEASE", "AT_OR_BELOW_FROM", "SYSTEM_POD_TIMEOUT_FROM",
           "LOCAL_STORAGE_FIRST_UNTIL", "LONG_TERMINATING_EXTRA", "NEON_MINOR", "RULES_SPLIT_FROM", "DRAIN_GO",
           "ON_COMPLETION_FROM", "STATEFULSET_APPS_ONLY_FROM", "GPU_VENDORS_FROM"]

#: The first minor release whose patch releases count a node exactly at its threshold as underutilized.
AT_OR_BELOW_FROM = 32
#: The first minor release whose system rule lets a kube-system pod older than the timeout go.
SYSTEM_POD_TIMEOUT_FROM = 33
#: The first minor release that reads every GPU vendor's resource (before: nvidia.com/gpu alone).
GPU_VENDORS_FROM = 35
#: The first minor release with the oncompletion rule.
ON_COMPLETION_FROM = 36
#: The first minor release whose replicacount rule looks up only an apps StatefulSet.
STATEFULSET_APPS_ONLY_FROM = 33
#: The last minor release that checked local storage before safe-to-evict "false".
LOCAL_STORAGE_FIRST_UNTIL = 28
#: The first minor release whose drainability rules are files of their own (simulator/drainability/rules/).
RULES_SPLIT_FROM = 29
#: Where every check was before that: one function.
DRAIN_GO = "cluster-autoscaler/utils/drain/drain.go"
#: drain.PodLongTerminatingExtraThreshold: a deleted pod counts until its grace period plus this has passed.
LONG_TERMINATING_EXTRA = 30.0
#: neon's patched autoscaler is 1.31.1 underneath.
NEON_MINOR = 31


class AutoscalerRules(msgspec.Struct, frozen=True, kw_only=True):
    """What one release does: its request arithmetic, its drainability rules in order, and its cut-offs."""

    release: str
    minor: int
    requests: AutoscalerRequests
    drain: tuple[DrainRule, ...]
    # Eligibility: a node exactly at its threshold is underutilized (True), or only one strictly below it (False).
    at_or_below: bool
    # The system rule lets a kube-system pod older than --blocking-system-pod-distruption-timeout go.
    system_pod_timeout: bool
    # The GPU resources that make a GPU node, in the order the release looks for them.
    gpu_resources: tuple[str, ...] = GPU_RESOURCES
    long_terminating_extra: float = LONG_TERMINATING_EXTRA

    def chain(self, settings: AutoscalerSettings) -> tuple[DrainRule, ...]:
        """The rules that run under ``settings``, in order: a rule whose flag is off is left out (rules.Default)."""
        return tuple(rule for rule in self.drain if rule.enabled_by is None or getattr(settings, rule.enabled_by))

    @property
    def on_completion(self) -> bool:
        """Whether safe-to-evict "on-completion" means something to this release (its oncompletion rule)."""
        return ON_COMPLETION_RULE in self.drain

    def context(self, settings: AutoscalerSettings, clock: Clock, problems: list[str],
                controllers: Controllers | None = None) -> DrainContext:
        """What the rules read for one verdict; ``controllers`` None: the controller objects are not known."""
        return DrainContext(custom_controllers=settings.skip_nodes_with_custom_controller_pods,
                            system_pod_timeout=(settings.blocking_system_pod_distruption_timeout
                                                if self.system_pod_timeout else None),
                            long_terminating_extra=self.long_terminating_extra, clock=clock, problems=problems,
                            controllers=controllers,
                            # --min-replica-count (default 0)
                            min_replica_count=settings.min_replica_count)

    def underutilized(self, value: float, threshold: float) -> bool:
        """Whether a node at utilization ``value`` is underutilized against ``threshold``, by the release's own
        comparison (``!(u > t)`` or ``!(u >= t)``), so a NaN utilization is underutilized in both."""
        return not (value > threshold if self.at_or_below else value >= threshold)


def _rules(release: str) -> AutoscalerRules:
    minor = NEON_MINOR if release == NEON else int(release.partition(".")[2])
    blocking = ((LOCAL_STORAGE_RULE, NOT_SAFE_TO_EVICT_RULE) if minor <= LOCAL_STORAGE_FIRST_UNTIL
                else (NOT_SAFE_TO_EVICT_RULE, LOCAL_STORAGE_RULE))
    replica_count = REPLICA_COUNT if minor >= STATEFULSET_APPS_ONLY_FROM else REPLICA_COUNT_ANY_GROUP
    on_completion = (ON_COMPLETION_RULE,) if minor >= ON_COMPLETION_FROM else ()
    drain: tuple[DrainRule, ...] = (MIRROR, LONG_TERMINATING, replica_count, DAEMONSET, SAFE_TO_EVICT, *on_completion,
                                    REPLICATED, SYSTEM, *blocking, PDB)
    if minor < RULES_SPLIT_FROM:
        drain = tuple(msgspec.structs.replace(rule, upstream=DRAIN_GO) for rule in drain)
    return AutoscalerRules(release=release, minor=minor, requests=requests_of_release(release), drain=drain,
                           at_or_below=minor >= AT_OR_BELOW_FROM, system_pod_timeout=minor >= SYSTEM_POD_TIMEOUT_FROM,
                           gpu_resources=GPU_RESOURCES if minor >= GPU_VENDORS_FROM else GPU_RESOURCES[:1])


#: Every supported release's rules, built once.
RULES_BY_RELEASE: MappingProxyType[str, AutoscalerRules] = MappingProxyType({r: _rules(r) for r in RELEASES})


def rules_of_release(release: str) -> AutoscalerRules:
    """The rules of ``release`` (one of autoscaler_settings.RELEASES); ValueError for another."""
    try:
        return RULES_BY_RELEASE[release]
    except KeyError:
        raise ValueError(f"unknown cluster-autoscaler release {release!r}") from None
