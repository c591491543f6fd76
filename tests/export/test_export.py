"""What the agent sends over OTLP, decoded with the official protobuf definitions."""

from __future__ import annotations

import pytest

from testkit.factory import container, pod, vm_pod

OVERFLOW = "otel.metric.overflow"


def series(points, metric):
    return {p.attributes["k8s.pod.name"]: p for p in points if p.metric == metric}


def pods_in(points, metric="pod_or_vm_cpu_requests"):
    return set(series(points, metric))


@pytest.fixture
def otlp_env(monkeypatch):
    def configure(receiver, protocol="http/protobuf", compression="gzip"):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", compression)
    return configure


def test_http_export_carries_values_units_attributes_and_resource(apiserver, make_agent, http_receiver, otlp_env):
    apiserver.create(pod("web", containers=[container("a", "250m", "256Mi"), container("b", "100m", "64Mi")]))
    apiserver.create(vm_pod("runner", "vm-1", "2", "4Gi", overcommit={"cpu": "2", "memory": "1"}, node="node-a"))
    apiserver.create(vm_pod("target", "vm-2", "1", "1Gi", role="target", node="node-a"))
    otlp_env(http_receiver)
    make_agent(exporter="otlp")
    points = http_receiver.wait_for(lambda pts: pods_in(pts) == {"web", "runner", "target"})
    assert http_receiver.encodings[-1] == "gzip"
    cpu, mem = series(points, "pod_or_vm_cpu_requests"), series(points, "pod_or_vm_mem_requests")
    assert cpu["web"].value == pytest.approx(0.35) and mem["web"].value == 320 * 2**20
    assert cpu["runner"].value == 1.0 and mem["runner"].value == 4 * 2**30
    assert cpu["web"].attributes["source"] == "pod_requests" and cpu["runner"].attributes["source"] == "vm_usage"
    assert cpu["web"].kind == "gauge" and cpu["web"].unit == "{cpu}" and mem["web"].unit == "By"
    uid = [p for p in apiserver.objects() if p["metadata"]["name"] == "web"][0]["metadata"]["uid"]
    assert cpu["web"].attributes == {"k8s.namespace.name": "default", "k8s.pod.name": "web", "k8s.pod.uid": uid,
                                     "source": "pod_requests"}
    vm_cpu = series(points, "vm_cpu_usage")
    assert set(vm_cpu) == {"runner", "target"}
    assert vm_cpu["runner"].value == 2.0  # raw usage, before overcommit
    assert vm_cpu["runner"].attributes["neon.vm.name"] == "vm-1"
    assert vm_cpu["runner"].attributes["neon.vm.migration.role"] == "none"
    assert vm_cpu["target"].attributes["neon.vm.migration.role"] == "target"
    assert cpu["web"].resource["service.instance.id"] == "node-a"
    assert cpu["web"].resource["k8s.node.name"] == "node-a"
    assert cpu["web"].resource["service.name"] == "node-requests-agent"


def test_grpc_export(apiserver, make_agent, otlp_env, grpc_receiver):
    apiserver.create(pod("g", containers=[container("a", "1", "1Gi")]))
    otlp_env(grpc_receiver, protocol="grpc")
    make_agent(exporter="otlp", otlp_protocol="grpc")
    points = grpc_receiver.wait_for(lambda pts: pods_in(pts) == {"g"})
    assert series(points, "pod_or_vm_mem_requests")["g"].value == 2**30


def test_series_stop_in_the_next_export_after_delete_or_finish(apiserver, make_agent, http_receiver, otlp_env):
    for name in ("keep", "delete-me", "finish-me"):
        apiserver.create(pod(name))
    otlp_env(http_receiver)
    make_agent(exporter="otlp")
    http_receiver.wait_for(lambda pts: pods_in(pts) == {"keep", "delete-me", "finish-me"})
    apiserver.delete("default", "delete-me")
    finished = [p for p in apiserver.objects() if p["metadata"]["name"] == "finish-me"][0]
    finished["status"]["phase"] = "Succeeded"
    apiserver.update(finished)
    points = http_receiver.wait_for(lambda pts: pods_in(pts) == {"keep"})
    assert pods_in(points, "pod_or_vm_mem_requests") == {"keep"}


def test_churn_beyond_the_sdk_cardinality_limit_keeps_every_live_pod(apiserver, make_agent, http_receiver, otlp_env):
    otlp_env(http_receiver, compression="none")
    agent = make_agent(exporter="otlp")
    live: list[str] = []
    for i in range(2600):  # more distinct pods than the SDK's 2000 attribute sets
        name = f"batch-{i}"
        apiserver.create(pod(name, containers=[container("c", f"{i % 7 + 1}00m", "64Mi")]))
        live.append(name)
        if len(live) > 40:
            apiserver.delete("default", live.pop(0))
    expected = set(live)
    points = http_receiver.wait_for(lambda pts: pods_in(pts) == expected, timeout=30)
    assert not any(OVERFLOW in p.attributes for p in points)
    cpu = series(points, "pod_or_vm_cpu_requests")
    for name in expected:
        i = int(name.split("-")[1])
        assert cpu[name].value == pytest.approx((i % 7 + 1) / 10)
    assert len(agent.state) == 40


def test_collector_outage_does_not_stop_the_agent(apiserver, make_agent, http_receiver, otlp_env):
    apiserver.create(pod("a"))
    otlp_env(http_receiver)
    agent = make_agent(exporter="otlp")
    http_receiver.wait_for(lambda pts: pods_in(pts) == {"a"})
    http_receiver.fail = True
    apiserver.create(pod("b"))
    from testkit.waiting import wait_until
    wait_until(lambda: agent.stats.snapshot().exports.get("failure", 0) >= 1, timeout=15)
    http_receiver.fail = False
    http_receiver.wait_for(lambda pts: pods_in(pts) == {"a", "b"}, timeout=15)


def test_a_node_with_more_live_pods_than_the_sdk_default_limit_is_exported_whole(apiserver, make_agent, http_receiver, otlp_env):
    otlp_env(http_receiver)
    for i in range(2100):
        apiserver.create(pod(f"dense-{i}"))
    make_agent(exporter="otlp")
    points = http_receiver.wait_for(lambda pts: len(pods_in(pts)) == 2100, timeout=30)
    assert not any(OVERFLOW in p.attributes for p in points)


def _metrics_by_name(request):
    return {m.name: (sm.scope.name, m) for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def test_the_agents_own_table_is_encoded_as_cumulative_counters_histograms_and_gauges_beside_the_sdks_process_metrics(
        apiserver, make_agent, http_receiver, otlp_env):
    from agent.telemetry.table import PREFIX, RUNTIME_METRICS

    apiserver.create(pod("a"))
    otlp_env(http_receiver)
    agent = make_agent(exporter="otlp")
    http_receiver.wait_for(lambda pts: pods_in(pts) == {"a"})
    apiserver.create(pod("b"))
    http_receiver.wait_for(lambda pts: pods_in(pts) == {"a", "b"})
    http_receiver.wait_for(lambda pts: True)  # one more export, so exports_total{success} has moved
    with http_receiver.cond:
        first, last = http_receiver.requests[0][1], http_receiver.requests[-1][1]
    early, late = _metrics_by_name(first), _metrics_by_name(last)

    adds = PREFIX + "workqueue_adds_total"
    scope, metric = late[adds]
    assert scope == "node_requests_agent" and metric.WhichOneof("data") == "sum"
    assert metric.sum.is_monotonic and metric.sum.aggregation_temporality == 2  # CUMULATIVE
    by_type = {dp.attributes[0].value.string_value: dp for dp in metric.sum.data_points}
    assert by_type["ADDED"].as_int >= 1  # pod b, from the watch
    assert by_type["ADDED"].as_int <= agent.stats.snapshot().events_added["ADDED"]
    # One start for the life of the agent, before every point, the same in the first export and the last.
    starts_of_adds = {dp.start_time_unix_nano for _, m in (early[adds], late[adds]) for dp in m.sum.data_points}
    assert len(starts_of_adds) == 1 and 0 < min(starts_of_adds) < min(dp.time_unix_nano for dp in metric.sum.data_points)
    early_added = {dp.attributes[0].value.string_value: dp.as_int for dp in early[adds][1].sum.data_points}
    assert all(by_type[k].as_int >= v for k, v in early_added.items())  # a counter never goes down

    depth = late[PREFIX + "workqueue_depth"][1]
    assert depth.WhichOneof("data") == "gauge" and depth.gauge.data_points[0].start_time_unix_nano == 0
    # Every row of the table that has a value is there; histograms as cumulative OTLP histograms in seconds.
    for row in RUNTIME_METRICS:
        if row.kind == "histogram":
            histogram = late[PREFIX + row.name][1]
            assert histogram.WhichOneof("data") == "histogram" and histogram.unit == "s"
            assert histogram.histogram.aggregation_temporality == 2  # CUMULATIVE
            (dp,) = histogram.histogram.data_points
            assert dp.start_time_unix_nano == min(starts_of_adds) and sum(dp.bucket_counts) == dp.count
            assert len(dp.bucket_counts) == len(dp.explicit_bounds) + 1 and dp.explicit_bounds[0] == 1e-06
        elif row.name in ("workqueue_depth", "events_handled_total", "pods_cached", "synced", "exports_total"):
            assert PREFIX + row.name in late
    assert late[PREFIX + "pods_cached"][1].gauge.data_points[0].as_int == 2

    # The SDK's own instruments: the process, under the semantic conventions' names, in the same resource.
    scope, cpu = late["process.cpu.time"]
    assert scope == "node_requests_agent.process" and cpu.sum.is_monotonic
    assert {dp.attributes[0].value.string_value for dp in cpu.sum.data_points} == {"user", "system"}
    assert late["process.memory.usage"][1].sum.data_points[0].as_int > 10 * 2**20
    assert len(last.resource_metrics) == 1
    resource = {a.key: a.value.string_value for a in last.resource_metrics[0].resource.attributes}
    assert resource["telemetry.sdk.name"] == "opentelemetry" and resource["k8s.node.name"] == "node-a"


def test_resource_attributes_are_resolved_by_config_and_the_sdk_reads_no_environment(http_receiver, monkeypatch):
    """OTEL_RESOURCE_ATTRIBUTES comes in through config like every other setting (percent-decoded; the agent's own
    attributes win), and the SDK never reads os.environ behind config's back."""
    from agent.config import ConfigError, from_sources
    from agent.run.agent import Agent
    from testkit.otlp_receiver import points_of

    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "read.behind.configs.back=yes")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint,
           "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod%20eu,k8s.node.name=forged"}
    flags = {"node_name": "sample-node", "replay": "sample", "exporter": "otlp", "export_interval": 3600,
             "debug_address": "off", "procfs": "off"}
    agent = Agent(from_sources(flags, env)).start()
    try:
        assert agent.drain(30)
        agent.telemetry.flush()
        points = points_of(http_receiver.requests[-1][1])
    finally:
        agent.shutdown(final_export=False)
    resource = next(p for p in points if p.metric == "pod_or_vm_cpu_requests").resource
    assert resource["deployment.environment"] == "prod eu"
    assert resource["k8s.node.name"] == "sample-node" and resource["telemetry.sdk.language"] == "python"
    assert "read.behind.configs.back" not in resource
    with pytest.raises(ConfigError, match="OTEL_RESOURCE_ATTRIBUTES entry 'broken' is not key=value"):
        from_sources(flags, {**env, "OTEL_RESOURCE_ATTRIBUTES": "a=b,broken"})
