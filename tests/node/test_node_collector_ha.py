"""Losing a Collector replica on the real Service path (issue 21, item 3), on the real node.

The shipped manifests run as in test_node.py (testkit/node_rollout.py): the agent's image from the
DaemonSet at its shipped export interval, pushing with its projected token to
``otel-collector.node-requests-collector.svc`` (CoreDNS, then kube-proxy's iptables DNAT to one of the
shipped Deployment's two replicas), which write by remote write into Prometheus 3. The replica that holds
the agent's kept-alive connection (read from the node's conntrack table: the flow from the agent's pod IP to
the Service's ClusterIP, and the pod IP it was translated to) is killed with SIGKILL, its container's task
killed through containerd, just before the agent's next export, so that export finds its connection dead
while the kubelet, the EndpointSlice controller and kube-proxy have not yet taken the replica out of the
Service. That happens several times, each replica back Ready before the next kill.

Proof that nothing the agent was told was accepted got lost: every export carries
``node_requests_agent_exports_total{result="success"}``, the number of successful exports before it, so the
accepted exports' samples in Prometheus are consecutive integers; a hole would be an accepted export that
never arrived. A gap of two intervals between samples would be an export lost; the gaps are printed with
the exports' own durations, which the SDK's schedule adds to them.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import time

import pytest

from testkit.node_cluster import NODE_NAME, Node
from testkit.node_rollout import AGENT_NS, AGENT_SELECTOR, COLLECTOR_NS, COLLECTOR_SELECTOR, shipped_export_interval
from testkit.waiting import wait_until

pytestmark = pytest.mark.node

KILLS = 3
OTLP_HTTP_PORT = 4318  # the Service port the shipped agent's endpoint names
SUCCESSES = f'node_requests_agent_exports_total{{result="success",instance="{NODE_NAME}"}}'
FAILURES = f'node_requests_agent_exports_total{{result="failure",instance="{NODE_NAME}"}}'
DURATIONS = f'node_requests_agent_export_duration_seconds_sum{{instance="{NODE_NAME}"}}'
# A flow as conntrack prints it: the original direction, then the reply's source (the DNAT's target).
FLOW = re.compile(r"src=(?P<src>\S+) dst=(?P<dst>\S+) sport=\d+ dport=(?P<dport>\d+) .*?src=(?P<reply_src>\S+) ")


def live_pods(node: Node, namespace: str, selector: str) -> list[dict]:
    return [p for p in node.pods(namespace, selector) if not p["metadata"].get("deletionTimestamp")]


def connection_holder(node: Node, agent_ip: str, service_ip: str) -> dict | None:
    """The Collector pod the agent's established connection to the Service was translated to, if one is open."""
    out = subprocess.run([node.parts.tools["conntrack"], "-L", "-p", "tcp", "--state", "ESTABLISHED",
                          "--orig-src", agent_ip, "--orig-dst", service_ip], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, check=True).stdout
    targets = {m["reply_src"] for m in FLOW.finditer(out) if int(m["dport"]) == OTLP_HTTP_PORT}
    pods = {p["status"].get("podIP"): p for p in live_pods(node, COLLECTOR_NS, COLLECTOR_SELECTOR)}
    held = [pods[ip] for ip in targets if ip in pods]
    assert len(held) <= 1, f"the agent holds connections to several replicas: {targets}\n{out}"
    return held[0] if held else None


def collector_status(pod: dict) -> dict:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == "collector")


def ready_again(node: Node, name: str, restarts: int) -> dict | None:
    pod = node.cluster.api("GET", f"/api/v1/namespaces/{COLLECTOR_NS}/pods/{name}")
    status = collector_status(pod)
    return pod if status["restartCount"] > restarts and status.get("ready") else None


def success_samples(prometheus, seconds: float, at: float | None = None,
                    series: str = SUCCESSES) -> list[tuple[float, float]]:
    """(time, value) of every sample of ``series`` in the ``seconds`` before ``at`` (default now)."""
    params = {"query": f"{series}[{int(seconds)}s]", **({"time": str(at)} if at else {})}
    rows = prometheus.api("query", params)["result"]
    assert len(rows) <= 1, rows
    return [(float(t), float(v)) for t, v in rows[0]["values"]] if rows else []


def test_killing_the_replica_in_use_loses_no_accepted_point_and_leaves_no_gap(node_cluster: Node, rollout: dict,
                                                                              prometheus) -> None:
    node, interval = node_cluster, shipped_export_interval()
    service_ip = node.service_ip(COLLECTOR_NS, "otel-collector")
    (agent,) = live_pods(node, AGENT_NS, AGENT_SELECTOR)
    agent_ip = agent["status"]["podIP"]
    # Two exports seen, so the connection is established and the schedule is known.
    wait_until(lambda: len(success_samples(prometheus, 3 * interval)) >= 2, timeout=6 * interval, interval=1,
               message="the agent's exports arrive through the Service")
    failures_before = float(prometheus.query(FAILURES)[0]["value"][1])
    started = time.time()
    kills = []
    for _ in range(KILLS):
        victim = wait_until(lambda: connection_holder(node, agent_ip, service_ip), timeout=2 * interval, interval=0.5,
                            message="the agent's connection to a Collector replica in conntrack")
        status = collector_status(victim)
        # Just before the next export (the SDK waits one interval after each export; exports take milliseconds).
        due = success_samples(prometheus, 3 * interval)[-1][0] + interval
        while due - 0.5 < time.time():
            due += interval
        time.sleep(max(0.0, due - 0.5 - time.time()))
        killed_at = time.time()
        node.ctr("tasks", "kill", "-s", "SIGKILL", status["containerID"].removeprefix("containerd://"))
        name = victim["metadata"]["name"]
        wait_until(lambda: ready_again(node, name, status["restartCount"]), timeout=120, interval=0.5,
                   message=f"Collector replica {name} restarted by the kubelet and Ready again")
        back = time.time() - killed_at
        after = wait_until(lambda: connection_holder(node, agent_ip, service_ip), timeout=2 * interval, interval=0.5,
                           message="the agent's connection after the kill")
        kills.append({"killed": name, "at_s": round(killed_at - started, 1), "ready_again_s": round(back, 1),
                      "then_holding": after["metadata"]["name"]})
    # Two more exports after the last kill, and time for them to land.
    time.sleep(2 * interval + 2)
    end = time.time()
    points = success_samples(prometheus, end - started + 2 * interval, at=end)
    times = [t for t, _ in points]
    values = sorted({v for _, v in points})
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # the gap that ends with the first sample after each kill (the export the kill was timed against)
    around_kills = [next((g for t, g in zip(times[1:], gaps) if t > started + k["at_s"]), 0.0) for k in kills]
    failures = float(prometheus.query(FAILURES)[0]["value"][1]) - failures_before
    # Each export carries the duration histogram up to the export before it: the differences are those durations.
    durations = [b - a for (_, a), (_, b) in itertools.pairwise(
        success_samples(prometheus, end - started + 2 * interval, at=end, series=DURATIONS))]
    print(f"\nexport interval {interval:g} s; {len(kills)} kills: {kills}\n"
          f"samples {len(points)}, max gap {max(gaps):.3f} s, gap across each kill "
          f"{[round(g, 3) for g in around_kills]}, values {values[0]:.0f}..{values[-1]:.0f}, "
          f"failed exports meanwhile {failures:.0f}, longest export {max(durations):.3f} s")
    assert values == [values[0] + i for i in range(len(values))], "an accepted export is missing"
    # Every export landed: none failed, none skipped. The export after a kill finds its kept-alive connection dead
    # and is sent again at once on a new one; while kube-proxy still lists the dead replica, a new connection may
    # reach it and be refused, and the agent retries after 0.5 s, 1 s, ... within its export timeout. The SDK
    # waits one interval after each export, so such a retry lengthens that one gap by the export's own duration;
    # an export lost would leave two intervals.
    assert failures == 0
    assert max(gaps) < 1.5 * interval, gaps
    assert len(points) >= (end - started) / interval - 1  # the agent kept exporting throughout
