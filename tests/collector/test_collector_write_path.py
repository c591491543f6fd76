"""What a compromised agent can make the Collector hold and write (issue 29, item 4), on the real chain.

Tokens from the real API server (bound to agent pods on KWOK's Nodes), the shipped Collector config on the built
Collector (oidc, admission, nodeidentity, remote write) and Prometheus 3 with its remote-write receiver: the sender
holds a valid agent token for node-a, as a process that took over that agent would.

- the flood: 30 parallel pushes that gunzip to 20 MiB (the limit before) and 30 parallel pushes at the shipped
  maximum (4 MiB): the first refused before decoding, the Collector's peak memory bounded;
- the pod budget: one push of 300 pods for node-a writes 220 (max_pods_per_node), the rest counted as dropped;
- the declared types: an allowed gauge's name sent as a histogram or a summary creates no series.

The Prometheus NetworkPolicy (the rogue writer straight to Prometheus) is checked as rendered in
tests/deploy/test_deploy.py: no CNI enforcing NetworkPolicy runs here (docs/testing.md).
"""

from __future__ import annotations

import gzip
import re
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from opentelemetry.proto.metrics.v1 import metrics_pb2

from testkit.collector import SHIPPED_CONFIG, Collector, gauge, otlp_request
from testkit.http import http_get, request as http_request
from testkit.trust import POD, Pusher, collector_env, remote_write_prometheus
from testkit.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.collector]

SHIPPED = yaml.safe_load(SHIPPED_CONFIG.read_text())
MAX_BODY = SHIPPED["receivers"]["otlp"]["protocols"]["http"]["max_request_body_size"]
BUDGET = int(re.search(r":-(\d+)\}", SHIPPED["processors"]["nodeidentity"]["max_pods_per_node"]).group(1))
OLD_MAX_BODY = 20 * 2**20  # confighttp's default, what the shipped receiver took before
DEPLOYMENT = next(d for d in yaml.safe_load_all((SHIPPED_CONFIG.parent / "collector-deployment.yaml").read_text())
                  if d["kind"] == "Deployment")
MEMORY_LIMIT_MIB = int(DEPLOYMENT["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
                       .removesuffix("Mi"))


@pytest.fixture
def chain(trust_cluster, tmp_path):
    """A fresh Collector (its own pod budget) writing into a fresh Prometheus, and node-a's agent token."""
    pod = trust_cluster.agent_pod("node-a", name=f"agent-write-{time.time_ns() % 10**9}")
    with remote_write_prometheus(tmp_path / "prometheus") as prom, \
            Collector(tmp_path / "otelcol", SHIPPED_CONFIG,
                      env=collector_env(trust_cluster, f"{prom.url}/api/v1/write")) as otelcol:
        yield otelcol, prom, trust_cluster.pod_token(pod)


def _pods(n: int, prefix: str, name_length: int = 20) -> list[tuple[dict, float]]:
    """``n`` pods' points as the agent sends them, with pod names ``name_length`` long."""
    return [({**POD, "k8s.pod.name": f"{prefix}-{i}".ljust(name_length, "x"), "k8s.pod.uid": f"{prefix}-uid-{i}"}, 0.25)
            for i in range(n)]


def _body_of_size(size: int, prefix: str) -> bytes:
    """A valid OTLP request of just under ``size`` bytes: pods of an allowed metric with the longest pod names
    Kubernetes allows (253), as a push that fills the limit with what the processor must decode and inspect."""
    def encoded(n: int) -> bytes:
        return otlp_request({}, [gauge("pod_or_vm_cpu_requests", "{cpu}", _pods(n, prefix, 253))]).SerializeToString()

    per_point = len(encoded(1000)) / 1000
    n = int(size / per_point) + 50
    while len(body := encoded(n)) > size:
        n -= max(1, int((len(body) - size) / per_point))
    return body


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


def _dropped(otelcol: Collector) -> dict[str, float]:
    """otelcol_nodeidentity_dropped_points by reason, from the Collector's own metrics."""
    status, body = http_get(otelcol.telemetry_url)
    assert status == 200
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        if line.startswith("otelcol_nodeidentity_dropped_points{"):  # the name docs/deployment.md gives
            reason = re.search(r'reason="([^"]+)"', line).group(1)
            assert 'node="node-a"' in line, line
            out[reason] = out.get(reason, 0) + float(line.rsplit(" ", 1)[1])
    return out


def test_thirty_parallel_maximum_size_pushes_are_bounded(chain):
    otelcol, prom, token = chain
    url = otelcol.otlp_http_metrics_url
    # The decompression bomb: a gzip body of a few KiB that expands to the old limit (20 MiB).
    bomb = gzip.compress(_body_of_size(OLD_MAX_BODY, "bomb"), 9)
    # Just over the limit, uncompressed and gzipped; and the largest push the limit admits.
    over = _body_of_size(MAX_BODY + 64 * 1024, "over")
    over_gz = gzip.compress(over, 1)  # small on the wire, over the limit once gunzipped
    assert len(over) > MAX_BODY
    largest = _body_of_size(MAX_BODY, "max")
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
    # Over the limit, received or after gunzip: confighttp refuses them with 400 before decoding (429: no slot
    # within max_wait, the body unread). None is accepted.
    assert set(bombs) <= {400, 429} and 400 in bombs, bombs
    assert set(overs) <= {400, 429, -1} and 400 in overs, overs
    # The largest admitted push is written (200) or waits for one of the 8 slots; after max_wait it is refused
    # unread: 429, or the connection closed under a sender still sending (-1). The agent retries both.
    assert set(largest_codes) <= {200, 429, -1} and largest_codes.count(200) >= 8, largest_codes
    # Bounded: at most 8 bodies of at most 4 MiB are read at once, so the peak stays within half the
    # Deployment's memory limit (a 20 MiB bomb is never expanded past 4 MiB).
    assert after["VmHWM"] < MEMORY_LIMIT_MIB * 1024 // 2, after
    # The Collector still answers an ordinary push.
    assert Pusher(token, otelcol.ca_file).post(
        url, otlp_request({}, [gauge("pod_or_vm_mem_requests", "By", [(POD, 1.0)])])) == 200


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
