"""The cluster-wide PodDisruptionBudget watch against the fake API server, over real HTTP: the same reflector as
pods and the Node, its own resource label on the agent's signals, a maximum that bounds memory whatever a tenant
creates, and a setting that turns it off."""

from __future__ import annotations

from agent.model.node import NODES
from agent.model.pdb import PDBS
from agent.model.pod import PODS
from testkit.factory import pdb, pod
from testkit.waiting import wait_until

PATH = "/apis/policy/v1/poddisruptionbudgets"


def pdb_names(agent) -> set[str] | None:
    pdbs = agent.state.snapshot().pdbs
    return None if pdbs is None else {p.name for p in pdbs}


def test_every_pdb_of_the_cluster_is_listed_from_the_watch_cache_then_watched(apiserver, make_agent):
    apiserver.create(pdb("web", namespace="team-a", match_labels={"app": "web"}), kind=PDBS)
    apiserver.create(pdb("dns", namespace="kube-system", match_labels={"k8s-app": "kube-dns"}), kind=PDBS)
    apiserver.create(pod("a1"))
    agent = make_agent()
    wait_until(lambda: pdb_names(agent) == {"web", "dns"}, message="the PDBs of every namespace listed")
    (_, listed), *_ = apiserver.requests_to(PATH)
    # Cluster-wide, no selector, from the watch cache.
    assert listed["resourceVersion"] == ["0"] and listed.get("fieldSelector", [""]) == [""]
    wait_until(lambda: apiserver.count(watch=True, path=PATH) >= 1)
    web = pdb("web", namespace="team-a", match_labels={"app": "web"}, disruptions_allowed=1)
    apiserver.update(web, kind=PDBS)
    wait_until(lambda: {p.name: p.disruptions_allowed for p in agent.state.snapshot().pdbs}["web"] == 1)
    apiserver.delete("kube-system", "dns", kind=PDBS)
    apiserver.create(pdb("new", namespace="team-b"), kind=PDBS)
    wait_until(lambda: pdb_names(agent) == {"web", "new"})
    assert apiserver.count(watch=False, path=PATH) == 1  # followed by the watch, never relisted
    # The pods' own watch is untouched by it.
    assert {p.name for p in agent.state.pods()} == {"a1"}


def test_the_agents_own_signals_carry_the_pdb_resource(apiserver, make_agent):
    apiserver.create(pdb("web"), kind=PDBS)
    agent = make_agent()
    # The three reflectors list independently: wait for all three, not only the PDBs' (CI once read the stats
    # between the PDB list and the pods' one and saw two RELIST events of three).
    wait_until(lambda: apiserver.count(watch=True, path=PATH) >= 1 and pdb_names(agent) == {"web"}
               and set(agent.stats.snapshot().relists) >= {PODS, NODES, PDBS})
    stats = agent.stats.snapshot()
    assert stats.relists[PDBS] == 1
    assert PDBS in stats.list_duration_seconds and PDBS in stats.last_event_age_seconds
    assert stats.watch_starts[(PDBS, "initial")] == 1
    assert f"source:{PDBS}" in stats.loop_idle_seconds
    # Every list puts exactly one RELIST on the queue, PDBs' included.
    assert stats.events_added["RELIST"] == sum(stats.relists.values())


def test_a_relist_after_410_leaves_no_deleted_pdb_behind(apiserver, make_agent):
    for name in ("stays", "goes"):
        apiserver.create(pdb(name), kind=PDBS)
    agent = make_agent()
    wait_until(lambda: pdb_names(agent) == {"stays", "goes"})
    apiserver.stop()
    apiserver.delete("default", "goes", kind=PDBS)
    apiserver.compact()
    apiserver.start()
    wait_until(lambda: pdb_names(agent) == {"stays"}, timeout=30, message="relisted after the outage")
    assert apiserver.count(watch=False, path=PATH) >= 2


def test_beyond_the_maximum_pdbs_are_unknown_and_listed_again_once_within_it(apiserver, make_agent):
    """A tenant's 5 PDBs against a maximum of 3: the agent keeps none (its memory stays bounded) and says why;
    once deletions bring the count back to 3, the reflector lists them again and the verdict has them."""
    for i in range(5):
        apiserver.create(pdb(f"p{i}", namespace="tenant"), kind=PDBS)
    agent = make_agent(max_pdbs=3)
    wait_until(lambda: agent.state.pdbs_over_limit == 5 and apiserver.count(watch=True, path=PATH) >= 1)
    snapshot = agent.state.snapshot()
    assert snapshot.pdbs is None and "holds 5 PodDisruptionBudgets" in snapshot.pdbs_problem
    apiserver.create(pdb("p5", namespace="tenant"), kind=PDBS)
    wait_until(lambda: agent.state.pdbs_over_limit == 6)
    for i in range(3):
        apiserver.delete("tenant", f"p{i}", kind=PDBS)
    wait_until(lambda: pdb_names(agent) == {"p3", "p4", "p5"}, message="listed again within the maximum")
    assert agent.state.snapshot().pdbs_problem == ""
    assert apiserver.count(watch=False, path=PATH) == 2
    assert agent.stats.snapshot().watch_starts[(PDBS, "back_under_limit")] == 1


def test_turned_off_there_is_no_pdb_request_and_pdbs_stay_unknown(apiserver, make_agent):
    apiserver.create(pdb("web"), kind=PDBS)
    apiserver.create(pod("a1"))
    agent = make_agent(watch_pdbs=False)
    wait_until(lambda: agent.state.synced and agent.state.node_listed)
    wait_until(lambda: apiserver.count(watch=True) >= 1)
    assert apiserver.requests_to(PATH) == [] and agent.state.snapshot().pdbs is None
    assert agent.state.snapshot().pdbs_problem == ""  # unknown by choice: the verdict says so, no problem


def test_a_refused_pdb_list_is_retried_with_backoff_and_the_pods_are_still_reported(apiserver, make_agent):
    """Without the RBAC rule (403) the PDB source backs off like any refused request; pods and the Node go on."""
    apiserver.fail_next(1000, status=403, path=PATH)
    apiserver.create(pod("a1"))
    agent = make_agent()
    wait_until(lambda: agent.state.synced and {p.name for p in agent.state.pods()} == {"a1"})
    wait_until(lambda: agent.stats.snapshot().requests_failed.get((PDBS, "unauthorized"), 0) >= 2, timeout=10)
    assert agent.state.snapshot().pdbs is None
    assert apiserver.count(path=PATH) < 10  # backoff, not a hot loop
    # Never progressing, the source makes the agent unready after two read timeouts (5 s here), naming it.
    from agent.telemetry.health import HealthLimits, readiness

    limits = HealthLimits.for_config(read_timeout=5.0, export_interval=None, export_timeout=10.0)
    def unready() -> dict[str, str] | None:
        verdict = readiness({}, agent.stats.snapshot(), limits)
        return None if verdict.ok else verdict.checks

    checks = wait_until(unready, timeout=20, message="not ready, naming the PDB source")
    assert checks[f"{PDBS} current"].startswith("stale") and checks["pods current"] == "ok"
