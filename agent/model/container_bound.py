"""A pod's containers kept in bounded form: the first MAX_CONTAINERS of each list in full, the rest as sums.

The API server sets no bound on a pod's containers, only etcd's request
size does (issue 38, item 4; docs/requests.md); kept one record per
container (and one status and one explanation line each) a pod of 10,000
cost the agent megabytes, and every view of it more. What the request
arithmetic needs of the containers past the bound is only their totals, so
they are folded into one line per kind, with values that give the pod's
requests exactly whenever no in-place resize is in flight for them:

- app containers past the bound: one line, the per-resource **sum** (app
  containers are summed, in any order);
- init containers past the bound: one line, the KEP-753 **peak** of that tail
  (``aggregate`` over it), then one sidecar line, the **sum** of its sidecars.
  With S0 the sidecars before the tail, the formula then gives max(S0 + peak,
  S0 + sidecars) = what the containers one by one give;
- their statuses: folded the same way, each container contributing its status
  value or, lacking one, its spec (the fallbacks Kubernetes uses when no resize
  is Infeasible). During a resize of containers past the bound the folded
  line counts as one container: documented in docs/requests.md.

The first app container is always kept (neon's patch replaces its requests).
Folded names cannot be container names (those are DNS labels), so no status
meets a folded line by accident. The record says what was folded in its
problems, so no view shows a truncated pod without saying so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from agent.model.fields import Requests
from agent.model.go_amount import go_amount, go_text
from agent.model.pod import ContainerRequests, StatusRequests
from agent.model.pod_requests import Resources, aggregate, parse_requests
from agent.model.problems import Problem, at_most
from agent.model.quantity import QuantityError

__all__ = ["MAX_CONTAINERS", "BoundedContainers", "bound_containers", "fold_gpu"]

#: Containers of each list (app, init) kept one by one. Honest pods hold a handful (a NeonVM runner one, a busy
#: mesh-injected pod under ten); 32 keeps every one of them exact line by line and a record's containers under
#: ~10 KiB whatever a tenant writes.
MAX_CONTAINERS = 32
#: Problems kept of the folded containers' requests (an unreadable quantity each); the rest are counted.
_FOLDED_PROBLEMS = 5

class BoundedContainers(NamedTuple):
    """What ``PodRecord`` keeps of the containers, and what folding said (for the record's problems)."""

    containers: tuple[ContainerRequests, ...]
    init_containers: tuple[ContainerRequests, ...]
    statuses: tuple[StatusRequests, ...]
    problems: tuple[str, ...]


def _text(values: Resources) -> Requests:
    """A folded sum per resource as quantity text that keeps both its exact value and its Go form (go_text)."""
    return {resource: go_text(value) for resource, value in values.items()}


def _gpu_text(items: list[tuple[str, dict[str, int]]]) -> str:
    return go_text(aggregate(items).get("gpu", 0))


def _kind(c: ContainerRequests, init: bool) -> str:
    return ("sidecar" if c.restartable else "init") if init else "container"


def _fold(name: str, items: list[ContainerRequests], init: bool, restartable: bool,
          statuses: Mapping[str, StatusRequests], problems: list[Problem]) -> tuple[ContainerRequests,
                                                                                   StatusRequests | None]:
    """One line for ``items`` (aggregate over them as the pod's order gives) and its folded status, if any had one."""
    specs = [parse_requests(c.requests, c.name, problems, go_amount) for c in items]
    kinds = [_kind(c, init) for c in items]

    def total(values: Iterable[Mapping[str, int] | None]) -> Requests:
        return _text(aggregate(zip(kinds, values, strict=True)))

    line = ContainerRequests(name, total(specs), restartable)
    own = [statuses.get(c.name) for c in items]
    if all(s is None for s in own):
        return line, None
    # A status that repeats its spec (the kubelet's report for nearly every running container) reuses its parse.
    allocated = [spec if s is None or s.allocated is None or s.allocated == c.requests
                 else parse_requests(s.allocated, c.name, problems, go_amount)
                 for c, s, spec in zip(items, own, specs, strict=True)]
    actual = [mine if s is None or s.requests is None
              or s.requests == (c.requests if s.allocated is None else s.allocated)
              else parse_requests(s.requests, c.name, problems, go_amount)
              for c, s, mine in zip(items, own, allocated, strict=True)]

    def folded(values: list[Resources]) -> Requests:
        return line.requests if all(v is spec for v, spec in zip(values, specs, strict=True)) else total(values)

    has_resources = any(s is not None and s.resources for s in own)
    has_allocated = any(s is not None and s.allocated is not None for s in own)
    status = StatusRequests(name, folded(allocated) if has_allocated else None, has_resources,
                            folded(actual) if has_resources else None)
    return line, status


def bound_containers(containers: tuple[ContainerRequests, ...], init_containers: tuple[ContainerRequests, ...],
                     statuses: tuple[StatusRequests, ...]) -> BoundedContainers:
    """The pod's containers and statuses with at most MAX_CONTAINERS (+1 folded) app lines and MAX_CONTAINERS
    (+2 folded) init lines; unchanged (the same tuples) when both lists are within the bound."""
    if len(containers) <= MAX_CONTAINERS and len(init_containers) <= MAX_CONTAINERS:
        return BoundedContainers(containers, init_containers, statuses, ())
    by_name = {s.name: s for s in statuses}  # as the request arithmetic looks them up: the last of a name wins
    problems: list[Problem] = []
    folded_names: set[str] = set()
    folded_statuses: list[StatusRequests] = []
    said: list[str] = []

    def fold(name: str, items: list[ContainerRequests], init: bool, restartable: bool) -> ContainerRequests:
        line, status = _fold(name, items, init, restartable, by_name, problems)
        folded_names.update(c.name for c in items)
        if status is not None:
            folded_statuses.append(status)
        return line

    if len(containers) > MAX_CONTAINERS:
        tail = list(containers[MAX_CONTAINERS:])
        containers = (*containers[:MAX_CONTAINERS], fold(f"({len(tail):,} more containers: sum)", tail, False, False))
        said.append(f"{len(tail) + MAX_CONTAINERS:,} containers")
    if len(init_containers) > MAX_CONTAINERS:
        tail = list(init_containers[MAX_CONTAINERS:])
        regular = [c for c in tail if not c.restartable]
        sidecars = [c for c in tail if c.restartable]
        lines = []
        if regular:  # the tail's peak, sidecars before each init container included
            lines.append(fold(f"({len(tail):,} more init containers: peak)", tail, True, False))
        if sidecars:
            lines.append(fold(f"({len(sidecars):,} more sidecars: sum)", sidecars, True, True))
        init_containers = (*init_containers[:MAX_CONTAINERS], *lines)
        said.append(f"{len(tail) + MAX_CONTAINERS:,} init containers")
    kept = tuple(s for s in statuses if s.name not in folded_names)
    notes = (f"{' and '.join(said)}: past the first {MAX_CONTAINERS} of each list the rest are kept as sums, "
             "one line per kind (per-container detail dropped)", *at_most(problems, _FOLDED_PROBLEMS))
    return BoundedContainers(containers, init_containers, (*kept, *folded_statuses), notes)


def fold_gpu(entries: list[tuple[str, str, str, str]], count: int) -> tuple[tuple[str, str, str, str], ...]:
    """EvictionFacts.gpu entries (kind, container, resource, quantity) of the ``count`` containers past the bound of
    one list, folded per resource as bound_containers folds their cpu and memory: app containers summed, an init tail
    as its KEP-753 peak then its sidecars' sum. An unreadable quantity stays as it is, for the verdict to report."""
    out: list[tuple[str, str, str, str]] = []
    by_resource: dict[str, list[tuple[str, dict[str, int]]]] = {}
    for kind, name, resource, text in entries:
        try:
            value = go_amount(text)
        except QuantityError:
            out.append((kind, name, resource, text))
            continue
        by_resource.setdefault(resource, []).append((kind, {"gpu": value}))
    for resource, items in by_resource.items():
        if all(kind == "container" for kind, _ in items):
            out.append(("container", f"({count:,} more containers: sum)", resource, _gpu_text(items)))
            continue
        if any(kind == "init" for kind, _ in items):
            out.append(("init", f"({count:,} more init containers: peak)", resource, _gpu_text(items)))
        sidecars = [item for item in items if item[0] == "sidecar"]
        if sidecars:
            out.append(("sidecar", f"({len(sidecars):,} more sidecars: sum)", resource,
                        _gpu_text(sidecars)))
    return tuple(out)

