"""A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver, kube-scheduler, kube-controller-manager.

There is no kubelet or container runtime here. Nodes are KWOK's (testkit/kwok.py): a test creates them,
KWOK keeps them Ready with renewed Leases, moves their pods to Running and finishes their deletions. What KWOK
does not write (in-place resize status, crash loops, terminal phases at a chosen moment) a test writes with
``set_custom_status`` on pods KWOK was told to leave alone. Everything else (binding, DaemonSet pods,
service-account tokens, admission, RBAC, the node lifecycle controller) is the real code from the binaries
built by ``components.kubernetes``.

Every port is picked free at start, certificates are generated per cluster
and all state lives under ``workdir`` so parallel sessions do not collide.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from components.kubernetes import KUBERNETES, etcd_bin, kubernetes_bin
from testkit.cluster_client import ApiError, ClusterClient, parse_prometheus_text, rfc3339
from testkit.component import Component, served
from testkit.pki import make_pki, openssl, write_kubeconfig
from testkit.ports import free_ports
from testkit.waiting import wait_until

#: The fixture and what modules of the suite import from here. The helpers among them live in the modules named
#: above (certificates in pki, ports, the client side in cluster_client); importing them from here is kept so a
#: test needs one import for a cluster and what it hands to one.
__all__ = ["NEWEST", "NODE_MONITOR_GRACE_SECONDS", "SERVICE_ACCOUNT_ISSUER", "ApiError", "Cluster", "Component",
           "cluster", "free_ports", "make_pki", "openssl", "parse_prometheus_text", "rfc3339", "write_kubeconfig"]

#: kubectl, and the controller-manager when the tested version has none, come from here.
NEWEST = "1.37.2"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: The node lifecycle controller marks a node Unknown after --node-monitor-grace-period without a renewed Lease.
#: Shortened from the default 50 s so a test can watch a dead node go Unknown (and a live one stay Ready) in half
#: a minute; KWOK renews every 5 s (testkit/kwok.py), six renewals per grace period.
NODE_MONITOR_GRACE_SECONDS = 30
START_TIMEOUT = 180.0


class Cluster(ClusterClient):
    """etcd + kube-apiserver + kube-scheduler (+ kube-controller-manager) of one Kubernetes version, on loopback.

    A version built without a controller-manager (see components.kubernetes.KUBERNETES) runs without one, since a
    newer controller-manager than apiserver is outside the skew policy; such a cluster has no ServiceAccounts, so
    it admits no pods and serves /version and scheduler checks only. What tests ask of it once it serves is
    ClusterClient's (testkit/cluster_client.py).
    """

    def __init__(self, workdir: Path, version: str = NEWEST, apiserver_flags: Sequence[str] = (), *,
                 scheduler_flags: Sequence[str] = (), controller_manager_flags: Sequence[str] = ()) -> None:
        """Each ``*_flags`` is appended to that component's own command line (for a flag that takes one value, the
        later one wins): how a benchmark or a test runs the control plane differently without subclassing it."""
        super().__init__(workdir)
        self.release = version  # "version" is the /version call
        self.apiserver_flags = tuple(apiserver_flags)
        self.scheduler_flags = tuple(scheduler_flags)
        self.controller_manager_flags = tuple(controller_manager_flags)
        self.logs_dir = self.workdir / "logs"
        self.components: list[Component] = []
        self._bins: dict[str, Path] = {}

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Cluster:
        """Bring everything up and wait until it serves; on any failure tear down and raise with the logs."""
        try:
            self._prepare()
            for component in self.components:
                component.start()
                self._wait_healthy(component)
            if self.has_controller_manager:
                # Pods cannot be admitted until the service-account controller made the namespace's default SA.
                self._wait(lambda: self.exists("/api/v1/namespaces/default/serviceaccounts/default"),
                           "default ServiceAccount created by kube-controller-manager")
        except Exception as error:
            tail = self.logs_tail()
            self.stop()
            raise RuntimeError(f"cluster {self.release} did not start: {error}\n{tail}") from error
        except BaseException:  # Ctrl-C while waiting: still leave no processes behind
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Clients before the servers they talk to (reverse start order); one stubborn process never spares the rest."""
        for component in reversed(self.components):
            try:
                component.stop()
            except (OSError, subprocess.SubprocessError) as error:
                print(f"cluster: could not stop {component.name} (pid {component.proc.pid}): {error}")

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def restart_apiserver(self, down_seconds: float = 0.0) -> float:
        """Stop kube-apiserver (SIGTERM, as a rolling control-plane upgrade does), keep it down ``down_seconds``,
        start it on the same port, and return the monotonic time at which it answered /readyz again."""
        apiserver = self.component("kube-apiserver")
        apiserver.stop()
        if down_seconds:
            time.sleep(down_seconds)
        apiserver.start()
        self._wait_healthy(apiserver)
        return time.monotonic()

    def etcd_revision(self) -> int:
        """etcd's current revision: the resourceVersion of the newest write to any object."""
        return int(self._etcd_post("/v3/maintenance/status", {})["header"]["revision"])

    def etcd_compact(self, revision: int) -> None:
        """Compact etcd's history up to ``revision`` through its gRPC gateway, as the API server does every 5 min."""
        self._etcd_post("/v3/kv/compaction", {"revision": str(revision), "physical": True})

    def _etcd_post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.ports['etcd']}{path}", data=json.dumps(body).encode(),
                                         method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def _prepare(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._bins = self._binaries()
        names = ("etcd", "etcd-peer", "apiserver", "scheduler", "controller-manager")
        self.ports = dict(zip(names, free_ports(len(names))))
        self.pki = make_pki(self.workdir / "pki")
        for user in ("admin", "scheduler", "controller-manager"):
            write_kubeconfig(self.kubeconfig_path(user), self.server, self.pki, user)
        self.components = [self._etcd(), self._apiserver(), self._scheduler()]
        if self.has_controller_manager:
            self.components.append(self._controller_manager())

    def _binaries(self) -> dict[str, Path]:
        """Paths per binary name; the controller-manager only when this version has one (it must not be newer than the apiserver)."""
        own = kubernetes_bin(self.release)
        bins = {name: own / name for name in KUBERNETES[self.release]}
        bins["kubectl"] = (own if "kubectl" in KUBERNETES[self.release] else kubernetes_bin(NEWEST)) / "kubectl"
        bins["etcd"] = etcd_bin() / "etcd"
        return bins

    @property
    def has_controller_manager(self) -> bool:
        return "kube-controller-manager" in self._bins

    @property
    def kubectl_binary(self) -> Path:
        return self._bins["kubectl"]

    # ----------------------------------------------------------------- component command lines

    def _component(self, name: str, binary: str, *flags: str) -> Component:
        return Component(name, [str(self._bins[binary]), *flags], self.logs_dir / f"{name}.log")

    def _etcd(self) -> Component:
        client, peer = f"http://127.0.0.1:{self.ports['etcd']}", f"http://127.0.0.1:{self.ports['etcd-peer']}"
        return self._component(
            "etcd", "etcd", "--name=nra", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}", f"--initial-cluster=nra={peer}",
            "--unsafe-no-fsync=true",  # throwaway data: fsync only slows tests down
            "--log-level=warn")

    def _apiserver(self) -> Component:
        pki = self.pki
        return self._component(
            "kube-apiserver", "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.ports['apiserver']}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.crt('apiserver')}", f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.crt('ca')}",
            # Published in extension-apiserver-authentication so delegating components stop logging a missing
            # bundle; the allowed name is one no certificate here carries, so nobody can use the headers.
            f"--requestheader-client-ca-file={pki.crt('ca')}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--authorization-mode=Node,RBAC",
            # added to the default set, which already has ServiceAccount and PodSecurity; listed to state the dependency
            "--enable-admission-plugins=NodeRestriction,PodSecurity,ServiceAccount",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}", f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.sa_public}", f"--service-account-signing-key-file={pki.key('sa')}",
            "--service-cluster-ip-range=10.96.0.0/16",
            # the kubernetes Service would point at 127.0.0.1, which Endpoints validation rejects: keep the log clean
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true", "--profiling=false", "--v=1", *self.apiserver_flags)

    def _delegated_flags(self, user: str, port_name: str) -> list[str]:
        """Secure-port flags for scheduler/controller-manager: CA-signed serving cert, authn/z delegated to the apiserver."""
        pki, kubeconfig = self.pki, str(self.kubeconfig_path(user))
        return [f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", f"--client-ca-file={pki.crt('ca')}",
                "--bind-address=127.0.0.1", f"--secure-port={self.ports[port_name]}",
                f"--tls-cert-file={pki.crt('loopback-serving')}", f"--tls-private-key-file={pki.key('loopback-serving')}",
                "--leader-elect=false", "--profiling=false", "--v=1"]

    def _scheduler(self) -> Component:
        return self._component(
            "kube-scheduler", "kube-scheduler", *self._delegated_flags("scheduler", "scheduler"),
            # metrics readable without a SubjectAccessReview round trip; the admin cert works as well
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/metrics/resources",
            *self.scheduler_flags)

    def _controller_manager(self) -> Component:
        pki = self.pki
        return self._component(
            "kube-controller-manager", "kube-controller-manager",
            *self._delegated_flags("controller-manager", "controller-manager"),
            "--controllers=*", "--use-service-account-credentials=true",
            f"--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s",
            f"--root-ca-file={pki.crt('ca')}", f"--service-account-private-key-file={pki.key('sa')}",
            f"--cluster-signing-cert-file={pki.crt('ca')}", f"--cluster-signing-key-file={pki.key('ca')}",
            "--cluster-name=nra", *self.controller_manager_flags)

    # ----------------------------------------------------------------- readiness

    def _wait(self, probe: Callable[[], object], what: str, timeout: float = START_TIMEOUT) -> None:
        """Poll ``probe`` but give up at once when a component died: its log says why, waiting would not."""
        def ready() -> object:
            dead = [c.name for c in self.components if c.proc is not None and not c.alive()]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while waiting for {what}")
            try:
                return probe()
            except (OSError, ApiError, ssl.SSLError):
                return False
        wait_until(ready, timeout=timeout, interval=0.5, message=what)

    def _wait_healthy(self, component: Component) -> None:
        probes = {
            "etcd": lambda: self._get_text(f"http://127.0.0.1:{self.ports['etcd']}/health").find('"true"') >= 0,
            "kube-apiserver": lambda: self._get_text(f"{self.server}/readyz") == "ok",
            "kube-scheduler": lambda: self._get_text(self.scheduler_url + "/healthz") == "ok",
            "kube-controller-manager": lambda: self._get_text(self.controller_manager_url + "/healthz") == "ok",
        }
        self._wait(probes[component.name], f"{component.name} healthy")

    # ----------------------------------------------------------------- diagnostics

    def logs_tail(self, lines: int = 30) -> str:
        """The last lines of every component's log, for failure messages."""
        return "\n".join(f"----- {c.name} ({c.log}) -----\n{c.tail(lines)}" for c in self.components)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One control plane per test module; the tests of a module share it and use their own namespaces.

    Per module, not per session: Nodes, DaemonSets and pods one module leaves behind would be scheduled onto (and
    counted) by the next module's tests. (When each module imported this fixture, pytest already made one per
    module; registered once, the scope says so.)"""
    kubernetes_bin(NEWEST)  # first run builds; later runs find the cache at once
    etcd_bin()
    with served(request, Cluster(tmp_path_factory.mktemp("cluster")).start, what="control-plane logs",
                logs=Cluster.logs_tail, stop=Cluster.stop) as control_plane:
        yield control_plane
