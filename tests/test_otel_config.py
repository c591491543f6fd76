"""The shipped Collector configuration, checked structurally (no Collector binary runs here)."""

from pathlib import Path

import yaml

CONFIG = Path(__file__).resolve().parent.parent / "otel-config" / "collector.yaml"


def test_every_pipeline_component_is_defined():
    config = yaml.safe_load(CONFIG.read_text())
    for name, pipeline in config["service"]["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in config[kind], f"{name} uses undefined {kind[:-1]} {component}"


def test_prometheus_exporter_keeps_seed_names_and_node_label():
    prometheus = yaml.safe_load(CONFIG.read_text())["exporters"]["prometheus"]
    assert prometheus["add_metric_suffixes"] is False
    assert prometheus["resource_to_telemetry_conversion"]["enabled"] is True
    assert "namespace" not in prometheus  # a namespace would prefix every name


def test_otlp_receiver_takes_grpc_and_http_and_memory_limiter_runs_first():
    config = yaml.safe_load(CONFIG.read_text())
    assert set(config["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}
    assert config["service"]["pipelines"]["metrics"]["processors"][0] == "memory_limiter"
