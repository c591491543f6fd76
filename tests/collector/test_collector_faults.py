"""Faults between the agent and the real Collector: a crash and restart, and the memory_limiter refusing data.

The agent is the real command exporting every 0.5 s with a 1 s export timeout (it retries what
is retryable within it, then drops the export); what it did is read from its own /metrics
(``node_requests_agent_exports_total{result}``), what arrived from the Collector's exporter.
"""

from __future__ import annotations

import re
import time

import psutil
import pytest

from tests.support.agent_process import AgentProcess, otlp_env
from tests.support.collector import Collector
from tests.support.http import http_get
from tests.support.waiting import wait_until
from tests.support.factory import container, pod

pytestmark = pytest.mark.collector

INTERVAL = 0.5
OTLP_ENDPOINTS = {"http/protobuf": "otlp_http_endpoint", "grpc": "otlp_grpc_endpoint"}


ARGS = ("--export-timeout", "1")


def _env(otelcol: Collector, protocol: str) -> dict[str, str]:
    return otlp_env(getattr(otelcol, OTLP_ENDPOINTS[protocol]), protocol)


def _exported_value(otelcol: Collector, pod_name: str) -> float | None:
    """The exporter's current pod_or_vm_cpu_requests for ``pod_name``, or None."""
    m = re.search(rf'^pod_or_vm_cpu_requests{{[^}}]*k8s_pod_name="{pod_name}"[^}}]*}} (\S+)$', otelcol.exported_metrics(), re.M)
    return float(m.group(1)) if m else None


def _rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


@pytest.mark.parametrize("protocol", list(OTLP_ENDPOINTS))
def test_collector_crash_and_restart_while_the_agent_runs(protocol, apiserver, tmp_path):
    web = apiserver.create(pod("web", containers=[container("a", "250m", "256Mi")]))
    with Collector(tmp_path / "otelcol") as otelcol, \
            AgentProcess(apiserver, tmp_path / "agent", "node-a", _env(otelcol, protocol), INTERVAL, ARGS) as agent:
        wait_until(lambda: _exported_value(otelcol, "web") == 0.25, timeout=20, message="first export arrives")
        failures_before = agent.exports("failure")
        otelcol.stop(graceful=False)  # a crash: SIGKILL, series and connections gone
        time.sleep(5)
        assert agent.running, "the agent died while the Collector was down"
        failed = agent.exports("failure") - failures_before
        assert failed >= 2, f"{failed} failed exports counted in 5 s down"
        # The pod changes while nobody listens: the first export after the restart carries the new value.
        web["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "750m"
        apiserver.update(web)
        successes = agent.exports("success")
        otelcol.start()
        back = time.monotonic()
        wait_until(lambda: _exported_value(otelcol, "web") == 0.75, timeout=30, message="exports resume")
        resumed = time.monotonic() - back
        assert agent.exports("success") > successes and agent.running
        print(f"{protocol}: {failed:.0f} failed exports counted in 5 s down; resumed {resumed:.1f} s after the restart")
        assert resumed < 10


def test_memory_limiter_refusals_are_counted_by_the_agent_and_memory_stays_bounded(apiserver, tmp_path):
    """A limit below the Collector's idle heap: the limiter refuses every push, as it would under memory pressure."""
    for i in range(500):
        apiserver.create(pod(f"p{i}", containers=[container("a", "100m", "128Mi")]))
    refusing = ["processors::memory_limiter::limit_mib=4", "processors::memory_limiter::spike_limit_mib=2"]
    with Collector(tmp_path / "otelcol", overrides=refusing) as otelcol, \
            AgentProcess(apiserver, tmp_path / "agent", "node-a", _env(otelcol, "http/protobuf"), INTERVAL, ARGS) as agent:
        wait_until(lambda: agent.exports("failure") >= 3, timeout=30, message="refused exports counted")
        agent_before, collector_before = agent.rss_mib(), _rss_mib(otelcol.pid)
        agent_peak, collector_peak = agent_before, collector_before
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert agent.running
            agent_peak, collector_peak = max(agent_peak, agent.rss_mib()), max(collector_peak, _rss_mib(otelcol.pid))
            time.sleep(0.5)
        assert agent.exports("success") == 0
        assert _exported_value(otelcol, "p0") is None  # nothing got past the limiter
        telemetry = http_get(otelcol.telemetry_url)[1].decode()
        refused = sum(float(v) for v in re.findall(r"^otelcol_receiver_refused_metric_points\S* (\S+)$", telemetry, re.M))
        print(f"refused {refused:.0f} points; agent RSS {agent_before:.0f} -> peak {agent_peak:.0f} MiB, "
              f"Collector RSS {collector_before:.0f} -> peak {collector_peak:.0f} MiB")
        assert refused > 0
        assert agent_peak - agent_before < 8 and collector_peak - collector_before < 50
        # Room again (the default limits): the next export goes through with the current state.
        otelcol.overrides = []
        otelcol.restart()
        wait_until(lambda: _exported_value(otelcol, "p499") == 0.1, timeout=20, message="exports resume")
        assert agent.exports("success") >= 1
