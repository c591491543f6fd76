"""Pods of thousands of containers (issue 38, item 4), against the real API server.

The API server sets no bound on a pod's containers; etcd's request limit (1.5 MiB by default) does: stored with its
defaulted fields a container with requests is about 410 bytes, so 10,000 are refused here ("etcdserver: request is too
large") and 3,000 fit. A tenant's four pods of 3,000 containers each on one node (no kubelet: bound by nodeName, their
phase written as a kubelet would). The agent runs in-process with its debug endpoint on loopback and reads them twice:
as WATCH events while it runs, and in a second agent's initial LIST. Each pod is counted with its exact requests; what
the agent's own code still holds per pod is bounded (tracemalloc, allocations made in agent/ frames, as the worst-node
test measures it: before the bound each kept one record, status and line per container); /debug/pods over them is one
small page that says what was folded. A small pod follows them (last in the LIST too), as the reader keeps the last line
and its decoded event referenced until the next one arrives: what is measured is what stays per pod. The RSS figures are
``bench/run.py wide-pods`` (docs/benchmarks.md).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent.model.container_bound import MAX_CONTAINERS
from agent.model.quantity import NANO
from agent.run.agent import Agent
from testkit.cluster import Cluster
from testkit.http import raw_get
from testkit.worst_node import add_node, held_per_pod, start_agent

pytestmark = pytest.mark.cluster

NODE = "wide-pods-test"
VOLUMES_NODE = "wide-volumes-test"
PODS, CONTAINERS = 4, 3_000
#: What the agent may keep per pod, whatever its containers (a record of 33 lines and its value: a few tens of KiB;
#: one line per container was hundreds of KiB at this size).
PER_POD_BOUND = 48 * 1024
#: /debug/pods over the four pods (each shows at most 33 contribution lines).
BODY_BOUND = 64 * 1024


def wide_pod(name: str, namespace: str, count: int = CONTAINERS, volumes: int = 0, node: str = NODE) -> dict:
    containers = [{"name": f"c{i}", "image": "example.invalid/app:1",
                   "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}} for i in range(count)]
    spec = {"nodeName": node, "tolerations": [{"operator": "Exists"}], "containers": containers}
    if volumes:
        spec["volumes"] = [{"name": f"v{i}", "emptyDir": {}} for i in range(volumes)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def running(agent: Agent) -> int:
    return sum(1 for v in agent.state.pods() if v.phase == "Running")


def check(agent: Agent) -> None:
    for value in agent.state.pods():
        if value.name == "zz-small":
            continue
        assert value.reported and value.cpu == CONTAINERS * NANO // 1000 and value.memory == CONTAINERS * 2**20 * NANO
        assert len(value.record.containers) == MAX_CONTAINERS + 1
    status, body = raw_get("127.0.0.1", agent.debug.port, "/debug/pods")
    page = json.loads(body)
    assert status == 200 and len(body) < BODY_BOUND and len(page["pods"]) == PODS + 1 and page["continue"] is None
    assert all(any(f"{CONTAINERS:,} containers" in p for p in shown["problems"]) for shown in page["pods"]
               if shown["name"] != "zz-small")


def node_and_namespace(cluster: Cluster, node: str):
    """A node of its own for each test: pods left on a node by an earlier test (no kubelet finishes their deletion)
    would be read by the next one's agent."""
    add_node(cluster, node, pods=PODS + 3)
    name = cluster.create_namespace("wide")
    yield name
    cluster.api("DELETE", f"/api/v1/namespaces/{name}")
    cluster.api("DELETE", f"/api/v1/nodes/{node}")


@pytest.fixture
def namespace(cluster: Cluster):
    yield from node_and_namespace(cluster, NODE)


@pytest.fixture
def volumes_namespace(cluster: Cluster):
    yield from node_and_namespace(cluster, VOLUMES_NODE)


def create_running(cluster: Cluster, namespace: str, pod: dict) -> None:
    name = pod["metadata"]["name"]
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", pod, timeout=120)
    cluster.api("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": {"phase": "Running"}},
                timeout=120)


def test_pods_of_thousands_of_containers_are_counted_exactly_and_held_bounded(cluster: Cluster, namespace: str):
    def create(name: str, count: int = CONTAINERS) -> None:
        create_running(cluster, namespace, wide_pod(name, namespace, count))

    def create_all() -> None:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(create, [f"wide-{i}" for i in range(PODS)]))
        create("zz-small", 1)  # after them, so the reader's last line is the small one

    by_watch, by_list = held_per_pod(lambda: start_agent(cluster, NODE, debug_address="127.0.0.1:0"), create_all,
                                     lambda agent: running(agent) == PODS + 1, check, PODS)
    assert by_watch < PER_POD_BOUND, f"{by_watch / 1024:.1f} KiB per pod kept after the WATCH"
    assert by_list < PER_POD_BOUND, f"{by_list / 1024:.1f} KiB per pod kept after the LIST"


#: emptyDir volumes in one pod. The API server sets no bound on them; here it admitted up to 87,175 such volumes in
#: one pod (3.1 MB of JSON as this test writes it) and refused 87,804 with 413 (its 3 MiB request-body limit).
VOLUMES = 45_000


def test_pods_of_tens_of_thousands_of_volumes_are_held_bounded(cluster: Cluster, volumes_namespace: str):
    """The local-storage rule's facts only (agent/model/local_storage.py): kept name by name, each such pod cost the
    agent 2.69 MiB."""
    namespace = volumes_namespace

    def create_all() -> None:
        for i in range(2):
            create_running(cluster, namespace, wide_pod(f"volumes-{i}", namespace, 1, VOLUMES, VOLUMES_NODE))
        create_running(cluster, namespace, wide_pod("zz-small", namespace, 1, node=VOLUMES_NODE))

    def check(agent: Agent) -> None:
        for value in agent.state.pods():
            local = value.record.eviction.local_storage
            if value.name != "zz-small":
                assert local is not None and len(local.blocking) + local.more_blocking == VOLUMES

    by_watch, by_list = held_per_pod(lambda: start_agent(cluster, VOLUMES_NODE), create_all,
                                     lambda agent: running(agent) == 3, check, 2)
    assert by_watch < PER_POD_BOUND, f"{by_watch / 1024:.1f} KiB per pod kept after the WATCH"
    assert by_list < PER_POD_BOUND, f"{by_list / 1024:.1f} KiB per pod kept after the LIST"
