"""What the agent holds per PodDisruptionBudget of the cluster (``bench/run.py pdbs``).

Every agent keeps every PDB (a PDB selects pods by label wherever they run), so this is multiplied by the cluster's
PDB count on every node, up to ``--max-pdbs``. Measured with tracemalloc: the Python objects the node state holds
after a LIST of N PDBs went through the agent's own decode and handler (the transient peak includes the LIST's
records and the event), for PDBs shaped as the API server serves them, managedFields included (skipped unbuilt).
"""

from __future__ import annotations

import gc
import json
import tracemalloc

from bench.common import load, machine
from testkit.factory import pdb
from testkit.worst_node import small_selector_values

COUNT = 10_000
def _pdb(i: int, shape: str) -> bytes:
    labels: dict[str, str] = {"app.kubernetes.io/name": f"app-{i:05d}"}
    expressions = None
    if shape == "larger":
        labels |= {"app.kubernetes.io/instance": f"release-{i:05d}", "tier": "backend"}
        expressions = [{"key": "track", "operator": "In", "values": ["stable", "canary"]}]
    elif shape == "small-bound":
        labels = {}
        expressions = [{"key": "k", "operator": "In", "values": small_selector_values(i % 100, key="k")}]
    p = pdb(f"app-{i:05d}", namespace=f"team-{i % 200:03d}", match_labels=labels, match_expressions=expressions,
            disruptions_allowed=1)
    p["metadata"]["creationTimestamp"] = "2026-11-30T06:00:00Z"
    p["metadata"]["managedFields"] = [{"manager": "kube-controller-manager", "operation": "Update",
                                       "subresource": "status", "fieldsV1": {"f:status": {"f:disruptionsAllowed": {}}}}]
    p["status"].update(currentHealthy=2, desiredHealthy=1, expectedPods=2, observedGeneration=1)
    return json.dumps(p, separators=(",", ":")).encode()


def held(count: int, shape: str) -> tuple[float, float]:
    """(bytes held per PDB, peak MiB while the LIST is handled)."""
    from agent.decode.reader import PDB
    from agent.pipeline.events import PdbsListed
    from agent.pipeline.handler import Handler
    from agent.pipeline.state import NodeState
    from agent.telemetry.stats import RuntimeStats

    raw = [_pdb(i, shape) for i in range(count)]
    state = NodeState("bench-node", max_pdbs=None)
    handler = Handler(state=state, metrics=RuntimeStats())
    gc.collect()
    tracemalloc.start()
    handler.handle(PdbsListed(pdbs=tuple(PDB.record(b) for b in raw)))
    state.snapshot()  # the tuple snapshots share is part of what is held
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return current / count, peak / 2**20


def main() -> None:
    print("\n### PodDisruptionBudgets held by the node state (tracemalloc, after a LIST handled)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| PDB shape | JSON bytes per PDB | held per PDB | peak while handling a LIST of 10,000 |")
    print("|---|---:|---:|---:|")
    for shape, text in (("one", "one matchLabels entry"), ("larger", "three matchLabels, one In expression"),
                        ("small-bound", "the largest always kept: In two-character values, selector at most "
                                        "SMALL_SELECTOR_BYTES")):
        size = sum(len(_pdb(i, shape)) for i in range(100)) / 100
        per_pdb, peak = held(COUNT, shape)
        print(f"| {text} | {size:.0f} B | {per_pdb / 1024:.2f} KiB | {peak:.1f} MiB |")
