"""In-test OTLP receivers (HTTP and gRPC) that decode with the official protobuf definitions."""

from __future__ import annotations

import gzip
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.fake_apiserver import QuietHTTPServer

__all__ = ["Point", "HttpReceiver", "GrpcReceiver", "points_of"]


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
    def start(self) -> "HttpReceiver":
        store = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding", "")
                if store.fail:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if encoding == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/metrics" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                req = metrics_service_pb2.ExportMetricsServiceRequest()
                req.ParseFromString(body)
                store.add(req, encoding)
                if store.mode is not None:
                    return self._misbehave(store.mode, len(points_of(req)))
                data = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _misbehave(self, mode: str, points: int) -> None:
                if mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", "/elsewhere")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
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
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(0)
