"""A tenant's PDB selectors and pod labels at the API server's limits, against a real kube-apiserver
(``bench/run.py tenant-objects``; issue 38, items 1 and 3).

The issue's two attacks, at its sizes: PDBs whose selector is ``app In [210,000 four-letter values]`` (1.47 MB each,
admitted by kube-apiserver 1.37.2; every agent in the cluster reads every PDB) and pods on the agent's node with
30,000 labels each. The installed agent (production venv, OTLP/HTTP export every 1 s to a receiver) against the
suite's real control plane (testkit/cluster.py), measured as bench/worst_node.py measures it: steady RSS (largest of
five samples 5 s after it holds every pod) and peak (VmHWM), for an agent that watches them arrive and for one that
reads them in its start-up LIST, against the DaemonSet's limit of 160 MiB.

Environment: NRA_TENANT_PDBS (7: the issue's count that reached 160 MiB), NRA_TENANT_PODS (90), NRA_TENANT_LABELS
(30,000); NRA_BENCH_TREE=<checkout> measures another checkout's agent (main's, for the figure before). About 5
minutes here.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.common import HttpReceiver, RunningAgent, load, machine
from bench.worst_node import _agent_row, _Kubeconfig, wait_held
from testkit.worst_node import add_node, create_pods, huge_selector_pdb, many_labels

PDBS = int(os.environ.get("NRA_TENANT_PDBS", "7"))
PODS = int(os.environ.get("NRA_TENANT_PODS", "90"))
LABELS = int(os.environ.get("NRA_TENANT_LABELS", "30000"))
NODE = "tenant-node"
NAMESPACE = "default"


def main() -> None:
    from testkit.cluster import Cluster

    tree = os.environ.get("NRA_BENCH_TREE") or "this checkout"
    print(f"\n### A tenant's objects at the API server's limits: {PDBS} PDBs of a 1.47 MB selector, {PODS} pods of "
          f"{LABELS:,} labels on the node (agent from {tree}; real kube-apiserver, OTLP/HTTP export every 1 s)\n")
    print(f"machine: {machine()}; {load()}\n")
    receiver = HttpReceiver().start()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="nra-tenant-") as folder, Cluster(Path(folder)) as cluster:
            kubeconfig = _Kubeconfig(cluster.admin_kubeconfig)
            add_node(cluster, NODE, pods=PODS + 10)
            watching = RunningAgent(kubeconfig, receiver, node=NODE, interval=1.0)
            try:
                watching.wait_ready(120)
                rows.append(_agent_row("before the tenant's objects", watching))
                started = time.monotonic()
                for i in range(PDBS):
                    cluster.api("POST", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets",
                                huge_selector_pdb(f"huge-{i}"), timeout=120)
                create_pods(cluster, PODS, 0, node=NODE, namespace=NAMESPACE, usage="", labels=many_labels(LABELS))
                wait_held(watching, PODS, 0)
                created = time.monotonic() - started
                rows.append(_agent_row(f"WATCH: the PDBs, then the pods, arrive while it runs ({created:.0f} s)",
                                       watching))
            finally:
                watching.stop()
            listing = RunningAgent(kubeconfig, receiver, node=NODE, interval=1.0)
            try:
                wait_held(listing, PODS, 0, timeout=300)
                ready = time.monotonic() - listing.started
                rows.append(_agent_row(f"start-up LIST of them (held after {ready:.1f} s)", listing))
            finally:
                listing.stop()
    finally:
        receiver.stop()
    print("| agent | steady RSS MiB | peak RSS MiB (VmHWM) | peak / DaemonSet limit (160 MiB) |")
    print("|---|---:|---:|---:|")
    for what, steady, peak in rows:
        print(f"| {what} | {steady:.1f} | {peak:.1f} | {peak / 160:.0%} |")


if __name__ == "__main__":
    main()
