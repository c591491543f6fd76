"""A new node's first number, its agent's image pulled from a real registry (``bench/run.py new-node``; issue 30).

The real node of testkit/node_cluster.py (control plane, kubelet, containerd/runc, kube-proxy, CoreDNS, in a
network namespace this process makes: needs root) runs the shipped Collector writing into Prometheus 3, with the
agent's DaemonSet as shipped but for its image, named in ``crane registry serve`` on the node's address (the
agent's and the pause image pushed there from components/image.py's archives). Then, NRA_NEW_NODE_RUNS times (3),
a fresh node joins: a second real kubelet with an empty containerd (testkit/new_node.py), followed every 0.1 s
from its Node turning Ready through its agent pod being scheduled, the image pulled (the kubelet's Pulled event,
with the kubelet's own pull time), the container running, ``/readyz`` answering 200, to the agent's first sample
visible in Prometheus; the first accepted export is the agent's own record of it (the Unix time it exports as
``last_export_success_timestamp_seconds``), and the first sample's own timestamp is when its points were collected.
Each node leaves before the next joins. Target: Node Ready to the first sample in Prometheus ≤ 10 s, pull included.
About 6 minutes here (the control plane, the push and three joins).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import load, machine, required

TARGET_S = 10.0
RUNS = int(os.environ.get("NRA_NEW_NODE_RUNS", "3"))
STEPS = ("node_registered", "node_ready", "pod_scheduled", "image_pulled", "container_started", "agent_readyz",
         "first_accepted_export", "first_sample_in_prometheus")


def main() -> None:
    from components.image import agent_image
    from testkit.new_node import agent_overlay, join_and_follow, node_registry
    from testkit.node_cluster import leave_node, running_node
    from testkit.node_rollout import roll_out
    from testkit.trust import remote_write_prometheus

    print("\n### A new node's first number: Node Ready to the agent's first accepted export and first sample in "
          "Prometheus, its image pulled from a registry on the node's network\n")
    print(f"machine: {machine()}; {load()}; agent image archive {agent_image().size / 2**20:.0f} MiB "
          f"(uncompressed docker-archive)\n")
    runs = []
    with tempfile.TemporaryDirectory(prefix="nra-new-node-") as folder:
        base = Path(folder)
        counter = iter(range(1000))

        def make_dir(name: str) -> Path:
            path = base / f"{name}-{next(counter)}"
            path.mkdir()
            return path

        with running_node(make_dir("node")) as node, \
                remote_write_prometheus(make_dir("prometheus"), host=node.ip) as prometheus, \
                node_registry(node, make_dir("registry")) as registry:
            print(f"registry {registry.address}: pushed {registry.pushed}")
            roll_out(node, prometheus, make_dir, daemonset=agent_overlay(registry, make_dir("agent-overlay")))
            for index in range(2, 2 + RUNS):
                before = load()
                result = join_and_follow(node, registry, prometheus, index, make_dir(f"node-{index}"))
                try:
                    steps = result.since_ready()
                    first_sample = required(result.first_sample_wall, "the node's first sample in Prometheus")
                    steps["first_sample_collected"] = first_sample - result.wall_at_start - result.seen["node_ready"]
                    runs.append(steps)
                    print(f"run {index - 1}: kubelet start to Node Ready {result.seen['node_ready']:.1f} s; the "
                          f"kubelet's pull {result.pulled_in}; {before} at the start")
                    for step, seconds in steps.items():
                        print(f"  {step:28} {seconds:6.1f} s")
                finally:
                    leave_node(result.node)
                time.sleep(5)  # the node's processes and pods gone before the next joins
    print(f"\n| step (seconds after Node Ready) | {' | '.join(f'run {i + 1}' for i in range(len(runs)))} | median |")
    print(f"|---|{'---|' * len(runs)}---|")
    for step in (*STEPS, "first_sample_collected"):
        values = [r.get(step) for r in runs]
        shown = " | ".join("—" if v is None else f"{v:.1f}" for v in values)
        present = [v for v in values if v is not None]
        print(f"| {step} | {shown} | {statistics.median(present):.1f} |" if present else f"| {step} | {shown} | — |")
    totals = [r["first_sample_in_prometheus"] for r in runs]
    print(f"\nNode Ready to the first sample in Prometheus: median {statistics.median(totals):.1f} s "
          f"(range {min(totals):.1f}–{max(totals):.1f}) against the ≤ {TARGET_S:g} s target: "
          f"{statistics.median(totals) / TARGET_S:.2f}x; {load()} at the end")


if __name__ == "__main__":
    main()
