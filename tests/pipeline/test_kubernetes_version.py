"""The rules follow the cluster: /version read at start and after each relist, the handler re-evaluating on a change."""

from __future__ import annotations

import json
import logging
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.decode.reader import POD
from agent.model.rules import RULES_1_36, RULES_1_37, parse_version
from agent.pipeline.events import ADDED, MODIFIED, PodChanged, PodsListed, VersionRead
from agent.pipeline.handler import Handler
from agent.pipeline.queue import EventQueue
from agent.pipeline.state import KubernetesInfo, NodeState
from agent.telemetry.stats import RuntimeStats
from agent.source.backoff import Backoff
from agent.config import ClusterAccess
from agent.source.kube import KubeApi, load_configuration
from agent.source.server_version import VERSION_RESOURCE, ServerVersionSource
from testkit.waiting import wait_until
from testkit.factory import pod, resizing_pod

NANO = 10**9


def version_event(text: str) -> VersionRead:
    return VersionRead(version=parse_version(text))


# -- the handler -------------------------------------------------------------------------

def test_a_version_that_changes_the_rules_re_evaluates_every_pod(caplog):
    state, stats = NodeState("node-a"), RuntimeStats()
    handler = Handler(state=state, metrics=stats)
    assert state.kubernetes == KubernetesInfo(RULES_1_37, "", "default")
    handler.handle(PodsListed(pods=(POD.record(resizing_pod()), POD.record(pod("plain")))))
    assert {v.name: v.cpu for v in state.pods()} == {"resizing": 3 * NANO, "plain": NANO // 10}
    with caplog.at_level(logging.INFO, logger="agent.pipeline.handler"):
        handler.handle(version_event("v1.36.3"))
        handler.handle(version_event("v1.36.3"))  # the same reading again (another relist): nothing said, nothing redone
    assert {v.name: (v.cpu, v.rules) for v in state.pods()} == {"resizing": (4 * NANO, RULES_1_36),
                                                                "plain": (NANO // 10, RULES_1_36)}
    assert state.kubernetes == KubernetesInfo(RULES_1_36, "v1.36.3", "apiserver")
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert "v1.36.3" in said[0] and "1.36 rules" in said[0] and "1 value(s) changed" in said[1]
    # Later events are evaluated with the rules now in force.
    handler.handle(PodChanged(type=ADDED, pod=POD.record(resizing_pod("later"))))
    assert state.get(POD.record(resizing_pod("later")).uid).cpu == 4 * NANO


def test_a_version_outside_the_supported_releases_warns_once(caplog):
    state = NodeState("node-a")
    handler = Handler(state=state, metrics=RuntimeStats(), kubernetes=KubernetesInfo(RULES_1_36, "", "flag"))
    handler.handle(PodsListed(pods=(POD.record(resizing_pod()),)))
    assert state.pods()[0].cpu == 4 * NANO
    with caplog.at_level(logging.WARNING, logger="agent.pipeline.handler"):
        for _ in range(3):
            handler.handle(version_event("v1.39.0"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["Kubernetes v1.39.0 is newer than the newest supported release 1.38; using the 1.37 rules"]
    assert state.kubernetes.rules is RULES_1_37 and state.kubernetes.warning == warnings[0]
    assert state.pods()[0].cpu == 3 * NANO


def test_a_1_38_server_counts_with_the_1_37_rules_without_a_warning(caplog):
    state = NodeState("node-a")
    handler = Handler(state=state, metrics=RuntimeStats(), kubernetes=KubernetesInfo(RULES_1_36, "", "flag"))
    handler.handle(PodsListed(pods=(POD.record(resizing_pod()),)))
    with caplog.at_level(logging.INFO, logger="agent.pipeline.handler"):
        handler.handle(version_event("v1.38.0-rc.0"))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "v1.38.0-rc.0" in caplog.records[0].getMessage() and "1.37 rules" in caplog.records[0].getMessage()
    assert state.kubernetes == KubernetesInfo(RULES_1_37, "v1.38.0-rc.0", "apiserver")
    assert state.pods()[0].cpu == 3 * NANO


def test_a_status_update_after_the_switch_does_not_reuse_a_value_of_the_old_rules():
    state = NodeState("node-a")
    handler = Handler(state=state, metrics=RuntimeStats())
    p = resizing_pod()
    handler.handle(PodChanged(type=ADDED, pod=POD.record(p)))
    handler.handle(version_event("1.36"))
    p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]  # status churn only
    handler.handle(PodChanged(type=MODIFIED, pod=POD.record(p)))
    assert state.pods()[0].cpu == 4 * NANO


# -- the source against the fake API server ------------------------------------------------

@pytest.fixture
def api(apiserver, tmp_path):
    """The agent's own HTTP client (the kubernetes package) against the fake API server."""
    client = KubeApi(load_configuration(ClusterAccess(kubeconfig=apiserver.kubeconfig(tmp_path / "kubeconfig"))))
    yield client
    client.close()


def test_source_reads_at_start_and_again_after_a_relist(apiserver, api):
    queue, stats, stop = EventQueue(), RuntimeStats(), threading.Event()
    source = ServerVersionSource(api=api, emit=queue.put, metrics=stats, poll=0.05)
    thread = threading.Thread(target=source.run, args=(stop,), daemon=True)
    thread.start()
    try:
        first = queue.get(timeout=5)
        assert isinstance(first.event, VersionRead) and first.event.version.text == "v1.37.2"
        assert queue.get(timeout=0.3) is None  # no polling: nothing more until a relist
        apiserver.set_version("v1.36.3")
        source.relisted()
        second = queue.get(timeout=5)
        assert second.event.version.text == "v1.36.3"
        assert apiserver.count(path="/version") == 2
    finally:
        stop.set()
        thread.join(5)


def test_source_retries_a_failing_version_request_with_backoff(apiserver, api):
    queue, stats, stop = EventQueue(), RuntimeStats(), threading.Event()
    waits: list[float] = []

    def wait(event, seconds):
        waits.append(seconds)
        return event.wait(0)

    apiserver.fail_next(2, 503, path="/version")
    source = ServerVersionSource(api=api, emit=queue.put, metrics=stats, backoff=Backoff(initial=0.8), wait=wait,
                                 poll=0.01)
    thread = threading.Thread(target=source.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert queue.get(timeout=5).event.version.text == "v1.37.2"
    finally:
        stop.set()
        thread.join(5)
    assert len(waits) == 2 and 0.8 <= waits[0] <= 1.6 and waits[1] >= 1.6
    assert stats.snapshot().requests_failed[(VERSION_RESOURCE, "http_503")] == 2


def test_an_unparsable_version_keeps_the_rules_and_is_not_retried_in_a_loop(apiserver, api, caplog):
    queue, stats, stop = EventQueue(), RuntimeStats(), threading.Event()
    apiserver.set_version("banana")
    source = ServerVersionSource(api=api, emit=queue.put, metrics=stats)
    with caplog.at_level(logging.WARNING, logger="agent.source.server_version"):
        source.read_once(stop)
        source.relisted()
        source.read_once(stop)
    assert queue.get(timeout=0.1) is None
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "banana" in caplog.records[0].getMessage()
    assert stats.snapshot().requests_failed[(VERSION_RESOURCE, "unparsable_version")] == 2


# -- the whole agent -----------------------------------------------------------------------

def test_the_agent_follows_the_api_servers_version_across_an_upgrade(apiserver, make_agent):
    apiserver.set_version("v1.36.3")
    apiserver.create(resizing_pod())
    agent = make_agent(debug_address="127.0.0.1:0")
    wait_until(lambda: agent.state.kubernetes.server_version == "v1.36.3" and len(agent.state) == 1)
    wait_until(lambda: agent.state.pods()[0].cpu == 4 * NANO)
    runtime = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{agent.debug.port}/debug/runtime", timeout=5).read())
    assert runtime["kubernetes"] == {"server_version": "v1.36.3", "rules": "1.36", "source": "apiserver", "warning": None}

    # The control plane is upgraded; the agent's watch history is gone, so it relists and reads /version again.
    apiserver.stop()
    apiserver.set_version("v1.37.2")
    apiserver.create(pod("scheduled-meanwhile"))
    apiserver.compact()
    apiserver.start()
    wait_until(lambda: agent.state.kubernetes.rules is RULES_1_37, timeout=20)
    wait_until(lambda: {v.name: v.cpu for v in agent.state.pods()} == {"resizing": 3 * NANO,
                                                                       "scheduled-meanwhile": NANO // 10})
    text = urllib.request.urlopen(f"http://127.0.0.1:{agent.debug.port}/metrics", timeout=5).read().decode()
    info = [s for f in text_string_to_metric_families(text) if f.name == "node_requests_agent_kubernetes_info"
            for s in f.samples]
    assert [(s.labels["server_version"], s.labels["rules"], s.labels["source"], s.value) for s in info] == \
        [("v1.37.2", "1.37", "apiserver", 1.0)]


def test_with_a_fixed_version_the_agent_never_asks(apiserver, make_agent):
    apiserver.create(resizing_pod())
    agent = make_agent(kubernetes_version=parse_version("1.36"))
    wait_until(lambda: agent.state.synced and len(agent.state) == 1)
    assert agent.state.pods()[0].cpu == 4 * NANO
    assert agent.state.kubernetes == KubernetesInfo(RULES_1_36, "", "flag")
    assert apiserver.count(path="/version") == 0


def test_the_info_metrics_server_version_is_bounded_whatever_the_api_server_answers(apiserver, make_agent):
    """Issue 38: the info metric's values are bounded (rules and source come from fixed sets; the gitVersion, as long
    as /version writes it, is cut), so the agent's own info point never exceeds the Collector's label bound."""
    from agent.telemetry.table import SERVER_VERSION_LENGTH

    long_version = "v1.37.2-" + "build." * 2000
    apiserver.set_version(long_version)
    agent = make_agent(debug_address="127.0.0.1:0")
    wait_until(lambda: agent.state.kubernetes.server_version == long_version)
    text = urllib.request.urlopen(f"http://127.0.0.1:{agent.debug.port}/metrics", timeout=5).read().decode()
    info = [s for f in text_string_to_metric_families(text) if f.name == "node_requests_agent_kubernetes_info"
            for s in f.samples]
    assert [(s.labels["server_version"], s.labels["rules"], s.labels["source"]) for s in info] == \
        [(long_version[:SERVER_VERSION_LENGTH], "1.37", "apiserver")]
