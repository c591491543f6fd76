"""The kubelet's part in starting the agent's container, for nodes without kubelet or container runtime.

The many-node cluster tests run on KWOK's simulated nodes (testkit/kwok.py): KWOK reports the agent's
DaemonSet pod Running, but no container runs on a KWOK node, so this stand-in starts the agent from that pod as
a local process. The real kubelet starting the real image runs in the ``node`` suite (tests/node/), at about
70 s per node: too slow for tests that need several nodes and restart agents.

Nothing is copied from the manifests: the command line is the Dockerfile's ENTRYPOINT/CMD merged with the
container's ``command``/``args`` by the container runtime's rule, ``$(VAR)`` references are expanded as the kubelet
expands them, the environment comes from the pod object the API server stored (downward-API fields resolved from
it), and the service-account volume the ServiceAccount admission plugin added to the pod is projected as the
kubelet projects it: a TokenRequest for the pod's ServiceAccount bound to the pod, ``ca.crt`` from the
``kube-root-ca.crt`` ConfigMap, ``namespace`` from the downward API.

What cannot be reproduced without a container, and is replaced explicitly (see ``TEST_OVERRIDES``): the image's
filesystem (its ``/opt/agent`` virtual environment is this checkout's), the pod's network namespace (the debug
port is a free loopback port, not the default port on a pod IP), cluster DNS (the Collector address is the test's receiver),
and the mount of the token folder (``NRA_SERVICEACCOUNT_DIR`` names where it was written).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import yaml

from agent.config import SETTINGS
from testkit.cluster import Cluster, free_ports
from testkit.kwok import wait_running
from testkit.processes import stop_process
from testkit.waiting import wait_until
from testkit.repo import REPO as ROOT
from testkit.image import container_argv, dockerfile_stages, expand, image_entrypoint_and_cmd, image_env

__all__ = ["AgentContainer", "Deployment", "ImageConfig", "ServiceAccountVolume", "container_env", "daemon_pods",
           "deploy", "deployed", "image_config", "prepare_agent_pod", "start_agent_pod", "wait_for_daemon_pod"]

# Where the kubelet projects the service-account token and CA, and the variable that moves it (the agent's table).
SERVICEACCOUNT_DIR = SETTINGS["serviceaccount_dir"].default
SERVICEACCOUNT_DIR_ENV = SETTINGS["serviceaccount_dir"].env[0]

DOCKERFILE = ROOT / "Dockerfile"
DAEMONSET_DIR = ROOT / "daemonset"
AGENT_CONTAINER = "agent"


# --------------------------------------------------------------------------- the image


@dataclass(frozen=True)
class ImageConfig:
    """What the image itself contributes to a container's process: ENTRYPOINT, CMD and ENV of its last stage."""

    entrypoint: list[str]
    cmd: list[str]
    env: Mapping[str, str] = field(default_factory=dict)


def image_config(dockerfile: Path = DOCKERFILE) -> ImageConfig:
    final = dockerfile_stages(dockerfile.read_text())[-1]
    return ImageConfig(*image_entrypoint_and_cmd(final), image_env(final, {}))


def _field(pod: Mapping, path: str) -> str:
    """A downward-API fieldRef, resolved from the pod object as the kubelet does."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    for prefix, source in (("metadata.labels['", meta.get("labels", {})),
                           ("metadata.annotations['", meta.get("annotations", {}))):
        if path.startswith(prefix) and path.endswith("']"):
            return source.get(path[len(prefix):-2], "")
    simple = {
        "metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""), "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""), "status.podIP": status.get("podIP", ""),
        "status.hostIPs": ",".join(ip["ip"] for ip in status.get("hostIPs", [])),
        "status.podIPs": ",".join(ip["ip"] for ip in status.get("podIPs", [])),
    }
    if path not in simple:
        raise NotImplementedError(f"fieldRef {path!r} is not resolved by the kubelet stand-in")
    return simple[path]


def container_env(container: Mapping, pod: Mapping, service_env: Mapping[str, str]) -> dict[str, str]:
    """The container's ``env`` in order, each value ``$(VAR)``-expanded against the ones before it and the
    service variables (kubelet's makeEnvironmentVariables); sources the stand-in cannot resolve are refused."""
    if container.get("envFrom"):
        raise NotImplementedError("envFrom is not resolved by the kubelet stand-in")
    env: dict[str, str] = {}
    for var in container.get("env", []):
        name = var["name"]
        if "valueFrom" in var:
            source = var["valueFrom"]
            if set(source) != {"fieldRef"}:
                raise NotImplementedError(f"env {name}: valueFrom {sorted(source)} is not resolved by the stand-in")
            env[name] = _field(pod, source["fieldRef"]["fieldPath"])
        else:
            env[name] = expand(var.get("value", ""), {**service_env, **env})
    return env


def service_env(host: str, port: int) -> dict[str, str]:
    """The ``kubernetes`` Service's variables every container gets (the in-cluster configuration reads two)."""
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port), "KUBERNETES_PORT": f"tcp://{host}:{port}",
            "KUBERNETES_PORT_443_TCP": f"tcp://{host}:{port}", "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
            "KUBERNETES_PORT_443_TCP_ADDR": host, "KUBERNETES_PORT_443_TCP_PORT": str(port)}


# --------------------------------------------------------------------------- the service-account volume


class ServiceAccountVolume:
    """The projected volume mounted at the service-account folder, written as the kubelet writes it."""

    def __init__(self, cluster: Cluster, pod: Mapping, container: Mapping, folder: Path,
                 mount_path: str = SERVICEACCOUNT_DIR) -> None:
        """``mount_path``: which projected volume of the container (default: the API credentials the
        ServiceAccount admission plugin added; the DaemonSet's Collector token is another)."""
        mount = next((m for m in container.get("volumeMounts", []) if m["mountPath"] == mount_path), None)
        if mount is None:
            raise AssertionError(f"container {container['name']} mounts nothing at {mount_path}: "
                                 "the agent would have no credentials (automountServiceAccountToken off?)")
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
        self.sources = volume["projected"]["sources"]
        self.cluster, self.pod, self.folder = cluster, pod, folder
        self.token_source = next(s["serviceAccountToken"] for s in self.sources if "serviceAccountToken" in s)

    @property
    def token_path(self) -> Path:
        return self.folder / self.token_source["path"]

    def request_token(self, expiration_seconds: int | None = None) -> str:
        """A TokenRequest as the kubelet makes it: for the pod's ServiceAccount, bound to the pod."""
        meta = self.pod["metadata"]
        spec = {"expirationSeconds": expiration_seconds or self.token_source.get("expirationSeconds", 3607),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}
        if self.token_source.get("audience"):
            spec["audiences"] = [self.token_source["audience"]]
        path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{self.pod['spec']['serviceAccountName']}/token"
        return self.cluster.api("POST", path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                               "spec": spec})["status"]["token"]

    def project(self) -> Path:
        """Write every source of the volume into the folder; returns the folder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        namespace = self.pod["metadata"]["namespace"]
        for source in self.sources:
            if "serviceAccountToken" in source:
                self.write_token(self.request_token())
            elif "configMap" in source:
                name = source["configMap"]["name"]
                data = wait_until(lambda: self.cluster.api("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
                                  .get("data"), 60, interval=0.5, message=f"ConfigMap {name} published")
                for item in source["configMap"].get("items") or [{"key": k, "path": k} for k in data]:
                    self._write(item["path"], data[item["key"]])
            elif "downwardAPI" in source:
                for item in source["downwardAPI"]["items"]:
                    self._write(item["path"], _field(self.pod, item["fieldRef"]["fieldPath"]))
            else:
                raise NotImplementedError(f"projected source {sorted(source)} is not written by the stand-in")
        return self.folder

    def write_token(self, token: str) -> None:
        """Replace the token file atomically (the kubelet's atomic writer swaps it the same way on rotation)."""
        self._write(self.token_source["path"], token)

    def _write(self, relative: str, content: str) -> None:
        target = self.folder / relative
        partial = target.with_name(f".{target.name}.partial")
        partial.write_text(content)
        os.replace(partial, target)


# --------------------------------------------------------------------------- the running container


#: What a test changes in the pod's environment, and why (each names something only a real node provides).
TEST_OVERRIDES = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "cluster DNS for the Collector Service: the test's OTLP receiver instead",
    "OTEL_EXPORTER_OTLP_CERTIFICATE": "the Secret volume with the Collector's CA: the test Collector's CA file "
                                      "(none for a receiver in clear)",
    "DEBUG_ADDRESS": "the pod's own network namespace: a free loopback port instead of the default debug port",
    SERVICEACCOUNT_DIR_ENV: "the volume mount: the folder the stand-in projected the volume into",
}


class AgentContainer:
    """The agent's container process, started from the pod as the kubelet and runtime would start it."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log: Path,
                 serviceaccount: ServiceAccountVolume, pod: Mapping) -> None:
        self.argv, self.env, self.log = list(argv), dict(env), log
        self.serviceaccount, self.pod = serviceaccount, pod
        self.debug_port = 0
        self.proc: subprocess.Popen | None = None

    def start(self, debug_port: int | None = None) -> AgentContainer:
        """Start the process on a debug port chosen now (DEBUG_ADDRESS in TEST_OVERRIDES): a port chosen when the
        container was prepared could be taken by the time it starts, or by the time it starts again. Agents started
        together take ports from one ``free_ports`` call: ports chosen one by one can repeat, since each stays
        free until its agent binds it."""
        (self.debug_port,) = (debug_port,) if debug_port is not None else free_ports(1)
        self.env["DEBUG_ADDRESS"] = f"127.0.0.1:{self.debug_port}"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, env=self.env, cwd="/", stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    @property
    def node(self) -> str:
        return self.pod["spec"]["nodeName"]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """GET on the debug endpoint, as the kubelet's probes and a port-forwarding person do."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.debug_port}{path}", timeout=timeout) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def json(self, path: str) -> dict:
        status, body = self.get(path)
        assert status == 200, f"{path}: HTTP {status}: {body[:500]!r}"
        return json.loads(body)

    def ready(self) -> bool:
        if not self.alive():
            raise AssertionError(f"agent exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            return self.get("/readyz")[0] == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_until(self.ready, timeout, interval=0.2, message=f"agent on {self.node} ready")

    def pods(self) -> dict[str, dict]:
        """``namespace/name`` -> the agent's report (/debug/pods) for every pod it tracks."""
        return {f"{p['namespace']}/{p['name']}": p for p in self.json("/debug/pods")["pods"]}

    def runtime(self) -> dict:
        return self.json("/debug/runtime")

    def rss_bytes(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM as the kubelet sends it, SIGKILL after ``timeout``; returns the exit code."""
        return stop_process(self.proc, timeout)


def start_agent_pod(cluster: Cluster, pod: Mapping, workdir: Path, otlp_endpoint: str,
                    service_address: tuple[str, int] | None = None) -> AgentContainer:
    """Run ``pod``'s agent container as the kubelet would (see ``prepare_agent_pod``)."""
    return prepare_agent_pod(cluster, pod, workdir, otlp_endpoint, service_address).start()


def prepare_agent_pod(cluster: Cluster, pod: Mapping, workdir: Path, otlp_endpoint: str,
                      service_address: tuple[str, int] | None = None, container_name: str = AGENT_CONTAINER,
                      dockerfile: Path = DOCKERFILE, otlp_ca_file: str | None = None) -> AgentContainer:
    """Everything the kubelet does before the container starts, once KWOK reported the pod Running: volume
    projected, command line and environment resolved. ``start()`` on the result starts the process.

    ``service_address`` is what KUBERNETES_SERVICE_HOST/PORT point at (default: the API server itself; a test may
    put a proxy in between). ``otlp_ca_file``: the CA of an https ``otlp_endpoint`` (``Collector.ca_file``).
    """
    meta = pod["metadata"]
    # KWOK reports the pod running with its node's IP; the downward API then reads status.hostIP from it.
    pod = wait_running(cluster, meta["namespace"], meta["name"])
    container = next(c for c in pod["spec"]["containers"] if c["name"] == container_name)
    workdir.mkdir(parents=True, exist_ok=True)
    volume = ServiceAccountVolume(cluster, pod, container, workdir / "serviceaccount")
    volume.project()
    host, port = service_address or ("127.0.0.1", cluster.ports["apiserver"])
    services = service_env(host, port)
    env_from_spec = container_env(container, pod, services)
    missing = {"OTEL_EXPORTER_OTLP_ENDPOINT"} - env_from_spec.keys()
    assert not missing, f"the container spec no longer sets {missing}: revisit TEST_OVERRIDES"
    image = image_config(dockerfile)
    env = {
        # The image's ENV, except PATH: its /opt/agent/bin is the virtual environment the Dockerfile builds,
        # which here is the one running the tests.
        **{k: v for k, v in image.env.items() if k != "PATH"},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOSTNAME": meta["name"],
        **services, **env_from_spec,
    }
    overrides = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint, "OTEL_EXPORTER_OTLP_CERTIFICATE": otlp_ca_file or "",
                 SERVICEACCOUNT_DIR_ENV: str(volume.folder)}
    assert overrides.keys() | {"DEBUG_ADDRESS"} == TEST_OVERRIDES.keys()  # DEBUG_ADDRESS: set by start()
    env.update(overrides)
    argv = container_argv(image.entrypoint, image.cmd, container, {**services, **env_from_spec})
    return AgentContainer(argv, env, workdir / "agent.log", volume, pod)


# --------------------------------------------------------------------------- the shipped deployment


@dataclass(frozen=True)
class Deployment:
    """``kubectl apply -k daemonset/`` as it went: what kubectl printed, and the objects as the server stored them."""

    stdout: str
    stderr: str
    namespace: str
    daemonset: dict
    service_account: str


def deploy(cluster: Cluster) -> Deployment:
    """Apply the shipped kustomization with the real kubectl (its built-in kustomize) into the real API server."""
    result = cluster.kubectl("apply", "-k", str(DAEMONSET_DIR))
    assert result.returncode == 0, f"kubectl apply -k daemonset/ failed:\n{result.stdout}\n{result.stderr}"
    rendered = cluster.kubectl("kustomize", str(DAEMONSET_DIR))
    assert rendered.returncode == 0, rendered.stderr
    daemonset = next(o for o in _yaml_documents(rendered.stdout) if o["kind"] == "DaemonSet")
    namespace, name = daemonset["metadata"]["namespace"], daemonset["metadata"]["name"]
    stored = cluster.api("GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
    return Deployment(result.stdout, result.stderr, namespace, stored,
                      stored["spec"]["template"]["spec"].get("serviceAccountName", "default"))


def _yaml_documents(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def daemon_pods(cluster: Cluster, deployment: Deployment) -> list[dict]:
    selector = ",".join(f"{k}={v}" for k, v in deployment.daemonset["spec"]["selector"]["matchLabels"].items())
    return cluster.api("GET", f"/api/v1/namespaces/{deployment.namespace}/pods?labelSelector={selector}")["items"]


def wait_for_daemon_pod(cluster: Cluster, deployment: Deployment, node: str, timeout: float = 90.0) -> dict:
    """The pod the DaemonSet controller created and bound for ``node``."""
    def found() -> dict | None:
        return next((p for p in daemon_pods(cluster, deployment)
                     if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")), None)
    return wait_until(found, timeout, interval=0.5, message=f"DaemonSet pod on {node}")


@pytest.fixture(scope="module")
def deployed(cluster: Cluster) -> Deployment:
    """The shipped daemonset/ kustomization applied once per module's control plane; tests add their own Nodes."""
    return deploy(cluster)
