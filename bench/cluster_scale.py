"""Scale by simulation: 20 Nodes x 110 pods in a real API server, one agent per Node (20 processes).

Run: ``python bench/cluster_scale.py`` or ``python bench/run.py cluster-scale`` (after the test command's install;
the control-plane binaries and KWOK are built on first use, see components/kubernetes.py and components/kwok.py).
The Nodes are KWOK's (tests/support/kwok.py): it keeps them Ready and reports their pods Running, as in the cluster
tests. Every agent is started from the shipped DaemonSet's pod as the kubelet would start it (tests/support/kubelet.py).
Measured:

* steady requests per agent as the API server counts them: API Priority and Fairness puts every request of a
  ServiceAccount outside kube-system into the ``service-accounts`` flow schema, so
  ``apiserver_flowcontrol_dispatched_requests_total{flow_schema="service-accounts"}`` is the agents' alone;
  ``apiserver_request_total`` (no per-client label) is shown beside it, net of a window without agents;
* RSS and CPU per agent (psutil);
* the reconnection storm after an API server restart: peak requests per second on the new API server, and the
  time until every agent reports a pod created on its Node right after the restart.

Environment: ``NRA_SCALE_NODES`` (20), ``NRA_SCALE_PODS`` (110 per Node, the DaemonSet's own pod included),
``NRA_SCALE_STEADY_SECONDS`` (660: longer than the agent's longest server-side watch timeout, 600 s, so every
watch has been renewed at least once), ``NRA_SCALE_DOWN_SECONDS`` (5).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from common import machine, realistic_pod  # noqa: E402  (puts the repository on sys.path)

from tests.support.cluster import Cluster, parse_prometheus_text  # noqa: E402
from tests.support.factory import for_create  # noqa: E402
from tests.support.kubelet import AgentContainer, deploy, start_agent_pod, wait_for_daemon_pod  # noqa: E402
from tests.support.kwok import Kwok  # noqa: E402
from tests.support.otlp_receiver import HttpReceiver  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402

NODES = int(os.environ.get("NRA_SCALE_NODES", "20"))
PODS_PER_NODE = int(os.environ.get("NRA_SCALE_PODS", "110"))
STEADY_SECONDS = float(os.environ.get("NRA_SCALE_STEADY_SECONDS", "660"))
DOWN_SECONDS = float(os.environ.get("NRA_SCALE_DOWN_SECONDS", "5"))
BASELINE_SECONDS = 60.0
AGENT_FLOW = "service-accounts"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def counters(cluster: Cluster) -> dict[str, float]:
    """All requests the API server counted, and those of the agents' flow schema, from one scrape."""
    text = cluster.apiserver_metrics_text()
    total = sum(s["value"] for s in parse_prometheus_text(text, "apiserver_request_total"))
    agents = sum(s["value"] for s in parse_prometheus_text(text, "apiserver_flowcontrol_dispatched_requests_total")
                 if s.get("flow_schema") == AGENT_FLOW)
    lists = sum(s["value"] for s in parse_prometheus_text(text, "apiserver_request_total")
                if s.get("verb") == "LIST" and s.get("resource") in ("pods", "nodes"))
    return {"total": total, "agents": agents, "lists": lists}


def pod_spec(i: int, node: str) -> dict:
    """A realistic pod (env, probes, several containers; every fifth a NeonVM runner) bound to ``node``."""
    p = realistic_pod(i, node=node)
    p["metadata"]["name"] = f"{p['metadata']['name']}-{node}"
    body = for_create(p, nodeName=node)
    body["spec"].pop("volumes", None)  # the API server adds the service-account volume itself
    for c in body["spec"]["containers"] + body["spec"].get("initContainers", []):
        c.pop("volumeMounts", None)
    return body


def populate(cluster: Cluster, namespace: str, nodes: list[str]) -> None:
    """Pods created bound to their Node, in parallel, then waited for until KWOK has reported each Running (so its
    status writes are over before the baseline window)."""
    def one(args: tuple[int, str]) -> None:
        i, node = args
        cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", pod_spec(i, node), timeout=120)

    work = [(i, node) for node in nodes for i in range(PODS_PER_NODE - 1)]  # the DaemonSet pod is the 110th
    with ThreadPoolExecutor(8) as pool:
        for done, _ in enumerate(pool.map(one, work), start=1):
            if done % 500 == 0:
                log(f"{done}/{len(work)} pods created")

    def all_running() -> bool:
        pods = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods", timeout=120)["items"]
        return sum(p.get("status", {}).get("phase") == "Running" for p in pods) == len(work)

    wait_until(all_running, timeout=600, interval=2.0, message=f"{len(work)} pods Running (written by KWOK)")


def synced(agent: AgentContainer) -> bool:
    try:
        return agent.ready() and len(agent.pods()) == PODS_PER_NODE
    except OSError:
        return False


def wait_all(predicate, agents: list[AgentContainer], timeout: float) -> float:
    """Seconds until ``predicate(agent)`` held for every agent (polled round-robin)."""
    start = time.monotonic()
    pending = list(agents)
    while pending:
        if time.monotonic() - start > timeout:
            raise SystemExit(f"{len(pending)} agents not there after {timeout:.0f} s: {[a.node for a in pending]}")
        pending = [a for a in pending if not predicate(a)]
        if pending:
            time.sleep(0.5)
    return time.monotonic() - start


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="nra-scale-"))
    cluster = Cluster(workdir / "cluster").start()
    kwok = Kwok(cluster, workdir=workdir / "kwok").start()
    receiver = HttpReceiver().start()
    agents: list[AgentContainer] = []
    try:
        deployment = deploy(cluster)
        nodes = [f"scale-{i:02d}" for i in range(NODES)]
        for node in nodes:
            kwok.add_node(node, cpu="64", memory="256Gi", pods=PODS_PER_NODE)
        kwok.wait_ready(nodes)
        daemon_pods = {node: wait_for_daemon_pod(cluster, deployment, node, timeout=300) for node in nodes}
        namespace = cluster.create_namespace("scale")
        started = time.monotonic()
        populate(cluster, namespace, nodes)
        log(f"{NODES * (PODS_PER_NODE - 1)} pods created and Running in {time.monotonic() - started:.0f} s")

        before = counters(cluster)
        time.sleep(BASELINE_SECONDS)
        baseline = counters(cluster)
        control_plane_rate = (baseline["total"] - before["total"]) / BASELINE_SECONDS

        started = time.monotonic()
        for node in nodes:
            agents.append(start_agent_pod(cluster, daemon_pods[node], workdir / node, receiver.endpoint))
        ready = wait_all(synced, agents, 300)
        log(f"{NODES} agents synced {ready:.1f} s after the first started ({time.monotonic() - started:.1f} s)")

        steady_from = counters(cluster)
        cpu_from = [sum(psutil.Process(a.proc.pid).cpu_times()[:2]) for a in agents]
        log(f"steady window: {STEADY_SECONDS:.0f} s")
        time.sleep(STEADY_SECONDS)
        steady_to = counters(cluster)
        cpu = [sum(psutil.Process(a.proc.pid).cpu_times()[:2]) - c0 for a, c0 in zip(agents, cpu_from)]
        rss = [a.rss_bytes() / 2**20 for a in agents]
        apiserver = psutil.Process(cluster.component("kube-apiserver").proc.pid)
        apiserver_rss = apiserver.memory_info().rss / 2**20
        agent_requests = steady_to["agents"] - steady_from["agents"]
        net_total = (steady_to["total"] - steady_from["total"]) - control_plane_rate * STEADY_SECONDS

        log("restarting the API server")
        def attempts(agent: AgentContainer) -> int:
            """Requests by the agent's own count: every watch start (failed ones while down included) and every LIST."""
            runtime = agent.runtime()
            return sum(runtime["watch_starts"].values()) + sum(runtime["relists"].values())

        relists_before = [sum(a.runtime()["relists"].values()) for a in agents]
        attempts_before = sum(attempts(a) for a in agents)
        samples: list[tuple[float, dict]] = []
        stop_sampling = threading.Event()

        def sample() -> None:
            """Scrape every second; while the API server is down the scrape fails and is skipped."""
            while not stop_sampling.wait(1.0):
                try:
                    samples.append((time.monotonic(), counters(cluster)))
                except OSError:
                    pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        stopped = time.monotonic()
        back = cluster.restart_apiserver(down_seconds=DOWN_SECONDS)
        markers = {}
        for node in nodes:  # a pod per Node, created as soon as the API server is back
            body = for_create({"metadata": {"name": f"marker-{node}"},
                               "spec": {"containers": [{"name": "m", "image": "registry.invalid/m:1"}]}}, nodeName=node)
            cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", body)
            markers[node] = f"{namespace}/marker-{node}"
        resync = wait_all(lambda a: markers[a.node] in a.pods(), agents, 300)
        time.sleep(10)
        stop_sampling.set()
        sampler.join()
        relists = sum(sum(a.runtime()["relists"].values()) for a in agents) - sum(relists_before)
        storm_attempts = sum(attempts(a) for a in agents) - attempts_before
        # Only the new process's samples (its counters start at zero when it starts).
        fresh = [(t, c) for t, c in samples if t >= stopped]
        fresh = fresh[next((i for i in range(1, len(fresh)) if fresh[i][1]["total"] < fresh[i - 1][1]["total"]), 0):]
        pairs = list(zip(fresh, fresh[1:]))
        rates = [(b["total"] - a["total"]) / (tb - ta) for (ta, a), (tb, b) in pairs]
        agent_rates = [(b["agents"] - a["agents"]) / (tb - ta) for (ta, a), (tb, b) in pairs]
        storm_agent_requests = fresh[-1][1]["agents"] if fresh else float("nan")
        storm_lists = fresh[-1][1]["lists"] if fresh else float("nan")

        per_agent_hour = agent_requests / NODES / STEADY_SECONDS * 3600
        print(f"\n### Scale by simulation: {NODES} Nodes x {PODS_PER_NODE} pods, {NODES} agents, real kube-apiserver "
              f"{cluster.release}\n")
        print("| measure | value |")
        print("|---|---:|")
        print(f"| agents synced after start (all {NODES}) | {ready:.1f} s |")
        print(f"| steady window | {STEADY_SECONDS:.0f} s |")
        print(f"| agent requests in the window (APF flow `{AGENT_FLOW}`) | {agent_requests:.0f} "
              f"({per_agent_hour:.1f} per agent per hour) |")
        print(f"| apiserver_request_total in the window, net of the control plane's own rate | {net_total:.0f} |")
        print(f"| control plane's own rate without agents (scheduler, controller-manager, node leases) | "
              f"{control_plane_rate:.2f} requests/s |")
        print(f"| RSS per agent (min / median / max) | {min(rss):.1f} / {statistics.median(rss):.1f} / "
              f"{max(rss):.1f} MiB |")
        print(f"| CPU per agent over the window (median / max) | {statistics.median(cpu) / STEADY_SECONDS * 100:.2f} / "
              f"{max(cpu) / STEADY_SECONDS * 100:.2f} % of a core |")
        print(f"| kube-apiserver RSS with {NODES * PODS_PER_NODE} pods and {2 * NODES} agent watches | "
              f"{apiserver_rss:.0f} MiB |")
        print(f"| API server down (SIGTERM to ready) | {back - stopped:.1f} s |")
        print(f"| storm: peak requests/s on the new API server, all clients (agents only) | "
              f"{max(rates, default=0):.0f} ({max(agent_rates, default=0):.0f}) |")
        print(f"| storm: agent requests from the restart until 10 s after the last resync | "
              f"{storm_agent_requests:.0f} ({storm_agent_requests / NODES:.1f} per agent) |")
        print(f"| storm: LISTs of pods and nodes on the new API server (all clients) | {storm_lists:.0f} |")
        print(f"| storm: requests the agents made, by their own count (failed ones while down included) | "
              f"{storm_attempts} ({storm_attempts / NODES:.1f} per agent) |")
        print(f"| storm: relists by the agents (their own count, pods and node) | {relists} |")
        print(f"| storm: API server ready until every agent reported its new pod | {resync:.1f} s |")
    finally:
        for agent in agents:
            agent.stop()
        receiver.stop()
        kwok.stop()
        cluster.stop()


if __name__ == "__main__":
    print(f"machine: {machine()}")
    main()
