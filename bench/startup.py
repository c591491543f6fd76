"""Start-up: from process start to /readyz answering 200, initial LIST handled and Node read, in-cluster as in its
pod (``bench/run.py startup``); and what the start imports (``python -X importtime``), total and heaviest packages.

``NRA_BENCH_TREE=/path/to/other/checkout`` measures another tree's agent the same way (a before/after).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from bench.common import FakeApiServer, agent_command, deployed_env, in_cluster_env, load, machine, production_venv
from testkit.factory import realistic_pod
from testkit.ports import free_ports

_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def main(pods: int = 110, runs: int = 3) -> None:
    """From process start to /readyz answering 200 (initial LIST handled, Node read), then one start under
    ``-X importtime``."""
    api = FakeApiServer(tls=True).start()
    try:
        for i in range(pods):
            api.create(realistic_pod(i))
        work = Path(tempfile.mkdtemp())
        env = in_cluster_env(api, work / "serviceaccount")
        results = [_time_to_ready(work, env)[0] for _ in range(runs)]
        print(f"\n### Start-up to ready ({pods} pods, production install, in-cluster over HTTPS): "
              f"{min(results):.2f} s best, {max(results):.2f} s worst of {runs}\n\nmachine: {machine()}; {load()}\n")
        _, log = _time_to_ready(work, env, importtime=True)
        _report_imports(log)
    finally:
        api.stop()


def _time_to_ready(work: Path, in_cluster: dict[str, str], importtime: bool = False) -> tuple[float, str]:
    """Seconds from starting the installed agent to its /readyz answering 200, and its stderr."""
    (port,) = free_ports(1)  # a fixed one may be held by anything
    command = agent_command("run")
    if importtime:  # the console script's interpreter, told to list its imports
        command = [str(production_venv() / "bin" / "python"), "-X", "importtime", "-m", "agent", "run"]
    elapsed = None
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: the import listing must never block the start
        start = time.monotonic()
        proc = subprocess.Popen(command, cwd=work, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                env=deployed_env("bench-node", work / "no-kubeconfig", OTEL_METRICS_EXPORTER="none",
                                                 DEBUG_ADDRESS=f"127.0.0.1:{port}", LOG_LEVEL="ERROR", **in_cluster))
        try:
            while elapsed is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                        if r.status == 200:
                            elapsed = time.monotonic() - start
                except OSError:
                    time.sleep(0.02)
        finally:
            proc.terminate()
            proc.wait(10)
        err.seek(0)
        return elapsed, err.read()


def _report_imports(log: str, top: int = 8) -> None:
    """The total of every module's own import time, and the packages (first dotted name) that took the most."""
    by_package: dict[str, int] = defaultdict(int)
    modules = 0
    for line in log.splitlines():
        if m := _IMPORT_LINE.match(line):
            modules += 1
            by_package[m.group(4).split(".")[0]] += int(m.group(1))
    total = sum(by_package.values())
    heaviest = sorted(by_package.items(), key=lambda kv: -kv[1])[:top]
    print(f"Import time of one start to ready (`python -X importtime`, sum of each module's own time): "
          f"**{total / 1e6:.2f} s**, {modules} modules; kubernetes package: "
          f"{'imported' if 'kubernetes' in by_package else 'not imported'}\n")
    print("| package | own import time ms |\n|---|---:|")
    for name, us in heaviest:
        print(f"| {name} | {us / 1000:.0f} |")
