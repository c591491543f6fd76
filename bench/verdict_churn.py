"""The verdict's cost per PDB event, in process: one PDB rewritten per event (its selector moved from one pod to
another, its status toggled), each followed by the verdict an export reads, on this tree and on another (main's,
by default) in one run (``bench/run.py verdict-churn``).

The other tree's agent is taken with ``git archive`` (NRA_BENCH_BEFORE, a commit or branch; default main) into a
temporary folder and run by the same interpreter in a subprocess with that folder first on its path, so both sides
run the same events through their own NodeState and Handler (public names both trees have).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # Run as the measuring subprocess: the agent comes from PYTHONPATH (one tree or the other), never from bench/.
    _BENCH = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH]

NOW = 1_800_000_000.0

#: (row name, pods of 20 labels, pods of many labels, labels of those, namespaces, PDBs, events, seconds at most
#: per side, whether the other tree runs it, whether every PDB selects every pod of its namespace). Pods and PDBs are
#: spread over the namespaces in turn; each PDB selects one pod of its namespace, or with ``{}`` all of them (its
#: status toggled at each rewrite). The issue's attack at full size is run on this tree only: main's first verdict on
#: it alone would split 40,000 maps of 20,000 labels.
CASES = (
    ("110 pods (100 x 20 labels, 10 x 2,000 labels) x 1,000 PDBs, 10 namespaces", 100, 10, 2_000, 10, 1_000, 200,
     60.0, True, False),
    ("the issue's attack at a tenth of its labels: 40 pods x 2,000 labels, 1,000 PDBs, all in one namespace", 0, 40,
     2_000, 1, 1_000, 200, 60.0, True, False),
    ("the issue's attack: 40 pods x 20,000 labels, 1,000 PDBs, all in one namespace", 0, 40, 20_000, 1, 1_000, 100,
     60.0, False, False),
    ("110 pods x 10,000 PDBs whose selector {} covers every pod, one namespace", 110, 0, 20, 1, 10_000, 50, 60.0,
     True, True),
)


def main() -> None:
    from bench.common import ROOT, load, machine

    before = os.environ.get("NRA_BENCH_BEFORE", "main")
    print(f"\n### Verdict cost per PDB event (in process; one PDB rewritten per event, then the verdict; "
          f"before: {before}, after: this tree)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| case | events (before / after) | before: handler + verdict ms per event | after: handler + verdict ms "
          "per event | after: verdict alone (the export's part) ms | before / after |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="nra-before-") as folder:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", before, "agent", "testkit"], check=True,
                                 capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        for index, case in enumerate(CASES):
            new = _run(ROOT, index)
            if not case[8]:
                print(f"| {case[0]} | not run / {new['events']} | not run | {new['total_ms']:.2f} | "
                      f"{new['verdict_ms']:.2f} | |")
                continue
            old = _run(Path(folder), index)
            print(f"| {case[0]} | {old['events']} / {new['events']} | {old['total_ms']:.2f} | {new['total_ms']:.2f} | "
                  f"{new['verdict_ms']:.2f} | **{old['total_ms'] / new['total_ms']:.0f}x** |")


def _run(tree: Path, case: int) -> dict:
    """One side's figures for CASES[case], measured in a subprocess that imports the agent from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, str(case)], check=True, capture_output=True, text=True,
                         env=env, cwd=tree).stdout
    return json.loads(out)


def _measure(case: int) -> dict:
    """Handle the PDB rewrites of CASES[case] on a synced state; the mean wall time per event (handler, verdict)."""
    from agent.decode.reader import NODE, PDB, POD
    from agent.pipeline.events import ADDED, MODIFIED, NodeChanged, PdbChanged, PdbsListed, PodsListed
    from agent.pipeline.handler import Handler
    from agent.pipeline.state import NodeState
    from agent.telemetry.stats import RuntimeStats
    from testkit.factory import container, node, pdb, pod

    _, small, large, labels, spread, pdbs, events, budget, _, every = CASES[case]
    namespaces = [f"ns-{i}" for i in range(spread)]

    def one(i: int, many: int) -> dict:
        extra = {f"example.com/label-{k:05d}": f"value-{k}" for k in range(many - 1)}
        return pod(f"p{i}", namespace=namespaces[i % spread], containers=[container("c", "100m", "128Mi")],
                   labels={**extra, "app": f"app-{i}"},
                   owner_references=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"p{i}-rs",
                                      "uid": f"rs-{i}", "controller": True}])

    pods = [one(i, 20) for i in range(small)] + [one(small + i, labels) for i in range(large)]
    n = len(pods)

    def guard(j: int, step: int) -> dict:
        """PDB ``j`` at its ``step``-th version: it selects one pod of its namespace, the next one at each step."""
        target = j % spread + spread * ((j // spread + step) % (n // spread))
        return pdb(f"pdb-{j}", namespace=namespaces[j % spread], match_labels={} if every else {"app": f"app-{target}"},
                   disruptions_allowed=step % 2 + every, uid=f"pdb-{j}")

    state = NodeState("bench-node")
    handler = Handler(state=state, metrics=RuntimeStats())
    handler.handle(NodeChanged(type=ADDED, node=NODE.record(node("bench-node", cpu="16", memory="64Gi"))))
    handler.handle(PodsListed(pods=tuple(POD.record(p) for p in pods)))
    handler.handle(PdbsListed(pdbs=tuple(PDB.record(guard(j, 0)) for j in range(pdbs))))
    state.snapshot().verdict(NOW)
    rewrites = [PDB.record(guard(i % pdbs, 1 + i // pdbs)) for i in range(events)]
    handled = verdicts = 0.0
    done = 0
    deadline = time.perf_counter() + budget
    for record in rewrites:
        t0 = time.perf_counter()
        handler.handle(PdbChanged(type=MODIFIED, pdb=record))
        t1 = time.perf_counter()
        state.snapshot().verdict(NOW)
        t2 = time.perf_counter()
        handled, verdicts, done = handled + t1 - t0, verdicts + t2 - t1, done + 1
        if t2 > deadline:
            break
    return {"events": done, "handler_ms": handled / done * 1e3, "verdict_ms": verdicts / done * 1e3,
            "total_ms": (handled + verdicts) / done * 1e3}


if __name__ == "__main__":
    print(json.dumps(_measure(int(sys.argv[1]))))
