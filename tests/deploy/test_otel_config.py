"""The shipped Collector configuration, checked structurally in the fast suite.

The built Collector validates and runs it in tests/collector/test_e2e_collector.py (marker ``collector``);
these checks pin the choices that tests there measured, and the agreement with the Deployment.
"""

import re
from pathlib import Path

import yaml

from agent.config import SETTINGS

OTEL = Path(__file__).resolve().parents[2] / "otel-config"
CONFIG = OTEL / "collector.yaml"


def config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def test_every_pipeline_component_is_defined():
    c = config()
    for name, pipeline in c["service"]["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in c[kind], f"{name} uses undefined {kind[:-1]} {component}"
    assert all(e in c["extensions"] for e in c["service"]["extensions"])


def test_prometheus_exporters_keep_seed_names_and_only_the_node_label():
    c = config()
    for name in ("prometheus", "prometheus_remote_write"):
        exporter = c["exporters"][name]
        assert exporter["translation_strategy"] == "UnderscoreEscapingWithoutSuffixes", name
        # Named, never "*": no sender-chosen or version-dependent resource attribute becomes a label.
        assert exporter["resource_constant_labels"] == {"included": ["k8s.node.name"]}, name
        # Deprecated spellings: ignored (add_metric_suffixes) or in conflict (resource_to_telemetry_conversion).
        assert not {"add_metric_suffixes", "resource_to_telemetry_conversion", "namespace"} & set(exporter), name
    rw = c["exporters"]["prometheus_remote_write"]
    assert rw["disable_scope_info"] is True and rw["target_info"] == {"enabled": False}


def _agent_metric_names() -> set[str]:
    from agent.export.metrics import GAUGES
    from agent.export.otlp.process import PROCESS_METRICS
    from agent.telemetry.table import PREFIX, RUNTIME_METRICS

    return set(GAUGES) | set(PROCESS_METRICS) | {PREFIX + m.name for m in RUNTIME_METRICS}


def _agent_metric_types() -> dict[str, str]:
    """Each metric the agent sends with the OTLP type it sends it as (agent/export/otlp/encode.py, the SDK's
    observable counters for the process metrics)."""
    from agent.export.metrics import GAUGES
    from agent.export.otlp.process import PROCESS_METRICS
    from agent.telemetry.table import PREFIX, RUNTIME_METRICS

    otlp = {"gauge": "gauge", "counter": "sum", "histogram": "histogram"}
    return ({n: "gauge" for n in GAUGES} | {n: "sum" for n in PROCESS_METRICS}
            | {PREFIX + m.name: otlp[m.kind] for m in RUNTIME_METRICS})


def test_the_allow_list_is_exactly_the_agents_metrics_each_with_its_type():
    declared = {name: typ for typ, names in config()["processors"]["nodeidentity"]["metrics"].items() for name in names}
    assert set(declared) == _agent_metric_names()
    assert declared == _agent_metric_types()


def test_the_per_node_pod_budget_is_the_kubelets_max_pods_plus_as_many_ended():
    c = config()["processors"]["nodeidentity"]
    assert c["max_pods_per_node"] == "${env:NODEIDENTITY_MAX_PODS_PER_NODE:-220}" and c["pod_window"] == "1m"


def test_the_shipped_pipeline_checks_the_token_and_writes_synchronously():
    c = config()
    for protocol in c["receivers"]["otlp"]["protocols"].values():
        assert protocol["auth"] == {"authenticator": "oidc"}
    pipeline = c["service"]["pipelines"]["metrics"]
    assert pipeline["processors"] == ["memory_limiter", "nodeidentity"]  # no batch: answered after the write
    assert pipeline["exporters"] == ["prometheus_remote_write"]
    assert c["exporters"]["prometheus_remote_write"]["remote_write_queue"] == {"enabled": False}
    assert "oidc" in c["service"]["extensions"]
    daemonset = yaml.safe_load((OTEL.parent / "daemonset" / "daemonset.yaml").read_text())
    (volume,) = [v for v in daemonset["spec"]["template"]["spec"]["volumes"] if "projected" in v]
    audience = volume["projected"]["sources"][0]["serviceAccountToken"]["audience"]
    assert re.search(rf"audience: \$\{{env:OIDC_AUDIENCE:-{audience}\}}", CONFIG.read_text())


def test_pull_variant_series_expire_after_three_of_the_agents_default_export_intervals():
    interval = SETTINGS["export_interval"].default
    expiration = config()["exporters"]["prometheus"]["metric_expiration"]
    assert expiration == f"{3 * interval:g}s"


def test_otlp_receiver_takes_only_http_bounded_and_memory_limiter_runs_first():
    """Issue 29: the agent pushes OTLP/HTTP (daemonset.yaml); a gRPC receiver was an unused way in. The body is
    bounded (received and decompressed), and so are the requests read at once (the admission middleware)."""
    c = config()
    assert set(c["receivers"]["otlp"]["protocols"]) == {"http"}
    daemonset = yaml.safe_load((OTEL.parent / "daemonset" / "daemonset.yaml").read_text())
    env = {e["name"]: e.get("value") for e in daemonset["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    http = c["receivers"]["otlp"]["protocols"]["http"]
    assert http["max_request_body_size"] == 2 * 2**20
    assert http["compression_algorithms"] == ["", "gzip"]
    assert http["middlewares"] == [{"id": "admission"}] and "admission" in c["service"]["extensions"]
    admission = c["extensions"]["admission"]
    assert admission["max_concurrent_requests"] == 8 and admission["max_requests_per_node"] == 2
    # The admission check and nodeidentity name the same ServiceAccount (one environment variable).
    assert admission["service_account"] == c["processors"]["nodeidentity"]["service_account"]
    assert c["service"]["pipelines"]["metrics"]["processors"][0] == "memory_limiter"


def test_memory_limiter_and_gomemlimit_fit_the_deployments_memory_limit():
    """Issue 38: the heap the memory_limiter allows and the Go runtime's soft limit both stay under the pod's
    limit, with room for what is not heap (stacks, buffers, the runtime)."""
    limiter = config()["processors"]["memory_limiter"]
    deployment = next(d for d in yaml.safe_load_all((OTEL / "collector-deployment.yaml").read_text())
                      if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    limit_mib = int(container["resources"]["limits"]["memory"].removesuffix("Mi"))
    gomemlimit = int(next(e["value"] for e in container["env"] if e["name"] == "GOMEMLIMIT").removesuffix("MiB"))
    assert "limit_percentage" not in limiter  # a percentage of the host's memory where no cgroup limit is seen
    assert limiter["limit_mib"] - limiter["spike_limit_mib"] < limiter["limit_mib"] <= gomemlimit <= 0.8 * limit_mib


def test_listen_addresses_come_from_the_environment_and_default_to_the_deployments_ports():
    text = CONFIG.read_text()
    defaults = {int(port) for port in re.findall(r"\$\{env:[A-Z_]+:-0\.0\.0\.0:(\d+)\}", text)}
    # The Collector's own metrics are served on the pod's address for Prometheus (declared as port metrics).
    assert re.search(r"host: \$\{env:OTELCOL_TELEMETRY_HOST:-0\.0\.0\.0\}", text)
    defaults.add(int(re.search(r"port: \$\{env:OTELCOL_TELEMETRY_PORT:-(\d+)\}", text).group(1)))
    # The pull variant's exporter port is not served by the shipped pipeline, so not declared.
    defaults.discard(int(config()["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1].rstrip("}")))
    deployment = next(d for d in yaml.safe_load_all((OTEL / "collector-deployment.yaml").read_text())
                      if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert set(ports.values()) == defaults
    assert ports["health"] == int(config()["extensions"]["health_check"]["endpoint"].rsplit(":", 1)[1].rstrip("}"))
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/", "port": "health"}
