"""A tenant's PDB selectors and pod labels cannot push the agent past its memory (issue 38, items 1 and 3), against
the real API server.

The issue's attacks, scaled down to keep the suite fast: PDBs whose selector is ``app In [210,000 four-letter
values]`` (1.47 MB each, which kube-apiserver admits; each cost every agent ~14.5 MiB) and pods on the agent's node
with 30,000 labels each (90 such pods reached 168.6 MiB). The agent runs in-process and reads them twice: as WATCH
events while it runs, and in a second agent's initial LIST. What the agent's own code holds once it has them is
measured with tracemalloc (allocations in agent/ frames, after a collection), so the bound holds on a loaded machine
where RSS would not be a fair measure. The verdict on the tenant's pods says "PDB unknown": the over-bound PDB may
cover them. The full-size figures (RSS) are ``bench/run.py tenant-objects``
(docs/benchmarks.md).
"""

from __future__ import annotations

import gc
import time
import tracemalloc

import pytest

from agent.config import from_sources
from agent.model.drainability import PDB_UNKNOWN
from agent.run.agent import Agent
from testkit.cluster import Cluster
from testkit.waiting import wait_until
from testkit.worst_node import create_pods, huge_selector_pdb, many_labels, tenant_namespace

pytestmark = pytest.mark.cluster

NODE = "tenant-objects-test"
PDBS, PODS, LABELS = 2, 6, 30_000
#: A controller of a kind the autoscaler trusts once --skip-nodes-with-custom-controller-pods is off, so the pods
#: reach the pdb rule (no controller-manager owns it: nothing deletes or adopts the pods).
OWNER = {"apiVersion": "tenant.example/v1", "kind": "Tenant", "name": "t",
         "uid": "4f3c1c9e-0000-4000-8000-000000000001", "controller": True}
#: What the agent may keep for all of it: a few KiB per pod and PDB (before: ~14.5 MiB per PDB, ~1.8 MiB per pod).
HELD_BOUND = 2 * 2**20


def agent_bytes() -> int:
    """Bytes alive in the Python heap that were allocated in the agent's own code, but the line each watch read
    last (a watch keeps it until the next arrives, whatever it held: bounded by MAX_LINE_BYTES, not per object)."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*/agent/*"),
                                                          tracemalloc.Filter(False, "*/agent/source/kube.py")])
    return sum(stat.size for stat in snapshot.statistics("filename"))


def start_agent(cluster: Cluster) -> Agent:
    flags = {"node_name": NODE, "kubeconfig": str(cluster.admin_kubeconfig), "exporter": "none",
             "debug_address": "off", "procfs": "off", "read_timeout": 30.0,
             "skip_nodes_with_custom_controller_pods": "false"}
    return Agent(from_sources(flags, {})).start()


def holds(agent: Agent, namespace: str) -> tuple[int, int]:
    """(the tenant's running pods, the tenant's PDBs over the bound) the agent holds."""
    pods = sum(v.namespace == namespace and v.phase == "Running" for v in agent.state.pods())
    over = sum(p.namespace == namespace and p.selector_over_bound > 0 for p in agent.state.pdbs() or ())
    return pods, over


@pytest.fixture
def namespace(cluster: Cluster):
    with tenant_namespace(cluster, NODE, pods=PODS + 10) as name:
        yield name


def reads_pdb_unknown(agent: Agent, namespace: str) -> None:
    blockers = agent.state.snapshot().verdict(time.time()).blockers
    reasons = {b.name: b.reason for b in blockers if b.namespace == namespace}
    assert reasons == {f"app-{i}": PDB_UNKNOWN for i in range(PODS)}, reasons


def test_a_tenants_huge_pdb_selectors_and_labels_leave_a_bounded_agent_that_reads_pdb_unknown(cluster: Cluster,
                                                                                               namespace: str):
    want = (PODS, PDBS)
    held = {}
    tracemalloc.start()
    try:
        for way in ("WATCH", "LIST"):  # the objects arrive while the first agent runs; the second one lists them
            before = agent_bytes()
            agent = start_agent(cluster)
            try:
                if way == "WATCH":
                    wait_until(lambda: agent.state.synced, 60, message="the agent's initial LIST")
                    before = agent_bytes()
                    for i in range(PDBS):
                        cluster.api("POST", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
                                    huge_selector_pdb(f"huge-{i}"), timeout=120)
                    create_pods(cluster, PODS, 0, node=NODE, namespace=namespace, usage="",
                                labels=many_labels(LABELS), owner=OWNER)
                wait_until(lambda: holds(agent, namespace) == want, 180, interval=0.5,
                           message=f"{way}: the agent holds {want} (it holds {holds(agent, namespace)})")
                held[way] = agent_bytes() - before
                reads_pdb_unknown(agent, namespace)
            finally:
                agent.shutdown(final_export=False)
            del agent
    finally:
        tracemalloc.stop()
    for way, kept in held.items():
        assert kept < HELD_BOUND, f"{kept / 2**20:.1f} MiB kept after the {way}"
