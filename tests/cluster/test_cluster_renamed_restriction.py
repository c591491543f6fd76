"""Issue 29 item 5 against the real API server: the own-node restriction follows a renamed Helm release.

``helm install nra ... --namespace monitoring`` into the real kube-apiserver 1.37, then what NOTES.txt tells the
operator, word for word: its two ``kubectl get configmap`` lines write the API server's files, and kube-apiserver is
restarted with ``--authorization-config`` in place of ``--authorization-mode`` (the only test-side change to those
files is the deny webhook's address and path, a free loopback port and the test's folder, as testkit/trust.py
does for the shipped ones). Then a token of the release's ServiceAccount bound to the DaemonSet's pod on node-a, as
the kubelet would get it, lists its own node's pods and is refused node-b's. Afterwards the same token against the
fixed-name file daemonset/apiserver/ shipped before (the default ServiceAccount's) is served everything: that is
what the release got before, and why the refusal above is the rendered configuration's doing.

The time from ``helm install`` to the first refused cross-node read is printed and kept in docs/testing.md.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from testkit.cluster import ApiError, Cluster
from testkit.helm import CHART, Helm, built_helm
from testkit.kwok import Kwok
from testkit.manifests import AUTHORIZATION, restricted_user
from testkit.repo import REPO
from testkit.trust import localized_authorization_config, pod_token
from testkit.waiting import wait_until

pytestmark = pytest.mark.cluster

RELEASE = "nra"
NAMESPACE = "monitoring"
SERVICE_ACCOUNT = f"{RELEASE}-node-requests-agent"
OWN, OTHER = "restrict-node-a", "restrict-node-b"


@pytest.fixture(scope="module")
def helm(tmp_path_factory) -> Helm:
    return built_helm(tmp_path_factory.mktemp("helm-home"))


def restart_with_authorization_config(cluster: Cluster, config: Path) -> float:
    """kube-apiserver restarted with ``config`` in place of its --authorization-mode (or of a previous config);
    returns the seconds it took to serve again."""
    apiserver = cluster.component("kube-apiserver")
    apiserver.argv = [a for a in apiserver.argv if not a.startswith(("--authorization-mode=", "--authorization-config="))]
    apiserver.argv.append(f"--authorization-config={config}")
    started = time.monotonic()
    return cluster.restart_apiserver() - started


def answer(cluster: Cluster, path: str, token: str) -> tuple[int, str]:
    """The API server's status for a GET with ``token`` and, for a refusal, its body."""
    try:
        cluster.api("GET", path, token=token)
        return 200, ""
    except ApiError as error:
        return error.status, error.body


def test_a_renamed_release_is_refused_a_cross_node_list_of_pods(cluster: Cluster, kwok: Kwok, helm: Helm,
                                                                 tmp_path: Path) -> None:
    for node in (OWN, OTHER):
        kwok.add_node(node, cpu="4", memory="8Gi")
    kwok.wait_ready([OWN, OTHER])
    namespace = yaml.safe_load((REPO / "daemonset" / "namespace.yaml").read_text())
    namespace["metadata"]["name"] = NAMESPACE
    applied = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(namespace))
    assert applied.returncode == 0, applied.stderr

    started = time.monotonic()
    installed = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, kubeconfig=cluster.admin_kubeconfig)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    install_seconds = time.monotonic() - started
    notes = installed.stdout.split("NOTES:", 1)[1]
    user = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
    assert user in notes, notes

    # NOTES.txt's lines, run as printed in the control-plane folder (here the test's), with kubectl as the admin.
    control_plane = tmp_path / "etc-kubernetes-node-requests-agent"
    control_plane.mkdir()
    commands = [line.strip() for line in notes.splitlines() if " get configmap " in line]
    assert len(commands) == 2, f"NOTES.txt does not say how to get the API server's files:\n{notes}"
    env = {**os.environ, "KUBECONFIG": str(cluster.admin_kubeconfig),
           "PATH": f"{cluster.kubectl_binary.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=control_plane, env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, (command, done.stderr)
    files = {path.name: path.read_text() for path in control_plane.iterdir()}
    assert set(files) == {"authorization-config.yaml", "own-node-deny.kubeconfig"}
    assert restricted_user(files["authorization-config.yaml"]) == user
    apiserver_files = tmp_path / "apiserver"
    apiserver_files.mkdir()
    config, deny_port = localized_authorization_config(files["authorization-config.yaml"],
                                                       files["own-node-deny.kubeconfig"], apiserver_files)
    restart_seconds = restart_with_authorization_config(cluster, config)

    def release_pod_on_own_node() -> dict | None:
        pods = cluster.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods?fieldSelector=spec.nodeName%3D{OWN}")["items"]
        return next((p for p in pods if not p["metadata"].get("deletionTimestamp")), None)

    pod = wait_until(release_pod_on_own_node, 90, interval=0.2, message=f"the DaemonSet's pod on {OWN}")
    assert pod["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
    token = pod_token(cluster, pod, audience=None)
    cross_node = f"/api/v1/pods?fieldSelector=spec.nodeName%3D{OTHER}"
    status, body = answer(cluster, cross_node, token)
    refused_after = time.monotonic() - started
    assert status == 500, f"a cross-node LIST by {user} was answered {status}: the restriction does not apply to it"
    assert body.strip().endswith(f"dial tcp 127.0.0.1:{deny_port}: connect: connection refused"), body
    print(f"renamed release ({user}): helm install {install_seconds:.1f} s, API server restart with the rendered "
          f"configuration {restart_seconds:.1f} s; from install to the first refused cross-node read "
          f"{refused_after:.1f} s")

    # What the restriction leaves alone: the agent's own node (RBAC grants it), and everybody else.
    assert answer(cluster, f"/api/v1/pods?fieldSelector=spec.nodeName%3D{OWN}", token)[0] == 200
    assert answer(cluster, f"/api/v1/nodes?fieldSelector=metadata.name%3D{OWN}", token)[0] == 200
    for also_refused in ("/api/v1/pods", f"/api/v1/namespaces/{NAMESPACE}/pods",
                         f"/api/v1/nodes?fieldSelector=metadata.name%3D{OTHER}"):
        assert answer(cluster, also_refused, token)[0] == 500, also_refused
    assert {p["spec"].get("nodeName") for p in cluster.api("GET", "/api/v1/pods")["items"]} >= {OWN, OTHER}

    # The fixed-name file shipped before (the default ServiceAccount's) does not restrict this release at all.
    fixed, _ = localized_authorization_config((AUTHORIZATION / "authorization-config.yaml").read_text(),
                                              (AUTHORIZATION / "own-node-deny.kubeconfig").read_text(),
                                              tmp_path)
    restart_with_authorization_config(cluster, fixed)
    assert answer(cluster, cross_node, token)[0] == 200
