"""The Collector watched: each shipped otel-collector alert fires on its fault and resolves after it (item 4).

Prometheus 3 scrapes the built Collectors' own metrics (the shipped job otel-collector, static
targets instead of Kubernetes discovery) and evaluates the shipped rules every second. The one
change in the test copy of rules.yaml: every otel-collector alert's ``for:`` is 1 s instead of
minutes, so a run takes minutes, not a quarter of an hour; expressions and windows are the shipped
ones. Pushes carry a real agent token (testkit/trust.py) so they pass the oidc authenticator.

Faults, one Collector each, all at once: a replica killed (ReplicaDown); a memory_limiter limit below
the Collector's heap (RefusingData); remote write through a forwarder that refuses connections
(ExportFailing); the buffered variant (sending queue on, 2 requests) writing to a backend that
accepts and never answers (SendingQueueFull). Then every Collector killed (Unavailable).
"""

from __future__ import annotations

import threading
import time

import pytest
import yaml

from testkit.collector import SHIPPED_CONFIG, Collector, gauge, otlp_request
from testkit.waiting import wait_until
from testkit.tcp_proxy import TcpProxy
from testkit.trust import POD, Pusher, collector_env, remote_write_prometheus

pytestmark = [pytest.mark.cluster, pytest.mark.collector]

RULES = SHIPPED_CONFIG.parent / "prometheus" / "rules.yaml"
GROUP = "otel-collector.alerts"


def fast_rules(directory) -> tuple:
    rules = yaml.safe_load(RULES.read_text())
    (group,) = [g for g in rules["groups"] if g["name"] == GROUP]
    for rule in group["rules"]:
        rule["for"] = "1s"
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    return path, [r["alert"] for r in group["rules"]]


def _pushing(collector: Collector, token: str, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        pusher, url = Pusher(token, collector.ca_file), collector.otlp_http_metrics_url
        while not stop.is_set():
            try:
                pusher.post(url, otlp_request({}, [gauge("pod_or_vm_cpu_requests", "{cpu}", [(POD, 1.0)])]), timeout=3)
            except OSError:
                pass
            stop.wait(0.5)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _states(prom, alertname: str) -> dict[str, str]:
    """instance -> state of ``alertname`` (firing or pending)."""
    return {a["labels"].get("instance", ""): a["state"] for a in prom.alerts() if a["labels"]["alertname"] == alertname}


def test_every_collector_alert_fires_on_its_fault_and_resolves_after_it(trust_cluster, tmp_path):
    cluster = trust_cluster
    token = cluster.pod_token(cluster.agent_pod("node-a", name="agent-alerts"))
    rules, names = fast_rules(tmp_path)
    assert set(names) == {"OtelCollectorReplicaDown", "OtelCollectorUnavailable", "OtelCollectorRefusingData",
                          "OtelCollectorExportFailing", "OtelCollectorSendingQueueFull"}
    work = {n: tmp_path / n for n in ("down", "refusing", "failing", "queue")}
    # Prometheus first (the Collectors write into it), its targets known only once the Collectors exist:
    # so the Collectors are created first (ports chosen), started after Prometheus.
    placeholder = "http://127.0.0.1:9/api/v1/write"
    collectors = {n: Collector(w, SHIPPED_CONFIG, env=collector_env(cluster, placeholder)) for n, w in work.items()}
    targets = {n: f"127.0.0.1:{c.ports['OTELCOL_TELEMETRY_PORT']}" for n, c in collectors.items()}
    stop = threading.Event()
    timings: dict[str, float] = {}
    with remote_write_prometheus(tmp_path / "prometheus", rule_files=[rules], targets=[]) as prom:
        write = f"{prom.url}/api/v1/write"
        failing_proxy = TcpProxy(prom.port).start()
        failing_proxy.refuse()
        hung = TcpProxy(prom.port).start()
        hung.hold()  # a hung backend: connections accepted, neither forwarded nor answered
        collectors["down"].extra_env.update(collector_env(cluster, write))
        collectors["refusing"].extra_env.update(collector_env(cluster, write))
        collectors["refusing"].overrides += ["processors::memory_limiter::limit_mib=2",
                                             "processors::memory_limiter::spike_limit_mib=1"]
        collectors["failing"].extra_env.update(collector_env(cluster, f"http://127.0.0.1:{failing_proxy.port}/api/v1/write"))
        collectors["queue"].extra_env.update(collector_env(cluster, f"http://127.0.0.1:{hung.port}/api/v1/write"))
        collectors["queue"].overrides += ["exporters::prometheus_remote_write::remote_write_queue::enabled=true",
                                          "exporters::prometheus_remote_write::remote_write_queue::queue_size=2",
                                          "exporters::prometheus_remote_write::remote_write_queue::num_consumers=1"]
        try:
            for c in collectors.values():
                c.start()
            prom.stop()
            prom.scrape_targets = list(targets.values())
            prom.start()
            for n in ("refusing", "failing", "queue", "down"):
                _pushing(collectors[n], token, stop)
            wait_until(lambda: all(t["health"] == "up" for t in prom.targets()), timeout=30,
                       message="every Collector scraped")
            started = time.monotonic()
            collectors["down"].stop(graceful=False)
            expect = {"OtelCollectorReplicaDown": targets["down"], "OtelCollectorRefusingData": targets["refusing"],
                      "OtelCollectorExportFailing": targets["failing"], "OtelCollectorSendingQueueFull": targets["queue"]}

            def fired() -> bool:
                for alert, instance in expect.items():
                    if alert not in timings and _states(prom, alert).get(instance) == "firing":
                        timings[alert] = time.monotonic() - started
                return len(timings) == len(expect)
            wait_until(fired, timeout=180, interval=0.5, message=f"alerts firing (so far {timings})")
            assert "OtelCollectorUnavailable" not in {a["labels"]["alertname"] for a in prom.alerts()}

            # The faults end: the replica is back, the limit is the shipped one, the backends answer.
            ended = time.monotonic()
            collectors["down"].start()
            collectors["refusing"].overrides = [o for o in collectors["refusing"].overrides if "memory_limiter" not in o]
            collectors["refusing"].restart()
            failing_proxy.accept()
            hung.accept()

            def resolved() -> bool:
                for alert, instance in expect.items():
                    if f"{alert} resolved" not in timings and instance not in _states(prom, alert):
                        timings[f"{alert} resolved"] = time.monotonic() - ended
                return all(f"{a} resolved" in timings for a in expect)
            wait_until(resolved, timeout=240, interval=0.5, message=f"alerts resolved (so far {timings})")

            # No replica at all.
            gone = time.monotonic()
            for c in collectors.values():
                c.stop(graceful=False)
            wait_until(lambda: _states(prom, "OtelCollectorUnavailable").get("") == "firing", timeout=60,
                       message="OtelCollectorUnavailable firing")
            timings["OtelCollectorUnavailable"] = time.monotonic() - gone
            back = time.monotonic()
            collectors["down"].start()
            wait_until(lambda: not _states(prom, "OtelCollectorUnavailable"), timeout=60,
                       message="OtelCollectorUnavailable resolved")
            timings["OtelCollectorUnavailable resolved"] = time.monotonic() - back
        finally:
            stop.set()
            for c in collectors.values():
                c.stop(graceful=False)
            failing_proxy.stop()
            hung.stop()
    print("alert timings (s after the fault / after its end):",
          {k: round(v, 1) for k, v in sorted(timings.items())})
