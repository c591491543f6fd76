"""What a sender can make the Collector hold and write (issue 29, item 4; issue 38, items 5-7), on the real chain.

Tokens from the real API server (bound to agent pods on KWOK's Nodes), the shipped Collector config on the built
Collector (oidc, admission, nodeidentity, remote write) with the Deployment's GOMEMLIMIT, and Prometheus 3 with its
remote-write receiver: the sender holds a valid agent token for node-a, as a process that took over that agent would,
or a tenant's token (a pod of another ServiceAccount, with the Collector's audience).

- the flood: 30 parallel pushes that gunzip to 20 MiB, over the body limit, and the largest the limits admit;
- decode before refuse (issue 38, 5): eight senders of 4 MiB (and just-under-limit) bodies of bare points, with a
  tenant's token and with the agent's: refused before decoding, the Collector's peak memory bounded;
- slow uploads (issue 38, 6): eight connections trickling a byte a second; another node's pushes still admitted;
- the budgets: one push of 300 pods for node-a writes 220 (max_pods_per_node); one uid under thousands of pod names
  and free info values (issue 38, 7) write at most max_series_per_node series; uid-less per-pod points none;
- histogram bounds: a point of 130,000 bounds is refused on its items; points of thousands of bounds are dropped
  (max_histogram_buckets); fresh bounds on every push write at most max_series_per_node series;
- the declared types: an allowed gauge's name sent as a histogram or a summary creates no series.

The Prometheus NetworkPolicy (the rogue writer straight to Prometheus) is checked as rendered in
tests/deploy/test_deploy.py: no CNI enforcing NetworkPolicy runs here (docs/testing.md).
"""

from __future__ import annotations

import gzip
import re
import socket
import ssl
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from opentelemetry.proto.metrics.v1 import metrics_pb2

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from testkit.collector import SHIPPED_CONFIG, Collector, collector_container, gauge, go_runtime_env, otlp_request
from testkit.honest_push import LONGEST_NODE, agents_push, largest_honest_pods
from testkit.otlp_receiver import points_of
from testkit.http import http_get, request as http_request
from testkit.trust import POD, Pusher, collector_env, remote_write_prometheus
from testkit.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.collector]

SHIPPED = yaml.safe_load(SHIPPED_CONFIG.read_text())
MAX_BODY = SHIPPED["receivers"]["otlp"]["protocols"]["http"]["max_request_body_size"]
BUDGET = int(re.search(r":-(\d+)\}", SHIPPED["processors"]["nodeidentity"]["max_pods_per_node"]).group(1))
SERIES_BUDGET = int(re.search(r":-(\d+)\}", SHIPPED["processors"]["nodeidentity"]["max_series_per_node"]).group(1))
MAX_ITEMS = SHIPPED["extensions"]["admission"]["max_items_per_request"]
MAX_BUCKETS = SHIPPED["processors"]["nodeidentity"]["max_histogram_buckets"]
HISTOGRAMS = sorted(SHIPPED["processors"]["nodeidentity"]["metrics"]["histogram"])
OLD_MAX_BODY = 20 * 2**20  # confighttp's default, what the shipped receiver took before
MEMORY_LIMIT_MIB = int(collector_container()["resources"]["limits"]["memory"].removesuffix("Mi"))
#: The Go runtime's soft memory limit as the Deployment sets it (the Collector runs with it here too).
GOMEMLIMIT = go_runtime_env()


def _token(cluster, node: str, service_account: str = "node-requests-agent", namespace: str = "node-requests-agent"):
    """A Collector-audience token of a fresh pod on ``node``: the agent's, or a tenant's (another ServiceAccount)."""
    pod = cluster.agent_pod(node, name=f"sender-{time.time_ns() % 10**12}", service_account=service_account,
                            namespace=namespace)
    return cluster.pod_token(pod)


@pytest.fixture
def chain(trust_cluster, tmp_path):
    """A fresh Collector (its own budgets) writing into a fresh Prometheus, and node-a's agent token."""
    with remote_write_prometheus(tmp_path / "prometheus") as prom, \
            Collector(tmp_path / "otelcol", SHIPPED_CONFIG,
                      env={**collector_env(trust_cluster, f"{prom.url}/api/v1/write"), **GOMEMLIMIT}) as otelcol:
        yield otelcol, prom, _token(trust_cluster, "node-a")


def _pods(n: int, prefix: str, name_length: int = 20) -> list[tuple[dict, float]]:
    """``n`` pods' points as the agent sends them, with pod names ``name_length`` long."""
    return [({**POD, "k8s.pod.name": f"{prefix}-{i}".ljust(name_length, "x"), "k8s.pod.uid": f"{prefix}-uid-{i}"}, 0.25)
            for i in range(n)]


def _long_pods(n: int, prefix: str) -> bytes:
    """``n`` pods of an allowed metric with the longest pod names Kubernetes allows (253), as protobuf."""
    return otlp_request({}, [gauge("pod_or_vm_cpu_requests", "{cpu}", _pods(n, prefix, 253))]).SerializeToString()


def _body_of_size(size: int, prefix: str) -> bytes:
    """A valid OTLP request of just under ``size`` bytes: pods with the longest names, filling the body limit."""
    per_point = len(_long_pods(1000, prefix)) / 1000
    n = int(size / per_point) + 50
    while len(body := _long_pods(n, prefix)) > size:
        n -= max(1, int((len(body) - size) / per_point))
    return body


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _bare_points(size: int) -> bytes:
    """An ExportMetricsServiceRequest of about ``size`` bytes: one allowed gauge of bare points (a value only, 11
    bytes each on the wire, each a whole NumberDataPoint once decoded): the issue's decode-before-refuse body."""
    point = _field(1, b"\x21" + bytes(8))  # Gauge.data_points: NumberDataPoint{as_double: 0}
    gauge_body = point * ((size - 64) // len(point))
    metric = _field(1, b"pod_or_vm_cpu_requests") + _field(5, gauge_body)
    return _field(1, _field(2, _field(2, metric)))  # request.resource_metrics.scope_metrics.metrics


def _post(url: str, token: str, body: bytes, gzipped: bool, ca_file: str | None) -> int:
    """One push of ``body`` to the Collector at ``url``, verified against ``ca_file`` (its TLS)."""
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    try:
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        return http_request(url, "POST", 60.0, data=body, headers=headers, context=context)[0]
    except OSError:  # the connection closed while the body was still being sent: not accepted either
        return -1


def _memory_kib(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(re.search(rf"^{k}:\s+(\d+) kB", status, re.M).group(1)) for k in ("VmRSS", "VmHWM")}


def _dropped(otelcol: Collector, node: str = "node-a") -> dict[str, float]:
    """otelcol_nodeidentity_dropped_points of ``node`` by reason, from the Collector's own metrics."""
    status, body = http_get(otelcol.telemetry_url)
    assert status == 200
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        if line.startswith("otelcol_nodeidentity_dropped_points{"):  # the name docs/deployment.md gives
            reason = re.search(r'reason="([^"]+)"', line).group(1)
            if f'node="{node}"' not in line:
                continue
            out[reason] = out.get(reason, 0) + float(line.rsplit(" ", 1)[1])
    return out


def _refused(otelcol: Collector) -> dict[tuple[str, str], float]:
    """otelcol_admission_refused_requests by (reason, node), from the Collector's own metrics."""
    status, body = http_get(otelcol.telemetry_url)
    assert status == 200
    out: dict[tuple[str, str], float] = {}
    for line in body.decode().splitlines():
        if line.startswith("otelcol_admission_refused_requests{"):  # the name docs/metrics.md gives
            key = (re.search(r'reason="([^"]*)"', line).group(1), re.search(r'node="([^"]*)"', line).group(1))
            out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return out


def test_thirty_parallel_pushes_over_the_limits_are_refused_unread_and_memory_bounded(chain):
    otelcol, prom, token = chain
    url = otelcol.otlp_http_metrics_url
    # The decompression bomb: a gzip body of a few KiB that expands to confighttp's default limit (20 MiB).
    bomb = gzip.compress(_body_of_size(OLD_MAX_BODY, "bomb"), 9)
    # Just over the limit, uncompressed and gzipped; and the largest push the limits admit: as many pods with the
    # longest names as max_items_per_request takes (each point: itself, 4 attributes and their values).
    over = _body_of_size(MAX_BODY + 64 * 1024, "over")
    over_gz = gzip.compress(over, 1)  # small on the wire, over the limit once gunzipped
    assert len(over) > MAX_BODY
    largest = _long_pods((MAX_ITEMS - 6) // 9, "max")
    largest_gz = gzip.compress(largest, 6)
    print(f"bodies: bomb {len(bomb)} B gzipped -> {OLD_MAX_BODY} B; over {len(over)} B; largest {len(largest)} B "
          f"({len(largest_gz)} B gzipped); limit {MAX_BODY} B")
    before = _memory_kib(otelcol.pid)
    ca = otelcol.ca_file
    with ThreadPoolExecutor(30) as pool:
        bombs = list(pool.map(lambda _: _post(url, token, bomb, True, ca), range(30)))
        overs = list(pool.map(lambda i: _post(url, token, over_gz if i % 2 else over, i % 2 == 1, ca), range(30)))
        peak_refused = _memory_kib(otelcol.pid)["VmHWM"]
        largest_codes = list(pool.map(lambda i: _post(url, token, largest_gz if i % 2 else largest, i % 2 == 1, ca),
                                      range(30)))
    after = _memory_kib(otelcol.pid)
    print(f"statuses: bombs {sorted(set(bombs))}, over the limit {sorted(set(overs))}, "
          f"largest {sorted((c, largest_codes.count(c)) for c in set(largest_codes))}")
    print(f"Collector memory: RSS before {before['VmRSS'] / 1024:.1f} MiB; peak after the 60 refused pushes "
          f"{peak_refused / 1024:.1f} MiB; peak after 30 parallel largest pushes {after['VmHWM'] / 1024:.1f} MiB, "
          f"RSS then {after['VmRSS'] / 1024:.1f} MiB (Deployment limit {MEMORY_LIMIT_MIB} MiB)")
    # Over the limit, received or after gunzip: refused (413 by admission reading the body, 400 by confighttp)
    # before decoding; 429: beyond node-a's share of slots, the body unread (-1: the connection closed under a sender
    # still sending it). None is accepted.
    assert set(bombs) <= {400, 413, 429, -1} and {400, 413} & set(bombs), bombs
    assert set(overs) <= {400, 413, 429, -1} and {400, 413} & set(overs), overs
    # The largest admitted push is written (200), or finds node-a's two slots taken: 429, or the connection closed
    # under a sender still sending (-1). The agent retries both.
    assert set(largest_codes) <= {200, 429, -1} and 200 in largest_codes, largest_codes
    # Bounded: node-a has at most 2 bodies of at most 2 MiB read at once.
    assert after["VmHWM"] < MEMORY_LIMIT_MIB * 1024 // 4, after
    # The Collector still answers an ordinary push (once the handlers of pushes whose senders gave up, -1, have
    # given node-a's slots back: the agent retries a 429 likewise).
    ordinary = otlp_request({}, [gauge("pod_or_vm_mem_requests", "By", [(POD, 1.0)])])
    wait_until(lambda: Pusher(token, otelcol.ca_file).post(url, ordinary) == 200, timeout=10,
               message="an ordinary push written after the flood")


@pytest.mark.parametrize("sender", ["tenant", "agent"])
def test_eight_senders_of_bare_point_bodies_are_refused_before_decoding(chain, trust_cluster, sender):
    """Issue 38, item 5. Before: the Collector peaked at 759 MiB (tenant's token) and 1,636 MiB (agent's) under
    eight senders of 4 MiB bodies of ~381,000 bare points, against the 512 MiB limit."""
    otelcol, prom, token = chain
    if sender == "tenant":
        token = _token(trust_cluster, "node-b", service_account="default", namespace="default")
    url, ca = otelcol.otlp_http_metrics_url, otelcol.ca_file
    four_mib, under_limit = _bare_points(4 * 2**20), _bare_points(MAX_BODY - 1024)
    before = _memory_kib(otelcol.pid)
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda i: _post(url, token, four_mib if i % 2 else under_limit, False, ca), range(48)))
    after = _memory_kib(otelcol.pid)
    print(f"{sender}: statuses {sorted((c, codes.count(c)) for c in set(codes))}; Collector RSS before "
          f"{before['VmRSS'] / 1024:.1f} MiB, peak {after['VmHWM'] / 1024:.1f} MiB (limit {MEMORY_LIMIT_MIB} MiB); "
          f"refusals {_refused(otelcol)}")
    if sender == "tenant":
        # Refused on the token alone: no slot, no body read (-1: the connection closed under the sending body).
        assert set(codes) <= {403, -1} and 403 in codes, codes
        assert _refused(otelcol)[("subject", "")] >= codes.count(403)
    else:
        # Read (at most node-a's two at once) and counted on the wire: too many items, or over the body limit.
        assert set(codes) <= {413, 429, -1} and 413 in codes, codes
        refused = _refused(otelcol)
        assert refused.get(("items", "node-a"), 0) >= 1 and refused.get(("body_size", "node-a"), 0) >= 1, refused
    assert after["VmHWM"] < MEMORY_LIMIT_MIB * 1024 // 4, after
    assert not prom.query('{k8s_node_name="node-a"}')


def _trickle(url: str, token: str, ca_file: str, stop: threading.Event, answers: list[int]) -> None:
    """One slow uploader: a push declaring a 1 MiB body, sent a byte a second; when answered or cut, again."""
    parts = urllib.parse.urlsplit(url)
    context = ssl.create_default_context(cafile=ca_file)
    while not stop.is_set():
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=5) as raw, \
                    context.wrap_socket(raw, server_hostname=parts.hostname) as conn:
                conn.sendall((f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}"
                              f"\r\nContent-Type: application/x-protobuf\r\nContent-Length: {2**20}\r\n\r\n").encode())
                conn.settimeout(1.0)
                while not stop.is_set():
                    try:
                        answer = conn.recv(64)
                    except TimeoutError:
                        conn.sendall(b"\x0a")
                        continue
                    if answer:
                        answers.append(int(answer.split(b" ", 2)[1]))
                    break
        except (OSError, ValueError, IndexError):
            pass
        stop.wait(0.2)


@pytest.mark.parametrize("sender", ["tenant", "agent"])
def test_eight_slow_uploads_leave_other_nodes_pushes_admitted(chain, trust_cluster, sender):
    """Issue 38, item 6. Before: with eight connections sending a byte a second, node-b's pushes got 429 in 33 of
    38 tries (tenant's token) and 19 of 21 (node-a's agent token)."""
    otelcol, prom, token_a = chain
    token = _token(trust_cluster, "node-b", service_account="default", namespace="default") \
        if sender == "tenant" else token_a
    token_b = _token(trust_cluster, "node-b")
    stop, answers = threading.Event(), []
    tricklers = [threading.Thread(target=_trickle, args=(otelcol.otlp_http_metrics_url, token, otelcol.ca_file,
                                                        stop, answers), daemon=True) for _ in range(8)]
    for t in tricklers:
        t.start()
    time.sleep(2)
    pusher, codes = Pusher(token_b, otelcol.ca_file), []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        codes.append(pusher.post(otelcol.otlp_http_metrics_url,
                                 otlp_request({}, [gauge("pod_or_vm_cpu_requests", "{cpu}", [(POD, 1.0)])])))
        time.sleep(0.5)
    stop.set()
    for t in tricklers:
        t.join(10)
    print(f"{sender}: node-b's pushes {sorted((c, codes.count(c)) for c in set(codes))}; the slow uploaders' "
          f"answers {sorted((c, answers.count(c)) for c in set(answers))}; refusals {_refused(otelcol)}")
    assert codes and set(codes) == {200}, codes
    # The slow uploaders were answered, not left holding: 403 at once (tenant); 429 beyond node-a's share, 408
    # when body_timeout cut the two that had slots (agent).
    assert set(answers) <= ({403} if sender == "tenant" else {408, 429}) and answers, answers
    if sender == "agent":
        refused = _refused(otelcol)
        assert refused[("body_timeout", "node-a")] >= 2 and refused[("node_share", "node-a")] >= 6, refused


def test_one_uid_under_thousands_of_names_and_free_info_values_are_bounded_per_node(chain, trust_cluster):
    """Issue 38, item 7. Before: one uid with 20,000 pod names per push plus free info values created 200,000 series
    in 19 s. Now a push that large is refused on its items; pushes within the items write at most the node's series
    budget within the window; per-pod points without a uid none; another node is unaffected."""
    otelcol, prom, token = chain
    pusher, url = Pusher(token, otelcol.ca_file), otelcol.otlp_http_metrics_url

    def names(n: int, start: int) -> list[tuple[dict, float]]:
        return [({**POD, "k8s.pod.name": f"name-{start + i}", "k8s.pod.uid": "one-uid"}, 1.0) for i in range(n)]

    def info(n: int, start: int) -> list[tuple[dict, float]]:
        return [({"server_version": f"v1.{start + i}", "rules": "1.36", "source": "apiserver"}, 1.0) for i in range(n)]

    assert pusher.post(url, otlp_request({}, [gauge("pod_or_vm_cpu_requests", "{cpu}", names(20_000, 0))])) == 413
    # As many names as the items allow next to 1,000 info values and one uid-less point (a point: itself, and each
    # attribute with its value; each metric: itself and its gauge; resource and scope: 4).
    per_push = (MAX_ITEMS - 4 - 3 * 2 - 7 * 1001) // 9
    start = time.monotonic()
    for push in range(10):
        without_uid = {key: v for key, v in POD.items() if key != "k8s.pod.uid"}
        uidless = [(without_uid | {"k8s.pod.name": f"nouid-{push}"}, 1.0)]
        request = otlp_request({}, [gauge("pod_or_vm_cpu_requests", "{cpu}", names(per_push, push * per_push)),
                                    gauge("node_requests_agent_kubernetes_info", "1", info(1000, push * 1000)),
                                    gauge("pod_or_vm_mem_requests", "By", uidless)])
        status = pusher.post(url, request, timeout=30)
        assert status == 200, status
    elapsed = time.monotonic() - start
    assert _token_push_b(trust_cluster, otelcol) == 200
    count = 'count({k8s_node_name="node-a", __name__=~"pod_or_vm_.*|node_requests_agent_kubernetes_info"})'
    wait_until(lambda: prom.query(count), timeout=20, message="node-a's pushes reached Prometheus")
    wait_until(lambda: prom.query('pod_or_vm_cpu_requests{k8s_node_name="node-b"}'), timeout=20,
               message="node-b's push reached Prometheus")
    time.sleep(2)
    series = int(float(prom.query(count)[0]["value"][1]))
    dropped = wait_until(lambda: _dropped(otelcol).get("missing_uid") == 10 and _dropped(otelcol), timeout=10,
                         message="the dropped points counted")
    attempted = 10 * (per_push + 1000)
    print(f"{attempted} series attempted by node-a in {elapsed:.1f} s: {series} in Prometheus "
          f"(max_series_per_node {SERIES_BUDGET}); dropped {dropped}")
    assert series == SERIES_BUDGET
    assert dropped["series_budget"] == attempted - SERIES_BUDGET
    assert not prom.query('{k8s_pod_name=~"nouid-.*"}')


def _token_push_b(cluster, otelcol: Collector) -> int:
    """One ordinary push of node-b's agent."""
    return Pusher(_token(cluster, "node-b"), otelcol.ca_file).post(
        otelcol.otlp_http_metrics_url, otlp_request({}, [gauge("pod_or_vm_cpu_requests", "{cpu}", [(POD, 1.0)])]))


def _items(message) -> int:
    """The nested messages of an OTLP request and the elements of its repeated numbers (a histogram's bounds and
    bucket counts): what admission's max_items_per_request counts."""
    return sum(1 + _items(v) if field.message_type is not None else 1
               for field, value in message.ListFields() if field.message_type is not None or field.is_repeated
               for v in (value if field.is_repeated else [value]))


def _series(request) -> int:
    """The series Prometheus stores for an OTLP request, as the remote-write exporter translates it: one per number
    point; per histogram point a _bucket per bound and +Inf, _count, and _sum (the agent always sends one)."""
    return sum(len(dp.explicit_bounds) + 3 if m.WhichOneof("data") == "histogram" else 1
               for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
               for dp in getattr(m, m.WhichOneof("data")).data_points)


def test_the_largest_honest_push_is_admitted_whole_within_every_bound(chain, http_receiver):
    """Issue 38: the bounds are set from what an honest agent sends at the largest node within the pod budget; that
    push is admitted, and every pod's series written, with room under each bound."""
    otelcol, prom, token = chain
    body = agents_push(http_receiver, LONGEST_NODE, largest_honest_pods(BUDGET))
    request = ExportMetricsServiceRequest.FromString(body)
    points = points_of(request)
    per_pod = [p for p in points if "k8s.pod.uid" in p.attributes]
    items, series = _items(request), _series(request)
    print(f"largest honest push ({BUDGET} pods): {len(body):,} bytes ({len(gzip.compress(body)):,} gzipped), "
          f"{len(points):,} points ({len(per_pod):,} per pod), {series:,} series, {items:,} items; limits "
          f"{MAX_BODY:,} bytes, {MAX_ITEMS:,} items, {SERIES_BUDGET:,} series")
    assert len(body) * 3 < MAX_BODY and items * 2.5 < MAX_ITEMS and series * 1.5 < SERIES_BUDGET
    assert _post(otelcol.otlp_http_metrics_url, token, gzip.compress(body), True, otelcol.ca_file) == 200
    count = 'count({k8s_node_name="node-a", k8s_pod_uid!=""})'
    assert wait_until(lambda: (rows := prom.query(count)) and float(rows[0]["value"][1]) == len(per_pod), timeout=20,
                      message="every pod's series written")
    # Every series, the histograms' _bucket, _count and _sum included: what the series budget counts (the job is the
    # pushed series'; the shipped recording rules' have none).
    assert wait_until(lambda: (rows := prom.query('count({k8s_node_name="node-a", job="node-requests-agent"})'))
                      and float(rows[0]["value"][1]) == series, timeout=20, message="every series written")
    assert _dropped(otelcol) == {} and _refused(otelcol) == {}


def test_a_node_writes_at_most_its_pod_budget(chain):
    otelcol, prom, token = chain
    pods = _pods(BUDGET + 80, "budget")
    status = Pusher(token, otelcol.ca_file).post(otelcol.otlp_http_metrics_url,
                                otlp_request({}, [gauge("pod_or_vm_cpu_requests", "{cpu}", pods)]))
    assert status == 200  # the rest of the push is written
    count = 'count(pod_or_vm_cpu_requests{k8s_node_name="node-a"})'
    wait_until(lambda: prom.query(count), timeout=20, message="the push reached Prometheus")
    time.sleep(2)
    assert float(prom.query(count)[0]["value"][1]) == BUDGET
    # The pods admitted are the first ones; the same push again changes nothing, a new pod still finds no place.
    again = otlp_request({}, [gauge("pod_or_vm_cpu_requests", "{cpu}", [*pods, *_pods(5, "late")])])
    assert Pusher(token, otelcol.ca_file).post(otelcol.otlp_http_metrics_url, again) == 200
    time.sleep(2)
    assert float(prom.query(count)[0]["value"][1]) == BUDGET
    assert not prom.query('pod_or_vm_cpu_requests{k8s_pod_uid=~"late-.*"}')
    assert wait_until(lambda: _dropped(otelcol).get("pod_budget") == 80 + 85 and _dropped(otelcol), timeout=10,
                      message="the dropped points counted") == {"pod_budget": 165}


def test_an_allowed_gauge_sent_as_a_histogram_or_summary_creates_no_series(chain):
    otelcol, prom, token = chain
    now = time.time_ns()
    attrs = otlp_request({}, [gauge("x", "1", [(POD, 1.0)])]).resource_metrics[0].scope_metrics[0].metrics[0] \
        .gauge.data_points[0].attributes
    histogram = metrics_pb2.Metric(name="pod_or_vm_cpu_requests", unit="{cpu}", histogram=metrics_pb2.Histogram(
        aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE,
        data_points=[metrics_pb2.HistogramDataPoint(attributes=attrs, time_unix_nano=now, start_time_unix_nano=now - 10**9,
                                                    count=3, sum=6.0, explicit_bounds=[1.0, 2.0],
                                                    bucket_counts=[1, 1, 1])]))
    summary = metrics_pb2.Metric(name="pod_or_vm_mem_requests", unit="By", summary=metrics_pb2.Summary(
        data_points=[metrics_pb2.SummaryDataPoint(
            attributes=attrs, time_unix_nano=now, start_time_unix_nano=now - 10**9, count=2, sum=4.0,
            quantile_values=[metrics_pb2.SummaryDataPoint.ValueAtQuantile(quantile=0.5, value=2.0)])]))
    real = gauge("node_requests_node_pod_slots", "{pod}", [({"quantity": "allocatable"}, 110.0)])
    assert Pusher(token, otelcol.ca_file).post(otelcol.otlp_http_metrics_url,
                                               otlp_request({}, [histogram, summary, real])) == 200
    wait_until(lambda: prom.query('node_requests_node_pod_slots{k8s_node_name="node-a"}'), timeout=20,
               message="the push's declared gauge reached Prometheus")
    time.sleep(2)
    names = prom.names('{__name__=~"pod_or_vm_.*"}')
    assert names == set(), names  # no _bucket, _sum, _count, no quantile series, no gauge either
    assert not prom.query('{quantile!=""}') and not prom.query('{le!=""}')
    assert wait_until(lambda: _dropped(otelcol).get("wrong_type") == 2 and _dropped(otelcol), timeout=10,
                      message="the dropped points counted") == {"wrong_type": 2}


def _histogram_push(points: list[list[float]], names: list[str] = HISTOGRAMS) -> ExportMetricsServiceRequest:
    """The agent's histograms (``names``), each a point per list of bounds (a count per bucket and a sum, as the agent
    sends them)."""
    now = time.time_ns()
    return otlp_request({}, [metrics_pb2.Metric(name=name, unit="s", histogram=metrics_pb2.Histogram(
        aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE,
        data_points=[metrics_pb2.HistogramDataPoint(time_unix_nano=now, start_time_unix_nano=now - 10**9, count=1,
                                                    sum=0.5, explicit_bounds=b, bucket_counts=[1] + [0] * len(b))
                     for b in points]))
        for name in names])


def test_histogram_bounds_are_bounded_on_the_wire_and_in_series(chain):
    """Issue 38 review: a histogram point's bounds were neither items nor series. One point of ~130,000 packed bounds
    (the remote-write exporter writes a _bucket series per bound) passed every bound, different on every push. Now it
    is refused on its items; a point of more than max_histogram_buckets is dropped; fresh bounds on every push write
    at most max_series_per_node series."""
    otelcol, prom, token = chain
    pusher, url = Pusher(token, otelcol.ca_file), otelcol.otlp_http_metrics_url
    huge = _histogram_push([[i / 1000 for i in range(130_000)]], HISTOGRAMS[:1])  # one point
    assert len(huge.SerializeToString()) < MAX_BODY and _items(huge) > MAX_ITEMS
    assert pusher.post(url, huge, timeout=30) == 413
    # Within the items: three points of 5,000 bounds each per push, all dropped (too_many_buckets).
    wide = [_histogram_push([[push + i / 10_000 for i in range(5_000)]]) for push in range(5)]
    assert all(_items(w) < MAX_ITEMS for w in wide)
    assert [pusher.post(url, w, timeout=30) for w in wide] == [200] * 5
    # The most buckets a point may have, fresh bounds on every push: the series budget fills and holds.
    pushes = 20
    for push in range(pushes):
        assert pusher.post(url, _histogram_push([[push * 1000 + i for i in range(MAX_BUCKETS - 1)]])) == 200
    count = 'count({k8s_node_name="node-a", job="node-requests-agent"})'  # not the recording rules' series
    wait_until(lambda: prom.query(count), timeout=20, message="node-a's histograms reached Prometheus")
    time.sleep(2)
    series = int(float(prom.query(count)[0]["value"][1]))
    dropped = wait_until(lambda: _dropped(otelcol).get("too_many_buckets") == 15 and _dropped(otelcol), timeout=10,
                         message="the dropped points counted")
    written = pushes * len(HISTOGRAMS) - dropped.get("series_budget", 0)
    print(f"one point of 130,000 bounds ({len(huge.SerializeToString()):,} bytes, {_items(huge):,} items): 413; "
          f"15 points of 5,000 bounds dropped; {pushes * len(HISTOGRAMS)} points of {MAX_BUCKETS} buckets with fresh bounds: {written} written, {series} series in Prometheus "
          f"(max_series_per_node {SERIES_BUDGET}); dropped {dropped}; refused {_refused(otelcol)}")
    # Each name's first point is 66 series (63 bounds, +Inf, _count, _sum), each later one 63 new _bucket series.
    assert series == written * (MAX_BUCKETS - 1) + len(HISTOGRAMS) * 3
    assert SERIES_BUDGET - (MAX_BUCKETS + 2) < series <= SERIES_BUDGET
    assert _refused(otelcol) == {("items", "node-a"): 1}
