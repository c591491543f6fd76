"""The Prometheus Operator's objects hold exactly what the plain files ship (one source, issue 39 item 2).

* otel-config/prometheus-operator/: its PrometheusRule's spec is otel-config/prometheus/rules.yaml and the chart's
  copy is that file byte for byte (both written by generate.sh); its PodMonitor finds the targets of scrape.yaml's
  job otel-collector.
* The chart renders the PrometheusRule only where the cluster serves the kind (``helm template --api-versions``
  stands for a cluster with the Operator's CRDs), and refuses ``enabled=true`` without it in one line.

tests/cluster/test_prometheus_operator.py runs them through the real Operator and Prometheus 3.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from testkit.helm import CHART, Helm, built_helm
from testkit.manifests import render
from testkit.repo import REPO

OBJECTS = REPO / "otel-config" / "prometheus-operator"
RULES = REPO / "otel-config" / "prometheus" / "rules.yaml"
SCRAPE = REPO / "otel-config" / "prometheus" / "scrape.yaml"
CRD_PRESENT = ("--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
REGENERATE = "rules.yaml changed: run otel-config/prometheus-operator/generate.sh"


def _kinds(objects: list[dict]) -> dict[str, dict]:
    return {o["kind"]: o for o in objects}


def test_the_prometheus_rule_and_the_chart_s_copy_are_the_shipped_rules() -> None:
    shipped = yaml.safe_load(RULES.read_text())
    rule = _kinds(render(OBJECTS))["PrometheusRule"]
    assert rule["spec"] == shipped, REGENERATE
    assert (CHART / "files" / "prometheus-rules.yaml").read_text() == RULES.read_text(), REGENERATE


def test_generate_sh_writes_exactly_the_committed_copies(tmp_path) -> None:
    """The script run on a copy of the tree rewrites both copies byte for byte (nothing hand-edited in them)."""
    script = OBJECTS / "generate.sh"
    copies = {"otel-config/prometheus-operator/prometheusrule.yaml": OBJECTS / "prometheusrule.yaml",
              "charts/node-requests-agent/files/prometheus-rules.yaml": CHART / "files" / "prometheus-rules.yaml"}
    for folder in ("otel-config/prometheus-operator", "otel-config/prometheus", "charts/node-requests-agent/files"):
        (tmp_path / folder).mkdir(parents=True)
    shutil.copy(script, tmp_path / "otel-config/prometheus-operator/generate.sh")
    shutil.copy(RULES, tmp_path / "otel-config/prometheus/rules.yaml")
    done = subprocess.run([str(tmp_path / "otel-config/prometheus-operator/generate.sh")], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    for written, committed in copies.items():
        assert (tmp_path / written).read_text() == committed.read_text(), REGENERATE


def test_the_pod_monitor_finds_the_targets_of_the_shipped_scrape_job() -> None:
    (job,) = yaml.safe_load(SCRAPE.read_text())["scrape_configs"]
    (sd,) = job["kubernetes_sd_configs"]
    service, port = job["relabel_configs"][0]["regex"].split(";")
    collector = {(o["kind"], o["metadata"]["name"]): o for o in render(REPO / "otel-config")}
    template = collector[("Deployment", "otel-collector")]["spec"]["template"]
    selector = collector[("Service", service)]["spec"]["selector"]

    monitor = _kinds(render(OBJECTS))["PodMonitor"]["spec"]
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert monitor["namespaceSelector"]["matchNames"] == sd["namespaces"]["names"]
    # The pods behind the scraped Service, by the same labels, on the container port behind its port.
    assert monitor["selector"]["matchLabels"] == selector
    service_port = next(p for p in collector[("Service", service)]["spec"]["ports"] if p["name"] == port)
    assert endpoint["port"] == service_port["targetPort"]
    assert endpoint["port"] in {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
    # The job is named after the pods' label, as scrape.yaml names it (the rules select job="otel-collector").
    assert template["metadata"]["labels"][monitor["jobLabel"]] == job["job_name"]
    assert (endpoint["interval"], endpoint["honorLabels"]) == (job["scrape_interval"], job["honor_labels"])


@pytest.fixture(scope="module")
def helm(tmp_path_factory) -> Helm:
    return built_helm(tmp_path_factory.mktemp("helm-home"))


def _rules(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] == "PrometheusRule"]


@pytest.mark.cluster  # helm is built by components/ (Go)
def test_the_chart_renders_the_prometheus_rule_only_where_the_cluster_serves_it(helm: Helm) -> None:
    assert _rules(helm.template()) == []
    (rule,) = _rules(helm.template(*CRD_PRESENT, "--set", "prometheusRule.labels.release=kube-prometheus-stack"))
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    assert rule["metadata"]["namespace"] == "node-requests-agent"
    assert rule["metadata"]["labels"] == {"app.kubernetes.io/name": "node-requests-agent",
                                          "release": "kube-prometheus-stack"}
    (elsewhere,) = _rules(helm.template(*CRD_PRESENT, "--set", "prometheusRule.namespace=monitoring"))
    assert elsewhere["metadata"]["namespace"] == "monitoring"
    assert _rules(helm.template(*CRD_PRESENT, "--set", "prometheusRule.enabled=false")) == []
    assert len(_rules(helm.template(*CRD_PRESENT, "--set", "prometheusRule.enabled=true"))) == 1


@pytest.mark.cluster
def test_enabled_without_the_crds_is_refused_in_one_line_and_a_bad_value_by_the_schema(helm: Helm) -> None:
    refused = helm("template", "nra", str(CHART), "--set", "prometheusRule.enabled=true")
    assert refused.returncode == 1 and refused.stdout == ""
    (error,) = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert "serves no monitoring.coreos.com/v1 PrometheusRule" in error and "prometheusRule.enabled=auto" in error
    wrong = helm("template", "nra", str(CHART), "--set", "prometheusRule.enabled=yes")
    assert wrong.returncode == 1 and "/prometheusRule/enabled" in wrong.stderr, wrong.stderr


@pytest.mark.cluster
def test_the_notes_say_where_the_rules_are(helm: Helm) -> None:
    notes = helm("install", "nra", str(CHART), "--namespace", "observability", "--dry-run=client").stdout
    assert "No PrometheusRule (prometheusRule.enabled=auto; the Prometheus Operator's CRDs are not installed)" in notes
    assert "otel-config/prometheus/rules.yaml" in notes
