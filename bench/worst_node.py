"""The worst node the API server allows, against a real kube-apiserver (``bench/run.py worst-node``; issue 29, item 2).

110 running pods and a Job's 600 completed pods on one node, every pod's annotations at the API server's limit of
256 KiB per object (one ``vm.neon.tech/usage`` annotation the agent refuses); the installed agent (production venv,
as the DaemonSet runs it, OTLP/HTTP export every 1 s to a receiver) against the suite's real control plane
(testkit/cluster.py: etcd, kube-apiserver 1.37.2, scheduler, controller-manager). Measured:

* **watch**: the agent started on the empty node, then the pods created and their status written (every object
  reaches it as WATCH events of ~256 KiB each); its steady RSS (largest of five samples 5 s after it holds every
  pod) and its peak (VmHWM, the process's high-water mark);
* **start-up list**: a second agent started once the pods exist, which reads them in its initial LIST;
* **the floor**, as ``bench/run.py memory`` measures it: the same agent on an empty node of the same API server, and
  the floor program (bench/baselines/floor.py) exporting the same points;
* **how the start-up list is served**, in this process with the agent's own readers (tracemalloc peak of the Python
  heap while reading and decoding, and kube-apiserver's RSS): the agent's LIST (``resourceVersion=0``, from the watch
  cache, read as a stream item by item), the same LIST asked in pages (``limit=100``: the watch cache answers it
  whole, no ``continue``), pages read from etcd (``limit=100``, no resourceVersion), and the WatchList streaming
  list (``sendInitialEvents=true``: one event per object, then a bookmark).

Environment: NRA_WORST_RUNNING (110), NRA_WORST_COMPLETED (600). About 6 minutes here.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

from bench.cluster_scale.process_usage import rss_mib
from bench.common import FakeApiServer, HttpReceiver, RunningAgent, load, machine
from bench.measure import last_export_points
from bench.memory import _floor_rss, _steady_rss
from testkit.worst_node import add_node, create_pods

RUNNING = int(os.environ.get("NRA_WORST_RUNNING", "110"))
COMPLETED = int(os.environ.get("NRA_WORST_COMPLETED", "600"))
NODE = "worst-node"
NAMESPACE = "default"


class _Kubeconfig:
    """What RunningAgent asks of its API server: a kubeconfig (here the real cluster's admin one)."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def kubeconfig(self, _where: Path) -> Path:
        return self._path


def held_pods(agent: RunningAgent) -> dict[str, int]:
    """Pods the agent holds by phase (/debug/pods)."""
    try:
        status, body = agent.get("/debug/pods")
    except OSError:
        return {}
    if status != 200:
        return {}
    phases: dict[str, int] = {}
    for p in json.loads(body)["pods"]:
        phases[p["phase"]] = phases.get(p["phase"], 0) + 1
    return phases


def wait_held(agent: RunningAgent, running: int, completed: int, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    want = {k: v for k, v in (("Running", running), ("Succeeded", completed)) if v}
    while held_pods(agent) != want:
        if time.monotonic() > deadline or agent.proc.poll() is not None:
            raise SystemExit(f"the agent holds {held_pods(agent)}, not {want}")
        time.sleep(1)


def serving(cluster) -> list[tuple[str, str, float, float, int]]:
    """(way, requests, client peak MiB, kube-apiserver RSS MiB after, objects) for each way of serving the LIST."""
    from agent.decode.reader import POD
    from agent.source.kube import KubeApi, load_configuration
    from agent.source.listing import read_list

    access = SimpleNamespace(kubeconfig=str(cluster.admin_kubeconfig), context=None, in_cluster=None,
                             described=lambda: "the bench's kubeconfig")
    api = KubeApi(load_configuration(access))
    apiserver = cluster.component("kube-apiserver").proc.pid
    selector = f"spec.nodeName={NODE}"
    path = "/api/v1/pods"

    def listed(params: dict[str, str]) -> tuple[int, int]:
        """(requests, objects) of a LIST, pages followed while the server hands out a continue token."""
        requests = objects = 0
        params = dict(params)
        while True:
            fields, items = read_list(api.get_chunks(path, params, read_timeout=300), POD.list_item)
            objects += sum(1 for item in items if POD.decode(item) is not None)
            requests += 1
            token = (fields.get("metadata") or {}).get("continue")
            if not token:
                return requests, objects
            params["continue"] = token

    def watch_list() -> tuple[int, int]:
        params = {"fieldSelector": selector, "watch": "true", "sendInitialEvents": "true",
                  "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
        objects = 0
        for line in api.stream_lines(path, params, read_timeout=300):
            typed = POD.watch_line(line)
            if typed is not None:
                POD.decode(typed[1])
                objects += 1
                continue
            event = json.loads(line)
            annotations = (event.get("object", {}).get("metadata") or {}).get("annotations") or {}
            if event.get("type") == "BOOKMARK" and annotations.get("k8s.io/initial-events-end") == "true":
                return 1, objects
        return 1, objects

    ways = [
        ("the agent's LIST: resourceVersion=0 (watch cache), one answer read item by item",
         lambda: listed({"fieldSelector": selector, "resourceVersion": "0"})),
        ("the same asked in pages: resourceVersion=0, limit=100",
         lambda: listed({"fieldSelector": selector, "resourceVersion": "0", "limit": "100"})),
        ("pages from etcd: limit=100, no resourceVersion",
         lambda: listed({"fieldSelector": selector, "limit": "100"})),
        ("WatchList: watch with sendInitialEvents=true, one event per pod",
         watch_list),
    ]
    rows = []
    for name, way in ways:
        gc.collect()
        tracemalloc.start()
        requests, objects = way()
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        rows.append((name, f"{requests}", peak, rss_mib(apiserver), objects))
    api.close()
    return rows


def _agent_row(what: str, agent: RunningAgent) -> tuple[str, float, float]:
    steady = _steady_rss(agent.rss_mib)
    return what, steady, agent.peak_mib()


def main() -> None:
    from testkit.cluster import Cluster

    total = RUNNING + COMPLETED
    print(f"\n### The worst node: {RUNNING} running pods and {COMPLETED} completed ones, every pod's annotations "
          "at the "
          f"256 KiB limit, against a real kube-apiserver (production install, OTLP/HTTP export every 1 s)\n")
    print(f"machine: {machine()}; {load()}\n")
    receiver = HttpReceiver().start()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="nra-worst-node-") as folder, Cluster(Path(folder)) as cluster:
            kubeconfig = _Kubeconfig(cluster.admin_kubeconfig)
            add_node(cluster, NODE, pods=RUNNING + COMPLETED + 10)
            add_node(cluster, "empty-node", pods=RUNNING + COMPLETED + 10)
            # The floor: the same agent on a node with no pod, same API server.
            empty = RunningAgent(kubeconfig, receiver, node="empty-node", interval=1.0)
            try:
                empty.wait_ready(120)
                rows.append(_agent_row("the agent, empty node (its floor here)", empty))
            finally:
                empty.stop()
            watching = RunningAgent(kubeconfig, receiver, node=NODE, interval=1.0)
            try:
                watching.wait_ready(120)
                started = time.monotonic()
                create_pods(cluster, RUNNING, COMPLETED, node=NODE, namespace=NAMESPACE)
                wait_held(watching, RUNNING, COMPLETED)
                created = time.monotonic() - started
                rows.append(_agent_row(f"WATCH: {total} pods arrive while it runs ({created:.0f} s)", watching))
                points = last_export_points(receiver)
            finally:
                watching.stop()
            listing = RunningAgent(kubeconfig, receiver, node=NODE, interval=1.0)
            try:
                wait_held(listing, RUNNING, COMPLETED, timeout=300)
                ready = time.monotonic() - listing.started
                rows.append(_agent_row(f"start-up LIST of the {total} pods (held after {ready:.1f} s)", listing))
            finally:
                listing.stop()
            served = serving(cluster)
    finally:
        receiver.stop()
    fake = FakeApiServer(tls=True).start()
    try:
        floor = _floor_rss(fake, points, connect=False)
        floor_tls = _floor_rss(fake, points)
    finally:
        fake.stop()
    print("| agent | steady RSS MiB | peak RSS MiB (VmHWM) | steady / floor program | "
          "peak / DaemonSet limit (160 MiB) |")
    print("|---|---:|---:|---:|---:|")
    for what, steady, peak in rows:
        print(f"| {what} | {steady:.1f} | {peak:.1f} | {steady / floor:.3f}x | {peak / 160:.0%} |")
    print(f"\nThe floor program exporting the same {len(points):,} points: {floor:.1f} MiB never connecting, "
          f"{floor_tls:.1f} MiB holding its TLS connection to the API server.\n")
    print("| start-up LIST served as | requests | client peak (Python heap, tracemalloc) MiB | kube-apiserver RSS "
          "after MiB | pods read |")
    print("|---|---:|---:|---:|---:|")
    for name, requests, peak, apiserver, objects in served:
        print(f"| {name} | {requests} | {peak:.1f} | {apiserver:.0f} | {objects} |")
