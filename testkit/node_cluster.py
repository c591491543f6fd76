"""A real node for tests: kubelet + containerd + runc + CNI bridge + kube-proxy + CoreDNS, inside a network namespace.

Everything with an address lives in one network namespace the fixture creates (``ip netns add``) and enters
(``setns`` on the test's main thread, so every process and thread it starts afterwards is inside too):
etcd, the API server, the kubelet, containerd (whose CNI bridge and pod namespaces hang off it), kube-proxy,
Prometheus. The namespace has loopback, a veth pair (both ends inside) carrying the node's address and the bridge; it has no
default route and no link to anything outside, so no packet for a pod (or any other) address can leave it.

What each part is:
* control plane: tests.cluster.Cluster, with the API server listening on the node address too, so the
  ``kubernetes`` Service (kube-proxy, ClusterIP 10.96.0.1) reaches it from pods;
* kubelet and kube-proxy 1.37.2 from components.node, a client certificate each (system:node:NAME,
  system:kube-proxy) signed by the cluster CA;
* containerd, runc and the CNI plugins from Debian, with a private root, state and socket under the workdir;
  the images from components.image imported under the names the manifests use (a node that joins later,
  ``join_node``, imports nothing: it pulls from a registry, testkit/new_node.py);
* CoreDNS as a Deployment (testkit/node_manifests/coredns.yaml) behind the kube-dns Service 10.96.0.10.

Everything this machine needed (shared/KNOWLEDGE.md §5) is set here: ``failCgroupV1: false`` and the cgroupfs
driver, ``restrict_oom_score_adj``, runc, a preloaded sandbox image, a non-loopback node address, CNI.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from testkit.cluster import SERVICE_ACCOUNT_ISSUER, Cluster, Component, openssl, free_ports, write_kubeconfig
from testkit.repo import REPO as ROOT
from testkit.waiting import wait_until

__all__ = ["NODE_IP", "NODE_NAME", "NODE_SESSION_LOCK", "UNQUALIFIED_REGISTRY", "Node", "NodeParts", "build_node_parts",
           "exclusive_node_session", "join_node", "leave_node", "node_cluster", "running_node"]

MANIFESTS = Path(__file__).resolve().parent / "node_manifests"
NODE_NAME = "nra-node"
#: The node's address, on a dummy interface inside the test's namespace.
NODE_IP = "10.201.0.1"
POD_SUBNET = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
CLUSTER_DNS = "10.96.0.10"
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
#: One node session per machine at a time: /run/netns, the pod sandboxes' namespaces and the cgroup roots are the
#: machine's, and a session's clean-up removes the sandboxes pinned since it started, another run's included.
NODE_SESSION_LOCK = Path("/run/lock/nra-node-session.lock")


# --------------------------------------------------------------------------- parts


@dataclass(frozen=True)
class NodeParts:
    """Every binary and image the node needs, built or installed before anything starts."""

    tools: dict[str, str]
    node_bin: Path
    images: list
    prometheus: Path
    build_seconds: float


def build_node_parts() -> NodeParts:
    """Build/install every part; a part that cannot be made fails the test with one line naming it."""
    from components.image import all_images
    from components.kubernetes import etcd_bin, kubernetes_bin
    from components.node import PartMissing, debian_tools, node_bin
    from components.gotools import tool_bin

    started = time.monotonic()
    steps = [("Debian runtime (containerd, runc, CNI plugins, iptables, conntrack, buildah, mmdebstrap)", debian_tools),
             ("control plane (components.kubernetes)", lambda: (kubernetes_bin(), etcd_bin())),
             ("kubelet and kube-proxy (components.node)", node_bin),
             ("images (components.image)", all_images),
             ("Prometheus 3 (components.gotools)", lambda: tool_bin("prometheus"))]
    results = []
    for part, step in steps:
        try:
            results.append(step())
        except (PartMissing, RuntimeError, OSError, subprocess.SubprocessError) as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [repr(error)]
            # the command (first line of a build step's error) and what it said last
            said = f"{lines[0]}: {lines[-1]}" if len(lines) > 1 else lines[0]
            pytest.fail(f"node part {part} could not be built or installed: {said}", pytrace=False)
    tools, _, kubelet_dir, images, prometheus = results
    return NodeParts(tools, kubelet_dir, images, prometheus, time.monotonic() - started)


# --------------------------------------------------------------------------- the network namespace


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {proc.stdout.strip()}")
    return proc


class NetNamespace:
    """A named network namespace the test creates and enters on its main thread; left and deleted at the end."""

    def __init__(self) -> None:
        self.name = f"nra-{uuid.uuid4().hex[:8]}"
        self._original: int | None = None

    def enter(self) -> None:
        _sh("ip", "netns", "add", self.name)
        self._original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        _setns(f"/run/netns/{self.name}")
        for argv in (["ip", "link", "set", "lo", "up"],
                     # A veth pair with both ends inside (this kernel has no dummy links): the node's address.
                     ["ip", "link", "add", "nra0", "type", "veth", "peer", "name", "nra1"],
                     ["ip", "addr", "add", f"{NODE_IP}/32", "dev", "nra0"],
                     ["ip", "link", "set", "nra1", "up"],
                     ["ip", "link", "set", "nra0", "up"],
                     # Locally sent packets to a ClusterIP need a route before kube-proxy's DNAT; it stays inside.
                     ["ip", "route", "add", SERVICE_CIDR, "dev", "nra0"],
                     ["sysctl", "-qw", "net.ipv4.ip_forward=1"],
                     ["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"]):
            _sh(*argv)

    def leave(self) -> None:
        if self._original is not None:
            if _libc.setns(self._original, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the original network namespace")
            os.close(self._original)
            self._original = None
        _sh("ip", "netns", "del", self.name, check=False)


def _remove_netns(path: str) -> None:
    """A pod sandbox's pinned network namespace, unmounted and removed (one the kubelet did not tear down)."""
    subprocess.run(["umount", "-l", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        os.unlink(path)
    except OSError:
        pass


# --------------------------------------------------------------------------- the node


def _leaf_certificate(cluster: Cluster, name: str, org: str | None, cn: str) -> None:
    """A client certificate signed by the cluster CA (the profile testkit/pki.py defines)."""
    pki = cluster.pki
    cnf = pki.dir / "openssl.cnf"
    csr = pki.dir / f"{name}.csr"
    subject = (f"/O={org}" if org else "") + f"/CN={cn}"
    openssl("req", "-new", "-config", cnf, "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", pki.key(name), "-out", csr, "-subj", subject)
    openssl("x509", "-req", "-in", csr, "-CA", pki.crt("ca"), "-CAkey", pki.key("ca"), "-CAcreateserial",
             "-days", "7", "-extfile", cnf, "-extensions", "client", "-out", pki.crt(name))


CONTAINERD_CONFIG = """\
version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # This VM refuses any oom_score_adj below 0, even for root; without it every sandbox fails to start.
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # runc, not crun: Debian's crun 1.8.1 refuses this machine's hybrid cgroup layout.
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf}"
  # One HOST:PORT/hosts.toml per registry this node pulls from (testkit/registry.py writes them; read per pull).
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{registry_hosts}"
"""


#: Where containerd's CRI puts an image named without a registry (its reference normalisation; nothing is fetched).
UNQUALIFIED_REGISTRY = "docker.io/library"


def _docker_ref(name: str) -> str:
    """How containerd's CRI names an image the kubelet asks for as ``name`` (UNQUALIFIED_REGISTRY prefix)."""
    return name if "/" in name.split(":")[0] else f"{UNQUALIFIED_REGISTRY}/{name}"


@dataclass
class Node:
    """The running node: its components, the control plane it registered with, and helpers for tests."""

    cluster: Cluster
    workdir: Path
    parts: NodeParts
    netns: NetNamespace
    components: list[Component] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    name: str = NODE_NAME
    #: What a node joining later (``join_node``) has of its own; the first node's are the module constants.
    ip: str = NODE_IP
    bridge: str = "cni0"
    pod_subnet: str = POD_SUBNET
    #: The kubelet's cgroup root: a second kubelet on the machine needs its own, or each would remove the other's
    #: pod cgroups as orphans.
    cgroup_root: str | None = None
    #: The images imported into containerd before the kubelet starts (None: every image the parts built); the
    #: pause image is containerd's sandbox image under this name.
    preload: list | None = None
    pause_image: str | None = None
    labels: str = "nra-test=node"

    @property
    def registry_hosts(self) -> Path:
        """containerd's ``config_path``: a ``HOST:PORT/hosts.toml`` per registry (testkit/registry.py)."""
        return self.workdir / "containerd" / "certs.d"

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _sh(self.parts.tools["ctr"], "--address", str(self.containerd_socket), "-n", "k8s.io", *args,
                   check=check)

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    # ------------------------------------------------------------- start

    def start(self) -> Node:
        started = time.monotonic()
        self._start_containerd()
        self.timings["containerd_and_images_s"] = time.monotonic() - started
        self._start_kubelet()
        self._start_kube_proxy()
        self.wait_ready(120)
        self.timings["node_ready_s"] = time.monotonic() - started
        self._start_dns()
        self.timings["dns_ready_s"] = time.monotonic() - started
        return self

    def wait_ready(self, timeout: float) -> None:
        """Until the kubelet has registered the Node and its Ready condition is True."""
        wait_until(self._node_ready, timeout, interval=0.1, message=f"Node {self.name} Ready (kubelet registered it)")

    def _start(self, name: str, argv: list[str]) -> Component:
        log = f"{name}.log" if self.name == NODE_NAME else f"{self.name}-{name}.log"
        component = Component(name, argv, self.cluster.logs_dir / log)
        component.start()
        self.components.append(component)
        return component

    def _alive_or_raise(self) -> None:
        for component in self.components:
            if not component.alive():
                raise RuntimeError(f"{component.name} exited ({component.proc.returncode}):\n{component.tail(30)}")

    def _start_containerd(self) -> None:
        self._netns_before = set(os.listdir(NETNS_DIR)) if os.path.isdir(NETNS_DIR) else set()
        base = self.workdir / "containerd"
        cni_conf = self.workdir / "cni" / "net.d"
        for folder in (base, cni_conf, self.workdir / "cni" / "ipam", self.registry_hosts):
            folder.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-nra.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "nra-pods",
            "plugins": [
                {"type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": self.pod_subnet}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.workdir / "cni" / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}, indent=1))
        from components.image import PAUSE_IMAGE

        config = base / "config.toml"
        config.write_text(CONTAINERD_CONFIG.format(
            root=base / "root", state=base / "state", socket=self.containerd_socket, opt=base / "opt",
            pause=self.pause_image or _docker_ref(PAUSE_IMAGE), runc=self.parts.tools["runc"], cni_conf=cni_conf,
            registry_hosts=self.registry_hosts))
        self._start("containerd", [self.parts.tools["containerd"], "--config", str(config)])
        wait_until(lambda: (self._alive_or_raise(), self.containerd_socket.exists()
                            and self.ctr("version", check=False).returncode == 0)[1], 60, interval=0.25,
                   message="containerd serving")
        images = self.parts.images if self.preload is None else self.preload
        for image in images:
            self.ctr("images", "import", str(image.archive))
        listed = self.ctr("images", "ls", "-q").stdout.split()
        missing = [i.name for i in images if _docker_ref(i.name) not in listed]
        if missing:
            raise RuntimeError(f"ctr images import left {missing} missing; containerd lists {listed}")

    def _start_kubelet(self) -> None:
        cluster, pki = self.cluster, self.cluster.pki
        credential = "kubelet" if self.name == NODE_NAME else f"kubelet-{self.name}"
        _leaf_certificate(cluster, credential, "system:nodes", f"system:node:{self.name}")
        kubeconfig = write_kubeconfig(self.workdir / "kubelet.kubeconfig", cluster.server, pki, credential)
        resolv = self.workdir / "resolv.conf"
        resolv.write_text("# the node's own resolver list: empty, nothing outside the namespace is asked\n")
        healthz, = free_ports(1)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # This machine mounts cgroup v1 (cgroup2 only at /sys/fs/cgroup/unified); 1.37 refuses it otherwise.
            "failCgroupV1": False, "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": self.ip, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": healthz,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(pki.crt("ca"))}},
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [CLUSTER_DNS], "clusterDomain": "cluster.local", "resolvConf": str(resolv),
            "failSwapOn": False, "rotateCertificates": False, "serverTLSBootstrap": False,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "5s", "syncFrequency": "10s", "fileCheckFrequency": "10s",
            "shutdownGracePeriod": "0s", "maxPods": 110, "podLogsDir": str(self.workdir / "pod-logs"),
            "featureGates": {},
            **({"cgroupRoot": self.cgroup_root} if self.cgroup_root else {}),
        }
        config_path = self.workdir / "kubelet-config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        self._start("kubelet", [
            str(self.parts.node_bin / "kubelet"), f"--config={config_path}", f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.workdir / 'kubelet'}", f"--cert-dir={self.workdir / 'kubelet-pki'}",
            f"--hostname-override={self.name}", f"--node-ip={self.ip}",
            f"--node-labels={self.labels}", "--v=2"])

    def _start_kube_proxy(self) -> None:
        _leaf_certificate(self.cluster, "kube-proxy", None, "system:kube-proxy")
        kubeconfig = write_kubeconfig(self.workdir / "kube-proxy.kubeconfig", self.cluster.server, self.cluster.pki,
                                      "kube-proxy")
        healthz, metrics = free_ports(2)
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "iptables", "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.name, "clusterCIDR": POD_SUBNET,
            "healthzBindAddress": f"127.0.0.1:{healthz}", "metricsBindAddress": f"127.0.0.1:{metrics}",
            # leave the machine's conntrack table settings alone (they are not per namespace)
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }
        path = self.workdir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self._start("kube-proxy", [str(self.parts.node_bin / "kube-proxy"), f"--config={path}", "--v=1"])

    def _node_ready(self) -> bool:
        self._alive_or_raise()
        if not self.cluster.exists(f"/api/v1/nodes/{self.name}"):
            return False
        node = self.cluster.api("GET", f"/api/v1/nodes/{self.name}")
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))

    def _start_dns(self) -> None:
        result = self.cluster.kubectl("apply", "-f", str(MANIFESTS / "coredns.yaml"))
        if result.returncode != 0:
            raise RuntimeError(f"kubectl apply coredns.yaml: {result.stderr}")
        self.wait_pods_ready("kube-system", "k8s-app=kube-dns", 1, 120)

    # ------------------------------------------------------------- helpers

    def pods(self, namespace: str, selector: str = "") -> list[dict]:
        query = f"?labelSelector={selector}" if selector else ""
        return self.cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods{query}")["items"]

    def wait_pods_ready(self, namespace: str, selector: str, count: int, timeout: float) -> list[dict]:
        def ready() -> list[dict] | None:
            self._alive_or_raise()
            pods = [p for p in self.pods(namespace, selector) if not p["metadata"].get("deletionTimestamp")]
            good = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                           for c in p.get("status", {}).get("conditions", []))]
            return good if len(good) == count == len(pods) else None
        try:
            return wait_until(ready, timeout, interval=0.5, message=f"{count} Ready pod(s) {selector} in {namespace}")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.describe(namespace, selector)}") from None

    def describe(self, namespace: str, selector: str) -> str:
        out = self.cluster.kubectl("describe", "pods", "-n", namespace, "-l", selector)
        events = self.cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp")
        return f"{out.stdout[-4000:]}\n{events.stdout[-3000:]}\n--- kubelet ---\n{self.component('kubelet').tail(25)}"

    def service_ip(self, namespace: str, name: str) -> str:
        return self.cluster.api("GET", f"/api/v1/namespaces/{namespace}/services/{name}")["spec"]["clusterIP"]

    def logs_tail(self, lines: int = 30) -> str:
        return "\n".join(f"----- {c.name} -----\n{c.tail(lines)}" for c in self.components)

    # ------------------------------------------------------------- stop

    def stop(self) -> None:
        """Pods first (through the kubelet, so sandboxes and their namespaces go), then the node's processes."""
        kubelet = next((c for c in self.components if c.name == "kubelet"), None)
        if kubelet is not None and kubelet.alive():
            for args in (["delete", "-k", str(ROOT / "daemonset"), "--wait=false", "--ignore-not-found"],
                         ["delete", "-k", str(ROOT / "otel-config"), "--wait=false", "--ignore-not-found"]):
                self.cluster.kubectl(*args)
            # Controllers first (CoreDNS's Deployment, test workloads): otherwise each deleted pod is replaced and
            # the wait below runs out its whole minute on every node teardown.
            self.cluster.kubectl("delete", "deployments,replicasets,daemonsets,statefulsets,jobs", "--all",
                                 "--all-namespaces", "--wait=false")
            self.cluster.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--wait=false")
            try:
                wait_until(lambda: not self.ctr("tasks", "ls", "-q", check=False).stdout.split()
                           or not self._pods_left(), 60, interval=1, message="pods stopped by the kubelet")
            except AssertionError:
                pass
        self._stop_processes()
        self._remove_own_pod_namespaces()

    def _stop_processes(self) -> None:
        """The node's processes in reverse start order, containerd's tasks killed first, then its shims; the mounts
        under the workdir released."""
        for component in reversed(self.components):
            if component.name == "containerd" and component.alive():
                for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
                    self.ctr("tasks", "kill", "-a", "-s", "SIGKILL", task, check=False)
            component.stop()
        self._kill_own_shims()
        self._unmount_under(self.workdir)

    def _remove_own_pod_namespaces(self) -> None:
        """The pod sandboxes' network namespaces containerd's CNI pinned under /run/netns since this node started
        (a sandbox the kubelet had not torn down when it stopped leaves one)."""
        before = getattr(self, "_netns_before", None)
        if before is None or not os.path.isdir(NETNS_DIR):
            return
        for name in sorted(set(os.listdir(NETNS_DIR)) - before):
            if name.startswith("cni-"):
                _remove_netns(f"{NETNS_DIR}/{name}")

    def _pods_left(self) -> bool:
        return bool(self.cluster.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName={self.name}")["items"])

    def _kill_own_shims(self) -> None:
        """containerd-shim processes outlive containerd; only those started for this socket are killed, by pid."""
        marker = str(self.containerd_socket)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline and b"containerd-shim" in cmdline[0] and marker.encode() in cmdline:
                try:
                    os.kill(int(entry.name), 9)
                except ProcessLookupError:
                    pass

    @staticmethod
    def _unmount_under(folder: Path) -> None:
        prefix = str(folder.resolve())
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# --------------------------------------------------------------------------- a node joining later


def join_node(first: Node, index: int, workdir: Path, pause_image: str, labels: str,
              prepare: Callable[[Node], None] = lambda node: None) -> Node:
    """A second real node beside ``first``, as a new machine joins a cluster: its own address on the namespace's
    veth, containerd (own root, state, socket, CNI bridge and pod subnet, nothing imported: the sandbox image is
    ``pause_image``, pulled like every other), kubelet (own certificate, root dir and cgroup root); returned once its
    containerd serves and its kubelet started, before the Node is Ready (``wait_ready``). It shares the namespace's
    iptables with the first node's kube-proxy, so Services reach its pods without a kube-proxy of its own, and the
    cluster's DNS. ``prepare(node)`` runs before its containerd starts (to write its registry hosts, say).
    ``leave_node`` removes it."""
    node = Node(first.cluster, workdir, first.parts, first.netns, name=f"{NODE_NAME}-{index}",
                ip=f"10.201.0.{index}", bridge=f"cni{index}", pod_subnet=f"10.244.{index}.0/24",
                cgroup_root=f"/nra-{first.netns.name}-{index}", preload=[], pause_image=pause_image, labels=labels)
    _sh("ip", "addr", "add", f"{node.ip}/32", "dev", "nra0")
    for hierarchy in _cgroup_hierarchies():
        (hierarchy / node.cgroup_root.lstrip("/")).mkdir(exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        prepare(node)
        node._start_containerd()
        node._start_kubelet()
    except BaseException:
        leave_node(node)
        raise
    return node


def _cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy: the kubelet refuses a cgroup root missing from one of the v1 ones, and on this
    hybrid layout makes its pod cgroups in the v2 one (``unified``) too."""
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    return [Path(m[1]) for m in mounts if m[2] in ("cgroup", "cgroup2")]


def leave_node(node: Node) -> None:
    """Undo ``join_node``: the node's containers killed, its processes stopped, its pods' network namespaces, its
    cgroup root, bridge and address removed, its Node and pods deleted from the API."""
    sandboxes = set()
    if any(c.name == "containerd" and c.alive() for c in node.components):
        for container in node.ctr("containers", "ls", "-q", check=False).stdout.split():
            info = node.ctr("containers", "info", container, check=False)
            try:
                spaces = json.loads(info.stdout)["Spec"]["linux"]["namespaces"]
            except (ValueError, KeyError, TypeError):
                continue
            sandboxes.update(n["path"] for n in spaces if n.get("type") == "network" and n.get("path"))
    node._stop_processes()
    for path in sorted(sandboxes):
        _remove_netns(path)
    if node.cgroup_root:
        for hierarchy in _cgroup_hierarchies():
            root = hierarchy / node.cgroup_root.lstrip("/")
            for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                try:
                    folder.rmdir()
                except OSError:
                    pass
            try:
                root.rmdir()
            except OSError:
                pass
    _sh("ip", "link", "del", node.bridge, check=False)
    _sh("ip", "addr", "del", f"{node.ip}/32", "dev", "nra0", check=False)
    cluster = node.cluster
    for pod in cluster.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName={node.name}")["items"]:
        meta = pod["metadata"]
        cluster.kubectl("delete", "pod", "-n", meta["namespace"], meta["name"], "--grace-period=0", "--force",
                        "--wait=false")
    cluster.kubectl("delete", "node", node.name, "--wait=false", "--ignore-not-found")


# --------------------------------------------------------------------------- the fixture


def node_apiserver_flags(cluster_workdir: Path) -> list[str]:
    """The API server also listens on the node address and advertises it, so the kubernetes Service has an
    endpoint pods reach through kube-proxy; it talks to the kubelet (logs, exec) with the admin certificate,
    which tests.cluster writes to ``<workdir>/pki``."""
    pki = cluster_workdir / "pki"
    return ["--bind-address=0.0.0.0", f"--advertise-address={NODE_IP}", "--endpoint-reconciler-type=lease",
            # the node's name resolves nowhere here (the machine's resolver is outside the namespace): its address
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={pki / 'admin.crt'}", f"--kubelet-client-key={pki / 'admin.key'}",
            # The issuer stays the cluster's usual https://kubernetes.default.svc.cluster.local, which pods reach
            # (CoreDNS, then kube-proxy to this API server) and which the serving certificate names; without this
            # flag the discovery document's jwks_uri would be https://<advertise address>:<port>, an address the
            # certificate does not carry, and the Collector's oidc authenticator could not fetch the keys.
            f"--service-account-jwks-uri={SERVICE_ACCOUNT_ISSUER}/openid/v1/jwks"]


@contextmanager
def exclusive_node_session(lock: Path = NODE_SESSION_LOCK, *, say: Callable[[str], None] = print) -> Iterator[None]:
    """Hold the machine's node-session lock (``flock``, released when the process ends however it ends): a second
    test run's node session waits for the first instead of tearing down its pod network namespaces."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            say(f"node session: waiting for another run's node session to end (pid {holder}, lock {lock})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def running_node(workdir: Path) -> Iterator[Node]:
    """One control plane and one real node in a fresh network namespace, the test's (or a benchmark's) thread
    inside it until the end; ``workdir`` holds everything they write."""
    if os.geteuid() != 0:
        pytest.fail("the node tests need root (network namespace, containerd, kubelet)", pytrace=False)
    parts = build_node_parts()
    with exclusive_node_session():
        yield from _running_node(workdir, parts)


def _running_node(workdir: Path, parts: NodeParts) -> Iterator[Node]:
    netns = NetNamespace()
    try:
        netns.enter()
    except (OSError, RuntimeError) as error:
        netns.leave()
        pytest.fail(f"node part network namespace could not be made: {error}", pytrace=False)
    cluster = Cluster(workdir / "cluster", apiserver_flags=node_apiserver_flags(workdir / "cluster"))
    node = Node(cluster, workdir, parts, netns)
    try:
        started = time.monotonic()
        try:
            cluster.start()
            node.timings["control_plane_s"] = time.monotonic() - started
            node.start()
        except (RuntimeError, AssertionError) as error:
            pytest.fail(f"node did not start: {error}\n{node.logs_tail()}", pytrace=False)
        yield node
    finally:
        try:
            node.stop()
        finally:
            cluster.stop()
            netns.leave()


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One control plane and one real node for a test module; everything inside a fresh network namespace."""
    with running_node(tmp_path_factory.mktemp("node")) as node:
        yield node
