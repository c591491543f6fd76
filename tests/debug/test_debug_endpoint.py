"""The node-local debug endpoint over real HTTP, with the real agent behind it."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.config import Address
from agent.debug.endpoint import DebugServer
from agent.telemetry.health import HealthLimits, liveness
from agent.model.scale_down import REASONS
from agent.pipeline.state import NodeState
from agent.telemetry.stats import RuntimeStats, StatsSnapshot
from testkit.waiting import wait_until
from testkit.factory import container, pod, vm_pod
from testkit.http import get


@pytest.fixture
def running(apiserver, make_agent):
    secret_pod = pod("web", containers=[container("app", "250m", "256Mi")],
                     annotations={"example.com/api-token": "s3cr3t-annotation"})
    secret_pod["spec"]["containers"][0]["env"] = [{"name": "DB_PASSWORD", "value": "s3cr3t-env"}]
    apiserver.create(secret_pod)
    apiserver.create(vm_pod("vm-pod", "vm-1", "2", "4Gi", overcommit={"cpu": "2", "memory": "1"}, node="node-a"))
    apiserver.create(pod("done", phase="Succeeded"))
    agent = make_agent(debug_address="127.0.0.1:0")
    wait_until(lambda: agent.state.synced and agent.state.node_listed and len(agent.state) == 3
               and agent.state.kubernetes.source == "apiserver")
    return agent


def test_every_route(running):
    port = running.debug.port
    status, headers, body = get(port, "/healthz")
    assert status == 200 and json.loads(body)["ok"] is True
    assert get(port, "/readyz")[0] == 200
    status, headers, body = get(port, "/debug/pods")
    data = json.loads(body)
    assert status == 200 and headers["Content-Type"] == "application/json"
    by_name = {p["name"]: p for p in data["pods"]}
    assert by_name["vm-pod"]["source"] == "vm_usage" and by_name["vm-pod"]["cpu_cores"] == 1.0
    assert by_name["web"]["contributions"][0] == {"name": "app", "kind": "container", "cpu_cores": 0.25,
                                                  "memory_bytes": 256 * 2**20, "note": ""}
    assert by_name["done"]["reported"] is False
    assert b"s3cr3t" not in body and b"DB_PASSWORD" not in body and b"api-token" not in body
    node = json.loads(get(port, "/debug/node")[2])
    assert node["cpu_cores"]["pod_or_vm"] == 1.25 and node["memory_bytes"]["pod_or_vm"] == 256 * 2**20 + 4 * 2**30
    assert node["pods_by_source"] == {"pod_requests": 1, "vm_usage": 1} and node["node_present"] is False
    # The autoscaler's verdict: no Node, so no utilization; both reported pods block (no controller, and a
    # VirtualMachine, which the autoscaler does not trust by default); the finished pod is not judged.
    verdict = node["autoscaler"]
    assert (verdict["node"], verdict["state"], verdict["utilization"]["value"]) == ("node-a", "unknown", None)
    assert {(b["name"], b["reason"]) for b in verdict["blockers"]} == {("web", "not_replicated"),
                                                                         ("vm-pod", "not_replicated")}
    assert verdict["blocking_pods"]["not_replicated"] == 2 and verdict["pdbs_known"] is True
    runtime = json.loads(get(port, "/debug/runtime")[2])
    assert runtime["synced"] is True and runtime["relists"] == {"pods": 1, "nodes": 1, "poddisruptionbudgets": 1}
    assert runtime["queue_duration"]["count"] == runtime["events_handled"]
    assert runtime["queue_duration"]["buckets"][-1] == {"le": "+Inf", "count": runtime["events_handled"]}
    # Every field of the snapshot is in the view, pair keys as "resource/reason".
    assert set(StatsSnapshot.__struct_fields__) <= set(runtime)
    assert all("/" in key for key in runtime["watch_starts"]) and runtime["watch_starts"]
    status, headers, body = get(port, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b"vm-pod" in body
    status, _, body = get(port, "/nope")
    assert status == 404 and "/metrics" in json.loads(body)["paths"]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, _ = get(port, "/debug/pods", method=method)
        assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, headers, body = get(port, "/debug/pods", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0


def test_metrics_are_rendered_from_current_state(running, apiserver):
    port = running.debug.port

    def scrape():
        families = {f.name: f for f in text_string_to_metric_families(get(port, "/metrics")[2].decode())}
        return {s.labels["k8s_pod_name"]: s.value for s in families["pod_or_vm_cpu_requests"].samples}, families

    handled_before = running.stats.snapshot().queue_duration.count
    cpu, families = scrape()
    handled_after = running.stats.snapshot().queue_duration.count
    assert cpu == {p.name: p.cpu / 1e9 for p in running.state.pods() if p.reported} == {"web": 0.25, "vm-pod": 1.0}
    mem = {s.labels["k8s_pod_name"]: s.value for s in families["pod_or_vm_mem_requests"].samples}
    assert mem == {"web": 256 * 2**20, "vm-pod": 4 * 2**30}
    vm = families["vm_cpu_usage"].samples[0]
    assert vm.value == 2.0 and vm.labels["neon_vm_name"] == "vm-1" and vm.labels["k8s_node_name"] == "node-a"
    queue = families["node_requests_agent_workqueue_queue_duration_seconds"]
    assert queue.type == "histogram"
    count = [s.value for s in queue.samples if s.name.endswith("_count")][0]
    # Rendered at scrape time: between the counts before and after it (a late /version event may land meanwhile).
    assert handled_before <= count <= handled_after and count >= 2
    assert families["node_requests_agent_workqueue_adds"].type == "counter"
    blocking = {s.labels["k8s_pod_name"]: s.labels["reason"] for s in families["pod_autoscaler_blocking"].samples}
    assert blocking == {"web": "not_replicated", "vm-pod": "not_replicated"}
    apiserver.delete("default", "web")
    wait_until(lambda: "web" not in scrape()[0])
    families = scrape()[1]
    # A pod gone is a blocking series gone; its reason's count drops and stays present.
    assert {s.labels["k8s_pod_name"] for s in families["pod_autoscaler_blocking"].samples} == {"vm-pod"}
    counts = {s.labels["reason"]: s.value for s in families["node_requests_node_autoscaler_blocking_pods"].samples}
    assert counts["not_replicated"] == 1 and set(counts) == set(REASONS)


def test_readiness_flips_after_the_initial_sync(apiserver, make_agent):
    apiserver.fail_next(2, 500)
    agent = make_agent(debug_address="127.0.0.1:0")
    port = agent.debug.port
    status, _, body = get(port, "/readyz")
    assert status == 503 and json.loads(body)["checks"]["pods synced"] == "waiting"
    assert get(port, "/healthz")[0] == 200  # alive while waiting: backing off is not stuck
    wait_until(lambda: get(port, "/readyz")[0] == 200, timeout=15)


def test_liveness_names_the_stuck_loop():
    limits = HealthLimits(source=10, handler=5, export=20, stale=240)
    fine = StatsSnapshot(loop_idle_seconds={"source": 1, "handler": 0.1, "export": 3})
    assert liveness(fine, limits).ok
    stuck = StatsSnapshot(loop_idle_seconds={"source": 11, "handler": 0.1, "export": 3})
    probe = liveness(stuck, limits)
    assert not probe.ok and probe.checks["source"].startswith("stuck")
    busy = StatsSnapshot(loop_idle_seconds={"source": 1, "handler": 0.1, "export": 3}, unfinished_work_seconds=6)
    assert liveness(busy, limits).checks["handler"].startswith("stuck")
    no_export = HealthLimits(source=10, handler=5, export=None, stale=240)
    assert liveness(StatsSnapshot(loop_idle_seconds={"source": 1, "handler": 0.1}), no_export).ok


@pytest.fixture
def bare_server():
    state, stats = NodeState("n"), RuntimeStats()
    limits = HealthLimits.for_config(read_timeout=120.0, export_interval=15.0, export_timeout=10.0)
    server = DebugServer(Address(host="127.0.0.1", port=0), state, stats, limits, timeout=0.5, max_clients=8).start()
    yield server
    server.stop()


def raw(port, payload: bytes, read_timeout=3.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        s.sendall(payload)
        chunks = []
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        except socket.timeout:
            pass
        return b"".join(chunks)


def test_oversized_and_malformed_requests_get_4xx(bare_server):
    port = bare_server.port
    many_headers = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n"
    assert raw(port, many_headers).startswith(b"HTTP/1.1 431")
    long_header = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n"
    assert raw(port, long_header).split(b" ")[1] in (b"431", b"400")
    assert raw(port, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n").split(b" ")[1] == b"414"
    assert raw(port, b"GET / extra HTTP/1.1\r\n\r\n").split(b" ")[1] == b"400"


def test_stalled_client_is_dropped_by_the_timeout(bare_server):
    start = time.monotonic()
    answer = raw(bare_server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", read_timeout=5)  # never finishes headers
    assert time.monotonic() - start < 2.0
    assert answer == b"" or answer.split(b" ")[1] in (b"400", b"408")


def test_clients_beyond_the_limit_get_503_and_the_server_recovers(bare_server):
    port = bare_server.port
    stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    try:
        time.sleep(0.1)
        assert raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 503")
    finally:
        for s in stalled:
            s.close()
    wait_until(lambda: raw(port, b"GET /debug/node HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200"))


def test_fifty_slow_clients_do_not_delay_event_handling(apiserver, make_agent):
    agent = make_agent(debug_address="127.0.0.1:0")
    wait_until(lambda: agent.state.synced)
    port = agent.debug.port
    slow = []
    stop = threading.Event()

    def trickle(s):
        # A slow client: one header byte at a time, forever (until the server drops it).
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            while not stop.is_set():
                s.sendall(b"X")
                time.sleep(0.05)
        except OSError:
            pass

    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", port))
        slow.append(s)
        threading.Thread(target=trickle, args=(s,), daemon=True).start()
    try:
        latencies = []
        for i in range(10):
            start = time.monotonic()
            apiserver.create(pod(f"during-slow-{i}"))
            wait_until(lambda: any(p.name == f"during-slow-{i}" for p in agent.state.pods()), timeout=5)
            latencies.append(time.monotonic() - start)
        # Stated bound: each event reaches the state within 0.5 s while 50 slow clients hold the endpoint.
        assert max(latencies) < 0.5, latencies
    finally:
        stop.set()
        for s in slow:
            s.close()


def _slowloris(port: int, count: int, family=socket.AF_INET, host="127.0.0.1"):
    """``count`` clients that each send one header byte every 2 s, for ever (until dropped)."""
    stop = threading.Event()
    sockets = []

    def trickle(s):
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\n")
            while not stop.wait(2.0):
                s.sendall(b"X")
        except OSError:
            pass

    for _ in range(count):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.connect((host, port))
        sockets.append(s)
        threading.Thread(target=trickle, args=(s,), daemon=True).start()
    return stop, sockets


@pytest.mark.parametrize("clients", [32, 200])
def test_probes_answer_within_a_second_however_many_slow_or_idle_clients(apiserver, make_agent, clients):
    agent = make_agent(debug_address="127.0.0.1:0")
    wait_until(lambda: agent.state.synced and agent.state.node_listed)
    port = agent.debug.port
    stop, slow = _slowloris(port, clients)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(clients // 2)]  # connect, send nothing
    try:
        worst = 0.0
        for _ in range(10):
            for path in ("/healthz", "/readyz"):
                started = time.monotonic()
                status, _, _ = get(port, path)
                worst = max(worst, time.monotonic() - started)
                assert status == 200
            time.sleep(0.3)
        assert worst < 1.0, worst
    finally:
        stop.set()
        for s in slow + idle:
            s.close()


def test_a_slow_request_is_cut_by_the_whole_request_deadline(bare_server):
    """One byte per 0.2 s keeps every per-read timeout happy; the deadline for the whole head does not care."""
    with socket.create_connection(("127.0.0.1", bare_server.port), timeout=5) as s:
        started = time.monotonic()
        try:
            for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"y" * 100:
                s.sendall(bytes([byte]))
                time.sleep(0.2)
        except OSError:
            pass
        answer = s.recv(1024)
    assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 2.0


def test_the_default_address_listens_on_ipv6_and_ipv4(apiserver, make_agent):
    if not socket.has_ipv6:
        pytest.fail("this machine has no IPv6; the dual-stack default cannot be shown")
    agent = make_agent(debug_address=":0")
    port = agent.debug.port
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect((host, port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(64).startswith(b"HTTP/1.1 "), host


def test_a_debug_port_in_use_is_a_configuration_error_naming_the_address(apiserver, make_agent):
    from agent.config import ConfigError

    holder = socket.create_server(("127.0.0.1", 0))
    try:
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        with pytest.raises(ConfigError, match=taken):
            make_agent(debug_address=taken)
    finally:
        holder.close()
