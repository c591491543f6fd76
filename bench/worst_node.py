"""The worst node the API server allows, against a real kube-apiserver (``bench/run.py worst-node``; issue 29, item 2,
and issue 38: every foothold of a tenant at once).

On one node, every object the largest the API server admits (etcd's request limit, 1.5 MiB, bounds what the
API server's own limits leave open; the sizes are found by trying, each try deleted at once): 110 running pods and a
Job's 600 completed ones, every pod's annotations at the API server's limit of 256 KiB per object (one
``vm.neon.tech/usage`` annotation the agent refuses); of the running pods, some carry as many labels as etcd then
admits (``tenant.example.com/l00000: v00000``...) and some as many containers (a name, an image and requests each);
and in the tenant's namespace, PDBs whose selector is the largest the agent keeps (16 KiB of distinct two-character
``In`` values, the most memory per byte), more than its bounds keep (before the bound per namespace, f1664e1: 127
of them filled its bound across PDBs; since, a namespace keeps one), and PDBs whose selector is as large as etcd
admits (``app In`` four-letter values). The installed agent (production venv, as the
DaemonSet runs it, OTLP/HTTP export every 1 s to a receiver) against the suite's real control plane
(testkit/cluster.py: etcd, kube-apiserver 1.37.2, scheduler, controller-manager). Measured:

* **watch**: the agent started on the empty node (its floor here), then the PDBs created, then the pods and their
  status written (every object reaches it as WATCH events); its steady RSS (largest of five samples 5 s after it
  holds them) and its peak (VmHWM, the process's high-water mark) after each step;
* **start-up list**: a second agent started once everything exists, which reads it in its initial LISTs;
* **the floor program** (bench/baselines/floor.py) exporting the same points, as ``bench/run.py memory`` measures it;
* **how the start-up list is served**, in this process with the agent's own readers (tracemalloc peak of the Python
  heap while reading and decoding, and kube-apiserver's RSS): the agent's LIST (``resourceVersion=0``, from the watch
  cache, read as a stream item by item), the same LIST asked in pages (``limit=100``: the watch cache answers it
  whole, no ``continue``), pages read from etcd (``limit=100``, no resourceVersion), and the WatchList streaming
  list (``sendInitialEvents=true``: one event per object, then a bookmark).

Environment: NRA_WORST_RUNNING (110 running pods, of which NRA_WORST_LABELLED (20) with labels and NRA_WORST_WIDE
(10) with containers at the limit), NRA_WORST_COMPLETED (600), NRA_WORST_LABELS and NRA_WORST_CONTAINERS (per pod;
unset: the most etcd admits, found by trying), NRA_WORST_KEPT_PDBS (160) spread over NRA_WORST_PDB_NAMESPACES (80),
NRA_WORST_SMALL_PDBS (default: with the others, the agent's --max-pdbs, 10,000), NRA_WORST_HUGE_PDBS (7),
NRA_WORST_SELECTOR_VALUES (per huge PDB; unset: found by trying). About 10 minutes here.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from agent.config import SETTINGS
from bench.cluster_scale.process_usage import rss_mib
from bench.common import FakeApiServer, HttpReceiver, RunningAgent, load, machine
from bench.measure import Point, last_export_points
from bench.memory import _floor_rss, _steady_rss
from testkit.cluster_client import ClusterClient
from testkit.worst_node import (
    SELECTOR_VALUES,
    add_node,
    create_pods,
    huge_selector_pdb,
    huge_usage,
    kept_selector_pdb,
    largest,
    many_labels,
    minimal_containers,
    small_selector_pdb,
    stored,
    tenant_pod,
)


def _size(name: str) -> int:
    """A size set in the environment, 0 when not (then the most the API server admits)."""
    return int(os.environ.get(name) or 0)


RUNNING = int(os.environ.get("NRA_WORST_RUNNING", "110"))
COMPLETED = int(os.environ.get("NRA_WORST_COMPLETED", "600"))
LABELLED = int(os.environ.get("NRA_WORST_LABELLED", "20"))
WIDE = int(os.environ.get("NRA_WORST_WIDE", "10"))
KEPT_PDBS = int(os.environ.get("NRA_WORST_KEPT_PDBS", "160"))
HUGE_PDBS = int(os.environ.get("NRA_WORST_HUGE_PDBS", "7"))
#: Namespaces the kept-size PDBs are spread over: the shared selector budget keeps a share per namespace and
#: 1 MiB in all, so 80 namespaces of 16 KiB selectors fill the total, where one namespace fills only its share.
PDB_NAMESPACES = int(os.environ.get("NRA_WORST_PDB_NAMESPACES", "80"))
#: PDBs of the largest selector always kept (SMALL_SELECTOR_BYTES), created first: with the others, the most the
#: agent keeps before --max-pdbs (10,000 by default) makes every PDB unknown.
SMALL_PDBS = int(os.environ.get("NRA_WORST_SMALL_PDBS") or SETTINGS["max_pdbs"].default - KEPT_PDBS - HUGE_PDBS)
LABELS = _size("NRA_WORST_LABELS")
CONTAINERS = _size("NRA_WORST_CONTAINERS")
HUGE_VALUES = _size("NRA_WORST_SELECTOR_VALUES")
NODE = "worst-node"
NAMESPACE = "default"
#: Label keys as a tenant's tooling names them.
LABEL_PREFIX = "tenant.example.com/"
#: A merge patch that leaves a PDB's selector small (a PDB at etcd's limit cannot be deleted as it is).
SMALL_SELECTOR = {"spec": {"selector": {"matchExpressions": None, "matchLabels": {"app": "gone"}}}}
#: The skipped-objects counter (/debug/runtime) of PDBs whose selector the agent did not keep.
PDBS_OVER = "poddisruptionbudgets/selector_over_bound"


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """What a tenant puts in its namespace and on the agent's node; every pod carries ``usage`` as its
    ``vm.neon.tech/usage`` annotation ("": none)."""

    usage: str = ""
    running: int = 0  # Running pods of one container
    completed: int = 0  # a Job's Succeeded pods
    labelled: int = 0  # Running pods with ``labels`` labels under ``label_prefix``
    labels: int = 0
    label_prefix: str = ""
    wide: int = 0  # Running pods with ``containers`` containers (minimal_containers)
    containers: int = 0
    kept_pdbs: int = 0  # PDBs of the largest selector the agent keeps (kept_selector_pdb)
    huge_pdbs: int = 0  # PDBs of ``app In`` ``selector_values`` four-letter values (huge_selector_pdb)
    pdb_namespaces: int = 1  # namespaces the kept-size PDBs are spread over (NAMESPACE and tenant-<j>)
    small_pdbs: int = 0  # PDBs of the largest selector always kept (small_selector_pdb), in NAMESPACE
    selector_values: int = SELECTOR_VALUES

    @property
    def all_running(self) -> int:
        return self.running + self.labelled + self.wide

    def labelled_pod(self, name: str, node: str, labels: int | None = None) -> dict:
        return tenant_pod(name, False, self.usage, node, NAMESPACE,
                          labels=many_labels(self.labels if labels is None else labels, self.label_prefix))

    def wide_pod(self, name: str, node: str, containers: int | None = None) -> dict:
        return tenant_pod(name, False, self.usage, node, NAMESPACE,
                          containers=minimal_containers(self.containers if containers is None else containers))

    @property
    def pdbs(self) -> int:
        return self.small_pdbs + self.kept_pdbs + self.huge_pdbs

    def pdb_namespace(self, i: int) -> str:
        j = i % self.pdb_namespaces
        return NAMESPACE if j == 0 else f"tenant-{j:03d}"

    def create_pdbs(self, cluster: ClusterClient) -> None:
        """The always-kept ones first, then the kept-size ones round the namespaces, the huge ones last: the agent
        counts those it does not keep, so the last one's count says it has them all."""
        for j in range(1, self.pdb_namespaces):
            cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": f"tenant-{j:03d}"}})

        def post(namespace: str, body: dict) -> None:
            cluster.api("POST", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", body, timeout=120)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: post(NAMESPACE, small_selector_pdb(f"small-{i}", i)), range(self.small_pdbs)))
        for i in range(self.kept_pdbs):
            post(self.pdb_namespace(i), kept_selector_pdb(f"kept-{i}"))
        for i in range(self.huge_pdbs):
            post(NAMESPACE, huge_selector_pdb(f"huge-{i}", self.selector_values))

    def create_pods(self, cluster: ClusterClient, node: str) -> None:
        create_pods(cluster, self.running, self.completed, node=node, namespace=NAMESPACE, usage=self.usage)
        if self.labelled:
            create_pods(cluster, self.labelled, 0, node=node, namespace=NAMESPACE, usage=self.usage,
                        labels=many_labels(self.labels, self.label_prefix), prefix="labels")
        if self.wide:
            create_pods(cluster, self.wide, 0, node=node, namespace=NAMESPACE, usage=self.usage,
                        containers=minimal_containers(self.containers), prefix="wide")


class _Kubeconfig:
    """What RunningAgent asks of its API server: a kubeconfig (here the real cluster's admin one)."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def kubeconfig(self, _where: Path) -> Path:
        return self._path


def held_pods(agent: RunningAgent) -> dict[str, int]:
    """Pods the agent holds by phase (/debug/pods, every page)."""
    phases: dict[str, int] = {}
    query = ""
    while True:
        try:
            status, body = agent.get("/debug/pods" + query)
        except OSError:
            return {}
        if status != 200:
            return {}
        page = json.loads(body)
        for p in page["pods"]:
            phases[p["phase"]] = phases.get(p["phase"], 0) + 1
        if not page.get("continue"):
            return phases
        query = f"?continue={page['continue']}"


def wait_held(agent: RunningAgent, running: int, completed: int, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    want = {k: v for k, v in (("Running", running), ("Succeeded", completed)) if v}
    while held_pods(agent) != want:
        if time.monotonic() > deadline or agent.proc.poll() is not None:
            raise SystemExit(f"the agent holds {held_pods(agent)}, not {want}")
        time.sleep(1)


def wait_pdbs(agent: RunningAgent, over: int, timeout: float = 120.0, settle: float = 3.0) -> None:
    """Until the agent has counted at least ``over`` PDB events whose selector it did not keep (Tenant.create_pdbs
    makes those PDBs last; the disruption controller's status writes count too), the count has not moved for
    ``settle`` seconds and its queue is empty; an agent without the bound (NRA_BENCH_TREE) counts none: then
    ``timeout``."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while True:
        runtime = agent.runtime()
        count = runtime["skipped"].get(PDBS_OVER, 0)
        if count != last:
            last, since = count, time.monotonic()
        elif count >= over and runtime["queue_depth"] == 0 and time.monotonic() - since >= settle:
            return
        if agent.proc.poll() is not None:
            raise SystemExit("the agent ended while the PDBs arrived")
        if time.monotonic() > deadline:
            print(f"(the agent counted {count} events of PDBs over its bound, not {over}, in {timeout:.0f} s: "
                  "measured anyway)\n")
            return
        time.sleep(0.5)


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What ``on_node`` measured: (what, steady RSS MiB, peak RSS MiB) rows, the watching agent's last export's
    points and its skipped-objects counters."""

    rows: list[tuple[str, float, float]]
    points: list[Point]
    skipped: dict[str, int]


def on_node(cluster: ClusterClient, receiver: HttpReceiver, tenant: Tenant, node: str) -> Measured:
    """An agent watching ``node`` while the tenant's PDBs, then its pods, arrive; then a second agent that reads them
    all in its start-up LISTs. Each measured as its steady and peak RSS."""
    kubeconfig = _Kubeconfig(cluster.admin_kubeconfig)
    rows = []
    watching = RunningAgent(kubeconfig, receiver, node=node, interval=1.0)
    try:
        watching.wait_ready(120)
        rows.append(_agent_row("before the tenant's objects (its floor here)", watching))
        if tenant.pdbs:
            started = time.monotonic()
            tenant.create_pdbs(cluster)
            wait_pdbs(watching, tenant.huge_pdbs)
            rows.append(_agent_row(f"WATCH: the {tenant.pdbs:,} PDBs arrive while it runs "
                                   f"({time.monotonic() - started:.0f} s)", watching))
        started = time.monotonic()
        tenant.create_pods(cluster, node)
        wait_held(watching, tenant.all_running, tenant.completed)
        rows.append(_agent_row(f"WATCH: then the {tenant.all_running + tenant.completed} pods "
                               f"({time.monotonic() - started:.0f} s)", watching))
        points = last_export_points(receiver)
        skipped = watching.runtime()["skipped"]
    finally:
        watching.stop()
    listing = RunningAgent(kubeconfig, receiver, node=node, interval=1.0)
    try:
        wait_held(listing, tenant.all_running, tenant.completed, timeout=300)
        listing.wait_ready(120)
        ready = time.monotonic() - listing.started
        rows.append(_agent_row(f"start-up LIST of all of them (held after {ready:.1f} s)", listing))
    finally:
        listing.stop()
    return Measured(rows=rows, points=points, skipped=skipped)


def print_rows(rows: list[tuple[str, float, float]], floor: float | None = None) -> None:
    """The agents' rows as a Markdown table, against the floor program's RSS when measured."""
    against = " steady / floor program |" if floor else ""
    print(f"| agent | steady RSS MiB | peak RSS MiB (VmHWM) |{against} peak / DaemonSet limit (160 MiB) |")
    print("|---|---:|---:|" + ("---:|" if floor else "") + "---:|")
    for what, steady, peak in rows:
        ratio = f" {steady / floor:.3f}x |" if floor else ""
        print(f"| {what} | {steady:.1f} | {peak:.1f} |{ratio} {peak / 160:.0%} |")


def admitted(cluster: ClusterClient, node: str) -> Tenant:
    """The worst tenant of the environment's knobs, each size the most the API server admits where not set: found by
    trying (``stored``: created, its status written, deleted), before any agent runs."""
    tenant = Tenant(usage=huge_usage(), running=RUNNING - LABELLED - WIDE, completed=COMPLETED, labelled=LABELLED,
                    label_prefix=LABEL_PREFIX, wide=WIDE, kept_pdbs=KEPT_PDBS, huge_pdbs=HUGE_PDBS,
                    pdb_namespaces=PDB_NAMESPACES, small_pdbs=SMALL_PDBS)
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    running = {"phase": "Running"}
    # Each try is named as the longest name of its kind: the pods created after are no larger.
    labels = LABELS or (LABELLED and largest(
        lambda n: stored(cluster, pods, tenant.labelled_pod(f"labels-{LABELLED - 1}", node, n), running), 1, 65_536))
    containers = CONTAINERS or (WIDE and largest(
        lambda n: stored(cluster, pods, tenant.wide_pod(f"wide-{WIDE - 1}", node, n), running), 1, 10_000))
    values = HUGE_VALUES or (HUGE_PDBS and largest(
        lambda n: stored(cluster, f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets",
                         huge_selector_pdb(f"huge-{HUGE_PDBS - 1}", n), shrink=SMALL_SELECTOR), SELECTOR_VALUES, 2**19))
    return replace(tenant, labels=labels, containers=containers, selector_values=values or SELECTOR_VALUES)


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


def _sizes(tenant: Tenant) -> str:
    """The JSON size of one object of each kind, as the bench POSTs it (the API server adds managedFields)."""
    def kib(obj: dict) -> str:
        return f"{len(json.dumps(obj, separators=(',', ':'))) / 1024:,.0f} KiB"

    return (f"a plain pod {kib(tenant_pod('app-0', False, tenant.usage, NODE))}, a labelled pod "
            f"{kib(tenant.labelled_pod('labels-0', NODE))}, a wide pod {kib(tenant.wide_pod('wide-0', NODE))}, a "
            f"kept PDB {kib(kept_selector_pdb('kept-0'))}, an always-kept PDB {kib(small_selector_pdb('small-0', 0))}, "
            f"a huge PDB "
            f"{kib(huge_selector_pdb('huge-0', tenant.selector_values))}")


def main() -> None:
    from testkit.cluster import Cluster

    print(f"\n### The worst node: {RUNNING} running pods and {COMPLETED} completed ones, every pod's annotations at "
          "the 256 KiB limit; labels, containers and PDB selectors at the API server's limits, against a real "
          "kube-apiserver (production install, OTLP/HTTP export every 1 s)\n")
    print(f"machine: {machine()}; {load()}\n")
    receiver = HttpReceiver().start()
    try:
        with tempfile.TemporaryDirectory(prefix="nra-worst-node-") as folder, Cluster(Path(folder)) as cluster:
            add_node(cluster, NODE, pods=RUNNING + COMPLETED + 10)
            started = time.monotonic()
            tenant = admitted(cluster, NODE)
            print(f"The most the API server admits, beside a 256 KiB annotation (found in "
                  f"{time.monotonic() - started:.0f} s, or set): {tenant.labels:,} labels "
                  f"(`{LABEL_PREFIX}l00000: v00000`...) on each of {tenant.labelled} running pods, "
                  f"{tenant.containers:,} containers on each of {tenant.wide}; a selector of "
                  f"{tenant.selector_values:,} four-letter values on each of {tenant.huge_pdbs} huge PDBs, and "
                  f"{tenant.kept_pdbs} PDBs of the largest selector the agent keeps, over {tenant.pdb_namespaces} "
                  f"namespaces, after {tenant.small_pdbs:,} of the largest it always keeps. As POSTed: "
                  f"{_sizes(tenant)}.\n")
            measured = on_node(cluster, receiver, tenant, NODE)
            served = serving(cluster)
    finally:
        receiver.stop()
    fake = FakeApiServer(tls=True).start()
    try:
        floor = _floor_rss(fake, measured.points, connect=False)
        floor_tls = _floor_rss(fake, measured.points)
    finally:
        fake.stop()
    print_rows(measured.rows, floor)
    print(f"\nThe floor program exporting the same {len(measured.points):,} points: {floor:.1f} MiB never connecting, "
          f"{floor_tls:.1f} MiB holding its TLS connection to the API server. Objects the watching agent kept "
          f"without a part over its bounds: {measured.skipped}.\n")
    print("| start-up LIST served as | requests | client peak (Python heap, tracemalloc) MiB | kube-apiserver RSS "
          "after MiB | pods read |")
    print("|---|---:|---:|---:|---:|")
    for name, requests, peak, apiserver, objects in served:
        print(f"| {name} | {requests} | {peak:.1f} | {apiserver:.0f} | {objects} |")
