"""The floor program (bench/baselines/floor.py) as a running process: the mandated packages holding the agent's
points and exporting them, the yardstick of the memory and idle benchmarks."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from bench.common import FakeApiServer, HttpReceiver, baseline_command, required
from bench.measure import Point


class FloorProgram:
    """bench/baselines/floor.py from the production venv, exporting ``points`` to its own receiver every
    ``interval`` seconds; with ``connect`` it keeps one TLS connection to ``api``. ``lean``: lean_floor.py instead
    (issue 30's floor: one TLS connection through urllib3, no kubernetes package)."""

    def __init__(self, api: FakeApiServer, points: list[Point], interval: float = 1.0, connect: bool = True,
                 lean: bool = False) -> None:
        work = Path(tempfile.mkdtemp(prefix="bench-floor-"))
        (work / "points.json").write_text(json.dumps(points))
        self.receiver = HttpReceiver().start()
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": self.receiver.endpoint,
               "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": self.receiver.endpoint + "/v1/metrics",
               "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
        if lean:
            command = baseline_command("lean_floor.py", api.url, str(api.ca_file), api.token,
                                       str(work / "points.json"), str(interval))
        else:
            command = baseline_command("floor.py", api.kubeconfig(work / "kubeconfig"), str(work / "points.json"),
                                       str(interval), *(["connect"] if connect else []))
        self.proc = subprocess.Popen(command,
                                     cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if required(self.proc.stdout, "the floor program's stdout pipe").readline().strip() != "ready":
            self.stop()
            raise SystemExit("the floor program did not start")
        self.ps = psutil.Process(self.proc.pid)

    def wait_exports(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.receiver.requests) < count:
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit("the floor program did not export")
            time.sleep(0.2)

    def cpu_seconds(self) -> float:
        return sum(self.ps.cpu_times()[:2])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.receiver.stop()
