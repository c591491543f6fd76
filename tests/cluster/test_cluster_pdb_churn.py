"""A tenant rewriting PodDisruptionBudgets over pods of many labels does not hold the agent's exports or probes
(issue 38, item 2), on the real API server.

The issue's attack, scaled to the suite's machine: 20 tenant pods of 2,000 labels each on one KWOK node, 500 small
PDBs in their namespace, one PDB's selector rewritten every 0.5 s for 20 s, while the agent in process exports
every second to an OTLP receiver and answers /healthz. Before the fix every PDB event dropped the cached verdict
and the verdict the export computes split every pod's labels once per PDB of its namespace (20 x 500 splits of
2,000 labels): on main 5 exports in the 20 s, 4.3 s apart (at the issue's scale none for 150 s, and /healthz
"export stuck"). Now a rewrite re-matches only the pods it can reach, and the verdict an export reads matches
nothing.
"""

from __future__ import annotations

import http.client
import time

import pytest

from agent.run.agent import Agent
from testkit.agents import agent_config
from testkit.cluster import Cluster
from testkit.factory import container, for_create, pod
from testkit.kwok import Kwok
from testkit.otlp_receiver import HttpReceiver
from testkit.waiting import wait_until

pytestmark = pytest.mark.cluster

NODE = "kwok-pdb-churn"
PODS, LABELS, PDBS = 20, 2_000, 500
INTERVAL = 1.0  # the agent's export interval, seconds
CHURN, EVERY = 20.0, 0.5  # seconds of churn, seconds between rewrites


def tenant_pod(i: int, namespace: str) -> dict:
    labels = {f"tenant.example.com/l{k:04d}": f"v{k}" for k in range(LABELS - 1)}
    return for_create(pod(f"t{i}", namespace=namespace, containers=[container("c", "10m", "16Mi")],
                          labels={**labels, "app": f"t{i}"}), nodeName=NODE)


def guard(j: int, target: int) -> dict:
    """PDB ``b<j>`` selecting the tenant pod ``t<target>`` (the disruption controller writes its status)."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": f"b{j}"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": f"t{target}"}}}}


def healthz(port: int) -> tuple[int, float]:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/healthz")
        status = connection.getresponse().status
    finally:
        connection.close()
    return status, time.monotonic() - started


def test_pdb_rewrites_over_pods_of_many_labels_keep_exports_and_probes_on_schedule(
        cluster: Cluster, kwok: Kwok, http_receiver: HttpReceiver, monkeypatch) -> None:
    kwok.add_node(NODE, cpu="8", memory="16Gi")
    kwok.wait_ready([NODE])
    namespace = cluster.create_namespace("churn")
    for i in range(PODS):
        cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", tenant_pod(i, namespace))
    pdbs = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    for j in range(PDBS):
        cluster.api("POST", pdbs, guard(j, j % PODS))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", http_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    agent = Agent(agent_config(node_name=NODE, kubeconfig=str(cluster.admin_kubeconfig), exporter="otlp",
                               export_interval=INTERVAL, debug_address="127.0.0.1:0", read_timeout=30.0))
    try:
        agent.start()
        wait_until(lambda: len(agent.state.pods()) == PODS and len(agent.state.pdbs() or ()) == PDBS, timeout=120,
                   message="the agent holds the tenant's pods and PDBs")
        port = agent.debug.port
        exported = len(http_receiver.requests)
        wait_until(lambda: len(http_receiver.requests) >= exported + 2, timeout=60, message="exports before the churn")

        started, probes, step = time.monotonic(), [], 0
        while time.monotonic() - started < CHURN:
            j = step % PDBS
            step += 1
            cluster.api("PATCH", f"{pdbs}/b{j}", {"spec": guard(j, (j + step) % PODS)["spec"]})
            probes.append(healthz(port))
            time.sleep(EVERY)
        ended = time.monotonic()
        arrivals = [t for t, _ in list(http_receiver.requests) if started <= t <= ended]
        gaps = [b - a for a, b in zip([started, *arrivals], [*arrivals, ended], strict=True)]
        print(f"\n{step} PDB rewrites in {ended - started:.1f} s: {len(arrivals)} exports, longest gap "
              f"{max(gaps):.1f} s; /healthz slowest {max(s for _, s in probes):.2f} s")
        assert step >= CHURN / EVERY / 2, step  # the churn happened at about its rate
        assert len(arrivals) >= CHURN / INTERVAL / 2, arrivals
        assert max(gaps) < INTERVAL + 2.5, gaps
        assert all(status == 200 for status, _ in probes), probes
        assert max(s for _, s in probes) < 2.0, probes
        # The pod the last rewrite moved PDB b<j> to is covered by it, as the verdict reads it.
        target = f"t{(j + step) % PODS}"

        def covered() -> bool:
            snapshot = agent.state.snapshot()
            uid = next(v.uid for v in snapshot.pods if v.name == target)
            return f"b{j}" in {p.name for p in (snapshot.covering or {}).get(uid, ())}

        wait_until(covered, timeout=30, message="the last rewrite's pod covered by it")
    finally:
        agent.shutdown(final_export=False)
