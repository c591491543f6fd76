"""The number the cluster-autoscaler decides with, per pod.

``evaluate`` is the one place that combines a pod's requests with a NeonVM's
usage annotation. It is pure: the handler, ``explain`` and the benchmarks all
call it, so what is exported and what is explained cannot disagree. Which
release's request arithmetic applies is the ``rules`` argument; callers pass
it through without looking inside.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final, Literal, NamedTuple

import msgspec

from agent.model.fields import Oversized
from agent.model.neon import AnnotationError, VmResources, parse_overcommit, parse_vm_usage
from agent.model.pod import NO_EVICTION_FACTS, TERMINAL_PHASES, EvictionFacts, PodRecord
from agent.model.pod_requests import Contribution, pod_requests
from agent.model.problems import Problem
from agent.model.rules import Rules

__all__ = ["PodValue", "VmUsage", "evaluate", "reevaluate", "retained", "SOURCE_VM_USAGE", "SOURCE_POD_REQUESTS"]

SOURCE_VM_USAGE: Final = "vm_usage"
SOURCE_POD_REQUESTS: Final = "pod_requests"
Source = Literal["vm_usage", "pod_requests"]


class VmUsage(msgspec.Struct, frozen=True):
    """The VM's raw usage annotation (before overcommit), for vm_*_usage."""

    name: str
    # "source" or "target" during a live migration, else "".
    migration_role: str
    # Nano-units of cores and bytes (see agent.model.quantity).
    cpu: int
    memory: int


class PodValue(NamedTuple):
    """A pod's value, built once per pod change (a named tuple: a third of a frozen dataclass's cost)."""

    uid: str
    namespace: str
    name: str
    phase: str
    source: Source
    # Nano-units of cores and bytes (see agent.model.quantity).
    cpu: int
    memory: int
    vm: VmUsage | None
    contributions: tuple[Contribution, ...]
    problems: tuple[Problem, ...]
    # Spec-only requests, as kube-scheduler's reservation is shown by
    # `kubectl describe node` ("Allocated resources"); nano-units.
    spec_cpu: int = 0
    spec_memory: int = 0
    # The release whose arithmetic gave cpu and memory.
    rules: Rules | None = None
    # The pod this value was computed from: a newer version with the same
    # value_inputs reuses the value, and a change of rules re-evaluates it.
    record: PodRecord | None = None

    @property
    def identity(self) -> dict[str, str]:
        """The pod under OTel's attribute names: its series' attributes and its log lines' fields alike."""
        return {"k8s.namespace.name": self.namespace, "k8s.pod.name": self.name, "k8s.pod.uid": self.uid}

    @property
    def eviction(self) -> EvictionFacts:
        """What the drain rules read of the pod (a bare pod's facts for a value without its record)."""
        return self.record.eviction if self.record is not None else NO_EVICTION_FACTS

    @property
    def reported(self) -> bool:
        """False for Succeeded/Failed pods: neither kube-scheduler nor the cluster-autoscaler counts them."""
        return self.phase not in TERMINAL_PHASES

    def with_status(self, pod: PodRecord) -> PodValue:
        """This value for a newer version of the same pod whose inputs are unchanged."""
        if pod.phase == self.phase and (self.record is None or self.record.eviction == pod.eviction):
            return self  # the record kept differs only in fields nothing reads (the verdict reads the eviction facts)
        return PodValue(self.uid, self.namespace, self.name, pod.phase, self.source, self.cpu,
                        self.memory, self.vm, self.contributions, self.problems, self.spec_cpu, self.spec_memory,
                        self.rules, pod)


def _vm_usage(pod: PodRecord, problems: list[Problem]) -> tuple[VmResources | None, VmResources | None]:
    """Return (raw usage, usage the autoscaler applies) from the annotations."""
    if pod.usage_annotation is None:
        return None, None
    usage, applied, found = _annotations(pod.usage_annotation, pod.overcommit_annotation)
    problems.extend(found)
    return usage, applied


@lru_cache(maxsize=256)
def _annotations(usage_text: str | Oversized,
                 overcommit_text: str | Oversized | None) -> tuple[VmResources | None, VmResources | None,
                                                                  tuple[Problem, ...]]:
    """(raw usage, applied usage, problems) of a VM's two annotations. Cached: they come again with every event of
    the VM's pod (a JSON parse each), and a node's VMs share few sizes."""
    try:
        usage = parse_vm_usage(usage_text)
    except AnnotationError as exc:
        return None, None, (Problem("usage", exc.reason, f"vm.neon.tech/usage ignored: {exc}"),)
    if overcommit_text is None:
        return usage, usage, ()
    try:
        factors = parse_overcommit(overcommit_text)
    except AnnotationError as exc:
        return usage, None, (Problem("overcommit", exc.reason,
                                     f"vm.neon.tech/overcommit invalid, so vm.neon.tech/usage is not applied: {exc}"),)
    return usage, usage.divided_by(factors), ()


def reevaluate(pod: PodRecord, previous: PodValue | None, rules: Rules) -> PodValue:
    """``evaluate(pod, rules)``, reusing ``previous`` when only the pod's status moved."""
    if (previous is not None and previous.rules is rules and previous.record is not None
            and previous.uid == pod.uid and previous.record.value_inputs == pod.value_inputs):
        return previous.with_status(pod)
    return evaluate(pod, rules)


def retained(value: PodValue) -> PodValue:
    """What the node state keeps of a pod: all of it while it counts; of a Succeeded/Failed pod only its reporting.

    A terminal pod counts in no sum, no utilization and no verdict, yet stays bound to the node until deleted (a
    Job's completed pods, hundreds per node); it is shown by phase, value and problems (/debug/pods, the phase
    counts), so its record (containers, statuses, labels, eviction facts) and contributions are dropped.
    """
    if value.reported or (value.record is None and not value.contributions):
        return value
    return value._replace(contributions=(), record=None)


def evaluate(pod: PodRecord, rules: Rules, *, use_status: bool = True, pod_level: bool = True,
             pod_status: bool = True) -> PodValue:
    """The pod's value under ``rules``; ``use_status``/``pod_level``/``pod_status`` False for a consumer whose helper
    reads none of them (the cluster-autoscaler: see :mod:`agent.model.autoscaler_requests`)."""
    problems = [Problem("pod", "malformed_pod", p) for p in pod.problems]
    raw_usage, applied = _vm_usage(pod, problems)
    override = None
    if applied is not None:
        if pod.containers:
            override = {"cpu": applied.cpu, "memory": applied.memory}
        else:
            problems.append(Problem("usage", "wrong_shape", "pod has no containers to apply vm.neon.tech/usage to"))
    result = pod_requests(pod, rules, override, use_status, pod_level, pod_status)
    problems.extend(result.problems)
    vm = None
    if raw_usage is not None:
        vm = VmUsage(pod.vm_name or pod.name, pod.migration_role, raw_usage.cpu, raw_usage.memory)
    return PodValue(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        phase=pod.phase,
        source=SOURCE_VM_USAGE if override is not None else SOURCE_POD_REQUESTS,
        cpu=result.cpu,
        memory=result.memory,
        vm=vm,
        contributions=result.contributions,
        problems=tuple(problems),
        spec_cpu=result.spec_cpu,
        spec_memory=result.spec_memory,
        rules=rules,
        record=pod,
    )
