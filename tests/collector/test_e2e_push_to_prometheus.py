"""The documented alternatives to scraping the Collector: pushing into Prometheus.

* remote write: the shipped config's ``prometheus_remote_write`` exporter put in the pipeline
  (the one change README describes) -> Prometheus 3's remote-write receiver;
* no Collector: the agent's OTLP straight into Prometheus 3 (built from its Go module without
  the web UI) with ``--web.enable-otlp-receiver``, with and without unit suffixes.

Prometheus 3's default naming appends unit and ``_total`` suffixes, also after the agent's
``_bucket``/``_sum``/``_count`` series, which breaks histogram_quantile: README says to set
``UnderscoreEscapingWithoutSuffixes``, under which the shipped rules work unchanged.
Pushed series get no staleness marker when they stop: a deleted pod receives no further
sample, but instant queries still return its last one for the lookback delta (5 m by default).
"""

from __future__ import annotations

import time

import pytest

from tests.support.agent_process import AgentProcess, otlp_env
from tests.support.collector import Collector, Prometheus
from tests.support.factory import container, pod, vm_pod
from tests.support.shipped_queries import recording_rules
from tests.support.waiting import wait_until

pytestmark = pytest.mark.collector

INTERVAL = 1.0
REMOTE_WRITE = "service::pipelines::metrics::exporters=[prometheus_remote_write]"


def _pods(api, node: str) -> None:
    api.create(pod("web", node=node, containers=[container("a", "250m", "256Mi")]))
    api.create(pod("deleted", node=node, containers=[container("a", "1", "1Gi")]))
    api.create(vm_pod("compute", "vm-1", "500m", "2Gi", node=node))


def _values(prom: Prometheus, metric: str) -> dict[str, float]:
    return {r["metric"]["k8s_pod_uid"]: float(r["value"][1]) for r in prom.query(metric)}


def _newest_sample(prom: Prometheus, selector: str) -> float:
    """Unix time of the newest sample of ``selector`` (within the lookback delta)."""
    (row,) = prom.query(f"timestamp({selector})")
    return float(row["value"][1])


def _check_values_and_deletion(prom: Prometheus, agent: AgentProcess, api, mem_name: str) -> None:
    pods = agent.pods()
    wait_until(lambda: set(_values(prom, "pod_or_vm_cpu_requests")) == set(pods), timeout=30,
               message="every reported pod pushed into Prometheus")
    assert _values(prom, "pod_or_vm_cpu_requests") == {uid: p["cpu_cores"] for uid, p in pods.items()}
    assert _values(prom, mem_name) == {uid: p["memory_bytes"] for uid, p in pods.items()}
    row = prom.query(f'{mem_name}{{k8s_pod_name="web"}}')[0]["metric"]
    assert (row["k8s_node_name"], row["k8s_namespace_name"], row["instance"]) == ("node-a", "default", "node-a")

    api.delete("default", "deleted")
    deleted_at = time.time()
    wait_until(lambda: _newest_sample(prom, 'pod_or_vm_cpu_requests{k8s_pod_name="web"}') > deleted_at + 3 * INTERVAL,
               timeout=30, message="the live pod keeps getting samples")
    # No sample after the deletion reached the next export (a batch under way may still carry one) ...
    assert _newest_sample(prom, 'pod_or_vm_cpu_requests{k8s_pod_name="deleted"}') < deleted_at + INTERVAL + 1
    # ... yet the last one is still returned: nothing marks a pushed series stale.
    assert prom.query('pod_or_vm_cpu_requests{k8s_pod_name="deleted"}')


def _recording_rules_have_data(prom: Prometheus) -> None:
    """The shipped rules (loaded by default) work on the pushed names: histogram_quantile included."""
    wait_until(lambda: all(prom.query(rule) for rule in recording_rules()), timeout=20,
               message=f"recording rules without data: {[r for r in recording_rules() if not prom.query(r)]}")


def test_remote_write_variant_of_the_shipped_config(apiserver, tmp_path):
    _pods(apiserver, "node-a")
    with Prometheus(tmp_path / "prometheus", [], extra_flags=["--web.enable-remote-write-receiver"]) as prom, \
            Collector(tmp_path / "otelcol", overrides=[REMOTE_WRITE],
                      env={"PROMETHEUS_REMOTE_WRITE_URL": f"{prom.url}/api/v1/write"}) as otelcol, \
            AgentProcess(apiserver, tmp_path / "agent", "node-a", otlp_env(otelcol.otlp_http_endpoint), INTERVAL) as agent:
        _check_values_and_deletion(prom, agent, apiserver, "pod_or_vm_mem_requests")
        assert {"pod_or_vm_cpu_requests", "pod_or_vm_mem_requests", "vm_cpu_usage", "vm_mem_usage",
                "node_requests_node_memory_bytes", "node_requests_agent_exports_total"} <= prom.names('{job="node-requests-agent"}')
        _recording_rules_have_data(prom)


@pytest.mark.parametrize("strategy, mem_name", [
    (None, "pod_or_vm_mem_requests_bytes"),  # Prometheus 3's default: UnderscoreEscapingWithSuffixes
    ("UnderscoreEscapingWithoutSuffixes", "pod_or_vm_mem_requests"),
])
def test_prometheus3_receives_the_agents_otlp_without_a_collector(strategy, mem_name, apiserver, tmp_path):
    otlp = {"promote_resource_attributes": ["k8s.node.name"], **({"translation_strategy": strategy} if strategy else {})}
    _pods(apiserver, "node-a")
    with Prometheus(tmp_path / "prometheus", [], extra_flags=["--web.enable-otlp-receiver"],
                    extra_config={"otlp": otlp}) as prom, \
            AgentProcess(apiserver, tmp_path / "agent", "node-a", otlp_env(f"{prom.url}/api/v1/otlp"), INTERVAL) as agent:
        _check_values_and_deletion(prom, agent, apiserver, mem_name)
        names = prom.names('{job="node-requests-agent"}')
        assert {"pod_or_vm_cpu_requests", mem_name, "vm_cpu_usage", "node_requests_agent_exports_total"} <= names
        assert ("pod_or_vm_mem_requests" in names) == (strategy is not None)
        if strategy is None:
            # Unit and _total suffixes land after _bucket/_sum/_count: histogram_quantile cannot use them.
            assert "node_requests_agent_workqueue_queue_duration_seconds_bucket_total" in names
        else:
            _recording_rules_have_data(prom)
