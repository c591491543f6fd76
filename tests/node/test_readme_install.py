"""The README's install, run verbatim on a real node from an empty cluster to the first series (issue 39).

`python -m pytest -m node tests/node/test_readme_install.py -s`. The blocks the README marks (```` ```sh
install-collector ````, then ```` install-helm ```` or ```` install-kustomize ````: testkit/readme_install.py) run with
bash in a copy of the clone's shipped folders, with kubectl and helm of the component cache on PATH, the admin
kubeconfig, and the operator's variables set to this cluster's values: ``OIDC_ISSUER_URL`` as the README's settings
block (```` install-variables ````) finds it with its own command (checked against the discovery document),
``PROMETHEUS_REMOTE_WRITE_URL`` a fresh Prometheus 3 on the node's address for each path, and ``REGISTRY``
the registry part of the names the suite's images carry in the node's containerd (UNQUALIFIED_REGISTRY: they are
imported as ``node-requests-agent:0.1.0`` and ``otelcol-nra:0.165.1-nra``, so the kubelet finds them present; the
pull from a real registry is test_node_registry.py's). The node is this module's own, nothing of the project on it;
each path starts by checking that and ends by removing what it installed, namespaces and cluster-scoped objects
included. Each path prints its install-to-first-series time (the figure is in docs/testing.md).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from components.image import AGENT_IMAGE, COLLECTOR_IMAGE
from testkit.helm import built_helm
from testkit.node_cluster import NODE_IP, UNQUALIFIED_REGISTRY, Node
from testkit.node_rollout import AGENT_NS, AGENT_SELECTOR, COLLECTOR_NS, COLLECTOR_SELECTOR
from testkit.readme_install import README, SETTINGS, install_blocks, install_script, run_install, shipped_copy
from testkit.trust import remote_write_prometheus
from testkit.waiting import wait_until

pytestmark = pytest.mark.node

#: What containerd's CRI calls an image imported without a registry (node_cluster.py imports the suite's so).
REGISTRY = UNQUALIFIED_REGISTRY
#: The objects of ours outside the two namespaces (the agent's RBAC, the Collector's issuer-discovery binding,
#: kustomize's release policy).
CLUSTER_SCOPED = ("/apis/rbac.authorization.k8s.io/v1/clusterroles",
                  "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                  "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
                  "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings")


def ours(node: Node) -> list[str]:
    """What of the project is in the cluster: its namespaces, and cluster-scoped objects with its names."""
    found = [f"namespace {ns}" for ns in (AGENT_NS, COLLECTOR_NS) if node.cluster.exists(f"/api/v1/namespaces/{ns}")]
    for path in CLUSTER_SCOPED:
        found += [f"{path.rsplit('/', 1)[1]} {item['metadata']['name']}"
                  for item in node.cluster.api("GET", path)["items"]
                  if item["metadata"]["name"].startswith(("node-requests", "otel-collector"))]
    return found


def uninstall(node: Node, workdir: Path, env: dict[str, str], path: str) -> None:
    """Remove what the path installed (by the shipped folders, which name the same objects as the overlays, so this
    works whichever block stopped), then wait until nothing of it is left."""
    agent = (["helm", "uninstall", "node-requests-agent", "--namespace", AGENT_NS] if path == "helm"
             else ["kubectl", "delete", "-k", "daemonset/", "--ignore-not-found"])
    script = "\n".join([" ".join(agent), "kubectl delete -k otel-config/ --ignore-not-found --wait=false",
                        f"kubectl delete namespace {AGENT_NS} {COLLECTOR_NS} --ignore-not-found --wait=false"])
    run_install(script, workdir, env, timeout=180)
    wait_until(lambda: not ours(node), 180, interval=1, message="nothing of the install left")


@pytest.mark.parametrize("path", ["helm", "kustomize"])
def test_the_readme_install_reaches_prometheus(node_cluster: Node, path: str, tmp_path: Path) -> None:
    node = node_cluster
    assert not ours(node), f"the cluster is not empty of the project before the README's install: {ours(node)}"
    listed = node.ctr("images", "ls", "-q").stdout.split()
    assert {f"{REGISTRY}/{AGENT_IMAGE}", f"{REGISTRY}/{COLLECTOR_IMAGE}"} <= set(listed), listed
    helm = built_helm(tmp_path / "helm")
    blocks = install_blocks(README.read_text(encoding="utf-8"))
    script = install_script(blocks, path)
    workdir = shipped_copy(tmp_path / "clone")
    tools = {**helm.env, "KUBECONFIG": str(node.cluster.admin_kubeconfig),
             "PATH": os.pathsep.join([str(node.cluster.kubectl_binary.parent), str(helm.binary.parent),
                                      os.environ["PATH"]])}
    # The README's own command for the issuer, against this cluster, finds what its discovery document says.
    found = run_install(blocks[SETTINGS] + 'printf "%s" "$OIDC_ISSUER_URL"\n', workdir / "settings", tools, 60)
    issuer = node.cluster.api("GET", "/.well-known/openid-configuration")["issuer"]
    assert found.stdout == issuer, (found.stdout, found.stderr, issuer)
    with remote_write_prometheus(tmp_path / "prometheus", host=NODE_IP) as prometheus:
        env = {**tools, "REGISTRY": REGISTRY, "OIDC_ISSUER_URL": found.stdout,
               "PROMETHEUS_REMOTE_WRITE_URL": f"{prometheus.url}/api/v1/write"}
        try:
            started = time.monotonic()
            with ThreadPoolExecutor(1) as pool:  # its thread starts inside the node's network namespace
                install = pool.submit(lambda: (run_install(script, workdir, env, timeout=600),
                                               time.monotonic() - started))

                def first_series() -> list[dict]:
                    """The series once there; the install's failure as soon as it has failed."""
                    if install.done():
                        result, _ = install.result()
                        assert result.returncode == 0, (
                            f"the README's {path} install failed (exit {result.returncode}):\n"
                            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}\n"
                            f"{node.describe(COLLECTOR_NS, COLLECTOR_SELECTOR)}\n"
                            f"{node.describe(AGENT_NS, AGENT_SELECTOR)}")
                    return prometheus.query("pod_or_vm_cpu_requests")

                wait_until(first_series, 600, interval=0.25, message="the first series of pod_or_vm_cpu_requests")
                seen = time.monotonic() - started
                result, installed = install.result()
            assert result.returncode == 0, result.stdout + result.stderr
            print(f"\nREADME install, {path}: first series of pod_or_vm_cpu_requests in Prometheus {seen:.1f} s "
                  f"after the first command; the blocks (to their rollout status) took {installed:.1f} s")
            # The series come from the agent this install made, through the Collector it made: the agent's own pod is
            # among them with the CPU request its DaemonSet sets.
            agent = node.wait_pods_ready(AGENT_NS, AGENT_SELECTOR, 1, 30)[0]
            image = next(c["image"] for c in agent["spec"]["containers"] if c["name"] == "agent")
            assert image == f"{REGISTRY}/{AGENT_IMAGE}", image
            pod = agent["metadata"]["name"]
            own = f'pod_or_vm_cpu_requests{{k8s_namespace_name="{AGENT_NS}", k8s_pod_name="{pod}"}}'
            rows = wait_until(lambda: prometheus.query(own), 60, interval=0.5, message=own)
            assert [float(r["value"][1]) for r in rows] == [0.01], rows
        finally:
            uninstall(node, workdir, env, path)
