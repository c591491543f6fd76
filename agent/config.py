"""The agent's configuration: flags first, then environment, then defaults.

Invalid configuration raises ConfigError; the CLI turns it into one line on
stderr and exit code 2, before anything starts.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping

import msgspec

from agent.model.rules import KubernetesVersion, VersionError, parse_version

__all__ = ["Config", "ConfigError", "EXPORTERS", "OTLP_PROTOCOLS", "OTLP_TOKEN_FILE_VAR", "OtlpSettings", "from_sources", "kubernetes_version",
           "otlp_settings", "parse_address"]

EXPORTERS = ("otlp", "console", "table", "none")
# All interfaces: kubelet's probes reach the pod on its IP, not on loopback.
DEFAULT_DEBUG_ADDRESS = ":9808"
# The OpenTelemetry SDK's own defaults (OTEL_METRIC_EXPORT_INTERVAL / _TIMEOUT), in seconds.
DEFAULT_EXPORT_INTERVAL = 15.0
DEFAULT_EXPORT_TIMEOUT = 10.0
# Who may read the debug views (pods, node, runtime, /metrics, the page): "local", loopback peers only (kubectl
# port-forward arrives there), or "any". The probes answer every peer either way.
DEBUG_VIEWS = ("local", "any")
OTLP_PROTOCOLS = ("http/protobuf", "grpc")
LOG_FORMATS = ("text", "json")
#: The environment variable naming the file of the bearer token the agent shows the Collector (docs/configuration.md).
OTLP_TOKEN_FILE_VAR = "NRA_OTLP_TOKEN_FILE"


class ConfigError(ValueError):
    """Configuration the agent cannot start with."""


class OtlpSettings(msgspec.Struct, frozen=True):
    protocol: str
    endpoint: str  # http: the full URL (…/v1/metrics); grpc: scheme://host:port
    headers: tuple[tuple[str, str], ...] = ()
    compression: str = "gzip"  # "gzip" or "none"
    certificate: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    insecure: bool | None = None  # gRPC without TLS; None: decided by the endpoint's scheme
    token_file: str | None = None  # NRA_OTLP_TOKEN_FILE: a projected ServiceAccount token, sent as a bearer token


def _first(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _headers(text: str | None) -> tuple[tuple[str, str], ...]:
    if not text:
        return ()
    out = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"OTLP header {part.strip()!r} is not key=value")
        out.append((urllib.parse.unquote(key.strip()).lower(), urllib.parse.unquote(value.strip())))
    return tuple(out)


def otlp_settings(env: Mapping[str, str], protocol: str) -> OtlpSettings:
    """The exporter's settings from the standard variables (signal-specific ones win). Raises ValueError."""
    if protocol not in OTLP_PROTOCOLS:
        raise ValueError(f"OTLP protocol must be grpc or http/protobuf, got {protocol!r}")
    specific = _first(env, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    generic = _first(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
    if protocol == "grpc":
        endpoint = specific or generic or "http://localhost:4317"
    elif specific:
        endpoint = specific
    else:
        endpoint = (generic or "http://localhost:4318").rstrip("/") + "/v1/metrics"
    parsed = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"OTLP endpoint must be an http:// or https:// URL, got {endpoint!r}")
    compression = (_first(env, "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION") or "none").lower()
    if compression not in ("gzip", "none"):
        raise ValueError(f"OTLP compression must be gzip or none, got {compression!r}")
    insecure = _first(env, "OTEL_EXPORTER_OTLP_METRICS_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE")
    return OtlpSettings(
        protocol=protocol,
        endpoint=urllib.parse.urlunsplit(parsed),
        headers=_headers(_first(env, "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")),
        compression=compression,
        certificate=_first(env, "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"),
        client_certificate=_first(env, "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
                                  "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
        client_key=_first(env, "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY"),
        insecure=None if insecure is None else insecure.lower() == "true",
        token_file=_first(env, OTLP_TOKEN_FILE_VAR),
    )


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT``, or ``:PORT``: every interface, IPv6 and IPv4 ("" host)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"debug address must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


class Config(msgspec.Struct, frozen=True):
    node_name: str
    kubeconfig: str | None = None
    context: str | None = None
    replay: str | None = None
    once: bool = False
    exporter: str = "otlp"
    otlp_protocol: str = "http/protobuf"
    # Endpoint, headers, compression, TLS from OTEL_EXPORTER_OTLP_*; None for other exporters.
    otlp: OtlpSettings | None = None
    export_interval: float = DEFAULT_EXPORT_INTERVAL
    export_timeout: float = DEFAULT_EXPORT_TIMEOUT
    read_timeout: float = 120.0
    # The server-side watch timeout is drawn from this range for each watch.
    watch_timeout: tuple[int, int] = (300, 600)
    # HOST:PORT of the debug endpoint; None turns it off.
    debug_address: str | None = None
    debug_views: str = "local"
    # Host names the views accept besides loopback names and addresses and the IP literal connected to.
    debug_hosts: tuple[str, ...] = ()
    # The /proc the "used" series are read from; None turns them off.
    procfs: str | None = None
    log_level: str = "INFO"
    # "text" (for a person) or "json" (one object a line, for a log pipeline).
    log_format: str = "text"
    # --kubernetes-version: whose request rules to use; None reads the API server's /version.
    kubernetes_version: KubernetesVersion | None = None


def _seconds(value: str | float | None, name: str, default: float, millis: bool = False) -> float:
    if value is None or value == "":
        return default
    try:
        seconds = float(value) / (1000 if millis else 1)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{name} must be positive, got {value!r}")
    return seconds


def kubernetes_version(value: object) -> KubernetesVersion | None:
    """``--kubernetes-version`` (None when not given); an unparsable value is a ConfigError."""
    if value is None:
        return None
    try:
        return parse_version(str(value))
    except VersionError as exc:
        raise ConfigError(f"--kubernetes-version: {exc}") from None


def from_sources(args: Mapping[str, object], env: Mapping[str, str]) -> Config:
    """Merge parsed flags (None where not given) with the environment."""
    node = str(args.get("node_name") or env.get("NODE_NAME") or "").strip()
    if not node:
        raise ConfigError("the node name is required: set NODE_NAME (the DaemonSet sets it from spec.nodeName) or pass --node-name")
    exporter = str(args.get("exporter") or env.get("OTEL_METRICS_EXPORTER") or "otlp").strip().lower()
    if exporter not in EXPORTERS:
        raise ConfigError(f"exporter must be one of {', '.join(EXPORTERS)}, got {exporter!r}")
    protocol = (env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
    otlp = None
    if exporter == "otlp":
        try:
            otlp = otlp_settings(env, protocol)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    interval_flag = args.get("export_interval")
    interval = (_seconds(interval_flag, "--export-interval", DEFAULT_EXPORT_INTERVAL) if interval_flag is not None
                else _seconds(env.get("OTEL_METRIC_EXPORT_INTERVAL"), "OTEL_METRIC_EXPORT_INTERVAL", DEFAULT_EXPORT_INTERVAL, millis=True))
    timeout_flag = args.get("export_timeout")
    timeout = (_seconds(timeout_flag, "--export-timeout", DEFAULT_EXPORT_TIMEOUT) if timeout_flag is not None
               else _seconds(env.get("OTEL_METRIC_EXPORT_TIMEOUT"), "OTEL_METRIC_EXPORT_TIMEOUT", DEFAULT_EXPORT_TIMEOUT, millis=True))
    read_timeout = _seconds(args.get("read_timeout"), "--read-timeout", 120.0)
    once = bool(args.get("once"))
    replay = args.get("replay")
    if once and not replay:
        raise ConfigError("--once needs --replay: a live agent runs until it is stopped")
    debug = args.get("debug_address")
    if debug is None:
        debug = env.get("DEBUG_ADDRESS", DEFAULT_DEBUG_ADDRESS if not once else "off")
    debug = str(debug).strip()
    if debug.lower() in ("", "off", "none"):
        debug_address = None
    else:
        try:
            parse_address(debug)
        except ValueError:
            raise ConfigError(f"--debug-address must be HOST:PORT, :PORT or off, got {debug!r}") from None
        debug_address = debug
    views = str(args.get("debug_views") or env.get("DEBUG_VIEWS") or "local").strip().lower()
    if views not in DEBUG_VIEWS:
        raise ConfigError(f"--debug-views must be local or any, got {views!r}")
    hosts_arg = args.get("debug_host")
    hosts_text = ",".join(hosts_arg) if isinstance(hosts_arg, (list, tuple)) else str(hosts_arg or env.get("DEBUG_HOSTS") or "")
    debug_hosts = tuple(h.strip() for h in hosts_text.split(",") if h.strip())
    if any(c in h for h in debug_hosts for c in "/ @"):
        raise ConfigError(f"--debug-host takes host names, got {hosts_text!r}")
    # /proc/stat and /proc/meminfo are not namespaced: the container's own /proc
    # shows the whole host, so no host mount is needed (docs/deployment.md).
    procfs = str(args.get("procfs") or env.get("HOST_PROC") or "/proc")
    procfs = None if procfs.lower() == "off" else procfs
    level = str(args.get("log_level") or env.get("LOG_LEVEL") or "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"log level must be DEBUG, INFO, WARNING or ERROR, got {level!r}")
    log_format = str(args.get("log_format") or env.get("LOG_FORMAT") or "text").strip().lower()
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"log format must be {' or '.join(LOG_FORMATS)}, got {log_format!r}")
    return Config(
        node_name=node,
        kubeconfig=args.get("kubeconfig") or None,  # type: ignore[arg-type]
        context=args.get("context") or None,  # type: ignore[arg-type]
        replay=replay or None,  # type: ignore[arg-type]
        once=once,
        exporter=exporter,
        otlp_protocol=protocol,
        otlp=otlp,
        export_interval=interval,
        export_timeout=timeout,
        read_timeout=read_timeout,
        debug_address=debug_address,
        debug_views=views,
        debug_hosts=debug_hosts,
        procfs=procfs,
        log_level=level,
        log_format=log_format,
        kubernetes_version=kubernetes_version(args.get("kubernetes_version")),
    )
