"""The running cluster-autoscaler beside the agent: what it did to each node against what the agent said.

On the suite's control plane, one node group of KWOK nodes is managed by the real cluster-autoscaler (its kwok cloud
provider; testkit/running_autoscaler.py), and on each node the real agent runs as a process with the autoscaler's own
args list (NRA_AUTOSCALER_ARGS, pasted whole) reporting OTLP to the real Collector, which Prometheus 3 scrapes. One
node per scenario: an underutilized node nothing blocks (removed), one node held by each blocking reason the agent
models, one disabled by annotation, one above the threshold, and a PDB whose allowance goes from 0 to 1 (kept, then
removed); with neon's patched autoscaler also two NeonVM runner nodes, one whose requests are high but whose VM usage
is low (removed), one the reverse (kept). The runner pods are owned by a ReplicaSet here: a VirtualMachine owner is a
custom controller, which blocks unless --skip-nodes-with-custom-controller-pods=false, and the scenario is about the
usage alone.

Node by node, the autoscaler's word (its log at --v=4: the node removed, or why it is kept) is compared with the
agent's series in Prometheus at the same moment; for a removed node, the agent's series over the whole time the
autoscaler counted it unneeded; and the autoscaler's counts (``cluster_autoscaler_unneeded_nodes_count``,
``unremovable_nodes_count{reason}``, its status ConfigMap's scale-down candidates) with the agent's verdicts counted
the same way. Both releases run one after the other in one control plane, every scenario of a release in one
autoscaler run.
"""

from __future__ import annotations

import math
import shlex
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.model.pod import OVERCOMMIT_ANNOTATION, USAGE_ANNOTATION, VM_NAME_LABEL
from testkit.agent_process import AgentProcess, otlp_env
from testkit.cluster import ApiError, Cluster
from testkit.collector import Collector, Prometheus
from testkit.kwok import Kwok
from testkit.running_autoscaler import RunningAutoscaler, Sample, Said
from testkit.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.collector, pytest.mark.autoscaler]

EXPORT_INTERVAL = 1.0
SCRAPE_INTERVAL = 1.0
#: How late the agent's word can reach Prometheus after a change both saw: an export, a scrape, a scrape of margin.
LAG = EXPORT_INTERVAL + 2 * SCRAPE_INTERVAL
UNNEEDED_SECONDS = 20
#: The autoscaler's flags besides the kwok provider's (KNOWLEDGE §6): the delays at 0 (the one after add would hold
#: scale-down for 10 minutes after its start), a node found unremovable judged again at every loop, and --v=4 for
#: the per-node reasons.
FLAGS = ("--scan-interval=5s", f"--scale-down-unneeded-time={UNNEEDED_SECONDS}s", "--scale-down-delay-after-add=0s",
         "--scale-down-delay-after-delete=0s", "--scale-down-delay-after-failure=0s",
         "--max-graceful-termination-sec=10", "--unremovable-node-recheck-timeout=1s", "--v=4")
#: The agent's --autoscaler-release for each build.
AGENT_RELEASE = {"1.36.1": "1.36", "neon": "neon"}
NODE_CPU, NODE_MEMORY = "4", "8Gi"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
SYSTEM = "kube-system"


@dataclass(frozen=True)
class Scenario:
    """One node: what is on it, and what the test does to it once judged (``flip``)."""

    key: str
    what: str
    builds: tuple[str, ...] = ("1.36.1", "neon")


SCENARIOS = (
    Scenario("free", "a: underutilized, one replicated pod, nothing blocks"),
    Scenario("bare", "b: a pod with no controller"),
    Scenario("system", "b: a kube-system pod no PDB covers"),
    Scenario("pinned", 'b: safe-to-evict "false"'),
    Scenario("scratch", "b: a disk-backed emptyDir"),
    Scenario("guarded", "b/e: a PDB allowing 0, then 1"),
    Scenario("disabled", "c: scale-down-disabled annotation"),
    Scenario("busy", "d: requests at 75 % of the cpu"),
    Scenario("vm-idle", "f: VM requests 75 %, usage 2 cpu / 4Gi over overcommit 4 (12.5 %)", ("neon",)),
    Scenario("vm-busy", "f: VM requests 6 %, usage 75 %", ("neon",)),
)


class AdminKubeconfig:
    """What AgentProcess asks of its API server (a kubeconfig file), answered with the cluster's admin one."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def kubeconfig(self, path: Path) -> str:
        return str(self.cluster.admin_kubeconfig)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The Collector the agents report to and the Prometheus 3 that scrapes it."""
    work = tmp_path_factory.mktemp("running-chain")
    with Collector(work / "otelcol") as otelcol, \
            Prometheus(work / "prometheus", [otelcol.prometheus_target], interval=f"{SCRAPE_INTERVAL:g}s") as prom:
        yield otelcol, prom


# --------------------------------------------------------------------------- the workloads


def replica_set(cluster: Cluster, namespace: str, name: str, node: str, cpu: str, memory: str, *,
                annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                volumes: list[dict] | None = None) -> None:
    """One replica bound to ``node`` by name (the scheduler is not the subject; the autoscaler's simulation clears
    the name when it looks for a place for the pod)."""
    container = {"name": "app", "image": "example/app:1", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    if volumes:
        container["volumeMounts"] = [{"name": v["name"], "mountPath": f"/mnt/{v['name']}"} for v in volumes]
    spec: dict = {"nodeName": node, "containers": [container], "terminationGracePeriodSeconds": 0}
    if volumes:
        spec["volumes"] = volumes
    meta: dict = {"labels": {"app": name, **(labels or {})}, "annotations": annotations or {}}
    cluster.api("POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": meta, "spec": spec}}})


def populate(cluster: Cluster, namespace: str, node: dict[str, str], system_rs: str) -> None:
    """Every scenario's pods (``node``: scenario key -> node name) and the PDB."""
    small = ("500m", "512Mi")
    for key in ("free", "guarded", "disabled"):
        if key in node:
            replica_set(cluster, namespace, key, node[key], *small)
    replica_set(cluster, SYSTEM, system_rs, node["system"], *small)
    replica_set(cluster, namespace, "pinned", node["pinned"], *small, annotations={SAFE_TO_EVICT: "false"})
    replica_set(cluster, namespace, "scratch", node["scratch"], *small, volumes=[{"name": "scratch", "emptyDir": {}}])
    replica_set(cluster, namespace, "busy", node["busy"], "3", "1Gi")
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "labels": {"app": "bare"}},
        "spec": {"nodeName": node["bare"], "terminationGracePeriodSeconds": 0, "containers": [
            {"name": "app", "image": "example/app:1", "resources": {"requests": {"cpu": small[0], "memory": small[1]}}}]}})
    cluster.api("POST", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    if "vm-idle" in node:
        # Requests 3 cpu / 6Gi of 4 / 8Gi; usage 2 cpu / 4Gi divided by the overcommit factor 4: 500m / 1Gi.
        replica_set(cluster, namespace, "vm-idle", node["vm-idle"], "3", "6Gi", labels={VM_NAME_LABEL: "vm-idle"},
                    annotations={USAGE_ANNOTATION: '{"cpu":"2","memory":"4Gi"}',
                                 OVERCOMMIT_ANNOTATION: '{"cpu":"4","memory":"4"}'})
        replica_set(cluster, namespace, "vm-busy", node["vm-busy"], "250m", "512Mi", labels={VM_NAME_LABEL: "vm-busy"},
                    annotations={USAGE_ANNOTATION: '{"cpu":"3","memory":"6Gi"}'})


def pdb_allows(cluster: Cluster, namespace: str, allowed: int) -> None:
    """Wait until kube-controller-manager's disruption controller has judged the PDB's current spec."""
    path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/guarded"

    def judged() -> bool:
        pdb = cluster.api("GET", path)
        status = pdb.get("status", {})
        return status.get("observedGeneration") == pdb["metadata"]["generation"] and \
            status.get("disruptionsAllowed") == allowed

    wait_until(judged, 90, interval=0.5, message=f"the PDB judged to allow {allowed}")


def pods_on(cluster: Cluster, node: str) -> list[dict]:
    return cluster.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName={node}")["items"]


# --------------------------------------------------------------------------- the agent's word in Prometheus


@dataclass(frozen=True)
class AgentSaid:
    """The agent's verdict on one node as its series in Prometheus held it at one moment."""

    state: str
    candidate: float
    removable: float
    reasons: tuple[str, ...]
    utilization: float | None

    def __str__(self) -> str:
        util = "?" if self.utilization is None else f"{self.utilization:.3f}"
        return (f"{self.state} cand={self.candidate:g} rem={self.removable:g} util={util} "
                f"{','.join(self.reasons) or '-'}")


def agent_verdicts(prom: Prometheus, nodes: list[str], at: float) -> dict[str, AgentSaid]:
    """Every node's verdict as the series said at ``at``."""
    match = f'k8s_node_name=~"{"|".join(nodes)}"'

    def query(expr: str) -> list[dict]:
        return prom.api("query", {"query": expr, "time": f"{at:.3f}"})["result"]

    def per_node(expr: str) -> dict[str, float]:
        return {r["metric"]["k8s_node_name"]: float(r["value"][1]) for r in query(expr)}

    state = {r["metric"]["k8s_node_name"]: r["metric"]["state"]
             for r in query(f"node_requests_node_autoscaler_state{{{match}}} == 1")}
    candidate = per_node(f"node_requests_node_autoscaler_scale_down_candidate{{{match}}}")
    removable = per_node(f"node_requests_node_autoscaler_removable{{{match}}}")
    utilization = per_node(f"node_requests_node_autoscaler_node_utilization{{{match}}}")
    reasons: dict[str, list[str]] = {}
    for r in query(f"node_requests_node_autoscaler_blocking_pods{{{match}}} > 0"):
        reasons.setdefault(r["metric"]["k8s_node_name"], []).append(r["metric"]["reason"])
    return {n: AgentSaid(state.get(n, "absent"), candidate.get(n, math.nan), removable.get(n, math.nan),
                         tuple(sorted(reasons.get(n, []))), utilization.get(n)) for n in nodes}


def agent_samples(prom: Prometheus, expr: str, start: float, end: float) -> list[tuple[float, float]]:
    """The raw samples of one series between ``start`` and ``end`` (a range vector read at ``end``)."""
    window = max(1, math.ceil(end - start))
    result = prom.api("query", {"query": f"{expr}[{window}s]", "time": f"{end:.3f}"})["result"]
    assert len(result) == 1, (expr, result)
    return [(float(t), float(v)) for t, v in result[0]["values"] if float(t) >= start]


def whole_window(prom: Prometheus, node: str, since: float, removed: float) -> list[str]:
    """What was wrong with the agent's series for ``node`` while the autoscaler counted it unneeded (from ``since``,
    plus LAG, to its removal): each sample must say candidate 1, removable 1, no blocking pod, with no gap."""
    start = since + LAG
    problems = []
    here = f'k8s_node_name="{node}"'
    for expr, wanted in ((f"node_requests_node_autoscaler_scale_down_candidate{{{here}}}", 1.0),
                         (f"node_requests_node_autoscaler_removable{{{here}}}", 1.0),
                         (f"sum(node_requests_node_autoscaler_blocking_pods{{{here}}})", 0.0)):
        if expr.startswith("sum("):
            expr = f"{expr}[{max(1, math.ceil(removed - start))}s:{SCRAPE_INTERVAL:g}s]"
            result = prom.api("query", {"query": expr, "time": f"{removed:.3f}"})["result"]
            samples = [(float(t), float(v)) for t, v in result[0]["values"]] if result else []
        else:
            samples = agent_samples(prom, expr, start, removed)
        wrong = [(round(t - since, 1), v) for t, v in samples if v != wanted]
        stamps = [start] + [t for t, _ in samples] + [removed]
        gap = max(b - a for a, b in zip(stamps, stamps[1:]))
        if wrong or gap > 3 * SCRAPE_INTERVAL:
            problems.append(f"{expr}: {len(samples)} samples over {removed - start:.1f} s, "
                            f"not {wanted:g} at (s after since, value) {wrong[:5]}, largest gap {gap:.1f} s")
    return problems


# --------------------------------------------------------------------------- the comparison


#: The autoscaler's unremovable reasons the agent's verdict names, and the agent's class for a node with that verdict.
CLASSES = {"BlockedByPod": "blocked", "NotUnderutilized": "not_underutilized",
           "ScaleDownDisabledAnnotation": "scale_down_disabled"}


def agent_class(v: AgentSaid) -> str:
    if v.state == "underutilized" and v.candidate == 1:
        return "unneeded" if v.removable == 1 else "blocked"
    return v.state


def agrees(said: Said, agent: AgentSaid) -> bool:
    if said.action == "removed":
        return agent_class(agent) == "unneeded" and not agent.reasons
    if said.reason in ("not_underutilized", "scale_down_disabled"):
        return agent.state == said.reason and agent.candidate == 0
    return agent_class(agent) == "blocked" and agent.reasons == (said.reason,)


def counts_disagree(sample: Sample, agent: dict[str, AgentSaid]) -> list[str]:
    """The autoscaler's counts at one sample against the agent's verdicts at the same moment, counted alike."""
    classes = Counter(agent_class(v) for v in agent.values())
    problems = []
    if sample.unneeded != classes["unneeded"]:
        problems.append(f"unneeded_nodes_count {sample.unneeded:g}, agent removable on {classes['unneeded']}")
    for reason, cls in CLASSES.items():
        if sample.unremovable.get(reason, 0) != classes[cls]:
            problems.append(f"unremovable_nodes_count{{{reason}}} {sample.unremovable.get(reason, 0):g}, "
                            f"agent {cls} on {classes[cls]}")
    candidates = sample.status.get("clusterWide", {}).get("scaleDown", {}).get("candidates", 0)
    if candidates != classes["unneeded"]:
        problems.append(f"status scaleDown.candidates {candidates}, agent removable on {classes['unneeded']}")
    return problems


def nearest(samples: list[Sample], at: float) -> Sample:
    return min(samples, key=lambda s: abs(s.at - at))


# --------------------------------------------------------------------------- the run


@pytest.mark.parametrize("build", ["1.36.1", "neon"])
def test_the_running_autoscaler_and_the_agent_agree_node_by_node(build: str, cluster: Cluster, kwok: Kwok, chain,
                                                                 tmp_path: Path) -> None:
    otelcol, prom = chain
    started = time.monotonic()
    tag = "ca36" if build == "1.36.1" else "caneon"
    namespace = cluster.create_namespace(tag)
    scenarios = [s for s in SCENARIOS if build in s.builds]
    node = {s.key: f"{tag}-{s.key}" for s in scenarios}
    names = list(node.values())
    system_rs = f"{tag}-system"
    autoscaler = RunningAutoscaler(cluster, build=build, workdir=tmp_path / "autoscaler", namespace=namespace,
                                   group=tag, size=len(names), flags=FLAGS)
    agents: list[AgentProcess] = []
    try:
        for name in names:
            kwok.add_node(name, cpu=NODE_CPU, memory=NODE_MEMORY)
            autoscaler.adopt(name)
        cluster.api("PATCH", f"/api/v1/nodes/{node['disabled']}", {"metadata": {"annotations": {DISABLED: "true"}}})
        kwok.wait_ready(names)
        populate(cluster, namespace, node, system_rs)
        wait_until(lambda: all(len(pods_on(cluster, n)) == 1 and pods_on(cluster, n)[0]["status"].get("phase") ==
                               "Running" for n in names), 120, interval=0.5, message="one Running pod on every node")
        pdb_allows(cluster, namespace, 0)
        autoscaler.configure()

        # The agents, with the autoscaler's args list pasted whole, before the autoscaler: their word is in
        # Prometheus before it judges anything.
        env = {**otlp_env(otelcol.otlp_http_endpoint), "NRA_AUTOSCALER_ARGS": shlex.join(autoscaler.args)}
        agents = [AgentProcess(AdminKubeconfig(cluster), tmp_path / "agents" / name, name, env, EXPORT_INTERVAL,
                               args=("--autoscaler-release", AGENT_RELEASE[build])) for name in names]
        with ThreadPoolExecutor(len(agents)) as pool:
            list(pool.map(lambda a: a.start(timeout=120), agents))

        def settled() -> bool:
            shown = agent_verdicts(prom, names, time.time())
            for a in agents:
                judged = a.debug("node")["autoscaler"]
                seen = shown[a.node]
                if (len(a.pods()) != 1 or seen.state != judged["state"] or seen.removable != judged["removable"]
                        or seen.reasons != tuple(sorted(r for r, c in judged["blocking_pods"].items() if c))):
                    return False
            return True

        wait_until(settled, 90, interval=1.0, message="every agent's verdict in Prometheus")
        agents_ready = time.monotonic() - started

        # Phase 1: every node judged, the free ones removed.
        autoscaler.start()
        kept_by_design = [n for k, n in node.items() if k not in ("free", "vm-idle")]
        removed_by_design = [n for k, n in node.items() if k in ("free", "vm-idle")]

        def phase_one() -> bool:
            told = autoscaler.history()
            return all(n in told for n in kept_by_design) and \
                all(told.get(n, [None])[-1] is not None and told[n][-1].action == "removed" for n in removed_by_design)

        wait_until(phase_one, 150, interval=1.0, message="the autoscaler's word on every node, the free ones removed")
        for n in removed_by_design:
            wait_until(lambda n=n: not cluster.exists(f"/api/v1/nodes/{n}"), 60, interval=0.5, message=f"{n} deleted")
        flipped = time.time()

        # Phase 2: the PDB allows a disruption; the node it held goes.
        cluster.api("PATCH", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/guarded",
                    {"spec": {"minAvailable": 0}})
        pdb_allows(cluster, namespace, 1)
        wait_until(lambda: autoscaler.history().get(node["guarded"], [None])[-1] is not None and
                   autoscaler.history()[node["guarded"]][-1].action == "removed", 120, interval=1.0,
                   message="the node the PDB held removed once it allows one")
        wait_until(lambda: not cluster.exists(f"/api/v1/nodes/{node['guarded']}"), 60, interval=0.5,
                   message="the PDB's node deleted")
        time.sleep(LAG)  # the last samples before the removal reach Prometheus
    finally:
        autoscaler.kill()
        for a in agents:
            a.stop()
        for path in [f"/api/v1/nodes/{n}" for n in names] + [
                f"/apis/apps/v1/namespaces/{SYSTEM}/replicasets/{system_rs}", f"/api/v1/namespaces/{namespace}"]:
            try:
                cluster.api("DELETE", path)
            except ApiError as error:
                if error.status != 404:
                    raise
    elapsed = time.monotonic() - started

    # The table: per node, each thing the autoscaler said, and the agent's series at that moment (for a removal,
    # over the whole time it counted the node unneeded).
    history = autoscaler.history()
    rows, problems = [], []
    windows = []
    for s in scenarios:
        n = node[s.key]
        for said in history.get(n, []):
            if said.action == "removed":
                since = autoscaler.unneeded_since(n, said.at)
                assert since is not None, f"{n}: removed, but the log never said since when it was unneeded"
                windows.append((since, said.at))
                bad = whole_window(prom, n, since, said.at)
                seen = agent_verdicts(prom, names, said.at - LAG)[n]
                ok = not bad and agrees(said, seen)
                problems += [f"{n}: {b}" for b in bad]
                what = f"removed after {said.at - since:.0f} s unneeded"
            else:
                seen = agent_verdicts(prom, names, said.at)[n]
                ok = agrees(said, seen)
                what = f"kept: {said.reason}"
            if not ok:
                problems.append(f"{n}: the autoscaler said {said.detail!r} ({what}); the agent: {seen}")
            rows.append((n, s.what, what, said.detail[:70], str(seen), "yes" if ok else "NO"))
        if not history.get(n):
            problems.append(f"{n}: the autoscaler said nothing about it")
    # Its counts in the middle of each removed node's unneeded time (the verdicts steady on both sides).
    count_rows = []
    for since, removed in windows:
        middle = nearest(autoscaler.samples, (since + removed) / 2)
        seen = agent_verdicts(prom, names, middle.at)
        problems += [f"at {middle.at:.0f}: {p}" for p in counts_disagree(middle, seen)]
        count_rows.append(f"  at +{middle.at - (flipped if middle.at > flipped else since):.0f} s: unneeded "
                          f"{middle.unneeded:g}, unremovable {dict(sorted(middle.unremovable.items()))}, status "
                          f"candidates {middle.status.get('clusterWide', {}).get('scaleDown', {}).get('candidates', 0)}"
                          f"; agent {dict(Counter(agent_class(v) for v in seen.values()))}")
    widths = [max(len(r[i]) for r in rows + [("node", "scenario", "autoscaler", "its words", "agent", "agree")])
              for i in range(6)]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths))
                      for r in [("node", "scenario", "autoscaler", "its words", "agent", "agree"), *rows])
    print(f"\n{build}: {len(names)} nodes, agents ready after {agents_ready:.0f} s, run {elapsed:.0f} s\n{table}\n"
          + "\n".join(count_rows))

    assert not problems, "\n".join(problems) + f"\n{table}\n{autoscaler.tail(60)}"
    # The scenarios were what they were built to be (else the comparison above would prove little).
    final = {n: told[-1] for n, told in history.items()}
    assert {n for n, said in final.items() if said.action == "removed"} == {*removed_by_design, node["guarded"]}
    first = {k: history[n][0].reason for k, n in node.items()}
    assert first["bare"] == "not_replicated" and first["system"] == "unmovable_kube_system"
    assert first["pinned"] == "not_safe_to_evict" and first["scratch"] == "local_storage"
    assert first["guarded"] == "not_enough_pdb" and first["disabled"] == "scale_down_disabled"
    assert first["busy"] == "not_underutilized" and first.get("vm-busy", "not_underutilized") == "not_underutilized"
