"""The shipped rollout against the real control plane: kubectl apply -k, DaemonSet controller, PodSecurity, RBAC.

The agent's container is started the way the kubelet would start it (testkit/kubelet.py): nothing about its command
line, environment or credentials is written here, it all comes from the Dockerfile and the pod the API server
stored. This is the guard for the `run run` defect (ENTRYPOINT plus the DaemonSet's args gave an argv the agent
refused with exit 2).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from testkit.cluster import Cluster
from testkit.waiting import wait_until
from testkit.kubelet import AgentContainer, Deployment, daemon_pods, start_agent_pod, wait_for_daemon_pod
from testkit.kwok import Kwok
from testkit.factory import container, for_create, pod
from testkit.otlp_receiver import HttpReceiver, points_of
from testkit.manifests import render
from testkit.repo import REPO as ROOT

pytestmark = pytest.mark.cluster

NODE = "rollout-node"


@pytest.fixture(scope="module")
def agent(cluster: Cluster, kwok: Kwok, deployed: Deployment, module_http_receiver: HttpReceiver,
          tmp_path_factory) -> AgentContainer:
    kwok.add_node(NODE, cpu="8", memory="16Gi", labels={"nra-test": "rollout"})
    pod = wait_for_daemon_pod(cluster, deployed, NODE)
    container = start_agent_pod(cluster, pod, tmp_path_factory.mktemp("rollout-agent"), module_http_receiver.endpoint)
    yield container
    code = container.stop()
    assert code == 0, f"agent exited {code} on SIGTERM:\n{container.tail()}"


def test_kubectl_builtin_kustomize_renders_what_the_offline_stand_in_renders(cluster: Cluster) -> None:
    """tests/deploy/test_deploy.py checks the manifests through a kustomize stand-in; the real kustomize must agree."""
    def key(o: dict) -> tuple[str, str]:
        return o["kind"], o["metadata"]["name"]

    for folder in ("daemonset", "otel-config"):
        result = cluster.kubectl("kustomize", str(ROOT / folder))
        assert result.returncode == 0, result.stderr
        real = sorted((d for d in yaml.safe_load_all(result.stdout) if d), key=key)
        assert real == sorted(render(ROOT / folder), key=key), folder


def test_apply_creates_the_shipped_objects_with_pod_security_as_shipped(cluster: Cluster, deployed: Deployment) -> None:
    created = {line.split()[0] for line in deployed.stdout.splitlines() if line.strip()}
    assert {"namespace/node-requests-agent", "serviceaccount/node-requests-agent", "daemonset.apps/node-requests-agent",
            "clusterrole.rbac.authorization.k8s.io/node-requests-agent",
            "clusterrolebinding.rbac.authorization.k8s.io/node-requests-agent",
            "networkpolicy.networking.k8s.io/node-requests-agent"} <= created, deployed.stdout
    shipped = yaml.safe_load((ROOT / "daemonset" / "namespace.yaml").read_text())["metadata"]["labels"]
    stored = cluster.api("GET", f"/api/v1/namespaces/{deployed.namespace}")["metadata"]["labels"]
    assert {k: v for k, v in stored.items() if k.startswith("pod-security.")} == \
           {k: v for k, v in shipped.items() if k.startswith("pod-security.")}
    # The namespace warns at its level: a pod template that would violate it makes the API server say so.
    assert "PodSecurity" not in deployed.stderr, deployed.stderr


def test_daemonset_controller_places_one_admitted_pod_on_every_node(cluster: Cluster, deployed: Deployment,
                                                                    agent: AgentContainer) -> None:
    name = deployed.daemonset["metadata"]["name"]

    def placed() -> dict | None:
        nodes = {n["metadata"]["name"] for n in cluster.api("GET", "/api/v1/nodes")["items"]}
        per_node: dict[str, int] = {}
        for item in daemon_pods(cluster, deployed):
            node = item["spec"].get("nodeName")
            if node and not item["metadata"].get("deletionTimestamp"):
                per_node[node] = per_node.get(node, 0) + 1
        status = cluster.api("GET", f"/apis/apps/v1/namespaces/{deployed.namespace}/daemonsets/{name}")["status"]
        done = set(per_node) == nodes and status.get("desiredNumberScheduled") == len(nodes)
        return {"per_node": per_node, "status": status} if done else None

    result = wait_until(placed, 90, interval=0.5, message="one DaemonSet pod on every Node")
    assert set(result["per_node"].values()) == {1}, result
    assert result["status"]["currentNumberScheduled"] == len(result["per_node"])
    assert result["status"].get("numberMisscheduled", 0) == 0


def test_container_runs_the_command_line_the_runtime_would_run(agent: AgentContainer) -> None:
    """Image ENTRYPOINT/CMD merged with the container's command/args: the agent accepts it and keeps running
    (the shipped pair once gave `node-requests-agent run run`, refused with exit 2)."""
    program = shutil.which(agent.argv[0], path=agent.env["PATH"])
    assert program and Path(program).is_relative_to(sys.prefix), program  # the image's venv: this checkout's
    agent.wait_ready()
    assert agent.alive(), agent.tail()


def test_agent_syncs_its_node_and_exports_every_pod_bound_to_it(cluster: Cluster, agent: AgentContainer,
                                                                module_http_receiver: HttpReceiver) -> None:
    namespace = cluster.create_namespace("rollout")
    for i, cpu in enumerate(("100m", "250m", "1")):
        cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods",
                    for_create(pod(f"app-{i}", containers=[container("app", cpu, "64Mi")]),
                               nodeSelector={"nra-test": "rollout"}))

    def truth() -> dict[str, dict]:
        pods = cluster.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName={NODE}")["items"]
        return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}

    wait_until(lambda: sum(k.startswith(namespace + "/") for k in truth()) == 3, 60, interval=0.25,
               message="three pods bound to the node by kube-scheduler")
    expected = truth()

    def exported() -> dict[str, float] | None:
        """The pods of the newest export, if they are exactly the pods bound to the node."""
        with module_http_receiver.cond:
            newest = module_http_receiver.requests[-1][1] if module_http_receiver.requests else None
        if newest is None:
            return None
        pods = {f"{p.attributes['k8s.namespace.name']}/{p.attributes['k8s.pod.name']}": p.value
                for p in points_of(newest) if p.metric == "pod_or_vm_cpu_requests"}
        assert {p.resource.get("k8s.node.name") for p in points_of(newest)} == {NODE}
        return pods if pods.keys() == expected.keys() else None

    pods = wait_until(exported, 60, interval=0.5, message=f"an OTLP export with exactly the pods on {NODE}")
    assert pods[f"{namespace}/app-2"] == 1.0
    assert pods[f"{agent.pod['metadata']['namespace']}/{agent.pod['metadata']['name']}"] == 0.01  # the agent itself
    assert agent.pods().keys() == expected.keys()
    # With the shipped RBAC, its PDB watch lists and watches too (no refusal, so no backoff and no stale source).
    runtime = wait_until(lambda: (r := agent.runtime())["relists"].get("poddisruptionbudgets") == 1 and r, 30,
                         message="the agent's PDB LIST, allowed by the shipped RBAC")
    assert not [k for k in runtime["requests_failed"] if k.startswith("poddisruptionbudgets/")], runtime


def test_probes_and_memory_limit_from_the_pod_spec_hold(agent: AgentContainer) -> None:
    container = next(c for c in agent.pod["spec"]["containers"] if c["name"] == "agent")
    agent.wait_ready()
    for probe in ("readinessProbe", "livenessProbe"):
        status, body = agent.get(container[probe]["httpGet"]["path"], timeout=container[probe]["timeoutSeconds"])
        assert status == 200, (probe, body)
    from agent.model.quantity import parse_quantity, to_bytes

    limit = to_bytes(parse_quantity(container["resources"]["limits"]["memory"]))
    assert agent.rss_bytes() < limit


# --------------------------------------------------------------------------- least privilege, as the server sees it


def can_i_list(cluster: Cluster, token: str) -> set[tuple[str, str, str, str]]:
    """``kubectl auth can-i --list`` as the token's owner: (resource, non-resource URL, names, verb) per verb."""
    result = cluster.kubectl("auth", "can-i", "--list", token=token)
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    starts = [header.index(title) for title in ("Resources", "Non-Resource URLs", "Resource Names", "Verbs")]
    rules = set()
    for line in lines:
        if not line.strip():
            continue
        resource, url, names, verbs = (line[a:b].strip() for a, b in zip(starts, [*starts[1:], None]))
        rules.update((resource, url, names, verb) for verb in verbs.strip("[]").split())
    return rules


def test_service_account_may_only_list_watch_pods_nodes_and_pdbs(cluster: Cluster, agent: AgentContainer) -> None:
    """Compared with a ServiceAccount bound to nothing (what every authenticated identity may do: discovery,
    self reviews, public trust bundles), the agent's may exactly list and watch pods, nodes and
    poddisruptionbudgets (no get)."""
    namespace = agent.pod["metadata"]["namespace"]
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bound-to-nothing"}})
    baseline_token = cluster.api("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/bound-to-nothing/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}})["status"]["token"]
    baseline = can_i_list(cluster, baseline_token)
    granted = can_i_list(cluster, agent.serviceaccount.token_path.read_text())
    assert granted - baseline == {(r, "[]", "[]", v) for r in ("pods", "nodes", "poddisruptionbudgets.policy")
                                  for v in ("list", "watch")}
    assert baseline <= granted
    assert {verb for _, url, _, verb in baseline if url != "[]"} == {"get"}  # non-resource URLs: discovery only


@pytest.mark.parametrize("verb,resource", [("get", "secrets"), ("list", "secrets"), ("get", "configmaps"),
                                           ("create", "pods"), ("delete", "pods"), ("patch", "nodes"),
                                           ("update", "pods/status"), ("create", "pods/eviction"),
                                           ("create", "serviceaccounts/token"), ("list", "events")])
def test_service_account_is_refused_everything_else(cluster: Cluster, agent: AgentContainer, verb: str,
                                                    resource: str) -> None:
    token = agent.serviceaccount.token_path.read_text()
    result = cluster.kubectl("auth", "can-i", verb, resource, "--all-namespaces", token=token)
    assert (result.returncode, result.stdout.strip()) == (1, "no"), (result.stdout, result.stderr)


def test_server_refuses_the_service_account_reads_and_writes_outside_its_role(cluster: Cluster,
                                                                             agent: AgentContainer) -> None:
    from testkit.cluster import ApiError

    token = agent.serviceaccount.token_path.read_text()
    namespace = agent.pod["metadata"]["namespace"]
    assert cluster.api("GET", f"/api/v1/nodes?fieldSelector=metadata.name={NODE}", token=token)["items"]
    assert cluster.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName={NODE}", token=token)["items"]
    with pytest.raises(ApiError) as refused:  # no get: the agent never reads one object by name
        cluster.api("GET", f"/api/v1/nodes/{NODE}", token=token)
    assert refused.value.status == 403
    attempts = [("GET", "/api/v1/secrets", None), ("GET", f"/api/v1/namespaces/{namespace}/configmaps", None),
                ("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {"x": "y"}}}),
                ("POST", f"/api/v1/namespaces/{namespace}/pods",
                 {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder"},
                  "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}),
                ("DELETE", f"/api/v1/namespaces/{namespace}/pods/{agent.pod['metadata']['name']}", None)]
    for method, path, body in attempts:
        with pytest.raises(ApiError) as refused:
            cluster.api(method, path, body, token=token)
        assert refused.value.status == 403, (method, path, refused.value)
