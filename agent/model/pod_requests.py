"""A pod's resource requests as Kubernetes computes them, release by release.

This follows k8s.io/component-helpers/resource.PodRequests with the options
kube-scheduler's fit accounting uses (and so the cluster-autoscaler's
simulation): status resources on (InPlacePodVerticalScaling, GA since 1.35),
in-place pod-level resize on (InPlacePodLevelResourcesVerticalScaling, beta
and on by default since 1.36), pod-level resources honoured
(PodLevelResources), overhead included. Pure functions on plain data; only
cpu and memory.

Both releases sum app containers and apply KEP-753 to init containers (a
sidecar adds to the app sum and to a running sidecar sum; a regular init
container's peak is its own request plus the sidecars before it; the larger
of the two wins). They differ while an in-place resize is in progress:

* **1.36** (v0.36): per app container and sidecar whose status has a
  ``resources`` object, the max of spec, ``allocatedResources`` and status
  ``resources.requests`` (spec dropped when ``PodResizePending`` is
  Infeasible); regular init containers count their spec. Then the formula.
* **1.37** (v0.37): three whole-pod totals, each with the formula: spec;
  allocated (``allocatedResources``, else spec); actuated (status requests,
  else ``allocatedResources``, else spec). Every container's status counts,
  regular init containers included, and a status without ``resources`` still
  contributes its ``allocatedResources``. When Infeasible, spec is no
  fallback (a container without status contributes nothing) and the spec
  total is left out. When the pod reports its own totals
  (``status.allocatedResources`` and ``status.resources.requests``) they are
  the allocated and actuated totals. The result is per resource the max.

Pod-level ``spec.resources.requests`` then replaces the aggregate, and
``spec.overhead`` is added: see :func:`_pod_level_1_36` and
:func:`_pod_level_1_37`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from agent.model.fields import NO_REQUESTS, Requests
from agent.model.go_amount import compared
from agent.model.pod import RESOURCES, PodRecord, StatusRequests
from agent.model.problems import Problem
from agent.model.quantity import QuantityError, parse_quantity
from agent.model.rules import RULES_1_36, RULES_1_37, Rules

__all__ = ["Resources", "Contribution", "RequestsResult", "Parse", "pod_requests", "parse_requests",
           "statuses_repeat_spec", "aggregate"]

# Resource name -> nano-units (see agent.model.quantity). A resource nobody
# requests is absent, not zero, exactly as in Kubernetes' ResourceList.
Resources = dict[str, int]


# Named tuples, as PodRecord: several are built per watch event that changes a request,
# and a frozen dataclass costs three times as much to build.
class Contribution(NamedTuple):
    """One line of the explanation: what a container (or pod field) asks for."""

    name: str
    # "container", "init", "sidecar", "status" (1.37 resize totals), "pod-level" or "overhead".
    kind: str
    cpu: int | None
    memory: int | None
    note: str = ""


class RequestsResult(NamedTuple):
    cpu: int
    memory: int
    contributions: tuple[Contribution, ...]
    problems: tuple[Problem, ...]
    # The spec-only sum: kube-scheduler's reservation as `kubectl describe node` shows it.
    spec_cpu: int = 0
    spec_memory: int = 0


# How a quantity's text becomes its value: parse_quantity (nano-units), or go_amount where the Go form counts too.
Parse = Callable[[str], int]


def parse_requests(requests: Requests, where: str, problems: list[Problem], parse: Parse = parse_quantity) -> Resources:
    """Parse a request map, dropping (and reporting) values Kubernetes would reject."""
    out: Resources = {}
    for resource in RESOURCES:
        text = requests.get(resource)
        if text is None:
            continue
        try:
            value = parse(text)
        except QuantityError as exc:
            problems.append(Problem("requests", exc.reason, f"{where}: {resource}: {exc}"))
            continue
        if value < 0:
            problems.append(Problem("requests", "negative_quantity",
                                    f"{where}: {resource}: negative quantity {text!r}"))
            continue
        out[resource] = value
    return out


def _add(into: Resources, other: Mapping[str, int]) -> None:
    for resource, value in other.items():
        into[resource] = into.get(resource, 0) + value


def _max(into: Resources, other: Mapping[str, int]) -> None:
    """``maxResourceList(into, other)``: a larger value replaces the kept one, in the form ``Quantity.Cmp`` left it."""
    for resource, value in other.items():
        if resource not in into:
            into[resource] = value
        elif value > into[resource]:
            into[resource] = compared(value, into[resource])


def _maximum(*lists: Mapping[str, int] | None) -> Resources:
    out: Resources = {}
    for item in lists:
        if item:
            _max(out, item)
    return out


def _contribution(name: str, kind: str, resources: Mapping[str, int] | None, note: str = "") -> Contribution:
    resources = resources or {}
    return Contribution(name, kind, resources.get("cpu"), resources.get("memory"), note)


# -- the pieces both releases share ------------------------------------------------------

class _Container(NamedTuple):
    name: str
    kind: str  # "container", "init" or "sidecar"
    spec: Resources
    note: str  # "replaced by VM usage", else ""


def _containers(pod: PodRecord, overridden: bool, problems: list[Problem], parse: Parse) -> list[_Container]:
    """App containers then init containers, in order, with their spec requests parsed.

    The first container's parse problems are dropped when it is ``overridden``:
    its requests count only for the spec-only sum, and the VM's usage replaces them.
    """
    out = []
    for i, c in enumerate(pod.containers):
        requests = parse_requests(c.requests, c.name, [] if i == 0 and overridden else problems, parse)
        out.append(_Container(c.name, "container", requests, ""))
    for c in pod.init_containers:
        kind = "sidecar" if c.restartable else "init"
        out.append(_Container(c.name, kind, parse_requests(c.requests, c.name, problems, parse), ""))
    return out


def _aggregate(containers: Iterable[tuple[str, Mapping[str, int] | None]]) -> Resources:
    """KEP-753 over (kind, requests) in pod order: app and sidecars summed, max with each init container's peak."""
    total: Resources = {}
    sidecars: Resources = {}
    init_peak: Resources = {}
    for kind, requests in containers:
        requests = requests or {}
        if kind == "container":
            _add(total, requests)
        elif kind == "sidecar":
            _add(total, requests)
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            peak = dict(requests)
            _add(peak, sidecars)
            _max(init_peak, peak)
    _max(total, init_peak)
    return total


#: The KEP-753 formula over (kind, requests) in pod order, for any resource (the autoscaler's GPU sums use it too).
aggregate = _aggregate


class _StatusValues(NamedTuple):
    allocated: Resources | None
    actual: Resources | None


def _status_values(status: StatusRequests, where: str, problems: list[Problem], parse: Parse) -> _StatusValues:
    allocated = (None if status.allocated is None
                 else parse_requests(status.allocated, f"{where} allocatedResources", problems, parse))
    actual = None if status.requests is None else parse_requests(status.requests, f"{where} resources.requests",
                                                                 problems, parse)
    return _StatusValues(allocated, actual)


def _notes(containers: list[_Container]) -> list[str]:
    """Each container's own note: the VM usage override, or an init container's peak that includes sidecars."""
    notes, sidecars = [], False
    for c in containers:
        sidecars = sidecars or c.kind == "sidecar"
        notes.append(c.note or ("peak with earlier sidecars" if c.kind == "init" and sidecars else ""))
    return notes


def _spec_only(containers: list[_Container]) -> tuple[Resources, list[Contribution]]:
    # The lines as _contribution makes them, built directly: this runs for every event that changes a request.
    contributions = [Contribution(c.name, c.kind, c.spec.get("cpu"), c.spec.get("memory"), note)
                     for c, note in zip(containers, _notes(containers), strict=True)]
    return _aggregate((c.kind, c.spec) for c in containers), contributions


# -- 1.36 --------------------------------------------------------------------------------

def _containers_1_36(pod: PodRecord, containers: list[_Container], problems: list[Problem],
                     parse: Parse) -> tuple[Resources, list[Contribution], Resources | None]:
    """Per container, the max of spec and status; then the formula (and no spec-only total: None)."""
    statuses = {s.name: s for s in pod.statuses}
    effective: list[tuple[str, Resources]] = []
    contributions = []
    for c, note in zip(containers, _notes(containers), strict=True):
        status = statuses.get(c.name) if c.kind != "init" else None
        requests = c.spec
        if status is not None and status.resources:
            values = _status_values(status, f"{c.name} status", problems, parse)
            if pod.resize_infeasible:
                requests = _maximum(values.actual, values.allocated)
            else:
                requests = _maximum(c.spec, values.actual, values.allocated)
            if requests != c.spec and not note:
                note = "resize infeasible: status only" if pod.resize_infeasible else "resize: max of spec and status"
        effective.append((c.kind, requests))
        contributions.append(_contribution(c.name, c.kind, requests, note))
    return _aggregate(effective), contributions, None


def _pod_level(pod: PodRecord, status: StatusRequests | None, problems: list[Problem],
               parse: Parse) -> tuple[Resources, Resources | None]:
    """spec.resources.requests, and, when the pod status has a ``resources`` object, the max of spec (left out
    when Infeasible), pod status requests and pod status allocated; else None."""
    level = parse_requests(pod.pod_requests or NO_REQUESTS, "spec.resources.requests", problems, parse)
    if status is None or not status.resources:
        return level, None
    values = _status_values(status, "pod status", problems, parse)
    return level, _maximum(None if pod.resize_infeasible else level, values.actual, values.allocated)


def _apply_pod_level(total: Resources, level: Resources, applied: Resources) -> Contribution | None:
    total.update(applied)
    note = "replaces the container aggregate" + ("; resize: max of spec and pod status" if applied != level else "")
    return _contribution("spec.resources", "pod-level", applied, note) if applied else None


def _pod_level_1_36(pod: PodRecord, status: StatusRequests | None, total: Resources,
                    problems: list[Problem], parse: Parse) -> Contribution | None:
    """The resources named in spec.resources.requests replace the aggregate, each with its resized value;
    a resource the pod status then lacks becomes 0, as v0.36's map lookup gives."""
    level, effective = _pod_level(pod, status, problems, parse)
    if effective is not None:
        effective = {resource: effective.get(resource, 0) for resource in level}
    return _apply_pod_level(total, level, level if effective is None else effective)


# -- 1.37 --------------------------------------------------------------------------------

def _containers_1_37(pod: PodRecord, containers: list[_Container], problems: list[Problem],
                     parse: Parse) -> tuple[Resources, list[Contribution], Resources | None]:
    """The per-resource max of the spec, allocated and actuated totals, and the spec total when it is not the
    result itself (None then)."""
    spec_total, contributions = _spec_only(containers)
    infeasible = pod.resize_infeasible
    status = pod.pod_status
    if status is not None and status.allocated is not None and status.resources and status.requests is not None:
        values = _status_values(status, "pod status", problems, parse)
        allocated_total, actuated_total = values.allocated or {}, values.actual or {}
        source = "pod status"
    elif not pod.statuses and not infeasible:
        return spec_total, contributions, None  # every container falls back to spec: both totals are the spec total
    else:
        statuses = {s.name: s for s in pod.statuses}
        allocated, actuated = [], []
        fallback: Callable[[_Container], Resources | None] = (lambda c: None) if infeasible else (lambda c: c.spec)
        for c in containers:
            s = statuses.get(c.name)
            values = (_status_values(s, f"{c.name} status", problems, parse) if s is not None
                      else _StatusValues(None, None))
            own_allocated = values.allocated if values.allocated is not None else fallback(c)
            allocated.append((c.kind, own_allocated))
            actuated.append((c.kind, values.actual if values.actual is not None else own_allocated))
        allocated_total, actuated_total = _aggregate(allocated), _aggregate(actuated)
        source = "container statuses"
    total = (_maximum(actuated_total, allocated_total) if infeasible
             else _maximum(spec_total, actuated_total, allocated_total))
    if infeasible or allocated_total != spec_total or actuated_total != spec_total:
        how = ("resize infeasible: spec left out" if infeasible
               else "resize: each resource the largest of the spec, allocated and actual totals")
        contributions.append(_contribution(f"allocated total ({source})", "status", allocated_total, how))
        contributions.append(_contribution(f"actual total ({source})", "status", actuated_total, how))
    return total, contributions, spec_total


def _pod_level_1_37(pod: PodRecord, status: StatusRequests | None, total: Resources,
                    problems: list[Problem], parse: Parse) -> Contribution | None:
    """Every resource of the resized value replaces the aggregate; when Infeasible spec is left out, so a
    resource only spec names keeps the container aggregate."""
    level, effective = _pod_level(pod, status, problems, parse)
    return _apply_pod_level(total, level, level if effective is None else effective)


def statuses_repeat_spec(pod: PodRecord) -> bool:
    """No resize in flight: every container status says exactly what its spec says, and the pod has no totals of its
    own.

    That is the kubelet's report for nearly every running pod; then every
    release's status-aware requests are the spec-only ones (an Infeasible
    resize drops the spec, so never then). Compared as written, so "1" and
    "1000m" count as a difference: the full arithmetic decides those.
    """
    if pod.pod_status is not None or pod.resize_infeasible:
        return False
    if not pod.statuses:
        return True
    statuses = {s.name: s for s in pod.statuses}  # the lookup both releases do
    for c in (*pod.containers, *pod.init_containers):
        status = statuses.get(c.name)
        if status is not None and ((status.allocated is not None and status.allocated != c.requests)
                                   or (status.requests is not None and status.requests != c.requests)):
            return False
    return True


_Aggregate = Callable[[PodRecord, list[_Container], list[Problem], Parse],
                     tuple[Resources, list[Contribution], Resources | None]]
_PodLevel = Callable[[PodRecord, StatusRequests | None, Resources, list[Problem], Parse], Contribution | None]
_BY_RULES: dict[Rules, tuple[_Aggregate, _PodLevel]] = {
    RULES_1_36: (_containers_1_36, _pod_level_1_36),
    RULES_1_37: (_containers_1_37, _pod_level_1_37),
}


def pod_requests(pod: PodRecord, rules: Rules, first_container_override: Resources | None = None,
                 use_status: bool = True, pod_level: bool = True, pod_status: bool = True,
                 parse: Parse = parse_quantity) -> RequestsResult:
    """Effective cpu and memory requests of ``pod`` under ``rules``, in nano-units, and its spec-only sum.

    ``first_container_override`` replaces the first app container's requests,
    which is how neon's patched cluster-autoscaler applies a VM's usage.
    The spec-only sum (``spec_cpu``, ``spec_memory``) is what ``kubectl
    describe node`` shows as "Allocated resources": the same in every
    release, never overridden. ``use_status=False`` makes it the result too.
    ``pod_status=False`` leaves the pod's own in-place resize status out (the helper's
    InPlacePodLevelResourcesVerticalScalingEnabled option off): the containers' statuses still count.
    A resource nobody requests is 0. ``parse`` reads each quantity (:data:`Parse`); the override's values are
    used as given.
    """
    if not pod_status and pod.pod_status is not None:
        pod = pod._replace(pod_status=None)
    aggregate, level_of = _BY_RULES[rules]
    problems: list[Problem] = []
    overridden = first_container_override is not None and bool(pod.containers)
    spec_containers = _containers(pod, overridden, problems, parse)
    containers = spec_containers
    if first_container_override is not None and overridden:
        first = spec_containers[0]
        containers = [_Container(first.name, "container", dict(first_container_override), "replaced by VM usage"),
                      *spec_containers[1:]]
    read_status = use_status and (overridden or bool(problems) or not statuses_repeat_spec(pod))
    spec = None
    if read_status:
        total, contributions, spec = aggregate(pod, containers, problems, parse)
    else:
        # Spec only, or statuses that repeat it: the same totals and lines, without reading them all again
        # (with a problem in the spec, the statuses repeating it must report it too, so they are read then).
        total, contributions = _spec_only(containers)
    # The spec-only sum is the total itself unless statuses or the override changed it; else the aggregate of
    # the requests already parsed: the one the rules computed on the way (1.37 with statuses, not overridden), or
    # one more (it was a second whole pass, a third of an event's cost).
    if overridden or (read_status and spec is None):
        spec = _aggregate((c.kind, c.spec) for c in spec_containers)
    if pod.pod_requests is not None and pod_level:
        line = level_of(pod, pod.pod_status if use_status else None, total, problems, parse)
        if line is not None:
            contributions.append(line)
        if spec is not None:
            level_of(pod, None, spec, [], parse)  # the same spec.resources, whose problems the line above reported
    if pod.overhead:
        overhead = parse_requests(pod.overhead, "spec.overhead", problems, parse)
        _add(total, overhead)
        contributions.append(_contribution("spec.overhead", "overhead", overhead))
        if spec is not None:
            _add(spec, overhead)
    if spec is None:
        spec = total
    return RequestsResult(total.get("cpu", 0), total.get("memory", 0), tuple(contributions), tuple(problems),
                          spec.get("cpu", 0), spec.get("memory", 0))
