"""The scale benchmark's run: its phases in order (``main``), each a function below; the table at the end."""

from __future__ import annotations

import math
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.cluster_scale.agents import log_events, pods_of, prepare_agents, wait_each
from bench.cluster_scale.anchor import Anchor, anchor_bin
from bench.cluster_scale.churn import churn, churn_latencies
from bench.cluster_scale.control_plane import Api, ApiAddress, apiserver_pid, scale_cluster, scheduler_metric
from bench.cluster_scale.population import Population, count_pods, populate
from bench.cluster_scale.process_usage import busiest, cpu_seconds, process_cpu, rss_mib
from bench.cluster_scale.progress import log
from bench.cluster_scale.prometheus import head_series, prom_samples, series_count
from bench.cluster_scale.report import report
from bench.cluster_scale.restart import restart_storm
from bench.cluster_scale.results import AgentRestart, AnchorRun, Before, Churned, Results, Steady
from bench.cluster_scale.sizes import (
    AGENTS,
    ANCHOR,
    BASELINE_SECONDS,
    CHURN_LIFETIME,
    CHURN_RATE,
    CHURN_SECONDS,
    CLIENT_QPS,
    EXPORT_INTERVAL,
    NODE_LEASE_SECONDS,
    NODES,
    PODS_PER_NODE,
    STEADY_SECONDS,
    WRITERS,
)
from bench.cluster_scale.windows import ColdStart, Window, cold_start, measure_window, settle
from bench.common import load, machine, required
from testkit.collector import SHIPPED_CONFIG, Collector, Prometheus
from testkit.kubelet import AgentContainer, Deployment, deploy
from testkit.kwok import Kwok
from testkit.trust import TrustCluster, collector_env, remote_write_prometheus
from testkit.waiting import wait_until


@dataclass
class Scene:
    """What the run started and its phases share; ``stop`` tears it down, clients before the servers they use."""

    workdir: Path
    cluster: TrustCluster
    api: Api  # the benchmark's own writes, as the admin
    prom: Prometheus | None = None
    collector: Collector | None = None
    kwok: Kwok | None = None
    deployment: Deployment | None = None
    anchor: Anchor | None = None
    agents: list[AgentContainer] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    namespace: str = ""
    measured: list[str] = field(default_factory=list)  # the nodes with an agent
    expected: dict[str, int] = field(default_factory=dict)  # measured node -> pods on it

    def stop(self) -> None:
        if self.anchor is not None:
            self.anchor.stop()
        for agent in self.agents:
            agent.stop(timeout=5)
        for part in (self.collector, self.prom, self.kwok):
            if part is not None:
                part.stop()
        self.cluster.stop()
        log(f"stopped; logs under {self.workdir}")


def main() -> None:
    announce()
    workdir = Path(tempfile.mkdtemp(prefix="nra-scale-"))
    log(f"workdir {workdir}")
    # Profiling on: /debug/pprof/heap?gc=1 collects before it answers, so the live heap is read without GC noise.
    cluster = scale_cluster(workdir / "cluster", apiserver_flags=["--profiling=true"])
    cluster.start()
    scene = Scene(workdir=workdir, cluster=cluster, api=Api(ApiAddress.admin(cluster)))
    try:
        start_services(scene)
        nodes_ready = add_nodes(scene)
        population = add_workload(scene)
        before = window_before(scene)
        cold1 = first_cold_start(scene)
        steady = steady_window(scene)
        after = window_after(scene)
        cold2 = second_cold_start(scene)
        restart = restart_with_agents(scene)
        churned = churn_pods(scene)
        anchor = anchor_in_their_place(scene) if ANCHOR else None
        report(Results(release=scene.cluster.release, nodes_ready=nodes_ready, population=population,
                       expected=scene.expected, before=before, cold1=cold1, steady=steady, after=after, cold2=cold2,
                       restart=restart, churn=churned, anchor=anchor))
    finally:
        scene.stop()


def collector(scene: Scene) -> Collector:
    return required(scene.collector, "the Collector (start_services)")


def collector_pid(scene: Scene) -> int:
    return required(collector(scene).pid, "the Collector's process")


def prometheus(scene: Scene) -> Prometheus:
    return required(scene.prom, "Prometheus (start_services)")


def announce() -> None:
    """The machine and the sizes; the client-go anchor built first, so its build is not inside a window."""
    print(f"machine: {machine()}; {load()} at start; busiest processes: {busiest()}", flush=True)
    print(f"sizes: {NODES} KWOK nodes x {PODS_PER_NODE} pods, {AGENTS} agents, steady {STEADY_SECONDS:.0f} s, "
          f"churn {CHURN_RATE:.0f}/s for {CHURN_SECONDS:.0f} s (lifetime {CHURN_LIFETIME:.0f} s), "
          f"scheduler/controller-manager client QPS {CLIENT_QPS}", flush=True)
    if ANCHOR:
        log(f"client-go anchor: {anchor_bin()}")


def start_services(scene: Scene) -> None:
    """The shipped RBAC, Prometheus, the Collector in front of it, KWOK, and the shipped DaemonSet."""
    cluster, workdir = scene.cluster, scene.workdir
    cluster.install_shipped_rbac()
    prom = scene.prom = remote_write_prometheus(workdir / "prometheus").start()
    scene.collector = Collector(workdir / "otelcol", SHIPPED_CONFIG,
                                env=collector_env(cluster, f"{prom.url}/api/v1/write")).start()
    scene.kwok = Kwok(cluster, workdir=workdir / "kwok", lease_seconds=NODE_LEASE_SECONDS).start()
    scene.deployment = deploy(cluster)


def add_nodes(scene: Scene) -> float:
    """NODES KWOK nodes, Ready, each with its DaemonSet pod bound; returns the seconds until all were Ready."""
    cluster, kwok = scene.cluster, required(scene.kwok, "KWOK (start_services)")
    scene.nodes = [f"kwok-{i:04d}" for i in range(NODES)]
    started = time.monotonic()
    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(lambda n: kwok.add_node(n, cpu="64", memory="256Gi", pods=PODS_PER_NODE), scene.nodes))
    kwok.wait_ready(scene.nodes, timeout=900)
    nodes_ready = time.monotonic() - started
    log(f"{NODES} KWOK nodes Ready in {nodes_ready:.0f} s")
    wait_until(lambda: scheduler_metric(cluster, "scheduler_schedule_attempts_total", result="scheduled") >= NODES,
               600, interval=2, message=f"the DaemonSet's {NODES} pods bound")
    log(f"DaemonSet pods bound on every node {time.monotonic() - started:.0f} s after the first node")
    return nodes_ready


def add_workload(scene: Scene) -> Population:
    """The workload pods, bound and Running; then which nodes get an agent and how many pods each holds."""
    scene.namespace = scene.cluster.create_namespace("scale")
    workload = NODES * (PODS_PER_NODE - 1)
    population = populate(scene.cluster, scene.api, scene.namespace, workload,
                          expected_scheduled=NODES * PODS_PER_NODE)
    log(f"population done: {population}")
    scene.measured = scene.nodes[:: max(1, NODES // AGENTS)][:AGENTS]
    scene.expected = {n: count_pods(scene.api, f"spec.nodeName={n}") for n in scene.measured}
    return population


def window_before(scene: Scene) -> Before:
    """The API server settled, then a window without agents."""
    cluster = scene.cluster
    apiserver_rss, collector_rss = rss_mib(apiserver_pid(cluster)), rss_mib(collector_pid(scene))
    settled = settle(cluster)
    log(f"baseline window without agents (before): {BASELINE_SECONDS:.0f} s")
    window, _, _ = measure_window(cluster, scene.api, BASELINE_SECONDS, {"apiserver": apiserver_pid(cluster)})
    return Before(apiserver_rss=apiserver_rss, collector_rss=collector_rss, settled=settled, window=window)


def first_cold_start(scene: Scene) -> ColdStart:
    """Every agent prepared from its DaemonSet pod, then all started at once."""
    scene.agents = prepare_agents(scene.cluster, scene.deployment, scene.measured, scene.workdir / "agents",
                                  collector(scene).otlp_http_endpoint, collector(scene).ca_file)
    cold = cold_start(scene.cluster, scene.agents, scene.expected)
    log(f"{AGENTS} agents synced {cold.seconds:.1f} s after the start")
    return cold


def steady_window(scene: Scene) -> Steady:
    """STEADY_SECONDS with every agent running, once each has exported."""
    cluster, agents = scene.cluster, scene.agents
    time.sleep(EXPORT_INTERVAL * 2)  # every agent exported at least once
    pids = {"apiserver": apiserver_pid(cluster), "collector": collector_pid(scene),
            **{a.node: required(a.proc, f"the agent on {a.node}").pid for a in agents}}
    runtime0 = {a.node: a.runtime() for a in agents}
    log(f"steady window: {STEADY_SECONDS:.0f} s ({load()})")
    window, _, to = measure_window(cluster, scene.api, STEADY_SECONDS, pids)
    runtime1 = {a.node: a.runtime() for a in agents}

    def own(name: str) -> int:
        return (sum(sum(r[name].values()) for r in runtime1.values())
                - sum(sum(r[name].values()) for r in runtime0.values()))

    return Steady(window=window, watches_open={r: to.watches[r] for r in ("pods", "nodes")},
                  apiserver_rss=rss_mib(apiserver_pid(cluster)), collector_rss=rss_mib(collector_pid(scene)),
                  agent_rss=[a.rss_bytes() / 2**20 for a in agents],
                  agent_cpu=[window.cpu[a.node] / window.seconds * 100 for a in agents],
                  all_series=series_count(prometheus(scene), '{k8s_node_name=~".+"}'),
                  pod_series=series_count(prometheus(scene), '{k8s_pod_name=~".+"}'),
                  prom_head=head_series(prometheus(scene)),
                  load=f"{load()}; busiest: {busiest()}", watch_starts=own("watch_starts"), relists=own("relists"))


def window_after(scene: Scene) -> Window:
    """The agents stopped, a second window without them."""
    for agent in scene.agents:
        agent.stop()
    time.sleep(15)
    log(f"baseline window without agents (after): {BASELINE_SECONDS:.0f} s ({load()})")
    window, _, _ = measure_window(scene.cluster, scene.api, BASELINE_SECONDS,
                                  {"apiserver": apiserver_pid(scene.cluster)})
    return window


def second_cold_start(scene: Scene) -> ColdStart:
    cold = cold_start(scene.cluster, scene.agents, scene.expected)
    log(f"{AGENTS} agents synced again {cold.seconds:.1f} s after the second start")
    time.sleep(EXPORT_INTERVAL * 2)
    return cold


def restart_with_agents(scene: Scene) -> AgentRestart:
    """The API server restarted under every agent: their requests, relists, and what they exported meanwhile."""
    agents = scene.agents
    log("restarting the API server with every agent connected")

    def agents_saw(markers: dict[str, str]) -> dict[str, float]:
        return wait_each(agents, lambda a: markers[a.node] in pods_of(a), 600)

    failed0 = sum(sum(a.runtime()["requests_failed"].values()) for a in agents)
    storm = restart_storm(scene.cluster, scene.api, scene.namespace, scene.measured, "agents", agents_saw)
    failed = sum(sum(a.runtime()["requests_failed"].values()) for a in agents) - failed0
    relisted = {a.node: min(log_events(a, "listed", storm["stopped"]), default=math.nan) for a in agents}
    resync_all = max(storm["resynced"].values()) - storm["back"]
    ages = _ages_during_outage(prometheus(scene), storm)
    marker_prom = prom_samples(prometheus(scene), 'pod_or_vm_cpu_requests{k8s_pod_name=~"marker-agents-.*"}', 300)
    return AgentRestart(storm=storm, failed=failed, relisted={n: t for n, t in relisted.items() if not math.isnan(t)},
                        resync_all=resync_all, ages=ages,
                        marker_first={dict(k)["k8s_node_name"]: v[0][0] for k, v in marker_prom.items()})


def _ages_during_outage(prom, storm: dict) -> list[float]:
    """Per agent, the largest last_event_age_seconds it exported between the stop and its resync."""
    outage = prom_samples(prom, "node_requests_agent_last_event_age_seconds",
                          time.time() - storm["stopped"] + EXPORT_INTERVAL)
    ages = []
    for labels, values in outage.items():
        node = dict(labels)["k8s_node_name"]
        during = [v for t, v in values if storm["stopped"] < t <= storm["resynced"].get(node, storm["back"])]
        if during:
            ages.append(max(during))
    return ages


def churn_pods(scene: Scene) -> Churned:
    """Churn once the restart's relists and resyncs are over; the CPU it cost and its latencies to Prometheus."""
    cluster = scene.cluster
    settled = settle(cluster)
    log(f"churn: {CHURN_RATE:.0f} creations and deletions per second for {CHURN_SECONDS:.0f} s ({load()})")
    apiserver_cpu0, machine_cpu0, cpu_from = cpu_seconds(apiserver_pid(cluster)), process_cpu(), time.time()
    created, deleted, stats = churn(ApiAddress.admin(cluster), scene.namespace, scene.nodes)
    seconds = stats["ended"] - cpu_from  # the CPU counted includes the writers' 5 s start
    apiserver_cpu = (cpu_seconds(apiserver_pid(cluster)) - apiserver_cpu0) / seconds
    machine_cpu = process_cpu()
    by_process = sorted(((machine_cpu[k] - machine_cpu0.get(k, 0.0)) / seconds, k) for k in machine_cpu
                        if machine_cpu[k] >= machine_cpu0.get(k, 0.0))[::-1]
    log(f"churn CPU by process (cores): {', '.join(f'{k} {v:.2f}' for v, k in by_process[:10])}")
    time.sleep(2 * EXPORT_INTERVAL + 10)
    latencies = churn_latencies(prometheus(scene), created, deleted, set(scene.measured),
                                time.time() - stats["start"] + 5)
    log(f"churn done: {stats}")
    return Churned(settled=settled, apiserver_cpu=apiserver_cpu, cpu_by_process=by_process, stats=stats,
                   latencies=latencies)


def anchor_in_their_place(scene: Scene) -> AnchorRun:
    """The agents stopped, client-go's informers for the same nodes with their tokens, and the same restart."""
    for agent in scene.agents:
        agent.stop()
    time.sleep(5)
    log(f"client-go anchor: {AGENTS} nodes' informers")
    anchor = scene.anchor = Anchor(scene.cluster, scene.agents, scene.workdir / "anchor")
    started = time.time()
    cold = anchor.wait_synced(AGENTS) - started
    time.sleep(20)
    storm = restart_storm(scene.cluster, scene.api, scene.namespace, scene.measured, "anchor", anchor.saw)
    return AnchorRun(cold=cold, storm=storm,
                     reconnect_kinds=Counter(e["event"] for e in anchor.events if e["t"] >= storm["stopped"]),
                     first_ok=anchor.first_pod_lists(storm["stopped"]), rss=rss_mib(anchor.proc.pid))
