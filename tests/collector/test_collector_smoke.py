"""Smoke tests of the real parts: the built OpenTelemetry Collector and Prometheus 3 (built from its Go module
without the web UI, which serves the HTTP API all the same).

They pin down what the rest of the suite relies on: the shipped collector
config is valid for this build, an OTLP/HTTP gauge arrives in Prometheus under
the seed's exact name with its attributes as labels, and how long the
prometheus exporter keeps a series that is no longer sent. (promtool's check of
the shipped rules is in tests/deploy/test_deploy.py.)
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from testkit.collector import SHIPPED_CONFIG, Collector, Prometheus, gauge, otlp_request, post_otlp, sum_metric
from testkit.shipped_queries import alerts as shipped_alerts, recording_rules
from testkit.waiting import wait_until

pytestmark = pytest.mark.collector

FAST_BATCH = "processors::batch::timeout=100ms"  # the shipped 1 s would only slow these tests down
RESOURCE = {"k8s.node.name": "node-a", "service.name": "node-requests-agent", "service.instance.id": "node-a"}
POD = {"k8s.pod.name": "web-1", "k8s.namespace.name": "default", "k8s.pod.uid": "uid-web-1"}


def seed_request(cpu: float = 0.25, pod: dict | None = None) -> object:
    """The agent's two product gauges for one pod, with their real units."""
    attrs = pod or POD
    return otlp_request(RESOURCE, [gauge("pod_or_vm_cpu_requests", "{cpu}", [(attrs, cpu)]),
                                   gauge("pod_or_vm_mem_requests", "By", [(attrs, 2.0**28)])])


def exported_names(text: str) -> set[str]:
    """Metric names in a /metrics exposition, comments skipped."""
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line and not line.startswith("#")}


def validate(config) -> subprocess.CompletedProcess:
    from components.collector import otelcol_bin
    return subprocess.run([str(otelcol_bin()), "validate", "--config", str(config)], capture_output=True, text=True,
                          timeout=60)


def test_the_build_validates_the_shipped_config():
    shipped = validate(SHIPPED_CONFIG)
    assert shipped.returncode == 0, shipped.stderr


def test_a_gauge_reaches_prometheus_under_the_exact_seed_name_with_its_labels(tmp_path):
    with Collector(tmp_path / "otelcol", overrides=[FAST_BATCH]) as otelcol, \
            Prometheus(tmp_path / "prometheus", [otelcol.prometheus_target]) as prom:
        assert post_otlp(otelcol.otlp_http_metrics_url, seed_request()) == 200
        series = wait_until(lambda: prom.query('{__name__=~"pod_or_vm_.*"}'), timeout=20,
                            message="pod_or_vm_* scraped into Prometheus")
        wait_until(lambda: len(prom.query('{__name__=~"pod_or_vm_.*"}')) == 2, timeout=5)
        series = prom.query('{__name__=~"pod_or_vm_.*"}')
        assert {s["metric"]["__name__"] for s in series} == {"pod_or_vm_cpu_requests", "pod_or_vm_mem_requests"}
        cpu = prom.query("pod_or_vm_cpu_requests")
        assert [float(s["value"][1]) for s in cpu] == [0.25]
        labels = cpu[0]["metric"]
        # Dots become underscores; resource attributes become labels (honor_labels keeps job/instance).
        assert {k: labels[k] for k in ("k8s_node_name", "k8s_pod_name", "k8s_namespace_name", "k8s_pod_uid")} == {
            "k8s_node_name": "node-a", "k8s_pod_name": "web-1", "k8s_namespace_name": "default",
            "k8s_pod_uid": "uid-web-1"}
        assert labels["job"] == "node-requests-agent" and labels["instance"] == "node-a"
        print("labels seen in Prometheus:", sorted(labels))


def test_the_shipped_config_keeps_the_seed_names_without_unit_suffixes(tmp_path):
    with Collector(tmp_path / "otelcol", overrides=[FAST_BATCH]) as otelcol:
        assert post_otlp(otelcol.otlp_http_metrics_url, seed_request()) == 200
        names = wait_until(lambda: exported_names(otelcol.exported_metrics()) - {"target_info"}, timeout=10)
        assert names == {"pod_or_vm_cpu_requests", "pod_or_vm_mem_requests"}


@pytest.mark.parametrize("strategy, expected", [
    ("UnderscoreEscapingWithoutSuffixes",
     {"node_requests_agent_watch_starts_total", "node_requests_agent_requests_failed", "x_duration"}),
    ("UnderscoreEscapingWithSuffixes",
     {"node_requests_agent_watch_starts_total", "node_requests_agent_requests_failed_total", "x_duration_seconds"}),
])
def test_counter_total_and_unit_suffixes_per_translation_strategy(tmp_path, strategy, expected):
    """``_total`` is appended to counters only with suffixes; a name already ending in it is never doubled."""
    request = otlp_request(RESOURCE, [
        sum_metric("node_requests_agent_watch_starts_total", "{watch}", [({"reason": "initial"}, 3)]),
        sum_metric("node_requests_agent_requests_failed", "1", [({}, 2)]),
        gauge("x.duration", "s", [({}, 1)]),
    ])
    overrides = [FAST_BATCH, f"exporters::prometheus::translation_strategy={strategy}"]
    with Collector(tmp_path / "otelcol", overrides=overrides) as otelcol:
        assert post_otlp(otelcol.otlp_http_metrics_url, request) == 200
        names = wait_until(lambda: exported_names(otelcol.exported_metrics()) - {"target_info"}, timeout=10)
        assert names == expected


def test_a_series_no_longer_sent_expires_from_the_exporter_after_metric_expiration(tmp_path):
    expiration = 3.0
    overrides = [FAST_BATCH, f"exporters::prometheus::metric_expiration={expiration:g}s"]
    with Collector(tmp_path / "otelcol", overrides=overrides) as otelcol, \
            Prometheus(tmp_path / "prometheus", [otelcol.prometheus_target]) as prom:
        gone = {**POD, "k8s.pod.name": "gone-1", "k8s.pod.uid": "uid-gone-1"}
        assert post_otlp(otelcol.otlp_http_metrics_url, seed_request(pod=gone)) == 200
        sent_last = time.monotonic()
        wait_until(lambda: 'k8s_pod_name="gone-1"' in otelcol.exported_metrics(), timeout=5)
        wait_until(lambda: prom.query('pod_or_vm_cpu_requests{k8s_pod_name="gone-1"}'), timeout=10)
        # Another pod keeps being sent, as live pods are: only the silent series may go.
        deadline = time.monotonic() + expiration + 10
        while 'k8s_pod_name="gone-1"' in otelcol.exported_metrics():
            assert time.monotonic() < deadline, "series still exported long after metric_expiration"
            assert post_otlp(otelcol.otlp_http_metrics_url, seed_request()) == 200
            time.sleep(0.1)
        exporter_delay = time.monotonic() - sent_last
        wait_until(lambda: not prom.query('pod_or_vm_cpu_requests{k8s_pod_name="gone-1"}'), timeout=10,
                   message="Prometheus marks the vanished series stale")
        prometheus_delay = time.monotonic() - sent_last
        assert prom.query('pod_or_vm_cpu_requests{k8s_pod_name="web-1"}')
        print(f"metric_expiration {expiration} s: gone from /metrics after {exporter_delay:.1f} s, "
              f"from Prometheus queries after {prometheus_delay:.1f} s")
        assert expiration - 0.5 <= exporter_delay <= expiration + 2


def test_restart_keeps_the_endpoints_and_forgets_the_series(tmp_path):
    with Collector(tmp_path / "otelcol", overrides=[FAST_BATCH]) as otelcol:
        ports, pid = dict(otelcol.ports), otelcol.pid
        assert post_otlp(otelcol.otlp_http_metrics_url, seed_request()) == 200
        wait_until(lambda: "pod_or_vm_cpu_requests" in otelcol.exported_metrics(), timeout=5)
        otelcol.restart(graceful=False)
        assert otelcol.ports == ports and otelcol.pid != pid
        assert "pod_or_vm_cpu_requests" not in otelcol.exported_metrics()
        assert post_otlp(otelcol.otlp_http_metrics_url, seed_request(cpu=0.5)) == 200
        wait_until(lambda: "pod_or_vm_cpu_requests" in otelcol.exported_metrics(), timeout=5)


def test_prometheus_loads_the_shipped_rules_and_reports_them(tmp_path):
    rules = SHIPPED_CONFIG.parent / "prometheus" / "rules.yaml"
    with Collector(tmp_path / "otelcol", overrides=[FAST_BATCH]) as otelcol, \
            Prometheus(tmp_path / "prometheus", [otelcol.prometheus_target], rule_files=[rules]) as prom:
        assert post_otlp(otelcol.otlp_http_metrics_url, seed_request()) == 200
        recorded = wait_until(lambda: prom.query("node:pod_or_vm_cpu_requests:sum"), timeout=20,
                              message="recording rule evaluated")
        assert [(r["metric"]["k8s_node_name"], float(r["value"][1])) for r in recorded] == [("node-a", 0.25)]
        assert all(rule["health"] != "err" for group in prom.rules() for rule in group["rules"])
        # Prometheus loaded the shipped rules file, every alert and recording rule of it, by name.
        loaded = {(rule["type"], rule["name"]) for group in prom.rules() for rule in group["rules"]}
        assert loaded == ({("alerting", name) for name in shipped_alerts()}
                          | {("recording", name) for name in recording_rules()})
        assert {a["labels"]["alertname"] for a in prom.alerts()} <= set(shipped_alerts())
        assert {t["health"] for t in prom.targets()} == {"up"}
