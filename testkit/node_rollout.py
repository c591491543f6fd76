"""The shipped manifests rolled out on the real node of node_cluster.py, for every `node` test module.

``prometheus``: Prometheus 3 with the remote-write receiver (what the shipped Collector writes into), listening
on the node's address inside the test's namespace so the Collector pods reach it. ``rollout``: the two Namespaces,
then otel-config/tls/make-secrets.sh as docs/deployment.md has an operator run it (the Collector's serving
certificate and the agents' CA, as Secrets), then `kubectl apply -k` of an overlay in the test's tmp dir over the
unchanged otel-config/ that sets only the Deployment's two ADAPT values, as an operator would, then of daemonset/ as
shipped (its Collector token lives the API server's minimum, 600 s, so the real kubelet rotates it during the run);
both wait until every pod is Ready through its own probes. Both fixtures are per test module, like the node they run
on; the rollout's figures go into ``node.timings``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from testkit.collector import Prometheus
from testkit.node_cluster import NODE_IP, Node
from testkit.repo import REPO

__all__ = ["AGENT_NS", "AGENT_SELECTOR", "COLLECTOR_AUDIENCE", "COLLECTOR_NS", "COLLECTOR_SELECTOR",
           "MAKE_TLS_SECRETS", "ROTATED_TOKEN_SECONDS", "SHIPPED_DAEMONSET", "collector_overlay", "make_tls_secrets",
           "prometheus", "roll_out", "roll_out_collector", "rollout", "shipped_export_interval"]

AGENT_NS, AGENT_SELECTOR = "node-requests-agent", "app.kubernetes.io/name=node-requests-agent"
COLLECTOR_NS, COLLECTOR_SELECTOR = "node-requests-collector", "app.kubernetes.io/name=otel-collector"
SHIPPED_DAEMONSET = next(d for d in yaml.safe_load_all((REPO / "daemonset" / "daemonset.yaml").read_text())
                         if d and d.get("kind") == "DaemonSet")
COLLECTOR_AUDIENCE = "node-requests-collector"
# The shipped token lifetime: the shortest the API server issues (TokenRequest validation: at least 10 minutes); the
# kubelet's token manager (pkg/kubelet/token/token_manager.go) renews once less than 20 % of it is left, minus up to
# 10 s of jitter, so it rotates within the suite.
ROTATED_TOKEN_SECONDS = next(
    s["serviceAccountToken"]["expirationSeconds"] for v in SHIPPED_DAEMONSET["spec"]["template"]["spec"]["volumes"]
    for s in v.get("projected", {}).get("sources", []) if s.get("serviceAccountToken", {}).get("audience")
    == COLLECTOR_AUDIENCE)
MAKE_TLS_SECRETS = REPO / "otel-config" / "tls" / "make-secrets.sh"


def shipped_export_interval() -> float:
    """The DaemonSet's OTEL_METRIC_EXPORT_INTERVAL (milliseconds), else the agent's own default."""
    from agent.config import SETTINGS

    env = {e["name"]: e.get("value") for e in SHIPPED_DAEMONSET["spec"]["template"]["spec"]["containers"][0]["env"]}
    interval = env.get("OTEL_METRIC_EXPORT_INTERVAL")
    return float(interval) / 1000 if interval else SETTINGS["export_interval"].default


@pytest.fixture(scope="module")
def prometheus(node_cluster: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus 3 receiving the shipped Collector's remote write, on the node's address."""
    from testkit.trust import remote_write_prometheus

    with remote_write_prometheus(tmp_path_factory.mktemp("prometheus"), host=NODE_IP) as server:
        yield server


def collector_overlay(node: Node, prometheus: Prometheus, workdir: Path) -> str:
    """What an operator adapts (the lines marked ADAPT in collector-deployment.yaml), as a kustomize overlay over
    the shipped otel-config/ (which stays unchanged): the cluster's ServiceAccount issuer, read from its discovery
    document as docs/deployment.md says, and the Prometheus to write into."""
    issuer = node.cluster.api("GET", "/.well-known/openid-configuration")["issuer"]
    env = [{"name": "OIDC_ISSUER_URL", "value": issuer},
           {"name": "PROMETHEUS_REMOTE_WRITE_URL", "value": f"{prometheus.url}/api/v1/write"}]
    patch = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "otel-collector"},
             "spec": {"template": {"spec": {"containers": [{"name": "collector", "env": env}]}}}}
    (workdir / "kustomization.yaml").write_text(json.dumps({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(REPO / "otel-config", workdir)],
        "patches": [{"patch": json.dumps(patch)}]}, indent=1))
    return str(workdir)


def make_tls_secrets(node: Node, directory: Path) -> Path:
    """otel-config/tls/make-secrets.sh as an operator runs it, with the built kubectl as admin: the Collector's
    serving certificate (Secret otel-collector-tls) and its CA for the agents (Secret otel-collector-ca); its files
    (ca.crt, ca.key, tls.crt, tls.key) stay in ``directory``."""
    made = subprocess.run([str(MAKE_TLS_SECRETS), str(directory)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KUBECTL": str(node.cluster.kubectl_binary),
                               "KUBECONFIG": str(node.cluster.admin_kubeconfig)})
    assert made.returncode == 0, made.stdout + made.stderr
    return directory


@pytest.fixture(scope="module")
def rollout(node_cluster: Node, prometheus: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The Secrets of make-secrets.sh, then the shipped manifests applied, the Collector's through an overlay that
    sets only its ADAPT values: ``{"collector": [its Ready pods], "agent": the agent's Ready pod, "tls": the folder
    with the CA and the serving certificate}``."""
    return roll_out(node_cluster, prometheus, tmp_path_factory.mktemp)


def roll_out_collector(node: Node, prometheus: Prometheus, make_dir: Callable[[str], Path]) -> tuple[list[dict], Path]:
    """The first half of ``roll_out``: both Namespaces, the TLS Secrets and the Collector, Ready; (its pods, the TLS
    folder). The agent is then installed the way a test chooses (kustomize, a chart from a registry)."""
    started = time.monotonic()
    result = node.cluster.kubectl("apply", "-f", str(REPO / "otel-config" / "namespace.yaml"),
                                  "-f", str(REPO / "daemonset" / "namespace.yaml"))
    assert result.returncode == 0, result.stderr
    tls = make_tls_secrets(node, make_dir("collector-tls"))
    overlay = collector_overlay(node, prometheus, make_dir("otel-overlay"))
    result = node.cluster.kubectl("apply", "-k", overlay)
    assert result.returncode == 0, result.stderr
    deployment = node.cluster.api("GET", f"/apis/apps/v1/namespaces/{COLLECTOR_NS}/deployments/otel-collector")
    replicas = deployment["spec"]["replicas"]
    assert replicas == 2, replicas  # as shipped; one node is one hostname domain, so the spread never blocks
    collector = node.wait_pods_ready(COLLECTOR_NS, COLLECTOR_SELECTOR, replicas, 180)
    node.timings["collector_apply_to_ready_s"] = time.monotonic() - started
    return collector, tls


def roll_out(node: Node, prometheus: Prometheus, make_dir: Callable[[str], Path],
             daemonset: Path = REPO / "daemonset") -> dict:
    """What ``rollout`` does, with the agent's kustomization ``daemonset`` (the shipped one, or an overlay over it);
    ``make_dir(name)`` gives a fresh folder."""
    collector, tls = roll_out_collector(node, prometheus, make_dir)
    started = time.monotonic()
    result = node.cluster.kubectl("apply", "-k", str(daemonset))
    assert result.returncode == 0, result.stderr
    assert "PodSecurity" not in result.stderr, result.stderr
    agent = node.wait_pods_ready(AGENT_NS, AGENT_SELECTOR, 1, 180)[0]
    node.timings["agent_apply_to_ready_s"] = time.monotonic() - started
    print(f"\nnode figures: {json.dumps(node.timings, indent=1)}")
    return {"collector": collector, "agent": agent, "tls": tls}
