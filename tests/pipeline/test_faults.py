"""Fault injection through the whole pipeline: hostile pods, a Collector that stays down."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.decode.reader import POD
from agent.model.quantity import to_bytes, to_float
from agent.model.rules import NEWEST
from agent.model.valuation import evaluate
from testkit.waiting import wait_until
from testkit.factory import pod
from testkit.otlp_receiver import points_of
from testkit.processes import stop_process
from testkit.strategies import messy_pods

_batch = itertools.count()


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, module_http_receiver):
    """One real agent (subprocess-free, in this process) fed by the fake API server, exporting OTLP/HTTP."""
    from agent.run.agent import Agent
    from agent.config import otlp_settings
    from testkit.agents import agent_config
    from testkit.fake_apiserver import FakeApiServer

    api = FakeApiServer(bookmark_interval=0.5).start()
    otlp = otlp_settings({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": module_http_receiver.endpoint + "/v1/metrics"})
    agent = Agent(agent_config(node_name="node-a", kubeconfig=api.kubeconfig(tmp_path_factory.mktemp("kc") / "kc"),
                               exporter="otlp", otlp=otlp, export_interval=0.2, read_timeout=5.0,
                               watch_timeout=(30, 40))).start()
    yield api, module_http_receiver, agent
    agent.shutdown(final_export=False)
    api.stop()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(messy_pods(), min_size=1, max_size=6))
def test_hostile_pods_through_source_state_and_export(pipeline, pods):
    api, receiver, agent = pipeline
    batch = next(_batch)
    expected = {}
    for i, p in enumerate(pods):
        meta = p["metadata"] if isinstance(p.get("metadata"), dict) else p.setdefault("metadata", {})
        if not isinstance(meta, dict):
            p["metadata"] = meta = {}
        meta.update(name=f"fuzz-{batch}-{i}", namespace=f"fuzz-{batch}", uid=f"uid-{batch}-{i}")
        stored = api.create(p)
        if isinstance(stored.get("spec"), dict) and stored["spec"].get("nodeName") == "node-a":
            value = evaluate(POD.record(stored), NEWEST)
            if value.reported:
                expected[value.uid] = value
    # A well-formed pod in every batch: the hostile ones must not stop it from arriving, and the
    # assertions below always have something to check.
    sentinel = evaluate(POD.record(api.create(pod(f"sentinel-{batch}", namespace=f"fuzz-{batch}"))), NEWEST)
    expected[sentinel.uid] = sentinel

    def exported(points):
        return {pt.attributes["k8s.pod.uid"]: pt for pt in points
                if pt.metric == "pod_or_vm_cpu_requests" and pt.attributes["k8s.pod.uid"] in expected}

    points = receiver.wait_for(lambda pts: set(exported(pts)) == set(expected), timeout=15)
    cpu = exported(points)
    mem = {pt.attributes["k8s.pod.uid"]: pt for pt in points if pt.metric == "pod_or_vm_mem_requests"}
    for uid, value in expected.items():
        assert cpu[uid].value == pytest.approx(to_float(value.cpu))
        assert mem[uid].value == to_bytes(value.memory)
        assert cpu[uid].attributes["source"] == value.source
    assert agent.stats.snapshot().handler_errors == {}


def _rss(proc: subprocess.Popen) -> float:
    return psutil.Process(proc.pid).memory_info().rss / 2**20


def test_collector_down_for_a_while_then_back(apiserver, tmp_path, http_receiver):
    """Shortened in CI (NRA_SOAK_SECONDS, default 20 s); the soak form runs minutes."""
    from testkit.factory import pod

    outage = float(os.environ.get("NRA_SOAK_SECONDS", "20"))
    for i in range(110):
        apiserver.create(pod(f"p{i}"))
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint}
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--node-name", "node-a", "--kubeconfig",
                             apiserver.kubeconfig(tmp_path / "kc"), "--export-interval", "0.5", "--debug-address", "off",
                             "--log-level", "ERROR"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        http_receiver.wait_for(lambda pts: sum(p.metric == "pod_or_vm_cpu_requests" for p in pts) == 110, timeout=30)
        http_receiver.fail = True
        time.sleep(2)
        before = _rss(proc)
        deadline = time.monotonic() + outage
        peak = before
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the agent died while the Collector was down"
            peak = max(peak, _rss(proc))
            time.sleep(0.5)
        assert peak - before < 8, f"RSS grew {peak - before:.1f} MiB during a {outage:.0f} s Collector outage"
        apiserver.create(pod("during-outage"))
        http_receiver.fail = False
        back = time.monotonic()
        http_receiver.wait_for(lambda pts: sum(p.metric == "pod_or_vm_cpu_requests" for p in pts) == 111, timeout=20)
        assert time.monotonic() - back < 10
    finally:
        stop_process(proc, 10.0)


def test_churn_every_live_pod_is_exported_in_every_cycle(apiserver, make_agent, monkeypatch, http_receiver):
    """Pods created and deleted with at most 110 live (NRA_CHURN_PODS, default 2,000 in CI; the soak form is 20,000).

    For every export: each pod that had been live for two intervals before it and stayed live after it is in it,
    and no pod deleted two intervals before it is (no ghost).
    """
    from testkit.factory import pod

    total = int(os.environ.get("NRA_CHURN_PODS", "2000"))
    interval = 0.2
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", http_receiver.endpoint)
    agent = make_agent(exporter="otlp", export_interval=interval)
    wait_until(lambda: agent.state.synced)
    born: dict[str, float] = {}
    died: dict[str, float] = {}
    live: list[str] = []
    start = time.monotonic()
    for i in range(total):
        name = f"churn-{i}"
        apiserver.create(pod(name))
        born[name] = time.monotonic()
        live.append(name)
        if len(live) > 110:
            victim = live.pop(0)
            apiserver.delete("default", victim)
            died[victim] = time.monotonic()
        if i % 50 == 0:
            time.sleep(0.05)  # spread the churn over several export cycles
    http_receiver.wait_for(lambda pts: {p.attributes["k8s.pod.name"] for p in pts
                                        if p.metric == "pod_or_vm_cpu_requests"} == set(live), timeout=20)
    checked = 0
    margin = 2 * interval + 0.1
    for sent_at, request in list(http_receiver.requests):
        if sent_at < start:
            continue
        exported = {p.attributes["k8s.pod.name"] for p in points_of(request) if p.metric == "pod_or_vm_cpu_requests"}
        must = {n for n, t in born.items() if t < sent_at - margin and died.get(n, float("inf")) > sent_at}
        ghosts = {n for n, t in died.items() if t < sent_at - margin}
        assert must <= exported, f"export at +{sent_at - start:.2f} s missed {sorted(must - exported)[:5]}"
        assert not (ghosts & exported), f"export at +{sent_at - start:.2f} s carried deleted {sorted(ghosts & exported)[:5]}"
        checked += 1
    assert checked >= 5
