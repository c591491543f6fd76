"""The exporter's retries: a dead kept-alive connection is replaced at once, everything else backs off; one clock,
the injected one, decides when an export is out of time, for the exporter and its transport alike."""

from __future__ import annotations

import datetime as dt
import ssl
import time

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData

from agent.config import OtlpSettings
from agent.export.otlp.encode import RequestBuilder
from agent.export.otlp.exporter import OtlpExporter
from agent.export.otlp.transport import Attempt, HttpTransport
from agent.pipeline.state import NodeState
from agent.telemetry.stats import RuntimeStats
from testkit.otlp_receiver import HttpReceiver
from testkit.plain_http import QuietHandler, serve
from testkit.virtual_time import VirtualClock

DEAD = Attempt(False, "transport", retryable=True, message="ConnectionResetError")
BUSY = Attempt(False, "http_503", retryable=True)
OK = Attempt(True, "success")


class ScriptedTransport:
    """Answers each attempt from a script (the transports themselves are tested against real servers)."""

    def __init__(self, *attempts: Attempt) -> None:
        self.attempts = list(attempts)
        self.sent = 0

    def send(self, request, points, timeout) -> Attempt:
        self.sent += 1
        return self.attempts.pop(0)

    def interrupt(self) -> None:
        pass

    def close(self) -> None:
        pass


def export(*attempts: Attempt) -> tuple[MetricExportResult, list[float], ScriptedTransport]:
    stats, waits = RuntimeStats(), []
    transport = ScriptedTransport(*attempts)
    builder = RequestBuilder(NodeState("node-a"), stats, {"k8s.node.name": "node-a"}, "0")
    exporter = OtlpExporter(transport, builder, stats, timeout=60, wait=lambda event, seconds: waits.append(seconds))
    return exporter.export(MetricsData(resource_metrics=[])), waits, transport


def test_a_dead_connection_is_replaced_at_once_then_backed_off():
    result, waits, transport = export(DEAD, OK)
    assert (result, waits, transport.sent) == (MetricExportResult.SUCCESS, [], 2)
    result, waits, transport = export(DEAD, DEAD, DEAD, OK)
    assert (result, waits, transport.sent) == (MetricExportResult.SUCCESS, [0.5, 1.0], 4)


def test_a_busy_collector_is_backed_off_from_the_first_retry():
    result, waits, transport = export(BUSY, BUSY, OK)
    assert (result, waits, transport.sent) == (MetricExportResult.SUCCESS, [0.5, 1.0], 3)


def _exporter(transport, clock: VirtualClock, timeout: float = 10.0) -> tuple[OtlpExporter, RuntimeStats]:
    stats = RuntimeStats()
    builder = RequestBuilder(NodeState("node-a"), stats, {"k8s.node.name": "node-a"}, "0")
    return OtlpExporter(transport, builder, stats, timeout=timeout, clock=clock, wait=clock.wait), stats


def _http(endpoint: str, **kwargs) -> HttpTransport:
    return HttpTransport(OtlpSettings(protocol="http/protobuf", endpoint=f"{endpoint}/v1/metrics", compression="none"),
                         **kwargs)


def test_an_exporter_on_virtual_time_sends_through_a_real_transport():
    """Virtual time starts at 0, far behind the machine's monotonic clock: an export still has its whole timeout."""
    receiver = HttpReceiver().start()
    transport = _http(receiver.endpoint)
    try:
        exporter, stats = _exporter(transport, VirtualClock())
        assert exporter.export(MetricsData(resource_metrics=[])) == MetricExportResult.SUCCESS
        assert len(receiver.requests) == 1 and stats.snapshot().export_failures == {}
    finally:
        transport.close()
        receiver.stop()


def test_the_deadline_passes_on_the_injected_clock_though_the_machines_clock_has_time_left():
    """The first attempt uses up the whole timeout on the injected clock (in no real time) and its connection dies:
    the reconnection the exporter would make at once must not be sent, for the export is out of time."""
    clock = VirtualClock()
    clock.now = time.monotonic()  # the same origin as the machine's clock: only the injected one moves on
    posts = []

    class Collector(QuietHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            posts.append(self.path)
            if len(posts) == 1:
                clock.advance(11.0)  # the attempt took longer than the 10 s timeout
                self.close_connection = True  # and the connection died without an answer
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = serve(Collector)
    transport = _http(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        exporter, stats = _exporter(transport, clock, timeout=10.0)
        assert exporter.export(MetricsData(resource_metrics=[])) == MetricExportResult.FAILURE
        assert (len(posts), dict(stats.snapshot().export_failures)) == (1, {"timeout": 1})
    finally:
        transport.close()
        server.shutdown()


@pytest.mark.parametrize("header, seconds", [("3", 3.0), ("Wed, 02 Dec 2026 09:38:00 GMT", 120.0), ("soon", None)])
def test_a_busy_collectors_retry_after_in_either_form(header, seconds):
    """503 with delay-seconds or an HTTP-date (measured from the injected wall time): the exporter waits that long."""
    class Busy(QuietHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(503)
            self.send_header("Retry-After", header)
            self.send_header("Content-Length", "0")
            self.end_headers()

    now = dt.datetime(2026, 12, 2, 9, 36, tzinfo=dt.timezone.utc).timestamp()
    server = serve(Busy)
    transport = _http(f"http://127.0.0.1:{server.server_address[1]}", wall=lambda: now)
    try:
        attempt = transport.send(ExportMetricsServiceRequest(), 0, timeout=5.0)
        assert attempt == Attempt(False, "http_503", retryable=True, retry_after=seconds)
    finally:
        transport.close()
        server.shutdown()


def _serving(pki) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.crt("loopback-serving"), pki.key("loopback-serving"))
    return context


def test_a_collector_the_configured_ca_did_not_sign_gets_nothing_and_the_failure_says_tls(tmp_path):
    """Issue 29 item 6: pointed at a Collector whose certificate another CA signed, the agent sends nothing (the
    receiver sees no request, in TLS or in clear), tries once per export (no retry changes a certificate) and
    counts ``reason="tls"``; the same exporter with the right CA succeeds, and an https endpoint never speaks
    plain HTTP to a server that only speaks it. On main the failure was counted as "transport" and retried."""
    from testkit.pki import make_pki

    collectors_ca, other_ca = make_pki(tmp_path / "collector"), make_pki(tmp_path / "other")
    receiver = HttpReceiver().start(_serving(collectors_ca))
    plain = HttpReceiver().start()
    try:
        assert receiver.endpoint.startswith("https://")
        for ca, expected in ((other_ca, "tls"), (collectors_ca, None)):
            settings = OtlpSettings(protocol="http/protobuf", endpoint=f"{receiver.endpoint}/v1/metrics",
                                    compression="none", certificate=str(ca.crt("ca")))
            sent: list[Attempt] = []

            class Counting(HttpTransport):
                def send(self, *args, **kwargs) -> Attempt:
                    sent.append(super().send(*args, **kwargs))
                    return sent[-1]

            transport = Counting(settings)
            try:
                exporter, stats = _exporter(transport, VirtualClock())
                result = exporter.export(MetricsData(resource_metrics=[]))
            finally:
                transport.close()
            failures = stats.snapshot().export_failures
            if expected:
                assert result == MetricExportResult.FAILURE and failures == {"tls": 1}, failures
                assert [a.reason for a in sent] == ["tls"] and "CERTIFICATE_VERIFY_FAILED" in sent[0].message
                assert receiver.requests == []
            else:
                assert result == MetricExportResult.SUCCESS and failures == {} and len(receiver.requests) == 1
        https_to_plain = HttpTransport(OtlpSettings(
            protocol="http/protobuf", endpoint=f"https://127.0.0.1:{plain.port}/v1/metrics", compression="none",
            certificate=str(collectors_ca.crt("ca"))))
        try:
            attempt = https_to_plain.send(ExportMetricsServiceRequest(), 0, 5.0)
        finally:
            https_to_plain.close()
        assert not attempt.ok and plain.requests == [], attempt
    finally:
        receiver.stop()
        plain.stop()
