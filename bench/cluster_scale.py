"""Cluster scale by simulation: 1,000 KWOK nodes x 30 pods on one real API server, 50 agents, one real Collector.

Run: ``python bench/run.py cluster-scale`` (or ``python bench/cluster_scale.py``) after the test command's install;
the control plane, KWOK, the Collector, Prometheus 3 and the client-go anchor are built into the component cache on
first use. ``NRA_SCALE_QUICK=1`` runs a small size (20 nodes, 10 agents, short windows) to check the setup.

What runs: etcd, kube-apiserver, kube-scheduler and kube-controller-manager 1.37.2 (tests/support/trust.py: the
shipped authorization configuration, the API server as the ServiceAccount issuer), KWOK's controller managing the
nodes (tests/support/kwok.py), the shipped DaemonSet applied with kubectl, and one agent process per measured node
started from its DaemonSet pod as the kubelet would start it (tests/support/kubelet.py; no container runs on a KWOK
node). The agents push OTLP to one Collector running the shipped otel-config/collector.yaml (token verified against
the API server, nodeidentity, remote write) into Prometheus 3. The scheduler's and controller-manager's client QPS
are raised (``NRA_SCALE_CLIENT_QPS``) so the population is limited by the machine, not by their rate limiters.

Phases: population (pods created unbound, bound by the real scheduler, set Running by KWOK); a wait until the API
server's CPU is steady; a window without agents; cold start of every agent at once; a steady window; the agents
stopped for a second window without them (the two bracket the steady one, so drift is not counted as the agents');
a second cold start; an API server restart with every agent connected; churn (pods created on and deleted from the
nodes at a fixed rate by several writer processes, each timed from its API write to Prometheus); the same API
server restart with client-go's informers (bench/reflector_anchor/) in the agents' place;
and the 5,000-node arithmetic from the measured slopes. docs/benchmarks.md explains each figure.

Environment (defaults are the issue's sizes): NRA_SCALE_NODES (1000), NRA_SCALE_PODS (30 per node, the DaemonSet's
pod included), NRA_SCALE_AGENTS (50), NRA_SCALE_STEADY_SECONDS (660: longer than the longest server-side watch
timeout, 600 s), NRA_SCALE_DOWN_SECONDS (5), NRA_SCALE_CHURN_RATE (100 creations/s, as many deletions),
NRA_SCALE_CHURN_SECONDS (120), NRA_SCALE_CHURN_LIFETIME (45 s), NRA_SCALE_CHURN_WORKERS (4 writer processes),
NRA_SCALE_CHURN_KWOK (0: KWOK leaves the churn pods alone, so each is one create and one delete; 1: KWOK sets them
Running, one more write each),
NRA_SCALE_BASELINE_SECONDS (180, each no-agent window), NRA_SCALE_SETTLE_LIMIT (600 s), NRA_SCALE_CLIENT_QPS (300),
NRA_SCALE_ANCHOR (1).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import json
import math
import multiprocessing
import os
import re
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from common import ROOT, load, machine, realistic_pod  # noqa: E402  (puts the repository on sys.path)

from components.cache import cached, run  # noqa: E402
from tests.support.cluster import free_ports  # noqa: E402
from tests.support.collector import SHIPPED_CONFIG, Collector  # noqa: E402
from tests.support.factory import for_create  # noqa: E402
from tests.support.http import http_get  # noqa: E402
from tests.support.kubelet import (AGENT_CONTAINER, AgentContainer, ServiceAccountVolume, daemon_pods,  # noqa: E402
                                   deploy, prepare_agent_pod)
from tests.support.kwok import CUSTOM_STATUS_ANNOTATION, Kwok  # noqa: E402
from tests.support.trust import TrustCluster, collector_env, remote_write_prometheus  # noqa: E402
from tests.support.waiting import wait_until  # noqa: E402

QUICK = os.environ.get("NRA_SCALE_QUICK") == "1"


def _env(name: str, full: float, quick: float) -> float:
    return float(os.environ.get(name, quick if QUICK else full))


NODES = int(_env("NRA_SCALE_NODES", 1000, 20))
PODS_PER_NODE = int(_env("NRA_SCALE_PODS", 30, 30))
AGENTS = min(NODES, int(_env("NRA_SCALE_AGENTS", 50, 10)))
STEADY_SECONDS = _env("NRA_SCALE_STEADY_SECONDS", 660, 90)
DOWN_SECONDS = _env("NRA_SCALE_DOWN_SECONDS", 5, 5)
CHURN_RATE = _env("NRA_SCALE_CHURN_RATE", 100, 20)
CHURN_SECONDS = _env("NRA_SCALE_CHURN_SECONDS", 120, 40)
CHURN_LIFETIME = _env("NRA_SCALE_CHURN_LIFETIME", 45, 45)
CLIENT_QPS = int(_env("NRA_SCALE_CLIENT_QPS", 300, 300))
ANCHOR = os.environ.get("NRA_SCALE_ANCHOR", "1") == "1"
BASELINE_SECONDS = _env("NRA_SCALE_BASELINE_SECONDS", 180, 30)
SETTLE_LIMIT = _env("NRA_SCALE_SETTLE_LIMIT", 600, 90)
WRITERS = 16
CHURN_WORKERS = int(_env("NRA_SCALE_CHURN_WORKERS", 4, 2))
CHURN_KWOK = os.environ.get("NRA_SCALE_CHURN_KWOK", "0") == "1"
EXPORT_INTERVAL = 15.0  # the agent's default; the shipped DaemonSet does not change it
#: Every ServiceAccount outside kube-system falls into this API Priority and Fairness flow schema: the agents'
#: requests (and the anchor's, which uses their tokens) are its only ones; the controllers use kube-system
#: ServiceAccounts, KWOK and the benchmark the admin certificate (exempt).
AGENT_FLOW = "service-accounts"
ANCHOR_DIR = ROOT / "bench" / "reflector_anchor"
NODE_LEASE_SECONDS, NODE_GRACE_SECONDS = 40, 50  # kubelet's and kube-controller-manager's defaults


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the cluster


class ScaleCluster(TrustCluster):
    """The trust cluster with the scheduler's and controller-manager's client rate limits raised (default 50 and 20
    QPS): population and churn are then limited by the machine. Node heartbeats at the kubelet's defaults (Lease
    of 40 s renewed every 10 s, grace period 50 s) rather than the test suite's faster ones: at 1,000 nodes the
    suite's 5 s renewals were 200 writes per second of background under the agents' share. The agents' path is
    untouched."""

    def _scheduler(self):
        component = super()._scheduler()
        component.argv += [f"--kube-api-qps={CLIENT_QPS}", f"--kube-api-burst={2 * CLIENT_QPS}"]
        return component

    def _controller_manager(self):
        component = super()._controller_manager()
        component.argv += [f"--kube-api-qps={CLIENT_QPS}", f"--kube-api-burst={2 * CLIENT_QPS}",
                           f"--node-monitor-grace-period={NODE_GRACE_SECONDS}s"]
        return component


@dataclass(frozen=True, kw_only=True)
class ApiAddress:
    """Where and as whom the benchmark writes: plain data, so a churn worker process can be handed it."""

    port: int
    ca: str
    cert: str
    key: str

    @classmethod
    def admin(cls, cluster: TrustCluster) -> ApiAddress:
        return cls(port=cluster.ports["apiserver"], ca=str(cluster.pki.crt("ca")), cert=str(cluster.pki.crt("admin")),
                   key=str(cluster.pki.key("admin")))


class Api:
    """The benchmark's own writes: keep-alive HTTPS as the admin, one connection per thread (a TLS handshake per
    request would cost more CPU than the request)."""

    def __init__(self, address: ApiAddress) -> None:
        context = ssl.create_default_context(cafile=address.ca)
        context.load_cert_chain(address.cert, address.key)
        self._context, self._port, self._local = context, address.port, threading.local()

    def request(self, method: str, path: str, body: bytes | None = None, accept: str = "application/json",
                attempts: int = 5) -> tuple[int, bytes]:
        for attempt in range(attempts):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPSConnection("127.0.0.1", self._port, context=self._context,
                                                                     timeout=120)
            try:
                conn.request(method, path, body=body, headers={"Content-Type": "application/json", "Accept": accept})
                response = conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")


# --------------------------------------------------------------------------- the API server's own counts


@dataclass
class Snapshot:
    """One scrape of kube-apiserver's /metrics, reduced to what the benchmark reads."""

    at: float  # wall clock
    requests: Counter = field(default_factory=Counter)  # (verb, resource) -> apiserver_request_total
    agents: float = 0.0  # apiserver_flowcontrol_dispatched_requests_total of the agents' flow schema
    watches: Counter = field(default_factory=Counter)  # resource -> open WATCH requests (apiserver_longrunning_requests)
    list_buckets: dict[float, float] = field(default_factory=dict)  # le -> LIST of pods and nodes, duration histogram

    @property
    def lists(self) -> float:
        return self.requests[("LIST", "pods")] + self.requests[("LIST", "nodes")]

    @property
    def total(self) -> float:
        return sum(self.requests.values())


_WANTED = ("apiserver_request_total{", "apiserver_flowcontrol_dispatched_requests_total{",
           "apiserver_longrunning_requests{", "apiserver_request_duration_seconds_bucket{")


def scrape(cluster: TrustCluster) -> Snapshot:
    """The metrics text filtered by line before parsing: the full text of a 1,000-node API server is megabytes."""
    text = cluster.apiserver_metrics_text()
    at = time.time()
    lines = [line for line in text.splitlines() if line.startswith(_WANTED) and (
        not line.startswith(_WANTED[3]) or ('verb="LIST"' in line and ('resource="pods"' in line or 'resource="nodes"' in line)))]
    snap = Snapshot(at)
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in family.samples:
            labels = s.labels
            if s.name == "apiserver_request_total":
                snap.requests[(labels.get("verb", ""), labels.get("resource", ""))] += s.value
            elif s.name == "apiserver_flowcontrol_dispatched_requests_total" and labels.get("flow_schema") == AGENT_FLOW:
                snap.agents += s.value
            elif s.name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH":
                snap.watches[labels.get("resource", "")] += s.value
            elif s.name == "apiserver_request_duration_seconds_bucket":
                le = float(labels["le"])
                snap.list_buckets[le] = snap.list_buckets.get(le, 0.0) + s.value
    return snap


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """The q-quantile of the observations between two scrapes of a cumulative histogram, interpolated within the
    bucket as Prometheus's histogram_quantile does."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return float("nan")
    rank = q * counts[-1]
    for i, (bound, count) in enumerate(zip(bounds, counts)):
        if count >= rank:
            if math.isinf(bound):
                return bounds[i - 1] if i else float("nan")
            lower, below = (bounds[i - 1], counts[i - 1]) if i else (0.0, 0.0)
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
    return float("nan")


class Sampler:
    """Scrapes the API server every ``period`` seconds in a thread; a failed scrape (server down) is skipped."""

    def __init__(self, cluster: TrustCluster, period: float = 1.0) -> None:
        self.cluster, self.period = cluster, period
        self.samples: list[Snapshot] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="apiserver-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.samples.append(scrape(self.cluster))
            except (OSError, ValueError):
                pass
            self._stop.wait(max(0.0, self.period - (time.monotonic() - started)))

    def rates(self, value: Callable[[Snapshot], float], since: float = 0.0) -> list[tuple[float, float]]:
        """(time, per-second rate of ``value``) between consecutive samples after ``since``, within one process
        (a counter that went down is a new API server: that pair is skipped)."""
        samples = [s for s in self.samples if s.at >= since]
        out = []
        for a, b in zip(samples, samples[1:]):
            if value(b) >= value(a) and b.at > a.at:
                out.append((b.at, (value(b) - value(a)) / (b.at - a.at)))
        return out


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def apiserver_pid(cluster: TrustCluster) -> int:
    return cluster.component("kube-apiserver").proc.pid


# --------------------------------------------------------------------------- population


def pod_templates(count: int = 35) -> list[dict]:
    """Realistic pod bodies (env, probes, init containers and a sidecar; every fifth a NeonVM runner) as a client
    POSTs them: no node, no status; the API server adds the service-account volume itself."""
    out = []
    for i in range(count):
        body = for_create(realistic_pod(i))
        body["spec"].pop("volumes", None)
        for c in body["spec"]["containers"] + body["spec"].get("initContainers", []):
            c.pop("volumeMounts", None)
        out.append(body)
    return out


def pod_body(templates: list[dict], i: int, name: str, node: str | None = None, kwok: bool = True) -> bytes:
    """One pod to POST; ``kwok=False`` marks it for KWOK to leave alone (no status is ever written for it)."""
    body = templates[i % len(templates)]
    meta = {**body["metadata"], "name": name}
    if not kwok:
        meta["annotations"] = {**meta.get("annotations", {}), CUSTOM_STATUS_ANNOTATION[0]: CUSTOM_STATUS_ANNOTATION[1]}
    body = {**body, "metadata": meta}
    if node is not None:
        body = {**body, "spec": {**body["spec"], "nodeName": node}}
    return json.dumps(body).encode()


def scheduler_metric(cluster: TrustCluster, name: str, **labels: str) -> float:
    """A sum over one kube-scheduler metric's samples matching ``labels`` (its /metrics is readable without auth)."""
    context = ssl.create_default_context(cafile=str(cluster.pki.crt("ca")))
    req = urllib.request.Request(cluster.scheduler_url + "/metrics")
    with urllib.request.urlopen(req, timeout=30, context=context) as response:
        text = response.read().decode()
    lines = "\n".join(line for line in text.splitlines() if line.startswith(name + "{") or line.startswith(name + " "))
    return sum(s.value for f in text_string_to_metric_families(lines + "\n") for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def count_pods(api: Api, selector: str) -> int:
    """Pods matching a field selector, counted from a metadata-only LIST served by the watch cache."""
    status, body = api.request("GET", f"/api/v1/pods?resourceVersion=0&fieldSelector={urllib.parse.quote(selector)}",
                               accept="application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
    if status != 200:
        raise RuntimeError(f"LIST pods {selector}: HTTP {status}: {body[:300]!r}")
    return len(json.loads(body).get("items") or [])


@dataclass
class Population:
    created_seconds: float
    scheduled_seconds: float
    running_seconds: float
    pods: int


def populate(cluster: TrustCluster, api: Api, namespace: str, count: int, expected_scheduled: int) -> Population:
    """``count`` unbound pods POSTed in parallel; the real scheduler binds them, KWOK sets them Running."""
    templates = pod_templates()
    started = time.monotonic()
    failures: Counter = Counter()

    def create(i: int) -> None:
        status, body = api.request("POST", f"/api/v1/namespaces/{namespace}/pods",
                                   pod_body(templates, i, f"app-{i:05d}"))
        if status != 201:
            failures[status] += 1
            if failures[status] <= 3:
                log(f"create app-{i:05d}: HTTP {status}: {body[:300]!r}")

    with ThreadPoolExecutor(WRITERS) as pool:
        for done, _ in enumerate(pool.map(create, range(count)), start=1):
            if done % 2000 == 0:
                log(f"{done}/{count} pods created ({done / (time.monotonic() - started):.0f}/s; {load()})")
    created = time.monotonic() - started
    if failures:
        raise RuntimeError(f"pod creation failed: {dict(failures)}")
    log(f"{count} pods created in {created:.0f} s ({count / created:.0f}/s)")

    def scheduled() -> float:
        return scheduler_metric(cluster, "scheduler_schedule_attempts_total", result="scheduled")

    deadline = time.monotonic() + max(900.0, count / 5)
    while (done := scheduled()) < expected_scheduled:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {done:.0f} of {expected_scheduled} pods scheduled")
        log(f"{done:.0f}/{expected_scheduled} pods bound by the scheduler ({load()})")
        time.sleep(10)
    scheduled_at = time.monotonic() - started
    log(f"all bound {scheduled_at:.0f} s after the first create")
    while (pending := count_pods(api, "status.phase!=Running")) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{pending} pods not Running")
        log(f"{pending} pods not yet Running (KWOK)")
        time.sleep(10)
    return Population(created, scheduled_at, time.monotonic() - started, count)


# --------------------------------------------------------------------------- agents


def collector_token(cluster: TrustCluster, agent: AgentContainer, folder: Path) -> None:
    """The DaemonSet's second projected volume (the Collector's audience), written as the kubelet writes it, and
    NRA_OTLP_TOKEN_FILE pointed at it: the mount path exists only inside a container."""
    container = next(c for c in agent.pod["spec"]["containers"] if c["name"] == AGENT_CONTAINER)
    mount = str(Path(agent.env["NRA_OTLP_TOKEN_FILE"]).parent)
    volume = ServiceAccountVolume(cluster, agent.pod, container, folder, mount_path=mount)
    volume.project()
    agent.env["NRA_OTLP_TOKEN_FILE"] = str(volume.token_path)


def prepare_agents(cluster: TrustCluster, deployment, nodes: list[str], workdir: Path, endpoint: str) -> list[AgentContainer]:
    pods = {p["spec"].get("nodeName"): p for p in daemon_pods(cluster, deployment)
            if not p["metadata"].get("deletionTimestamp")}
    missing = [n for n in nodes if n not in pods]
    if missing:
        raise RuntimeError(f"no DaemonSet pod on {missing[:5]}")
    agents = []
    for node in nodes:
        agent = prepare_agent_pod(cluster, pods[node], workdir / node, endpoint)
        collector_token(cluster, agent, workdir / node / "collector-token")
        agents.append(agent)
    return agents


def agent_pod_count(agent: AgentContainer) -> int | None:
    try:
        if not agent.ready():
            return None
        return len(agent.pods())
    except (OSError, ValueError, AssertionError):
        return None


def pods_of(agent: AgentContainer) -> dict[str, dict]:
    """The agent's /debug/pods, or nothing while it cannot answer."""
    try:
        return agent.pods()
    except (OSError, ValueError, AssertionError):
        return {}


def wait_each(agents: list[AgentContainer], done: Callable[[AgentContainer], bool], timeout: float) -> dict[str, float]:
    """Wall-clock time at which ``done(agent)`` first held, per node (polled round-robin)."""
    at: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    pending = list(agents)
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} agents not there after {timeout:.0f} s: {[a.node for a in pending][:10]}")
        still = []
        for agent in pending:
            if done(agent):
                at[agent.node] = time.time()
            else:
                still.append(agent)
        pending = still
        if pending:
            time.sleep(0.2)
    return at


_LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"


def log_events(agent: AgentContainer, marker: str, since: float) -> list[float]:
    """Wall-clock times of the agent's log lines containing ``marker`` after ``since`` (its text log format)."""
    out = []
    for line in agent.log.read_text(errors="replace").splitlines():
        if marker in line:
            try:
                at = dt.datetime.strptime(line[:23], _LOG_TIME).timestamp()
            except ValueError:
                continue
            if at >= since:
                out.append(at)
    return out


# --------------------------------------------------------------------------- the client-go anchor


def anchor_bin() -> Path:
    """bench/reflector_anchor built into the component cache, keyed by its sources (never committed as a binary)."""
    sources = sorted(p for p in ANCHOR_DIR.iterdir() if p.suffix in (".go", ".mod", ".sum"))
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sources)).hexdigest()[:16]

    def build(out: Path) -> None:
        (out / "bin").mkdir()
        run(["nice", "-n", "10", "go", "build", "-trimpath", "-o", str(out / "bin" / "reflector-anchor"), "."],
            cwd=ANCHOR_DIR, env={"CGO_ENABLED": "0"})

    return cached("reflector-anchor", digest, build) / "bin" / "reflector-anchor"


class Anchor:
    """The anchor process: client-go informers for ``nodes`` with the agents' tokens; its JSON lines collected."""

    def __init__(self, cluster: TrustCluster, agents: list[AgentContainer], workdir: Path) -> None:
        targets = [{"node": a.node, "token_file": str(a.serviceaccount.token_path)} for a in agents]
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "targets.json").write_text(json.dumps(targets))
        self.events: list[dict] = []
        self._stderr = open(workdir / "anchor.log", "ab")
        self.proc = subprocess.Popen([str(anchor_bin()), "-server", cluster.server, "-ca", str(cluster.pki.crt("ca")),
                                      "-targets", str(workdir / "targets.json")],
                                     stdout=subprocess.PIPE, stderr=self._stderr, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def nodes_with(self, event: str, since: float = 0.0, detail: str | None = None) -> dict[str, float]:
        """First time per node of ``event`` after ``since``."""
        out: dict[str, float] = {}
        for e in list(self.events):
            if e["event"] == event and e["t"] >= since and (detail is None or e.get("detail") == detail):
                out.setdefault(e["node"], e["t"])
        return out

    def stop(self) -> None:
        from tests.support.processes import stop_process

        stop_process(self.proc, 10)
        self._stderr.close()


# --------------------------------------------------------------------------- Prometheus


def prom_samples(prom, selector: str, seconds: float) -> dict[tuple, list[tuple[float, float]]]:
    """Raw samples of the last ``seconds`` for every series matching ``selector``, keyed by sorted label pairs."""
    rows = prom.query(f"{selector}[{int(seconds) + 1}s]")
    return {tuple(sorted(r["metric"].items())): [(float(t), float(v)) for t, v in r["values"]] for r in rows}


def series_count(prom, selector: str) -> int:
    rows = prom.query(f"count({selector})")
    return int(float(rows[0]["value"][1])) if rows else 0


def head_series(prom) -> float:
    status, body = http_get(f"{prom.url}/metrics", timeout=10)
    for line in body.decode().splitlines():
        if line.startswith("prometheus_tsdb_head_series "):
            return float(line.split()[1])
    return float("nan")


# --------------------------------------------------------------------------- small statistics


def pct(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def spread(times: Iterable[float], origin: float) -> str:
    """first / median / last of ``times`` after ``origin``, and the busiest second."""
    rel = sorted(t - origin for t in times)
    if not rel:
        return "none"
    busiest = Counter(math.floor(t) for t in rel).most_common(1)[0]
    return (f"first {rel[0]:.1f} s, median {statistics.median(rel):.1f} s, last {rel[-1]:.1f} s; "
            f"{len(set(math.floor(t) for t in rel))} distinct seconds, at most {busiest[1]} in one second")


def process_cpu() -> Counter:
    """CPU seconds so far of every process on the machine, summed by name: a difference over a phase says who used
    the machine during it. A process that exits within the phase takes its whole time out of its name's sum, so such
    names are left out where that makes the difference negative."""
    out: Counter = Counter()
    for p in psutil.process_iter(["name", "cpu_times"]):
        times = p.info["cpu_times"]
        if times is not None:
            out[p.info["name"]] += times.user + times.system
    return out


def busiest(count: int = 6) -> str:
    """The processes using most CPU over two seconds, whoever started them: what else shares the machine."""
    procs = list(psutil.process_iter(["name"]))
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.Error:
            pass
    time.sleep(2)
    usage = []
    for p in procs:
        try:
            usage.append((p.cpu_percent(None), p.info["name"]))
        except psutil.Error:
            pass
    return ", ".join(f"{name} {share:.0f}%" for share, name in sorted(usage, reverse=True)[:count] if share >= 1)


def row(measure: str, value: str) -> None:
    print(f"| {measure} | {value} |", flush=True)


# --------------------------------------------------------------------------- phases


@dataclass
class Window:
    """Counts over a window: API server requests by verb and resource, CPU seconds of processes."""

    seconds: float
    requests: Counter
    agents: float
    cpu: dict[str, float]
    apiserver_live_heap_mib: float
    apiserver_rss_mib: float


def live_heap_mib(api: Api) -> float:
    """kube-apiserver's live heap: its heap profile with ``gc=1`` runs a collection first and reports HeapAlloc
    after it (go_memstats_heap_inuse_bytes moves by hundreds of MiB with the GC cycle at this size)."""
    status, body = api.request("GET", "/debug/pprof/heap?gc=1&debug=1", accept="text/plain")
    found = re.search(rb"^# HeapAlloc = (\d+)$", body, re.M) if status == 200 else None
    if found is None:
        raise RuntimeError(f"kube-apiserver heap profile: HTTP {status}: {body[:200]!r}")
    return int(found.group(1)) / 2**20


def measure_window(cluster: TrustCluster, api: Api, seconds: float, pids: dict[str, int]) -> tuple[Window, Snapshot, Snapshot]:
    """Counts over ``seconds``; the API server's RSS sampled every 10 s (median), its live heap read three times
    right after the window (the forced collections stay out of the CPU counted)."""
    before = scrape(cluster)
    cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
    rss = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(min(10.0, max(0.0, end - time.monotonic())))
        rss.append(rss_mib(apiserver_pid(cluster)))
    after = scrape(cluster)
    cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
    heaps = []
    for _ in range(3):
        heaps.append(live_heap_mib(api))
        time.sleep(2)
    elapsed = after.at - before.at
    requests = Counter({k: after.requests[k] - before.requests[k] for k in set(after.requests) | set(before.requests)})
    window = Window(elapsed, requests, after.agents - before.agents, cpu, statistics.median(heaps),
                    statistics.median(rss) if rss else math.nan)
    return window, before, after


def settle(cluster: TrustCluster, window: float = 30.0) -> list[float]:
    """Wait until the API server's CPU is steady: two consecutive windows within 0.05 cores or 10 % of each other
    (at most SETTLE_LIMIT). The population leaves work behind (KWOK's last status writes, the controllers'
    resyncs), and a baseline taken in it was busier than the window with the agents, leaving their share unresolved."""
    pid, rates = apiserver_pid(cluster), []
    deadline = time.monotonic() + SETTLE_LIMIT
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(window)
        rates.append((cpu_seconds(pid) - before) / window)
        log(f"settling: kube-apiserver {rates[-1]:.3f} cores over {window:.0f} s")
        if len(rates) >= 2 and abs(rates[-2] - rates[-1]) <= max(0.05, 0.1 * rates[-2]):
            break
    return rates


@dataclass(frozen=True, kw_only=True)
class ColdStart:
    """Every agent started at once, until each had listed its node's pods: the API server's LISTs meanwhile."""

    started: float  # wall clock
    synced: dict[str, float]  # node -> wall clock its agent reported every pod
    lists: float
    peak_lists: float
    list_p50: float
    list_p99: float

    @property
    def seconds(self) -> float:
        return max(self.synced.values()) - self.started


def cold_start(cluster: TrustCluster, agents: list[AgentContainer], expected: dict[str, int]) -> ColdStart:
    with Sampler(cluster) as sampler:
        time.sleep(2)
        started = time.time()
        before = sampler.samples[-1]
        for agent, port in zip(agents, free_ports(len(agents)), strict=True):
            agent.start(port)
        synced = wait_each(agents, lambda a: agent_pod_count(a) == expected[a.node], 600)
        time.sleep(3)
    after = sampler.samples[-1]
    return ColdStart(started=started, synced=synced, lists=after.lists - before.lists,
                     peak_lists=max((r for _, r in sampler.rates(lambda s: s.lists, since=started)), default=0.0),
                     list_p50=histogram_quantile(0.50, before.list_buckets, after.list_buckets),
                     list_p99=histogram_quantile(0.99, before.list_buckets, after.list_buckets))


@dataclass(frozen=True, kw_only=True)
class Share:
    """The agents' share of an API-server quantity: the window with them minus the mean of a window before and one
    after without them; half the gap between those two is the resolution, so drift is not counted as the agents'."""

    before: float
    after: float
    steady: float
    agents: int

    @property
    def per_agent(self) -> float:
        return (self.steady - (self.before + self.after) / 2) / self.agents

    @property
    def resolution(self) -> float:
        return abs(self.before - self.after) / 2 / self.agents

    @property
    def resolved(self) -> bool:
        return self.per_agent - self.resolution > 0

    @property
    def bound(self) -> float:
        """At most this much per agent: the estimate, taken as zero when it came out negative (the window with the
        agents quieter than the mean without them is noise, not a saving), plus the resolution."""
        return max(0.0, self.per_agent) + self.resolution

    def scaled(self, factor: float, unit: str) -> str:
        """The agents' share times ``factor`` (5,000 nodes), as an estimate with its resolution or as a bound."""
        if self.resolved:
            return f"{self.per_agent * factor:.2f} ± {self.resolution * factor:.2f} {unit}"
        return f"at most {self.bound * factor:.2f} {unit}"

    def describe(self, unit: str, scale: float = 1.0) -> str:
        if self.resolved:
            return f"{self.per_agent * scale:+.2f} ± {self.resolution * scale:.2f} {unit} per agent"
        return (f"below this run's resolution ({self.per_agent * scale:+.2f} ± {self.resolution * scale:.2f}): "
                f"at most {self.bound * scale:.2f} {unit} per agent")


def restart_storm(cluster: TrustCluster, api: Api, namespace: str, nodes: list[str], prefix: str,
                  seen: Callable[[dict[str, str]], dict[str, float]]) -> dict:
    """Restart the API server, create one marker pod per node as soon as it is back, and time the return."""
    with Sampler(cluster) as sampler:
        time.sleep(3)
        stopped = time.time()
        back_mono = cluster.restart_apiserver(down_seconds=DOWN_SECONDS)
        back = time.time() - (time.monotonic() - back_mono)
        markers = {}
        for node in nodes:
            name = f"marker-{prefix}-{node}"
            body = json.dumps(for_create({"metadata": {"name": name}, "spec": {"containers": [
                {"name": "m", "image": "registry.invalid/m:1", "resources": {"requests": {"cpu": "10m"}}}]}},
                nodeName=node)).encode()
            status, text = api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
            if status != 201:
                raise RuntimeError(f"marker on {node}: HTTP {status}: {text[:300]!r}")
            markers[node] = f"{namespace}/{name}"
        markers_at = time.time()
        resynced = seen(markers)
        time.sleep(10)
    # From the SIGTERM: the restarted API server serves requests well before /readyz says ok, and clients
    # reconnect then (a pair across the restart is skipped: the new process's counters start at zero).
    agent_rates = sampler.rates(lambda s: s.agents, since=stopped)
    all_rates = sampler.rates(lambda s: s.total, since=stopped)
    list_rates = sampler.rates(lambda s: s.lists, since=stopped)
    fresh = [s for s in sampler.samples if s.at >= stopped]
    return {"stopped": stopped, "back": back, "markers_at": markers_at, "resynced": resynced,
            "peak_agents": max((r for _, r in agent_rates), default=0.0),
            "peak_all": max((r for _, r in all_rates), default=0.0),
            "peak_lists": max((r for _, r in list_rates), default=0.0),
            "agent_requests": fresh[-1].agents if fresh else float("nan"),
            "per_second": [(round(t - back, 1), round(r, 1)) for t, r in agent_rates]}


@dataclass(frozen=True, kw_only=True)
class ChurnPlan:
    """One churn writer's share: operations ``i`` with ``i % shards == shard``, timed from ``start`` (wall clock)."""

    address: ApiAddress
    namespace: str
    nodes: list[str]
    start: float
    rate: float
    seconds: float
    lifetime: float
    shard: int
    shards: int
    threads: int
    kwok: bool  # KWOK sets the pods Running (one status write each), or leaves them alone


def churn_shard(plan: ChurnPlan) -> dict:
    """Run one writer's share in its own process (one interpreter's GIL and TLS could not issue 200 writes per second
    on this machine: the last single-process run reached 65 with a dispatch lag of 70 s). Pods are created bound
    (spec.nodeName, round robin), each deleted with grace 0 ``lifetime`` seconds after its creation was due. Without
    ``plan.kwok`` KWOK leaves them Pending, so the API server takes two writes a pod, the ones the rate names; the
    agents value a bound Pending pod as a Running one (its requests)."""
    api, templates = Api(plan.address), pod_templates()
    total = int(plan.rate * plan.seconds)
    mine = range(plan.shard, total, plan.shards)
    ops = sorted([(i / plan.rate, "create", i) for i in mine] + [(i / plan.rate + plan.lifetime, "delete", i) for i in mine])
    created: dict[str, tuple[str, float]] = {}
    deleted: dict[str, float] = {}
    failures: Counter = Counter()
    late: list[float] = []
    lock = threading.Lock()

    def do(op: str, i: int, due: float) -> None:
        with lock:
            late.append(time.time() - due)
        name, node = f"churn-{i:06d}", plan.nodes[i % len(plan.nodes)]
        if op == "create":
            status, _ = api.request("POST", f"/api/v1/namespaces/{plan.namespace}/pods", pod_body(templates, i, name, node, plan.kwok))
            with lock:
                if status == 201:
                    created[name] = (node, time.time())
                else:
                    failures[f"create {status}"] += 1
            return
        with lock:
            known = name in created
        if not known:
            with lock:
                failures["delete before its create returned"] += 1
            return
        status, _ = api.request("DELETE", f"/api/v1/namespaces/{plan.namespace}/pods/{name}",
                                json.dumps({"gracePeriodSeconds": 0}).encode())
        with lock:
            if status == 200:
                deleted[name] = time.time()
            else:
                failures[f"delete {status}"] += 1

    cpu0 = time.process_time()
    with ThreadPoolExecutor(plan.threads) as pool:
        futures = []
        for offset, op, i in ops:
            wait = plan.start + offset - time.time()
            if wait > 0:
                time.sleep(wait)
            futures.append(pool.submit(do, op, i, plan.start + offset))
        for f in futures:
            f.result()
    return {"created": created, "deleted": deleted, "failures": failures, "late": late,
            "cpu": time.process_time() - cpu0}


def churn(address: ApiAddress, namespace: str, nodes: list[str]) -> tuple[dict[str, tuple[str, float]], dict[str, float], dict]:
    """CHURN_RATE creations per second over ``nodes`` for CHURN_SECONDS, each pod deleted CHURN_LIFETIME seconds
    later, written by CHURN_WORKERS processes; returns per pod (node, creation answered) and deletion answered (wall
    clock), and the achieved rates."""
    start = time.time() + 5.0  # the workers' interpreters start before the first operation is due
    plans = [ChurnPlan(address=address, namespace=namespace, nodes=nodes, start=start, rate=CHURN_RATE,
                       seconds=CHURN_SECONDS, lifetime=CHURN_LIFETIME, shard=k, shards=CHURN_WORKERS,
                       threads=WRITERS * 2, kwok=CHURN_KWOK) for k in range(CHURN_WORKERS)]
    with ProcessPoolExecutor(CHURN_WORKERS, mp_context=multiprocessing.get_context("spawn")) as pool:
        parts = list(pool.map(churn_shard, plans))
    ended = time.time()
    created = {k: v for part in parts for k, v in part["created"].items()}
    deleted = {k: v for part in parts for k, v in part["deleted"].items()}
    failures = sum((part["failures"] for part in parts), Counter())
    late = [x for part in parts for x in part["late"]]
    stats = {"start": start, "ended": ended, "failures": dict(failures), "ops": 2 * int(CHURN_RATE * CHURN_SECONDS),
             "dispatch_lag_p99": pct(late, 0.99) if late else 0.0,
             "writer_cpu": sum(part["cpu"] for part in parts) / (ended - start),
             "creates_per_s": len(created) / (max(t for _, t in created.values()) - start) if created else 0.0,
             "deletes_per_s": len(deleted) / (max(deleted.values()) - start - CHURN_LIFETIME) if deleted else 0.0}
    return created, deleted, stats


def churn_latencies(prom, created: dict[str, tuple[str, float]], deleted: dict[str, float], measured: set[str],
                    window: float) -> dict:
    """Per churn pod on a measured node: API write to first sample in Prometheus (creation) and to the first export
    of its node without it (deletion). Sample timestamps are the agent's collection times; remote write is
    synchronous, so a sample is queryable once the agent's push has returned."""
    pods = prom_samples(prom, 'pod_or_vm_cpu_requests{k8s_pod_name=~"churn-.*"}', window)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for labels, values in pods.items():
        name = dict(labels)["k8s_pod_name"]
        first[name] = min(first.get(name, math.inf), values[0][0])
        last[name] = max(last.get(name, -math.inf), values[-1][0])
    exports: dict[str, list[float]] = defaultdict(list)
    for labels, values in prom_samples(prom, "node_requests_agent_synced", window).items():
        exports[dict(labels)["k8s_node_name"]].extend(t for t, _ in values)
    for times in exports.values():
        times.sort()
    create_lat, delete_lat, never, after_delete = [], [], 0, 0
    for name, (node, at) in created.items():
        if node not in measured:
            continue
        if name not in first:
            never += 1
            continue
        create_lat.append(first[name] - at)
        if name in deleted:
            gone = next((t for t in exports[node] if t > last[name]), None)
            if gone is not None:
                delete_lat.append(gone - deleted[name])
            if last[name] > deleted[name] + 1.0:
                after_delete += 1
    return {"create": create_lat, "delete": delete_lat, "never": never, "after_delete": after_delete}


# --------------------------------------------------------------------------- the run


def main() -> None:
    print(f"machine: {machine()}; {load()} at start; busiest processes: {busiest()}", flush=True)
    print(f"sizes: {NODES} KWOK nodes x {PODS_PER_NODE} pods, {AGENTS} agents, steady {STEADY_SECONDS:.0f} s, "
          f"churn {CHURN_RATE:.0f}/s for {CHURN_SECONDS:.0f} s (lifetime {CHURN_LIFETIME:.0f} s), "
          f"scheduler/controller-manager client QPS {CLIENT_QPS}", flush=True)
    if ANCHOR:
        log(f"client-go anchor: {anchor_bin()}")
    workdir = Path(tempfile.mkdtemp(prefix="nra-scale-"))
    log(f"workdir {workdir}")
    # Profiling on: /debug/pprof/heap?gc=1 collects before it answers, so the live heap is read without GC noise.
    cluster = ScaleCluster(workdir / "cluster", apiserver_flags=["--profiling=true"]).start()
    kwok = prom = collector = anchor = None
    agents: list[AgentContainer] = []
    try:
        cluster.install_shipped_rbac()
        api = Api(ApiAddress.admin(cluster))
        prom = remote_write_prometheus(workdir / "prometheus").start()
        collector = Collector(workdir / "otelcol", SHIPPED_CONFIG,
                              env=collector_env(cluster, f"{prom.url}/api/v1/write")).start()
        kwok = Kwok(cluster, workdir=workdir / "kwok", lease_seconds=NODE_LEASE_SECONDS).start()
        deployment = deploy(cluster)
        nodes = [f"kwok-{i:04d}" for i in range(NODES)]
        started = time.monotonic()
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(lambda n: kwok.add_node(n, cpu="64", memory="256Gi", pods=PODS_PER_NODE), nodes))
        kwok.wait_ready(nodes, timeout=900)
        nodes_ready = time.monotonic() - started
        log(f"{NODES} KWOK nodes Ready in {nodes_ready:.0f} s")
        wait_until(lambda: scheduler_metric(cluster, "scheduler_schedule_attempts_total", result="scheduled") >= NODES,
                   600, interval=2, message=f"the DaemonSet's {NODES} pods bound")
        log(f"DaemonSet pods bound on every node {time.monotonic() - started:.0f} s after the first node")
        namespace = cluster.create_namespace("scale")
        workload = NODES * (PODS_PER_NODE - 1)
        population = populate(cluster, api, namespace, workload, expected_scheduled=NODES * PODS_PER_NODE)
        log(f"population done: {population}")
        measured = nodes[:: max(1, NODES // AGENTS)][:AGENTS]
        expected = {n: count_pods(api, f"spec.nodeName={n}") for n in measured}

        apiserver_rss0 = rss_mib(apiserver_pid(cluster))
        collector_rss0 = rss_mib(collector.pid)
        settled = settle(cluster)
        log(f"baseline window without agents (before): {BASELINE_SECONDS:.0f} s")
        base_before, _, _ = measure_window(cluster, api, BASELINE_SECONDS, {"apiserver": apiserver_pid(cluster)})

        # ---------------------------------------------------------------- cold start
        agents = prepare_agents(cluster, deployment, measured, workdir / "agents", collector.otlp_http_endpoint)
        cold1 = cold_start(cluster, agents, expected)
        log(f"{AGENTS} agents synced {cold1.seconds:.1f} s after the start")

        # ---------------------------------------------------------------- steady state
        time.sleep(EXPORT_INTERVAL * 2)  # every agent exported at least once
        pids = {"apiserver": apiserver_pid(cluster), "collector": collector.pid,
                **{a.node: a.proc.pid for a in agents}}
        runtime0 = {a.node: a.runtime() for a in agents}
        log(f"steady window: {STEADY_SECONDS:.0f} s ({load()})")
        steady, steady_from, steady_to = measure_window(cluster, api, STEADY_SECONDS, pids)
        runtime1 = {a.node: a.runtime() for a in agents}
        apiserver_rss1 = rss_mib(apiserver_pid(cluster))
        collector_rss1 = rss_mib(collector.pid)
        agent_rss = [a.rss_bytes() / 2**20 for a in agents]
        agent_cpu = [steady.cpu[a.node] / steady.seconds * 100 for a in agents]
        all_series = series_count(prom, '{k8s_node_name=~".+"}')
        pod_series = series_count(prom, '{k8s_pod_name=~".+"}')
        prom_head = head_series(prom)
        load_steady = f"{load()}; busiest: {busiest()}"

        def own(name: str) -> int:
            return sum(sum(r[name].values()) for r in runtime1.values()) - sum(sum(r[name].values()) for r in runtime0.values())

        agent_watch_starts, agent_relists = own("watch_starts"), own("relists")
        watches_open = {r: steady_to.watches[r] for r in ("pods", "nodes")}

        # ---------------------------------------------------------------- baseline after, second cold start
        for agent in agents:
            agent.stop()
        time.sleep(15)
        log(f"baseline window without agents (after): {BASELINE_SECONDS:.0f} s ({load()})")
        base_after, _, _ = measure_window(cluster, api, BASELINE_SECONDS, {"apiserver": apiserver_pid(cluster)})
        cold2 = cold_start(cluster, agents, expected)
        log(f"{AGENTS} agents synced again {cold2.seconds:.1f} s after the second start")
        time.sleep(EXPORT_INTERVAL * 2)

        # ---------------------------------------------------------------- API server restart, agents
        log("restarting the API server with every agent connected")

        def agents_saw(markers: dict[str, str]) -> dict[str, float]:
            return wait_each(agents, lambda a: markers[a.node] in pods_of(a), 600)

        failed0 = sum(sum(a.runtime()["requests_failed"].values()) for a in agents)
        storm = restart_storm(cluster, api, namespace, measured, "agents", agents_saw)
        storm_failed = sum(sum(a.runtime()["requests_failed"].values()) for a in agents) - failed0
        relisted = {a.node: min(log_events(a, "listed", storm["stopped"]), default=math.nan) for a in agents}
        first_ok = {n: t for n, t in relisted.items() if not math.isnan(t)}
        resync_all = max(storm["resynced"].values()) - storm["back"]
        outage = prom_samples(prom, "node_requests_agent_last_event_age_seconds",
                              time.time() - storm["stopped"] + EXPORT_INTERVAL)
        ages = []
        for labels, values in outage.items():
            node = dict(labels)["k8s_node_name"]
            during = [v for t, v in values if storm["stopped"] < t <= storm["resynced"].get(node, storm["back"])]
            if during:
                ages.append(max(during))
        marker_prom = prom_samples(prom, 'pod_or_vm_cpu_requests{k8s_pod_name=~"marker-agents-.*"}', 300)
        marker_first = {dict(k)["k8s_node_name"]: v[0][0] for k, v in marker_prom.items()}

        # ---------------------------------------------------------------- churn
        settled_churn = settle(cluster)  # the restart's relists and resyncs are over before the churn starts
        log(f"churn: {CHURN_RATE:.0f} creations and deletions per second for {CHURN_SECONDS:.0f} s ({load()})")
        apiserver_cpu0, machine_cpu0, cpu_from = cpu_seconds(apiserver_pid(cluster)), process_cpu(), time.time()
        created, deleted, churn_stats = churn(ApiAddress.admin(cluster), namespace, nodes)
        churn_seconds = churn_stats["ended"] - cpu_from  # the CPU counted includes the writers' 5 s start
        apiserver_churn_cpu = (cpu_seconds(apiserver_pid(cluster)) - apiserver_cpu0) / churn_seconds
        machine_cpu = process_cpu()
        churn_cpu = sorted(((machine_cpu[k] - machine_cpu0.get(k, 0.0)) / churn_seconds, k) for k in machine_cpu
                           if machine_cpu[k] >= machine_cpu0.get(k, 0.0))[::-1]
        log(f"churn CPU by process (cores): {', '.join(f'{k} {v:.2f}' for v, k in churn_cpu[:10])}")
        time.sleep(2 * EXPORT_INTERVAL + 10)
        lat = churn_latencies(prom, created, deleted, set(measured), time.time() - churn_stats["start"] + 5)
        log(f"churn done: {churn_stats}")

        # ---------------------------------------------------------------- the client-go anchor
        anchor_storm = None
        if ANCHOR:
            for agent in agents:
                agent.stop()
            time.sleep(5)
            log(f"client-go anchor: {AGENTS} nodes' informers")
            anchor = Anchor(cluster, agents, workdir / "anchor")
            anchor_from = time.time()
            deadline = time.monotonic() + 600
            while len(anchor.nodes_with("synced")) < AGENTS:
                if time.monotonic() > deadline or anchor.proc.poll() is not None:
                    raise RuntimeError(f"anchor: {len(anchor.nodes_with('synced'))} of {AGENTS} synced")
                time.sleep(0.5)
            anchor_cold = max(anchor.nodes_with("synced").values()) - anchor_from
            time.sleep(20)

            def anchor_saw(markers: dict[str, str]) -> dict[str, float]:
                deadline = time.monotonic() + 600
                while True:
                    seen: dict[str, float] = {}
                    for e in list(anchor.events):
                        if e["event"] == "marker" and e.get("detail") == markers.get(e["node"]):
                            seen.setdefault(e["node"], e["t"])
                    if len(seen) == len(markers) or time.monotonic() > deadline:
                        return seen
                    time.sleep(0.2)

            anchor_storm = restart_storm(cluster, api, namespace, measured, "anchor", anchor_saw)
            reconnect_kinds = Counter(e["event"] for e in anchor.events if e["t"] >= anchor_storm["stopped"])
            anchor_first_ok = {}
            for e in anchor.events:
                if e["t"] >= anchor_storm["stopped"] and e["event"] in ("list", "watchlist") and e["resource"] == "pods":
                    anchor_first_ok.setdefault(e["node"], e["t"])
            anchor_rss = rss_mib(anchor.proc.pid)

        # ---------------------------------------------------------------- report
        n = AGENTS
        print(f"\n### Cluster scale by simulation: {NODES} KWOK nodes x {PODS_PER_NODE} pods, {n} agents, "
              f"kube-apiserver {cluster.release}\n")
        print("| measure | value |\n|---|---:|")
        row("machine", f"{machine()}; {load_steady} during the steady window")
        row("KWOK nodes Ready", f"{NODES} in {nodes_ready:.0f} s")
        row("workload pods created (unbound, POST from 16 threads)", f"{population.pods} in {population.created_seconds:.0f} s "
            f"({population.pods / population.created_seconds:.0f}/s)")
        row("all pods (DaemonSet's included) bound by kube-scheduler / Running by KWOK",
            f"{population.scheduled_seconds:.0f} s ({NODES * PODS_PER_NODE / population.scheduled_seconds:.0f} pods/s) / "
            f"{population.running_seconds:.0f} s after the first create")
        row("settling after the population: kube-apiserver CPU per 30 s window",
            ", ".join(f"{r:.2f}" for r in settled) + " cores")
        for label, cold in (("cold start", cold1), ("second cold start (after the no-agent window)", cold2)):
            row(f"{label}: all agents started at once, until every one had listed its pods and was ready",
                f"{cold.seconds:.1f} s ({spread(cold.synced.values(), cold.started)})")
            row(f"{label}: LISTs of pods and nodes (all clients) / peak LIST rate",
                f"{cold.lists:.0f} / {cold.peak_lists:.0f} per s")
            row(f"{label}: LIST latency of pods and nodes, p50 / p99 (apiserver_request_duration_seconds)",
                f"{cold.list_p50 * 1000:.0f} / {cold.list_p99 * 1000:.0f} ms")
        row("steady window", f"{steady.seconds:.0f} s")
        row(f"steady: agents' requests (APF flow schema `{AGENT_FLOW}`)",
            f"{steady.agents:.0f} = {steady.agents / n / steady.seconds * 60:.2f} per agent per minute")
        row("steady: agents' own count: watch starts / LISTs",
            f"{agent_watch_starts} / {agent_relists} ({agent_watch_starts / n / steady.seconds * 60:.2f} watch starts per agent per minute)")
        base_seconds = base_before.seconds + base_after.seconds
        for verb in ("LIST", "WATCH", "GET"):
            for resource in ("pods", "nodes"):
                key = (verb, resource)
                value = steady.requests[key] - (base_before.requests[key] + base_after.requests[key]) * steady.seconds / base_seconds
                row(f"steady: apiserver_request_total {verb} {resource}, net of the no-agent windows",
                    f"{value:+.0f} ({value / n / steady.seconds * 60:+.3f} per agent per minute)")
        row("steady: WATCH requests open on pods / nodes (all clients; agents' share: 2 per agent)",
            f"{watches_open['pods']:.0f} / {watches_open['nodes']:.0f}")
        api_cpu = Share(before=base_before.cpu["apiserver"] / base_before.seconds, steady=steady.cpu["apiserver"] / steady.seconds,
                        after=base_after.cpu["apiserver"] / base_after.seconds, agents=n)
        api_heap = Share(before=base_before.apiserver_live_heap_mib, steady=steady.apiserver_live_heap_mib,
                         after=base_after.apiserver_live_heap_mib, agents=n)
        row("kube-apiserver CPU without (before) / with / without (after) the agents",
            f"{api_cpu.before:.3f} / {api_cpu.steady:.3f} / {api_cpu.after:.3f} cores: {api_cpu.describe('millicores', 1000)}")
        row("kube-apiserver live heap (after a forced collection, median of 3 at each window's end), without (before) / with / without (after) the agents",
            f"{api_heap.before:.0f} / {api_heap.steady:.0f} / {api_heap.after:.0f} MiB: {api_heap.describe('MiB')}")
        row("kube-apiserver RSS, median over each window, without (before) / with / without (after) the agents",
            f"{base_before.apiserver_rss_mib:.0f} / {steady.apiserver_rss_mib:.0f} / {base_after.apiserver_rss_mib:.0f} MiB "
            f"(after the population {apiserver_rss0:.0f}; after the steady window {apiserver_rss1:.0f})")
        row("agent RSS (min / median / max)", f"{min(agent_rss):.1f} / {statistics.median(agent_rss):.1f} / {max(agent_rss):.1f} MiB")
        row("agent CPU (median / max)", f"{statistics.median(agent_cpu):.2f} / {max(agent_cpu):.2f} % of a core")
        col_cpu = steady.cpu["collector"] / steady.seconds
        row("series in Prometheus (agents' job) / of them per pod / Prometheus head series",
            f"{all_series} / {pod_series} / {prom_head:.0f}")
        row("Collector CPU / RSS (idle before the agents; with them)",
            f"{col_cpu * 1000:.1f} millicores / {collector_rss0:.0f}; {collector_rss1:.0f} MiB")
        row("Collector per 1,000 series", f"{col_cpu * 1000 / all_series * 1000:.2f} millicores, "
            f"{(collector_rss1 - collector_rss0) / all_series * 1000:.2f} MiB above idle")
        row("restart: SIGTERM to ready again", f"{storm['back'] - storm['stopped']:.1f} s")
        row("restart: peak requests/s on the new API server, all clients (agents' flow schema) / LISTs",
            f"{storm['peak_all']:.0f} ({storm['peak_agents']:.0f}) / {storm['peak_lists']:.0f}")
        row("restart: agents' requests on the new API server until 10 s after the last resync",
            f"{storm['agent_requests']:.0f} ({storm['agent_requests'] / n:.1f} per agent)")
        row("restart: agents' failed requests and broken streams, by their own count (while down included)",
            f"{storm_failed} ({storm_failed / n:.1f} per agent)")
        row("restart: agents' relists after the API server was back (from their logs)",
            f"{len(first_ok)} of {n}: {spread(first_ok.values(), storm['back'])}")
        row("restart: agents' requests per second on the new API server (s after ready: rate)",
            ", ".join(f"{t:g}: {r:g}" for t, r in storm["per_second"][:40]))
        row("restart: API server ready until every agent reported a pod created right after",
            f"{resync_all:.1f} s ({spread(storm['resynced'].values(), storm['back'])})")
        row("restart: that pod in Prometheus, after the API server was ready (per agent)",
            spread(marker_first.values(), storm["back"]))
        row("restart: exported last_event_age_seconds during the outage (per agent max: min / median)",
            f"{min(ages, default=math.nan):.0f} / {statistics.median(ages) if ages else math.nan:.0f} s "
            f"(outage {storm['back'] - storm['stopped']:.0f} s)")
        row("churn: creations / deletions per second achieved (target)",
            f"{churn_stats['creates_per_s']:.1f} / {churn_stats['deletes_per_s']:.1f} ({CHURN_RATE:.0f}); "
            f"failures {churn_stats['failures'] or 'none'}; dispatch lag p99 {churn_stats['dispatch_lag_p99']:.2f} s; "
            f"{CHURN_WORKERS} writer processes used {churn_stats['writer_cpu']:.2f} cores")
        row("churn: kube-apiserver CPU during churn", f"{apiserver_churn_cpu:.2f} cores (settled before: "
            + ", ".join(f"{r:.2f}" for r in settled_churn) + " cores)")
        row("churn: CPU by process during churn (cores)", ", ".join(f"{k} {v:.2f}" for v, k in churn_cpu[:8]))
        row("churn: KWOK sets the churn pods Running", "yes (one status write each)" if CHURN_KWOK
            else "no (each pod is one create and one delete)")
        row(f"churn: API write to value in Prometheus, creations on measured nodes ({len(lat['create'])}), p50 / p99 / max",
            f"{pct(lat['create'], .5):.1f} / {pct(lat['create'], .99):.1f} / {max(lat['create'], default=math.nan):.1f} s "
            f"(export interval {EXPORT_INTERVAL:.0f} s; never seen: {lat['never']})")
        row(f"churn: API write to absence in Prometheus, deletions ({len(lat['delete'])}), p50 / p99 / max",
            f"{pct(lat['delete'], .5):.1f} / {pct(lat['delete'], .99):.1f} / {max(lat['delete'], default=math.nan):.1f} s "
            f"(exported after the deletion: {lat['after_delete']})")
        if anchor_storm is not None:
            row("anchor (client-go informers, same nodes and tokens): all synced after start", f"{anchor_cold:.1f} s")
            row("anchor restart: SIGTERM to ready again", f"{anchor_storm['back'] - anchor_storm['stopped']:.1f} s")
            row("anchor restart: peak requests/s (flow schema) / LISTs",
                f"{anchor_storm['peak_agents']:.0f} / {anchor_storm['peak_lists']:.0f}")
            row("anchor restart: requests on the new API server until 10 s after the last resync",
                f"{anchor_storm['agent_requests']:.0f} ({anchor_storm['agent_requests'] / n:.1f} per node)")
            row("anchor restart: first successful pod LIST or streaming list per node",
                f"{len(anchor_first_ok)} of {n}: {spread(anchor_first_ok.values(), anchor_storm['back'])}")
            row("anchor restart: its calls after the stop, by kind", ", ".join(f"{k} {v}" for k, v in sorted(reconnect_kinds.items())))
            resync_anchor = (max(anchor_storm["resynced"].values()) - anchor_storm["back"]) if anchor_storm["resynced"] else math.nan
            row("anchor restart: ready until every informer saw its marker pod",
                f"{resync_anchor:.1f} s ({len(anchor_storm['resynced'])} of {n}; "
                f"{spread(anchor_storm['resynced'].values(), anchor_storm['back'])})")
            row("anchor restart: requests per second (s after ready: rate)",
                ", ".join(f"{t:g}: {r:g}" for t, r in anchor_storm["per_second"][:40]))
            row("anchor process RSS (all its informers)", f"{anchor_rss:.0f} MiB")

        # ---------------------------------------------------------------- 5,000 nodes x 110 pods
        big_nodes, big_pods = 5000, 110
        per_node_series = (all_series - pod_series) / n
        per_pod_series = pod_series / sum(expected.values())
        big_series = big_nodes * (per_node_series + big_pods * per_pod_series)
        col_cores = big_series / 1000 * (col_cpu / all_series * 1000)
        col_mib = big_series / 1000 * ((collector_rss1 - collector_rss0) / all_series * 1000)
        api_big = (f"CPU {api_cpu.scaled(big_nodes, 'cores')}, live heap {api_heap.scaled(big_nodes / 1024, 'GiB')} "
                   f"(per agent: {api_cpu.describe('millicores', 1000)}; {api_heap.describe('MiB')})")
        print(f"\n5,000 nodes x 110 pods, from the slopes above: series {per_node_series:.1f} per node + "
              f"{per_pod_series:.2f} per pod -> {big_series:,.0f}; API server {api_big}; steady requests "
              f"{steady.agents / n / steady.seconds * big_nodes:.1f}/s; Collector {col_cores:.2f} cores, "
              f"{col_mib:,.0f} MiB above idle -> {max(1, math.ceil(col_cores / 1.0)):d} replica(s) of 1 core")
    finally:
        if anchor is not None:
            anchor.stop()
        for agent in agents:
            agent.stop(timeout=5)
        for part in (collector, prom, kwok):
            if part is not None:
                part.stop()
        cluster.stop()
        log(f"stopped; logs under {workdir}")


if __name__ == "__main__":
    main()
