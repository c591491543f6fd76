"""In-test OTLP receivers (HTTP and gRPC) that decode with the official protobuf definitions.

A pytest plugin too (tests/conftest.py registers it): ``http_receiver`` and ``grpc_receiver`` run one for a
test; ``module_http_receiver`` one for a module whose agents outlive a test (the cluster tests' DaemonSet pods).
Elsewhere ``with HttpReceiver() as receiver:`` starts one and stops it.
"""

from __future__ import annotations

import gzip
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from testkit.plain_http import QuietHandler, answer, serve

__all__ = ["Point", "HttpReceiver", "GrpcReceiver", "points_of", "http_receiver", "module_http_receiver",
           "grpc_receiver"]


def _any(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass(frozen=True)
class Point:
    metric: str
    unit: str
    kind: str  # "gauge", "sum", "histogram"
    attributes: dict[str, Any]
    value: float
    resource: dict[str, Any]


def points_of(request: metrics_service_pb2.ExportMetricsServiceRequest) -> list[Point]:
    out = []
    for rm in request.resource_metrics:
        resource = {a.key: _any(a.value) for a in rm.resource.attributes}
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                data = getattr(m, kind)
                for dp in data.data_points:
                    attrs = {a.key: _any(a.value) for a in dp.attributes}
                    if kind == "histogram":
                        val = float(dp.count)
                    else:
                        val = dp.as_double if dp.WhichOneof("value") == "as_double" else float(dp.as_int)
                    out.append(Point(m.name, m.unit, kind, attrs, val, resource))
    return out


class _Store:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.requests: list[tuple[float, metrics_service_pb2.ExportMetricsServiceRequest]] = []
        self.fail = False
        self.encodings: list[str] = []
        # A broken or hostile Collector: None (well-behaved), "redirect", "html", "reject_all",
        # "reject_some", "trickle" (answers one byte every `trickle_seconds`), "hang" (gRPC: never answers).
        self.mode: str | None = None
        self.trickle_seconds = 0.5
        self.port = 0  # the loopback port start() listens on
        self.scheme = "http"  # https when started with a TLS context

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def __enter__(self):
        """The receiver started (each kind's ``start``); leaving the block stops it."""
        return self.start()  # type: ignore[attr-defined]

    def __exit__(self, *exc_info) -> None:
        self.stop()  # type: ignore[attr-defined]

    def add(self, req, encoding: str = "") -> None:
        with self.cond:
            self.requests.append((time.monotonic(), req))
            self.encodings.append(encoding)
            self.cond.notify_all()

    def wait_for(self, predicate, timeout: float = 10.0) -> list[Point]:
        """The points of the first export after now whose points satisfy ``predicate``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            seen = len(self.requests)
            while True:
                for _, req in self.requests[seen:]:
                    pts = points_of(req)
                    if predicate(pts):
                        return pts
                seen = len(self.requests)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError("no export matched within the timeout")
                self.cond.wait(remaining)


class HttpReceiver(_Store):
    def start(self, tls: ssl.SSLContext | None = None) -> "HttpReceiver":
        """Listening on loopback; over TLS with ``tls`` (a server context holding its certificate)."""
        store = self

        class Handler(QuietHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding", "")
                if store.fail:
                    return answer(self, 503, None, b"")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/metrics" or self.headers.get("Content-Type") != "application/x-protobuf":
                    return answer(self, 404, None, b"")
                req = metrics_service_pb2.ExportMetricsServiceRequest()
                req.ParseFromString(body)
                store.add(req, encoding)
                if store.mode is not None:
                    return self._misbehave(store.mode, len(points_of(req)))
                answer(self, 200, "application/x-protobuf",
                       metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString())

            def _misbehave(self, mode: str, points: int) -> None:
                if mode == "redirect":
                    return answer(self, 302, None, b"", {"Location": "/elsewhere"})
                if mode == "html":
                    data = b"<html><body>Log in to the proxy</body></html>"
                    content_type = "text/html"
                elif mode in ("reject_all", "reject_some"):
                    response = metrics_service_pb2.ExportMetricsServiceResponse()
                    response.partial_success.rejected_data_points = points if mode == "reject_all" else 1
                    response.partial_success.error_message = "out of order sample"
                    data, content_type = response.SerializeToString(), "application/x-protobuf"
                else:  # trickle: a valid answer, one byte at a time
                    data = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
                    for i in range(len(data)):
                        try:
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                        except OSError:
                            return
                        time.sleep(store.trickle_seconds)
                    return
                answer(self, 200, content_type, data)

        self.server = serve(Handler, tls)
        self.port = self.server.server_address[1]
        self.scheme = "https" if tls is not None else "http"
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class GrpcReceiver(_Store):
    def start(self) -> "GrpcReceiver":
        store = self

        class Service(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):  # noqa: N802
                if store.fail:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "down")
                store.add(request)
                if store.mode == "hang":
                    time.sleep(30)
                response = metrics_service_pb2.ExportMetricsServiceResponse()
                if store.mode == "reject_all":
                    response.partial_success.rejected_data_points = len(points_of(request))
                return response

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Service(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(0)


@pytest.fixture
def http_receiver() -> Iterator[HttpReceiver]:
    with HttpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def module_http_receiver() -> Iterator[HttpReceiver]:
    with HttpReceiver() as receiver:
        yield receiver


@pytest.fixture
def grpc_receiver() -> Iterator[GrpcReceiver]:
    with GrpcReceiver() as receiver:
        yield receiver
