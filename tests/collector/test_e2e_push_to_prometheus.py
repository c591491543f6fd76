"""Pushing into Prometheus: the shipped remote write, a Collector in its default configuration, and none.

* remote write: the shipped config's ``prometheus_remote_write`` exporter (the shipped pipeline's
  export; the token check is left out here, tests/collector/test_collector_trust.py runs it)
  -> Prometheus 3's remote-write receiver;
* a Collector in its default configuration (testkit/histogram_quantile.py): the exporter's
  own naming, unit suffixes included;
* no Collector: the agent's OTLP straight into Prometheus 3 (built from its Go module without
  the web UI) with ``--web.enable-otlp-receiver``, with and without unit suffixes.

The agent's histograms are OTLP histograms, so every one of these names their series
``..._seconds_bucket``/``_sum``/``_count`` and histogram_quantile works on them; default naming
changes only the product metrics that have a unit (``pod_or_vm_mem_requests_bytes``), which is why
the shipped config sets ``UnderscoreEscapingWithoutSuffixes``.
Pushed series get no staleness marker when they stop: a deleted pod receives no further
sample, but instant queries still return its last one for the lookback delta (5 m by default).
"""

from __future__ import annotations

import time

import pytest

from testkit.agent_process import AgentProcess, otlp_env
from testkit.collector import Collector, Prometheus
from testkit.factory import container, pod, vm_pod
from testkit.factory import node as node_object
from testkit.histogram_quantile import QUEUE_DURATION, default_collector_config, quantile_matches_agent
from testkit.shipped_queries import recording_rules
from testkit.waiting import wait_until

pytestmark = pytest.mark.collector

INTERVAL = 1.0
REMOTE_WRITE = "service::pipelines::metrics::exporters=[prometheus_remote_write]"


def _pods(api, node: str) -> None:
    """The node's Node object too: without it the autoscaler's utilization is unknown, so absent (a recording rule
    of it would have no data)."""
    api.create(node_object(node, "8", "32Gi"), kind="nodes")
    api.create(pod("web", node=node, containers=[container("a", "250m", "256Mi")]))
    api.create(pod("deleted", node=node, containers=[container("a", "1", "1Gi")]))
    api.create(vm_pod("compute", "vm-1", "500m", "2Gi", node=node))


def _values(prom: Prometheus, metric: str) -> dict[str, float]:
    return {r["metric"]["k8s_pod_uid"]: float(r["value"][1]) for r in prom.query(metric)}


def _sample_times(prom: Prometheus, selector: str) -> list[float]:
    """Unix times of the samples of the one series ``selector`` matches, over the last 5 minutes."""
    (row,) = prom.api("query", {"query": f"{selector}[5m]"})["result"]
    return [float(t) for t, _ in row["values"]]


def _check_values_and_deletion(prom: Prometheus, agent: AgentProcess, api, mem_name: str) -> None:
    pods = agent.pods()
    wait_until(lambda: set(_values(prom, "pod_or_vm_cpu_requests")) == set(pods), timeout=30,
               message="every reported pod pushed into Prometheus")
    assert _values(prom, "pod_or_vm_cpu_requests") == {uid: p["cpu_cores"] for uid, p in pods.items()}
    assert _values(prom, mem_name) == {uid: p["memory_bytes"] for uid, p in pods.items()}
    row = prom.query(f'{mem_name}{{k8s_pod_name="web"}}')[0]["metric"]
    assert (row["k8s_node_name"], row["k8s_namespace_name"], row["instance"]) == ("node-a", "default", "node-a")

    api.delete("default", "deleted")
    wait_until(lambda: "deleted" not in {p["name"] for p in agent.pods().values()}, timeout=10,
               message="the agent handled the delete")
    handled_at = time.time()
    wait_until(lambda: max(_sample_times(prom, 'pod_or_vm_cpu_requests{k8s_pod_name="web"}')) > handled_at + 3 * INTERVAL,
               timeout=30, message="the live pod keeps getting samples")
    # No export that read the state after the delete was handled carried the pod: an export reads the state, then
    # stamps its points, so at most the one that read it just before can bear a later time ...
    late = [t for t in _sample_times(prom, 'pod_or_vm_cpu_requests{k8s_pod_name="deleted"}') if t > handled_at]
    assert len(late) <= 1, late
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
        quantile_matches_agent(prom, agent, 'instance="node-a"')


def test_a_collector_in_its_default_configuration_keeps_the_histograms_usable(apiserver, tmp_path):
    """otlp receiver -> prometheusremotewrite with nothing set: its suffixes apply, and the histograms still
    arrive as the ``_bucket``/``_sum``/``_count`` that docs/metrics.md names (no ``_bucket_total``)."""
    _pods(apiserver, "node-a")
    with Prometheus(tmp_path / "prometheus", [], extra_flags=["--web.enable-remote-write-receiver"]) as prom, \
            Collector(tmp_path / "otelcol", default_collector_config(tmp_path / "otelcol", f"{prom.url}/api/v1/write")) \
            as otelcol, \
            AgentProcess(apiserver, tmp_path / "agent", "node-a", otlp_env(otelcol.otlp_http_endpoint), INTERVAL) as agent:
        names = wait_until(lambda: (n := prom.names('{job="node-requests-agent",instance="node-a"}')) >= {
            QUEUE_DURATION + "_bucket", "pod_or_vm_mem_requests_bytes"} and n, timeout=30,
            message="the agent's series through the default Collector")
        assert {QUEUE_DURATION + s for s in ("_bucket", "_sum", "_count")} <= names
        assert not {n for n in names if n.endswith(("_bucket_total", "_sum_total", "_count_total"))}
        quantile_matches_agent(prom, agent, 'instance="node-a"')


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
        # Either way the histograms keep their names: the unit suffix is already in them.
        quantile_matches_agent(prom, agent, 'instance="node-a"')
        if strategy is not None:
            _recording_rules_have_data(prom)
