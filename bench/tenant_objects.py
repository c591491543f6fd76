"""A tenant's PDB selectors and pod labels at the API server's limits, against a real kube-apiserver
(``bench/run.py tenant-objects``; issue 38, items 1 and 3).

The issue's two attacks, at its sizes: PDBs whose selector is ``app In [210,000 four-letter values]`` (1.47 MB each,
admitted by kube-apiserver 1.37.2; every agent in the cluster reads every PDB) and pods on the agent's node with
30,000 labels each. The installed agent (production venv, OTLP/HTTP export every 1 s to a receiver) against the
suite's real control plane (testkit/cluster.py), measured as bench/worst_node.py measures it (which puts these
footholds on its node with every other one): steady RSS (largest of five samples 5 s after it holds every pod) and
peak (VmHWM), for an agent that watches them arrive and for one that reads them in its start-up LIST, against the
DaemonSet's limit of 160 MiB.

Environment: NRA_TENANT_PDBS (7: the issue's count that reached 160 MiB), NRA_TENANT_PODS (90), NRA_TENANT_LABELS
(30,000); NRA_BENCH_TREE=<checkout> measures another checkout's agent (main's, for the figure before). About 5
minutes here.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.common import HttpReceiver, load, machine
from bench.worst_node import Tenant, on_node, print_rows
from testkit.worst_node import add_node

PDBS = int(os.environ.get("NRA_TENANT_PDBS", "7"))
PODS = int(os.environ.get("NRA_TENANT_PODS", "90"))
LABELS = int(os.environ.get("NRA_TENANT_LABELS", "30000"))
NODE = "tenant-node"


def main() -> None:
    from testkit.cluster import Cluster

    tree = os.environ.get("NRA_BENCH_TREE") or "this checkout"
    print(f"\n### A tenant's objects at the API server's limits: {PDBS} PDBs of a 1.47 MB selector, {PODS} pods of "
          f"{LABELS:,} labels on the node (agent from {tree}; real kube-apiserver, OTLP/HTTP export every 1 s)\n")
    print(f"machine: {machine()}; {load()}\n")
    receiver = HttpReceiver().start()
    try:
        with tempfile.TemporaryDirectory(prefix="nra-tenant-") as folder, Cluster(Path(folder)) as cluster:
            add_node(cluster, NODE, pods=PODS + 10)
            measured = on_node(cluster, receiver, Tenant(labelled=PODS, labels=LABELS, huge_pdbs=PDBS), NODE)
    finally:
        receiver.stop()
    print_rows(measured.rows)


if __name__ == "__main__":
    main()
