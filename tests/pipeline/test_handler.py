"""The handler: one log line and one count per change of a pod's problems, never per status update."""

import logging

from agent.pipeline.events import ADDED, MODIFIED, PodChanged, PodDeleted, PodsListed
from agent.pipeline.handler import Handler
from agent.decode.reader import POD
from agent.pipeline.state import NodeState
from agent.telemetry.stats import RuntimeStats
from testkit.factory import container as pod_container, pod, vm_pod


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


def _job_pod(name: str, phase: str) -> dict:
    """One of a tenant's Job pods: owned by the Job, labelled, a scratch volume, annotations at the API's limit."""
    p = pod(name, namespace="tenant", phase=phase, labels={"job-name": "batch", "batch.kubernetes.io/job-name": "batch"},
            owner_references=[{"apiVersion": "batch/v1", "kind": "Job", "name": "batch", "uid": "j", "controller": True}],
            annotations={"vm.neon.tech/usage": '{"cpu":"1","memory":"1Gi","pad":"' + "x" * 250_000 + '"}',
                         "example.com/notes": "n" * 2_000})
    p["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return p


def test_a_completed_pod_keeps_only_what_its_reporting_needs():
    """Issue 29 item 2: a Succeeded/Failed pod counts nowhere; the state keeps its identity, phase, value and
    problems, not its record (containers, labels, eviction facts) nor its contributions."""
    import pickle

    from agent.report.views import pods_report

    def size(value) -> int:
        return len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    state = NodeState("node-a")
    handler = Handler(state=state, metrics=RuntimeStats())
    running = POD.record(_job_pod("batch-running", "Running"))
    done = [POD.record(_job_pod(f"batch-{i}", "Succeeded" if i % 2 else "Failed")) for i in range(20)]
    handler.handle(PodsListed(pods=(running, *done[:10])))
    for record in done[10:]:
        handler.handle(PodChanged(type=ADDED, pod=record))
    kept = state.get(running.uid)
    assert kept.record is not None and kept.contributions  # a running pod keeps what the verdict and explain read
    for record in done:
        value = state.get(record.uid)
        assert value.record is None and value.contributions == ()
        assert not value.reported and value.phase == record.phase and value.memory == kept.memory
        assert [p.reason for p in value.problems] == ["out_of_range"]  # still shown why its usage was refused
        assert size(value) < size(kept) / 2 and size(value) < 1500, size(value)
    # The same pod finishing on a watch event (Running -> Succeeded) is slimmed too.
    finished = _job_pod("batch-running", "Succeeded")
    handler.handle(PodChanged(type=MODIFIED, pod=POD.record(finished)))
    assert state.get(running.uid).record is None
    snapshot = state.snapshot()
    assert snapshot.summary().pods_by_phase == {"Succeeded": 11, "Failed": 10}
    shown = {p["name"]: p for p in pods_report(snapshot.pods)["pods"]}
    assert shown["batch-1"]["reported"] is False and shown["batch-1"]["problems"]


def _resized(name: str, cpu: str, ready: str = "True", statuses: bool = True):
    """A pod whose app container asks for ``cpu``; its status still reports the 100m it started with (a resize)."""
    p = pod(name, containers=[pod_container("app", cpu, "1Gi"), pod_container("sidecar", "50m", "64Mi")],
            conditions=[{"type": "Ready", "status": ready}], overhead={"cpu": "10m"},
            container_statuses=[{"name": "app", "allocatedResources": {"cpu": "100m", "memory": "1Gi"},
                                 "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}}] if statuses else None)
    p["metadata"]["creationTimestamp"] = "2026-11-30T06:00:00Z"
    return p


def test_a_pod_whose_requests_change_is_revalued_at_every_event_and_one_whose_requests_do_not_keeps_its_value():
    """The decode caches (shared request maps and containers, parsed times) and the kept values must never hand back
    a stale value: requests that change, and change back to a value seen before, are valued anew each time."""
    state = NodeState("node-a")
    handler = Handler(state=state, metrics=RuntimeStats())
    resized, steady = _resized("resized", "100m"), _resized("steady", "300m", statuses=False)
    handler.handle(PodChanged(type=ADDED, pod=POD.record(resized)))
    handler.handle(PodChanged(type=ADDED, pod=POD.record(steady)))
    kept = state.get(POD.record(steady).uid)
    # (spec cpu, the value: max of spec and the status's 100m, plus 10m overhead; the spec-only sum)
    for cpu, value, spec_only in (("200m", 260, 260), ("300m", 360, 360), ("200m", 260, 260), ("50m", 160, 110),
                                  ("100m", 160, 160)):
        resized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
        handler.handle(PodChanged(type=MODIFIED, pod=POD.record(resized)))
        ready = "False" if cpu == "300m" else "True"  # status churn of the other pod: same requests
        handler.handle(PodChanged(type=MODIFIED, pod=POD.record(_resized("steady", "300m", ready, statuses=False))))
        got = state.get(POD.record(resized).uid)
        assert (got.cpu, got.spec_cpu) == (value * 10**6, spec_only * 10**6), cpu
        assert [c.cpu for c in got.contributions if c.name == "app"] == [int(cpu[:-1]) * 10**6]
        same = state.get(kept.uid)
        assert same.contributions is kept.contributions and same.cpu == 360 * 10**6  # not recomputed, still held
    assert {v.name for v in state.pods()} == {"resized", "steady"}
