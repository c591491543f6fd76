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

from tests.fake_apiserver import QuietHTTPServer

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

    def exports_since(self, t: float) -> list[list[Point]]:
        with self.cond:
            return [points_of(r) for ts, r in self.requests if ts >= t]


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
                data = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
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
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Service(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(0)
