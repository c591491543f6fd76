"""Who may write which node's numbers, and which series may exist at all (issue 21, items 1, 2 and 8).

The real chain: tokens from the real API server's TokenRequest API (bound to agent pods on
KWOK's Nodes), the shipped Collector config on the built Collector (oidc authenticator against
the API server's discovery and JWKS, the nodeidentity processor, remote write) and Prometheus 3
with its remote-write receiver and the shipped rules. The rogue is a test sender with a real token.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time

import pytest

from testkit.agent_process import AgentProcess, otlp_env
from testkit.cluster import ApiError, write_kubeconfig
from testkit.collector import SHIPPED_CONFIG, Collector, gauge, grpc_variant_config, otlp_request
from testkit.histogram_quantile import quantile_matches_agent
from testkit.waiting import wait_until
from testkit.trust import POD, Pusher, collector_env, remote_write_prometheus, series_count

pytestmark = [pytest.mark.cluster, pytest.mark.collector]

# Every series a push wrote: not what the rule engine derives on its own schedule (recording rules, named with a
# colon, appear an evaluation after their input and end 45 s after it; ALERTS come and go with alert states).
PUSHED = '{__name__=~".+", __name__!~".*:.*|ALERTS|ALERTS_FOR_STATE"}'

@pytest.fixture(scope="module")
def chain(trust_cluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("trust-chain")
    with remote_write_prometheus(work / "prometheus") as prom, \
            Collector(work / "otelcol", SHIPPED_CONFIG, env=collector_env(trust_cluster, f"{prom.url}/api/v1/write")) as otelcol:
        yield trust_cluster, otelcol, prom


@pytest.fixture(scope="module")
def agent_a(chain):
    cluster, _, _ = chain
    pod = cluster.agent_pod("node-a")
    return pod, cluster.pod_token(pod)


def _push(otelcol, token, resource, metrics) -> int:
    return Pusher(token, otelcol.ca_file).post(otelcol.otlp_http_metrics_url, otlp_request(resource, metrics))


def _tampered(token: str, node: str) -> str:
    """The token with its payload's node name changed and the signature kept (what a forger can do)."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["kubernetes.io"]["node"]["name"] = node
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def test_a_push_claiming_another_node_is_written_as_the_tokens_node(chain, agent_a):
    cluster, otelcol, prom = chain
    _, token = agent_a
    resource = {"k8s.node.name": "node-b", "service.name": "rogue", "service.instance.id": "node-b",
                "service.version": "6.6.6", "telemetry.sdk.version": "1.0"}
    assert _push(otelcol, token, resource, [gauge("pod_or_vm_cpu_requests", "{cpu}", [(POD, 1000.0)])]) == 200
    rows = wait_until(lambda: prom.query('pod_or_vm_cpu_requests{k8s_pod_uid="uid-web"}'), timeout=20,
                      message="the push reached Prometheus")
    assert [r["metric"] for r in rows] == [{
        "__name__": "pod_or_vm_cpu_requests", "job": "node-requests-agent", "instance": "node-a",
        "k8s_node_name": "node-a", "k8s_namespace_name": "default", "k8s_pod_name": "web", "k8s_pod_uid": "uid-web",
        "source": "pod_requests"}]
    assert prom.query('{k8s_node_name="node-b"}') == [] and prom.query('{instance="node-b"}') == []


def test_pushes_without_the_agents_pod_bound_token_are_refused(chain, agent_a):
    cluster, otelcol, prom = chain
    pod_a, token_a = agent_a
    metric = [gauge("pod_or_vm_cpu_requests", "{cpu}", [({**POD, "k8s.pod.uid": "uid-refused"}, 7.0)])]
    resource = {"k8s.node.name": "node-b"}
    # Authentication (401): no token, a forged payload, a token for the API server instead of the Collector.
    assert _push(otelcol, None, resource, metric) == 401
    assert _push(otelcol, _tampered(token_a, "node-b"), resource, metric) == 401
    assert _push(otelcol, cluster.pod_token(pod_a, audience=None), resource, metric) == 401
    # A valid Collector-audience token of another ServiceAccount (any pod can get one): refused by nodeidentity (403).
    other = cluster.agent_pod("node-b", name="not-the-agent", service_account="default", namespace="default")
    assert _push(otelcol, cluster.pod_token(other), resource, metric) == 403
    time.sleep(3)
    assert prom.query('{k8s_pod_uid="uid-refused"}') == []


def test_a_flood_of_invented_names_and_attributes_creates_no_series(chain, agent_a):
    cluster, otelcol, prom = chain
    _, token = agent_a
    # One real series first, so the "before" count includes everything this push may legitimately touch.
    real = [gauge("pod_or_vm_mem_requests", "By", [(POD, 2.0**30)])]
    assert _push(otelcol, token, {"k8s.node.name": "node-a"}, real) == 200
    wait_until(lambda: prom.query('pod_or_vm_mem_requests{k8s_pod_uid="uid-web"}'), timeout=20)
    before = series_count(prom, PUSHED)
    def flood(n: int) -> tuple[dict, list]:
        invented_resource = {f"invented.resource.{i}": f"v{i}" for i in range(n)}
        invented_points = {**POD, **{f"invented_{i}": f"v{i}" for i in range(n)}}
        names = [gauge(f"pod_or_vm_cpu_requests_{i}", "{cpu}", [(POD, 1.0)]) for i in range(2 * n)]
        return ({"k8s.node.name": "node-a", **invented_resource},
                [gauge("pod_or_vm_mem_requests", "By", [(invented_points, 2.0**30)]), *names])

    # Ten thousand of each is more than an honest push's items (issue 38): refused before it is decoded.
    assert _push(otelcol, token, *flood(10_000)) == 413
    # Within the items it is read, and the allow-list keeps it out.
    assert _push(otelcol, token, *flood(1_000)) == 200
    # Many pods' worth of one allowed metric with an invented uid each would be new series: that is what
    # the token bounds (one node), not the allow-list. Here only invented names and keys are sent.
    time.sleep(5)
    after = series_count(prom, PUSHED)
    print(f"series before the flood {before}, after {after}")
    assert after == before
    assert not prom.query('{__name__=~"pod_or_vm_cpu_requests_.+"}')
    (row,) = prom.query('pod_or_vm_mem_requests{k8s_pod_uid="uid-web"}')
    assert not [k for k in row["metric"] if k.startswith("invented")]


def test_rolling_upgrade_two_versions_never_double_count(chain, tmp_path):
    """Old and new agent of one node push the same pods for a while; the recording rule never exceeds the truth."""
    cluster, otelcol, _ = chain
    rules = SHIPPED_CONFIG.parent / "prometheus" / "rules.yaml"
    with remote_write_prometheus(tmp_path / "prometheus", rule_files=[rules]) as prom, \
            Collector(tmp_path / "otelcol", SHIPPED_CONFIG, env=collector_env(cluster, f"{prom.url}/api/v1/write")) as oc:
        old_pod, new_pod = cluster.agent_pod("node-b", name="agent-old"), cluster.agent_pod("node-b", name="agent-new")
        old, new = Pusher(cluster.pod_token(old_pod), oc.ca_file), Pusher(cluster.pod_token(new_pod), oc.ca_file)
        pods = [({"k8s.namespace.name": "default", "k8s.pod.name": f"p{i}", "k8s.pod.uid": f"u{i}", "source": "pod_requests"},
                 0.5) for i in range(4)]
        truth = sum(v for _, v in pods)
        version = {"old": {"service.version": "0.1.0", "telemetry.sdk.version": "1.45.1"},
                   "new": {"service.version": "0.2.0", "telemetry.sdk.version": "1.45.2"}}
        start = time.time()
        for step in range(20):  # old alone, both (the overlap), new alone: 1 s apart, as with 1 s intervals
            senders = [("old", old)] if step < 5 else [("old", old), ("new", new)] if step < 15 else [("new", new)]
            for name, sender in senders:
                request = otlp_request({"k8s.node.name": "node-b", **version[name]},
                                       [gauge("pod_or_vm_cpu_requests", "{cpu}", pods)])
                request.resource_metrics[0].scope_metrics[0].scope.version = version[name]["service.version"]
                assert sender.post(oc.otlp_http_metrics_url, request) == 200
            time.sleep(1)
        wait_until(lambda: prom.query('node:pod_or_vm_cpu_requests:sum{k8s_node_name="node-b"}'), timeout=20)
        window = f"{int(time.time() - start) + 5}s"
        series = prom.query('count by (k8s_node_name) (count_over_time(pod_or_vm_cpu_requests{k8s_node_name="node-b"}'
                            f'[{window}]))')
        assert float(series[0]["value"][1]) == len(pods)  # one series per pod across both versions
        (peak,) = prom.query(f'max_over_time(node:pod_or_vm_cpu_requests:sum{{k8s_node_name="node-b"}}[{window}])')
        print(f"rolling upgrade: per-node sum peak {peak['value'][1]}, truth {truth}")
        assert float(peak["value"][1]) == truth


@pytest.mark.parametrize("protocol, node", [("http/protobuf", "node-a"), ("grpc", "node-b")])
def test_the_real_agent_passes_with_its_token_and_every_metric_it_sends_arrives(chain, tmp_path, protocol, node):
    """The allow-list and the token path with the agent itself: its API token lists only its own node."""
    cluster, otelcol, prom = chain
    pod = cluster.agent_pod(node, name=f"agent-real-{protocol.split('/')[0]}")
    token_dir = tmp_path / "collector-token"
    token_dir.mkdir()
    (token_dir / "token").write_text(cluster.pod_token(pod))
    api_token = cluster.pod_token(pod, audience=None)

    class _Api:  # AgentProcess asks its API for a kubeconfig: the agent pod's own token
        @staticmethod
        def kubeconfig(path):
            return str(write_kubeconfig(path, cluster.server, cluster.pki, "agent", token=api_token))

    # The shipped Collector takes OTLP/HTTP only; for gRPC, one with docs/deployment.md's gRPC receiver added.
    own = (Collector(tmp_path / "otelcol", grpc_variant_config(tmp_path / "otelcol"),
                     env=collector_env(cluster, f"{prom.url}/api/v1/write")) if protocol == "grpc" else None)
    with own or contextlib.nullcontext(otelcol) as otelcol:
        endpoint = otelcol.otlp_grpc_endpoint if protocol == "grpc" else otelcol.otlp_http_endpoint
        tls = {"OTEL_EXPORTER_OTLP_CERTIFICATE": otelcol.ca_file} if protocol != "grpc" else {}
        _agent_sends_everything(prom, node, protocol, {**otlp_env(endpoint, protocol), **tls,
                                                       "NRA_OTLP_TOKEN_FILE": str(token_dir / "token")}, _Api(), tmp_path)


def _agent_sends_everything(prom, node, protocol, env, api, tmp_path) -> None:
    """The real agent pushes with ``env`` until every metric it sends has arrived, each labelled with its node."""
    with AgentProcess(api, tmp_path / "agent", node, env, 1.0) as agent:
        names = wait_until(lambda: (n := prom.names(f'{{job="node-requests-agent",instance="{node}"}}')) >= {
            "node_requests_agent_exports_total", "node_requests_node_cpu_cores", "process_memory_usage"} and n,
            timeout=30, message="the agent's series in Prometheus")
        print(f"agent series names in Prometheus ({protocol}): {len(names)}")
        successes = f'node_requests_agent_exports_total{{result="success",instance="{node}"}}'
        first = float(wait_until(lambda: prom.query(successes), timeout=10)[0]["value"][1])
        wait_until(lambda: float(prom.query(successes)[0]["value"][1]) > first + 2, timeout=20,
                   message=f"this agent's exports keep arriving over {protocol}")
        assert not prom.query(f'node_requests_agent_export_failures_total{{instance="{node}"}}')
        assert not prom.query(f'node_requests_agent_api_errors_total{{instance="{node}"}}')
        assert {"node_requests_agent_synced", "node_requests_agent_kubernetes_info",
                "node_requests_agent_workqueue_queue_duration_seconds_bucket"} <= names
        # The histograms through the allow-list: one OTLP histogram each, whose buckets histogram_quantile reads.
        quantile_matches_agent(prom, agent, f'instance="{node}"')
        # Every label of every series is one the allow-list names for it (and the node from the token).
        for row in prom.query(f'{{job="node-requests-agent",instance="{node}"}}'):
            assert row["metric"]["k8s_node_name"] == node


def test_the_agents_token_lists_only_its_own_nodes_pods_and_node(trust_cluster):
    """daemonset/apiserver/authorization-config.yaml against the real API server (item 8)."""
    pod = trust_cluster.agent_pod("node-a", name="agent-rbac")
    token = trust_cluster.pod_token(pod, audience=None)

    bodies: dict[str, str] = {}

    def status(path: str) -> int:
        try:
            trust_cluster.api("GET", path, token=token)
            return 200
        except ValueError:  # a watch answers JSON lines: served
            return 200
        except ApiError as error:
            bodies[path] = error.body
            return error.status

    # Why a refusal is 500 and not 403 (k8s.io/apiserver v0.37.2): the webhook authorizer answers a request it
    # matches but cannot reach with failurePolicy's decision *and* the connection error; the union of authorizers
    # stops at that Deny and hands the error on; the authorization filter serves 403 only for a refusal without an
    # error and turns one with an error into responsewriters.InternalError: plain text 500, nothing served. No
    # built-in authorizer can do better: Node, RBAC, ABAC and AlwaysAllow never deny, AlwaysDeny cannot be scoped,
    # and only a webhook that answers (a server to run) gives a clean 403.
    unreachable = f"dial tcp 127.0.0.1:{trust_cluster.deny_webhook_port}: connect: connection refused"

    assert status("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a") == 200
    assert status("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&watch=true&timeoutSeconds=1") == 200
    assert status("/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a") == 200
    # PodDisruptionBudgets are read cluster-wide by design (they cover pods by label, wherever they run): the webhook
    # matches only pod and Node reads, so RBAC's rule serves them; a get is still refused (403, RBAC has none).
    assert status("/apis/policy/v1/poddisruptionbudgets") == 200
    assert status("/apis/policy/v1/poddisruptionbudgets?watch=true&timeoutSeconds=1") == 200
    assert status("/apis/policy/v1/namespaces/default/poddisruptionbudgets/any") == 403
    own = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}"
    for cross_node in ("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-b", "/api/v1/pods",
                       "/api/v1/namespaces/default/pods", "/api/v1/pods?labelSelector=app%3Dx",
                       "/api/v1/pods?fieldSelector=spec.nodeName%21%3Dnode-a",
                       "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-b&watch=true&timeoutSeconds=1",
                       "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-b", "/api/v1/nodes",
                       # a get has no field selector either: matched, refused the same way (RBAC has no get rule)
                       own, "/api/v1/nodes/node-a"):
        assert status(cross_node) == 500, (cross_node, bodies.get(cross_node))
        body = bodies[cross_node].strip()
        # http.Error's plain text, the URI HTML-escaped by the apiserver's sanitizer, then the webhook's error.
        assert body.startswith(f'Internal Server Error: "{cross_node.replace("&", "&amp;")}": '), body
        assert body.endswith(unreachable), body
    print("refusal body:", bodies["/api/v1/pods"])
    # What the webhook does not match goes on to RBAC, whose refusal is the usual 403 Status.
    assert status("/api/v1/namespaces/default/secrets") == 403
    assert '"reason":"Forbidden"' in bodies["/api/v1/namespaces/default/secrets"]
    assert "Failed to make webhook authorizer request" in trust_cluster.component("kube-apiserver").log.read_text()
    # Others are unaffected: the admin still lists everything.
    assert trust_cluster.api("GET", "/api/v1/pods")["items"]
