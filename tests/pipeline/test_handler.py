"""The handler: one log line and one count per change of a pod's problems, never per status update."""

import logging

from agent.pipeline.events import ADDED, MODIFIED, PodChanged, PodDeleted, PodsListed
from agent.pipeline.handler import Handler
from agent.decode.reader import POD
from agent.pipeline.state import NodeState
from agent.telemetry.stats import RuntimeStats
from tests.support.factory import pod, vm_pod


def test_bad_annotation_is_logged_and_counted_once_per_change(caplog):
    state, stats = NodeState("node-a"), RuntimeStats()
    handler = Handler(state=state, metrics=stats)
    bad = vm_pod("r", "vm1", "1", "1Gi", node="node-a")
    bad["metadata"]["annotations"]["vm.neon.tech/usage"] = "{broken"
    with caplog.at_level(logging.WARNING, logger="agent.pipeline.handler"):
        handler.handle(PodChanged(type=ADDED, pod=POD.record(bad)))
        for i in range(5):  # status churn: same problem
            bad["status"]["conditions"] = [{"type": "Ready", "status": str(i % 2 == 0)}]
            handler.handle(PodChanged(type=MODIFIED, pod=POD.record(bad)))
        bad["metadata"]["annotations"]["vm.neon.tech/usage"] = '{"cpu": "1"}'  # a different problem
        handler.handle(PodChanged(type=MODIFIED, pod=POD.record(bad)))
        bad["metadata"]["annotations"]["vm.neon.tech/usage"] = '{"cpu": "1", "memory": "1Gi"}'  # fixed
        handler.handle(PodChanged(type=MODIFIED, pod=POD.record(bad)))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "neon/r" in lines[0] and "not JSON" in lines[0] and "pod requests" in lines[0]
    assert "missing 'cpu'" in lines[1] or "missing 'memory'" in lines[1]
    assert dict(stats.snapshot().pod_problems) == {("usage", "invalid_json"): 1, ("usage", "missing_field"): 1}
    assert state.pods()[0].source == "vm_usage"


def test_relist_replaces_the_state_and_keeps_values_of_unchanged_pods():
    state, stats = NodeState("node-a"), RuntimeStats()
    handler = Handler(state=state, metrics=stats)
    a, b = POD.record(pod("a")), POD.record(pod("b"))
    handler.handle(PodsListed(pods=(a, b)))
    before = state.get(a.uid)
    handler.handle(PodsListed(pods=(POD.record(pod("a")), POD.record(pod("c")))))
    assert {p.name for p in state.pods()} == {"a", "c"}
    assert state.get(a.uid) is before  # nothing changed: the value is reused, not recomputed


def test_phase_change_alone_updates_reported():
    state, stats = NodeState("node-a"), RuntimeStats()
    handler = Handler(state=state, metrics=stats)
    p = pod("job")
    handler.handle(PodChanged(type=ADDED, pod=POD.record(p)))
    p["status"]["phase"] = "Failed"
    handler.handle(PodChanged(type=MODIFIED, pod=POD.record(p)))
    assert state.pods()[0].reported is False
    handler.handle(PodDeleted(pod=POD.record(p)))
    assert len(state) == 0
