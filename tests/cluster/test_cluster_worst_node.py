"""A tenant's Job cannot push the agent past its memory (issue 29, item 2), against the real API server.

The issue's attack, scaled down to keep the suite fast: a tenant's pods on one node, running ones and a Job's
completed ones, every pod's annotations at the API server's limit of 256 KiB per object (one ``vm.neon.tech/usage``
annotation the agent refuses). The agent runs in-process against the suite's real kube-apiserver and reads them
twice: as WATCH events while it runs (created, then their status written as a kubelet would), and in a second
agent's initial LIST. What the agent's own code still holds once it has every pod is measured with tracemalloc
(the Python heap, allocations made in agent/ frames, after a collection), so the per-pod bound holds on a loaded
machine where RSS would not be a fair measure: before the fix each pod kept its 256 KiB annotation. The full-size
node (110 + 600 pods, with labels, containers and PDB selectors at the API server's limits, each size found by trying
as the second test tries it) and its RSS are ``bench/run.py worst-node`` (docs/benchmarks.md).
"""

from __future__ import annotations

import pytest

from agent.run.agent import Agent
from testkit.cluster import Cluster
from testkit.cluster_client import ApiError
from testkit.worst_node import (
    create_pods,
    held_per_pod,
    huge_usage,
    largest,
    minimal_containers,
    start_agent,
    stored,
    tenant_namespace,
    tenant_pod,
)

pytestmark = pytest.mark.cluster

NODE = "worst-node-test"
RUNNING, COMPLETED = 10, 60
#: What the agent may keep per pod (a running pod's record is 1-3 KiB; a completed one's less); the refused
#: annotation alone is 256 KiB.
PER_POD_BOUND = 16 * 1024


def holds(agent: Agent) -> dict[str, int]:
    phases: dict[str, int] = {}
    for value in agent.state.pods():
        phases[value.phase] = phases.get(value.phase, 0) + 1
    return phases


WANT = {"Running": RUNNING, "Succeeded": COMPLETED}


@pytest.fixture
def namespace(cluster: Cluster):
    with tenant_namespace(cluster, NODE, pods=RUNNING + COMPLETED + 10) as name:
        yield name


def test_a_tenants_job_of_huge_completed_pods_leaves_a_bounded_agent(cluster: Cluster, namespace: str):
    def check(agent: Agent) -> None:
        # Each pod counts as the issue says: the completed ones for nothing, the refused usage reported.
        values = agent.state.pods()
        assert all(v.record is None for v in values if not v.reported)
        assert all([p.reason for p in v.problems] == ["out_of_range"] for v in values)

    by_watch, by_list = held_per_pod(
        lambda: start_agent(cluster, NODE),
        lambda: create_pods(cluster, RUNNING, COMPLETED, node=NODE, namespace=namespace),
        lambda agent: holds(agent) == WANT, check, RUNNING + COMPLETED)
    assert by_watch < PER_POD_BOUND, f"{by_watch / 1024:.1f} KiB per pod kept after the WATCH"
    assert by_list < PER_POD_BOUND, f"{by_list / 1024:.1f} KiB per pod kept after the LIST"


def test_the_search_for_the_largest_pod_reads_etcds_refusal_and_leaves_nothing_behind(cluster: Cluster, namespace: str):
    """bench/worst_node.py sizes its objects by trying: a pod past etcd's request limit is refused (not an error),
    the largest one found is stored and one container more is not, and no try is left on the node."""
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def fits(containers: int) -> bool:
        pod = tenant_pod("wide-try", False, huge_usage(), NODE, namespace, containers=minimal_containers(containers))
        return stored(cluster, pods, pod, {"phase": "Running"})

    most = largest(fits, 1, 10_000)
    assert fits(most) and not fits(most + 1)
    with pytest.raises(ApiError) as gone:
        cluster.api("GET", f"{pods}/wide-try")
    assert gone.value.status == 404
