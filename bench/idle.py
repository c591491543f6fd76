"""Idle CPU: the agent left alone as deployed (API over HTTPS, bookmarks every minute, the kubelet's probes), and the
floor program exporting the same points (``bench/run.py idle``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.common import FakeApiServer, HttpReceiver, RunningAgent, load, machine
from bench.floor_program import FloorProgram
from bench.measure import last_export_points, wait_exported
from testkit.factory import realistic_pod


@dataclass(frozen=True, kw_only=True)
class IdleWindow:
    """What the agent, the floor program and the API server did over one quiet window."""

    seconds: float
    agent_cpu: float  # CPU seconds
    floor_cpu: float
    api_requests: int


def main(seconds: float = 120.0, pods: int = 110) -> None:
    """The agent left alone as deployed (API over HTTPS, bookmarks every minute, the kubelet's probes), and the
    floor."""
    print(f"\n### Idle CPU with {pods} pods at the default 15 s export interval ({seconds:.0f} s window, production "
          "install, API over HTTPS)\n")
    print(f"machine: {machine()}; {load()}\n")
    api, receiver = FakeApiServer(bookmark_interval=60, tls=True).start(), HttpReceiver().start()
    try:
        for i in range(pods):
            api.create(realistic_pod(i))
        agent = RunningAgent(api, receiver, interval=15.0)
        try:
            wait_exported(receiver, pods, timeout=40)
            points = last_export_points(receiver)
            floor = FloorProgram(api, points, interval=15.0)
            try:
                floor.wait_exports(1, timeout=40)
                window = _quiet_window(agent, floor, api, seconds)
            finally:
                floor.stop()
            _report(window, len(points), agent.rss_mib())
        finally:
            agent.stop()
    finally:
        api.stop()
        receiver.stop()


def _quiet_window(agent: RunningAgent, floor: FloorProgram, api: FakeApiServer, seconds: float) -> IdleWindow:
    """``seconds`` of nothing but the DaemonSet's probes: readiness every 10 s, liveness every 20 s."""
    start_cpu, floor_cpu, start = agent.cpu_seconds(), floor.cpu_seconds(), time.monotonic()
    requests_before = len(api.requests)
    probes = 0
    while time.monotonic() - start < seconds:
        agent.get("/readyz")
        if probes % 2 == 0:
            agent.get("/healthz")
        probes += 1
        time.sleep(max(0.0, start + probes * 10 - time.monotonic()))
    used, floor_used = agent.cpu_seconds() - start_cpu, floor.cpu_seconds() - floor_cpu
    elapsed = time.monotonic() - start
    return IdleWindow(seconds=elapsed, agent_cpu=used, floor_cpu=floor_used,
                      api_requests=len(api.requests) - requests_before)


def _report(window: IdleWindow, points: int, rss_mib: float) -> None:
    per_hour = window.api_requests / window.seconds * 3600
    print("Floor: bench/baselines/floor.py, the same run and window: the mandated packages with one API connection, "
          f"exporting the agent's {points} points every 15 s through the SDK.\n")
    print("| agent CPU % of one core | floor CPU % | API requests per hour (steady) | agent RSS MiB |")
    print("|---:|---:|---:|---:|")
    print(f"| **{window.agent_cpu / window.seconds * 100:.3f}** | {window.floor_cpu / window.seconds * 100:.3f} | "
          f"{per_hour:.0f} | {rss_mib:.1f} |")
