"""Churn: many pods created and deleted with few live at once; the agent's RSS must stay flat
(``bench/run.py churn``)."""

from __future__ import annotations

import statistics
import time

from bench.common import FakeApiServer, HttpReceiver, RunningAgent, load, machine
from bench.measure import pods_exported, wait_exported
from testkit.factory import realistic_pod


def main(total: int = 20000, live: int = 110) -> None:
    print(f"\n### Churn: {total:,} pods created and deleted, at most {live} live "
          "(production install, export every 1 s)\n")
    print(f"machine: {machine()}; {load()}\n")
    api, receiver = FakeApiServer().start(), HttpReceiver().start()
    agent = RunningAgent(api, receiver, interval=1.0)
    try:
        rss = _churn(api, agent, total, live)
        wait_exported(receiver, live)
        rss.append((total, agent.rss_mib()))
        _report(rss, pods_exported(receiver))
    finally:
        agent.stop()
        api.stop()
        receiver.stop()


def _churn(api: FakeApiServer, agent: RunningAgent, total: int, live: int) -> list[tuple[int, float]]:
    """Create ``total`` pods, deleting the oldest beyond ``live``; the agent's RSS after every 2,000."""
    names: list[tuple[str, str]] = []
    rss: list[tuple[int, float]] = []
    for i in range(total):
        p = realistic_pod(i % 1000)
        p["metadata"]["name"] = f"churn-{i}"
        p["metadata"]["uid"] = f"uid-{i}"
        api.create(p)
        names.append((p["metadata"]["namespace"], p["metadata"]["name"]))
        if len(names) > live:
            api.delete(*names.pop(0))
        if i % 2000 == 1999:
            time.sleep(1.5)
            rss.append((i + 1, agent.rss_mib()))
            api.compact(keep_last=2000)  # as etcd compaction does; keeps the bench's own memory flat
    return rss


def _report(rss: list[tuple[int, float]], exported: int) -> None:
    xs, ys = [x for x, _ in rss[1:]], [y for _, y in rss[1:]]
    slope = statistics.linear_regression(xs, ys).slope * 1000 if len(xs) > 1 else 0.0
    print("| pods so far | RSS MiB |")
    print("|---:|---:|")
    for x, y in rss:
        print(f"| {x:,} | {y:.1f} |")
    print(f"\nslope after warm-up: {slope:+.3f} MiB per 1,000 pods; last export carried exactly {exported} pods")
