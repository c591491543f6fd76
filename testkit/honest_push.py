"""The agent's own push for an honest node: its OTLP request as its exporter sends it.

The Collector's bounds are set from the largest one (tests/collector/test_collector_write_path.py pushes it through
the shipped Collector whole) and the push benchmark times both through the Collector before and after issue 38
(bench/collector_push.py). The agent runs in-process and exports once to an OTLP receiver; the request it sent is
the push.
"""

from __future__ import annotations

from collections.abc import Sequence

from testkit.factory import vm_pod
from testkit.otlp_receiver import HttpReceiver

__all__ = ["LONGEST_NODE", "agents_push", "largest_honest_pods", "ordinary_vm_pods"]

#: The longest node name Kubernetes allows (a DNS label).
LONGEST_NODE = "n" * 63


def ordinary_vm_pods(n: int, node: str) -> list[dict]:
    """``n`` NeonVM runner pods with short names, none in a migration: a full ordinary node at 110."""
    return [vm_pod(f"compute-{i}", f"vm-{i}", "4", "16Gi", node=node) for i in range(n)]


def largest_honest_pods(n: int, node: str = LONGEST_NODE) -> list[dict]:
    """``n`` pods of the largest honest node: every pod a NeonVM runner in a migration (source or target) with local
    storage (blocking its node's removal), with the longest names Kubernetes allows (a 253-character pod name,
    63-character namespace and VM name)."""
    pods = []
    for i in range(n):
        p = vm_pod(f"p{i}-".ljust(253, "x"), f"vm{i}-".ljust(63, "v"), "4", "16Gi",
                   role="source" if i % 2 else "target", namespace="ns-".ljust(63, "n"), node=node)
        p["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        p["metadata"]["uid"] = f"{i:08d}-0000-4000-8000-000000000000"
        pods.append(p)
    return pods


def agents_push(receiver: HttpReceiver, node: str, pods: Sequence[dict]) -> bytes:
    """The agent's own export for ``node`` holding ``pods`` (in-process, one export to ``receiver``): the OTLP
    request it sent, serialised."""
    from agent.config import from_sources
    from agent.decode.reader import POD
    from agent.pipeline.events import PodsListed
    from agent.run.agent import Agent

    agent = Agent(from_sources({"node_name": node, "replay": "sample", "exporter": "otlp", "export_interval": 3600,
                                "debug_address": "off", "procfs": "off"},
                               {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}))
    agent.handler.handle(PodsListed(pods=tuple(POD.record(p) for p in pods)))
    agent.telemetry.flush()
    agent.telemetry.shutdown(final_export=False)
    with receiver.cond:
        return receiver.requests[-1][1].SerializeToString()
