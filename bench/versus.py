"""Side by side with what a user would otherwise write, the kubernetes client's Watch with a V1Pod cache
(bench/baselines/alternative.py), on one fake API server (``bench/run.py versus``)."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from bench.common import FakeApiServer, agent_command, baseline_command, deployed_env, load, machine, required
from testkit.factory import realistic_pod


def main(pods_counts=(110, 500), events: int = 2000) -> None:
    """Side by side on one fake API server: RSS after sync and CPU for the same watch stream."""
    print(f"\n### Side by side with the kubernetes client's Watch + V1Pod cache ({events:,} MODIFIED events; "
          "production install)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| pods | agent RSS MiB | client Watch RSS MiB | RSS ratio | agent CPU s | client Watch CPU s | CPU ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in pods_counts:
        api = FakeApiServer().start()
        try:
            for i in range(n):
                api.create(realistic_pod(i))
            _compare(api, n, events)
        finally:
            api.stop()


def _compare(api: FakeApiServer, n: int, events: int) -> None:
    """Both synced on ``api``'s ``n`` pods, then ``events`` MODIFIED events: one table row."""
    kubeconfig = api.kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig")
    work = Path(kubeconfig).parent
    agent = subprocess.Popen(agent_command("run"), cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=deployed_env("bench-node", kubeconfig, OTEL_METRICS_EXPORTER="none",
                                              DEBUG_ADDRESS="off", HOST_PROC="off", LOG_LEVEL="ERROR"))
    other = subprocess.Popen(baseline_command("alternative.py", kubeconfig, "bench-node"), cwd=work,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        _wait_synced(api, other)
        procs = [psutil.Process(agent.pid), psutil.Process(other.pid)]
        rss = [p.memory_info().rss / 2**20 for p in procs]
        cpu0 = [sum(p.cpu_times()[:2]) for p in procs]
        _modify(api, n, events)
        cpu = [b - a for a, b in zip(cpu0, _cpu_when_drained(procs), strict=True)]
        print(f"| {n} | {rss[0]:.1f} | {rss[1]:.1f} | {rss[1] / rss[0]:.2f}x | {cpu[0]:.2f} | {cpu[1]:.2f} | "
              f"{cpu[1] / max(cpu[0], 1e-9):.1f}x |")
    finally:
        for p in (agent, other):
            p.terminate()
            p.wait(10)


def _wait_synced(api: FakeApiServer, other: subprocess.Popen) -> None:
    """The alternative said it synced, both watch (at most 60 s), and 3 s more."""
    required(other.stdout, "the alternative's stdout pipe").readline()
    deadline = time.monotonic() + 60
    while api.count(watch=True) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)


def _modify(api: FakeApiServer, n: int, events: int) -> None:
    """``events`` status updates over the ``n`` pods in turn."""
    objects = api.objects()
    for i in range(events):
        obj = objects[i % n]
        obj["status"]["conditions"][0]["lastProbeTime"] = f"2026-11-30T07:{i // 60 % 60:02d}:{i % 60:02d}Z"
        api.update(obj)


def _cpu_when_drained(procs: list[psutil.Process]) -> list[float]:
    """CPU seconds of each once both have drained the stream: their CPU time stops moving."""
    last = None
    while True:
        time.sleep(1.0)
        now = [sum(p.cpu_times()[:2]) for p in procs]
        if last is not None and all(b - a < 0.02 for a, b in zip(last, now, strict=True)):
            return now
        last = now
