"""The running cluster-autoscaler beside the agent: what it did to each node against what the agent said.

On the suite's control plane, one node group of KWOK nodes is managed by the real cluster-autoscaler (its kwok cloud
provider; testkit/running_autoscaler.py), and on each node the real agent runs as a process with the autoscaler's own
args list (NRA_AUTOSCALER_ARGS, pasted whole) reporting OTLP to the real Collector, which Prometheus 3 scrapes. One
node per scenario: an underutilized node nothing blocks (removed), one node held by each blocking reason the agent
models, one disabled by annotation, one above the threshold, one at exactly the threshold (1.36.1 removes it, neon's
1.31.1 keeps it: "at or below" against "below"), and a PDB whose allowance goes from 0 to 1 (kept, then removed); with neon's patched autoscaler also two NeonVM runner nodes, one whose requests are high but whose VM usage
is low (removed), one the reverse (kept). The runner pods are owned by a ReplicaSet here: a VirtualMachine owner is a
custom controller, which blocks unless --skip-nodes-with-custom-controller-pods=false, and the scenario is about the
usage alone.

Node by node, the autoscaler's word (its log at --v=4: the node removed, or why it is kept) is compared with the
agent's series in Prometheus at the same moment; every utilization its log gives, line by line, with the agent's at
that line's time (more only while other nodes drain, by exactly their pods' requests); for a removed node, the
agent's series over the whole time the autoscaler counted it unneeded; and the autoscaler's counts
(``cluster_autoscaler_unneeded_nodes_count``, ``unremovable_nodes_count{reason}``, its status ConfigMap's scale-down
candidates and registered nodes) with the agent's verdicts counted the same way. Both releases run one after the
other in one control plane, every scenario of a release in one autoscaler run.
"""

from __future__ import annotations

import itertools
import math
import shlex
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.model.pod import OVERCOMMIT_ANNOTATION, USAGE_ANNOTATION, VM_NAME_LABEL
from agent.model.quantity import parse_quantity
from testkit.agent_process import AgentProcess, otlp_env
from testkit.cluster import ApiError, Cluster
from testkit.collector import Collector, Prometheus
from testkit.kwok import Kwok
from testkit.running_autoscaler import RunningAutoscaler, Said, Sample
from testkit.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.collector, pytest.mark.autoscaler]

EXPORT_INTERVAL = 1.0
SCRAPE_INTERVAL = 1.0
#: How late the agent's word can reach Prometheus after a change both saw: an export, a scrape, a scrape of margin.
LAG = EXPORT_INTERVAL + 2 * SCRAPE_INTERVAL
#: The longest stretch without a sample that still counts as "the whole time" (scrapes run late on a loaded machine).
MAX_GAP = 5 * SCRAPE_INTERVAL
UNNEEDED_SECONDS = 20
#: The autoscaler's flags besides the kwok provider's (KNOWLEDGE §6): the delays at 0 (the one after add would hold
#: scale-down for 10 minutes after its start), a node found unremovable judged again at every loop, the nodes unneeded
#: together drained together (by default one at a time: the next one would count the first one's evicted pods, go
#: above the threshold for a loop and start its unneeded time again), and --v=4 for the per-node reasons.
FLAGS = ("--scan-interval=5s", f"--scale-down-unneeded-time={UNNEEDED_SECONDS}s", "--scale-down-delay-after-add=0s",
         "--scale-down-delay-after-delete=0s", "--scale-down-delay-after-failure=0s",
         "--max-graceful-termination-sec=10", "--unremovable-node-recheck-timeout=1s", "--max-drain-parallelism=5",
         "--v=4")
#: The agent's --autoscaler-release for each build.
AGENT_RELEASE = {"1.36.1": "1.36", "neon": "neon"}
NODE_CPU, NODE_MEMORY = "4", "8Gi"
#: The autoscaler's loop; after a node's deletion its evicted pods are counted for at most one more loop.
SCAN_INTERVAL = 5.0
SMALL = ("500m", "512Mi")
#: Each scenario's one pod: its requests (cpu, memory), and for the NeonVM runners the usage over the overcommit.
REQUESTS = {"free": SMALL, "bare": SMALL, "system": SMALL, "pinned": SMALL, "scratch": SMALL, "guarded": SMALL,
            "disabled": SMALL, "busy": ("3", "1Gi"), "threshold": ("2", "512Mi"),
            "vm-idle": ("3", "6Gi"), "vm-busy": ("250m", "512Mi")}
USAGE = {"vm-idle": '{"cpu":"2","memory":"4Gi"}', "vm-busy": '{"cpu":"3","memory":"6Gi"}'}
OVERCOMMIT = {"vm-idle": '{"cpu":"4","memory":"4"}'}
#: What neon's autoscaler counts for each pod (its usage over the overcommit factor in place of the requests):
#: the same pods as REQUESTS, worked out by hand from USAGE and OVERCOMMIT.
COUNTED = {**REQUESTS, "vm-idle": ("500m", "1Gi"), "vm-busy": ("3", "6Gi")}
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
SYSTEM = "kube-system"


@dataclass(frozen=True)
class Scenario:
    """One node: its name after the release's tag, what is on it, and the builds that run it."""

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
    Scenario("threshold", "g: requests at exactly 50 % of the cpu (1.36 at or below: removed; neon below: kept)"),
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


def pod_spec(node: str, cpu: str, memory: str, volumes: list[dict] | None = None) -> dict:
    """One container requesting ``cpu`` and ``memory``, mounting ``volumes``, bound to ``node`` by name."""
    container = {"name": "app", "image": "example/app:1", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    spec: dict = {"nodeName": node, "containers": [container], "terminationGracePeriodSeconds": 0}
    if volumes:
        container["volumeMounts"] = [{"name": v["name"], "mountPath": f"/mnt/{v['name']}"} for v in volumes]
        spec["volumes"] = volumes
    return spec


def replica_set(cluster: Cluster, namespace: str, name: str, node: str, cpu: str, memory: str, *,
                annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                volumes: list[dict] | None = None) -> None:
    """One replica bound to ``node`` by name (the scheduler is not the subject; the autoscaler's simulation clears
    the name when it looks for a place for the pod)."""
    meta: dict = {"labels": {"app": name, **(labels or {})}, "annotations": annotations or {}}
    cluster.api("POST", f"/apis/apps/v1/namespaces/{namespace}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": meta, "spec": pod_spec(node, cpu, memory, volumes)}}})


def populate(cluster: Cluster, namespace: str, node: dict[str, str], system_rs: str) -> None:
    """Every scenario's pod (``node``: scenario key -> node name; requests from REQUESTS) and the PDB."""
    for key in ("free", "guarded", "disabled", "busy", "threshold"):
        replica_set(cluster, namespace, key, node[key], *REQUESTS[key])
    replica_set(cluster, SYSTEM, system_rs, node["system"], *REQUESTS["system"])
    replica_set(cluster, namespace, "pinned", node["pinned"], *REQUESTS["pinned"],
                annotations={SAFE_TO_EVICT: "false"})
    replica_set(cluster, namespace, "scratch", node["scratch"], *REQUESTS["scratch"],
                volumes=[{"name": "scratch", "emptyDir": {}}])
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "labels": {"app": "bare"}},
        "spec": pod_spec(node["bare"], *REQUESTS["bare"])})
    cluster.api("POST", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    for key in ("vm-idle", "vm-busy"):
        if key in node:
            annotations = {USAGE_ANNOTATION: USAGE[key]} | ({OVERCOMMIT_ANNOTATION: OVERCOMMIT[key]}
                                                            if key in OVERCOMMIT else {})
            replica_set(cluster, namespace, key, node[key], *REQUESTS[key], labels={VM_NAME_LABEL: key},
                        annotations=annotations)


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


def raw_samples(prom: Prometheus, selector: str, start: float, end: float,
                label: str = "reason") -> dict[str, list[tuple[float, float]]]:
    """The samples Prometheus stored between ``start`` and ``end`` (a range vector read at ``end``), per series
    (named by its ``label``, "" when it has none)."""
    window = max(1, math.ceil(end - start))
    result = prom.api("query", {"query": f"{selector}[{window}s]", "time": f"{end:.3f}"})["result"]
    return {r["metric"].get(label, ""): [(float(t), float(v)) for t, v in r["values"] if float(t) >= start]
            for r in result}


def whole_window(prom: Prometheus, node: str, since: float, removed: float) -> list[str]:
    """What was wrong with the agent's series for ``node`` while the autoscaler counted it unneeded (from ``since``,
    plus LAG, to its removal): every sample must say candidate 1, removable 1, no blocking pod, with no gap."""
    start = since + LAG
    problems = []
    here = f'k8s_node_name="{node}"'
    for metric, wanted in (("scale_down_candidate", 1.0), ("removable", 1.0), ("blocking_pods", 0.0)):
        series = raw_samples(prom, f"node_requests_node_autoscaler_{metric}{{{here}}}", start, removed)
        if not series:
            problems.append(f"{metric}: no series from {start:.0f} to {removed:.0f}")
        for label, samples in series.items():
            wrong = [(round(t - since, 1), v) for t, v in samples if v != wanted]
            stamps = [start, *(t for t, _ in samples), removed]
            gap = max(b - a for a, b in itertools.pairwise(stamps))
            if wrong or gap > MAX_GAP:
                problems.append(f"{metric}{{{label}}}: {len(samples)} samples over {removed - start:.1f} s, not "
                                f"{wanted:g} at (s after since, value) {wrong[:5]}, largest gap {gap:.1f} s")
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


def counts_disagree(sample: Sample, group: str, agent: dict[str, AgentSaid]) -> list[str]:
    """The autoscaler's counts at one sample (metrics, and the status ConfigMap's cluster-wide and group rows) against
    the agent's verdicts at the same moment, counted alike."""
    classes = Counter(agent_class(v) for v in agent.values())
    problems = []
    if sample.unneeded != classes["unneeded"]:
        problems.append(f"unneeded_nodes_count {sample.unneeded:g}, agent removable on {classes['unneeded']}")
    for reason, cls in CLASSES.items():
        if sample.unremovable.get(reason, 0) != classes[cls]:
            problems.append(f"unremovable_nodes_count{{{reason}}} {sample.unremovable.get(reason, 0):g}, "
                            f"agent {cls} on {classes[cls]}")
    row = next((g for g in sample.status.get("nodeGroups", []) if g.get("name") == group), {})
    registered = row.get("health", {}).get("nodeCounts", {}).get("registered", {}).get("total", 0)
    if registered != len(agent) - classes["unknown"] - classes["absent"]:
        problems.append(f"status: {registered} nodes registered in {group}, the agents read "
                        f"{len(agent) - classes['unknown'] - classes['absent']} Nodes")
    for where, status in (("cluster-wide", sample.status.get("clusterWide", {})), (group, row)):
        candidates = status.get("scaleDown", {}).get("candidates", 0)  # omitted when 0
        if candidates != classes["unneeded"]:
            problems.append(f"status {where} scaleDown.candidates {candidates}, agent removable on "
                            f"{classes['unneeded']}")
    return problems


def quiet_sample(samples: list[Sample], since: float, removed: float, removals: list[float]) -> Sample | None:
    """The sample nearest the middle of a node's unneeded time, away from every removal: from the autoscaler's
    "removing" line until the Node is gone and the agent said so, the two counts are a drain apart."""
    inside = [s for s in samples if since + LAG <= s.at <= removed - SCRAPE_INTERVAL
              and not any(r - 2 * SCRAPE_INTERVAL <= s.at <= r + 20 for r in removals)]
    return min(inside, key=lambda s: abs(s.at - (since + removed) / 2), default=None)


HEADER = ("node", "scenario", "autoscaler", "its words", "agent (Prometheus)", "agree")


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [HEADER, *rows])


def utilization_of(pods: list[tuple[str, str]]) -> float:
    """The autoscaler's utilization of one of the scenarios' nodes holding ``pods`` (what it counts of each, cpu and
    memory): the larger of the two sums over the node's allocatable."""
    return max(sum(parse_quantity(pod[i]) for pod in pods) / parse_quantity(allocatable)
               for i, allocatable in enumerate((NODE_CPU, NODE_MEMORY)))


def printed(utilization: float) -> str:
    """A utilization as the autoscaler's log prints it (``%.6g`` of the percentage, eligibility.go)."""
    return f"{utilization * 100:.6g}"


@dataclass(frozen=True)
class Drain:
    """A node the autoscaler removed. From its "removing" line until a loop after the Node is gone, the autoscaler
    puts the node's pods where it expects them to land and counts them there
    (core/podlistprocessor/currently_drained_nodes.go): the agent, which counts what is bound, says less."""

    key: str
    removed: float
    gone: float

    def covers(self, at: float) -> bool:
        return self.removed <= at <= self.gone + SCAN_INTERVAL + LAG


def utilization_lines_disagree(key: str, lines: list[tuple[float, str, float]],
                               agent: dict[str, list[tuple[float, float]]], drains: list[Drain],
                               zero: float) -> tuple[list[str], set[float]]:
    """Line by line, the utilization the autoscaler gave the node of scenario ``key`` against the agent's series for
    it with the same ``resource`` at that line's time (within LAG either side): equal, or, while other nodes drain,
    more by exactly the requests of some of their pods over this node's allocatable, the agent's then being this
    node's own pod's. Returns the disagreements and the times of the lines a drain explains."""
    own = utilization_of([COUNTED[key]])
    problems, drained = [], set()
    for at, resource, said in lines:
        near = {printed(v) for t, v in agent.get(resource, []) if at - LAG <= t <= at + LAG}
        if printed(said) in near:
            continue
        active = [d for d in drains if d.key != key and d.covers(at)]
        landed = [c for k in range(1, len(active) + 1) for c in itertools.combinations(active, k)
                  if printed(utilization_of([COUNTED[key], *(COUNTED[d.key] for d in c)])) == printed(said)]
        if landed and printed(own) in near:
            drained.add(at)
            continue
        problems.append(f"at +{at - zero:.1f} s the autoscaler's {resource} utilization {printed(said)} %, the agent's "
                        f"{sorted(near) or 'no sample'} % (draining then: {[d.key for d in active] or 'none'})")
    return problems, drained


def compare(autoscaler: RunningAutoscaler, prom: Prometheus, scenarios: list[Scenario], node: dict[str, str],
            gone: dict[str, float]) -> tuple[list[tuple[str, ...]], list[str], list[str]]:
    """Node by node, each thing the autoscaler said against the agent's series at its first and last line (for a
    removal, over the whole time it counted the node unneeded), every utilization its log gave against the agent's at
    that line, then its counts against the agent's: (table rows, count lines, disagreements). ``gone``: when each
    removed node's Node object was seen deleted."""
    names = list(node.values())
    history = autoscaler.history()
    zero = autoscaler.lines[0].at if autoscaler.lines else 0.0
    drains = [Drain(s.key, told[-1].at, gone[node[s.key]]) for s in scenarios
              if (told := history.get(node[s.key])) and told[-1].action == "removed"]
    end = (autoscaler.lines[-1].at if autoscaler.lines else zero) + LAG
    rows, counts, problems = [], [], []
    windows: dict[str, tuple[float, float]] = {}
    for s in scenarios:
        n = node[s.key]
        if not history.get(n):
            problems.append(f"{n}: the autoscaler said nothing about it")
        lines = autoscaler.utilization_lines(n)
        agent = raw_samples(prom, f'node_requests_node_autoscaler_node_utilization{{k8s_node_name="{n}"}}',
                            zero - LAG, end, label="resource")
        wrong, drained = utilization_lines_disagree(s.key, lines, agent, drains, zero)
        problems += [f"{n}: {p}" for p in wrong]
        if not lines and any(said.reason != "scale_down_disabled" for said in history.get(n, [])):
            problems.append(f"{n}: the autoscaler's log never gave its utilization")
        for said in history.get(n, []):
            if said.action == "removed":
                since = autoscaler.unneeded_since(n, said.at)
                if since is None:
                    problems.append(f"{n}: removed, but its log never said since when it was unneeded")
                    continue
                windows[n] = (since, said.at)
                problems += [f"{n}: {p}" for p in whole_window(prom, n, since, said.at)]
                seen = [agent_verdicts(prom, names, said.at - LAG)[n]]
                what = f"removed after {said.at - since:.0f} s unneeded"
            else:
                seen = [agent_verdicts(prom, names, at)[n] for at in dict.fromkeys((said.first, said.at))]
                what = f"kept: {said.reason}"
            if said.utilization is not None:
                what += f" at {printed(said.utilization)} %"
            ok = all(agrees(said, v) for v in seen)
            run = [at for at, _, _ in lines if said.first <= at <= said.at]
            if not ok and said.reason == "not_underutilized" and run and set(run) <= drained:
                what += " (others' evicted pods counted)"
                ok = True
            elif not ok:
                problems.append(f"{n}: the autoscaler said {said.detail!r} ({what}); the agent: "
                                f"{' then '.join(map(str, seen))}")
            rows.append((n, s.what, what, said.detail[:72], str(seen[-1]), "yes" if ok else "NO"))
        counts.append(f"  {n}: {len(lines)} utilization lines, {len(lines) - len(wrong) - len(drained)} equal to the "
                      f"agent's, {len(drained)} more by drained pods exactly, {len(wrong)} wrong")
    removals = [removed for _, removed in windows.values()]
    for n, (since, removed) in windows.items():
        sample = quiet_sample(autoscaler.samples, since, removed, [r for r in removals if r != removed])
        if sample is None:
            problems.append(f"{n}: no sample of the autoscaler's metrics away from a removal while it was unneeded")
            continue
        seen = agent_verdicts(prom, names, sample.at)
        problems += [f"{n} unneeded +{sample.at - since:.0f} s: {p}"
                     for p in counts_disagree(sample, autoscaler.group, seen)]
        candidates = sample.status.get("clusterWide", {}).get("scaleDown", {}).get("candidates", 0)
        counts.append(f"  {n} unneeded +{sample.at - since:.0f} s: autoscaler unneeded {sample.unneeded:g}, "
                      f"unremovable {dict(sorted(sample.unremovable.items()))}, status candidates {candidates}; "
                      f"agent {dict(sorted(Counter(agent_class(v) for v in seen.values()).items()))}")
    return rows, counts, problems


# --------------------------------------------------------------------------- the run


def start_agents(cluster: Cluster, prom: Prometheus, env: dict[str, str], names: list[str], release: str,
                 workdir: Path) -> list[AgentProcess]:
    """One agent per node, started together; returned once each one's verdict is what Prometheus shows."""
    agents = [AgentProcess(AdminKubeconfig(cluster), workdir / name, name, env, EXPORT_INTERVAL,
                           args=("--autoscaler-release", release)) for name in names]
    with ThreadPoolExecutor(len(agents)) as pool:
        list(pool.map(lambda a: a.start(timeout=120), agents))

    def settled() -> bool:
        shown = agent_verdicts(prom, names, time.time())
        for a in agents:
            judged, seen = a.debug("node")["autoscaler"], shown[a.node]
            if (len(a.pods()) != 1 or seen.state != judged["state"] or seen.removable != judged["removable"]
                    or seen.reasons != tuple(sorted(r for r, c in judged["blocking_pods"].items() if c))):
                return False
        return True

    wait_until(settled, 90, interval=1.0, message="every agent's verdict in Prometheus")
    return agents


def removed(autoscaler: RunningAutoscaler, node: str) -> bool:
    told = autoscaler.history().get(node)
    return bool(told) and told[-1].action == "removed"


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
    # At exactly the threshold: 1.36 counts the node underutilized (at or below, eligibility.go), neon's 1.31 does not.
    free = [node[k] for k in ("free", "vm-idle") if k in node] + ([node["threshold"]] if build == "1.36.1" else [])
    gone: dict[str, float] = {}
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
        wait_until(lambda: all([p["status"].get("phase") for p in pods_on(cluster, n)] == ["Running"] for n in names),
                   120, interval=0.5, message="one Running pod on every node")
        pdb_allows(cluster, namespace, 0)
        autoscaler.configure()
        # The agents, with the autoscaler's args list pasted whole, start first: their word is in Prometheus before
        # the autoscaler judges anything.
        env = {**otlp_env(otelcol.otlp_http_endpoint), "NRA_AUTOSCALER_ARGS": shlex.join(autoscaler.args)}
        agents = start_agents(cluster, prom, env, names, AGENT_RELEASE[build], tmp_path / "agents")
        agents_ready = time.monotonic() - started

        # Phase 1: every node judged, the free ones removed and gone.
        autoscaler.start()
        wait_until(lambda: all(n in autoscaler.history() for n in names) and all(removed(autoscaler, n) for n in free),
                   150, interval=1.0, message="the autoscaler's word on every node, the free ones removed")
        for n in free:
            wait_until(lambda n=n: not cluster.exists(f"/api/v1/nodes/{n}"), 60, interval=0.5, message=f"{n} deleted")
            gone[n] = time.time()
        # Phase 2: the PDB allows a disruption; the node it held goes.
        cluster.api("PATCH", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/guarded",
                    {"spec": {"minAvailable": 0}})
        pdb_allows(cluster, namespace, 1)
        wait_until(lambda: removed(autoscaler, node["guarded"]), 120, interval=1.0,
                   message="the node the PDB held removed once it allows one")
        wait_until(lambda: not cluster.exists(f"/api/v1/nodes/{node['guarded']}"), 60, interval=0.5,
                   message="the PDB's node deleted")
        gone[node["guarded"]] = time.time()
        present = {n for n in names if cluster.exists(f"/api/v1/nodes/{n}")}
        time.sleep(LAG)  # the agents' last samples before the removal reach Prometheus
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

    rows, counts, problems = compare(autoscaler, prom, scenarios, node, gone)
    shown = table(rows)
    print(f"\n{build}: {len(names)} nodes, agents ready after {agents_ready:.0f} s, whole run {elapsed:.0f} s\n"
          f"{shown}\n" + "\n".join(counts))
    assert not problems, "\n".join(problems) + f"\n{shown}\n{autoscaler.tail(60)}"
    # The scenarios were what they were built to be, else the agreement above would prove little.
    history = autoscaler.history()
    assert {n for n in names if removed(autoscaler, n)} == {*free, node["guarded"]} == set(names) - present
    first = {k: history[n][0].reason for k, n in node.items()}
    assert first == {"free": "removed", "bare": "not_replicated", "system": "unmovable_kube_system",
                     "pinned": "not_safe_to_evict", "scratch": "local_storage", "guarded": "not_enough_pdb",
                     "disabled": "scale_down_disabled", "busy": "not_underutilized",
                     "threshold": "removed" if build == "1.36.1" else "not_underutilized",
                     **({"vm-idle": "removed", "vm-busy": "not_underutilized"} if "vm-idle" in node else {})}
