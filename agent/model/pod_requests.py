"""A pod's resource requests as Kubernetes 1.36 computes them.

This follows k8s.io/component-helpers/resource.PodRequests with the options
kube-scheduler (and so the cluster-autoscaler's simulation) uses:
``UseStatusResources`` on (in-place resize is GA since 1.35), pod-level
resources honoured, overhead included. Pure functions on plain data.

Kubernetes 1.37 changes the resize rule to the max of whole-pod sums; this
module implements the 1.36 per-container rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.model.fields import Requests
from agent.model.pod import RESOURCES, PodRecord
from agent.model.problems import Problem
from agent.model.quantity import QuantityError, parse_quantity

__all__ = ["Resources", "Contribution", "RequestsResult", "pod_requests", "parse_requests"]

# Resource name -> nano-units (see agent.model.quantity). A resource nobody
# requests is absent, not zero, exactly as in Kubernetes' ResourceList.
Resources = dict[str, int]


@dataclass(frozen=True, slots=True)
class Contribution:
    """One line of the explanation: what a container (or pod field) asks for."""

    name: str
    # "container", "init", "sidecar", "pod-level" or "overhead".
    kind: str
    cpu: int | None
    memory: int | None
    note: str = ""


@dataclass(frozen=True, slots=True)
class RequestsResult:
    cpu: int
    memory: int
    contributions: tuple[Contribution, ...]
    problems: tuple[Problem, ...]


def parse_requests(requests: Requests, where: str, problems: list[Problem]) -> Resources:
    """Parse a request map, dropping (and reporting) values Kubernetes would reject."""
    out: Resources = {}
    for resource in RESOURCES:
        text = requests.get(resource)
        if text is None:
            continue
        try:
            value = parse_quantity(text)
        except QuantityError as exc:
            problems.append(Problem("requests", exc.reason, f"{where}: {resource}: {exc}"))
            continue
        if value < 0:
            problems.append(Problem("requests", "negative_quantity", f"{where}: {resource}: negative quantity {text!r}"))
            continue
        out[resource] = value
    return out


def _add(into: Resources, other: Mapping[str, int]) -> None:
    for resource, value in other.items():
        into[resource] = into.get(resource, 0) + value


def _max(into: Resources, other: Mapping[str, int]) -> None:
    for resource, value in other.items():
        if resource not in into or value > into[resource]:
            into[resource] = value


def _maximum(*lists: Mapping[str, int]) -> Resources:
    out: Resources = {}
    for item in lists:
        _max(out, item)
    return out


def pod_requests(pod: PodRecord, first_container_override: Resources | None = None,
                 use_status: bool = True) -> RequestsResult:
    """Effective cpu and memory requests of ``pod``, in nano-units.

    ``first_container_override`` replaces the first app container's requests,
    which is how neon's patched cluster-autoscaler applies a VM's usage.
    ``use_status=False`` is the spec-only sum ``kubectl describe node`` shows
    as "Allocated resources". A resource nobody requests is 0.
    """
    problems: list[Problem] = []
    contributions: list[Contribution] = []
    statuses = {s.name: s for s in pod.statuses}

    def effective(name: str, spec: Resources) -> tuple[Resources, str]:
        status = statuses.get(name) if use_status else None
        if status is None or status.requests is None:
            return spec, ""
        allocated = parse_requests(status.allocated, f"{name} status allocatedResources", problems)
        reported = parse_requests(status.requests, f"{name} status resources.requests", problems)
        if pod.resize_infeasible:
            result = _maximum(reported, allocated)
            return result, "resize infeasible: status only" if result != spec else ""
        result = _maximum(spec, reported, allocated)
        return result, "resize: max of spec and status" if result != spec else ""

    app: Resources = {}
    for i, c in enumerate(pod.containers):
        if i == 0 and first_container_override is not None:
            spec = dict(first_container_override)
            note = "replaced by VM usage"
        else:
            spec = parse_requests(c.requests, c.name, problems)
            note = ""
        reqs, resize_note = effective(c.name, spec)
        _add(app, reqs)
        contributions.append(Contribution(c.name, "container", reqs.get("cpu"), reqs.get("memory"), note or resize_note))

    sidecars: Resources = {}
    init_peak: Resources = {}
    for c in pod.init_containers:
        spec = parse_requests(c.requests, c.name, problems)
        if c.restartable:
            reqs, note = effective(c.name, spec)
            _add(app, reqs)
            _add(sidecars, reqs)
            peak = dict(sidecars)
            contributions.append(Contribution(c.name, "sidecar", reqs.get("cpu"), reqs.get("memory"), note))
        else:
            peak = dict(spec)
            _add(peak, sidecars)
            contributions.append(Contribution(c.name, "init", spec.get("cpu"), spec.get("memory"),
                                              "peak with earlier sidecars" if sidecars else ""))
        _max(init_peak, peak)

    total = dict(app)
    _max(total, init_peak)

    if pod.pod_requests:
        level = parse_requests(pod.pod_requests, "spec.resources.requests", problems)
        if level:
            total.update(level)
            contributions.append(Contribution("spec.resources", "pod-level", level.get("cpu"), level.get("memory"),
                                              "replaces the container aggregate"))
    if pod.overhead:
        overhead = parse_requests(pod.overhead, "spec.overhead", problems)
        _add(total, overhead)
        contributions.append(Contribution("spec.overhead", "overhead", overhead.get("cpu"), overhead.get("memory")))

    return RequestsResult(
        cpu=total.get("cpu", 0),
        memory=total.get("memory", 0),
        contributions=tuple(contributions),
        problems=tuple(problems),
    )
