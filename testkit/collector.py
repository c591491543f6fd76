"""A real OpenTelemetry Collector and a real Prometheus as test fixtures.

The Collector is the binary components.collector builds from
otel-config/builder-config.yaml; Prometheus is Prometheus 3 built from its Go
module (components.gotools).
Both run as child processes on free loopback ports chosen at start, with their
logs under the test's workdir, and are stopped by pid. Nothing here knows a
fixed port, so sessions can run side by side.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import textwrap
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import yaml
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from testkit.cluster import free_ports
from testkit.http import http_get, request as http_request
from testkit.processes import log_tail, stop_process
from testkit.waiting import wait_until
from testkit.repo import REPO

__all__ = ["ENDPOINT_VARS", "SCRAPE_CONFIG", "SHIPPED_CONFIG", "Collector", "Prometheus", "collector_container",
           "gauge", "go_runtime_env", "grpc_receiver", "grpc_variant_config", "otlp_request", "post_otlp",
           "prometheus_config", "pull_variant_config", "sum_metric"]

SHIPPED_CONFIG = REPO / "otel-config" / "collector.yaml"
SCRAPE_CONFIG = REPO / "otel-config" / "prometheus" / "scrape.yaml"
DEPLOYMENT_DOC = REPO / "docs" / "deployment.md"

# The environment variables otel-config/collector.yaml reads its listen addresses from.
ENDPOINT_VARS = ("OTLP_GRPC_ENDPOINT", "OTLP_HTTP_ENDPOINT", "PROMETHEUS_EXPORTER_ENDPOINT", "HEALTH_CHECK_ENDPOINT")
# The collector's own metrics: host and port are separate keys in its telemetry config.
TELEMETRY_HOST_VAR, TELEMETRY_PORT_VAR = "OTELCOL_TELEMETRY_HOST", "OTELCOL_TELEMETRY_PORT"
# Where the shipped OTLP/HTTP receiver reads its serving certificate (its tls block), and the script an operator
# runs to make it (the tests run it too, so the certificate they serve is the one the docs have operators make).
TLS_VARS = ("OTLP_TLS_CERT_FILE", "OTLP_TLS_KEY_FILE")
MAKE_TLS_SECRETS = REPO / "otel-config" / "tls" / "make-secrets.sh"


def _attributes(values: Mapping[str, object]) -> list[KeyValue]:
    """OTLP attributes from a plain dict (str, bool, int or float values)."""
    def any_value(v: object) -> AnyValue:
        if isinstance(v, bool):
            return AnyValue(bool_value=v)
        if isinstance(v, int):
            return AnyValue(int_value=v)
        if isinstance(v, float):
            return AnyValue(double_value=v)
        return AnyValue(string_value=str(v))
    return [KeyValue(key=k, value=any_value(v)) for k, v in values.items()]


def _number_points(points: Iterable[tuple[Mapping[str, object], float]], start_ns: int = 0) -> list:
    """NumberDataPoints stamped now, one per ``(attributes, value)``."""
    now = time.time_ns()
    return [metrics_pb2.NumberDataPoint(attributes=_attributes(a), as_double=float(v), time_unix_nano=now,
                                        start_time_unix_nano=start_ns or now - 10**9) for a, v in points]


def gauge(name: str, unit: str, points: Iterable[tuple[Mapping[str, object], float]]) -> metrics_pb2.Metric:
    """An OTLP gauge, as the agent's synchronous gauges export it."""
    return metrics_pb2.Metric(name=name, unit=unit, gauge=metrics_pb2.Gauge(data_points=_number_points(points)))


def sum_metric(name: str, unit: str, points: Iterable[tuple[Mapping[str, object], float]],
               monotonic: bool = True) -> metrics_pb2.Metric:
    """An OTLP cumulative sum: a Prometheus counter when monotonic."""
    data = metrics_pb2.Sum(data_points=_number_points(points), is_monotonic=monotonic,
                           aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE)
    return metrics_pb2.Metric(name=name, unit=unit, sum=data)


def otlp_request(resource: Mapping[str, object], metrics: Sequence[metrics_pb2.Metric],
                 scope: str = "node-requests-agent") -> ExportMetricsServiceRequest:
    """One ExportMetricsServiceRequest from one resource and scope."""
    return ExportMetricsServiceRequest(resource_metrics=[metrics_pb2.ResourceMetrics(
        resource={"attributes": _attributes(resource)},
        scope_metrics=[metrics_pb2.ScopeMetrics(scope={"name": scope}, metrics=list(metrics))])])


def post_otlp(url: str, request: ExportMetricsServiceRequest, timeout: float = 5.0, token: str | None = None,
              ca_file: str | None = None) -> int:
    """POST a protobuf OTLP/HTTP request (as the SDK's HTTP exporter does), with ``token`` as its bearer token if
    one is given, an https ``url`` verified against ``ca_file``; returns the HTTP status."""
    headers = {"Content-Type": "application/x-protobuf"} | ({"Authorization": f"Bearer {token}"} if token else {})
    context = ssl.create_default_context(cafile=ca_file) if ca_file else None
    return http_request(url, "POST", timeout, data=request.SerializeToString(), headers=headers, context=context)[0]


def collector_container(otel_config: Path = SHIPPED_CONFIG.parent) -> dict:
    """The Collector's container as ``otel_config``'s collector-deployment.yaml declares it (its limits, its env)."""
    deployment = next(d for d in yaml.safe_load_all((otel_config / "collector-deployment.yaml").read_text())
                      if d["kind"] == "Deployment")
    return deployment["spec"]["template"]["spec"]["containers"][0]


def go_runtime_env(otel_config: Path = SHIPPED_CONFIG.parent) -> dict[str, str]:
    """The Go runtime's settings (``GOMEMLIMIT``...) that ``otel_config``'s Deployment gives the Collector, so a
    Collector run here runs under them as in its pod; none where it sets none."""
    env = collector_container(otel_config).get("env", [])
    return {e["name"]: e["value"] for e in env if e["name"].startswith("GO")}


def grpc_receiver() -> dict:
    """The gRPC receiver block docs/deployment.md gives for agents set to protocol grpc (the shipped config has
    only OTLP/HTTP), read from the document so that what the tests run is what it tells operators to add."""
    text = DEPLOYMENT_DOC.read_text()
    block = re.search(r"Variant, gRPC receiver\*\*.*?```yaml\n(.*?)```", text, re.S)
    assert block, "docs/deployment.md has no 'Variant, gRPC receiver' yaml block"
    return yaml.safe_load(textwrap.dedent(block.group(1)))["grpc"]


def _with_grpc(config: dict) -> dict:
    config["receivers"]["otlp"]["protocols"]["grpc"] = grpc_receiver()
    return config


def grpc_variant_config(directory: Path) -> Path:
    """The shipped config with docs/deployment.md's gRPC receiver added, written into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "collector-grpc-variant.yaml"
    path.write_text(yaml.safe_dump(_with_grpc(yaml.safe_load(SHIPPED_CONFIG.read_text())), sort_keys=False))
    return path


def pull_variant_config(directory: Path) -> Path:
    """The shipped config as the scrape-based tests run it, written into ``directory``.

    Those tests' agents watch a fake API server, so they hold no ServiceAccount token: the receivers'
    oidc authenticator and the nodeidentity processor (which needs the verified token) are left out,
    and the pipeline ends in the pull variant's prometheus exporter (with batch) as docs/deployment.md describes.
    The admission middleware goes too: it refuses every push whose token is not the agent's before anything else.
    Everything else (memory_limiter, the exporters' settings) is the shipped file's; without the token the
    receiver's TLS is left out too. The token path, its TLS and the remote-write pipeline run unmodified in
    tests/collector/test_collector_trust.py and its neighbours, and on the real node (tests/node/).
    Those tests' agents push over both protocols, so docs/deployment.md's gRPC receiver is added.
    """
    config = _with_grpc(yaml.safe_load(SHIPPED_CONFIG.read_text()))
    for protocol in config["receivers"]["otlp"]["protocols"].values():
        protocol.pop("auth", None)
        protocol.pop("tls", None)  # no token to protect: these tests' senders push in clear
        protocol.pop("middlewares", None)
    config["extensions"].pop("oidc")
    config["extensions"].pop("admission")
    config["processors"].pop("nodeidentity")
    config["service"]["extensions"] = [e for e in config["service"]["extensions"] if e not in ("oidc", "admission")]
    config["service"]["pipelines"]["metrics"].update(processors=["memory_limiter", "batch"], exporters=["prometheus"])
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "collector-pull-variant.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class Collector:
    """The built otelcol running ``config_path`` on free loopback ports.

    ``config_path`` None (the default) runs ``pull_variant_config()``: the shipped config without the
    token check, ending in the prometheus exporter. Pass SHIPPED_CONFIG for the file as shipped.

    The listen addresses reach the config through the environment variables it
    reads (ENDPOINT_VARS), so the file itself runs unmodified. The ports are
    chosen once and kept by restart(), so senders configured with the endpoint
    find the collector again after a fault test. ``overrides`` are
    ``--set key::path=value`` settings (e.g. a tiny memory limit); ``env`` is
    applied last, so it can also point an endpoint variable elsewhere.

    A config whose OTLP/HTTP receiver has a ``tls`` block (the shipped one) serves the certificate that
    otel-config/tls/make-secrets.sh makes in the workdir, for the Service's names and 127.0.0.1: its OTLP/HTTP URLs
    are https, verified against ``ca_file``.
    """

    def __init__(self, workdir: Path, config_path: Path | None = None, env: Mapping[str, str] | None = None,
                 overrides: Iterable[str] = (), binary: Path | None = None) -> None:
        self.workdir = Path(workdir)
        self.config_path = Path(config_path) if config_path is not None else pull_variant_config(self.workdir)
        self.extra_env = dict(env or {})
        self.overrides = list(overrides)
        self.binary = binary
        self.log_path = self.workdir / "otelcol.log"
        self.ports = dict(zip([*ENDPOINT_VARS, TELEMETRY_PORT_VAR], free_ports(len(ENDPOINT_VARS) + 1)))
        self._proc: subprocess.Popen | None = None
        http = yaml.safe_load(self.config_path.read_text())["receivers"]["otlp"]["protocols"].get("http") or {}
        self.tls_dir = self.workdir / "tls" if http.get("tls") else None

    @property
    def ca_file(self) -> str | None:
        """The CA that signed the OTLP/HTTP receiver's certificate; None when it serves in clear."""
        return str(self.tls_dir / "ca.crt") if self.tls_dir else None

    def _make_tls(self) -> dict[str, str]:
        """The serving certificate, made once per instance (a restart serves the same one)."""
        if self.tls_dir is None:
            return {}
        if not (self.tls_dir / "tls.crt").exists():
            made = subprocess.run([str(MAKE_TLS_SECRETS), "--no-apply", str(self.tls_dir)], capture_output=True,
                                  text=True, env={**os.environ, "EXTRA_SANS": "IP:127.0.0.1"}, timeout=60)
            if made.returncode != 0:
                raise RuntimeError(f"{MAKE_TLS_SECRETS.name} failed: {made.stderr}")
        return dict(zip(TLS_VARS, (str(self.tls_dir / "tls.crt"), str(self.tls_dir / "tls.key"))))

    def env(self) -> dict[str, str]:
        """The endpoint variables on this instance's ports (what a test would export in a shell)."""
        return {**{var: f"127.0.0.1:{self.ports[var]}" for var in ENDPOINT_VARS},
                TELEMETRY_HOST_VAR: "127.0.0.1", TELEMETRY_PORT_VAR: str(self.ports[TELEMETRY_PORT_VAR])}

    def _argv(self) -> list[str]:
        binary = self.binary
        if binary is None:
            from components.collector import otelcol_bin
            binary = otelcol_bin()
        return [str(binary), "--config", str(self.config_path), *(f"--set={o}" for o in self.overrides)]

    def start(self, timeout: float = 30.0) -> Collector:
        """Launch the collector and wait until its health_check reports it ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(self._argv(), env={**os.environ, **self.env(), **self._make_tls(),
                                                              **self.extra_env}, stdout=log,
                                          stderr=subprocess.STDOUT, cwd=self.workdir)
        self._wait_ready(timeout)
        return self

    def _ready(self) -> bool:
        """True once health_check answers 200; fails fast if the process has exited."""
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(f"otelcol exited with {self._proc.returncode}:\n{log_tail(self.log_path)}")
        try:
            return http_get(self.health_url, timeout=1)[0] == 200
        except OSError:
            return False

    def _wait_ready(self, timeout: float) -> None:
        try:
            wait_until(self._ready, timeout=timeout, interval=0.1, message="otelcol health_check ready")
        except AssertionError:
            self.stop(graceful=False)
            raise RuntimeError(f"otelcol not ready after {timeout} s:\n{log_tail(self.log_path)}") from None

    def stop(self, graceful: bool = True) -> None:
        """Stop the process by pid (SIGTERM, or SIGKILL to simulate a crash)."""
        stop_process(self._proc, 10.0, graceful)

    def restart(self, graceful: bool = True, downtime: float = 0.0) -> Collector:
        """Stop, stay down ``downtime`` seconds, and start again on the same ports."""
        self.stop(graceful)
        time.sleep(downtime)
        return self.start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _url(self, var: str, path: str = "", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.ports[var]}{path}"

    @property
    def _otlp_http_scheme(self) -> str:
        return "https" if self.tls_dir else "http"

    @property
    def otlp_http_endpoint(self) -> str:
        """Base URL for OTEL_EXPORTER_OTLP_ENDPOINT (the SDK appends /v1/metrics)."""
        return self._url("OTLP_HTTP_ENDPOINT", scheme=self._otlp_http_scheme)

    @property
    def otlp_http_metrics_url(self) -> str:
        """Full URL for OTEL_EXPORTER_OTLP_METRICS_ENDPOINT."""
        return self._url("OTLP_HTTP_ENDPOINT", "/v1/metrics", self._otlp_http_scheme)

    @property
    def otlp_grpc_endpoint(self) -> str:
        """URL for OTEL_EXPORTER_OTLP_ENDPOINT with protocol grpc (http: means without TLS)."""
        return self._url("OTLP_GRPC_ENDPOINT")

    @property
    def prometheus_target(self) -> str:
        """host:port of the prometheus exporter, for a scrape config."""
        return f"127.0.0.1:{self.ports['PROMETHEUS_EXPORTER_ENDPOINT']}"

    @property
    def metrics_url(self) -> str:
        return self._url("PROMETHEUS_EXPORTER_ENDPOINT", "/metrics")

    @property
    def telemetry_url(self) -> str:
        """The collector's own metrics (otelcol_*)."""
        return self._url(TELEMETRY_PORT_VAR, "/metrics")

    @property
    def health_url(self) -> str:
        return self._url("HEALTH_CHECK_ENDPOINT", "/")

    def exported_metrics(self) -> str:
        """The prometheus exporter's current /metrics text."""
        status, body = http_get(self.metrics_url)
        assert status == 200, (status, body[:500])
        return body.decode()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> Collector:
        return self.start() if self._proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def prometheus_config(scrape_targets: Sequence[str], interval: str, rule_files: Sequence[Path] | None = None,
                      extra: Mapping[str, object] | None = None) -> dict:
    """otel-config/prometheus/scrape.yaml with its Kubernetes discovery replaced by ``scrape_targets``.

    Everything else of the shipped jobs stays (job name, honor_labels), so label
    names in queries are what a deployment sees; the intervals are shortened to
    ``interval``. ``rule_files`` default to the ones scrape.yaml names.
    """
    shipped = yaml.safe_load(SCRAPE_CONFIG.read_text())
    jobs = []
    for job in shipped["scrape_configs"]:
        job = {k: v for k, v in job.items() if k not in ("kubernetes_sd_configs", "relabel_configs")}
        jobs.append({**job, "scrape_interval": interval, "static_configs": [{"targets": list(scrape_targets)}]})
    if rule_files is None:
        rule_files = [SCRAPE_CONFIG.parent / f for f in shipped.get("rule_files", [])]
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(Path(p).resolve()) for p in rule_files],
        "scrape_configs": jobs,
        **(extra or {}),
    }


class Prometheus:
    """A real Prometheus 3 on a free port scraping the given targets with the shipped scrape config.

    ``rule_files`` default to the shipped rules (as scrape.yaml loads them);
    ``extra_config`` adds top-level sections (e.g. Prometheus 3's ``otlp``). ``config_file`` is a configuration
    made elsewhere (the Prometheus Operator's), run as it is: the arguments that build one are then unused, and
    start() does not wait for a first scrape (its targets are discovered, not listed here).
    """

    def __init__(self, workdir: Path, scrape_targets: Sequence[str], rule_files: Sequence[Path] | None = None,
                 interval: str = "1s", extra_flags: Sequence[str] = (),
                 extra_config: Mapping[str, object] | None = None, host: str = "127.0.0.1",
                 config_file: Path | None = None) -> None:
        self.workdir = Path(workdir)
        #: The address it listens on: loopback, or an address inside a network namespace the test made.
        self.host = host
        self.scrape_targets = list(scrape_targets)
        self.rule_files = rule_files
        self.interval = interval
        self.extra_flags = list(extra_flags)
        self.extra_config = dict(extra_config or {})
        self.config_file = config_file
        self.log_path = self.workdir / "prometheus.log"
        self.port = 0
        self._proc: subprocess.Popen | None = None

    def _argv(self, config: Path) -> list[str]:
        from components.gotools import tool_bin

        return [str(tool_bin("prometheus") / "prometheus"), f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={self.host}:{self.port}", "--log.level=warn", *self.extra_flags]

    def start(self, timeout: float = 30.0) -> Prometheus:
        """Write the config, launch, and wait for /-/ready and the first scrape of every target."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_ports(1)[0]
        config = self.config_file or self.workdir / "prometheus.yml"
        if self.config_file is None:
            config.write_text(yaml.safe_dump(prometheus_config(self.scrape_targets, self.interval, self.rule_files,
                                                               self.extra_config)))
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(self._argv(config), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        try:
            wait_until(self._ready, timeout=timeout, interval=0.1, message="prometheus /-/ready")
            # Discovered targets reach the scrape manager only every 5 s (the discovery manager's update
            # interval): until then a series sent at once would not be scraped, so wait for the first scrape.
            if self.config_file is None:
                wait_until(self._scraped_once, timeout=timeout, interval=0.1, message="first scrape of every target")
        except AssertionError:
            self.stop(graceful=False)
            raise RuntimeError(f"prometheus not ready after {timeout} s:\n{log_tail(self.log_path)}") from None
        return self

    def _ready(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {self._proc.returncode}:\n{log_tail(self.log_path)}")
        try:
            return http_get(f"{self.url}/-/ready", timeout=1)[0] == 200
        except OSError:
            return False

    def _scraped_once(self) -> bool:
        """Every configured target has been scraped at least once (up or down)."""
        health = [t["health"] for t in self.targets()]
        return len(health) == len(self.scrape_targets) and "unknown" not in health

    def stop(self, graceful: bool = True) -> None:
        """Stop the process by pid."""
        stop_process(self._proc, 10.0, graceful)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def api(self, path: str, params: Mapping[str, str] | Sequence[tuple[str, str]] | None = None) -> object:
        """``data`` of a successful /api/v1 call; anything else fails the test with the error."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = http_get(f"{self.url}/api/v1/{path}{query}", timeout=10)
        reply = json.loads(body)
        assert status == 200 and reply.get("status") == "success", (status, reply)
        return reply["data"]

    def query(self, promql: str) -> list[dict]:
        """Instant-vector result of ``promql`` now: ``[{"metric": {...}, "value": [ts, "v"]}, ...]``."""
        return self.api("query", {"query": promql})["result"]

    def names(self, selector: str) -> set[str]:
        """Metric names of the series matching ``selector`` now."""
        return {r["metric"]["__name__"] for r in self.query(f"group by (__name__) ({selector})")}

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's ``label_values(match, label)`` lists."""
        return self.api(f"label/{label}/values", [("match[]", match)])

    def alerts(self) -> list[dict]:
        """Pending and firing alerts."""
        return self.api("alerts")["alerts"]

    def rules(self) -> list[dict]:
        """Rule groups with their rules' health, last error and state."""
        return self.api("rules")["groups"]

    def targets(self) -> list[dict]:
        """Active scrape targets with health and last error."""
        return self.api("targets")["activeTargets"]

    def __enter__(self) -> Prometheus:
        return self.start() if self._proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
