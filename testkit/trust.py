"""The shipped trust path for tests: a control plane the Collector can verify tokens against.

``TrustCluster`` is the real control plane of testkit/cluster.py with three changes a real cluster
has too: its ServiceAccount issuer is its own URL (so the Collector's oidc authenticator can fetch
the discovery document and JWKS from it, over loopback), the shipped
``daemonset/apiserver/authorization-config.yaml`` replaces ``--authorization-mode`` (its deny
webhook pointed at a loopback port nothing listens on), and the shipped agent RBAC and
otel-config/oidc-discovery-rbac.yaml are applied. Agent "pods" are real Pod objects bound to
KWOK's Nodes (KWOK reports them Running, no container runs); their tokens come from the real
TokenRequest API, bound to the pod, so they carry the node claim exactly as a kubelet-projected token does.

``Pusher`` is the test's OTLP/HTTP sender (a real agent is used where the agent itself is the
subject): it sends what a rogue or a second agent version would, with the token it is given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from components.kubernetes import etcd_bin, kubernetes_bin
from testkit.repo import REPO
from testkit.cluster import NEWEST, Cluster, free_ports
from testkit.cluster_client import ClusterClient
from testkit.collector import SCRAPE_CONFIG, Prometheus, post_otlp
from testkit.kwok import Kwok

__all__ = ["AGENT_NAMESPACE", "AGENT_SERVICE_ACCOUNT", "AUDIENCE", "Pusher", "TrustCluster", "collector_env",
           "localized_authorization_config", "pod_token", "remote_write_prometheus", "running_trust_cluster",
           "series_count", "trust_cluster", "POD"]

AUTHORIZATION_CONFIG = REPO / "daemonset" / "apiserver" / "authorization-config.yaml"
AGENT_NAMESPACE = "node-requests-agent"
AGENT_SERVICE_ACCOUNT = "node-requests-agent"
AUDIENCE = yaml.safe_load((REPO / "daemonset" / "daemonset.yaml").read_text())["spec"]["template"]["spec"][
    "volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["audience"]


class TrustCluster(Cluster):
    """A control plane whose issuer is reachable and whose authorization is the shipped configuration."""

    def _apiserver(self):
        component = super()._apiserver()
        replaced = ("--service-account-issuer=", "--api-audiences=", "--authorization-mode=")
        component.argv = [a for a in component.argv if not a.startswith(replaced)]
        component.argv += [f"--service-account-issuer={self.server}",
                           f"--service-account-jwks-uri={self.server}/openid/v1/jwks",
                           f"--api-audiences={self.server}",
                           f"--authorization-config={self._authorization_config()}"]
        return component

    def _authorization_config(self) -> Path:
        """The shipped file, its deny webhook's kubeconfig pointed at a loopback port nothing listens on."""
        path, closed = localized_authorization_config(
            AUTHORIZATION_CONFIG.read_text(), (REPO / "daemonset" / "apiserver" / "own-node-deny.kubeconfig").read_text(),
            self.workdir)
        #: The port the deny webhook's kubeconfig names, where nothing listens.
        self.deny_webhook_port = closed
        return path

    def install_shipped_rbac(self) -> None:
        """The agent's Namespace, ServiceAccount and ClusterRole(Binding), and the issuer-discovery binding."""
        for args in (["-f", str(REPO / "daemonset" / "namespace.yaml")],
                     ["-n", AGENT_NAMESPACE, "-f", str(REPO / "daemonset" / "rbac.yaml")],
                     ["-f", str(REPO / "otel-config" / "oidc-discovery-rbac.yaml")]):
            done = self.kubectl("apply", *args)
            assert done.returncode == 0, done.stderr

    def agent_pod(self, node: str, name: str | None = None, service_account: str = AGENT_SERVICE_ACCOUNT,
                  namespace: str = AGENT_NAMESPACE) -> dict:
        """A pod of the agent's ServiceAccount bound to ``node`` (as the DaemonSet controller would make it)."""
        name = name or f"agent-{node}"
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                "spec": {"nodeName": node, "serviceAccountName": service_account,
                         "automountServiceAccountToken": False,
                         "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                             "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [{"name": "agent", "image": "node-requests-agent:0.1.0",
                                         "securityContext": {"allowPrivilegeEscalation": False,
                                                             "capabilities": {"drop": ["ALL"]}}}]}}
        return self.api("POST", f"/api/v1/namespaces/{namespace}/pods", body)

    def pod_token(self, pod: dict, audience: str | None = AUDIENCE, seconds: int = 3600) -> str:
        return pod_token(self, pod, audience, seconds)


def localized_authorization_config(config_text: str, deny_kubeconfig: str, workdir: Path) -> tuple[Path, int]:
    """An authorization configuration (daemonset/apiserver/'s files, or the ConfigMap rendered for a release) as a
    test's kube-apiserver takes it: its deny webhook's kubeconfig written into ``workdir`` and pointed at a free
    loopback port nothing listens on (not the shipped 127.0.0.1:1: no fixed ports). Returns the path and the port."""
    (closed,) = free_ports(1)
    kubeconfig = workdir / "own-node-deny.kubeconfig"
    kubeconfig.write_text(deny_kubeconfig.replace("https://127.0.0.1:1", f"https://127.0.0.1:{closed}"))
    config = yaml.safe_load(config_text)
    for authorizer in config["authorizers"]:
        if authorizer["type"] == "Webhook":
            authorizer["webhook"]["connectionInfo"]["kubeConfigFile"] = str(kubeconfig)
    path = workdir / "authorization-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, closed


def pod_token(client: ClusterClient, pod: dict, audience: str | None = AUDIENCE, seconds: int = 3600) -> str:
    """A token for ``pod``'s ServiceAccount bound to the pod (TokenRequest, as the kubelet asks for one): it names
    the pod's node in the user's extra ``authentication.kubernetes.io/node-name``."""
    meta = pod["metadata"]
    spec: dict = {"expirationSeconds": seconds,
                  "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}
    if audience is not None:
        spec["audiences"] = [audience]
    review = client.api("POST", f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/"
                                f"{pod['spec']['serviceAccountName']}/token",
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
    return review["status"]["token"]


@contextlib.contextmanager
def running_trust_cluster(workdir: Path, nodes: Sequence[str] = ("node-a", "node-b")) -> Iterator[TrustCluster]:
    """Such a control plane in ``workdir`` with the shipped RBAC and KWOK's Ready ``nodes``, stopped on leaving (the
    session's fixture below, and the benchmarks that need the shipped Collector's token check)."""
    kubernetes_bin(NEWEST)
    etcd_bin()
    control_plane = TrustCluster(workdir)
    kwok = Kwok(control_plane, workdir=control_plane.workdir / "kwok")
    try:
        control_plane.start()
        control_plane.install_shipped_rbac()
        kwok.start()
        for node in nodes:
            kwok.add_node(node, cpu="4", memory="16Gi")
        kwok.wait_ready(list(nodes))
        yield control_plane
    finally:
        kwok.stop()
        control_plane.stop()


@pytest.fixture(scope="session")
def trust_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrustCluster]:
    """One such control plane per session, with KWOK's nodes node-a and node-b."""
    with contextlib.ExitStack() as stack:
        try:
            control_plane = stack.enter_context(running_trust_cluster(tmp_path_factory.mktemp("trust-cluster")))
        except (RuntimeError, AssertionError) as error:
            pytest.fail(str(error), pytrace=False)
        yield control_plane
        if request.session.testsfailed:
            print(f"\ntrust control-plane logs (session had failures):\n{control_plane.logs_tail()}")


def collector_env(cluster: TrustCluster, remote_write_url: str) -> dict[str, str]:
    """What the Deployment sets, for this cluster and this Prometheus."""
    return {"OIDC_ISSUER_URL": cluster.server, "OIDC_ISSUER_CA_PATH": str(cluster.pki.crt("ca")),
            "PROMETHEUS_REMOTE_WRITE_URL": remote_write_url}


class Pusher:
    """POSTs OTLP/HTTP protobuf with a bearer token; returns the HTTP status."""

    def __init__(self, token: str | None, ca_file: str | None = None) -> None:
        """``ca_file``: the CA of an https Collector's certificate (``Collector.ca_file``)."""
        self.token = token
        self.ca_file = ca_file

    def post(self, url: str, request: ExportMetricsServiceRequest, timeout: float = 10.0) -> int:
        return post_otlp(url, request, timeout, token=self.token, ca_file=self.ca_file)


def series_count(prom, selector: str = '{__name__=~".+"}') -> int:
    rows = prom.query(f"count({selector})")
    return int(float(rows[0]["value"][1])) if rows else 0



# A pod's point attributes as the agent sends them, for test pushes.
POD = {"k8s.namespace.name": "default", "k8s.pod.name": "web", "k8s.pod.uid": "uid-web", "source": "pod_requests"}
SHIPPED_STORAGE = {"storage": yaml.safe_load(SCRAPE_CONFIG.read_text())["storage"]}


def remote_write_prometheus(workdir, rule_files=None, targets=(), host: str = "127.0.0.1"):
    """Prometheus 3 as the shipped Collector writes into it: remote-write receiver, the shipped storage section."""
    return Prometheus(workdir, list(targets), rule_files=rule_files,
                      extra_flags=["--web.enable-remote-write-receiver"], extra_config=SHIPPED_STORAGE, host=host)
