"""A new node pulls the agent's image from a real registry and its first numbers reach Prometheus (issue 30).

`python -m pytest -m node tests/node/test_node_registry.py`. The node of node_cluster.py runs the shipped Collector
and Prometheus as test_node.py does; the agent's DaemonSet is the shipped one with only its image renamed into a
registry (``crane registry serve``, the ``registry`` row of components/gotools.py, listening on the node's address
inside the test's namespace) by a kustomize overlay. Then a second real kubelet with an empty containerd joins (nothing
imported: it pulls even the sandbox image) and the test follows it to its agent's first sample in Prometheus.
How long that takes is bench/new_node.py's figure, not asserted here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from testkit.new_node import AGENT_REPOSITORY, NewNode, agent_overlay, join_and_follow, node_registry
from testkit.node_cluster import Node, leave_node
from testkit.node_rollout import AGENT_NS, roll_out
from testkit.registry import Registry

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def registry(node_cluster: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with node_registry(node_cluster, tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture(scope="module")
def rollout(node_cluster: Node, prometheus, registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The shipped rollout (testkit/node_rollout.py) with the agent's image named in the registry."""
    return roll_out(node_cluster, prometheus, tmp_path_factory.mktemp,
                    daemonset=agent_overlay(registry, tmp_path_factory.mktemp("agent-overlay")))


@pytest.fixture(scope="module")
def joined(node_cluster: Node, registry: Registry, rollout: dict, prometheus,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NewNode, list[tuple[str, str]]]]:
    """The second node, followed to its agent's first numbers; and the registry requests made while it joined."""
    before = len(registry.requests())
    result = None
    try:
        result = join_and_follow(node_cluster, registry, prometheus, 2, tmp_path_factory.mktemp("node-2"))
        yield result, registry.requests()[before:]
    finally:
        if result is not None:
            leave_node(result.node)


def _manifest(registry: Registry, repository: str, tag: str) -> tuple[str, dict]:
    """The digest and the content of the image manifest ``tag`` names in the registry."""
    import hashlib
    import urllib.request

    accept = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
    request = urllib.request.Request(f"http://{registry.address}/v2/{repository}/manifests/{tag}",
                                     headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return f"sha256:{hashlib.sha256(body).hexdigest()}", json.loads(body)


def test_the_first_node_runs_the_agent_from_the_registry(node_cluster: Node, registry: Registry,
                                                         rollout: dict) -> None:
    status = next(s for s in rollout["agent"]["status"]["containerStatuses"] if s["name"] == "agent")
    assert status["image"] == f"{registry.address}/{AGENT_REPOSITORY}:0.1.0", status
    assert status["ready"], status


def test_a_new_node_pulls_the_agent_image_from_the_registry(registry: Registry, joined) -> None:
    new, requests = joined
    pod = new.pod
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "agent")
    assert status["image"] == f"{registry.address}/{AGENT_REPOSITORY}:0.1.0", status
    # The kubelet pulled it (not "already present on machine"): its Pulled event says so and how long it took.
    assert new.pulled_in, [(e["reason"], e["message"]) for e in new.events]
    assert not [e for e in new.events if "already present" in e.get("message", "")], new.events
    # ...from this registry: the manifest and every layer and the config were fetched while the node joined.
    # (containerd resolves the tag with a HEAD, then fetches the manifest by its digest, then the blobs)
    digest, manifest = _manifest(registry, AGENT_REPOSITORY, "0.1.0")
    asked = {path for _, path in requests}
    fetched = {path for method, path in requests if method == "GET"}
    assert f"/v2/{AGENT_REPOSITORY}/manifests/0.1.0" in asked, requests
    assert f"/v2/{AGENT_REPOSITORY}/manifests/{digest}" in fetched, requests
    wanted = [manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])]
    assert all(f"/v2/{AGENT_REPOSITORY}/blobs/{blob}" in fetched for blob in wanted), (wanted, requests)
    # The sandbox image came the same way: the new node had nothing in its containerd.
    pause_digest, _ = _manifest(registry, "nra-pause", "1")
    assert {"/v2/nra-pause/manifests/1", f"/v2/nra-pause/manifests/{pause_digest}"} <= asked, requests
    listed = new.node.ctr("images", "ls", "-q").stdout.split()
    assert f"{registry.address}/{AGENT_REPOSITORY}:0.1.0" in listed, listed


def test_the_new_nodes_agent_is_ready_and_its_first_export_reaches_prometheus(prometheus, joined) -> None:
    new, _ = joined
    assert new.pod["spec"]["nodeName"] == new.node.name
    # Every step was reached, in the order a pull forces (the DaemonSet's pod may be placed before the Node is
    # Ready: it tolerates the not-ready taint).
    order = ["node_registered", "pod_scheduled", "image_pulled", "container_started", "agent_readyz",
             "first_sample_in_prometheus"]
    assert [s for s in sorted(new.seen, key=new.seen.get) if s in order] == order, new.seen
    assert new.seen["node_registered"] <= new.seen["node_ready"] < new.seen["first_sample_in_prometheus"], new.seen
    # The agent's own pod is among the numbers it exported for its node, with the request the DaemonSet sets.
    rows = prometheus.query(f'pod_or_vm_cpu_requests{{k8s_node_name="{new.node.name}"}}')
    values = {(r["metric"].get("k8s_namespace_name"), r["metric"].get("k8s_pod_name")): float(r["value"][1])
              for r in rows}
    assert values.get((AGENT_NS, new.pod["metadata"]["name"])) == 0.01, values
    # Its first export was accepted (the agent records a success only on the Collector's 2xx) before the first
    # sample was collected for the second, and the first sample belongs to the first export's collection.
    assert new.first_export_wall is not None and new.first_sample_wall is not None
    assert new.wall_at_start < new.first_sample_wall <= new.first_export_wall + 1, (
        new.wall_at_start, new.first_sample_wall, new.first_export_wall)
