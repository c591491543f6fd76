"""The Prometheus Operator's way (issue 39, item 2): the real Operator turns otel-config/prometheus-operator/
into Prometheus' configuration, and Prometheus 3 running exactly that scrapes the Collector, loads every shipped
rule and fires a shipped alert on a real fault.

The Operator is components.gotools' prometheus-operator row (built from its Go module), run against the suite's
control plane with its CRDs applied from that module's source in the Go module cache. A Prometheus object in
namespace monitoring selects by kube-prometheus-stack's label (release), as the kustomization sets it; the Operator
writes the configuration (Secret prometheus-<name>, gzipped) and the rule files (ConfigMap
prometheus-<name>-rulefiles-0).

Stand-in (docs/testing.md): with no kubelet the Operator's Prometheus pod cannot run, so the suite's Prometheus 3 runs
the generated configuration on loopback. Only what a pod has and a process has not changes: the rule files' folder
(the pod mounts the ConfigMap under /etc/prometheus/rules/) and Kubernetes discovery's credentials (the pod's
ServiceAccount; here a kubeconfig); the pod's config-reloader's expansion of $(SHARD) and $(POD_NAME) is done here
from its environment in the Operator's StatefulSet. The Collector runs as a process; its pod (the shipped
Deployment's template) is a Pod object on a Node without a kubelet, its status written by the test as the kubelet
would, with the Collector's loopback address: what the PodMonitor's pod discovery reads.
"""

from __future__ import annotations

import base64
import gzip
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from components.go import download
from components.gotools import GO_TOOLS, tool_bin
from testkit.cluster import Cluster, free_ports
from testkit.collector import Collector, Prometheus
from testkit.component import Component, served
from testkit.helm import CHART, built_helm
from testkit.repo import REPO
from testkit.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.collector]

OBJECTS = REPO / "otel-config" / "prometheus-operator"
RULES = REPO / "otel-config" / "prometheus" / "rules.yaml"
COLLECTOR = "node-requests-collector"  # the Collector's namespace, as otel-config/ ships it
MONITORING = "monitoring"  # otel-config/prometheus-operator's namespace
NAME = "nra"  # the Prometheus object's name
NODE = "operator-node"


def _operator(cluster: Cluster, workdir: Path) -> Component:
    """The Operator, as the admin, its web port free on loopback."""
    tool = GO_TOOLS["prometheus-operator"]
    binary = tool_bin(tool.name) / next(iter(tool.commands))
    (port,) = free_ports(1)
    return Component("prometheus-operator", [
        str(binary), f"--apiserver={cluster.server}", f"--ca-file={cluster.pki.crt('ca')}",
        f"--cert-file={cluster.pki.crt('admin')}", f"--key-file={cluster.pki.key('admin')}",
        f"--web.listen-address=127.0.0.1:{port}", "--log-level=info"], workdir / "prometheus-operator.log")


@pytest.fixture(scope="module")
def operator(request: pytest.FixtureRequest, cluster: Cluster,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Component]:
    """The CRDs from the Operator's module (never copied into the repo), then the Operator itself."""
    tool = GO_TOOLS["prometheus-operator"]
    crds = download(tool.module, tool.version).dir / "example" / "prometheus-operator-crd"
    applied = cluster.kubectl("apply", "--server-side", "-f", str(crds), timeout=120)
    assert applied.returncode == 0, applied.stderr
    established = cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                                  *(f"crd/{kind}.monitoring.coreos.com"
                                    for kind in ("prometheuses", "podmonitors", "prometheusrules")), timeout=90)
    assert established.returncode == 0, established.stderr

    def start() -> Component:
        running = _operator(cluster, tmp_path_factory.mktemp("operator"))
        running.start()
        return running
    with served(request, start, what="prometheus-operator log", logs=lambda c: c.tail(40),
                stop=lambda c: c.stop()) as running:
        yield running


def _collector_pod(cluster: Cluster, port: int) -> None:
    """The shipped Deployment's pod, on a Node without a kubelet, Running at 127.0.0.1 with its metrics port on
    ``port`` (where the Collector process listens): what the kubelet would report of a Collector replica."""
    shipped = {(d["kind"], d["metadata"]["name"]): d
               for d in yaml.safe_load_all((REPO / "otel-config" / "collector-deployment.yaml").read_text()) if d}
    template = shipped[("Deployment", "otel-collector")]["spec"]["template"]
    for container in template["spec"]["containers"]:
        for container_port in container.get("ports", []):
            if container_port["name"] == "metrics":
                container_port["containerPort"] = port
    cluster.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    _namespace(cluster, COLLECTOR)
    cluster.api("POST", f"/api/v1/namespaces/{COLLECTOR}/serviceaccounts",
                shipped[("ServiceAccount", "otel-collector")])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "otel-collector-0", **template["metadata"]},
           "spec": {**template["spec"], "nodeName": NODE}}
    cluster.api("POST", f"/api/v1/namespaces/{COLLECTOR}/pods", pod)
    status = {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
              "conditions": [{"type": "Ready", "status": "True"}]}
    cluster.api("PATCH", f"/api/v1/namespaces/{COLLECTOR}/pods/otel-collector-0/status", {"status": status})


def _namespace(cluster: Cluster, name: str) -> None:
    cluster.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _prometheus_object() -> dict:
    """The operator's user's Prometheus, as kube-prometheus-stack makes it: it selects rules and monitors by the
    release label; as docs/deployment.md asks, it takes remote writes (the agents' series arrive that way) a little
    out of order. Its rules are evaluated every second (the one speed-up: the rules' ``for`` stay as shipped)."""
    selector = {"matchLabels": {"release": "kube-prometheus-stack"}}
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
            "metadata": {"name": NAME, "namespace": MONITORING},
            "spec": {"replicas": 1, "ruleSelector": selector, "podMonitorSelector": selector,
                     "evaluationInterval": "1s", "enableRemoteWriteReceiver": True,
                     "tsdb": {"outOfOrderTimeWindow": "1m"}}}


def _generated(cluster: Cluster) -> tuple[str, dict[str, str]]:
    """The configuration and rule files the Operator wrote, once they hold the PodMonitor's job and the rules."""
    def ready() -> tuple[str, dict[str, str]] | None:
        api = f"/api/v1/namespaces/{MONITORING}"
        secret = cluster.api("GET", f"{api}/secrets?fieldSelector=metadata.name=prometheus-{NAME}")
        maps = cluster.api("GET", f"{api}/configmaps?fieldSelector=metadata.name=prometheus-{NAME}-rulefiles-0")
        if not secret["items"] or not maps["items"]:
            return None
        text = gzip.decompress(base64.b64decode(secret["items"][0]["data"]["prometheus.yaml.gz"])).decode()
        jobs = [job["job_name"] for job in yaml.safe_load(text).get("scrape_configs") or []]
        rule_files = maps["items"][0].get("data") or {}
        return (text, rule_files) if rule_files and any("otel-collector" in job for job in jobs) else None
    return wait_until(ready, timeout=60, interval=0.5, message="the Operator's Secret and rule ConfigMap")


def _containers(cluster: Cluster) -> dict[str, dict]:
    """The containers of the Operator's StatefulSet for the Prometheus object, by name."""
    statefulset = cluster.api("GET", f"/apis/apps/v1/namespaces/{MONITORING}/statefulsets/prometheus-{NAME}")
    return {c["name"]: c for c in statefulset["spec"]["template"]["spec"]["containers"]}


def _reloader_env(cluster: Cluster) -> dict[str, str]:
    """The environment of the config-reloader of pod prometheus-<name>-0, as the Operator's StatefulSet gives it: the
    reloader expands each ``$(VAR)`` of the configuration (the shard, the replica's name) before Prometheus reads it."""
    reloader = _containers(cluster)["config-reloader"]
    fields = {"metadata.name": f"prometheus-{NAME}-0", "metadata.namespace": MONITORING}
    return {e["name"]: e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
            for e in reloader.get("env", [])}


def _as_a_process_runs_it(text: str, env: dict[str, str], rule_files: dict[str, str], root: Path,
                          kubeconfig: Path) -> Path:
    """The generated configuration as the pod's config-reloader writes it (``env`` expanded), with what the pod would
    mount under ``root`` and discovery's credentials."""
    config = yaml.safe_load(re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], text))
    (pattern,) = config["rule_files"]
    folder = root / Path(pattern).parent.relative_to("/")
    folder.mkdir(parents=True)
    for name, text in rule_files.items():
        (folder / name).write_text(text)
    config["rule_files"] = [str(folder / Path(pattern).name)]
    for job in config["scrape_configs"]:
        for sd in job.get("kubernetes_sd_configs", []):
            assert "api_server" not in sd and "kubeconfig_file" not in sd, sd  # in-cluster discovery, as generated
            sd["kubeconfig_file"] = str(kubeconfig)
    path = root / "prometheus.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_operator_s_configuration_scrapes_the_collector_loads_the_rules_and_fires_on_a_stopped_collector(
        cluster: Cluster, operator: Component, tmp_path: Path) -> None:
    collector = Collector(tmp_path / "collector")
    collector.start()
    try:
        _collector_pod(cluster, int(collector.ports["OTELCOL_TELEMETRY_PORT"]))
        _namespace(cluster, MONITORING)
        applied = cluster.kubectl("apply", "-k", str(OBJECTS))
        assert applied.returncode == 0, applied.stderr
        cluster.api("POST", f"/apis/monitoring.coreos.com/v1/namespaces/{MONITORING}/prometheuses",
                    _prometheus_object())
        text, rule_files = _generated(cluster)

        # The Operator's rule file is the shipped rules.yaml, group for group.
        (rules,) = rule_files.values()
        assert yaml.safe_load(rules)["groups"] == yaml.safe_load(RULES.read_text())["groups"]
        # What docs/deployment.md has the Prometheus object set for the push path reaches the pod.
        assert "--web.enable-remote-write-receiver" in _containers(cluster)["prometheus"]["args"]
        assert yaml.safe_load(text)["storage"]["tsdb"]["out_of_order_time_window"] == "1m"

        path = _as_a_process_runs_it(text, _reloader_env(cluster), rule_files, tmp_path / "pod",
                                     cluster.admin_kubeconfig)
        with Prometheus(tmp_path / "prometheus", [], config_file=path) as prom:
            shipped = yaml.safe_load(RULES.read_text())["groups"]
            loaded = prom.rules()
            assert {g["name"]: len(g["rules"]) for g in loaded} == {g["name"]: len(g["rules"]) for g in shipped}
            assert all(r["health"] != "err" for g in loaded for r in g["rules"]), loaded

            # The PodMonitor's target: the Collector replica, as job otel-collector with its pod's name.
            def scraped() -> list[dict]:
                return prom.query('up{job="otel-collector"} == 1')
            (up,) = wait_until(scraped, timeout=60, interval=0.5, message="the Collector scraped by the PodMonitor")
            assert up["metric"]["pod"] == "otel-collector-0" and up["metric"]["namespace"] == COLLECTOR, up
            own = prom.names('{job="otel-collector"}')
            assert any(name.startswith("otelcol_") for name in own), own  # the Collector's own metrics
            # Pending from the start until that first scrape (nothing was up): gone at the next evaluation.
            wait_until(lambda: not [a for a in prom.alerts() if a["labels"]["alertname"].startswith("OtelCollector")],
                       timeout=10, interval=0.5, message="no Collector alert while the Collector is scraped")

            # The fault: the only Collector stops. OtelCollectorUnavailable (for: 1m) fires as shipped.
            stopped = time.monotonic()
            collector.stop(graceful=False)

            def firing() -> bool:
                return any(a["labels"]["alertname"] == "OtelCollectorUnavailable" and a["state"] == "firing"
                           for a in prom.alerts())
            wait_until(firing, timeout=120, interval=1, message="OtelCollectorUnavailable firing")
            took = time.monotonic() - stopped
            assert took >= 60, f"fired {took:.0f} s after the stop, before its for: 1m"
            down = {a["labels"]["alertname"]: a["state"] for a in prom.alerts()}
            assert down.get("OtelCollectorReplicaDown") == "pending", down  # up == 0, for: 5m
            print(f"OtelCollectorUnavailable fired {took:.0f} s after the Collector stopped")
    finally:
        collector.stop(graceful=False)


def test_the_chart_renders_the_prometheus_rule_where_the_api_server_serves_the_kind(
        cluster: Cluster, operator: Component, tmp_path: Path) -> None:
    """``prometheusRule.enabled: auto`` asks the real API server (the CRDs are applied): the install creates the
    PrometheusRule, the shipped rules, and NOTES.txt names it. Without the CRDs, the installs of
    tests/deploy/test_helm_chart.py render none and stay clean."""
    helm = built_helm(tmp_path / "helm")
    namespace = cluster.create_namespace("nra-helm")
    installed = helm("install", "nra", str(CHART), "--namespace", namespace,
                     "--set", "prometheusRule.labels.release=kube-prometheus-stack",
                     kubeconfig=cluster.admin_kubeconfig)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "are PrometheusRule nra-node-requests-agent in namespace" in installed.stdout, installed.stdout
    rule = cluster.api("GET", f"/apis/monitoring.coreos.com/v1/namespaces/{namespace}/prometheusrules/"
                              "nra-node-requests-agent")
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
