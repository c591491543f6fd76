"""What 1,000 agents' PodDisruptionBudget watches cost the API server (``bench/run.py pdb-watches``).

Every agent lists and watches every PDB of the cluster (docs/operations.md#the-pdb-watch). Here one real
kube-apiserver 1.37.2 (with etcd, the scheduler and kube-controller-manager, whose disruption controller writes the
PDBs' status, as in the test suite: testkit/cluster.py) holds ``PDBS`` PDBs; the benchmark opens ``WATCHES``
list-then-watch pairs as the agents' reflector does (LIST ``resourceVersion=0`` from the watch cache, then WATCH from
its version with bookmarks, one HTTP/1.1 connection each over TLS), and measures kube-apiserver's own CPU time
(its process, so the clients' CPU is not counted) and resident memory:

* idle, without the watches and with them (bookmarks only);
* the LISTs themselves;
* a PDB churn of ``RATE`` spec changes per second (an annotation patched), without and with the watches: each
  change is one event for every watcher, and the clients count the events they receive.

The clients are threads of this process reading raw bytes (no JSON), so they keep up; a watcher the API server finds
too slow is closed by it, which the count of events received would show. Not the agents themselves: the agents'
PDB source is tested in tests/source/test_pdb_watch.py and tests/cluster/; this measures the server's side.
Environment: NRA_PDB_WATCHES (1000), NRA_PDB_COUNT (200), NRA_PDB_RATE (10 changes/s), NRA_PDB_SECONDS (60 per
window).
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.cluster_scale.process_usage import cpu_seconds, rss_mib
from bench.common import load, machine, required

WATCHES = int(os.environ.get("NRA_PDB_WATCHES", "1000"))
PDBS = int(os.environ.get("NRA_PDB_COUNT", "200"))
RATE = float(os.environ.get("NRA_PDB_RATE", "10"))
SECONDS = float(os.environ.get("NRA_PDB_SECONDS", "60"))
PATH = "/apis/policy/v1/poddisruptionbudgets"
NAMESPACE = "bench-pdbs"


class Watcher(threading.Thread):
    """One agent's PDB source, as the server sees it: a LIST from the watch cache, then a watch from its version."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        super().__init__(daemon=True)
        self.port, self.context = port, context
        self.events = 0
        self.listed = threading.Event()
        self.ended = False
        self.version = ""
        self.head = b""  # the answer's first bytes, for a failure message

    def list(self) -> None:
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=60)
        connection.request("GET", f"{PATH}?resourceVersion=0")
        response = connection.getresponse()
        body = json.loads(response.read())
        connection.close()
        self.version = body["metadata"]["resourceVersion"]

    def run(self) -> None:
        """The watch over a raw TLS socket: its bytes counted as they come, never parsed (the clients must keep up)."""
        import socket

        raw = socket.create_connection(("127.0.0.1", self.port), timeout=600)
        sock = self.context.wrap_socket(raw, server_hostname="127.0.0.1")
        sock.sendall(f"GET {PATH}?watch=true&allowWatchBookmarks=true&resourceVersion={self.version}"
                     f"&timeoutSeconds=3600 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n".encode())
        self.listed.set()
        tail = b""
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                self.ended = True
                return
            # An event's type can be cut between two reads: count in the reads joined to the last few bytes.
            if len(self.head) < 3000:
                self.head += data[:3000]
            joined = tail + data
            self.events += joined.count(b'"type":"MODIFIED"') - tail.count(b'"type":"MODIFIED"')
            tail = joined[-32:]


def churn(api, rate: float, seconds: float) -> int:
    """Patch one PDB's annotation after another at ``rate`` per second for ``seconds``; the number of changes."""
    changes, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        api("PATCH", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/pdb-{changes % PDBS}",
            {"metadata": {"annotations": {"bench/change": str(time.time_ns())}}})  # never the value it had: no no-op
        changes += 1
        time.sleep(max(0.0, changes / rate - (time.monotonic() - start)))
    return changes


def window(pid: int, seconds: float, during: Callable[[], int] | None = None) -> tuple[float, float, int]:
    """(kube-apiserver CPU seconds per second over the window, its RSS MiB at the end, the PDB changes ``during``
    made: none when idle)."""
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    if during is None:
        time.sleep(seconds)
    result = during() if during is not None else 0
    spent = time.monotonic() - t0
    return (cpu_seconds(pid) - cpu0) / spent, rss_mib(pid), result


def main() -> None:
    from testkit.cluster import Cluster

    threading.stack_size(256 * 1024)
    print(f"\n### PodDisruptionBudget watches at the API server ({WATCHES:,} list+watch pairs, {PDBS} PDBs, "
          f"PDB changes at {RATE:g}/s at most, {SECONDS:g} s windows)\n")
    print(f"machine: {machine()}; {load()}\n")
    with tempfile.TemporaryDirectory(prefix="nra-pdb-watches-") as folder, Cluster(Path(folder)) as cluster:
        pid = required(cluster.component("kube-apiserver").proc, "kube-apiserver's process").pid
        cluster.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": NAMESPACE}})
        for i in range(PDBS):
            cluster.api("POST", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets", {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": f"pdb-{i}"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": f"app-{i}"}}}})
        time.sleep(30)  # the disruption controller writes each PDB's first status; the control plane settles
        rows = []
        idle = window(pid, SECONDS)
        rows.append(("no watch, idle", idle))
        changed = window(pid, SECONDS, lambda: churn(cluster.api, RATE, SECONDS))
        rows.append((f"no watch, {changed[2] / SECONDS:.1f} PDB changes/s", changed))
        pki = required(cluster.pki, "the cluster's PKI")
        context = ssl.create_default_context(cafile=str(pki.crt("ca")))
        context.load_cert_chain(str(pki.crt("admin")), str(pki.key("admin")))
        watchers = [Watcher(cluster.ports["apiserver"], context) for _ in range(WATCHES)]
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        for w in watchers:
            w.list()
        list_cpu, list_seconds = cpu_seconds(pid) - cpu0, time.monotonic() - t0
        for w in watchers:
            w.start()
        for w in watchers:
            w.listed.wait(60)
        time.sleep(5)
        watched_idle = window(pid, SECONDS)
        rows.append((f"{WATCHES:,} watches, idle (bookmarks)", watched_idle))
        before = sum(w.events for w in watchers)
        watched_churn = window(pid, SECONDS, lambda: churn(cluster.api, RATE, SECONDS))
        time.sleep(2)
        received = sum(w.events for w in watchers) - before
        rows.append((f"{WATCHES:,} watches, {watched_churn[2] / SECONDS:.1f} PDB changes/s", watched_churn))
        if received < watched_churn[2] * WATCHES // 2:
            print(f"the watches received too little; one began: {watchers[0].head[:3000]!r}")
        print("| phase | kube-apiserver CPU (cores) | kube-apiserver RSS MiB |")
        print("|---|---:|---:|")
        for name, (cpu, rss, _) in rows:
            print(f"| {name} | {cpu:.3f} | {rss:.0f} |")
        changes = watched_churn[2]
        print(f"\n{WATCHES:,} LISTs of {PDBS} PDBs from the watch cache: {list_cpu:.2f} s of kube-apiserver CPU "
              f"({list_cpu / WATCHES * 1000:.2f} ms each), {list_seconds:.1f} s in all, one after another.")
        print(f"During the watched churn: {changes} changes, {received:,} events received of {changes * WATCHES:,} "
              f"sent ({sum(w.ended for w in watchers)} watches ended by the server); the watches' share: "
              f"{(watched_churn[0] - changed[0]) / (changes / SECONDS) / WATCHES * 1e6:.1f} µs of kube-apiserver CPU "
              f"per event per watcher, {(watched_idle[1] - idle[1]) / WATCHES * 1024:.0f} KiB of its RSS per watch; "
              f"load while the watches were read: {load()}.")
