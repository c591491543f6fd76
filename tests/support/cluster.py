"""A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver, kube-scheduler, kube-controller-manager.

There is no kubelet or container runtime here. Nodes are KWOK's (tests/support/kwok.py): a test creates them,
KWOK keeps them Ready with renewed Leases, moves their pods to Running and finishes their deletions. What KWOK
does not write (in-place resize status, crash loops, terminal phases at a chosen moment) a test writes with
``set_custom_status`` on pods KWOK was told to leave alone. Everything else (binding, DaemonSet pods,
service-account tokens, admission, RBAC, the node lifecycle controller) is the real code from the binaries
built by ``components.kubernetes``.

Every port is picked free at start, certificates are generated per cluster
and all state lives under ``workdir`` so parallel sessions do not collide.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import json
import random
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from components.kubernetes import KUBERNETES, etcd_bin, kubernetes_bin
from tests.support.processes import log_tail, stop_process
from tests.support.waiting import wait_until

__all__ = ["ApiError", "Cluster", "cluster", "free_ports", "parse_prometheus_text"]

#: kubectl, and the controller-manager when the tested version has none, come from here.
NEWEST = "1.37.2"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: The node lifecycle controller marks a node Unknown after --node-monitor-grace-period without a renewed Lease.
#: Shortened from the default 50 s so a test can watch a dead node go Unknown (and a live one stay Ready) in half
#: a minute; KWOK renews every 5 s (tests/support/kwok.py), six renewals per grace period.
NODE_MONITOR_GRACE_SECONDS = 30
START_TIMEOUT = 180.0


class ApiError(RuntimeError):
    """An apiserver answer other than 2xx, with the Status body for assertions."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports for servers, from below the kernel's ephemeral range; all stay bound until every
    one is chosen, so none repeats.

    A port from the ephemeral range (a bind to port 0) can become the local end of an outgoing connection before
    its server binds it: 50 agents of the scale benchmark starting at once open some 200 connections, and one found
    its debug port taken. Below the range only an explicit bind can take a port."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    candidates = random.sample(range(max(1024, low - 10000), low), max(0, min(10000, low - 1024)))
    sockets: list[socket.socket] = []
    try:
        for port in candidates:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            sockets.append(s)
            if len(sockets) == count:
                return [s.getsockname()[1] for s in sockets]
        raise RuntimeError(f"fewer than {count} free loopback ports below {low}")
    finally:
        for s in sockets:
            s.close()


def rfc3339(at: dt.datetime | None = None) -> str:
    return (at or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- PKI

_OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
"""


@dataclass(frozen=True)
class Pki:
    """Paths of every key and certificate a cluster needs; leaf names map to ``<name>.crt``/``<name>.key``."""

    dir: Path

    def crt(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def sa_public(self) -> Path:
        return self.dir / "sa.pub"


#: name -> (subject as (O, CN), profile). Client CNs are the identities RBAC's bootstrap policy knows.
_LEAVES = {
    "apiserver": ((None, "kube-apiserver"), "server"),
    "loopback-serving": ((None, "127.0.0.1"), "server"),
    "admin": (("system:masters", "nra-admin"), "client"),
    "scheduler": ((None, "system:kube-scheduler"), "client"),
    "controller-manager": ((None, "system:kube-controller-manager"), "client"),
}


def make_pki(directory: Path) -> Pki:
    """A fresh CA and leaves; openssl when present (the usual case), else the already-installed cryptography."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    if shutil.which("openssl"):
        _openssl_pki(pki)
    else:
        try:
            import cryptography  # noqa: F401
        except ImportError:
            # A failure, not a skip: a missing tool must never quietly turn the real-component tests off.
            raise RuntimeError("cluster tests need the openssl CLI (or the cryptography package) to make "
                               "certificates; .ci/run installs openssl") from None
        _cryptography_pki(pki)
    return pki


def openssl(*args: str | Path) -> None:
    proc = subprocess.run(["openssl", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(map(str, args))}: {proc.stdout}")


def _subject(org: str | None, cn: str) -> str:
    return (f"/O={org}" if org else "") + f"/CN={cn}"


def _openssl_pki(pki: Pki) -> None:
    cnf = pki.dir / "openssl.cnf"
    cnf.write_text(_OPENSSL_CNF)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", "-new", "-config", cnf, "-extensions", "ca", *ec, "-keyout", pki.key("ca"),
             "-out", pki.crt("ca"), "-days", "7", "-subj", "/CN=node-requests-agent-test-ca")
    for serial, (name, ((org, cn), profile)) in enumerate(_LEAVES.items(), start=2):
        csr = pki.dir / f"{name}.csr"
        openssl("req", "-new", "-config", cnf, *ec, "-keyout", pki.key(name), "-out", csr, "-subj", _subject(org, cn))
        openssl("x509", "-req", "-in", csr, "-CA", pki.crt("ca"), "-CAkey", pki.key("ca"), "-set_serial", serial,
                 "-days", "7", "-extfile", cnf, "-extensions", profile, "-out", pki.crt(name))
    # RS256 is what every service-account token consumer accepts.
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", pki.key("sa"))
    openssl("pkey", "-in", pki.key("sa"), "-pubout", "-out", pki.sa_public)


def _cryptography_pki(pki: Pki) -> None:
    """Same certificates as _openssl_pki, for machines without the openssl CLI."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def write_key(key, path: Path) -> None:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))

    def name(org: str | None, cn: str) -> x509.Name:
        attrs = ([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else [])
        return x509.Name(attrs + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def usage(ca: bool) -> x509.KeyUsage:
        return x509.KeyUsage(digital_signature=True, key_encipherment=not ca, content_commitment=False,
                             data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                             encipher_only=False, decipher_only=False)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(None, "node-requests-agent-test-ca")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
               .serial_number(1).not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=7))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(usage(True), critical=True).sign(ca_key, hashes.SHA256()))
    write_key(ca_key, pki.key("ca"))
    pki.crt("ca").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
            *(x509.DNSName(d) for d in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                        "kubernetes.default.svc.cluster.local"))]
    for serial, (leaf, ((org, cn), profile)) in enumerate(_LEAVES.items(), start=2):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(org, cn)).issuer_name(ca_name)
                   .public_key(key.public_key()).serial_number(serial)
                   .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=7))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(usage(False), critical=True))
        if profile == "server":
            builder = (builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                       .add_extension(x509.SubjectAlternativeName(sans), critical=False))
        else:
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        write_key(key, pki.key(leaf))
        pki.crt(leaf).write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_key(sa, pki.key("sa"))
    pki.sa_public.write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))


def write_kubeconfig(path: Path, server: str, pki: Pki, user: str, token: str | None = None) -> Path:
    """A kubeconfig for one client identity (its certificate, or a bearer ``token``); JSON is valid YAML."""
    credentials = ({"token": token} if token is not None else
                   {"client-certificate": str(pki.crt(user)), "client-key": str(pki.key(user))})
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": user, "preferences": {},
        "clusters": [{"name": "nra", "cluster": {"server": server, "certificate-authority": str(pki.crt("ca"))}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "nra", "user": user}}],
    }
    path.write_text(json.dumps(config, indent=2))
    return path


# --------------------------------------------------------------------------- processes


@dataclass
class Component:
    """One control-plane process and the log it writes, so failures can show what it said."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        stop_process(self.proc, timeout)

    def tail(self, lines: int) -> str:
        return log_tail(self.log, lines)


def parse_prometheus_text(text: str, metric: str) -> list[dict]:
    """Samples of one metric as label dicts with a float ``value``, read by prometheus_client's own parser."""
    return [{**sample.labels, "value": sample.value}
            for family in text_string_to_metric_families(text) for sample in family.samples if sample.name == metric]


# --------------------------------------------------------------------------- the cluster


class Cluster:
    """etcd + kube-apiserver + kube-scheduler (+ kube-controller-manager) of one Kubernetes version, on loopback.

    A version built without a controller-manager (see components.kubernetes.KUBERNETES) runs without one, since a
    newer controller-manager than apiserver is outside the skew policy; such a cluster has no ServiceAccounts, so
    it admits no pods and serves /version and scheduler checks only.
    """

    def __init__(self, workdir: Path, version: str = NEWEST, apiserver_flags: Sequence[str] = ()) -> None:
        self.workdir = Path(workdir)
        self.release = version  # "version" is the /version call
        self.apiserver_flags = tuple(apiserver_flags)  # appended to the fixture's own (a later flag wins)
        self.logs_dir = self.workdir / "logs"
        self.components: list[Component] = []
        self.ports: dict[str, int] = {}
        self.pki: Pki | None = None
        self._bins: dict[str, Path] = {}
        self._context: ssl.SSLContext | None = None
        self._token_context: ssl.SSLContext | None = None

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
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/metrics/resources")

    def _controller_manager(self) -> Component:
        pki = self.pki
        return self._component(
            "kube-controller-manager", "kube-controller-manager",
            *self._delegated_flags("controller-manager", "controller-manager"),
            "--controllers=*", "--use-service-account-credentials=true",
            f"--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s",
            f"--root-ca-file={pki.crt('ca')}", f"--service-account-private-key-file={pki.key('sa')}",
            f"--cluster-signing-cert-file={pki.crt('ca')}", f"--cluster-signing-key-file={pki.key('ca')}",
            "--cluster-name=nra")

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

    # ----------------------------------------------------------------- clients

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def scheduler_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['scheduler']}"

    @property
    def controller_manager_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['controller-manager']}"

    def kubeconfig_path(self, user: str) -> Path:
        return self.workdir / f"{user}.kubeconfig"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig_path("admin")

    def _tls(self) -> ssl.SSLContext:
        """Verifies servers against the cluster CA and presents the admin (system:masters) client certificate."""
        if self._context is None:
            context = ssl.create_default_context(cafile=str(self.pki.crt("ca")))
            context.load_cert_chain(str(self.pki.crt("admin")), str(self.pki.key("admin")))
            self._context = context
        return self._context

    def _get_text(self, url: str, timeout: float = 5.0) -> str:
        context = self._tls() if url.startswith("https:") else None
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return response.read().decode()

    def _tls_anonymous(self) -> ssl.SSLContext:
        """Verifies the server, presents no certificate: for requests that authenticate with a bearer token."""
        if self._token_context is None:
            self._token_context = ssl.create_default_context(cafile=str(self.pki.crt("ca")))
        return self._token_context

    def api(self, method: str, path: str, body: object = None, content_type: str | None = None,
            timeout: float = 30.0, token: str | None = None) -> dict:
        """JSON over HTTPS as the admin, or as whoever ``token`` belongs to; PATCH defaults to a merge patch,
        errors raise ApiError with the Status."""
        data = None if body is None else json.dumps(body).encode()
        if content_type is None:
            content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        context = self._tls() if token is None else self._tls_anonymous()
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise ApiError(method, path, error.code, error.read().decode(errors="replace")) from None
        return json.loads(raw) if raw else {}

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 5) -> Iterator[dict]:
        """The events of one WATCH of ``path`` from ``resource_version``, as the admin, until the server ends it
        after ``timeout_seconds``; a caller that must see every change re-watches from the last event's
        resourceVersion, as client-go's reflector does."""
        query = f"watch=true&resourceVersion={resource_version}&timeoutSeconds={timeout_seconds}"
        url = f"{self.server}{path}{'&' if '?' in path else '?'}{query}"
        with urllib.request.urlopen(url, timeout=timeout_seconds + 30, context=self._tls()) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)

    def create_namespace(self, prefix: str) -> str:
        """A fresh namespace, returned once pods can be created in it (its default ServiceAccount exists)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        wait_until(lambda: self.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 60, interval=0.25,
                   message=f"default ServiceAccount in {name} (made by kube-controller-manager)")
        return name

    def exists(self, path: str) -> bool:
        try:
            self.api("GET", path)
            return True
        except ApiError as error:
            if error.status == 404:
                return False
            raise

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60.0,
                token: str | None = None) -> subprocess.CompletedProcess:
        """The built kubectl as admin, or with a bearer ``token`` only; callers check returncode so failures can be
        asserted on too."""
        kubeconfig = self.admin_kubeconfig
        if token is not None:
            kubeconfig = write_kubeconfig(self.workdir / f"token-{hashlib.sha256(token.encode()).hexdigest()[:12]}.kubeconfig", self.server,
                                          self.pki, "bearer", token=token)
        return subprocess.run([str(self._bins["kubectl"]), f"--kubeconfig={kubeconfig}", *args],
                              input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)

    def version(self) -> dict:
        return self.api("GET", "/version")

    def apiserver_metrics_text(self) -> str:
        """kube-apiserver's own /metrics, read as the admin (one scrape, for several metrics at one instant)."""
        return self._get_text(self.server + "/metrics", timeout=30)

    def apiserver_metrics(self, metric: str) -> list[dict]:
        """Samples of one of kube-apiserver's own metrics (``apiserver_request_total``...)."""
        return parse_prometheus_text(self.apiserver_metrics_text(), metric)

    def scheduler_resource_metrics(self) -> list[dict]:
        """``kube_pod_resource_request`` samples: the scheduler's own view of each pod's requests, an oracle for the agent."""
        text = self._get_text(self.scheduler_url + "/metrics/resources", timeout=10)
        return parse_prometheus_text(text, "kube_pod_resource_request")

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
    control_plane = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        control_plane.start()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    yield control_plane
    if request.session.testsfailed:
        print(f"\ncontrol-plane logs (session had failures):\n{control_plane.logs_tail()}")
    control_plane.stop()
