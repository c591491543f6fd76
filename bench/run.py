"""Benchmarks for node-requests-agent. Run: python bench/run.py [NAME ...], each NAME one of
throughput|stream|list|memory|pdbs|wide-pods|churn|idle|versus|export|startup|verdict-churn|all|cluster-scale|
pdb-watches|worst-node|new-node|tenant-objects|collector-push

Each prints a Markdown table row set; docs/benchmarks.md's figures come from this script.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # Run as a script: import the benchmarks as the ``bench`` package from the repository root (testkit and
    # the agent live there too), not as loose modules from bench/ that could shadow anything they import.
    _BENCH = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]
    sys.path.insert(0, str(_BENCH.parent))

from bench import (
    churn,
    export,
    idle,
    list_decode,
    memory,
    pdb_memory,
    startup,
    stream,
    throughput,
    verdict_churn,
    versus,
    wide_pods,
)
from bench.common import machine


def cluster_scale() -> None:
    """1,000 KWOK nodes x 30 pods in a real API server, 50 agents, one Collector (bench/cluster_scale/)."""
    from bench.cluster_scale import run

    run.main()


BENCHMARKS: dict[str, Callable[[], None]] = {
    "throughput": throughput.main, "stream": stream.main, "list": list_decode.main, "memory": memory.main,
    "pdbs": pdb_memory.main, "wide-pods": wide_pods.main, "churn": churn.main, "idle": idle.main,
    "versus": versus.main, "export": export.main,
    "startup": startup.main, "verdict-churn": verdict_churn.main}
def pdb_watches() -> None:
    """1,000 PodDisruptionBudget list+watch pairs against a real API server: its CPU and memory
    (bench/pdb_watches.py)."""
    from bench import pdb_watches

    pdb_watches.main()


def worst_node() -> None:
    """110 running and 600 completed pods, annotations at the 256 KiB limit, labels, containers and PDB selectors at
    the API server's limits, all on one node, against a real API server (bench/worst_node.py)."""
    from bench import worst_node

    worst_node.main()


def tenant_objects() -> None:
    """A tenant's PDBs of 1.47 MB selectors and pods of 30,000 labels, against a real API server
    (bench/tenant_objects.py)."""
    from bench import tenant_objects

    tenant_objects.main()


def new_node() -> None:
    """A new node joins and pulls the agent from a registry: Node Ready to its first number (bench/new_node.py;
    root)."""
    from bench import new_node

    new_node.main()


def collector_push() -> None:
    """The agent's honest push through the Collector before issue 38 (NRA_BENCH_COLLECTOR_BEFORE, default 291f010)
    and now, each built and started here with its own shipped config (bench/collector_push.py)."""
    from bench import collector_push

    collector_push.main()


#: Not part of "all": each runs a control plane (cluster-scale about an hour, NRA_SCALE_QUICK=1: minutes;
#: pdb-watches about 6 minutes; worst-node about 10 minutes; new-node about 6 minutes, as root; tenant-objects about
#: 5 minutes; collector-push about 2 minutes, more the first time: it builds the earlier commit's Collector).
SEPARATE = {"cluster-scale": cluster_scale, "pdb-watches": pdb_watches, "worst-node": worst_node, "new-node": new_node,
            "tenant-objects": tenant_objects, "collector-push": collector_push}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("which", nargs="*", default=["all"], choices=[*BENCHMARKS, *SEPARATE, "all"])
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for name, bench in BENCHMARKS.items():
        if name in args.which or "all" in args.which:
            bench()
    for name, bench in SEPARATE.items():
        if name in args.which:
            bench()
    sys.stdout.flush()

if __name__ == "__main__":
    main()
