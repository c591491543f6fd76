"""Deployment files: schema validation, rendering, policy, promtool, and every PromQL query against real data.

Not executed here (nothing of the kind runs on these machines): kubectl/kustomize, a cluster, a container build,
the Collector and Prometheus servers. The kustomizations are rendered by a small stand-in that follows kustomize's
documented semantics for the features used (resources, namespace, configMapGenerator from files).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.conftest import wait_until
from tests.factory import container, pod, vm_pod

ROOT = Path(__file__).resolve().parent.parent
K8S_VERSION = "1.36"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}


def render(directory: Path) -> list[dict]:
    """kustomize build, for resources + namespace + configMapGenerator(files)."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[dict] = []
    for resource in k.get("resources", []):
        path = directory / resource
        objects += render(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for gen in k.get("configMapGenerator", []):
        data = {Path(f).name: (directory / f).read_text() for f in gen.get("files", [])}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    namespace = k.get("namespace")
    for obj in objects:
        if namespace and obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = namespace
        if obj["kind"] == "ClusterRoleBinding" and namespace:
            for subject in obj.get("subjects", []):
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = namespace
    return objects


@pytest.fixture(scope="module")
def agent_objects():
    return {(o["kind"], o["metadata"]["name"]): o for o in render(ROOT / "daemonset")}


@pytest.fixture(scope="module")
def collector_objects():
    return {(o["kind"], o["metadata"]["name"]): o for o in render(ROOT / "otel-config")}


def test_every_manifest_validates_against_the_kubernetes_schemas(agent_objects, collector_objects):
    for obj in [*agent_objects.values(), *collector_objects.values()]:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_kustomizations_render_complete_sets(agent_objects, collector_objects):
    assert set(agent_objects) == {("Namespace", "node-requests-agent"), ("ServiceAccount", "node-requests-agent"),
                                  ("ClusterRole", "node-requests-agent"), ("ClusterRoleBinding", "node-requests-agent"),
                                  ("DaemonSet", "node-requests-agent")}
    binding = agent_objects[("ClusterRoleBinding", "node-requests-agent")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "node-requests-agent", "namespace": "node-requests-agent"}]
    assert agent_objects[("DaemonSet", "node-requests-agent")]["metadata"]["namespace"] == "node-requests-agent"
    config = collector_objects[("ConfigMap", "otel-collector-config")]["data"]["collector.yaml"]
    assert yaml.safe_load(config)["exporters"]["prometheus"]["add_metric_suffixes"] is False
    collector = collector_objects[("Deployment", "otel-collector")]["spec"]["template"]["spec"]
    assert collector["volumes"][0]["configMap"]["name"] == "otel-collector-config"
    # The agents' OTLP endpoint is this Service.
    ds_env = {e["name"]: e.get("value") for e in agent_objects[("DaemonSet", "node-requests-agent")]
              ["spec"]["template"]["spec"]["containers"][0]["env"]}
    service = collector_objects[("Service", "otel-collector")]
    assert ds_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://{service['metadata']['name']}.node-requests-agent.svc:4318"


def test_rbac_is_exactly_read_only_pods_and_nodes(agent_objects):
    rules = agent_objects[("ClusterRole", "node-requests-agent")]["rules"]
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {("", r, v) for r in ("pods", "nodes") for v in ("get", "list", "watch")}


def test_daemonset_policy(agent_objects):
    ds = agent_objects[("DaemonSet", "node-requests-agent")]
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
    for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(forbidden)
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_COMPRESSION"} <= set(env)
    # Restricted Pod Security Standard, container and pod level.
    pod_sc, sc = spec["securityContext"], c["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] > 0
    assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    assert not sc.get("privileged")
    # Host /proc read-only at /host/proc.
    (mount,) = c["volumeMounts"]
    (volume,) = spec["volumes"]
    assert mount == {"name": volume["name"], "mountPath": "/host/proc", "readOnly": True}
    assert volume["hostPath"]["path"] == "/proc"
    # Probes on the debug port.
    (port,) = c["ports"]
    assert port["containerPort"] == 9808 and port["name"] == "debug"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "debug"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "debug"}
    # Sized from the measured footprint (README, Benchmarks): ~52-59 MiB RSS at 110-500 pods.
    assert c["resources"]["requests"]["memory"] == "80Mi" and c["resources"]["limits"]["memory"] == "160Mi"
    assert "cpu" not in c["resources"]["limits"]  # no CPU throttling of the watch


def test_dockerfile_install_steps_give_a_working_console_script(tmp_path):
    dockerfile = (ROOT / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    # Every base is a fully pinned patch release of the slim image (a digest may be added at build time).
    assert bases and all(re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+(?:@sha256:[0-9a-f]{64})?", b) for b in bases), bases
    assert re.search(r"^USER 65532:65532$", dockerfile, re.M)
    assert 'ENTRYPOINT ["node-requests-agent", "run"]' in dockerfile
    assert "pip install --no-cache-dir ." in dockerfile
    # The same steps, here: a fresh virtual environment, `pip install .`, the console script.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-cache-dir", str(ROOT)], check=True, timeout=600,
                   capture_output=True)
    script = venv / "bin" / "node-requests-agent"
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "0.1.0" in version.stdout
    plugin = subprocess.run([str(venv / "bin" / "kubectl-node_requests"), "--help"], capture_output=True, text=True,
                            timeout=60)
    assert plugin.returncode == 0 and plugin.stdout.startswith("usage: kubectl node-requests")
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    missing = subprocess.run([str(script), "run"], capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 2 and "NODE_NAME" in missing.stderr
    freeze = subprocess.run([str(venv / "bin" / "pip"), "freeze"], capture_output=True, text=True).stdout.lower()
    assert "pytest" not in freeze and "hypothesis" not in freeze  # runtime dependencies only


def test_prometheus_scrape_config_targets_the_collector():
    scrape = yaml.safe_load((ROOT / "otel-config" / "prometheus" / "scrape.yaml").read_text())
    (job,) = scrape["scrape_configs"]
    assert job["honor_labels"] is True
    assert job["relabel_configs"][0]["regex"] == "otel-collector;prometheus"
    assert scrape["rule_files"] == ["rules.yaml"]


def test_rules_pass_promtool():
    from tests.victoriametrics import debian_binary

    # Trixie's package leaves promtool out; bookworm's (2.42) has it.
    promtool = debian_binary("prometheus", "usr/bin/promtool", suite="bookworm")
    result = subprocess.run([str(promtool), "check", "rules", str(ROOT / "otel-config" / "prometheus" / "rules.yaml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def _expressions() -> list[tuple[str, str]]:
    out = []
    rules = yaml.safe_load((ROOT / "otel-config" / "prometheus" / "rules.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            expr = rule["expr"]
            if "alert" in rule:
                # An alert's query returns data only while it fires: check its left-hand side.
                expr = re.split(r"\s[<>]=?\s", expr)[0]
            out.append((rule.get("record") or rule["alert"], expr))
    dashboard = json.loads((ROOT / "otel-config" / "grafana" / "node-requests-agent.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            out.append((panel["title"], target["expr"].replace("$node", ".*")))
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["query"])
            out.append((f"${var['name']}", f"count by ({m.group(2)}) ({m.group(1)})"))
    return out


def test_every_promql_expression_returns_data_from_the_real_agent(apiserver, make_agent, tmp_path, monkeypatch):
    """VictoriaMetrics fed by the real agent, with labels sanitised as the shipped Collector config does."""
    from tests.victoriametrics import VictoriaMetrics

    relabel = tmp_path / "relabel.yaml"
    relabel.write_text(yaml.safe_dump([{"action": "labelmap_all", "regex": r"\.", "replacement": "_"}]))
    vm = VictoriaMetrics(tmp_path / "vm", (f"-relabelConfig={relabel}",))
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", vm.otlp_endpoint)
        apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "namespace": ""},
                          "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                                     "allocatable": {"cpu": "2", "memory": "15Gi", "pods": "110"}}}, kind="nodes")
        apiserver.create(pod("web", containers=[container("a", "1", "1Gi")]))
        apiserver.create(vm_pod("vm-src", "vm-1", "2", "4Gi", role="source", node="node-a"))
        apiserver.create(vm_pod("vm-dst", "vm-1", "2", "4Gi", role="target", node="node-a"))
        make_agent(exporter="otlp", export_interval=0.5, procfs="/proc")
        time.sleep(1)
        apiserver.fail_next(1, 500)  # one failed watch: the restarts panel and alert have data
        apiserver.drop_watches()
        for i in range(8):  # keep events flowing so rate() windows hold changes
            apiserver.create(pod(f"extra-{i}"))
            time.sleep(0.5)
        expressions = _expressions()
        assert len(expressions) >= 18

        def empty() -> list[str]:
            return [name for name, expr in expressions if not vm.query(expr)]

        wait_until(lambda: not empty(), timeout=40, message="every dashboard and rule query returns data")
    finally:
        vm.stop()
