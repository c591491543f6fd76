"""The node state keeps the autoscaler's verdict between exports: the same verdict while nothing it reads changed
and time has not passed the point it holds until; a fresh one after any change of pods, Node, PDBs or settings, or
once a grace period or a kube-system pod's timeout runs out. Exact: always what scale_down_verdict computes now."""

from __future__ import annotations

import random
import time

import msgspec

from agent.decode.reader import NODE, PDB, POD
from agent.model.autoscaler_settings import AutoscalerSettings
from agent.model.scale_down import UNMOVABLE_KUBE_SYSTEM, scale_down_verdict
from agent.pipeline.events import ADDED, MODIFIED, NodeChanged, PdbChanged, PdbDeleted, PdbsListed, PodChanged, \
    PodDeleted, PodsListed
from agent.pipeline.handler import Handler
from agent.pipeline.state import NodeState
from agent.telemetry.stats import RuntimeStats
from testkit.factory import container, node, pdb, pod

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def owned(name: str, namespace: str = "default", labels: dict[str, str] | None = None) -> dict:
    return pod(name, namespace=namespace, labels=labels or {"app": name},
               owner_references=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-rs",
                                  "uid": f"u-{name}", "controller": True}])


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def fresh(state: NodeState, now: float):
    """The verdict computed from scratch on what the state holds, every pod matched against the PDBs here rather
    than read from the state's kept coverings: what the cache must always equal."""
    s = state.snapshot()
    return msgspec.structs.replace(s, verdicts=None, covering=None).verdict(now)


def test_the_verdict_is_kept_while_nothing_it_reads_changes():
    state = NodeState("node-a")
    handler = Handler(state=state, metrics=RuntimeStats())
    handler.handle(NodeChanged(type=ADDED, node=NODE.record(node("node-a"))))
    handler.handle(PodsListed(pods=tuple(POD.record(owned(f"web-{i}")) for i in range(20))))
    handler.handle(PdbsListed(pdbs=()))
    first = state.snapshot().verdict(NOW)
    assert state.snapshot().verdict(NOW + 3600) is first  # nothing it reads changed; time changes nothing here
    state.set_usage(None)
    state.observed("12345")
    assert state.snapshot().verdict(NOW + 7200) is first  # usage samples and bookmarks are not its inputs

    handler.handle(PodChanged(type=ADDED, pod=POD.record(pod("stray", containers=[container("a", "1", "1Gi")]))))
    after_pod = state.snapshot().verdict(NOW)
    assert after_pod is not first and [b.name for b in after_pod.blockers] == ["stray"]
    handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(pdb("web-0", match_labels={"app": "web-0"}))))
    after_pdb = state.snapshot().verdict(NOW)
    assert {b.name for b in after_pdb.blockers} == {"stray", "web-0"}
    disabled = node("node-a")
    disabled["metadata"]["annotations"] = {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}
    handler.handle(NodeChanged(type=MODIFIED, node=NODE.record(disabled)))
    assert state.snapshot().verdict(NOW).state == "scale_down_disabled"
    state.autoscaler = AutoscalerSettings(release="1.31")
    assert state.snapshot().verdict(NOW).release == "1.31"


def test_a_kube_system_timeout_running_out_ends_the_kept_verdict():
    state = NodeState("node-a")
    handler = Handler(state=state, metrics=RuntimeStats())
    handler.handle(NodeChanged(type=ADDED, node=NODE.record(node("node-a"))))
    handler.handle(PdbsListed(pdbs=()))
    dns = owned("dns", namespace="kube-system")
    dns["metadata"]["creationTimestamp"] = "2027-01-15T07:30:00Z"  # the 1 h timeout runs out at NOW + 1800
    handler.handle(PodsListed(pods=(POD.record(dns),)))
    blocked = state.snapshot().verdict(NOW)
    assert [b.reason for b in blocked.blockers] == [UNMOVABLE_KUBE_SYSTEM]
    assert state.snapshot().verdict(NOW + 1800) is blocked  # strictly after the timeout, not at it
    assert not state.snapshot().verdict(NOW + 1800.5).blockers
    assert state.snapshot().verdict(NOW) == blocked  # a clock behind the kept verdict's: computed again


def test_kept_verdicts_equal_fresh_ones_through_random_changes():
    """Pods added, changed and deleted, PDBs coming and going, pods being deleted with their grace period running
    out, the clock moving on: at every step the state's verdict is the one computed from scratch."""
    rng = random.Random(31)
    state = NodeState("node-a")
    handler = Handler(state=state, metrics=RuntimeStats())
    handler.handle(NodeChanged(type=ADDED, node=NODE.record(node("node-a", cpu="4", memory="8Gi"))))
    handler.handle(PdbsListed(pdbs=()))
    handler.handle(PodsListed(pods=()))
    now, live = NOW, {}
    for step in range(300):
        action = rng.random()
        name = f"p{rng.randrange(12)}"
        if action < 0.25:
            p = owned(name, namespace=rng.choice(["default", "kube-system"]), labels={"app": rng.choice("ab")})
            p["spec"]["containers"] = [container("c", f"{rng.randrange(1, 900)}m", "64Mi")]
            # kube-system pods that stop blocking an hour after creation, some soon
            p["metadata"]["creationTimestamp"] = iso(now - rng.choice([60, 3500, 3590, 7200]))
            if rng.random() < 0.3:  # being deleted: long-terminating once grace + 30 s has passed
                p["metadata"]["deletionTimestamp"] = iso(now - rng.choice([0, 20, 50]))
                p["spec"]["terminationGracePeriodSeconds"] = rng.choice([0, 5, 30])
            kind = MODIFIED if name in live else ADDED
            live[name] = POD.record(p)
            handler.handle(PodChanged(type=kind, pod=live[name]))
        elif action < 0.3 and name in live:
            handler.handle(PodDeleted(pod=live.pop(name)))
        elif action < 0.35:
            guard = pdb(f"g-{rng.choice('ab')}", namespace=rng.choice(["default", "kube-system"]),
                        match_labels={"app": rng.choice("ab")}, disruptions_allowed=rng.randrange(3))
            if rng.random() < 0.7:
                handler.handle(PdbChanged(type=ADDED, pdb=PDB.record(guard)))
            else:
                handler.handle(PdbDeleted(pdb=PDB.record(guard)))
        now += rng.choice([0.0, 0.5, 1.0, 5.0, 10.0, 29.0, 60.0])
        for at in (now, now + rng.random() * 100):
            assert state.snapshot().verdict(at) == fresh(state, at), f"step {step}"


def test_the_kept_verdict_is_what_the_model_computes():
    state = NodeState("node-a")
    handler = Handler(state=state, metrics=RuntimeStats())
    n = NODE.record(node("node-a"))
    handler.handle(NodeChanged(type=ADDED, node=n))
    handler.handle(PodsListed(pods=(POD.record(owned("a")),)))
    s = state.snapshot()
    assert s.verdict(NOW) == scale_down_verdict(node_name="node-a", node=n, pods=s.pods, pdbs=None,
                                                settings=state.autoscaler, now=NOW)


def test_wait_listed_wakes_a_waiter_once_the_pods_are_synced_and_the_node_read() -> None:
    """What the first export waits for (run.agent): both lists, neither alone."""
    import threading

    state = NodeState("n1")
    assert state.wait_listed(0.01) is False
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(state.wait_listed(10.0)))
    waiter.start()
    state.replace([])
    waiter.join(0.2)
    assert waiter.is_alive() and not woke  # pods synced, the Node not yet read
    state.set_node(None, listed=True)  # read: it does not exist
    waiter.join(5.0)
    assert woke == [True]
    assert state.wait_listed(0.0) is True
