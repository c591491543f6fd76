"""Sending OTLP: one export is bounded by its timeout, and success means the Collector accepted the points.

Why not the SDK's OTLP exporters' transport: with opentelemetry-exporter-otlp
1.45 a redirect, a 200 with an HTML body and a partial-success answer that
rejects every point all count as success, and an HTTP export has no whole-
request deadline (a Collector that trickles bytes holds it for ever). Here
the SDK still collects the agent's own instruments and encodes them
(``encode_metrics``, public); the node state is added (``otlp_encode``); then
one of two small transports sends the request:

- HTTP: ``http.client`` on one kept-alive connection, no redirects followed,
  a watchdog that shuts the socket at the deadline;
- gRPC: the official stub with a call deadline (gRPC deadlines are total).

Retryable answers (429, 502, 503, 504, UNAVAILABLE, connection failures) are
retried with backoff until the deadline. Configuration follows the standard
``OTEL_EXPORTER_OTLP_*`` variables.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from agent.export.otlp_encode import RequestBuilder
from agent.export.bearer_token import TOKEN_FILE_VAR, TokenFile
from agent.pipeline.stats import EXPORT_LOOP, RuntimeStats

__all__ = ["OtlpSettings", "Verdict", "otlp_settings", "OtlpExporter", "HttpTransport", "GrpcTransport",
           "StateExporter"]

log = logging.getLogger(__name__)

PROTOCOLS = ("http/protobuf", "grpc")
_RETRYABLE_HTTP = (429, 502, 503, 504)


@dataclass(frozen=True)
class OtlpSettings:
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
    if protocol not in PROTOCOLS:
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
        token_file=_first(env, TOKEN_FILE_VAR),
    )


@dataclass(frozen=True)
class Verdict:
    """How one attempt ended. ``reason`` is a bounded word for the failure counter."""

    ok: bool
    reason: str
    retryable: bool = False
    rejected_points: int = 0
    message: str = ""
    retry_after: float | None = None


def _accepted(response: ExportMetricsServiceResponse, sent_points: int) -> Verdict:
    rejected = response.partial_success.rejected_data_points
    message = response.partial_success.error_message
    if rejected and rejected >= sent_points:
        return Verdict(False, "rejected", rejected_points=rejected, message=message)
    return Verdict(True, "success", rejected_points=rejected, message=message)


def _ssl_context(s: OtlpSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=s.certificate)
    if s.client_certificate:
        context.load_cert_chain(s.client_certificate, s.client_key)
    return context


class HttpTransport:
    """OTLP/HTTP protobuf over one kept-alive connection, with a whole-request deadline."""

    def __init__(self, settings: OtlpSettings) -> None:
        self._s = settings
        url = urllib.parse.urlsplit(settings.endpoint)
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname or "localhost", url.port or (443 if self._https else 80)
        self._path = (url.path or "/v1/metrics") + (f"?{url.query}" if url.query else "")
        self._context = _ssl_context(settings) if self._https else None
        self._conn: http.client.HTTPConnection | None = None
        self._headers = {"Content-Type": "application/x-protobuf", "User-Agent": "node-requests-agent",
                         **dict(settings.headers)}
        if settings.compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"
        self._token = TokenFile(settings.token_file) if settings.token_file else None

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._context)
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        else:
            self._conn.timeout = timeout
            if self._conn.sock is not None:
                self._conn.sock.settimeout(timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def send(self, request: ExportMetricsServiceRequest, points: int, deadline: float) -> Verdict:
        body = request.SerializeToString()
        if self._s.compression == "gzip":
            body = gzip.compress(body, compresslevel=6)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Verdict(False, "timeout")
        conn = self._connection(remaining)
        # A Collector that trickles its answer resets every per-read timeout; this does not.
        watchdog = threading.Timer(remaining, self._cut, args=(conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            auth = self._token.authorization() if self._token else None
            conn.request("POST", self._path, body=body,
                         headers={**self._headers, "Authorization": auth} if auth else self._headers)
            response = conn.getresponse()
            data = response.read()
            status, content_type = response.status, response.getheader("Content-Type", "")
            retry_after = response.getheader("Retry-After")
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            if time.monotonic() >= deadline:
                return Verdict(False, "timeout", message=str(exc))
            return Verdict(False, "transport", retryable=True, message=f"{type(exc).__name__}: {exc}")
        finally:
            watchdog.cancel()
        if response.will_close:
            self.close()
        return self._judge(status, content_type, data, points, retry_after)

    def interrupt(self) -> None:
        """End the export in flight now (shutdown must not wait for a slow Collector)."""
        if self._conn is not None:
            self._cut(self._conn)

    @staticmethod
    def _cut(conn: http.client.HTTPConnection) -> None:
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    @staticmethod
    def _judge(status: int, content_type: str, data: bytes, points: int, retry_after: str | None) -> Verdict:
        if status in _RETRYABLE_HTTP:
            wait = float(retry_after) if retry_after and retry_after.strip().isdigit() else None
            return Verdict(False, f"http_{status}", retryable=True, retry_after=wait)
        if status != 200:
            # 3xx included: a redirect is a misconfigured endpoint, never success.
            return Verdict(False, f"http_{status // 100}xx", message=f"HTTP {status}")
        if data and not content_type.split(";")[0].strip().lower().startswith("application/x-protobuf"):
            return Verdict(False, "unexpected_body", message=f"200 with Content-Type {content_type or 'none'!r}")
        try:
            response = ExportMetricsServiceResponse.FromString(data)
        except Exception:  # noqa: BLE001 - any decode failure means this is not a Collector's answer
            return Verdict(False, "unexpected_body", message="200 with a body that is not an OTLP response")
        return _accepted(response, points)


class GrpcTransport:
    """OTLP/gRPC through the official stub; the call deadline bounds the whole export."""

    def __init__(self, settings: OtlpSettings) -> None:
        import grpc
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import MetricsServiceStub

        self._grpc = grpc
        url = urllib.parse.urlsplit(settings.endpoint)
        target = f"{url.hostname}:{url.port or 4317}"
        insecure = settings.insecure if settings.insecure is not None else url.scheme == "http"
        if insecure:
            self._channel = grpc.insecure_channel(target)
        else:
            read = lambda path: open(path, "rb").read() if path else None  # noqa: E731
            credentials = grpc.ssl_channel_credentials(read(settings.certificate), read(settings.client_key),
                                                       read(settings.client_certificate))
            self._channel = grpc.secure_channel(target, credentials)
        self._stub = MetricsServiceStub(self._channel)
        self._call = None
        self._metadata = settings.headers
        self._token = TokenFile(settings.token_file) if settings.token_file else None
        self._compression = grpc.Compression.Gzip if settings.compression == "gzip" else grpc.Compression.NoCompression

    def close(self) -> None:
        self._channel.close()

    def interrupt(self) -> None:
        """Cancel the call in flight (shutdown must not wait for a slow Collector)."""
        call = self._call
        if call is not None:
            call.cancel()

    def send(self, request: ExportMetricsServiceRequest, points: int, deadline: float) -> Verdict:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Verdict(False, "timeout")
        grpc = self._grpc
        auth = self._token.authorization() if self._token else None
        metadata = (*self._metadata, ("authorization", auth)) if auth else self._metadata
        call = self._stub.Export.future(request, timeout=remaining, metadata=metadata,
                                        compression=self._compression)
        self._call = call
        try:
            response = call.result()
        except grpc.FutureCancelledError:
            return Verdict(False, "interrupted")
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Verdict(False, "timeout", message=str(exc.details() if hasattr(exc, "details") else exc))
            retryable = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 grpc.StatusCode.ABORTED)
            name = code.name.lower() if code is not None else "rpc_error"
            return Verdict(False, f"grpc_{name}", retryable=retryable,
                           message=str(exc.details() if hasattr(exc, "details") else exc))
        return _accepted(response, points)


class OtlpExporter(MetricExporter):
    """Sends each export's request once (retrying what is retryable) within the export timeout."""

    def __init__(
        self,
        transport: HttpTransport | GrpcTransport,
        builder: RequestBuilder,
        stats: RuntimeStats,
        timeout: float,
        final_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._transport = transport
        self._builder = builder
        self._stats = stats
        self._timeout = timeout
        self._final_timeout = min(timeout, final_timeout)
        self._clock = clock
        self._last_message: str | None = None
        self.muted = False  # a shutdown that must not send a final export
        self.closing = False  # the final export: a shorter deadline, so SIGTERM ends promptly
        self._generation = 0

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        if self.muted:
            return MetricExportResult.SUCCESS
        started = self._clock()
        deadline = started + (self._final_timeout if self.closing else self._timeout)
        try:
            request, points = self._builder.build(metrics_data)
            verdict = self._send(request, points, deadline)
        except Exception as exc:  # noqa: BLE001 - an export failure must never end the export loop
            log.exception("OTLP export failed unexpectedly")
            verdict = Verdict(False, "unexpected", message=type(exc).__name__)
        self._stats.heartbeat(EXPORT_LOOP)
        self._stats.export_finished(verdict.ok, self._clock() - started, verdict.reason, verdict.rejected_points)
        self._log(verdict)
        return MetricExportResult.SUCCESS if verdict.ok else MetricExportResult.FAILURE

    def _send(self, request: ExportMetricsServiceRequest, points: int, deadline: float) -> Verdict:
        delay, generation = 0.5, self._generation
        while True:
            verdict = self._transport.send(request, points, deadline)
            if verdict.ok or not verdict.retryable or generation != self._generation:
                return verdict
            wait = max(delay, verdict.retry_after or 0.0)
            if self._clock() + wait >= deadline:
                return verdict
            time.sleep(wait)
            delay = min(delay * 2, 8.0)

    def _log(self, verdict: Verdict) -> None:
        """One line per change of outcome, not one per export."""
        if verdict.ok and not verdict.rejected_points:
            text = None
        else:
            text = f"{verdict.reason}: {verdict.message}" if verdict.message else verdict.reason
        if text == self._last_message:
            return
        if text is None:
            log.info("OTLP export succeeding again")
        elif verdict.ok:
            log.warning("the Collector rejected %d point(s): %s", verdict.rejected_points, verdict.message)
        else:
            log.warning("OTLP export failed (%s); the next export sends the then-current state", text)
        self._last_message = text

    def begin_close(self, final_export: bool) -> None:
        """Cut the export in flight; the final one (if wanted) gets the short deadline."""
        self.muted = not final_export
        self.closing = True
        self._generation += 1  # the export in flight must not retry after this
        self._transport.interrupt()

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        self._transport.close()


class StateExporter(MetricExporter):
    """The same request, handed to a local sink (the demo's table, the console) instead of the network."""

    def __init__(self, builder: RequestBuilder, sink: Callable[[ExportMetricsServiceRequest], None],
                 stats: RuntimeStats) -> None:
        super().__init__()
        self._builder = builder
        self._sink = sink
        self._stats = stats
        self.muted = False

    def begin_close(self, final_export: bool) -> None:
        self.muted = not final_export

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        if self.muted:
            return MetricExportResult.SUCCESS
        started = time.monotonic()
        try:
            self._sink(self._builder.build(metrics_data)[0])
            ok, reason = True, "success"
        except (OSError, ValueError) as exc:  # a closed stdout: fail this export, never loop on tracebacks
            ok, reason = False, "output_closed"
            log.debug("local export failed: %s", exc)
        self._stats.heartbeat(EXPORT_LOOP)
        self._stats.export_finished(ok, time.monotonic() - started, reason)
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass
