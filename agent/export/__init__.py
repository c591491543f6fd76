"""Exporters: the node state as OpenTelemetry metrics, pushed over OTLP."""
