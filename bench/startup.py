"""Start-up: from process start to /readyz answering 200, initial LIST handled and Node read
(``bench/run.py startup``)."""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import FakeApiServer, agent_command, deployed_env, load, machine, realistic_pod
from tests.support.ports import free_ports


def main(pods: int = 110, runs: int = 3) -> None:
    """From process start to /readyz answering 200 (initial LIST handled, Node read)."""
    api = FakeApiServer().start()
    try:
        for i in range(pods):
            api.create(realistic_pod(i))
        kubeconfig = api.kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig")
        results = [_time_to_ready(kubeconfig) for _ in range(runs)]
        print(f"\n### Start-up to ready ({pods} pods, production install): {min(results):.2f} s best, "
              f"{max(results):.2f} s worst of {runs}\n\nmachine: {machine()}; {load()}\n")
    finally:
        api.stop()


def _time_to_ready(kubeconfig: str) -> float:
    """Seconds from starting the installed agent to its /readyz answering 200."""
    (port,) = free_ports(1)  # a fixed one may be held by anything
    start = time.monotonic()
    proc = subprocess.Popen(agent_command("run"), cwd=Path(kubeconfig).parent, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            env=deployed_env("bench-node", kubeconfig, OTEL_METRICS_EXPORTER="none",
                                             DEBUG_ADDRESS=f"127.0.0.1:{port}", LOG_LEVEL="ERROR"))
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - start
            except OSError:
                time.sleep(0.02)
    finally:
        proc.terminate()
        proc.wait(10)
