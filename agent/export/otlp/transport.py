"""The two OTLP transports: one attempt each, bounded by a deadline, judged by what the Collector answered.

Why not the SDK's OTLP exporters' transport: with opentelemetry-exporter-otlp
1.45 a redirect, a 200 with an HTML body and a partial-success answer that
rejects every point all count as success, and an HTTP export has no whole-
request deadline (a Collector that trickles bytes holds it for ever). So:

- HTTP: ``http.client`` on one kept-alive connection, no redirects followed,
  a watchdog that shuts the socket at the deadline;
- gRPC: the official stub with a call deadline (gRPC deadlines are total).
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import msgspec
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from agent.config import ConfigError, OtlpSettings
from agent.export.otlp.bearer_token import TokenFile
from agent.model.retry_after import retry_after_seconds

__all__ = ["Attempt", "Transport", "HttpTransport", "GrpcTransport"]

_RETRYABLE_HTTP = (429, 502, 503, 504)


class Transport(Protocol):
    """What the exporter needs of a transport."""

    def send(self, request: ExportMetricsServiceRequest, points: int, timeout: float) -> Attempt:
        """One attempt, over within ``timeout`` seconds (more than 0): the exporter's deadline on its clock, as
        seconds left, so one clock decides when an export is out of time."""
        ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


class Attempt(msgspec.Struct, frozen=True):
    """How one attempt ended. ``reason`` is a bounded word for the failure counter."""

    ok: bool
    reason: str
    retryable: bool = False
    rejected_points: int = 0
    message: str = ""
    retry_after: float | None = None


def _accepted(response: ExportMetricsServiceResponse, sent_points: int) -> Attempt:
    rejected = response.partial_success.rejected_data_points
    message = response.partial_success.error_message
    if rejected and rejected >= sent_points:
        return Attempt(False, "rejected", rejected_points=rejected, message=message)
    return Attempt(True, "success", rejected_points=rejected, message=message)


def _ssl_context(s: OtlpSettings) -> ssl.SSLContext:
    """The TLS context of ``s``'s files, read once at start: a file missing, empty or holding no certificate (a
    Secret without the key the pod mounts, or an empty one) is a ConfigError naming the file and its variable, one
    line and exit 2 as for any bad setting, never a traceback; the agent never pushes unverified instead."""
    try:
        context = ssl.create_default_context(cafile=s.certificate)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise ConfigError(_unusable(s.certificate, "OTEL_EXPORTER_OTLP_CERTIFICATE", exc)) from None
    if s.client_certificate:
        try:
            context.load_cert_chain(s.client_certificate, s.client_key)
        except (OSError, ValueError) as exc:
            raise ConfigError(_unusable(s.client_certificate, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and _KEY",
                                        exc)) from None
    return context


def _unusable(path: str | None, variable: str, exc: Exception) -> str:
    """One line: the file, its variable, and what is wrong (the errno's words, else OpenSSL's first line)."""
    why = getattr(exc, "strerror", None) or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{path} ({variable}): {why}; the agent sends nothing it cannot verify"


class HttpTransport:
    """OTLP/HTTP protobuf over one kept-alive connection, with a whole-request deadline."""

    def __init__(self, settings: OtlpSettings, wall: Callable[[], float] = time.time) -> None:
        """``wall`` is the time a Retry-After date is measured from."""
        self._s = settings
        self._wall = wall
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

    def send(self, request: ExportMetricsServiceRequest, points: int, timeout: float) -> Attempt:
        body = request.SerializeToString()
        if self._s.compression == "gzip":
            body = gzip.compress(body, compresslevel=6)
        conn = self._connection(timeout)
        # A Collector that trickles its answer resets every per-read timeout; this does not.
        timed_out = threading.Event()
        watchdog = threading.Timer(timeout, self._cut, args=(conn, timed_out))
        watchdog.daemon = True
        watchdog.start()
        try:
            auth = self._token.authorization() if self._token else None
            conn.request("POST", self._path, body=body,
                         headers={**self._headers, "Authorization": auth} if auth else self._headers)
            response = conn.getresponse()
            data = response.read()
            status, content_type = response.status, response.getheader("Content-Type", "")
            retry_after = retry_after_seconds(response.getheader("Retry-After"), self._wall())
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            # Cut by the watchdog, or one socket operation waited out the whole timeout: out of time either way.
            if timed_out.is_set() or isinstance(exc, TimeoutError):
                return Attempt(False, "timeout", message=str(exc))
            # The Collector's certificate is not one the configured CA signed (or expired, or for another
            # name): said as such, and not retried within the export, since no retry changes the certificate.
            if isinstance(exc, ssl.SSLCertVerificationError):
                return Attempt(False, "tls", message=f"{type(exc).__name__}: {exc}")
            return Attempt(False, "transport", retryable=True, message=f"{type(exc).__name__}: {exc}")
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
    def _cut(conn: http.client.HTTPConnection, timed_out: threading.Event | None = None) -> None:
        if timed_out is not None:
            timed_out.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _judge(status: int, content_type: str, data: bytes, points: int, retry_after: float | None) -> Attempt:
        if status in _RETRYABLE_HTTP:
            return Attempt(False, f"http_{status}", retryable=True, retry_after=retry_after)
        if status != 200:
            # 3xx included: a redirect is a misconfigured endpoint, never success.
            return Attempt(False, f"http_{status // 100}xx", message=f"HTTP {status}")
        if data and not content_type.split(";")[0].strip().lower().startswith("application/x-protobuf"):
            return Attempt(False, "unexpected_body", message=f"200 with Content-Type {content_type or 'none'!r}")
        try:
            response = ExportMetricsServiceResponse.FromString(data)
        except Exception:  # noqa: BLE001 - any decode failure means this is not a Collector's answer
            return Attempt(False, "unexpected_body", message="200 with a body that is not an OTLP response")
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
            _ssl_context(settings)  # the files checked as for HTTP: one line for a missing or empty CA, at start

            def read(path: str | None) -> bytes | None:
                return Path(path).read_bytes() if path else None

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

    def send(self, request: ExportMetricsServiceRequest, points: int, timeout: float) -> Attempt:
        grpc = self._grpc
        auth = self._token.authorization() if self._token else None
        metadata = (*self._metadata, ("authorization", auth)) if auth else self._metadata
        call = self._stub.Export.future(request, timeout=timeout, metadata=metadata,
                                        compression=self._compression)
        self._call = call
        try:
            response = call.result()
        except grpc.FutureCancelledError:
            return Attempt(False, "interrupted")
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Attempt(False, "timeout", message=str(exc.details() if hasattr(exc, "details") else exc))
            retryable = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 grpc.StatusCode.ABORTED)
            name = code.name.lower() if code is not None else "rpc_error"
            return Attempt(False, f"grpc_{name}", retryable=retryable,
                           message=str(exc.details() if hasattr(exc, "details") else exc))
        return _accepted(response, points)
