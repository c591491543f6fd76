"""Effective requests under each supported release's rules.

Three kinds of cases:

* the test tables of k8s.io/component-helpers ``resource/helpers_test.go``
  at v0.36.3, v0.37.2 and v0.38.0-beta.0, ported case by case (the requests half; cpu and
  memory only). Cases for options kube-scheduler never sets
  (ExcludeOverhead, SkipPodLevelResources, NonMissingContainerRequests,
  DRA claims) are left out; a case whose options say
  ``UseStatusResources: false`` runs the spec-only sum. v0.37.2's
  TestPodResourceRequests fills the pod-level status from the container
  statuses but runs with in-place pod-level resize off, which is the same
  as a pod without pod-level status, so the ports carry none;
* pods computed by hand on which the two releases disagree, each checked
  under both;
* the documentation's and KEP-753's examples, which hold under both;
* upstream defects users meet (kubernetes/kubernetes#141814, #139627),
  computed by hand from each release's helpers.go.

v0.38.0-beta.0's requests tables are v0.37.2's plus DRA cases (an alpha
option the scheduler leaves off) and two limit cases whose expected requests
are empty; its helpers.go differs from v0.37.2's only in DRA claim
accounting and AggregateContainerLimits. So 1.38 maps to the 1.37 rules, and
the whole table runs under whatever ``rules_for`` picks for a 1.38 server.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.decode.reader import POD
from agent.model.pod_requests import pod_requests
from agent.model.quantity import NANO, parse_quantity
from agent.model.rules import RULES_1_36, RULES_1_37, SUPPORTED, parse_version, rules_for
from testkit.factory import GI, MI, container, pod

BOTH = pytest.mark.parametrize("rules", SUPPORTED, ids=str)


def requests(p: dict[str, Any], rules, use_status: bool = True) -> tuple[Fraction, Fraction]:
    """(cores, bytes), exactly (the agent counts nano-units)."""
    result = pod_requests(POD.record(p), rules, use_status=use_status)
    return Fraction(result.cpu, NANO), Fraction(result.memory, NANO)


def q(text: str) -> Fraction:
    return Fraction(parse_quantity(text), NANO)


def c(name: str, cpu: str | None = None, memory: str | None = None, sidecar: bool = False) -> dict[str, Any]:
    return container(name, cpu, memory, restart_policy="Always" if sidecar else None)


def status(name: str, allocated: dict[str, str] | None = None, actual: dict[str, str] | None = None,
           resources: bool | None = None) -> dict[str, Any]:
    """A container status; ``resources`` present whenever ``actual`` is (or when forced)."""
    s: dict[str, Any] = {"name": name, "image": f"example/{name}:1", "ready": True, "restartCount": 0}
    if allocated is not None:
        s["allocatedResources"] = allocated
    if actual is not None or resources:
        s["resources"] = {"requests": actual} if actual is not None else {}
    return s


INFEASIBLE = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]


def limits_only(name: str, limits: dict[str, str]) -> dict[str, Any]:
    """A container with limits and no requests, as the helper sees it (no API server defaulting)."""
    return {"name": name, "image": f"example/{name}:1", "resources": {"limits": limits}}


def make(containers=(), init=(), statuses=(), init_statuses=(), overhead=None, pod_level=None, infeasible=False,
         pod_allocated=None, pod_actual=None) -> dict[str, Any]:
    p = pod("case", containers=list(containers), init_containers=list(init), overhead=overhead, pod_requests=pod_level,
            container_statuses=list(statuses), conditions=INFEASIBLE if infeasible else None)
    if init_statuses:
        p["status"]["initContainerStatuses"] = list(init_statuses)
    if pod_allocated is not None:
        p["status"]["allocatedResources"] = pod_allocated
    if pod_actual is not None:
        p["status"]["resources"] = {"requests": pod_actual}
    return p


def case(name, p, cpu="0", memory="0", use_status=True):
    """An upstream table row: the pod, its expected cpu and memory (as quantities), and UseStatusResources."""
    return pytest.param(p, q(cpu), q(memory), use_status, id=name)


UPSTREAM = [
    # TestPodRequestsAndLimits (v0.36.3 and v0.37.2): one container and one init container with the same requests.
    *(case(name, make([c("foo", cpu, mem)], [c("init-foo", cpu, mem)], overhead=overhead), want_cpu, want_mem)
      for name, cpu, mem, overhead, want_cpu, want_mem in [
          ("just-limit-no-overhead", None, None, None, "0", "0"),
          ("just-overhead", None, None, {"cpu": "5", "memory": "5"}, "5", "5"),
          ("req-and-overhead", "1", "10", {"cpu": "5", "memory": "5"}, "6", "15"),
          ("all-req-lim-and-overhead", "1", "10", {"cpu": "5", "memory": "5"}, "6", "15"),
          ("req-some-lim-and-overhead", "1", "10", {"cpu": "5", "memory": "5"}, "6", "15"),
      ]),
    # TestPodResourceRequests
    case("nil options, larger init container", make([c("a", "1")], [c("i", "4")]), "4", use_status=False),
    case("nil options, larger containers", make([c("a", "2"), c("b", "3")], [c("i", "2")]), "5", use_status=False),
    case("pod overhead included", make([c("a", "2"), c("b", "3")], [c("i", "2")], overhead={"cpu": "1", "memory": "1Gi"}),
         "6", "1Gi", use_status=False),
    case("resized, infeasible", make([c("container-1", "4")], statuses=[status("container-1", actual={"cpu": "2"})],
                                     infeasible=True), "2"),
    case("resized, infeasible & in-progress",
         make([c("container-1", "6")], statuses=[status("container-1", {"cpu": "4"}, {"cpu": "2"})], infeasible=True), "4"),
    case("resized, no resize status", make([c("container-1", "4")], statuses=[status("container-1", actual={"cpu": "2"})]),
         "4"),
    case("resized: per-resource 3-way maximum",
         make([c("container-1", "30m", "20M")],
              statuses=[status("container-1", {"cpu": "20m", "memory": "10M"}, {"cpu": "10m", "memory": "30M"})]),
         "30m", "30M"),
    case("resized, infeasible, but don't use status",
         make([c("container-1", "4")], statuses=[status("container-1", actual={"cpu": "2"})], infeasible=True),
         "4", use_status=False),
    case("resized, restartable init container, infeasible",
         make(init=[c("restartable-init-1", "4", sidecar=True)],
              init_statuses=[status("restartable-init-1", actual={"cpu": "2"})], infeasible=True), "2"),
    case("resized, restartable init container, no resize status",
         make(init=[c("restartable-init-1", "4", sidecar=True)],
              init_statuses=[status("restartable-init-1", actual={"cpu": "2"})]), "4"),
    case("resized, restartable init container, infeasible, but don't use status",
         make(init=[c("restartable-init-1", "4", sidecar=True)],
              init_statuses=[status("restartable-init-1", actual={"cpu": "2"})], infeasible=True), "4", use_status=False),
    case("restartable init container", make([c("container-1", "1")], [c("restartable-init-1", "1", sidecar=True)]), "2",
         use_status=False),
    case("multiple restartable init containers",
         make([c("container-1", "1")], [c("init-1", "5"), c("restartable-init-1", "1", sidecar=True),
                                        c("restartable-init-2", "2", sidecar=True), c("restartable-init-3", "3", sidecar=True)]),
         "7", use_status=False),
    case("multiple restartable and regular init containers",
         make([c("container-1", "1")], [c("init-1", "5"), c("restartable-init-1", "1", sidecar=True),
                                        c("restartable-init-2", "2", sidecar=True), c("init-2", "5"),
                                        c("restartable-init-3", "3", sidecar=True)]),
         "8", use_status=False),
    case("restartable-init, init and regular",
         make([c("container-1", "100")], [c("restartable-init-1", "10", sidecar=True), c("init-1", "200")]), "210",
         use_status=False),
    # (new in v0.37.2; v0.36.3 gives the same, since these statuses carry no resources object)
    case("aggregate request resolves max of sums instead of sum of maxes",
         make([c("c1", "1"), c("c2", "2")], statuses=[status("c1", {"cpu": "2"}), status("c2", {"cpu": "1"})]), "3"),
    # TestPodLevelResourceRequests (identical in both): SkipPodLevelResources false, as the scheduler runs.
    case("nil", make(), use_status=False),
    case("pod level memory resource", make(pod_level={"memory": "2Mi"}), memory="2Mi", use_status=False),
    case("pod level memory and container level cpu", make([c("a", "2m")], pod_level={"memory": "2Mi"}), "2m", "2Mi",
         use_status=False),
    case("pod level unsupported resources set at pod-level",
         make([c("a", memory="3Mi")], pod_level={"storage": "2Mi"}), memory="3Mi", use_status=False),
    case("only container level resources set", make([c("a", "2m", "3Mi")]), "2m", "3Mi", use_status=False),
    case("both container-level and pod-level resources set",
         make([c("a", "2m", "3Mi")], pod_level={"memory": "6Mi", "cpu": "8m"}), "8m", "6Mi", use_status=False),
    case("container-level resources and init container set",
         make([c("a", "2m", "3Mi")], [c("i", "4m", "5Mi")]), "4m", "5Mi", use_status=False),
    case("container-level resources and sidecar container set",
         make([c("a", "2m", "3Mi")], [c("s", "4m", "5Mi", sidecar=True)]), "6m", "8Mi", use_status=False),
    case("container-level resources, init and sidecar container set",
         make([c("a", "2m", "3Mi")], [c("s", "4m", "5Mi", sidecar=True), c("i", "8m", "6Mi")]), "12m", "11Mi",
         use_status=False),
    case("pod-level resources, container-level resources, init and sidecar container set",
         make([c("a", "2m", "3Mi")], [c("s", "4m", "5Mi", sidecar=True), c("i", "8m", "6Mi")],
              pod_level={"memory": "15Mi", "cpu": "18m"}), "18m", "15Mi", use_status=False),
    case("pod-level resources, hugepage request single page size",
         make(pod_level={"memory": "10Mi", "hugepages-2Mi": "2Mi"}), memory="10Mi", use_status=False),
    case("pod-level resources, hugepage request multiple page sizes",
         make(pod_level={"cpu": "1", "hugepages-2Mi": "2Mi", "hugepages-1Gi": "1Gi"}), "1", use_status=False),
    case("pod-level resources, container-level hugepages between pod-level and container-level",
         make([c("a", memory="4Mi")], pod_level={"cpu": "1", "hugepages-2Mi": "10Mi"}), "1", "4Mi", use_status=False),
    # TestAggregateContainerRequestsAndLimits (requests half; no pod-level spec, no overhead)
    case("one container with requests", make([c("a", "9")]), "9", use_status=False),
    case("two containers with requests", make([c("a", "9"), c("b", "9")]), "18", use_status=False),
    case("regular and init containers with requests", make([c("a", "9")], [c("i", "9")]), "9", use_status=False),
    case("regular, init and sidecar containers with requests",
         make([c("a", "9")], [c("s", "8", sidecar=True), c("i", "6")]), "17", use_status=False),
    case("regular containers with empty requests, but status with non-empty requests",
         make([c("container-1")], statuses=[status("container-1", actual={"cpu": "2"})]), "2"),
    case("always-restart init containers with empty requests, but status with non-empty requests",
         make(init=[c("container-1", sidecar=True)], init_statuses=[status("container-1", actual={"cpu": "2"})]), "2"),
    case("falls back to container status aggregation when podAllocatedResources is nil",
         make([c("c1", "1")], statuses=[status("c1", {"cpu": "6"}, {"cpu": "5"})], pod_actual={"cpu": "3"}), "6"),
    case("falls back to container status aggregation when podResources is nil",
         make([c("c1", "1")], statuses=[status("c1", {"cpu": "6"}, {"cpu": "5"})], pod_allocated={"cpu": "6"}), "6"),
    # TestPodRequestsAndLimitsVerticalScalingWrappers (v0.37.2; v0.36.3 gives the same on these)
    case("pod level requests with PLR vertical scaling enabled and status populated",
         make([c("c1", "1")], pod_level={"cpu": "2"}, pod_allocated={"cpu": "3"}, pod_actual={"cpu": "3.5"}), "3.5"),
    case("pod level requests with PLR vertical scaling enabled and infeasible resize",
         make([c("c1", "1")], pod_level={"cpu": "10"}, pod_allocated={"cpu": "3"}, pod_actual={"cpu": "4"},
              infeasible=True), "4"),
    case("container limits aggregation with infeasible resize",
         make([c("c1")], statuses=[status("c1", resources=True)], infeasible=True), "0"),
]


@BOTH
@pytest.mark.parametrize("p,cpu,memory,use_status", UPSTREAM)
def test_upstream_tables(rules, p, cpu, memory, use_status):
    assert requests(p, rules, use_status) == (cpu, memory)


# v0.38.0-beta.0 TestAggregateContainerRequestsAndLimits, new cases (their expectedRequests is empty).
UPSTREAM_1_38 = [
    case("aggregate contains memory limit but not cpu limit when cpu limit is omitted in one container",
         make([limits_only("a", {"cpu": "2", "memory": "1Gi"}), limits_only("b", {"memory": "1Gi"})]), use_status=False),
    case("aggregate does not contain both cpu and memory limits when they are zero in one container",
         make([limits_only("a", {"cpu": "1", "memory": "1Gi"}), limits_only("b", {"cpu": "0", "memory": "0"})]),
         use_status=False),
]

RULES_FOR_1_38 = rules_for(parse_version("v1.38.0-beta.0"))


@pytest.mark.parametrize("p,cpu,memory,use_status", UPSTREAM + UPSTREAM_1_38)
def test_upstream_1_38_table(p, cpu, memory, use_status):
    """The whole v0.38.0-beta.0 requests table (outside alpha DRA) under the rules a 1.38 server gets, no warning."""
    rules, warning = RULES_FOR_1_38
    assert warning is None
    assert requests(p, rules, use_status) == (cpu, memory)


def test_upstream_1_38_reads_the_pods_own_status_totals():
    """The same case as v0.37.2's, unchanged in v0.38.0-beta.0."""
    p = make([c("c1", "1")], pod_allocated={"cpu": "4"}, pod_actual={"cpu": "3"})
    assert requests(p, RULES_FOR_1_38[0]) == (4, 0)


def test_upstream_v037_reads_the_pods_own_status_totals():
    """v0.37.2 "aggregate container request/limit resolves directly from pod status when PLR vertical scaling
    enabled"; v0.36.3 has no such path and counts the container's spec."""
    p = make([c("c1", "1")], pod_allocated={"cpu": "4"}, pod_actual={"cpu": "3"})
    assert requests(p, RULES_1_37) == (4, 0)
    assert requests(p, RULES_1_36) == (1, 0)


# -- where 1.36 and 1.37 disagree (computed by hand) ------------------------------------

DIVERGENCES = [
    pytest.param(  # the example: 1.36 sums per-container maxima (2 + 2), 1.37 takes the max of the sums (3, 3, 3)
        make([c("c1", "2"), c("c2", "1")],
             statuses=[status("c1", {"cpu": "1"}, {"cpu": "1"}), status("c2", {"cpu": "2"}, {"cpu": "2"})]),
        ("4", "0"), ("3", "0"), id="resize in progress"),
    pytest.param(  # Infeasible: 1.36 drops c1's spec but counts c2's; 1.37 counts nothing for c2, which has no status
        make([c("c1", "4", "1Gi"), c("c2", "1", "512Mi")],
             statuses=[status("c1", {"cpu": "2", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})], infeasible=True),
        ("3", "1536Mi"), ("2", "1Gi"), id="infeasible resize"),
    pytest.param(  # a crash-looping container reports allocatedResources but no resources: 1.36 ignores it
        make([c("app", "1", "1Gi"), c("helper", "500m", "128Mi")],
             statuses=[status("app", {"cpu": "2", "memory": "2Gi"}), status("helper", {"cpu": "500m", "memory": "128Mi"},
                                                                              {"cpu": "500m", "memory": "128Mi"})]),
        ("1.5", "1152Mi"), ("2.5", "2176Mi"), id="crash loop with only allocatedResources"),
    pytest.param(  # pod-level resize: 1.36 replaces only what spec names (cpu), 1.37 every resource of the max
        make([c("app", "500m", "1Gi")], pod_level={"cpu": "2"},
             pod_allocated={"cpu": "3", "memory": "2Gi"}, pod_actual={"cpu": "3", "memory": "2Gi"}),
        ("3", "1Gi"), ("3", "2Gi"), id="pod-level resize"),
    pytest.param(  # pod-level Infeasible: 1.36 reads the status' missing memory as 0, 1.37 keeps the container aggregate
        make([c("app", "1", "1Gi")], pod_level={"cpu": "4", "memory": "3Gi"},
             statuses=[status("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
             pod_actual={"cpu": "2"}, infeasible=True),
        ("2", "0"), ("2", "1Gi"), id="pod-level infeasible"),
    pytest.param(  # the same with cpu, as the real 1.36.3 scheduler counts it (tests/cluster/test_cluster_requests.py): 0 cpu
        make([c("c1", "1", "64Mi")], pod_level={"cpu": "4", "memory": "1Gi"},
             statuses=[status("c1", {"cpu": "1", "memory": "64Mi"}, {"cpu": "1", "memory": "64Mi"})],
             pod_actual={"memory": "1Gi"}, infeasible=True),
        ("0", "1Gi"), ("1", "1Gi"), id="pod-level infeasible, cpu missing from status"),
    pytest.param(  # a regular init container's status: only 1.37 consults it
        make([c("app", "100m")], [c("init", "1")], statuses=[status("app", {"cpu": "100m"}, {"cpu": "100m"})],
             init_statuses=[status("init", {"cpu": "3"}, {"cpu": "3"})]),
        ("1", "0"), ("3", "0"), id="init container status"),
    pytest.param(  # the pod's own status totals replace the container statuses in 1.37
        make([c("a", "1"), c("b", "1")], statuses=[status("a", {"cpu": "1"}, {"cpu": "1"}), status("b", {"cpu": "1"}, {"cpu": "1"})],
             pod_allocated={"cpu": "5"}, pod_actual={"cpu": "2"}),
        ("2", "0"), ("5", "0"), id="pod status totals"),
]


@pytest.mark.parametrize("p,v136,v137", DIVERGENCES)
def test_the_releases_disagree_during_resize(p, v136, v137):
    assert requests(p, RULES_1_36) == (q(v136[0]), q(v136[1]))
    assert requests(p, RULES_1_37) == (q(v137[0]), q(v137[1]))
    # Neither release lets status move what `kubectl describe node` shows.
    assert requests(p, RULES_1_36, use_status=False) == requests(p, RULES_1_37, use_status=False)


# -- upstream defects: the agent counts what each release's helpers.go counts for such a pod -----

# kubernetes/kubernetes#141814: after a resize of one dimension the kubelet's pod `status.resources` (and in
# some paths a container's) lacks the cpu or memory key; `status.allocatedResources` stays complete. Each
# release takes a missing key as absent from that list (never as "fall back to spec"), per resource.
# (p, 1.36 cpu/memory, 1.37 and 1.38 cpu/memory), computed from v0.36.3 and v0.37.2 / v0.38.0-beta.0 helpers.go.
MISSING_KEYS = [
    pytest.param(  # memory-only resize done: status.resources lost cpu; allocated has it, spec has it
        make([c("c1")], pod_level={"cpu": "20m", "memory": "200Mi"},
             pod_allocated={"cpu": "20m", "memory": "200Mi"}, pod_actual={"memory": "200Mi"}),
        ("20m", "200Mi"), ("20m", "200Mi"), id="pod status lacks cpu after a memory-only resize"),
    pytest.param(  # memory resize in flight: actual memory still the old value, cpu key gone
        make([c("c1")], pod_level={"cpu": "20m", "memory": "200Mi"},
             pod_allocated={"cpu": "20m", "memory": "200Mi"}, pod_actual={"memory": "100Mi"}),
        ("20m", "200Mi"), ("20m", "200Mi"), id="pod status lacks cpu during a memory resize"),
    pytest.param(  # Infeasible: spec left out, allocated still supplies cpu in every release
        make([c("c1")], pod_level={"cpu": "40m", "memory": "400Mi"}, infeasible=True,
             pod_allocated={"cpu": "20m", "memory": "200Mi"}, pod_actual={"memory": "200Mi"}),
        ("20m", "200Mi"), ("20m", "200Mi"), id="infeasible, pod status lacks cpu, allocated complete"),
    pytest.param(  # Infeasible and no pod allocated total: 1.36 keeps c1's spec cpu (pod-level names only memory);
        # 1.37 falls back to container statuses, c1 has none and spec is no fallback when Infeasible: cpu 0
        make([c("c1", "10m", "100Mi")], pod_level={"memory": "400Mi"}, infeasible=True, pod_actual={"memory": "200Mi"}),
        ("10m", "200Mi"), ("0", "200Mi"), id="infeasible, pod status lacks cpu, no allocated total"),
    pytest.param(  # the same with cpu named at pod level: 1.36 reads the missing key as 0, 1.37 keeps the aggregate
        make([c("c1", "10m", "100Mi")], pod_level={"cpu": "40m", "memory": "400Mi"}, infeasible=True,
             pod_actual={"memory": "200Mi"}),
        ("0", "200Mi"), ("0", "200Mi"), id="infeasible, pod-level cpu, pod status lacks cpu"),
    pytest.param(  # a container status whose resources.requests lacks cpu: that container's actual cpu is absent
        make([c("c1", "1", "1Gi")], statuses=[status("c1", {"cpu": "2", "memory": "1Gi"}, {"memory": "1Gi"})]),
        ("2", "1Gi"), ("2", "1Gi"), id="container status lacks cpu, allocated complete"),
    pytest.param(  # ... and with Infeasible and no allocatedResources nothing supplies cpu: 0, not the spec's 4
        make([c("c1", "4", "1Gi")], statuses=[status("c1", actual={"memory": "1Gi"})], infeasible=True),
        ("0", "1Gi"), ("0", "1Gi"), id="infeasible, container status lacks cpu, no allocatedResources"),
]


@pytest.mark.parametrize("p,v136,v137", MISSING_KEYS)
def test_a_status_lacking_cpu_or_memory_counts_as_component_helpers_counts_it(p, v136, v137):
    assert requests(p, RULES_1_36) == (q(v136[0]), q(v136[1]))
    assert requests(p, RULES_1_37) == (q(v137[0]), q(v137[1]))
    assert requests(p, RULES_FOR_1_38[0]) == (q(v137[0]), q(v137[1]))


def test_overhead_with_pod_status_totals_is_counted_twice_as_upstream_does():
    """kubernetes/kubernetes#139627: the kubelet's pod status totals already include spec.overhead, and PodRequests
    adds spec.overhead after the max of spec, allocated and actual, so it is counted twice. The fix (subtract the
    overhead before the max, kubernetes/kubernetes#140481) is open and in no release: v0.37.2 and v0.38.0-beta.0
    both count it twice, and so does the agent, because the scheduler and the cluster-autoscaler do. When a release
    ships the fix, that release gets its own rules."""
    totals = make([c("c1", "1")], overhead={"cpu": "250m"}, pod_allocated={"cpu": "1250m"}, pod_actual={"cpu": "1250m"})
    assert requests(totals, RULES_1_37) == requests(totals, RULES_FOR_1_38[0]) == (q("1.5"), 0)
    assert requests(totals, RULES_1_36) == (q("1.25"), 0)  # v0.36 does not read the pod's own totals for containers
    pod_level = make([c("c1", "500m")], pod_level={"cpu": "1"}, overhead={"cpu": "250m"},
                     pod_allocated={"cpu": "1250m"}, pod_actual={"cpu": "1250m"})
    for rules in (RULES_1_36, RULES_1_37, RULES_FOR_1_38[0]):
        assert requests(pod_level, rules) == (q("1.5"), 0)  # max(1, 1.25, 1.25) + 0.25
    # Spec only (`kubectl describe node`) counts it once.
    assert requests(totals, RULES_1_37, use_status=False) == (q("1.25"), 0)


def test_status_resources_without_requests_counts_in_136_not_137():
    """v0.36 consults a status once it has a resources object; v0.37 needs resources.requests (else allocated)."""
    p = make([c("app", "1")], statuses=[status("app", {"cpu": "2"}, resources=True)])
    assert requests(p, RULES_1_36) == (2, 0)  # max(spec 1, nothing, allocated 2)
    assert requests(p, RULES_1_37) == (2, 0)  # actuated falls back to allocated
    infeasible = make([c("app", "1")], statuses=[status("app", {"cpu": "2"}, resources=True)], infeasible=True)
    assert requests(infeasible, RULES_1_36) == requests(infeasible, RULES_1_37) == (2, 0)


def test_empty_status_maps_are_absent():
    """An empty map is nil once the API server stored it: {} falls back like a missing field."""
    p = make([c("app", "1")], statuses=[status("app", {}, {})])
    assert requests(p, RULES_1_37) == (1, 0)
    assert POD.record(p).statuses[0].allocated is None


def test_resize_is_explained():
    p = DIVERGENCES[0].values[0]
    old = pod_requests(POD.record(p), RULES_1_36).contributions
    assert [(x.name, x.cpu, x.note) for x in old] == [("c1", 2 * NANO, ""), ("c2", 2 * NANO, "resize: max of spec and status")]
    new = pod_requests(POD.record(DIVERGENCES[1].values[0]), RULES_1_37).contributions
    assert [x.kind for x in new] == ["container", "container", "status", "status"]
    assert all("infeasible" in x.note for x in new if x.kind == "status")


# -- the documentation's examples, identical in both releases ---------------------------

@BOTH
def test_ordinary_pod_is_the_sum_of_its_containers(rules):
    assert requests(pod("web", containers=[c("a", "250m", "64Mi"), c("b", "100m", "128Mi")]), rules) == \
        (Fraction(35, 100), 192 * MI)


@BOTH
def test_overhead_is_added_after_pod_level_requests_replace_the_aggregate(rules):
    p = pod("plr", containers=[c("a", "500m", "1Gi"), c("b", "500m", "1Gi")], pod_requests={"cpu": "1500m"},
            overhead={"cpu": "100m"})
    assert requests(p, rules) == (Fraction(16, 10), 2 * GI)


@BOTH
def test_resources_are_maximised_independently(rules):
    p = pod("x", init_containers=[c("i", "2", "100Mi")], containers=[c("app", "1", "1Gi")])
    assert requests(p, rules) == (2, GI)


@BOTH
def test_status_without_resources_or_allocated_falls_back_to_spec(rules):
    p = make([c("app", "3")], statuses=[status("app")])
    assert requests(p, rules) == (3, 0)


@BOTH
def test_bad_quantities_are_problems_and_count_as_absent(rules):
    p = make([c("a", "lots", "1Gi"), c("b", "-1", "1Gi")], statuses=[status("a", {"cpu": "x"}, {"cpu": "1"})])
    result = pod_requests(POD.record(p), rules)
    assert result.cpu == NANO and result.memory == 2 * GI * NANO
    assert sorted(pr.reason for pr in result.problems) == ["invalid_quantity", "invalid_quantity", "negative_quantity"]


_SPELLINGS = {"100m": "0.1", "250m": "0.25", "1": "1000m", "2": "2000m", "64Mi": "67108864", "1Gi": "1073741824",
              "512Mi": "536870912"}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["app", "init", "sidecar"]),
                          st.fixed_dictionaries({}, optional={"cpu": st.sampled_from(["100m", "250m", "1", "2"]),
                                                              "memory": st.sampled_from(["64Mi", "1Gi", "512Mi"])}),
                          st.booleans(), st.booleans(), st.booleans(), st.sampled_from([None, "allocated", "actual"])),
                min_size=1, max_size=5),
       st.sampled_from(SUPPORTED))
def test_statuses_that_repeat_the_spec_give_what_the_full_arithmetic_gives(containers, rules):
    """pod_requests skips reading statuses that repeat the spec as written; spelled otherwise, they are read in full.

    Some statuses report a resize (cpu "2" where the spec says otherwise): those must never take the shortcut.
    """
    from agent.model.pod import ContainerRequests, PodRecord, StatusRequests

    def record(spell):
        app, init, statuses = [], [], []
        for i, (kind, requests, has_status, allocated, actual, resized) in enumerate(containers):
            c = ContainerRequests(f"c{i}", requests, kind == "sidecar")
            (app if kind == "app" else init).append(c)
            if has_status:
                said = {k: spell(v) for k, v in requests.items()}
                other = {**said, "cpu": spell("2")}
                statuses.append(StatusRequests(c.name, (other if resized == "allocated" else said) if allocated else None,
                                               actual, (other if resized == "actual" else said) if actual else None))
        return PodRecord("u", "ns", "p", containers=tuple(app), init_containers=tuple(init), statuses=tuple(statuses))

    repeated, respelled = record(lambda v: v), record(lambda v: _SPELLINGS[v])
    fast, full = pod_requests(repeated, rules), pod_requests(respelled, rules)
    assert (fast.cpu, fast.memory, fast.contributions, fast.problems) == (full.cpu, full.memory, full.contributions,
                                                                          full.problems)
