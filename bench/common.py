"""Shared pieces of the benchmarks: a running agent to measure, and the machine it runs on."""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol, TypeVar

import psutil

from testkit.fake_apiserver import FakeApiServer
from testkit.otlp_receiver import HttpReceiver
from testkit.ports import free_ports

ROOT = Path(__file__).resolve().parent.parent

T = TypeVar("T")


def required(value: T | None, what: str) -> T:
    """``value``, which an earlier step made (a started process's pipe or PKI, a run's service); a step that runs
    without it fails in one line naming ``what``, not with an AttributeError on None."""
    if value is None:
        raise RuntimeError(f"{what} is missing: the step that makes it has not run")
    return value


@functools.cache
def production_venv() -> Path:
    """A fresh venv with the agent installed as a user would (``pip install .``, no test extras), once per run.

    The memory, idle, churn and versus figures come from it: the editable test
    venv carries pytest, hypothesis and the rest, and the source tree on the path.
    """
    # NRA_BENCH_TREE: install another checkout's agent (main's, for a before/after in the same session).
    tree = os.environ.get("NRA_BENCH_TREE") or str(ROOT)
    kept = os.environ.get("NRA_BENCH_VENV")  # a venv kept between runs (profiling): the agent is reinstalled into it
    venv = Path(kept) if kept else Path(tempfile.mkdtemp(prefix="nra-production-"))
    pip = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    if kept and (venv / "bin" / "node-requests-agent").exists():
        subprocess.run([*pip, "--no-deps", "--force-reinstall", tree], check=True, stdout=subprocess.DEVNULL)
        return venv
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([*pip, tree], check=True, stdout=subprocess.DEVNULL)
    return venv


def baseline_command(program: str, *args: str) -> list[str]:
    """One of bench/baselines/ (``floor.py``...) run by the production venv's interpreter, as the agent runs."""
    return [str(production_venv() / "bin" / "python"), str(ROOT / "bench" / "baselines" / program), *args]


def agent_command(*args: str) -> list[str]:
    """The installed agent's console script in the production venv."""
    return [str(production_venv() / "bin" / "node-requests-agent"), *args]


def deployed_env(node: str, kubeconfig: str | Path, **settings: str) -> dict[str, str]:
    """The environment of ``agent_command("run")`` run as the DaemonSet runs it: no flags, every setting from the
    environment (NODE_NAME, KUBECONFIG and ``settings`` such as LOG_LEVEL). The in-cluster variables are dropped, so
    a bench run inside a pod still talks to its own fake API server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE_")}
    return {**env, "NODE_NAME": node, "KUBECONFIG": str(kubeconfig), **settings}


def in_cluster_env(api: FakeApiServer, folder: str | Path) -> dict[str, str]:
    """The variables a pod's agent finds (the kubernetes Service's host and port, and the service account folder,
    written here with ``api``'s token and CA): with them the agent ignores KUBECONFIG, as in its DaemonSet."""
    import shutil

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(api.token)
    shutil.copy(required(api.ca_file, "the CA of a TLS fake API server (tls=True)"), folder / "ca.crt")
    return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port),
            "NRA_SERVICEACCOUNT_DIR": str(folder)}


def vm_hwm_mib(pid: int) -> float:
    """The process's peak RSS so far (the kernel's high-water mark), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min)"


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"Python {platform.python_version()}, {platform.system()} {platform.release()}")


class ApiServer(Protocol):
    """What RunningAgent asks of its API server: a kubeconfig for it, written under ``path`` or its own."""

    def kubeconfig(self, path: Path, /) -> str | Path: ...


class RunningAgent:
    """The installed agent (production venv) as a subprocess, against the fake API server, exporting OTLP/HTTP."""

    def __init__(self, api: ApiServer, receiver: HttpReceiver, node: str = "bench-node",
                 interval: float = 15.0, extra_env: dict[str, str] | None = None, in_cluster: bool = False) -> None:
        """``in_cluster``: as in its pod, the service account folder and the Service's variables (TLS ``api`` only),
        else a kubeconfig."""
        self._dir = tempfile.mkdtemp(prefix="bench-agent-")
        if in_cluster:
            if not isinstance(api, FakeApiServer):
                raise ValueError("in_cluster needs the fake API server: its service account token and CA")
            extra_env = {**in_cluster_env(api, Path(self._dir) / "serviceaccount"), **(extra_env or {})}
        kubeconfig = api.kubeconfig(Path(self._dir) / "kubeconfig")
        self.debug_url = f"http://127.0.0.1:{free_ports(1)[0]}"  # the default port may be held by another agent
        env = deployed_env(node, kubeconfig, OTEL_METRIC_EXPORT_INTERVAL=f"{interval * 1000:g}",
                           DEBUG_ADDRESS=self.debug_url.removeprefix("http://"), LOG_LEVEL="WARNING",
                           OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, **(extra_env or {}))
        self.started = time.monotonic()
        self.proc = subprocess.Popen(agent_command("run"), cwd=self._dir, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.ps = psutil.Process(self.proc.pid)

    def get(self, path: str) -> tuple[int, bytes]:
        """One request to the agent's debug endpoint (a probe as the kubelet sends it, or a view)."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(self.debug_url + path, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until /readyz answers 200 (initial LISTs handled, Node read)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.get("/readyz")[0] == 200:
                    return
            except OSError:  # not listening yet
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("the agent did not become ready")
            time.sleep(0.2)

    def runtime(self) -> dict:
        """The agent's own counters (/debug/runtime)."""
        return json.loads(self.get("/debug/runtime")[1])

    def rss_mib(self) -> float:
        return self.ps.memory_info().rss / 2**20

    def peak_mib(self) -> float:
        return vm_hwm_mib(self.proc.pid)

    def cpu_seconds(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()

