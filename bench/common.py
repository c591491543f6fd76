"""Shared pieces of the benchmarks: realistic pods and a running agent to measure."""

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

import psutil

from testkit.factory import container, pod, vm_pod
from testkit.fake_apiserver import FakeApiServer
from testkit.otlp_receiver import HttpReceiver
from testkit.ports import free_ports

ROOT = Path(__file__).resolve().parent.parent


def realistic_pod(i: int, node: str = "bench-node") -> dict:
    """A pod of the size real ones have (~5-10 KB of JSON): env, probes, volumes, status."""
    if i % 5 == 0:
        p = vm_pod(f"compute-{i}", f"vm-{i}", f"{(i % 8 + 1) * 250}m", f"{i % 8 + 1}Gi", node=node)
    else:
        p = pod(f"app-{i}", namespace=f"team-{i % 7}", node=node,
                init_containers=[container("init-config", "100m", "64Mi"),
                                 container("proxy", "100m", "128Mi", restart_policy="Always")],
                containers=[container("app", f"{i % 4 + 1}00m", f"{i % 3 + 1}Gi"), container("metrics", "50m", "32Mi")])
    p["metadata"]["labels"] = dict(p["metadata"].get("labels", {}), **{"app.kubernetes.io/part-of": "bench", "pod-template-hash": "7d4b9c"})
    p["metadata"]["creationTimestamp"] = "2026-11-30T06:00:00Z"
    for c in p["spec"]["containers"]:
        c["env"] = [{"name": f"VAR_{j}", "value": f"value-{j}-" + "x" * 20} for j in range(12)]
        c["ports"] = [{"containerPort": 8080, "protocol": "TCP"}]
        c["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}
        c["volumeMounts"] = [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}]
    p["spec"]["volumes"] = [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
    p["spec"].update({"restartPolicy": "Always", "schedulerName": "default-scheduler", "serviceAccountName": "default",
                      "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}]})
    p["status"].update({"hostIP": "10.0.0.1", "podIP": f"10.1.{i // 250}.{i % 250}", "qosClass": "Burstable",
                        "conditions": [{"type": t, "status": "True"} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                        "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"],
                                               "imageID": "sha256:" + "0" * 64, "containerID": "containerd://" + "1" * 64,
                                               "started": True, "state": {"running": {"startedAt": "2026-11-30T06:00:05Z"}},
                                               "allocatedResources": c["resources"].get("requests", {}),
                                               "resources": {"requests": c["resources"].get("requests", {})}}
                                              for c in p["spec"]["containers"]]})
    p["metadata"]["managedFields"] = _managed_fields(p)
    return p


def _managed_fields(p: dict) -> list[dict]:
    """managedFields as the API server records them: every field path each manager set."""
    def containers(items):
        return {f'k:{{"name":"{c["name"]}"}}': {
            ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:resources": {"f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
            "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
            "f:env": {f'k:{{"name":"{e["name"]}"}}': {".": {}, "f:name": {}, "f:value": {}} for e in c.get("env", [])},
            "f:ports": {'k:{"containerPort":8080,"protocol":"TCP"}': {".": {}, "f:containerPort": {}, "f:protocol": {}}},
            "f:livenessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}}, "f:periodSeconds": {}},
            "f:volumeMounts": {'k:{"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}': {".": {}, "f:mountPath": {}, "f:name": {}, "f:readOnly": {}}},
        } for c in items}
    spec = {"f:containers": containers(p["spec"]["containers"]), "f:initContainers": containers(p["spec"].get("initContainers", [])),
            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
            "f:serviceAccount": {}, "f:serviceAccountName": {}, "f:terminationGracePeriodSeconds": {}, "f:tolerations": {}, "f:volumes": {}}
    status = {"f:conditions": {f'k:{{"type":"{t}"}}': {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
                               for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")},
              "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}
    return [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T06:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {}, "f:ownerReferences": {}}, "f:spec": spec}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T06:00:05Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": status}, "subresource": "status"},
    ]


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
    shutil.copy(api.ca_file, folder / "ca.crt")
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


class RunningAgent:
    """The installed agent (production venv) as a subprocess, against the fake API server, exporting OTLP/HTTP."""

    def __init__(self, api: FakeApiServer, receiver: HttpReceiver, node: str = "bench-node",
                 interval: float = 15.0, extra_env: dict[str, str] | None = None, in_cluster: bool = False) -> None:
        """``in_cluster``: as in its pod, the service account folder and the Service's variables (TLS ``api`` only),
        else a kubeconfig."""
        self._dir = tempfile.mkdtemp(prefix="bench-agent-")
        if in_cluster:
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

