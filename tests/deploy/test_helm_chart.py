"""The Helm chart (charts/node-requests-agent) with a real helm built from its Go module, and the real API server.

* one source of truth: the chart's default render is, object for object, what ``kubectl kustomize daemonset/``
  renders, but for the Namespace (a release's namespace exists before ``helm install``; daemonset/namespace.yaml
  makes it with its Pod Security labels);
* ``helm lint`` is clean; every value changes what it says and the agent's own configuration reads the result;
* the schema refuses bad values with its message, for ``helm template`` and ``helm install``, and nothing is applied;
* ``helm install`` and ``helm upgrade`` into the real API server, in a namespace enforcing "restricted" as
  daemonset/namespace.yaml does: the DaemonSet controller's pods are admitted, the upgrade rolls them.

Marked ``cluster``: helm and kubectl are built by components/ (Go), like the control plane.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import uuid
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from components.gotools import GO_TOOLS
from components.kubernetes import kubernetes_bin
from testkit.cluster import NEWEST, Cluster
from testkit.kwok import Kwok, wait_running
from testkit.waiting import wait_until
from testkit.repo import REPO as ROOT
from testkit.helm import CHART, Helm, built_helm
from testkit.manifests import assert_restriction_follows_the_service_account

pytestmark = pytest.mark.cluster

#: A scraper of the debug port, as the values' comment shows it.
PROMETHEUS_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                   "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
NAMESPACE = "node-requests-agent"
K8S_VERSION = "1.36"  # the oldest supported release, as tests/deploy/test_deploy.py validates the kustomization


@pytest.fixture(scope="module")
def helm(tmp_path_factory) -> Helm:
    return built_helm(tmp_path_factory.mktemp("helm-home"))


def by_key(objects: list[dict]) -> dict[tuple[str, str], dict]:
    keyed = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind share a name"
    return keyed


def agent_container(objects: list[dict]) -> dict:
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    return container


def env_of(container: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# --------------------------------------------------------------------------- offline: lint, render, schema


def test_helm_is_the_version_components_builds(helm: Helm) -> None:
    result = helm("version", "--short")
    assert result.returncode == 0 and result.stdout.startswith(GO_TOOLS["helm"].version), (result.stdout, result.stderr)


def test_helm_lint_is_clean(helm: Helm) -> None:
    result = helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert "[WARNING]" not in said and "[ERROR]" not in said, said
    assert "1 chart(s) linted, 0 chart(s) failed" in said


def test_default_render_is_the_kustomization_without_its_namespace(helm: Helm) -> None:
    """Compared as parsed objects: the same kinds, names, namespaces, labels, specs, field for field."""
    kustomize = subprocess.run([str(kubernetes_bin(NEWEST) / "kubectl"), "kustomize", str(ROOT / "daemonset")],
                               capture_output=True, text=True, timeout=60)
    assert kustomize.returncode == 0, kustomize.stderr
    shipped = by_key([d for d in yaml.safe_load_all(kustomize.stdout) if d])
    chart = by_key(helm.template())
    namespace = shipped.pop(("Namespace", NAMESPACE))
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # The kustomize path's refusal of an unknown autoscaler release: the chart's values schema refuses it before
    # anything renders (test_the_schema_takes_exactly_the_autoscaler_releases_the_agent_takes), so the chart ships
    # no policy (tests/deploy/test_release_policy.py checks the two lists are one).
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        shipped.pop((kind, "node-requests-agent-autoscaler-release"))
    assert chart.keys() == shipped.keys()
    for key in shipped:
        assert chart[key] == shipped[key], key


def test_every_rendered_object_validates_against_the_kubernetes_schemas(helm: Helm) -> None:
    rendered = helm.template("--set", "kubernetesVersion=1.37", "--set", "collector.tls.secretName=otlp-tls",
                             "--set", "collector.tls.clientCertificateKey=tls.crt",
                             "--set", "collector.tls.clientKeyKey=tls.key",
                             "--set", "collector.headers.secretName=otlp-auth", "--set", "debug.enabled=false")
    peers = helm.template("--set-json", f"networkPolicy.debugPeers=[{json.dumps(PROMETHEUS_PEER)}, "
                                        '{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}}]')
    for obj in rendered + helm.template() + peers:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_each_value_changes_what_it_says(helm: Helm, tmp_path: Path) -> None:
    digest = "sha256:" + "ab" * 32
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "image": {"repository": "registry.example.invalid/nra", "tag": "0.2.0", "digest": digest,
                  "pullPolicy": "IfNotPresent"},
        "collector": {"endpoint": "https://collector.observability.svc:4318", "protocol": "grpc",
                      "compression": "none", "insecure": False,
                      "tls": {"secretName": "otlp-tls", "caKey": "ca.crt", "clientCertificateKey": "tls.crt",
                              "clientKeyKey": "tls.key"},
                      "headers": {"secretName": "otlp-auth", "secretKey": "headers"},
                      "token": {"audience": "observability-collector", "expirationSeconds": 7200}},
        "resources": {"requests": {"cpu": "20m", "memory": "100Mi"}, "limits": {"memory": "200Mi"}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "priorityClassName": "",
        "debug": {"port": 9810},
        "networkPolicy": {"debugPeers": [PROMETHEUS_PEER, {"ipBlock": {"cidr": "10.0.0.0/16"}}]},
        "kubernetesVersion": "1.37",
        "autoscaler": {"args": ["--scale-down-utilization-threshold=0.6", "--skip-nodes-with-local-storage=false",
                                "--cloud-provider=aws"],
                       "release": "neon", "maxPodDisruptionBudgets": 500},
        "extraEnv": [{"name": "LOG_LEVEL", "value": "DEBUG"}],
    }))
    rendered = helm.template("--values", str(values), release="nra", namespace="observability")
    keyed = by_key(rendered)
    assert set(keyed) == {(k, "nra-node-requests-agent") for k in
                          ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "NetworkPolicy")} | \
        {("ConfigMap", "nra-node-requests-agent-apiserver")}
    policy = keyed[("NetworkPolicy", "nra-node-requests-agent")]
    assert policy["metadata"]["namespace"] == "observability"
    assert policy["spec"]["ingress"] == [{"from": [PROMETHEUS_PEER, {"ipBlock": {"cidr": "10.0.0.0/16"}}],
                                          "ports": [{"protocol": "TCP", "port": 9810}]}]
    binding = keyed[("ClusterRoleBinding", "nra-node-requests-agent")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nra-node-requests-agent",
                                    "namespace": "observability"}]
    pod = keyed[("DaemonSet", "nra-node-requests-agent")]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "nra-node-requests-agent" and "priorityClassName" not in pod
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["volumes"] == [
        {"name": "collector-token", "projected": {"sources": [{"serviceAccountToken": {
            "audience": "observability-collector", "expirationSeconds": 7200, "path": "token"}}]}},
        {"name": "otlp-tls", "secret": {"secretName": "otlp-tls", "items": [  # only the keys it reads: one missing waits
            {"key": k, "path": k} for k in ("ca.crt", "tls.crt", "tls.key")]}}]
    container = agent_container(rendered)
    assert container["image"] == f"registry.example.invalid/nra:0.2.0@{digest}"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert "args" not in container  # the image's CMD, ["run"]: no flag, so no argument parser is built
    assert container["resources"] == {"requests": {"cpu": "20m", "memory": "100Mi"}, "limits": {"memory": "200Mi"}}
    assert container["ports"] == [{"name": "debug", "containerPort": 9810, "protocol": "TCP"}]
    assert container["volumeMounts"] == [
        {"name": "collector-token", "mountPath": "/var/run/secrets/node-requests-collector", "readOnly": True},
        {"name": "otlp-tls", "mountPath": "/etc/node-requests-agent/otlp-tls", "readOnly": True}]
    env = env_of(container)
    assert env["KUBERNETES_VERSION"] == "1.37"
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == {"secretKeyRef": {"name": "otlp-auth", "key": "headers"}}
    assert env["LOG_LEVEL"] == "DEBUG"
    assert env["NRA_OTLP_TOKEN_FILE"] == "/var/run/secrets/node-requests-collector/token"
    # Every variable the chart sets (and the extraEnv given here) is one the agent reads: issue 29 found HOST_IP.
    from agent.config import SETTINGS

    assert set(env) <= {name for setting in SETTINGS.values() for name in setting.env}, set(env)

    # The agent reads what the chart writes: its own configuration, from the rendered container's environment.
    from agent.config import Address, from_sources

    plain = {name: value for name, value in env.items() if isinstance(value, str)}
    plain.update(NODE_NAME="node-a", OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20t")
    config = from_sources({}, plain)
    assert str(config.kubernetes_version) == "1.37" and config.debug_address == Address(host="", port=9810)
    assert config.log_level == "DEBUG" and config.otlp.protocol == "grpc"
    otlp = config.otlp
    assert (otlp.endpoint, otlp.compression, otlp.insecure) == ("https://collector.observability.svc:4318", "none", False)
    assert (otlp.certificate, otlp.client_certificate, otlp.client_key) == tuple(
        f"/etc/node-requests-agent/otlp-tls/{key}" for key in ("ca.crt", "tls.crt", "tls.key"))
    assert otlp.headers == (("authorization", "Bearer t"),)
    assert otlp.token_file == "/var/run/secrets/node-requests-collector/token"
    # The autoscaler's args as its Deployment has them, its release, and the PDB watch with its own maximum.
    assert env["NRA_AUTOSCALER_ARGS"] == "--scale-down-utilization-threshold=0.6 --skip-nodes-with-local-storage=false " \
                                         "--cloud-provider=aws"
    assert (config.autoscaler.scale_down_utilization_threshold, config.autoscaler.skip_nodes_with_local_storage,
            config.autoscaler.release) == (0.6, False, "neon")
    assert config.watch_pdbs is True and config.max_pdbs == 500
    rules = keyed[("ClusterRole", "nra-node-requests-agent")]["rules"]
    assert {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list", "watch"]} in rules


def test_without_the_pdb_watch_there_is_no_rule_for_pdbs_and_the_agent_is_told(helm: Helm) -> None:
    rendered = helm.template("--set", "autoscaler.watchPodDisruptionBudgets=false")
    rules = by_key(rendered)[("ClusterRole", "node-requests-agent")]["rules"]
    assert [r["resources"] for r in rules] == [["pods", "nodes"]]
    env = env_of(agent_container(rendered))
    assert env["NRA_WATCH_PDBS"] == "false"
    from agent.config import from_sources

    assert from_sources({}, {"NODE_NAME": "n", **{k: v for k, v in env.items() if isinstance(v, str)}}).watch_pdbs \
        is False


def test_the_network_policy_selects_the_agents_pods_and_admits_only_the_debug_peers(helm: Helm) -> None:
    """Issue 29: by default nobody over the pod network (the probes come from the node, which NetworkPolicy always
    admits); a scraper's peer only on the debug port; none with the endpoint off; no policy when disabled."""
    rendered = helm.template()
    policy = by_key(rendered)[("NetworkPolicy", "node-requests-agent")]
    pod_labels = by_key(rendered)[("DaemonSet", "node-requests-agent")]["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"] == {"podSelector": {"matchLabels": pod_labels}, "policyTypes": ["Ingress"], "ingress": []}
    scraped = by_key(helm.template("--set-json", f"networkPolicy.debugPeers=[{json.dumps(PROMETHEUS_PEER)}]"))
    assert scraped[("NetworkPolicy", "node-requests-agent")]["spec"]["ingress"] == [
        {"from": [PROMETHEUS_PEER], "ports": [{"protocol": "TCP", "port": 9808}]}]
    off = by_key(helm.template("--set-json", f"networkPolicy.debugPeers=[{json.dumps(PROMETHEUS_PEER)}]",
                               "--set", "debug.enabled=false"))
    assert off[("NetworkPolicy", "node-requests-agent")]["spec"]["ingress"] == []  # no port listens
    assert "NetworkPolicy" not in {o["kind"] for o in helm.template("--set", "networkPolicy.enabled=false")}


def test_by_default_the_agent_pushes_over_https_verified_with_the_collectors_ca(helm: Helm) -> None:
    """Issue 29 item 6, as the chart renders it (the kustomize side: test_deploy.py): https, the CA of Secret
    otel-collector-ca mounted and named, a 600 s token, and the agent's configuration reads them so; NOTES.txt names
    the Secret the pods wait for."""
    rendered = helm.template()
    pod = by_key(rendered)[("DaemonSet", "node-requests-agent")]["spec"]["template"]["spec"]
    container = agent_container(rendered)
    env = env_of(container)
    assert {"name": "otlp-tls", "secret": {"secretName": "otel-collector-ca",
                                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}} in pod["volumes"]
    assert {"name": "otlp-tls", "mountPath": "/etc/node-requests-agent/otlp-tls", "readOnly": True} in \
        container["volumeMounts"]
    (token,) = [s["serviceAccountToken"] for v in pod["volumes"] for s in v.get("projected", {}).get("sources", [])]
    assert token["expirationSeconds"] == 600
    from agent.config import from_sources

    otlp = from_sources({}, {"NODE_NAME": "n", **{k: v for k, v in env.items() if isinstance(v, str)}}).otlp
    assert otlp.endpoint.startswith("https://otel-collector.node-requests-collector.svc:")
    assert otlp.certificate == "/etc/node-requests-agent/otlp-tls/ca.crt" and otlp.insecure is None
    notes = helm("install", "nra", str(CHART), "--namespace", "observability", "--dry-run=client").stdout
    assert "Secret otel-collector-ca" in notes and "AGENT_NAMESPACE=observability" in notes, notes


def test_without_the_token_and_the_ca_the_pod_mounts_nothing(helm: Helm) -> None:
    rendered = helm.template("--set", "collector.token.enabled=false", "--set", "collector.tls.secretName=")
    container = agent_container(rendered)
    assert "NRA_OTLP_TOKEN_FILE" not in env_of(container) and "volumeMounts" not in container
    assert "volumes" not in by_key(rendered)[("DaemonSet", "node-requests-agent")]["spec"]["template"]["spec"]


def test_the_debug_endpoint_off_removes_its_port_and_the_probes(helm: Helm) -> None:
    container = agent_container(helm.template("--set", "debug.enabled=false"))
    assert env_of(container)["DEBUG_ADDRESS"] == "off"
    assert not {"ports", "livenessProbe", "readinessProbe"} & container.keys()
    from agent.config import from_sources

    assert from_sources({}, {"NODE_NAME": "n", **{k: v for k, v in env_of(container).items()
                                                 if isinstance(v, str)}}).debug_address is None


def test_notes_say_how_to_reach_the_debug_views_and_check_the_numbers(helm: Helm) -> None:
    result = helm("install", "node-requests-agent", str(CHART), "--namespace", NAMESPACE, "--dry-run=client")
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    port = yaml.safe_load((CHART / "values.yaml").read_text())["debug"]["port"]
    for said in (f"port-forward $POD {port}:{port}", "/debug/pods", "/debug/node", "/debug/runtime", "/metrics",
                 "kubectl node-requests explain --live --node $NODE", "kubectl describe node $NODE"):
        assert said in notes, said
    off = helm("install", "node-requests-agent", str(CHART), "--namespace", NAMESPACE, "--dry-run=client",
               "--set", "debug.enabled=false")
    assert "port-forward" not in off.stdout and "debug.enabled=false" in off.stdout


@pytest.mark.parametrize("release,namespace", [("node-requests-agent", "node-requests-agent"), ("nra", "monitoring"),
                                               ("team-node-requests-agent", "obs"), ("x" * 53, "kube-system")])
def test_the_apiserver_restriction_names_the_releases_service_account(helm: Helm, release: str,
                                                                       namespace: str) -> None:
    """Issue 29 item 5: for any release name and namespace the rendered authorization configuration restricts the
    ServiceAccount the release creates, binds and runs its pods as (and is otherwise daemonset/apiserver/'s file)."""
    user = assert_restriction_follows_the_service_account(helm.template(release=release, namespace=namespace))
    assert user.startswith(f"system:serviceaccount:{namespace}:") and release[:63] in user


def test_notes_say_how_to_hand_the_restriction_to_the_api_server(helm: Helm) -> None:
    result = helm("install", "nra", str(CHART), "--namespace", "monitoring", "--dry-run=client")
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "system:serviceaccount:monitoring:nra-node-requests-agent" in notes
    assert "--authorization-config=/etc/kubernetes/node-requests-agent/authorization-config.yaml" in notes
    for key in ("authorization-config.yaml", "own-node-deny.kubeconfig"):
        escaped = key.replace(".", "\\.")
        assert (f"kubectl -n monitoring get configmap nra-node-requests-agent-apiserver -o jsonpath="
                f"'{{.data.{escaped}}}' > {key}") in notes, key


#: (--set arguments, what the schema's message must name)
BAD_VALUES = [
    pytest.param(["--set", "resources.requests.memory=-80Mi"], ["/resources/requests/memory", "-80Mi"],
                 id="negative memory request"),
    pytest.param(["--set", "resources.requests.memory=-1"], ["/resources/requests/memory", "-1"],
                 id="negative memory request as a number"),
    pytest.param(["--set", "collector.endpoint=otel-collector:4318"], ["/collector/endpoint", "otel-collector:4318"],
                 id="endpoint not a URL"),
    pytest.param(["--set", "replicas=2"], ["replicas", "additional properties"], id="unknown top-level key"),
    pytest.param(["--set", "image.digest=sha256:abc"], ["/image/digest"], id="digest not a sha256"),
    pytest.param(["--set", "kubernetesVersion=latest"], ["/kubernetesVersion", "latest"], id="version not X.Y"),
    pytest.param(["--set", "autoscaler.release=1.40"], ["/autoscaler/release", "must be one of", "'neon'"],
                 id="autoscaler release the agent refuses"),
    pytest.param(["--set-json", 'autoscaler.args=["scale-down-utilization-threshold=0.6"]'],
                 ["/autoscaler/args/0"], id="autoscaler arg not a flag"),
    pytest.param(["--set", "networkPolicy.debugPeers[0].podSelector.app=x"], ["/networkPolicy/debugPeers/0/podSelector"],
                 id="debug peer's selector without matchLabels"),
    pytest.param(["--set-json", "networkPolicy.debugPeers=[{}]"], ["/networkPolicy/debugPeers/0"],
                 id="empty debug peer"),
]


@pytest.mark.parametrize("args,named", BAD_VALUES)
def test_helm_template_refuses_bad_values_with_the_schemas_message(helm: Helm, args: list[str],
                                                                  named: list[str]) -> None:
    result = helm("template", "node-requests-agent", str(CHART), "--namespace", NAMESPACE, *args)
    assert result.returncode != 0 and not result.stdout.strip(), result.stdout
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    for word in named:
        assert word in result.stderr, (word, result.stderr)


def test_the_schema_takes_exactly_the_autoscaler_releases_the_agent_takes(helm: Helm) -> None:
    """Issue 39: a release the agent refuses at start (``1.40``) would crash-loop every node, so the schema refuses it
    at install, on one line naming what it takes; every release of the agent's own table renders and is read back."""
    from agent.config import from_sources
    from agent.model.autoscaler_settings import RELEASES

    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["autoscaler"]["properties"]["release"]["enum"] == ["", *RELEASES]
    for release in RELEASES:
        env = env_of(agent_container(helm.template("--set", f"autoscaler.release={release}")))
        assert from_sources({}, {"NODE_NAME": "n", "NRA_AUTOSCALER_RELEASE": env["NRA_AUTOSCALER_RELEASE"]}
                            ).autoscaler.release == release
    minor = max(int(r.split(".")[1]) for r in RELEASES if r.startswith("1."))
    for refused in (f"1.{minor + 2}", "1.27", "latest"):
        result = helm("template", "node-requests-agent", str(CHART), "--namespace", NAMESPACE,
                      "--set", f"autoscaler.release={refused}")
        assert result.returncode != 0 and not result.stdout.strip(), result.stdout
        (line,) = [line for line in result.stderr.splitlines() if "/autoscaler/release" in line]
        assert all(f"'{release}'" in line for release in RELEASES), line


def test_the_chart_says_which_kubernetes_and_agent_it_is_for(helm: Helm) -> None:
    """kubeVersion starts at the oldest release whose rules the agent has; appVersion is the package's version."""
    import tomllib

    from agent.model.rules import OLDEST

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == version
    assert chart["kubeVersion"] == f">={OLDEST.major}.{OLDEST.minor}.0-0"
    older = helm("template", "node-requests-agent", str(CHART),
                 "--kube-version", f"{OLDEST.major}.{OLDEST.minor - 1}.9")
    assert older.returncode != 0 and "chart requires kubeVersion" in older.stderr, older.stderr
    assert helm.template("--kube-version", f"{OLDEST.major}.{OLDEST.minor}.3-gke.1")


def test_notes_warn_while_the_autoscaler_settings_are_missing(helm: Helm) -> None:
    def notes(*args: str) -> str:
        result = helm("install", "node-requests-agent", str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *args)
        assert result.returncode == 0, result.stderr
        return result.stdout.split("NOTES:", 1)[1]

    from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER

    default = notes()
    assert f"WARNING: autoscaler.release is not set, so the verdict follows upstream cluster-autoscaler " \
           f"{DEFAULT_AUTOSCALER.release} (the agent's default)" in default
    assert "WARNING: autoscaler.args is empty" in default
    neon = notes("--set", "autoscaler.release=neon")
    assert "autoscaler.release is not set" not in neon and "WARNING: autoscaler.args is empty" in neon
    both = notes("--set", "autoscaler.release=neon",
                 "--set-json", 'autoscaler.args=["--scale-down-utilization-threshold=0.6"]')
    assert "WARNING" not in both


# --------------------------------------------------------------------------- the real API server


@pytest.fixture(scope="module")
def release(cluster: Cluster, kwok: Kwok, helm: Helm):
    """A namespace with daemonset/namespace.yaml's Pod Security labels, a Node only this release selects, and
    the release name; uninstalled, and the namespace and Node deleted, afterwards."""
    suffix = uuid.uuid4().hex[:8]
    namespace = yaml.safe_load((ROOT / "daemonset" / "namespace.yaml").read_text())
    namespace["metadata"]["name"] = f"nra-helm-{suffix}"
    applied = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(namespace))
    assert applied.returncode == 0, applied.stderr
    node = f"helm-node-{suffix}"
    kwok.add_node(node, cpu="4", memory="8Gi", labels={"nra-helm": suffix})
    state = argparse.Namespace(name=f"nra-{suffix}", namespace=namespace["metadata"]["name"], node=node,
                               selector=suffix, labels=namespace["metadata"]["labels"])
    yield state
    helm("uninstall", state.name, "--namespace", state.namespace, kubeconfig=cluster.admin_kubeconfig)
    cluster.kubectl("delete", "namespace", state.namespace, "--wait=false")
    cluster.kubectl("delete", "node", node, "--wait=false")


def daemonset_of(cluster: Cluster, release) -> dict:
    return cluster.api("GET", f"/apis/apps/v1/namespaces/{release.namespace}/daemonsets/{release.name}-node-requests-agent")


def pods_on_node(cluster: Cluster, release) -> list[dict]:
    items = cluster.api("GET", f"/api/v1/namespaces/{release.namespace}/pods?fieldSelector=spec.nodeName={release.node}")
    return [p for p in items["items"] if not p["metadata"].get("deletionTimestamp")]


def install_args(release, *more: str) -> list[str]:
    return [str(CHART), "--namespace", release.namespace, "--set", f"nodeSelector.nra-helm={release.selector}", *more]


@pytest.mark.parametrize("args,named", BAD_VALUES[:4])
def test_helm_install_refuses_bad_values_and_applies_nothing(cluster: Cluster, helm: Helm, release, args, named):
    result = helm("install", f"bad-{release.selector}", *install_args(release, *args),
                  kubeconfig=cluster.admin_kubeconfig)
    assert result.returncode != 0, result.stdout
    assert "values don't meet the specifications of the schema" in result.stderr and named[0] in result.stderr
    assert cluster.api("GET", f"/api/v1/namespaces/{release.namespace}/secrets?labelSelector=owner=helm,"
                              f"name=bad-{release.selector}")["items"] == []
    assert not cluster.exists(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/bad-{release.selector}-node-requests-agent")
    assert cluster.api("GET", f"/apis/apps/v1/namespaces/{release.namespace}/daemonsets")["items"] == [] or \
        all(not d["metadata"]["name"].startswith("bad-")
            for d in cluster.api("GET", f"/apis/apps/v1/namespaces/{release.namespace}/daemonsets")["items"])


def test_helm_install_passes_pod_security_and_the_daemonset_pod_is_admitted(cluster: Cluster, helm: Helm, release):
    result = helm("install", release.name, *install_args(release), kubeconfig=cluster.admin_kubeconfig)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PodSecurity" not in result.stderr and "violate" not in result.stderr, result.stderr
    assert "STATUS: deployed" in result.stdout and "port-forward" in result.stdout
    stored = cluster.api("GET", f"/api/v1/namespaces/{release.namespace}")["metadata"]["labels"]
    assert stored["pod-security.kubernetes.io/enforce"] == "restricted"
    (pod,) = wait_until(lambda: pods_on_node(cluster, release), 90, interval=0.5,
                        message=f"the DaemonSet pod on {release.node}, admitted under restricted")
    assert pod["spec"]["serviceAccountName"] == f"{release.name}-node-requests-agent"
    wait_running(cluster, release.namespace, pod["metadata"]["name"])  # reported by KWOK, as its kubelet would
    status = wait_until(lambda: (s := daemonset_of(cluster, release).get("status", {}))
                        .get("desiredNumberScheduled") == 1 and s, 60, interval=0.5,
                        message="the DaemonSet selects exactly the release's Node")
    assert status.get("numberMisscheduled", 0) == 0
    events = cluster.api("GET", f"/api/v1/namespaces/{release.namespace}/events")["items"]
    assert not [e for e in events if e.get("reason") == "FailedCreate"], events


def test_helm_upgrade_rolls_the_pods_with_the_new_values(cluster: Cluster, helm: Helm, release):
    before = daemonset_of(cluster, release)
    result = helm("upgrade", release.name, *install_args(release, "--set", "kubernetesVersion=1.37",
                                                         "--set", "extraEnv[0].name=LOG_LEVEL",
                                                         "--set", "extraEnv[0].value=DEBUG"),
                  kubeconfig=cluster.admin_kubeconfig)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PodSecurity" not in result.stderr, result.stderr
    assert "REVISION: 2" in result.stdout
    after = daemonset_of(cluster, release)
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1

    def rolled() -> dict | None:
        # The controller deletes the old pod first (maxUnavailable 10%: 1 of 1); KWOK finishes the deletion.
        pods = pods_on_node(cluster, release)
        new = [p for p in pods
               if {"name": "KUBERNETES_VERSION", "value": "1.37"} in p["spec"]["containers"][0]["env"]]
        return new[0] if len(pods) == 1 and new else None

    pod = wait_until(rolled, 120, interval=0.5, message="the DaemonSet controller replaced the pod with the new one")
    assert {"name": "LOG_LEVEL", "value": "DEBUG"} in pod["spec"]["containers"][0]["env"]

    # A bad upgrade is refused before anything changes.
    refused = helm("upgrade", release.name, *install_args(release, "--set", "resources.requests.memory=-1Gi"),
                   kubeconfig=cluster.admin_kubeconfig)
    assert refused.returncode != 0 and "/resources/requests/memory" in refused.stderr, refused.stderr
    assert daemonset_of(cluster, release)["metadata"]["generation"] == after["metadata"]["generation"]
    history = helm("history", release.name, "--namespace", release.namespace, "--output", "yaml",
                   kubeconfig=cluster.admin_kubeconfig)
    assert history.returncode == 0, history.stderr
    assert [(r["revision"], r["status"]) for r in yaml.safe_load(history.stdout)] == [(1, "superseded"), (2, "deployed")]
