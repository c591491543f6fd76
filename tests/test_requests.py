"""Effective requests, with cases taken from the Kubernetes documentation and KEP-753."""

from fractions import Fraction

from agent.model.pod import decode_pod
from agent.model.quantity import NANO
from agent.model.pod_requests import pod_requests
from tests.factory import container, pod


def cpu(p) -> Fraction:
    """Cores, exactly (the agent counts nano-cores)."""
    return Fraction(pod_requests(decode_pod(p)).cpu, NANO)


def mem(p) -> Fraction:
    return Fraction(pod_requests(decode_pod(p)).memory, NANO)


def test_ordinary_pod_is_the_sum_of_its_containers():
    p = pod("web", containers=[container("a", "250m", "64Mi"), container("b", "100m", "128Mi")])
    assert cpu(p) == Fraction(35, 100)
    assert mem(p) == 192 * 2**20


def test_nothing_requested_is_zero():
    p = pod("bare", containers=[container("a")])
    assert cpu(p) == 0 and mem(p) == 0


def test_kep753_init_then_sidecars():
    # init 5; sidecars 1, 2, 3; app 1 -> max(1+1+2+3, 5) = 7
    p = pod("x", init_containers=[container("i", "5"), container("s1", "1", restart_policy="Always"),
                                  container("s2", "2", restart_policy="Always"), container("s3", "3", restart_policy="Always")],
            containers=[container("app", "1")])
    assert cpu(p) == 7


def test_kep753_init_after_sidecars_adds_them_to_its_peak():
    # init 5, sidecar 1, sidecar 2, init 5, sidecar 3; app 1 -> max(7, 5, 1+2+5=8) = 8
    p = pod("x", init_containers=[container("i1", "5"), container("s1", "1", restart_policy="Always"),
                                  container("s2", "2", restart_policy="Always"), container("i2", "5"),
                                  container("s3", "3", restart_policy="Always")],
            containers=[container("app", "1")])
    assert cpu(p) == 8


def test_kep753_big_init_after_a_sidecar():
    # sidecar 10, init 200, app 100 -> max(110, 210) = 210
    p = pod("x", init_containers=[container("s", "10", restart_policy="Always"), container("i", "200")],
            containers=[container("app", "100")])
    assert cpu(p) == 210


def test_resources_are_maximised_independently():
    p = pod("x", init_containers=[container("i", "2", "100Mi")], containers=[container("app", "1", "1Gi")])
    assert cpu(p) == 2 and mem(p) == 2**30


def test_overhead_is_added():
    p = pod("kata", containers=[container("a", "500m", "1Gi")], overhead={"cpu": "250m", "memory": "120Mi"})
    assert cpu(p) == Fraction(3, 4) and mem(p) == 2**30 + 120 * 2**20


def test_pod_level_requests_replace_the_aggregate_per_resource_then_overhead():
    p = pod("plr", containers=[container("a", "500m", "1Gi"), container("b", "500m", "1Gi")],
            pod_requests={"cpu": "1500m"}, overhead={"cpu": "100m"})
    assert cpu(p) == Fraction(16, 10)  # pod-level 1.5 + overhead 0.1
    assert mem(p) == 2 * 2**30  # memory not set at pod level: container sum


def _resize_pod(spec_cpu, allocated, status_req, infeasible=False):
    return pod("resize", containers=[container("app", spec_cpu)],
               container_statuses=[{"name": "app", "allocatedResources": {"cpu": allocated},
                                    "resources": {"requests": {"cpu": status_req}}}],
               conditions=[{"type": "PodResizePending", "status": "True", "reason": "Infeasible" if infeasible else "Deferred"}])


def test_resize_in_progress_uses_the_max_of_spec_and_status():
    assert cpu(_resize_pod("2", "1", "1")) == 2     # upsize pending: spec is larger
    assert cpu(_resize_pod("1", "2", "2")) == 2     # downsize pending: status still larger


def test_infeasible_resize_ignores_spec():
    assert cpu(_resize_pod("8", "1", "1", infeasible=True)) == 1


def test_status_without_resources_falls_back_to_spec():
    p = pod("x", containers=[container("app", "3")], container_statuses=[{"name": "app", "allocatedResources": {"cpu": "9"}}])
    assert cpu(p) == 3


def test_regular_init_container_status_is_not_consulted():
    p = pod("x", init_containers=[container("i", "1")], containers=[container("app", "100m")],
            container_statuses=[{"name": "app", "resources": {"requests": {"cpu": "100m"}}}])
    p["status"]["initContainerStatuses"] = [{"name": "i", "allocatedResources": {"cpu": "5"}, "resources": {"requests": {"cpu": "5"}}}]
    assert cpu(p) == 1


def test_bad_container_quantity_is_a_problem_and_counts_as_absent():
    p = pod("x", containers=[container("a", "lots", "1Gi"), container("b", "-1", "1Gi")])
    result = pod_requests(decode_pod(p))
    assert result.cpu == 0 and result.memory == 2 * 2**30 * NANO
    assert sorted(pr.reason for pr in result.problems) == ["invalid_quantity", "negative_quantity"]
