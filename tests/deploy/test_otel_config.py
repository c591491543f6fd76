"""The shipped Collector configuration, checked structurally in the fast suite.

The built Collector validates and runs it in tests/collector/test_e2e_collector.py (marker ``collector``);
these checks pin the choices that tests there measured, and the agreement with the Deployment.
"""

import dataclasses
import re
from pathlib import Path

import yaml

from agent.config import Config

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


def test_prometheus_exporters_keep_seed_names_and_node_label():
    c = config()
    for name in ("prometheus", "prometheus_remote_write"):
        exporter = c["exporters"][name]
        assert exporter["translation_strategy"] == "UnderscoreEscapingWithoutSuffixes", name
        assert exporter["resource_constant_labels"] == {"included": ["*"]}, name
        # Deprecated spellings: ignored (add_metric_suffixes) or in conflict (resource_to_telemetry_conversion).
        assert not {"add_metric_suffixes", "resource_to_telemetry_conversion", "namespace"} & set(exporter), name


def test_series_expire_after_three_of_the_agents_default_export_intervals():
    interval = next(f.default for f in dataclasses.fields(Config) if f.name == "export_interval")
    expiration = config()["exporters"]["prometheus"]["metric_expiration"]
    assert expiration == f"{3 * interval:g}s"


def test_otlp_receiver_takes_grpc_and_http_and_memory_limiter_runs_first():
    c = config()
    assert set(c["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}
    assert c["service"]["pipelines"]["metrics"]["processors"][0] == "memory_limiter"


def test_listen_addresses_come_from_the_environment_and_default_to_the_deployments_ports():
    text = CONFIG.read_text()
    defaults = {int(port) for port in re.findall(r"\$\{env:[A-Z_]+:-0\.0\.0\.0:(\d+)\}", text)}
    # The Collector's own metrics stay on loopback unless the operator opens them (not declared).
    assert re.search(r"host: \$\{env:OTELCOL_TELEMETRY_HOST:-127\.0\.0\.1\}", text)
    deployment = next(d for d in yaml.safe_load_all((OTEL / "collector-deployment.yaml").read_text())
                      if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert set(ports.values()) == defaults
    assert ports["health"] == int(config()["extensions"]["health_check"]["endpoint"].rsplit(":", 1)[1].rstrip("}"))
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/", "port": "health"}
